/* The step's device side (ring/mem.h): the two memories of a call on CUDA device buffers,
 * which the group chooses (group/run.c, rr__coll_on_device), as hooks around the one segment
 * loop of ring/pipe.c. In both, every copy and kernel of the call goes on its stream
 * (rr__coll.dev), in order, and the host never waits for the device except for its own
 * work's events; scratch is device memory on the call's device.
 *
 * CUDA IPC (rr__mem_ipc): the lanes carry device messages (transport/cuda_ipc.c). A segment
 * is sent from where it is, and a received one is reduced by a kernel straight out of the
 * transport's device slot (the sender published the slot once its copy had completed). A
 * reduce chain's middle link has no destination: its slots are a landing area of the same
 * shape in the device scratch, where the kernel writes own (op) received and the forward's
 * copy reads it, both on the call's stream. Stream order alone does not keep a landing slot:
 * the copy of segment k is queued only when the next rank frees a slot, which may be after
 * the kernel of segment k + nslots was launched. So a landing slot is reused only once the
 * send from it completed (ring/pipe.c's receive window), and a device send completes only
 * once its copy did (transport/transport.h, rr__req_dev).
 *
 * Piped (rr__mem_piped): the lanes carry host memory only (TCP, verbs, shared memory without
 * CUDA IPC), the "piped" path of docs/cuda.md. The staged path copies a whole device buffer
 * to the host, runs the collective there (the host reduces) and copies the result back:
 * three passes one after the other, and the GPU's kernels unused. Here every segment takes
 * its own way through pinned host slots, and the stages of different segments overlap:
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
 * their send completed (every send completes before the step returns). Only the steps the
 * ring algorithms use run piped (send, receive, receive-reduce into a destination); group/ipc.c
 * sends other calls through the staged path (the dev column of ring/kind.h). */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "ring/mem.h"

/* ---- what both device memories share ---- */

static int rr__dev_copy(const rr__coll *c, void *dst, const void *src, size_t bytes) {
  return dst == src ? RR_OK : rr__cuda_memcpy_async(dst, src, bytes, c->dev->stream);
}

static int rr__dev_reduce(const rr__coll *c, void *dst, const void *a, const void *b, size_t n,
                          int avg_div) {
  return rr__cuda_reduce(dst, NULL, a, b, n, c->a->dtype, c->a->op, avg_div, c->dev->stream);
}

/* Device scratch: grow-only, on the call's device. An outgrown or other device's scratch is
 * retired, not freed (cudaFree would wait for the whole device, the user's kernels included),
 * and taken back when a later call on its device fits in it; the group frees them all. */
static int rr__dev_scratch(rr__coll *c, size_t bytes, void **out) {
  rr__coll_state *cs = c->cs;
  const int device = c->dev->device;
  const int same = cs->dev_scratch && cs->dev_scratch_device == device;
  if (!same || bytes > cs->dev_scratch_bytes) {
    size_t got = 0;
    void *p = rr__cuda_unretire(&cs->cuda_retired, device, bytes, &got);
    if (!p) RR__CHECK(rr__cuda_alloc_grown(&p, &got, same ? cs->dev_scratch_bytes : 0, bytes, 0));
    rr__cuda_retire(&cs->cuda_retired, cs->dev_scratch, cs->dev_scratch_bytes,
                    cs->dev_scratch_device);
    cs->dev_scratch = p;
    cs->dev_scratch_bytes = got;
    cs->dev_scratch_device = device;
  }
  *out = cs->dev_scratch;
  return RR_OK;
}

/* ---- CUDA IPC: device messages on the lanes ---- */

static int rr__ipc_begin(rr__pipe *p) {
  p->swin = RR__PIPE_SEND_WIN;
  p->rwin = p->slotted ? p->nslots : RR__PIPE_WIN;
  if (p->fwd_from_slot) {
    void *area = NULL;
    RR__CHECK(rr__coll_scratch(p->c, p->nslots * p->slot_bytes, &area));
    p->slots = area;
  } else if (p->slotted && !p->st->rbuf) {
    return rr__set_error(RR_EINVAL, "internal: a device reduction without a destination");
  }
  return RR_OK;
}

