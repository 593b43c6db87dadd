/* The pipelined step every ring and chain algorithm is made of.
 *
 * A step sends one buffer to one neighbour and receives one from the other. Both are cut
 * into segments of RR_SEG_BYTES; segment k of a step travels as message k on lane
 * k mod lanes, so both sides agree without talking. While segment k is being reduced, the
 * segments after it are already on the wire (the sender keeps up to SEND_WIN segments
 * queued, the receiver has up to `slots` receive buffers posted), which is the overlap of
 * reduction and transfer the ring relies on.
 *
 * Received segments are processed in order. They land either straight in the destination
 * (a copy costs nothing: the socket writes there), or in a staging slot from which they are
 * reduced into the destination, or, in a chain, reduced in the slot and forwarded from it.
 * A step returns when all its sends and receives are complete, so the next step may
 * overwrite anything this one was sending. */
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "cuda/cuda.h"
#include "ring/coll.h"
#include "ring/op.h"

#define RR__SEND_WIN 32
#define RR__RECV_WIN 64 /* >= the largest RR_SLOTS */

/* A segment to reduce straight out of the transport's memory (shared memory). */
typedef struct rr__consume_ctx {
  const rr__coll *c;
  char *dst;
  const char *own;
  int avg_div;
  int status; /* device: the kernel launch's */
} rr__consume_ctx;

static void rr__reduce_in_place(rr__req *r, const void *data, size_t len) {
  const rr__consume_ctx *x = r->ctx;
  rr__reduce(x->dst, x->own, data, len / x->c->esize, x->c->a->dtype, x->c->a->op, x->avg_div);
}

/* Device buffers (CUDA IPC): the segment sits in this rank's device slot; the kernel reads it
 * there, on the call's stream, after the sender's copy (the transport made the stream wait). */
static void rr__reduce_on_device(rr__req *r, const void *data, size_t len) {
  rr__consume_ctx *x = r->ctx;
  const rr__coll *c = x->c;
  x->status = rr__cuda_reduce(x->dst, NULL, x->own, data, len / c->esize, c->a->dtype, c->a->op,
                              x->avg_div, c->dev->stream);
}

static size_t rr__nseg(size_t count, size_t seg) { return (count + seg - 1) / seg; }

