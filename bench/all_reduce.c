/*
 * all_reduce_perf: rr_all_reduce, every rank gets the reduction of every rank's buffer.
 * busbw = algbw * 2(n-1)/n: a ring all-reduce moves 2(n-1)/n of the buffer over each rank's
 * link (a reduce-scatter then an all-gather), so busbw is comparable with the link speed
 * whatever n is (nccl-tests' PERFORMANCE.md).
 */
#include "perf.h"

static double bus_factor(int nranks) {
  return 2.0 * (nranks - 1) / nranks;
}

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  (void)c;
  *k = (perf_counts){.send = count, .recv = count, .param = count};
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  return rr_all_reduce(c->pg, sendbuf, recvbuf, count, c->dtype, c->op);
}

static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  (void)in_place;
  return perf_wrong_reduced(c, recvbuf, 0, count);
}

/* --split: the all-reduce of nranks * count elements as its two halves. The reduce-scatter
 * lands in this rank's block of recvbuf and the all-gather runs in place from there, as a
 * ring all-reduce does internally. */
static int split(perf_ctx *c, int phase, const void *sendbuf, void *recvbuf, size_t count) {
  char *mine = (char *)recvbuf + (size_t)c->rank * count * c->esize;
  if (phase == 0) return rr_reduce_scatter(c->pg, sendbuf, mine, count, c->dtype, c->op);
  return rr_all_gather(c->pg, mine, recvbuf, count, c->dtype);
}

static const perf_coll all_reduce = {
    .name = "all_reduce",
    .reduces = 1,
    .min_ranks = 1,
    .bus_factor = bus_factor,
    .counts = counts,
    .run = run,
    .check = check,
    .split = split,
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &all_reduce);
}
