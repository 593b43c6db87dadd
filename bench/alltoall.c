/*
 * alltoall_perf: rr_all_to_all, block j of every rank's buffer goes to rank j. As in
 * nccl-tests, the size column is one rank's whole buffer (n blocks), the count column one
 * block, rounded down to whole 16-byte chunks. busbw = algbw * (n-1)/n: each rank sends the
 * n-1 blocks that are not its own.
 *
 * In place: ringreduce's all_to_all cannot receive into the buffer it sends from
 * (nccl-tests times an in-place call it cannot check, #wrong N/A), so the in-place columns
 * time a copy aside plus the exchange, checked like the others; the trailing note says so.
 */
#include "perf.h"

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  const size_t n = (size_t)c->nranks, block = (count / n) & ~(16 / c->esize - 1);
  *k = (perf_counts){.send = block * n, .recv = block * n, .param = block};
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  if (sendbuf == recvbuf) {
    const size_t bytes = count * (size_t)c->nranks * c->esize;
    if (perf_mem_copy(c->mem_cuda, c->scratch, sendbuf, bytes) != 0) return RR_ECUDA;
    sendbuf = c->scratch;
  }
  return rr_all_to_all(c->pg, sendbuf, recvbuf, count, c->dtype);
}

/* Block b came from rank b: its elements rank * count... of rank b's data. */
static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  (void)in_place;
  int64_t wrong = 0;
  for (int b = 0; b < c->nranks; b++)
    wrong += perf_wrong_input(c, (const char *)recvbuf + (size_t)b * count * c->esize,
                              (size_t)c->rank * count, count, b);
  return wrong;
}

static const perf_coll alltoall = {
    .name = "all_to_all",
    .tool = "alltoall_perf",
    .min_ranks = 1,
    .needs_scratch = 1,
    .bus_factor = perf_factor_ring,
    .counts = counts,
    .run = run,
    .check = check,
    .note =
        "alltoall in place: ringreduce cannot receive into the buffer being sent, so the "
        "in-place columns time a copy to a scratch buffer plus rr_all_to_all.",
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &alltoall);
}
