/* Rank arithmetic shared by every ring algorithm (UCC keeps the same in
 * src/coll_patterns/ring.h), and the pipelined step the algorithms are built from. */
#ifndef RR__RING_RING_H_
#define RR__RING_RING_H_

#include <stddef.h>

#include "common/util.h"
#include "group/pg.h"

static inline int rr__left(int r, int n) { return rr__mod(r - 1, n); }
static inline int rr__right(int r, int n) { return rr__mod(r + 1, n); }

/* Chunk i of `count` elements split over n ranks as evenly as possible: the first
 * count % n chunks get one extra element. */
static inline size_t rr__chunk_off(size_t count, int n, int i) {
  size_t base = count / (size_t)n, extra = count % (size_t)n;
  return (size_t)i * base + ((size_t)i < extra ? (size_t)i : extra);
}
static inline size_t rr__chunk_len(size_t count, int n, int i) {
  return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

/* One step of a ring or chain: send `scount` elements to `to` while receiving `rcount`
 * from `from`, cut into segments so that each received segment is reduced (or lands) while
 * the next ones are on the wire. */
typedef struct rr__step {
  int to;             /* group rank, -1: nothing to send */
  const void *sbuf;
  size_t scount;
  int from;           /* group rank, -1: nothing to receive */
  void *rbuf;         /* where received data lands (NULL with forward: a staging slot) */
  size_t rcount;
  int reduce;         /* 0: received data is stored; 1: rbuf = own (op) received */
  const void *own;    /* the local operand of a reduction (may equal rbuf) */
  int avg_div;        /* >0: the last reduction of an AVG: divide by this */
  int forward;        /* chain: send segment k (of rbuf, or of its slot) once it arrived */
  int schunk, rchunk; /* chunk numbers, for RR_TRACE and messages (-1: n/a) */
} rr__step;

/* RR_TRACE: format up to n values ("{1 2 3}"), and write one trace line for this call. */
int rr__trace_values(char *out, size_t cap, const void *buf, size_t n, rr_dtype d);
/* Record where the call is: a format with up to three int arguments. Formatting it on every
 * step would cost more than a small call's whole bookkeeping, so only the format and the
 * numbers are kept; rr__coll_where turns them into text for an error or a trace. The
 * dead snprintf lets the compiler check the format against its arguments. */
#define RR__WHERE(c, ...)                                      \
  do {                                                         \
    if (0) snprintf(NULL, 0, __VA_ARGS__);                     \
    rr__where_set((c), RR__WHERE_ARGS(__VA_ARGS__, 0, 0, 0)); \
  } while (0)
#define RR__WHERE_ARGS(fmt, a, b, d, ...) (fmt), (a), (b), (d)
static inline void rr__where_set(rr__coll *c, const char *fmt, int a, int b, int d) {
  c->where_fmt = fmt;
  c->where_arg[0] = a;
  c->where_arg[1] = b;
  c->where_arg[2] = d;
}
/* The text of the latest RR__WHERE ("" if none). */
const char *rr__coll_where(rr__coll *c);
void rr__trace_emit(const rr__coll *c, const char *what);

/* Execute a step; returns when all its sends and receives completed. */
int rr__pipe_step(rr__coll *c, const rr__step *st);

/* Send this rank's header to `to` (before any data for it in this call). */
int rr__coll_send_hdr(rr__coll *c, int to);
/* Receive `from`'s header and compare it with ours; a difference fails every rank with
 * RR_EMISMATCH and both calls in the message. */
int rr__coll_recv_hdr(rr__coll *c, int from);
/* The same in two halves, so a header can share a system call with the data behind it:
 * post the receive into wire[RR__HDR_BYTES], then check it once it completed. */
int rr__coll_post_hdr(rr__coll *c, int from, rr__req *r, uint8_t *wire);
int rr__coll_check_hdr(rr__coll *c, int from, const uint8_t *wire);
/* Rooted collectives end with a completion notice from the rank that saw the whole chain
 * valid (`from`), so no rank returns success from a call another rank rejected. */
int rr__coll_send_ack(rr__coll *c, int to);
int rr__coll_recv_ack(rr__coll *c, int from);
/* Block (progressing every lane) until r completes; `peer` is who we wait for. */
int rr__coll_wait(rr__coll *c, rr__req *r, int peer);
/* Sleep once in the comm's wait; a timeout becomes a message naming `peer`. */
int rr__coll_block(rr__coll *c, int peer);

/* The algorithms. */
int rr__all_reduce_ring(rr__coll *c);
int rr__all_reduce_rd(rr__coll *c);
int rr__all_reduce_star(rr__coll *c);
int rr__reduce_scatter_ring(rr__coll *c);
int rr__all_gather_ring(rr__coll *c);
int rr__broadcast_chain(rr__coll *c);
int rr__reduce_chain(rr__coll *c);
int rr__barrier_dissem(rr__coll *c);
int rr__send_p2p(rr__coll *c);
int rr__recv_p2p(rr__coll *c);
int rr__sendrecv_p2p(rr__coll *c);

#endif /* RR__RING_RING_H_ */
