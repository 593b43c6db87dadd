/* The step every algorithm is made of.
 *
 * A pipelined step sends one buffer to one neighbour and receives one from the other. Both
 * are cut into segments of RR_SEG_BYTES; segment k of a step travels as message k + 1, whose
 * lane both sides compute alike without talking (rr__lane_for in transport/comm.c). Message
 * 0 is the call header's, which goes both ways on the first lane; numbering segments from 1
 * keeps the first segment of every step off it, so with one-way TCP lanes no data shares a
 * socket with the other direction's (before, a step of one segment, an all-reduce of 64 KiB
 * to 256 KiB at world 2, sent all its data both ways on one socket). While segment k is
 * being reduced, the segments after it are already on the wire (the sender keeps up to
 * RR__PIPE_SEND_WIN segments queued, the receiver has up to `slots` receive buffers posted),
 * which is the overlap of reduction and transfer the ring relies on.
 *
 * Received segments are processed in order. They land either straight in the destination
 * (a copy costs nothing: the socket writes there), or in a staging slot from which they are
 * reduced into the destination, or, in a chain, reduced in the slot and forwarded from it.
 *
 * This loop is the same for every memory the bytes may live in. What differs is the call's
 * memory's (ring/mem.h): where a segment is staged before it goes (host memory is sent as it
 * is; a device buffer piped through pinned slots is first copied off the device), where a
 * receive lands, what is done once it arrived, and how to wait when nothing moves. Host
 * memory's hooks are at the end of this file, the device's in ring/pipe_dev.c.
 *
 * A whole step (recursive doubling) sends each buffer as one message behind the call header
 * and reduces once the partner's buffer arrived: recursive doubling runs on small buffers,
 * where cutting would only add messages, and its partner changes every round, so every
 * message carries the header. Only host memory runs it.
 *
 * Either returns when all its sends and receives are complete, so the next step may
 * overwrite anything this one was sending.
 *
 * RR_TRACE is one hook around the step (begin and end, ring/trace.c), plus the hand-over of
 * a small reduction's operands in rr__pipe_reduce, the one place they exist: a slot is
 * reused, the transport's memory released, a chain's result overwritten by the next
 * segment. Off, it costs a branch per step and one per reduced segment. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "ring/mem.h"
#include "ring/op.h"
#include "ring/prims.h"
#include "ring/trace.h"

/* A host reduction of a step, handing its operands to the trace when it keeps them. */
static void rr__pipe_reduce(const rr__red *x, const void *got, size_t len) {
  const rr__coll *c = x->c;
  if (x->tap) rr__trace_got(x->tap, x->off, got, len);
  rr__reduce(x->dst, x->got_first ? got : x->own, x->got_first ? x->own : got, len / c->esize,
             c->a->dtype, c->a->op, x->avg_div);
  if (x->tap) rr__trace_made(x->tap, x->off, x->dst, len);
}

static size_t rr__nseg(size_t count, size_t seg) {
  return (count + seg - 1) / seg;
}

