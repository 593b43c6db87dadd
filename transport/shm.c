/* Shared-memory transport: host buffers between ranks on one host.
 *
 * A pair of ranks shares one mapping (a sealed memfd) that holds two one-directional rings
 * of fixed-size slots, lower global rank -> higher in ring 0 and back in ring 1:
 *
 *   page 0        header (magic, geometry; written once by the creator)
 *   ring 0, 1     tail (slots released, receiver-written), rx_wait, tx_wait: each on its
 *                 own cache line
 *   desc 0, 1     one cache line per slot: sequence number, length, and the bytes
 *                 themselves when they fit (48: a call header)
 *   data 0, 1     nslots x slot bytes each, page aligned
 *
 * The messages form a byte stream, as over TCP: the sender copies each request into the
 * next free slot (one request per slot; a request larger than a slot is cut over several),
 * publishes slot s by storing s + 1 in its descriptor's sequence number, and the receiver,
 * polling that one cache line, hands the bytes to its requests in order. A small message
 * costs one cache-line transfer, a large one two (descriptor, data). When a whole message
 * sits in one slot and the receive has a consume hook, the ring reduces straight out of the
 * slot into its destination (no copy into a staging buffer); otherwise the bytes are copied
 * to req->buf. The slot is released (tail) at once.
 *
 * Nobody spins here (the comm may, RR_SPIN_US). A side that must wait (for data, or for a
 * free slot) sets rx_wait / tx_wait in shared memory, re-checks the ring and only then
 * sleeps in poll() on its end of an AF_UNIX socket pair; the other side, after publishing
 * (seq / tail), checks the flag and, if set, takes it and writes one byte. The flag store
 * and the re-check load, and the publishing store and the flag load, are sequentially
 * consistent, so either the waiter sees the new state or the publisher sees the flag
 * (Dekker): no lost wake-up. When the state changed before the waiter could sleep, pollfd
 * asks for POLLOUT as well, which a healthy socket always has, so poll() returns at once.
 * Reading the socket costs a system call (over a microsecond here), so the waiter reads it
 * only when a byte is due (the peer took its flag) or when it was woken and nothing moved
 * (a stray byte, or EOF).
 *
 * The socket also carries death: when the peer process exits, its end closes, poll() sees
 * EOF and progress fails with RR_EPEER naming the peer (after taking whatever it left in
 * the ring). Everything read from the mapping that the peer writes (sequence numbers, tail,
 * lengths) is bounds-checked before use; the creator seals the memfd against shrinking,
 * and the other side checks the seal, so a hostile peer cannot make us fault (SIGBUS).
 *
 * Device messages (rr__req.dev) keep this protocol slot for slot, but their bytes go into the
 * receiver's device slot of the same index (flags say so); transport/cuda_ipc.h has the rest.
 * Two things differ, so that no device ever waits for another process: a device slot is
 * published only once the sender's copy into it completed (tx_queued runs ahead of tx_head
 * meanwhile), and released only once the receiver's read of it completed (rx_tail runs ahead
 * of rx_freed); both are polled here (cudaEventQuery), in order, and the request a slot ends
 * completes only then. While any is pending the lane never sleeps in poll(): it yields the
 * core and looks again, still watching the socket, so a peer's death fails the call.
 *
 * This file is the data path (posting, progress, waiting, peeking) and the transport's
 * table; transport/shm_setup.c makes a lane (the handshake, the mapping) and closes it;
 * transport/shm_lane.h is the lane's state, which both read.
 */
#include "transport/shm.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "transport/cuda_ipc.h"
#include "transport/queue.h"
#include "transport/shm_lane.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared-memory counters must be lock-free atomics");
_Static_assert(sizeof(rr__shm_desc) == RR__SHM_CL, "a slot descriptor is one cache line");

/* Between a store that publishes and the load that decides whether to sleep or wake:
 * where a lost wake-up would hide. Empty in the library; the race test (test_shm_race)
 * compiles this file again with random delays here. */
