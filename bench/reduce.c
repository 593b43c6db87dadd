/*
 * reduce_perf: rr_reduce to -r's rank. busbw = algbw: a pipelined chain moves the whole
 * buffer over each link once, whatever n is.
 */
#include "perf.h"

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  (void)c;
  *k = (perf_counts){.send = count, .recv = count, .param = count};
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  return rr_reduce(c->pg, sendbuf, recvbuf, count, c->dtype, c->op, c->root);
}

/* The root holds the reduction. Other ranks' recvbuf must be untouched (the library
 * promises it): still the poison out of place, still this rank's input in place. */
static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  if (c->rank == c->root) return perf_wrong_reduced(c, recvbuf, 0, count);
  if (in_place) return perf_wrong_input(c, recvbuf, 0, count, c->rank);
  return perf_wrong_poison(c, recvbuf, count);
}

static const perf_coll reduce = {
    .name = "reduce",
    .reduces = 1,
    .rooted = 1,
    .min_ranks = 1,
    .bus_factor = perf_factor_one,
    .counts = counts,
    .run = run,
    .check = check,
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &reduce);
}