static int rr__pipe_segments(rr__coll *c, const rr__step *st, rr__trace_cap *tap) {
  const rr__mem *m = c->mem;
  const size_t es = c->esize, seg = c->seg;
  /* The request arrays (most of the 15 KiB) are filled as segments are posted: clearing
   * them for every step would cost a small call more than its sends. */
  rr__pipe p;
  memset(&p, 0, offsetof(rr__pipe, sreq));
  p.c = c, p.st = st, p.es = es, p.seg = seg, p.tap = tap;
  p.nsend = st->to >= 0 ? rr__nseg(st->scount, seg) : 0;
  p.nrecv = st->from >= 0 ? rr__nseg(st->rcount, seg) : 0;
  /* Reductions go through staging slots; plain receives land in place. A chain forwards
   * each segment once it arrived: from its destination, or from the slot it was reduced in. */
  p.slotted = st->kind == RR__STEP_REDUCE || st->kind == RR__STEP_FWD_REDUCE;
  p.forward = st->kind == RR__STEP_FWD_COPY || st->kind == RR__STEP_FWD_REDUCE;
  p.fwd_from_slot = st->kind == RR__STEP_FWD_REDUCE;
  p.p2p = rr__kind_has(c->a->kind, RR__KF_P2P);
  p.nslots = (size_t)c->cs->nslots;
  p.slot_bytes = c->seg_bytes;
  if (p.forward && (st->scount != st->rcount || st->to < 0 || st->from < 0))
    return rr__set_error(RR_EINVAL, "internal: a forwarding step needs equal sizes");
  RR__CHECK(m->begin(&p));

  for (;;) {
    int busy = 0;
    /* Stage sends: all of them may go at once, except that a chain forwards segment k only
     * after it arrived. */
    while (p.sq < p.nsend && p.sq - p.sd < p.swin && (!p.forward || p.sq < p.rd)) {
      size_t k = p.sq, off = k * seg, n = RR__MIN(seg, st->scount - off);
      const char *src = p.fwd_from_slot ? p.slots + (k % p.nslots) * p.slot_bytes
                        : p.forward     ? (const char *)st->rbuf + off * es
                                        : (const char *)st->sbuf + off * es;
      rr__req *r = &p.sreq[k % RR__PIPE_WIN];
      memset(r, 0, sizeof *r);
      r->p2p = p.p2p;
      RR__CHECK(m->send_stage(&p, k, r, src, n * es));
      p.sq++;
    }
    /* Post the staged sends, in order, as each becomes ready. */
    while (p.sp < p.sq) {
      int ready = m->send_ready ? m->send_ready(&p, p.sp) : 1;
      if (ready < 0) return ready;
      if (!ready) break;
      RR__CHECK(rr__comm_isend(c->cm, st->to, rr__seg_msg(p.sp), &p.sreq[p.sp % RR__PIPE_WIN]));
      p.sp++;
    }
    /* Post receives while slots are free: a slot is free once the segment that used it
     * was reduced (or, when forwarding from the slot, sent on). */
    while (p.rp < p.nrecv && p.rp - p.rd < p.rwin &&
           (!p.fwd_from_slot || p.rp < p.nslots || p.sd > p.rp - p.nslots)) {
      size_t k = p.rp, off = k * seg, n = RR__MIN(seg, st->rcount - off);
      rr__req *r = &p.rreq[k % RR__PIPE_WIN];
      rr__red *x = &p.red[k % RR__PIPE_WIN];
      memset(r, 0, sizeof *r);
      r->len = n * es;
      r->p2p = p.p2p;
      *x = (rr__red){c,
                     st->rbuf ? (char *)st->rbuf + off * es : NULL,
                     (const char *)st->own + off * es,
                     off * es,
                     st->avg_div,
                     st->got_first,
                     tap,
                     RR_OK};
      int ready = m->recv_post(&p, k, r, x);
      if (ready < 0) return ready;
      if (!ready) break;
      RR__CHECK(rr__comm_irecv(c->cm, st->from, rr__seg_msg(k), r));
      p.rp++;
    }
    size_t moved = 0;
    RR__CHECK(rr__comm_progress(c->cm, &moved));
    while (p.rd < p.rp && p.rreq[p.rd % RR__PIPE_WIN].complete) {
      const size_t i = p.rd % RR__PIPE_WIN;
      RR__CHECK(m->recv_done(&p, p.rd, &p.rreq[i], &p.red[i]));
      p.rd++;
      busy = 1;
    }
    while (p.sd < p.sp && p.sreq[p.sd % RR__PIPE_WIN].complete) p.sd++, busy = 1;
    if (p.sd == p.nsend && p.rd == p.nrecv) break;
    if (!moved && !busy) {
      c->seg_at = (p.rd < p.nrecv ? p.rd : p.sd) + 1;
      c->seg_total = p.rd < p.nrecv ? p.nrecv : p.nsend;
      RR__CHECK(m->idle(&p, p.rd < p.nrecv ? st->from : st->to));
    }
  }
  c->seg_total = 0;
  return RR_OK;
}

/* Everything is posted at once, so a header and its data share one system call; the
 * received header is checked before the data is used. */