#ifdef RR__SHM_TEST_RACES
void rr__shm_race_point(void);
#define RR__SHM_RACE_POINT() rr__shm_race_point()
#else
#define RR__SHM_RACE_POINT() ((void)0)
#endif

static int rr__shm_corrupt(rr__shm_conn *c, const char *what) {
  return rr__set_error(RR_EPROTO,
                       "shared memory with rank %d is corrupt (%s): the peer is broken or "
                       "not a ringreduce rank",
                       c->base.peer_global, what);
}

/* Is slot s published? 1 yes, 0 not yet, <0 a corrupt sequence number. seq_cst: after a
 * waiter's flag store this is the load that must see a publication (see the top). */
static int rr__shm_published(rr__shm_conn *c, uint64_t s, memory_order mo) {
  uint64_t q = atomic_load_explicit(&c->rx_desc[s % c->nslots].seq, mo);
  if (q == s + 1) return 1;
  /* Not yet: the slot still holds its previous round (or nothing, the first time). */
  if (q == (s >= c->nslots ? s + 1 - c->nslots : 0)) return 0;
  return rr__shm_corrupt(c, "sequence number out of range");
}

/* Is slot rx_tail readable? */
static int rr__shm_rx_ready(rr__shm_conn *c) {
  return rr__shm_published(c, c->rx_tail, memory_order_acquire);
}

/* Is a slot free to send into? 1 yes, 0 no, <0 a corrupt counter. */
static int rr__shm_tx_space(rr__shm_conn *c) {
  if (c->tx_queued - c->tx_tail < c->nslots) return 1;
  uint64_t t = atomic_load_explicit(&c->tx->tail, memory_order_acquire);
  if (t - c->tx_tail > c->tx_head - c->tx_tail) return rr__shm_corrupt(c, "tail out of range");
  c->tx_tail = t;
  return c->tx_queued - t < c->nslots;
}

/* Device work of ours that a slot waits for (a copy to publish, a read to release)? */
static int rr__shm_dev_pending(const rr__shm_conn *c) {
  return c->tx_head != c->tx_queued || c->rx_freed != c->rx_tail;
}

/* The head of q has all its bytes queued on the device: out of the queue, still incomplete
 * (and counted pending) until its last slot is published or released (rr__shm_finish). */
static rr__req *rr__shm_unlink(rr__reqq *q) {
  rr__req *r = q->head;
  q->head = r->next;
  if (!q->head) q->tail = NULL;
  return r;
}

static void rr__shm_finish(rr__shm_conn *c, rr__req *r, int rx) {
  r->complete = 1;
  c->base.pending--;
  if (rx) c->base.rx_pending--;
}

/* Can the head send move? A device message also needs the peer's device slots, which it
 * publishes at its first device message (then it takes our flag, as for a free slot). */
static int rr__shm_tx_ready(rr__shm_conn *c) {
  const rr__req *r = c->sq.head;
  /* Point to point does not wait for the peer's slots: it sends host bytes meanwhile. */
  if (r && r->dev && !r->p2p && c->ipc && !rr__ipc_opened(c->ipc))
    return atomic_load(&c->ipc_theirs->ready) != 0; /* seq_cst: after our flag store */
  return rr__shm_tx_space(c);
}

/* Length and flags of a published slot, checked (each read once: the peer could change
 * them later). A device slot may be larger than a host one. */
static int rr__shm_slot_len(rr__shm_conn *c, uint64_t s, uint32_t *len, uint32_t *flags) {
  *flags = *(volatile uint32_t *)&c->rx_desc[s % c->nslots].flags;
  uint32_t l = *(volatile uint32_t *)&c->rx_desc[s % c->nslots].len;
  if (l == 0 || l > (*flags & RR__SHM_DEVICE ? c->dev_slot : c->slot))
    return rr__shm_corrupt(c, "slot length out of range");
  *len = l;
  return RR_OK;
}

