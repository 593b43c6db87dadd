/*
 * scatter_perf: rr_scatter from -r's rank, rank r gets block r of the root's buffer. As in
 * nccl-tests, the size column is the root's whole buffer (n blocks), the count column one
 * block, rounded down to whole 16-byte chunks; in place, each rank receives into its slot of
 * the send buffer (recvbuf = sendbuf + rank * count). busbw = algbw * (n-1)/n: the root
 * sends n-1 blocks.
 */
#include "perf.h"

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  const size_t n = (size_t)c->nranks, block = (count / n) & ~(16 / c->esize - 1);
  *k = (perf_counts){.send = block * n, .recv = block, .param = block, .recv_inplace = block};
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  return rr_scatter(c->pg, sendbuf, recvbuf, count, c->dtype, c->root);
}

/* Every rank holds elements rank * count... of the root's data. */
static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  (void)in_place;
  return perf_wrong_input(c, recvbuf, (size_t)c->rank * count, count, c->root);
}

static const perf_coll scatter = {
    .name = "scatter",
    .rooted = 1,
    .min_ranks = 1,
    .bus_factor = perf_factor_ring,
    .counts = counts,
    .run = run,
    .check = check,
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &scatter);
}