static int rr__ipc_send_stage(rr__pipe *p, size_t k, rr__req *r, const char *src, size_t len) {
  r->buf = (char *)src;
  r->len = len;
  r->dev = p->c->dev;
  return RR_OK;
}

/* The segment sits in this rank's device slot; the kernel reads it there, on the call's
 * stream. */
static void rr__reduce_on_device(rr__req *r, const void *data, size_t len) {
  rr__red *x = r->ctx;
  const rr__coll *c = x->c;
  x->status = rr__coll_reduce(c, x->dst, x->got_first ? data : x->own, x->got_first ? x->own : data,
                              len / c->esize, x->avg_div);
}

/* A device transport must reduce as it receives (into the landing slot, when forwarding
 * from one: the kernel reads the transport's slot, writes ours). */
static int rr__ipc_recv_post(rr__pipe *p, size_t k, rr__req *r, rr__red *x) {
  r->dev = p->c->dev;
  r->buf = p->fwd_from_slot ? p->slots + (k % p->nslots) * p->slot_bytes : x->dst;
  if (p->slotted) {
    if (!x->dst) x->dst = r->buf;
    r->consume = rr__reduce_on_device;
    r->ctx = x;
  }
  return 1;
}

static int rr__ipc_recv_done(rr__pipe *p, size_t k, rr__req *r, rr__red *x) {
  if (!p->slotted) return RR_OK;
  if (!r->consumed) return rr__set_error(RR_EINVAL, "internal: a device segment was not reduced");
  return x->status;
}

static int rr__ipc_idle(rr__pipe *p, int peer) {
  return rr__coll_block(p->c, peer);
}

const rr__mem rr__mem_ipc = {
    .name = "device memory over CUDA IPC",
    .caps = 0,
    .copy = rr__dev_copy,
    .reduce = rr__dev_reduce,
    .scratch = rr__dev_scratch,
    .begin = rr__ipc_begin,
    .send_stage = rr__ipc_send_stage,
    .recv_post = rr__ipc_recv_post,
    .recv_done = rr__ipc_recv_done,
    .idle = rr__ipc_idle,
};

/* ---- stream memory operations: the GPUs' streams hand segments over ----
 *
 * The lanes queue each segment on the call's stream as the loop posts it (the sender's copy
 * between waits and writes of flag words, the receiver's kernel likewise; transport/cuda_ipc.h)
 * and complete the request at once, so a step's loop only queues work and the host is out of
 * the data path. What the loop must keep is the order: each stream runs its work in the order
 * it was queued, and a ring is deadlock-free only if every rank queues step by step, a batch
 * of sends before the receives of the same segments, and no more segments in a batch than a
 * lane has slots (a send of segment k waits for the receiver's read of segment k - slots,
 * which must then already sit, on the receiver's stream, before the receiver's own send of
 * segment k). So the windows are the group's slot count (at most the lane's), and a request
 * is posted only once the one before it completed: a receive may wait (once per lane) for the
 * sender's slots to be published, and nothing of the call may be queued ahead of it
 * meanwhile. The host waits for the call's work once, at its end (group/ipc.c), watching the
 * peers: a death there releases this rank's waits (rr__dev_release).
 *
 * A call whose all-gather steps pull (rr__req_dev.pull; transport/cuda_ipc.h, "pull") marks
 * their requests: a send queues only its flag, a receive copies the segment out of the
 * sender's output at the destination's offset. Both sides mark alike from the sender's
 * description of its output, which travels behind the call header (rr__coll_pull_post, _wait
 * below); the reduce-scatter steps keep the slots. */

static int rr__mop_begin(rr__pipe *p) {
  RR__CHECK(rr__ipc_begin(p));
  p->swin = p->rwin = RR__MIN(p->nslots, (size_t)RR__PIPE_WIN);
  p->mine = NULL; /* the request posted last */
  return RR_OK;
}

/* The last request posted has completed (it is queued on the stream): the next may go. */
static int rr__mop_in_order(rr__pipe *p, rr__req *next) {
  const rr__req *last = p->mine;
  if (last && !last->complete) return 0;
  p->mine = next;
  return 1;
}

static int rr__mop_send_ready(rr__pipe *p, size_t k) {
  return rr__mop_in_order(p, &p->sreq[k % RR__PIPE_WIN]);
}