/* Where the bytes of published slot s with length len are. */
static const char *rr__shm_rx_bytes(const rr__shm_conn *c, uint64_t s, uint32_t len) {
  uint32_t i = (uint32_t)(s % c->nslots);
  return len <= RR__SHM_INLINE ? (const char *)c->rx_desc[i].inl : c->rx_data + (size_t)i * c->slot;
}

static void rr__shm_wake(rr__shm_conn *c) {
  char b = 0;
  ssize_t w;
  do w = send(c->sock, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  /* EAGAIN: bytes already wait there, the peer will wake. EPIPE: it is gone; its death
   * shows up as EOF on our side. */
}

/* Read the wake-up bytes waiting on the socket; note EOF. */
static void rr__shm_drain(rr__shm_conn *c) {
  char buf[64];
  while (!c->dead) {
    ssize_t r = recv(c->sock, buf, sizeof buf, MSG_DONTWAIT);
    if (r == (ssize_t)sizeof buf) continue;
    if (r > 0) return;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c->dead = 1;
    c->dead_errno = r < 0 ? errno : 0;
  }
}

/* Opening the peer's device memory failed (its slots: rr__ipc_open_peer, rr__mop_open_peer).
 * A peer that died after publishing them took that memory with it, and the runtime only says
 * the mapping failed (cudaErrorMapBufferObjectFailed). If the lane's socket says the peer is
 * gone (EOF now, or within RR__SHM_GONE_MS: a dying process's files close one by one), the
 * call lost that rank: RR_EPEER naming it. A live peer leaves the CUDA error as it was. */
#define RR__SHM_GONE_MS 250
static int rr__shm_open_failed(rr__shm_conn *c, int st, const char *what) {
  for (const int64_t until = rr__now_ms() + RR__SHM_GONE_MS; !c->dead;) {
    rr__shm_drain(c);
    const int64_t left = until - rr__now_ms();
    if (c->dead || left <= 0) break;
    struct pollfd p = {.fd = c->sock, .events = POLLIN};
    if (poll(&p, 1, (int)left) < 0 && errno != EINTR) break;
  }
  if (!c->dead) return rr__prefix_error(st, "%s rank %d", what, c->base.peer_global);
  char keep[RR__ERRMSG_MAX];
  snprintf(keep, sizeof keep, "%s", rr__error());
  return rr__set_error(RR_EPEER,
                       "%s rank %d: lost rank %d, its process is gone: shared-memory connection "
                       "closed by the peer (%s) (%s)",
                       what, c->base.peer_global, c->base.peer_global,
                       c->dead_errno ? strerror(c->dead_errno) : "end of file", keep);
}

/* Announce that we are about to sleep on what we wait for (plus what an earlier call in
 * this same wait armed), and say whether something changed meanwhile: then the caller must
 * not sleep. The socket is read (a system call) only when a wake-up byte is due, or when
 * we were woken and nothing moved: a stray byte, or EOF (the peer died). */
static int rr__shm_arm(rr__shm_conn *c, int want_rx, int want_tx) {
  if (c->wake_due || c->idle++ > 0) {
    c->wake_due = 0;
    rr__shm_drain(c);
  }
  if (c->dead) return 1;
  int ready = 0;
  if (want_rx || c->armed_rx) {
    atomic_store(&c->rx->rx_wait, 1); /* seq_cst: ordered before the seq load below */
    c->armed_rx = 1;
    RR__SHM_RACE_POINT();
    /* an error is "ready" too: progress reports it */
    ready |= rr__shm_published(c, c->rx_tail, memory_order_seq_cst) != 0;
    /* A stream-memory receive waits for the peer's slots, published before it wakes us. */
    if (c->mq.head) ready |= atomic_load(&c->mop_page->dir[c->lower ? 1 : 0].exp.ready) != 0;
  }
  if (want_tx || c->armed_tx) {
    atomic_store(&c->tx->tx_wait, 1);
    c->armed_tx = 1;
    RR__SHM_RACE_POINT();
    ready |= rr__shm_tx_ready(c) != 0;
  }
  return ready;
}

/* Awake again: take our flags back. A flag the peer already took means its byte is due. */
static void rr__shm_disarm(rr__shm_conn *c) {
  if (c->armed_rx && !atomic_exchange_explicit(&c->rx->rx_wait, 0, memory_order_relaxed))
    c->wake_due = 1;
  if (c->armed_tx && !atomic_exchange_explicit(&c->tx->tx_wait, 0, memory_order_relaxed))
    c->wake_due = 1;
  c->armed_rx = c->armed_tx = 0;
}

/* A sleeping peer is woken as soon as a large slot is published or released (it works on
 * it while we copy the next); after small ones, once at the end of the progress call, so
 * that a header and its data cost one wake-up, not two. */
#define RR__SHM_WAKE_EARLY (16u << 10)

static void rr__shm_wake_if(rr__shm_conn *c, _Atomic uint32_t *flag) {
  if (atomic_load(flag) && atomic_exchange(flag, 0)) rr__shm_wake(c);
}

/* Publish, in order, the device slots whose copies completed (only device slots lie between
 * tx_head and tx_queued: a host message waits behind them). */
static int rr__shm_publish(rr__shm_conn *c, size_t *moved, int *late) {
  while (c->tx_head != c->tx_queued) {
    uint32_t i = (uint32_t)(c->tx_head % c->nslots);
    int d = rr__ipc_put_done(c->ipc, i);
    if (d < 0) return rr__prefix_error(d, "sending to rank %d", c->base.peer_global);
    if (!d) break;
    uint32_t n = c->tx_desc[i].len; /* ours: written when the copy was queued */
    c->tx_head++;
    atomic_store(&c->tx_desc[i].seq, c->tx_head); /* seq_cst, as for host slots */
    RR__SHM_RACE_POINT();
    *moved += n;
    if (c->tx_req[i]) rr__shm_finish(c, c->tx_req[i], 0), c->tx_req[i] = NULL;
    if (n >= RR__SHM_WAKE_EARLY)
      rr__shm_wake_if(c, &c->tx->rx_wait);
    else
      *late = 1;
  }
  return RR_OK;
}

/* Release, in order, the slots read: a device slot once our read of it completed; a host
 * slot read behind one waits for it (the tail is one counter). A device slot's bytes count
 * as moved here, where its request may complete: a caller that polls until something moved
 * (rr__spin) must look at its requests then. */
static int rr__shm_release(rr__shm_conn *c, size_t *moved, int *late) {
  while (c->rx_freed != c->rx_tail) {
    uint32_t i = (uint32_t)(c->rx_freed % c->nslots);
    if (c->rx_dev[i]) {
      int d = rr__ipc_take_done(c->ipc, i);
      if (d < 0) return rr__prefix_error(d, "receiving from rank %d", c->base.peer_global);
      if (!d) break;
      *moved += c->rx_dev[i];
      c->rx_dev[i] = 0;
    }
    c->rx_freed++;
    atomic_store(&c->rx->tail, c->rx_freed); /* seq_cst, then the sender's flag */
    RR__SHM_RACE_POINT();
    *late = 1;
    if (c->rx_req[i]) rr__shm_finish(c, c->rx_req[i], 1), c->rx_req[i] = NULL;
  }
  return RR_OK;
}

/* The first device message of the lane (either way) sets up its device side, on the
 * device of that message, and tells a peer that may be waiting for it. */
static int rr__shm_dev_start(rr__shm_conn *c, const rr__req_dev *dev) {
  if (c->ipc) {
    if (rr__ipc_device(c->ipc) == dev->device) return RR_OK;
    return rr__set_error(RR_EINVAL,
                         "CUDA IPC with rank %d: this lane's device slots are on device %d, "
                         "this call's buffers on device %d (one device per rank and group)",
                         c->base.peer_global, rr__ipc_device(c->ipc), dev->device);
  }
  RR__CHECK(rr__ipc_start(&c->ipc, c->ipc_mine, c->nslots, c->dev_slot, c->self_global,
                          c->base.peer_global, c->peer_pid == (int)getpid()));
  rr__shm_wake_if(c, &c->rx->tx_wait); /* a sender waits for our slots as for a free slot */
  return RR_OK;
}

/* Stream memory operations (transport/cuda_ipc.h): asked for by the call (rr__req_dev.memops),
 * between two processes only (two streams of one context must not wait on each other through
 * memory: such a lane keeps the host hand-off). */
static int rr__shm_mop_wanted(const rr__shm_conn *c, const rr__req *r) {
  return r->dev && r->dev->memops && c->peer_pid != (int)getpid();
}

/* The lane's first such message (either way) starts its side: the flag page registered, the
 * slots it sends from exported; a peer whose receive waits for them is woken. */
static int rr__shm_mop_start(rr__shm_conn *c, const rr__req_dev *dev) {
  if (c->mop) {
    if (rr__mop_device(c->mop) == dev->device) return RR_OK;
    return rr__set_error(RR_EINVAL,
                         "CUDA IPC with rank %d: this lane's device slots are on device %d, "
                         "this call's buffers on device %d (one device per rank and group)",
                         c->base.peer_global, rr__mop_device(c->mop), dev->device);
  }
  /* The host hand-off's receive slots too: a later device send or recv of point to point
   * on this lane counts on them once the lane carried any device message (docs/cuda.md,
   * "Point to point"), and gather, scatter and all_to_all use them. */
  RR__CHECK(rr__shm_dev_start(c, dev));
  RR__CHECK(rr__mop_start(&c->mop, c->mop_page, c->lower, c->nslots, c->dev_slot, c->self_global,
                          c->base.peer_global));
  rr__shm_wake_if(c, &c->tx->rx_wait);
  return RR_OK;
}

/* A stream-memory receive whose sender's slots are not published yet waits in mq, in order;
 * everything behind it too. */
static int rr__shm_mop_pending(rr__shm_conn *c, size_t *moved) {
  while (c->mq.head) {
    rr__req *r = c->mq.head;
    if (!r->signal) {
      int o = rr__mop_open_peer(c->mop);
      if (o < 0) return rr__shm_open_failed(c, o, "receiving from");
      if (!o) break;
    }
    RR__CHECK(rr__mop_recv(c->mop, r));
    rr__reqq_pop(&c->base, &c->mq, 1);
    *moved += r->len ? r->len : 1;
  }
  return RR_OK;
}

static int rr__shm_isend(rr__conn *base, rr__req *r) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  if (rr__shm_mop_wanted(c, r)) {
    RR__CHECK(rr__shm_mop_start(c, r->dev));
    r->done = 0;
    r->complete = 0;
    return rr__mop_send(c->mop, r); /* queued on the stream: complete */
  }
  if (r->signal)
    return rr__set_error(RR_EINVAL, "internal: a device signal without stream memory operations");
  if (r->dev && r->len) RR__CHECK(rr__shm_dev_start(c, r->dev));
  rr__reqq_post(base, &c->sq, r, 0);
  return RR_OK;
}

