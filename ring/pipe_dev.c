/* A pipelined step on device buffers over lanes that carry host memory only (TCP, verbs,
 * shared memory without CUDA IPC): the "piped" path of docs/cuda.md.
 *
 * The staged path copies a whole device buffer to the host, runs the collective there (the
 * host reduces) and copies the result back: three passes one after the other, and the GPU's
 * kernels unused. Here every segment takes its own way through pinned host slots, and the
 * stages of different segments overlap:
 *
 *   send k     device -> pinned send slot (a copy on the call's stream, event sent[j]);
 *              once that event completed, the slot goes on the wire
 *   receive k  wire -> pinned receive slot; once complete, queued on the stream: a copy
 *              to the device (a landing slot) and the reduction kernel into the destination
 *              (a copy step: the copy straight to the destination); event recv[j] behind them
 *
 * so segment k+1 is copied off the device while segment k is on the wire and segment k-1 is
 * reduced on the GPU. The host waits only for events of its own process: a peer that dies
 * is seen on its sockets as on the host path, never by a device left waiting for it.
 *
 * A receive slot is busy from the moment its bytes are handed to the stream until its event
 * completes, across steps and calls (the copy reading it may still be queued when the call
 * returns): a receive is posted into it only after that. Send slots are free again once
 * their send completed (every send completes before the step returns).
 *
 * Only the steps the ring algorithms use run here (send, receive, receive-reduce into a
 * destination); chain steps and whole steps stay on the host path, and group/ipc.c sends
 * other calls through the staged path. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "ring/coll.h"

#define RR__PIPED_MAX_SLOTS 64 /* >= the largest RR_SLOTS */

struct rr__piped {
  int device;
  size_t slot;
  int nslots;
  char *hsend, *hrecv; /* pinned, nslots * slot each */
  char *land;          /* device, nslots * slot: received segments before their reduction */
  void *sent[RR__PIPED_MAX_SLOTS], *recv[RR__PIPED_MAX_SLOTS];
  unsigned char rbusy[RR__PIPED_MAX_SLOTS]; /* recv[j] guards queued device work */
};

static atomic_ullong rr__piped_nseg;

uint64_t rr__piped_segments(void) { return atomic_load(&rr__piped_nseg); }

void rr__piped_free(rr__coll_state *cs) {
  rr__piped *p = cs->piped;
  if (!p) return;
  /* On the slots' device, whatever the caller's thread has current (a destroy may run on a
   * thread that never chose one). cudaFree waits for the device; the events go after it, as
   * nothing waits for them then. */
  int prev = -1;
  if (rr__cuda_set_device(p->device, &prev) != RR_OK) prev = -1;
  rr__cuda_free(p->land);
  rr__cuda_host_free(p->hsend);
  rr__cuda_host_free(p->hrecv);
  for (int j = 0; j < p->nslots; j++) {
    rr__cuda_event_destroy(p->sent[j]);
    rr__cuda_event_destroy(p->recv[j]);
  }
  rr__cuda_restore_device(prev);
  free(p);
  cs->piped = NULL;
}

/* The group's slots for the call's device, made at its first piped call. A call on another
 * device (or with other slot sizes) replaces them: cudaFree and cudaFreeHost wait for the
 * device, so the old slots' work is done first. */
static int rr__piped_get(rr__coll *c, rr__piped **out) {
  rr__coll_state *cs = c->cs;
  rr__piped *p = cs->piped;
  if (p && p->device == c->dev->device && p->slot == cs->seg_bytes && p->nslots == cs->nslots) {
    *out = p;
    return RR_OK;
  }
  rr__piped_free(cs);
  if (cs->nslots > RR__PIPED_MAX_SLOTS)
    return rr__set_error(RR_EINVAL, "internal: %d slots, at most %d", cs->nslots,
                         RR__PIPED_MAX_SLOTS);
  p = rr__calloc(1, sizeof *p);
  if (!p) return RR_ENOMEM;
  cs->piped = p;
  p->device = c->dev->device;
  p->slot = cs->seg_bytes;
  p->nslots = cs->nslots;
  const size_t bytes = (size_t)p->nslots * p->slot;
  int st = rr__cuda_host_alloc((void **)&p->hsend, bytes);
  if (st == RR_OK) st = rr__cuda_host_alloc((void **)&p->hrecv, bytes);
  if (st == RR_OK) st = rr__cuda_malloc((void **)&p->land, bytes);
  for (int j = 0; st == RR_OK && j < p->nslots; j++) {
    st = rr__cuda_event_create(&p->sent[j]);
    if (st == RR_OK) st = rr__cuda_event_create(&p->recv[j]);
  }
  if (st != RR_OK) {
    rr__piped_free(cs);
    return rr__prefix_error(st, "setting up %d pinned slots of %zu KiB for device buffers",
                            cs->nslots, cs->seg_bytes >> 10);
  }
  *out = p;
  return RR_OK;
}

/* Nothing moved on the sockets. With device work of ours pending, the host polls its events
 * (yielding the core) and still watches the group: an abort ends the wait, and so does the
 * deadline. With none pending, it sleeps on the sockets as every step does. */
