/* The call header: sent by every call to each peer it receives from, before the data and on
 * the same stream. The receiver compares it with its own call; a difference is a mismatch
 * reported with both calls (TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint, for free). A
 * waiting call also peeks at headers from peers it does not read from (transport/comm.c),
 * so calls that never meet still find out that they differ.
 *
 * Little-endian, 48 bytes; the decoder checks every field before anything uses it. */
#ifndef RR__RING_HDR_H_
#define RR__RING_HDR_H_

#include <stddef.h>
#include <stdint.h>

#include "ring/kind.h" /* the kinds and algorithms a header names */
#include "ringreduce/ringreduce.h"

#define RR__HDR_BYTES 48
#define RR__HDR_HOST 0
#define RR__HDR_MEMOPS 1
#define RR__HDR_AUX_PULL 1
typedef struct rr__hdr {
  uint8_t kind, dtype, op, algo;
  /* How device segments are handed over (ranks must agree: a segment queued on the GPU's
   * stream is never seen by a peer whose host waits for it): RR__HDR_HOST, or RR__HDR_MEMOPS
   * (stream memory operations, transport/cuda_ipc.h). */
  uint8_t handoff;
  int32_t root; /* group rank, -1 if none */
  int32_t from; /* sender's group rank */
  uint32_t seg_bytes;
  /* Round / step the message belongs to, where it matters; all_gather and all_reduce on the
   * stream hand-off: RR__HDR_AUX_PULL when the all-gather steps pull (a description of the
   * sender's output follows the header: transport/cuda_ipc.h, "pull"), else 0. */
  uint32_t aux;
  uint64_t seq; /* collective sequence number, or per-pair p2p sequence */
  uint64_t count;
} rr__hdr;

void rr__hdr_encode(const rr__hdr *h, uint8_t out[RR__HDR_BYTES]);
/* RR_OK, or RR_EPROTO (bad magic/version/field) with the last error describing it. */
int rr__hdr_decode(const uint8_t in[RR__HDR_BYTES], rr__hdr *h);
/* "all_reduce #5 (1000 x float, sum, ring)" */
const char *rr__hdr_describe(const rr__hdr *h, char *buf, size_t n);

#endif /* RR__RING_HDR_H_ */