static int rr__shm_irecv(rr__conn *base, rr__req *r) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  if (rr__shm_mop_wanted(c, r)) {
    RR__CHECK(rr__shm_mop_start(c, r->dev));
    r->done = 0;
    r->complete = 0;
    r->consumed = 0;
    int o = r->signal || c->mq.head ? 1 : rr__mop_open_peer(c->mop);
    if (o < 0) return rr__shm_open_failed(c, o, "receiving from");
    if (!c->mq.head && o) return rr__mop_recv(c->mop, r); /* queued on the stream: complete */
    if (r->len == 0) { /* a signal: a request of no bytes, which reqq_post would complete */
      r->next = NULL;
      if (c->mq.tail)
        c->mq.tail->next = r;
      else
        c->mq.head = r;
      c->mq.tail = r;
      c->base.pending++;
      c->base.rx_pending++;
      return RR_OK;
    }
    rr__reqq_post(base, &c->mq, r, 1);
    return RR_OK;
  }
  if (r->signal)
    return rr__set_error(RR_EINVAL, "internal: a device signal without stream memory operations");
  if (r->dev && r->len) RR__CHECK(rr__shm_dev_start(c, r->dev));
  rr__reqq_post(base, &c->rq, r, 1);
  return RR_OK;
}

static int rr__shm_send_some(rr__shm_conn *c, size_t *moved) {
  int late = 0;
  RR__CHECK(rr__shm_publish(c, moved, &late));
  while (c->sq.head) {
    rr__req *r = c->sq.head;
    int dev = r->dev != NULL;
    if (dev) { /* the peer's device slots: opened once it published them */
      int o = rr__ipc_open_peer(c->ipc, c->ipc_theirs);
      if (o < 0) return rr__shm_open_failed(c, o, "sending to");
      /* Point to point: a peer that has not exported device slots may never (a host
       * buffer, no CUDA at all), and this send may complete before its recv is posted, so
       * it is not waited for: this slot goes as host bytes, copied off the device here. */
      if (!o && !r->p2p) break;
      dev = o;
    }
    if (!dev && c->tx_head != c->tx_queued) {
      break; /* slots go out in order: after the device slots queued before it */
    }
    int sp = rr__shm_tx_space(c);
    if (sp < 0) return sp;
    if (!sp) break;
    size_t n = RR__MIN(r->len - r->done, dev ? c->dev_slot : c->slot);
    uint32_t i = (uint32_t)(c->tx_queued % c->nslots);
    rr__shm_desc *d = &c->tx_desc[i];
    if (dev) {
      /* Host slot tx_queued is free, so the peer saw its read of device slot i complete.
       * Published by rr__shm_publish once this copy completed. */
      RR__CHECK(rr__ipc_put(c->ipc, i, r->buf + r->done, n, r->dev->stream));
      d->flags = RR__SHM_DEVICE;
      d->len = (uint32_t)n;
      c->tx_queued++;
      r->done += n;
      c->tx_req[i] = r->done == r->len ? rr__shm_unlink(&c->sq) : NULL;
      continue;
    }
    char *to = n <= RR__SHM_INLINE ? (char *)d->inl : c->tx_data + (size_t)i * c->slot;
    if (r->dev) {
      /* Waited for: the slot is published below, and the device buffer is ordered on the
       * call's stream (behind the caller's work). */
      int cs = rr__cuda_memcpy_sync(to, r->buf + r->done, n, r->dev->stream);
      if (cs != RR_OK)
        return rr__prefix_error(cs, "sending to rank %d: copying %zu bytes off the device",
                                c->base.peer_global, n);
    } else {
      memcpy(to, r->buf + r->done, n);
    }
    d->flags = 0;
    d->len = (uint32_t)n;
    c->tx_head++;
    c->tx_queued++;
    /* seq_cst: the receiver's flag is read after this store is visible (see the top). */
    atomic_store(&d->seq, c->tx_head);
    RR__SHM_RACE_POINT();
    r->done += n;
    *moved += n;
    if (r->done == r->len) rr__reqq_pop(&c->base, &c->sq, 0);
    if (n >= RR__SHM_WAKE_EARLY)
      rr__shm_wake_if(c, &c->tx->rx_wait);
    else
      late = 1;
  }
  if (late) rr__shm_wake_if(c, &c->tx->rx_wait);
  return RR_OK;
}