static int rr__pipe_whole(rr__coll *c, const rr__step *st, rr__trace_cap *tap) {
  const int reduce = st->kind == RR__STEP_REDUCE;
  if (!(c->mem->caps & RR__MEM_WHOLE) || (!reduce && st->kind != RR__STEP_COPY) ||
      (st->to >= 0 && st->from >= 0 && !reduce))
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
  RR__LOG_TRACE(
      RR__SUB_COLL,
      "%s: sent chunk %d (%zu elems) to rank %d, got chunk %d (%zu elems) from rank %d%s",
      rr__coll_where(c), st->schunk, st->to >= 0 ? st->scount : 0,
      st->to >= 0 ? rr__grank(c, st->to) : -1, st->rchunk, st->from >= 0 ? st->rcount : 0,
      st->from >= 0 ? rr__grank(c, st->from) : -1,
      st->kind == RR__STEP_REDUCE || st->kind == RR__STEP_FWD_REDUCE ? " and reduced it" : "");
  return RR_OK;
}

/* ---- host memory ---- */

static int rr__host_copy(const rr__coll *c, void *dst, const void *src, size_t bytes) {
  if (dst != src) memmove(dst, src, bytes);
  return RR_OK;
}

static int rr__host_reduce(const rr__coll *c, void *dst, const void *a, const void *b, size_t n,
                           int avg_div) {
  rr__reduce(dst, a, b, n, c->a->dtype, c->a->op, avg_div);
  return RR_OK;
}

static int rr__host_scratch(rr__coll *c, size_t bytes, void **out) {
  rr__coll_state *cs = c->cs;
  if (bytes > cs->scratch_bytes) {
    void *p = realloc(cs->scratch, bytes);
    if (!p) return rr__set_error(RR_ENOMEM, "out of memory for %zu bytes of scratch", bytes);
    cs->scratch = p;
    cs->scratch_bytes = bytes;
  }
  *out = cs->scratch;
  return RR_OK;
}

/* Slotted steps receive into the group's staging slots. */
static int rr__host_begin(rr__pipe *p) {
  p->slots = p->c->cs->staging;
  p->swin = RR__PIPE_SEND_WIN;
  p->rwin = p->slotted ? p->nslots : RR__PIPE_WIN;
  return RR_OK;
}

/* Host bytes go on the wire as they are. */
static int rr__host_send_stage(rr__pipe *p, size_t k, rr__req *r, const char *src, size_t len) {
  r->buf = (char *)src;
  r->len = len;
  return RR_OK;
}

/* A transport whose bytes sit in memory of its own (shared memory) reduces straight out of
 * it into the destination (rr__req.consume). */
static void rr__reduce_in_place(rr__req *r, const void *data, size_t len) {
  rr__pipe_reduce(r->ctx, data, len);
}

static int rr__host_recv_post(rr__pipe *p, size_t k, rr__req *r, rr__red *x) {
  if (!p->slotted) {
    r->buf = x->dst;
    return 1;
  }
  r->buf = p->slots + (k % p->nslots) * p->slot_bytes;
  if (!x->dst) { /* a chain's middle link: reduced in the slot, and sent on from it */
    x->dst = r->buf;
  } else {
    r->consume = rr__reduce_in_place; /* the transport may reduce in place */
    r->ctx = x;
  }
  return 1;
}

static int rr__host_recv_done(rr__pipe *p, size_t k, rr__req *r, rr__red *x) {
  if (p->slotted && !r->consumed) rr__pipe_reduce(x, r->buf, r->len);
  return RR_OK;
}

static int rr__host_idle(rr__pipe *p, int peer) {
  return rr__coll_block(p->c, peer);
}

const rr__mem rr__mem_host = {
    .name = "host memory",
    .caps = RR__MEM_HOST | RR__MEM_WHOLE,
    .copy = rr__host_copy,
    .reduce = rr__host_reduce,
    .scratch = rr__host_scratch,
    .begin = rr__host_begin,
    .send_stage = rr__host_send_stage,
    .recv_post = rr__host_recv_post,
    .recv_done = rr__host_recv_done,
    .idle = rr__host_idle,
};