int rr__pipe_step(rr__coll *c, const rr__step *st) {
  const size_t es = c->esize, seg = c->seg;
  const size_t nsend = st->to >= 0 ? rr__nseg(st->scount, seg) : 0;
  const size_t nrecv = st->from >= 0 ? rr__nseg(st->rcount, seg) : 0;
  /* Reductions go through staging slots; plain receives land in place. A chain forwards
   * each segment once it arrived: from its destination, or from the slot it was reduced in. */
  const int slotted = st->kind == RR__STEP_REDUCE || st->kind == RR__STEP_FWD_REDUCE;
  const int forward = st->kind == RR__STEP_FWD_COPY || st->kind == RR__STEP_FWD_REDUCE;
  const int fwd_from_slot = st->kind == RR__STEP_FWD_REDUCE;
  const size_t nslots = (size_t)c->cs->nslots, slot_bytes = c->cs->seg_bytes;
  char *const staging = c->cs->staging;
  const size_t rwin = slotted ? nslots : RR__RECV_WIN;
  rr__req sreq[RR__SEND_WIN], rreq[RR__RECV_WIN];
  rr__consume_ctx cctx[RR__RECV_WIN];
  size_t sp = 0, sd = 0; /* sends posted, sends done */
  size_t rp = 0, rd = 0; /* receives posted, receives processed */

  if (forward && (st->scount != st->rcount || st->to < 0 || st->from < 0))
    return rr__set_error(RR_EINVAL, "internal: a forwarding step needs equal sizes");
  const rr__req_dev *dev = c->dev;
  if (dev && (forward || (slotted && !st->rbuf)))
    return rr__set_error(RR_EINVAL, "internal: the device path runs no chain steps");
  /* The trace shows a small reduction's operands and what a small send carried: keep them
   * before they are overwritten. */
  const int trace = rr__trace_on();
  const int trace_values = trace && !dev && slotted && st->rcount <= RR__TRACE_CAPTURE && st->own;
  unsigned char own_copy[RR__TRACE_CAPTURE * 8], got_copy[RR__TRACE_CAPTURE * 8];
  unsigned char res_copy[RR__TRACE_CAPTURE * 8], sent_copy[RR__TRACE_CAPTURE * 8];
  rr__trace_cap cap = {0};
  if (trace) {
    cap.t0_ns = rr__trace_clock();
    if (trace_values) memcpy(own_copy, st->own, st->rcount * es);
    if (!dev && st->to >= 0 && st->sbuf && st->scount <= RR__TRACE_CAPTURE) {
      memcpy(sent_copy, st->sbuf, st->scount * es);
      cap.sent = sent_copy;
    }
  }

  for (;;) {
    int busy = 0;
    /* Queue sends: all of them may go at once, except that a chain forwards segment k only
     * after it arrived. */
    while (sp < nsend && sp - sd < RR__SEND_WIN && (!forward || sp < rd)) {
      size_t off = sp * seg, n = RR__MIN(seg, st->scount - off);
      rr__req *r = &sreq[sp % RR__SEND_WIN];
      memset(r, 0, sizeof *r);
      if (fwd_from_slot)
        r->buf = staging + (sp % nslots) * slot_bytes;
      else if (forward)
        r->buf = (char *)st->rbuf + off * es;
      else
        r->buf = (char *)st->sbuf + off * es;
      r->len = n * es;
      r->dev = dev;
      RR__CHECK(rr__comm_isend(c->cm, st->to, (int)sp, r));
      sp++;
    }
    /* Post receives while slots are free: a slot is free once the segment that used it
     * was reduced (or, when forwarding from the slot, sent on). */
    while (rp < nrecv && rp - rd < rwin &&
           (!fwd_from_slot || rp < nslots || sd > rp - nslots)) {
      size_t off = rp * seg, n = RR__MIN(seg, st->rcount - off);
      rr__req *r = &rreq[rp % RR__RECV_WIN];
      memset(r, 0, sizeof *r);
      r->buf = slotted && !dev ? staging + (rp % nslots) * slot_bytes : (char *)st->rbuf + off * es;
      r->len = n * es;
      r->dev = dev;
      if (slotted && st->rbuf && !trace_values) { /* the transport may reduce in place */
        rr__consume_ctx *x = &cctx[rp % RR__RECV_WIN];
        *x = (rr__consume_ctx){c, (char *)st->rbuf + off * es, (const char *)st->own + off * es,
                               st->avg_div, RR_OK};
        r->consume = dev ? rr__reduce_on_device : rr__reduce_in_place; /* device: must */
        r->ctx = x;
      }
      RR__CHECK(rr__comm_irecv(c->cm, st->from, (int)rp, r));
      rp++;
    }
    size_t moved = 0;
    RR__CHECK(rr__comm_progress(c->cm, &moved));
    while (rd < rp && rreq[rd % RR__RECV_WIN].complete) {
      if (slotted && dev) {
        if (!rreq[rd % RR__RECV_WIN].consumed)
          return rr__set_error(RR_EINVAL, "internal: a device segment was not reduced");
        RR__CHECK(cctx[rd % RR__RECV_WIN].status);
      } else if (slotted && !rreq[rd % RR__RECV_WIN].consumed) {
        size_t off = rd * seg, n = RR__MIN(seg, st->rcount - off);
        char *slot = rreq[rd % RR__RECV_WIN].buf;
        char *dst = st->rbuf ? (char *)st->rbuf + off * es : slot;
        if (trace_values) memcpy(got_copy + off * es, slot, n * es);
        rr__reduce(dst, (const char *)st->own + off * es, slot, n, c->a->dtype, c->a->op,
                   st->avg_div);
        /* A chain's reduction lives in the slot only until the slot is reused. */
        if (trace_values && !st->rbuf) memcpy(res_copy + off * es, dst, n * es);
      }
      rd++;
      busy = 1;
    }
    while (sd < sp && sreq[sd % RR__SEND_WIN].complete) sd++, busy = 1;
    if (sd == nsend && rd == nrecv) break;
    if (!moved && !busy) {
      c->seg_at = (rd < nrecv ? rd : sd) + 1;
      c->seg_total = rd < nrecv ? nrecv : nsend;
      RR__CHECK(rr__coll_block(c, rd < nrecv ? st->from : st->to));
    }
  }
  c->seg_total = 0;
  if (trace) {
    if (trace_values) {
      cap.own = own_copy, cap.got = got_copy;
      cap.res = st->rbuf ? st->rbuf : res_copy;
    }
    rr__trace_step(c, st, &cap);
  }
  RR__LOG_TRACE(RR__SUB_COLL, "%s: sent chunk %d (%zu elems) to rank %d, got chunk %d (%zu elems) from rank %d%s",
           rr__coll_where(c), st->schunk, st->to >= 0 ? st->scount : 0,
           st->to >= 0 ? rr__grank(c, st->to) : -1, st->rchunk,
           st->from >= 0 ? st->rcount : 0, st->from >= 0 ? rr__grank(c, st->from) : -1,
           slotted ? " and reduced it" : "");
  return RR_OK;
}