static int rr__shm_recv_some(rr__shm_conn *c, size_t *moved) {
  int got = 0, late = 0;
  RR__CHECK(rr__shm_release(c, moved, &late));
  while (c->rq.head) {
    int rd = rr__shm_rx_ready(c);
    if (rd < 0) return rd;
    if (!rd) break;
    if (!c->rx_len) {
      RR__CHECK(rr__shm_slot_len(c, c->rx_tail, &c->rx_len, &c->rx_flags));
    }
    const char *data = rr__shm_rx_bytes(c, c->rx_tail, c->rx_len) + c->rx_off;
    size_t avail = c->rx_len - c->rx_off;
    rr__req *r = c->rq.head;
    size_t take;
    const int dmsg = (c->rx_flags & RR__SHM_DEVICE) != 0;
    /* Read on the device, asynchronously: the slot is released once that read completed. */
    int async = 0;
    if (dmsg != (r->dev != NULL) && !r->p2p)
      return rr__set_error(RR_EMISMATCH,
                           "receiving from rank %d: it sent %s memory where this rank expects "
                           "%s memory: in one call every rank's buffers must be CUDA device "
                           "memory, or none (RR_TRANSPORT=shm stages device buffers instead)",
                           c->base.peer_global, r->dev ? "host" : "device",
                           r->dev ? "device" : "host");
    if (dmsg) {
      /* One request per slot: the whole slot belongs to this request. A device message
       * comes only into slots we exported (a point-to-point receive into host memory
       * included: slots left by an earlier device call of this lane). */
      if (c->rx_off != 0 || avail > r->len - r->done)
        return rr__shm_corrupt(c, "device slot overruns");
      if (!c->ipc) return rr__shm_corrupt(c, "a device message before the device slots");
      take = avail;
      uint32_t i = (uint32_t)(c->rx_tail % c->nslots);
      if (r->dev) {
        int o = rr__ipc_open_peer(c->ipc, c->ipc_theirs);
        if (o == 0) return rr__shm_corrupt(c, "a device message before the device slots");
        if (o < 0) return rr__shm_open_failed(c, o, "receiving from");
        RR__CHECK(rr__ipc_take(c->ipc, i, r, take, r->dev->stream));
        async = 1;
      } else {
        RR__CHECK(rr__ipc_take_host(c->ipc, i, r->buf + r->done, take));
        *moved += take;
      }
      r->done += take;
    } else if (r->dev) {
      /* Point to point: host bytes into a device buffer, copied and waited for on the
       * call's stream before the slot is released below. */
      take = RR__MIN(avail, r->len - r->done);
      int cs = rr__cuda_memcpy_sync(r->buf + r->done, data, take, r->dev->stream);
      if (cs != RR_OK)
        return rr__prefix_error(cs, "receiving from rank %d: copying %zu bytes to the device",
                                c->base.peer_global, take);
      r->done += take;
      *moved += take;
    } else {
      take = rr__req_deliver(r, data, avail); /* straight from shared memory when it can */
      *moved += take;                         /* device bytes: once read (rr__shm_release) */
    }
    c->rx_off += take;
    got = 1;
    int finished = r->done == r->len;
    if (c->rx_off == c->rx_len) { /* the slot is read */
      uint32_t i = (uint32_t)(c->rx_tail % c->nslots);
      int big = c->rx_len >= RR__SHM_WAKE_EARLY;
      c->rx_off = 0;
      c->rx_len = 0;
      c->rx_tail++;
      if (async || c->rx_freed + 1 != c->rx_tail) {
        /* Released by rr__shm_release: once our read completed (device), or behind such a
         * slot; a device request completes with its last slot. */
        c->rx_dev[i] = async ? (uint32_t)take : 0;
        c->rx_req[i] = async && finished ? rr__shm_unlink(&c->rq) : NULL;
        if (async) finished = 0;
      } else {
        c->rx_freed = c->rx_tail;
        atomic_store(&c->rx->tail, c->rx_freed); /* seq_cst, then the sender's flag */
        RR__SHM_RACE_POINT();
        if (big)
          rr__shm_wake_if(c, &c->rx->tx_wait);
        else
          late = 1;
      }
    }
    if (finished) rr__reqq_pop(&c->base, &c->rq, 1);
  }
  if (late) rr__shm_wake_if(c, &c->rx->tx_wait);
  if (got) c->base.last_rx_ms = rr__now_ms_coarse();
  return RR_OK;
}

