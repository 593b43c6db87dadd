/*
 * sendrecv_perf: a ring shift with rr_sendrecv, every rank sends to rank + 1 and receives
 * from rank - 1 at once. busbw = algbw, as nccl-tests: each link carries the buffer once.
 *
 * In place: NCCL lets the send and receive buffers be one; ringreduce refuses it (data
 * would land over bytes not yet sent), so the in-place columns time what a user must do
 * instead: copy the buffer aside, then exchange. The trailing note says so.
 */
#include <string.h>

#include "perf.h"

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  (void)c;
  *k = (perf_counts){.send = count, .recv = count, .param = count};
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  const int n = c->nranks, dst = (c->rank + 1) % n, src = (c->rank + n - 1) % n;
  if (sendbuf == recvbuf) {
    if (perf_mem_copy(c->mem_cuda, c->scratch, sendbuf, count * c->esize) != 0) return RR_ECUDA;
    sendbuf = c->scratch;
  }
  return rr_sendrecv(c->pg, sendbuf, count, dst, recvbuf, count, src, c->dtype);
}

static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  (void)in_place;
  return perf_wrong_input(c, recvbuf, 0, count, (c->rank + c->nranks - 1) % c->nranks);
}

static const perf_coll sendrecv = {
    .name = "sendrecv",
    .min_ranks = 2, /* rr_sendrecv does not send to the calling rank itself */
    .needs_scratch = 1,
    .bus_factor = perf_factor_one,
    .counts = counts,
    .run = run,
    .check = check,
    .note =
        "sendrecv in place: ringreduce cannot receive into the buffer being sent, so the "
        "in-place columns time a copy to a scratch buffer plus rr_sendrecv.",
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &sendrecv);
}