static int rr__mop_recv_post(rr__pipe *p, size_t k, rr__req *r, rr__red *x) {
  if (!rr__mop_in_order(p, r)) return 0;
  int ready = rr__ipc_recv_post(p, k, r, x);
  const rr__ipc_pull *pl = p->c->dev->pull;
  /* A pulling step: the segment is read where it lies in the sender's output (its offset
   * there is the destination's here), when the sender's buffer could be described. */
  if (ready > 0 && p->st->pull && !p->slotted && pl && pl->theirs.ok) {
    r->pull = 1;
    r->pull_off = (size_t)(x->dst - pl->recvbuf);
  }
  return ready;
}

/* A pulling step's send: only the flag, when this rank's output could be described (its
 * successor then pulls; else both keep the slots). */
static int rr__mop_send_stage(rr__pipe *p, size_t k, rr__req *r, const char *src, size_t len) {
  RR__CHECK(rr__ipc_send_stage(p, k, r, src, len));
  const rr__ipc_pull *pl = p->c->dev->pull;
  r->pull = p->st->pull && pl && pl->mine.ok;
  return RR_OK;
}

/* ---- the pull's descriptions (prims.h) ---- */

int rr__coll_pull_post(rr__coll *c, int right, int left) {
  rr__ipc_pull *pl = c->dev ? c->dev->pull : NULL;
  if (!pl) return RR_OK;
  pl->from = left;
  pl->mine.seq = c->hdr.seq;
  memset(&pl->theirs, 0, sizeof pl->theirs);
  memset(&pl->sreq, 0, sizeof pl->sreq);
  memset(&pl->rreq, 0, sizeof pl->rreq);
  pl->sreq.buf = (char *)&pl->mine;
  pl->sreq.len = sizeof pl->mine;
  pl->rreq.buf = (char *)&pl->theirs;
  pl->rreq.len = sizeof pl->theirs;
  /* Message 0, behind the header on the same lane (ring/prims.c). */
  RR__CHECK(rr__comm_isend(c->cm, right, 0, &pl->sreq));
  return rr__comm_irecv(c->cm, left, 0, &pl->rreq);
}

int rr__coll_pull_wait(rr__coll *c, int left) {
  rr__ipc_pull *pl = c->dev ? c->dev->pull : NULL;
  if (!pl) return RR_OK;
  RR__WHERE(c, "waiting for rank %d's description of its output", rr__grank(c, left));
  RR__CHECK(rr__coll_wait(c, &pl->rreq, left));
  const rr__ipc_pull_desc *t = &pl->theirs;
  if (t->magic != RR__PULL_MAGIC || t->seq != c->hdr.seq || t->ok > 1 || t->len != pl->mine.len)
    return rr__set_error(RR_EPROTO,
                         "rank %d's description of its output is not this call's (call #%llu "
                         "of %llu bytes, got #%llu of %llu bytes)",
                         rr__grank(c, left), (unsigned long long)c->hdr.seq,
                         (unsigned long long)pl->mine.len, (unsigned long long)t->seq,
                         (unsigned long long)t->len);
  /* Ours is on its way too: its request is reused by the next call. */
  return rr__coll_wait(c, &pl->sreq, (c->r + 1) % c->n);
}

const rr__mem rr__mem_memop = {
    .name = "device memory handed over by stream memory operations",
    .caps = 0,
    .copy = rr__dev_copy,
    .reduce = rr__dev_reduce,
    .scratch = rr__dev_scratch,
    .begin = rr__mop_begin,
    .send_stage = rr__mop_send_stage,
    .send_ready = rr__mop_send_ready,
    .recv_post = rr__mop_recv_post,
    .recv_done = rr__ipc_recv_done,
    .idle = rr__ipc_idle,
};

/* ---- piped: pinned host slots on host lanes ---- */

#define RR__PIPED_MAX_SLOTS RR__PIPE_WIN /* >= the largest RR_SLOTS */

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

uint64_t rr__piped_segments(void) {
  return atomic_load(&rr__piped_nseg);
}