static int rr__shm_progress(rr__conn *base, size_t *moved) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  if (c->armed_rx | c->armed_tx) rr__shm_disarm(c);
  size_t before = *moved;
  RR__CHECK(rr__shm_send_some(c, moved));
  RR__CHECK(rr__shm_recv_some(c, moved));
  RR__CHECK(rr__shm_mop_pending(c, moved));
  if (*moved != before) c->idle = 0;
  if (!c->dead) return RR_OK;
  /* The peer is gone. What it left in the ring was taken above; what is missing never
   * comes, and sends would wait forever for a free slot. */
  if (c->mq.head)
    return rr__set_error(RR_EPEER,
                         "receiving from rank %d: shared-memory connection closed by the peer "
                         "before it published its device slots (did rank %d exit or crash?)",
                         c->base.peer_global, c->base.peer_global);
  if (c->rq.head)
    return rr__set_error(RR_EPEER,
                         "receiving from rank %d: shared-memory connection closed by the peer "
                         "with %zu bytes still expected (did rank %d exit or crash?)",
                         c->base.peer_global, c->rq.head->len - c->rq.head->done,
                         c->base.peer_global);
  if (c->sq.head)
    return rr__set_error(
        RR_EPEER, "sending to rank %d: shared-memory connection closed by the peer (%s)",
        c->base.peer_global, c->dead_errno ? strerror(c->dead_errno) : "end of file");
  return RR_OK;
}

