/*
 * reduce_scatter_perf: rr_reduce_scatter, rank r gets block r of the reduction. As in
 * nccl-tests, the size column is the whole input (n blocks), the count column one block, and
 * the count is rounded down to a multiple of n. busbw = algbw * (n-1)/n: each rank sends
 * n-1 partial blocks.
 */
#include "perf.h"

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  const size_t n = (size_t)c->nranks, block = count / n;
  /* In place, the result lands in this rank's block of the input (NCCL's aliasing). */
  *k = (perf_counts){.send = block * n, .recv = block, .param = block, .recv_inplace = block};
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  return rr_reduce_scatter(c->pg, sendbuf, recvbuf, count, c->dtype, c->op);
}

static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  (void)in_place;
  return perf_wrong_reduced(c, recvbuf, (size_t)c->rank * count, count);
}

static const perf_coll reduce_scatter = {
    .name = "reduce_scatter",
    .reduces = 1,
    .min_ranks = 1,
    .bus_factor = perf_factor_ring,
    .counts = counts,
    .run = run,
    .check = check,
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &reduce_scatter);
}
