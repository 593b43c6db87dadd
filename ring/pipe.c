/* The step every algorithm is made of.
 *
 * A pipelined step sends one buffer to one neighbour and receives one from the other. Both
 * are cut into segments of RR_SEG_BYTES; segment k of a step travels as message k + 1, whose
 * lane both sides compute alike without talking (rr__lane_for in transport/comm.c). Message
 * 0 is the call header's, which goes both ways on the first lane; numbering segments from 1
 * keeps the first segment of every step off it, so with one-way TCP lanes no data shares a
 * socket with the other direction's (before, a step of one segment, an all-reduce of 64 KiB
 * to 256 KiB at world 2, sent all its data both ways on one socket). While segment k is being reduced, the
 * segments after it are already on the wire (the sender keeps up to SEND_WIN segments
 * queued, the receiver has up to `slots` receive buffers posted), which is the overlap of
 * reduction and transfer the ring relies on.
 *
 * Received segments are processed in order. They land either straight in the destination
 * (a copy costs nothing: the socket writes there), or in a staging slot from which they are
 * reduced into the destination, or, in a chain, reduced in the slot and forwarded from it.
 *
 * A whole step (recursive doubling) sends each buffer as one message behind the call header
 * and reduces once the partner's buffer arrived: recursive doubling runs on small buffers,
 * where cutting would only add messages, and its partner changes every round, so every
 * message carries the header.
 *
 * Either returns when all its sends and receives are complete, so the next step may
 * overwrite anything this one was sending.
 *
 * RR_TRACE is one hook around the step (begin and end, ring/trace.c), plus the hand-over of
 * a small reduction's operands in rr__pipe_reduce, the one place they exist: a slot is
 * reused, the transport's memory released, a chain's result overwritten by the next
 * segment. Off, it costs a branch per step and one per reduced segment. */
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "cuda/cuda.h"
#include "ring/op.h"
#include "ring/prims.h"
#include "ring/trace.h"

#define RR__SEND_WIN 32
#define RR__RECV_WIN 64 /* >= the largest RR_SLOTS */

/* One reduction of a step (a segment, or a whole buffer): dst = own (op) got, or got (op)
 * own. It runs wherever the received bytes are: in the step's loop (a staging slot, the
 * landing buffer), or inside the transport straight out of its memory (shared memory). */
typedef struct rr__red {
  const rr__coll *c;
  char *dst;
  const char *own;
  size_t off; /* bytes into the step's received chunk */
  int avg_div, got_first;
  rr__trace_cap *tap; /* the trace keeps this step's operands (NULL: not) */
  int status;         /* device: the kernel launch's */
} rr__red;

static void rr__pipe_reduce(const rr__red *x, const void *got, size_t len) {
  const rr__coll *c = x->c;
  if (x->tap) rr__trace_got(x->tap, x->off, got, len);
  rr__reduce(x->dst, x->got_first ? got : x->own, x->got_first ? x->own : got, len / c->esize,
             c->a->dtype, c->a->op, x->avg_div);
  if (x->tap) rr__trace_made(x->tap, x->off, x->dst, len);
}

static void rr__reduce_in_place(rr__req *r, const void *data, size_t len) {
  rr__pipe_reduce(r->ctx, data, len);
}

/* Device buffers (CUDA IPC): the segment sits in this rank's device slot; the kernel reads it
 * there, on the call's stream (the sender published the slot once its copy had completed). */
static void rr__reduce_on_device(rr__req *r, const void *data, size_t len) {
  rr__red *x = r->ctx;
  const rr__coll *c = x->c;
  x->status = rr__cuda_reduce(x->dst, NULL, x->own, data, len / c->esize, c->a->dtype, c->a->op,
                              x->avg_div, c->dev->stream);
}

static size_t rr__nseg(size_t count, size_t seg) { return (count + seg - 1) / seg; }