static int rr__piped_idle(rr__coll *c, int peer, int device_pending, int64_t *ctl_ms) {
  if (!device_pending) return rr__coll_block(c, peer);
  int64_t now = rr__now_ms();
  if (now != *ctl_ms) {
    *ctl_ms = now;
    rr__comm_poll_ctl(c->cm);
    if (rr__comm_abort_concerns(c->cm, 1, c->hdr.seq)) return rr__comm_check(c->cm);
    if (now >= c->deadline_ms)
      return rr__set_error(RR_ETIMEDOUT,
                           "timed out after %.1f s waiting for this rank's own copies between "
                           "device %d and pinned host memory (is the GPU stuck?)",
                           (double)c->timeout_ms / 1000.0, c->dev->device);
  }
  sched_yield();
  return RR_OK;
}

static size_t rr__nseg(size_t count, size_t seg) { return (count + seg - 1) / seg; }

int rr__pipe_piped(rr__coll *c, const rr__step *st) {
  const size_t es = c->esize, seg = c->seg;
  const int reduce = st->kind == RR__STEP_REDUCE;
  if ((!reduce && st->kind != RR__STEP_COPY) || (reduce && !st->rbuf))
    return rr__set_error(RR_EINVAL, "internal: the piped device path runs no chain steps");
  rr__piped *p = NULL;
  RR__CHECK(rr__piped_get(c, &p));
  void *const stream = c->dev->stream;
  const size_t ns = (size_t)p->nslots;
  const size_t nsend = st->to >= 0 ? rr__nseg(st->scount, seg) : 0;
  const size_t nrecv = st->from >= 0 ? rr__nseg(st->rcount, seg) : 0;
  rr__req sreq[RR__PIPED_MAX_SLOTS], rreq[RR__PIPED_MAX_SLOTS];
  size_t sq = 0, sp = 0, sd = 0; /* sends: copied off the device (queued), posted, done */
  size_t rp = 0, rd = 0;         /* receives: posted, handed to the device */
  int64_t ctl_ms = 0;

  for (;;) {
    int busy = 0;
    /* Copy segments off the device while send slots are free. */
    while (sq < nsend && sq - sd < ns) {
      size_t off = sq * seg, n = RR__MIN(seg, st->scount - off), j = sq % ns;
      RR__CHECK(rr__cuda_memcpy_async(p->hsend + j * p->slot, (const char *)st->sbuf + off * es,
                                      n * es, stream));
      RR__CHECK(rr__cuda_event_record(p->sent[j], stream));
      sq++;
    }
    /* Post the sends whose copies are done, in order. */
    while (sp < sq) {
      size_t j = sp % ns;
      int done = rr__cuda_event_done(p->sent[j]);
      if (done < 0) return done;
      if (!done) break;
      size_t off = sp * seg, n = RR__MIN(seg, st->scount - off);
      rr__req *r = &sreq[j];
      memset(r, 0, sizeof *r);
      r->buf = p->hsend + j * p->slot;
      r->len = n * es;
      RR__CHECK(rr__comm_isend(c->cm, st->to, rr__seg_msg(sp), r));
      sp++;
    }
    /* Post receives into slots the device has finished reading. */
    while (rp < nrecv && rp - rd < ns) {
      size_t j = rp % ns;
      if (p->rbusy[j]) {
        int done = rr__cuda_event_done(p->recv[j]);
        if (done < 0) return done;
        if (!done) break;
        p->rbusy[j] = 0;
      }
      size_t off = rp * seg, n = RR__MIN(seg, st->rcount - off);
      rr__req *r = &rreq[j];
      memset(r, 0, sizeof *r);
      r->buf = p->hrecv + j * p->slot;
      r->len = n * es;
      RR__CHECK(rr__comm_irecv(c->cm, st->from, rr__seg_msg(rp), r));
      rp++;
    }
    size_t moved = 0;
    RR__CHECK(rr__comm_progress(c->cm, &moved));
    /* Hand arrived segments to the device, in order. */
    while (rd < rp && rreq[rd % ns].complete) {
      size_t j = rd % ns, off = rd * seg, len = rreq[j].len;
      char *dst = (char *)st->rbuf + off * es;
      if (reduce) {
        char *land = p->land + j * p->slot;
        const char *own = (const char *)st->own + off * es;
        RR__CHECK(rr__cuda_memcpy_async(land, p->hrecv + j * p->slot, len, stream));
        RR__CHECK(rr__cuda_reduce(dst, NULL, st->got_first ? land : own,
                                  st->got_first ? own : land, len / es, c->a->dtype, c->a->op,
                                  st->avg_div, stream));
      } else {
        RR__CHECK(rr__cuda_memcpy_async(dst, p->hrecv + j * p->slot, len, stream));
      }
      RR__CHECK(rr__cuda_event_record(p->recv[j], stream));
      p->rbusy[j] = 1;
      atomic_fetch_add_explicit(&rr__piped_nseg, 1, memory_order_relaxed);
      rd++;
      busy = 1;
    }
    while (sd < sp && sreq[sd % ns].complete) sd++, busy = 1;
    if (sd == nsend && rd == nrecv) break;
    if (!moved && !busy) {
      /* Device work we wait for: a send's copy off the device, or a slot's last reading. */
      int pending = sp < sq || (rp < nrecv && rp - rd < ns && p->rbusy[rp % ns]);
      c->seg_at = (rd < nrecv ? rd : sd) + 1;
      c->seg_total = rd < nrecv ? nrecv : nsend;
      RR__CHECK(rr__piped_idle(c, rd < nrecv ? st->from : st->to, pending, &ctl_ms));
    }
  }
  c->seg_total = 0;
  return RR_OK;
}