void rr__piped_free(rr__coll_state *cs) {
  struct rr__piped *p = cs->piped;
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
static int rr__piped_get(rr__coll *c, struct rr__piped **out) {
  rr__coll_state *cs = c->cs;
  struct rr__piped *p = cs->piped;
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

static int rr__piped_begin(rr__pipe *p) {
  const rr__step *st = p->st;
  const int reduce = st->kind == RR__STEP_REDUCE;
  if ((!reduce && st->kind != RR__STEP_COPY) || (reduce && !st->rbuf))
    return rr__set_error(RR_EINVAL, "internal: the piped device path runs no chain steps");
  struct rr__piped *pp = NULL;
  RR__CHECK(rr__piped_get(p->c, &pp));
  p->mine = pp;
  p->swin = p->rwin = (size_t)pp->nslots;
  return RR_OK;
}

/* Copy the segment off the device into its send slot; it goes once the copy is done. */
static int rr__piped_send_stage(rr__pipe *p, size_t k, rr__req *r, const char *src, size_t len) {
  struct rr__piped *pp = p->mine;
  const size_t j = k % (size_t)pp->nslots;
  r->buf = pp->hsend + j * pp->slot;
  r->len = len;
  RR__CHECK(rr__coll_copy(p->c, r->buf, src, len));
  return rr__cuda_event_record(pp->sent[j], p->c->dev->stream);
}

static int rr__piped_send_ready(rr__pipe *p, size_t k) {
  struct rr__piped *pp = p->mine;
  return rr__cuda_event_done(pp->sent[k % (size_t)pp->nslots]);
}

/* Into a receive slot the device has finished reading. */
static int rr__piped_recv_post(rr__pipe *p, size_t k, rr__req *r, rr__red *x) {
  struct rr__piped *pp = p->mine;
  const size_t j = k % (size_t)pp->nslots;
  if (pp->rbusy[j]) {
    int done = rr__cuda_event_done(pp->recv[j]);
    if (done <= 0) return done;
    pp->rbusy[j] = 0;
  }
  r->buf = pp->hrecv + j * pp->slot;
  return 1;
}

/* Hand the arrived segment to the device: onto a landing slot and reduced into the
 * destination, or copied straight there. */
static int rr__piped_recv_done(rr__pipe *p, size_t k, rr__req *r, rr__red *x) {
  struct rr__piped *pp = p->mine;
  const size_t j = k % (size_t)pp->nslots;
  const rr__coll *c = p->c;
  if (p->slotted) {
    char *land = pp->land + j * pp->slot;
    RR__CHECK(rr__coll_copy(c, land, r->buf, r->len));
    RR__CHECK(rr__coll_reduce(c, x->dst, x->got_first ? land : x->own, x->got_first ? x->own : land,
                              r->len / c->esize, x->avg_div));
  } else {
    RR__CHECK(rr__coll_copy(c, x->dst, r->buf, r->len));
  }
  RR__CHECK(rr__cuda_event_record(pp->recv[j], c->dev->stream));
  pp->rbusy[j] = 1;
  atomic_fetch_add_explicit(&rr__piped_nseg, 1, memory_order_relaxed);
  return RR_OK;
}

/* Nothing moved on the sockets. With device work of ours pending (a send's copy off the
 * device, or the next receive slot's last reading), the host polls its events (yielding the
 * core) and still watches the group: an abort ends the wait, and so does the deadline.
 * With none pending, it sleeps on the sockets as every step does. */
static int rr__piped_idle(rr__pipe *p, int peer) {
  struct rr__piped *pp = p->mine;
  const size_t ns = (size_t)pp->nslots;
  rr__coll *c = p->c;
  const int pending =
      p->sp < p->sq || (p->rp < p->nrecv && p->rp - p->rd < ns && pp->rbusy[p->rp % ns]);
  if (!pending) return rr__coll_block(c, peer);
  int64_t now = rr__now_ms();
  if (now != p->ctl_ms) {
    p->ctl_ms = now;
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

const rr__mem rr__mem_piped = {
    .name = "device memory piped through pinned host slots",
    .caps = 0,
    .copy = rr__dev_copy,
    .reduce = rr__dev_reduce,
    .scratch = rr__dev_scratch,
    .begin = rr__piped_begin,
    .send_stage = rr__piped_send_stage,
    .send_ready = rr__piped_send_ready,
    .recv_post = rr__piped_recv_post,
    .recv_done = rr__piped_recv_done,
    .idle = rr__piped_idle,
};