static int rr__pipe_segments(rr__coll *c, const rr__step *st, rr__trace_cap *tap) {
  if (c->piped) return rr__pipe_piped(c, st); /* device buffers, host lanes: pipe_dev.c */
  const size_t es = c->esize, seg = c->seg;
  const size_t nsend = st->to >= 0 ? rr__nseg(st->scount, seg) : 0;
  const size_t nrecv = st->from >= 0 ? rr__nseg(st->rcount, seg) : 0;
  /* Reductions go through staging slots; plain receives land in place. A chain forwards
   * each segment once it arrived: from its destination, or from the slot it was reduced in. */
  const int slotted = st->kind == RR__STEP_REDUCE || st->kind == RR__STEP_FWD_REDUCE;
  const int forward = st->kind == RR__STEP_FWD_COPY || st->kind == RR__STEP_FWD_REDUCE;
  const int fwd_from_slot = st->kind == RR__STEP_FWD_REDUCE;
  const size_t nslots = (size_t)c->cs->nslots, slot_bytes = c->seg_bytes;
  char *staging = c->cs->staging;
  const size_t rwin = slotted ? nslots : RR__RECV_WIN;
  rr__req sreq[RR__SEND_WIN], rreq[RR__RECV_WIN];
  rr__red red[RR__RECV_WIN];
  size_t sp = 0, sd = 0; /* sends posted, sends done */
  size_t rp = 0, rd = 0; /* receives posted, receives processed */

  if (forward && (st->scount != st->rcount || st->to < 0 || st->from < 0))
    return rr__set_error(RR_EINVAL, "internal: a forwarding step needs equal sizes");
  const rr__req_dev *dev = c->dev;
  /* Point to point: the lane may copy across memories (transport.h, rr__req.p2p). */
  const int p2p = rr__kind_has(c->a->kind, RR__KF_P2P);
  /* Device steps (CUDA IPC) reduce out of the transport's device slot, where the segment
   * arrived. A reduce chain's middle link has no destination: its slots are a landing area of
   * the same shape in the device scratch, where the kernel writes own (op) received and the
   * forward's copy reads it, both on the call's stream. Stream order alone does not keep a
   * landing slot: the copy of segment k is queued only when the next rank frees a slot, which
   * may be after the kernel of segment k + nslots was launched. So a landing slot is reused
   * only once the send from it completed (the receive window below), and a device send
   * completes only once its copy did. */
  if (dev && fwd_from_slot) {
    void *area = NULL;
    RR__CHECK(rr__coll_scratch(c, nslots * slot_bytes, &area));
    staging = area;
  } else if (dev && slotted && !st->rbuf) {
    return rr__set_error(RR_EINVAL, "internal: a device reduction without a destination");
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
      r->p2p = p2p;
      RR__CHECK(rr__comm_isend(c->cm, st->to, rr__seg_msg(sp), r));
      sp++;
    }
    /* Post receives while slots are free: a slot is free once the segment that used it
     * was reduced (or, when forwarding from the slot, sent on). */
    while (rp < nrecv && rp - rd < rwin &&
           (!fwd_from_slot || rp < nslots || sd > rp - nslots)) {
      size_t off = rp * seg, n = RR__MIN(seg, st->rcount - off);
      rr__req *r = &rreq[rp % RR__RECV_WIN];
      memset(r, 0, sizeof *r);
      r->buf = slotted && (!dev || fwd_from_slot) ? staging + (rp % nslots) * slot_bytes
                                                  : (char *)st->rbuf + off * es;
      r->len = n * es;
      r->dev = dev;
      r->p2p = p2p;
      if (slotted) {
        rr__red *x = &red[rp % RR__RECV_WIN];
        *x = (rr__red){c, st->rbuf ? (char *)st->rbuf + off * es : r->buf,
                       (const char *)st->own + off * es, off * es, st->avg_div, st->got_first,
                       tap, RR_OK};
        /* The transport may reduce in place; a device one must (into the landing slot, when
         * forwarding from one: the kernel reads the transport's slot, writes ours). */
        if (st->rbuf || dev) {
          r->consume = dev ? rr__reduce_on_device : rr__reduce_in_place; /* device: must */
          r->ctx = x;
        }
      }
      RR__CHECK(rr__comm_irecv(c->cm, st->from, rr__seg_msg(rp), r));
      rp++;
    }
    size_t moved = 0;
    RR__CHECK(rr__comm_progress(c->cm, &moved));
    while (rd < rp && rreq[rd % RR__RECV_WIN].complete) {
      const rr__req *r = &rreq[rd % RR__RECV_WIN];
      if (slotted && dev) {
        if (!r->consumed)
          return rr__set_error(RR_EINVAL, "internal: a device segment was not reduced");
        RR__CHECK(red[rd % RR__RECV_WIN].status);
      } else if (slotted && !r->consumed) {
        rr__pipe_reduce(&red[rd % RR__RECV_WIN], r->buf, r->len);
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
  return RR_OK;
}

/* Everything is posted at once, so a header and its data share one system call; the
 * received header is checked before the data is used. */
static int rr__pipe_whole(rr__coll *c, const rr__step *st, rr__trace_cap *tap) {
  const int reduce = st->kind == RR__STEP_REDUCE;
  if (c->dev || (!reduce && st->kind != RR__STEP_COPY) || (st->to >= 0 && st->from >= 0 && !reduce))
    return rr__set_error(RR_EINVAL, "internal: not a whole step");
  rr__req sr = {.buf = (char *)st->sbuf, .len = st->scount * c->esize}, hr;
  rr__req rq = {.buf = reduce ? st->land : st->rbuf, .len = st->rcount * c->esize};
  uint8_t wire[RR__HDR_BYTES];
  if (st->from >= 0) {
    RR__CHECK(rr__coll_post_hdr(c, st->from, &hr, wire));
    RR__CHECK(rr__comm_irecv(c->cm, st->from, 0, &rq));
  }
  if (st->to >= 0) {
    RR__CHECK(rr__coll_send_hdr(c, st->to));
    RR__CHECK(rr__comm_isend(c->cm, st->to, 0, &sr));
  }
  if (st->from >= 0) {
    /* Both: an empty message completes at once, before its header has arrived. */
    RR__CHECK(rr__coll_wait(c, &hr, st->from));
    RR__CHECK(rr__coll_wait(c, &rq, st->from));
    RR__CHECK(rr__coll_check_hdr(c, st->from, wire));
  }
  /* The buffer sent is overwritten next: the send must be finished first. */
  if (st->to >= 0) RR__CHECK(rr__coll_wait(c, &sr, st->to));
  if (reduce && st->from >= 0) {
    rr__red x = {c, st->rbuf, st->own, 0, 0, st->got_first, tap, RR_OK};
    rr__pipe_reduce(&x, st->land, rq.len);
    if (st->avg_div) rr__avg_scale(st->rbuf, st->rcount, c->a->dtype, st->avg_div);
  }
  return RR_OK;
}

int rr__pipe_step(rr__coll *c, const rr__step *st) {
  rr__trace_cap cap, *tap = NULL;
  const int trace = c->cs->trace != RR__TRACE_OFF;
  if (trace) tap = rr__trace_step_begin(c, st, &cap);
  RR__CHECK(st->whole ? rr__pipe_whole(c, st, tap) : rr__pipe_segments(c, st, tap));
  if (trace) rr__trace_step_end(c, st, &cap);
  RR__LOG_TRACE(RR__SUB_COLL, "%s: sent chunk %d (%zu elems) to rank %d, got chunk %d (%zu elems) from rank %d%s",
           rr__coll_where(c), st->schunk, st->to >= 0 ? st->scount : 0,
           st->to >= 0 ? rr__grank(c, st->to) : -1, st->rchunk,
           st->from >= 0 ? st->rcount : 0, st->from >= 0 ? rr__grank(c, st->from) : -1,
           st->kind == RR__STEP_REDUCE || st->kind == RR__STEP_FWD_REDUCE ? " and reduced it"
                                                                          : "");
  return RR_OK;
}
