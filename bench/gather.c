/*
 * gather_perf: rr_gather to -r's rank, which gets every rank's block. As in nccl-tests, the
 * size column is the gathered total (n blocks), the count column one block, rounded down to
 * whole 16-byte chunks; in place, each rank's block sits at its slot of the receive buffer
 * (sendbuf = recvbuf + rank * count). busbw = algbw * (n-1)/n: the root receives n-1 blocks.
 */
#include "perf.h"

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  const size_t n = (size_t)c->nranks, block = (count / n) & ~(16 / c->esize - 1);
  *k = (perf_counts){.send = block, .recv = block * n, .param = block, .send_inplace = block};
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  return rr_gather(c->pg, sendbuf, recvbuf, count, c->dtype, c->root);
}

/* The root holds block b from rank b. Elsewhere the receive buffer is not touched (the
 * library promises it): still the poison, and in place this rank's block in its slot. */
static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  const char *p = recvbuf;
  int64_t wrong = 0;
  for (int b = 0; b < c->nranks; b++) {
    const char *blk = p + (size_t)b * count * c->esize;
    if (c->rank == c->root)
      wrong += perf_wrong_input(c, blk, 0, count, b);
    else if (in_place && b == c->rank)
      wrong += perf_wrong_input(c, blk, 0, count, b);
    else
      wrong += perf_wrong_poison(c, blk, count);
  }
  return wrong;
}

static const perf_coll gather = {
    .name = "gather",
    .rooted = 1,
    .min_ranks = 1,
    .bus_factor = perf_factor_ring,
    .counts = counts,
    .run = run,
    .check = check,
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &gather);
}
