/* What crosses the wire besides payload, and how it is checked.
 *
 * - rr__hdr: sent by every call to each peer it receives from, before the data, on the same
 *   stream. The receiver compares it with its own call; a difference is a mismatch reported
 *   with both calls (TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint, for free).
 * - rr__ctl: control messages on the per-peer control socket: ABORT (with the reason) and
 *   BYE (orderly leave).
 * - rr__hello: the first bytes on every socket the bootstrap opens, saying who is calling.
 *
 * All integers are little-endian; decoders check every field before anything uses it. */
#ifndef RR__RING_WIRE_H_
#define RR__RING_WIRE_H_

#include <stddef.h>
#include <stdint.h>

#include "ringreduce/ringreduce.h"

/* ---- per-call header ---- */
enum rr__kind {
  RR__K_NONE = 0,
  RR__K_ALL_REDUCE,
  RR__K_REDUCE_SCATTER,
  RR__K_ALL_GATHER,
  RR__K_BROADCAST,
  RR__K_REDUCE,
  RR__K_BARRIER,
  RR__K_SEND, /* a send, as seen by the matching recv */
  RR__K_ACK,  /* completion notice of a rooted collective */
  RR__K_COUNT
};

enum rr__algo { RR__ALGO_NONE = 0, RR__ALGO_RING, RR__ALGO_RD, RR__ALGO_CHAIN, RR__ALGO_DISSEM,
                RR__ALGO_STAR };

#define RR__HDR_BYTES 48
typedef struct rr__hdr {
  uint8_t kind, dtype, op, algo;
  int32_t root;  /* group rank, -1 if none */
  int32_t from;  /* sender's group rank */
  uint32_t seg_bytes;
  uint32_t aux;  /* round / step the message belongs to, where it matters */
  uint64_t seq;  /* collective sequence number, or per-pair p2p sequence */
  uint64_t count;
} rr__hdr;

void rr__hdr_encode(const rr__hdr *h, uint8_t out[RR__HDR_BYTES]);
/* RR_OK, or RR_EPROTO (bad magic/version/field) with the last error describing it. */
int rr__hdr_decode(const uint8_t in[RR__HDR_BYTES], rr__hdr *h);
/* "all_reduce #5 (1000 x float, sum, ring)" */
const char *rr__hdr_describe(const rr__hdr *h, char *buf, size_t n);
const char *rr__kind_name(int kind);

/* ---- control messages ---- */
enum rr__ctl_type { RR__CTL_ABORT = 1, RR__CTL_BYE = 2 };
#define RR__CTL_FIXED 20
#define RR__CTL_TEXT_MAX 1024
typedef struct rr__ctl {
  uint32_t type;
  int32_t origin; /* global rank that sent it */
  int32_t status; /* rr_status of an ABORT */
  uint32_t len;   /* bytes of text that follow */
} rr__ctl;
void rr__ctl_encode(const rr__ctl *c, uint8_t out[RR__CTL_FIXED]);
int rr__ctl_decode(const uint8_t in[RR__CTL_FIXED], rr__ctl *c);

/* ---- setup handshake ---- */
#define RR__HELLO_BYTES 128
#define RR__GROUP_ID_MAX 48
typedef struct rr__hello {
  char group[RR__GROUP_ID_MAX]; /* group id, NUL-terminated */
  int32_t from, to;             /* group ranks */
  int32_t index;                /* 0: control socket, 1..: data sockets */
  int32_t nsockets;             /* sockets the caller opens to this peer in total */
  char transport[16];           /* the transport the caller chose for this pair */
  uint64_t token_hash;          /* job token check (0 when none) */
} rr__hello;
void rr__hello_encode(const rr__hello *h, uint8_t out[RR__HELLO_BYTES]);
int rr__hello_decode(const uint8_t in[RR__HELLO_BYTES], rr__hello *h);
#define RR__HELLO_OK 0x4f4b /* reply: 4 bytes magic + 4 bytes status */
#define RR__REPLY_BYTES 8

#endif /* RR__RING_WIRE_H_ */