static int rr__shm_pollfd(rr__conn *base, struct pollfd *pfd) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  int want_rx = c->rq.head != NULL || c->mq.head != NULL, want_tx = c->sq.head != NULL;
  int dev = rr__shm_dev_pending(c);
  if (!want_rx && !want_tx && !dev) return 0;
  pfd->fd = c->sock;
  pfd->events = POLLIN;
  pfd->revents = 0;
  /* POLLOUT is always ready on a live socket: poll() returns at once, progress runs. */
  if (rr__shm_arm(c, want_rx, want_tx)) {
    pfd->events |= POLLOUT;
  } else if (dev) {
    /* Our own device work nobody will wake us for: look again at once (the socket still
     * reports a dead peer), after leaving the core to others (the device's feeders, ranks
     * that outnumber the cores). */
    sched_yield();
    pfd->events |= POLLOUT;
  }
  return 1;
}

static int rr__shm_peek(rr__conn *base, void *buf, size_t len, size_t *got) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  *got = 0;
  uint64_t s = c->rx_tail;
  size_t off = c->rx_off;
  while (*got < len && s - c->rx_tail < c->nslots) {
    int p = rr__shm_published(c, s, memory_order_acquire);
    if (p < 0) return p;
    if (!p) break;
    uint32_t l = s == c->rx_tail ? c->rx_len : 0, fl = s == c->rx_tail ? c->rx_flags : 0;
    if (!l) RR__CHECK(rr__shm_slot_len(c, s, &l, &fl));
    /* A device message has no bytes here (and is never a header); judged on the flags its
     * length was checked with, as a device slot's length may exceed a host slot. */
    if (fl & RR__SHM_DEVICE) break;
    if (off >= l) return rr__shm_corrupt(c, "slot length changed");
    size_t take = RR__MIN(l - off, len - *got);
    memcpy((char *)buf + *got, rr__shm_rx_bytes(c, s, l) + off, take);
    *got += take;
    s++;
    off = 0;
  }
  return RR_OK;
}

static void rr__shm_peekfd(rr__conn *base, struct pollfd *pfd) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  pfd->fd = c->sock;
  pfd->events = POLLIN;
  pfd->revents = 0;
  if (rr__shm_arm(c, 1, 0)) pfd->events |= POLLOUT;
}

const rr__transport rr__shm_transport = {
    .name = "shm",
    .device_msg_max = 64u << 20, /* device slots (RR_IPC_SEG_BYTES's range), not host ones */
    .can_connect = rr__shm_can_connect,
    .setup_sockets = rr__shm_setup_sockets,
    .connect = rr__shm_connect,
    .isend = rr__shm_isend,
    .irecv = rr__shm_irecv,
    .progress = rr__shm_progress,
    .pollfd = rr__shm_pollfd,
    .peek = rr__shm_peek,
    .peekfd = rr__shm_peekfd,
    .close = rr__shm_close,
};
