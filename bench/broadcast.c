/*
 * broadcast_perf: rr_broadcast from -r's rank to every rank. busbw = algbw: a pipelined
 * chain moves the whole buffer over each link once, whatever n is.
 */
#include "perf.h"

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  (void)c;
  *k = (perf_counts){.send = count, .recv = count, .param = count};
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  return rr_broadcast(c->pg, sendbuf, recvbuf, count, c->dtype, c->root);
}

/* Every rank holds the root's data; in place, other ranks started from their own data,
 * which differs from the root's, so a rank the data never reached shows. */
static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  (void)in_place;
  return perf_wrong_input(c, recvbuf, 0, count, c->root);
}

static const perf_coll broadcast = {
    .name = "broadcast",
    .rooted = 1,
    .min_ranks = 1,
    .bus_factor = perf_factor_one,
    .counts = counts,
    .run = run,
    .check = check,
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &broadcast);
}
