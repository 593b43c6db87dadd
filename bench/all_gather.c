/*
 * all_gather_perf: rr_all_gather, every rank gets every rank's block. As in nccl-tests, the
 * size column is the gathered total (n blocks), the count column one rank's block, and the
 * count is rounded down to a multiple of n. busbw = algbw * (n-1)/n: each rank receives the
 * n-1 blocks it lacks.
 */
#include "perf.h"

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  const size_t n = (size_t)c->nranks, block = count / n;
  /* In place, this rank's block is already in its slot of recvbuf (NCCL's aliasing). */
  *k = (perf_counts){.send = block, .recv = block * n, .param = block, .send_inplace = block};
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  return rr_all_gather(c->pg, sendbuf, recvbuf, count, c->dtype);
}

static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  (void)in_place;
  int64_t wrong = 0;
  for (int b = 0; b < c->nranks; b++)
    wrong += perf_wrong_input(c, (const char *)recvbuf + (size_t)b * count * c->esize, 0, count, b);
  return wrong;
}

static const perf_coll all_gather = {
    .name = "all_gather",
    .min_ranks = 1,
    .bus_factor = perf_factor_ring,
    .counts = counts,
    .run = run,
    .check = check,
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &all_gather);
}
