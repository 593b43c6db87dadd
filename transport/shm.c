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
 * (Past 800 lines: protocol, setup and device messages share the lane's state.)
 *
 * Setup, per pair, in connect() over the pair's TCP control socket: both send a hello
 * (rank, pid, slot wishes); the lower rank also names an abstract-namespace UNIX socket it
 * listens on (pids and a random nonce in the name). The higher rank connects; each side
 * checks with SO_PEERCRED that the other end is the process the rendezvous published; the
 * lower rank passes the memfd over the socket (SCM_RIGHTS), the higher maps it, checks it
 * and acknowledges. One lane per pair: one memory pipe, more lanes would not add bandwidth.
 */
#include "transport/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "transport/comm.h"
#include "transport/cuda_ipc.h"
#include "transport/queue.h"
#include "transport/socket.h"

#define RR__SHM_MAGIC 0x31764d4853525252ull /* "RRRSHMv1" */
#define RR__SHM_VERSION 1u

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

static size_t rr__round_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

void rr__shm_layout_of(uint32_t nslots, size_t slot, rr__shm_layout *l) {
  size_t o = RR__SHM_PAGE; /* page 0: header */
  for (int d = 0; d < 2; d++) l->ring[d] = o, o += sizeof(rr__shm_ring);
  for (int d = 0; d < 2; d++) l->desc[d] = o, o += (size_t)nslots * sizeof(rr__shm_desc);
  for (int d = 0; d < 2; d++) l->ipc[d] = o, o += rr__round_up(sizeof(rr__ipc_export), RR__SHM_CL);
  o = rr__round_up(o, RR__SHM_PAGE);
  for (int d = 0; d < 2; d++) l->data[d] = o, o += (size_t)nslots * slot;
  l->total = o;
}

/* ---- a lane ---- */

typedef struct rr__shm_conn {
  rr__conn base; /* first: the ring sees only this */
  int sock;      /* AF_UNIX stream to the peer: wake-ups, and EOF when it dies */
  char *map;
  size_t map_len;
  uint32_t nslots;
  size_t slot;
  rr__shm_ring *tx, *rx;
  rr__shm_desc *tx_desc, *rx_desc;
  char *tx_data, *rx_data;
  uint64_t tx_head, tx_tail; /* slots we published; the peer's tail as last seen */
  uint64_t rx_tail;          /* slots we released */
  size_t rx_off;             /* bytes of slot rx_tail already handed out */
  uint32_t rx_len;           /* its length, read once (0: not yet read) */
  uint32_t rx_flags;         /* and its flags, read with it */
  int armed_rx, armed_tx;    /* we set rx->rx_wait / tx->tx_wait */
  int wake_due;              /* the peer took a flag of ours: its byte is (or will be) here */
  int idle;                  /* pollfd calls since progress last moved bytes */
  int dead;                  /* the socket hit EOF or an error */
  int dead_errno;
  rr__reqq sq, rq;
  /* Device messages (transport/cuda_ipc.c), started by the first one: what we publish and
   * what the peer does, in the mapping. */
  rr__ipc *ipc;
  rr__ipc_export *ipc_mine, *ipc_theirs;
  int self_global;
  int peer_pid; /* the rendezvous's, checked with SO_PEERCRED at setup */
} rr__shm_conn;

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
  if (c->tx_head - c->tx_tail < c->nslots) return 1;
  uint64_t t = atomic_load_explicit(&c->tx->tail, memory_order_acquire);
  if (t - c->tx_tail > c->tx_head - c->tx_tail) return rr__shm_corrupt(c, "tail out of range");
  c->tx_tail = t;
  return c->tx_head - t < c->nslots;
}

/* Can the head send move? A device message also needs the peer's device slots, which it
 * publishes at its first device message (then it takes our flag, as for a free slot). */
static int rr__shm_tx_ready(rr__shm_conn *c) {
  const rr__req *r = c->sq.head;
  if (r && r->dev && c->ipc && !rr__ipc_opened(c->ipc))
    return atomic_load(&c->ipc_theirs->ready) != 0; /* seq_cst: after our flag store */
  return rr__shm_tx_space(c);
}

/* Length of a published slot, checked (read once: the peer could change it later). */
static int rr__shm_slot_len(rr__shm_conn *c, uint64_t s, uint32_t *len) {
  uint32_t l = *(volatile uint32_t *)&c->rx_desc[s % c->nslots].len;
  if (l == 0 || l > c->slot) return rr__shm_corrupt(c, "slot length out of range");
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
  RR__CHECK(rr__ipc_start(&c->ipc, c->ipc_mine, c->nslots, c->slot, c->self_global,
                          c->base.peer_global, c->peer_pid == (int)getpid()));
  rr__shm_wake_if(c, &c->rx->tx_wait); /* a sender waits for our slots as for a free slot */
  return RR_OK;
}

static int rr__shm_isend(rr__conn *base, rr__req *r) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  if (r->dev && r->len) RR__CHECK(rr__shm_dev_start(c, r->dev));
  rr__reqq_post(base, &c->sq, r, 0);
  return RR_OK;
}

static int rr__shm_irecv(rr__conn *base, rr__req *r) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  if (r->dev && r->len) RR__CHECK(rr__shm_dev_start(c, r->dev));
  rr__reqq_post(base, &c->rq, r, 1);
  return RR_OK;
}

static int rr__shm_send_some(rr__shm_conn *c, size_t *moved) {
  int late = 0;
  while (c->sq.head) {
    rr__req *r = c->sq.head;
    if (r->dev) { /* the peer's device slots: opened once it published them */
      int o = rr__ipc_open_peer(c->ipc, c->ipc_theirs);
      if (o < 0) return rr__prefix_error(o, "sending to rank %d", c->base.peer_global);
      if (!o) break;
    }
    int sp = rr__shm_tx_space(c);
    if (sp < 0) return sp;
    if (!sp) break;
    size_t n = RR__MIN(r->len - r->done, c->slot);
    uint32_t i = (uint32_t)(c->tx_head % c->nslots);
    rr__shm_desc *d = &c->tx_desc[i];
    if (r->dev) {
      /* Host slot tx_head is ours, so the peer released device slot i too (its read of it
       * is ordered by the event the copy waits for). */
      RR__CHECK(rr__ipc_put(c->ipc, i, r->buf + r->done, n, r->dev->stream));
      d->flags = RR__SHM_DEVICE;
    } else {
      memcpy(n <= RR__SHM_INLINE ? (char *)d->inl : c->tx_data + (size_t)i * c->slot,
             r->buf + r->done, n);
      d->flags = 0;
    }
    d->len = (uint32_t)n;
    c->tx_head++;
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
  while (c->rq.head) {
    int rd = rr__shm_rx_ready(c);
    if (rd < 0) return rd;
    if (!rd) break;
    if (!c->rx_len) {
      RR__CHECK(rr__shm_slot_len(c, c->rx_tail, &c->rx_len));
      c->rx_flags = *(volatile uint32_t *)&c->rx_desc[c->rx_tail % c->nslots].flags;
    }
    const char *data = rr__shm_rx_bytes(c, c->rx_tail, c->rx_len) + c->rx_off;
    size_t avail = c->rx_len - c->rx_off;
    rr__req *r = c->rq.head;
    size_t take;
    if (((c->rx_flags & RR__SHM_DEVICE) != 0) != (r->dev != NULL))
      return rr__set_error(RR_EMISMATCH,
                           "receiving from rank %d: it sent %s memory where this rank expects "
                           "%s memory: in one call every rank's buffers must be CUDA device "
                           "memory, or none (RR_TRANSPORT=shm stages device buffers instead)",
                           c->base.peer_global, r->dev ? "host" : "device",
                           r->dev ? "device" : "host");
    if (r->dev) {
      /* One request per slot: the whole slot belongs to this request. */
      if (c->rx_off != 0 || avail > r->len - r->done)
        return rr__shm_corrupt(c, "device slot overruns");
      int o = rr__ipc_open_peer(c->ipc, c->ipc_theirs);
      if (o == 0) return rr__shm_corrupt(c, "a device message before the device slots");
      if (o < 0) return rr__prefix_error(o, "receiving from rank %d", c->base.peer_global);
      take = avail;
      RR__CHECK(rr__ipc_take(c->ipc, (uint32_t)(c->rx_tail % c->nslots), r, take, r->dev->stream));
      r->done += take;
    } else {
      take = rr__req_deliver(r, data, avail); /* straight from shared memory when it can */
    }
    c->rx_off += take;
    *moved += take;
    got = 1;
    if (c->rx_off == c->rx_len) { /* release the slot */
      int big = c->rx_len >= RR__SHM_WAKE_EARLY;
      c->rx_off = 0;
      c->rx_len = 0;
      c->rx_tail++;
      atomic_store(&c->rx->tail, c->rx_tail); /* seq_cst, then the sender's flag */
      RR__SHM_RACE_POINT();
      if (big)
        rr__shm_wake_if(c, &c->rx->tx_wait);
      else
        late = 1;
    }
    if (r->done == r->len) rr__reqq_pop(&c->base, &c->rq, 1);
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
  if (*moved != before) c->idle = 0;
  if (!c->dead) return RR_OK;
  /* The peer is gone. What it left in the ring was taken above; what is missing never
   * comes, and sends would wait forever for a free slot. */
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
  int want_rx = c->rq.head != NULL, want_tx = c->sq.head != NULL;
  if (!want_rx && !want_tx) return 0;
  pfd->fd = c->sock;
  pfd->events = POLLIN;
  pfd->revents = 0;
  /* POLLOUT is always ready on a live socket: poll() returns at once, progress runs. */
  if (rr__shm_arm(c, want_rx, want_tx)) pfd->events |= POLLOUT;
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
    /* A device message has no bytes here (and is never a header). */
    if (*(volatile uint32_t *)&c->rx_desc[s % c->nslots].flags & RR__SHM_DEVICE) break;
    uint32_t l = s == c->rx_tail ? c->rx_len : 0;
    if (!l) RR__CHECK(rr__shm_slot_len(c, s, &l));
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

static void rr__shm_close(rr__conn *base) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  rr__ipc_free(c->ipc);
  if (c->map) munmap(c->map, c->map_len);
  if (c->sock >= 0) close(c->sock);
  free(c);
}

static int rr__shm_can_connect(const rr__peer_info *self, const rr__peer_info *peer) {
  /* RR_TRANSPORT=auto or shm (which only keeps device buffers off CUDA IPC): tcp forces
   * sockets, ib forces verbs. */
  const char *mode = rr__params_get()->transport;
  if (strcmp(mode, "auto") != 0 && strcmp(mode, "shm") != 0) return 0;
  return self->hostid[0] != '\0' && strncmp(self->hostid, peer->hostid, sizeof self->hostid) == 0;
}

static int rr__shm_setup_sockets(const rr__peer_info *self, const rr__peer_info *peer) {
  (void)self;
  (void)peer;
  return 0; /* everything goes through the mapping and one UNIX socket */
}

/* ---- setup ---- */

#define RR__SHM_NAME_MAX 96

/* Sent by both sides over the control socket. Same host, same ABI: sent as is. */
typedef struct rr__shm_hello {
  uint64_t magic;
  int32_t global_rank;
  int32_t pid;
  uint32_t nslots; /* wishes */
  uint32_t version;
  uint64_t slot_bytes;
  char name[RR__SHM_NAME_MAX]; /* the lower rank's socket (abstract; name[0] is '@') */
} rr__shm_hello;

/* Sent with the memfd. */
typedef struct rr__shm_offer {
  uint64_t magic;
  uint64_t total_bytes;
} rr__shm_offer;

/* A slot holds a whole pipeline segment (so the ring can reduce straight out of it); the
 * ring is at least RR__SHM_DEPTH slots deep, RR_SLOTS if larger (docs/shm.md: deeper rings
 * let a sender run ahead while an oversubscribed receiver waits for a core). */
static void rr__shm_wishes(uint32_t *nslots, size_t *slot) {
  const rr__params *p = rr__params_get();
  size_t s = rr__round_up((size_t)p->seg_bytes, RR__SHM_PAGE);
  *slot = RR__MAX(RR__MIN(s, (size_t)RR__SHM_MAX_SLOT), (size_t)RR__SHM_MIN_SLOT);
  int64_t n = RR__MAX(p->slots, (int64_t)RR__SHM_DEPTH);
  *nslots = (uint32_t)RR__MIN(n, (int64_t)RR__SHM_MAX_SLOTS);
}

static int rr__shm_sockaddr(const char *name, struct sockaddr_un *sa, socklen_t *len) {
  size_t n = strnlen(name, RR__SHM_NAME_MAX);
  if (n < 2 || n >= RR__SHM_NAME_MAX || n >= sizeof sa->sun_path || name[0] != '@')
    return rr__set_error(RR_EPROTO, "bad shared-memory socket name");
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  memcpy(sa->sun_path, name, n);
  sa->sun_path[0] = '\0'; /* abstract namespace: nothing on disk to clean up */
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  return RR_OK;
}

/* The process at the other end of a UNIX socket must be the one the rendezvous named. */
static int rr__shm_check_peer(int fd, const rr__peer_info *peer) {
  struct ucred cr;
  socklen_t l = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) != 0)
    return rr__set_error(RR_ESYS, "SO_PEERCRED: %s", strerror(errno));
  if (cr.pid != peer->pid)
    return rr__set_error(RR_EPROTO,
                         "the process on the shared-memory socket is pid %d, not rank %d's "
                         "pid %d (separate pid namespaces? set RR_TRANSPORT=tcp)",
                         (int)cr.pid, peer->global_rank, peer->pid);
  return RR_OK;
}

static int rr__shm_send_fd(int sock, int fd, const rr__shm_offer *o, int64_t deadline_ms) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = {.iov_base = (void *)o, .iov_len = sizeof *o};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  for (;;) {
    ssize_t w = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w == (ssize_t)sizeof *o) return RR_OK;
    if (w >= 0) return rr__set_error(RR_ESYS, "sendmsg: short write");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return rr__set_error(RR_EPEER, "sendmsg: %s", strerror(errno));
    RR__CHECK(rr__sock_wait(sock, POLLOUT, deadline_ms));
  }
}

static int rr__shm_recv_fd(int sock, int *fd, rr__shm_offer *o, int64_t deadline_ms) {
  *fd = -1;
  char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  struct iovec iov = {.iov_base = o, .iov_len = sizeof *o};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  ssize_t r;
  for (;;) {
    RR__CHECK(rr__sock_wait(sock, POLLIN, deadline_ms));
    r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r >= 0) break;
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    return rr__set_error(RR_EPEER, "recvmsg: %s", strerror(errno));
  }
  /* Take every descriptor that came, whatever else is wrong, so none leaks. */
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < nfd; k++) {
      int f;
      memcpy(&f, CMSG_DATA(cm) + k * sizeof(int), sizeof f);
      if (*fd < 0)
        *fd = f;
      else
        close(f);
    }
  }
  if (r == 0) return rr__set_error(RR_EPEER, "the peer closed the socket during setup");
  if (r != (ssize_t)sizeof *o || (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) || *fd < 0)
    return rr__set_error(RR_EPROTO, "malformed shared-memory offer");
  return RR_OK;
}

/* Map the memfd and point a lane at it; `lower` says which ring we send on. */
static int rr__shm_attach(rr__shm_conn *c, int memfd, size_t total, int lower) {
  void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (m == MAP_FAILED)
    return rr__set_error(RR_ESYS, "mmap of %zu bytes: %s", total, strerror(errno));
  c->map = m;
  c->map_len = total;
  rr__shm_layout l;
  rr__shm_layout_of(c->nslots, c->slot, &l);
  int t = lower ? 0 : 1, r = 1 - t;
  c->tx = (rr__shm_ring *)(c->map + l.ring[t]);
  c->rx = (rr__shm_ring *)(c->map + l.ring[r]);
  c->tx_desc = (rr__shm_desc *)(c->map + l.desc[t]);
  c->rx_desc = (rr__shm_desc *)(c->map + l.desc[r]);
  c->tx_data = c->map + l.data[t];
  c->rx_data = c->map + l.data[r];
  c->ipc_mine = (rr__ipc_export *)(c->map + l.ipc[t]);
  c->ipc_theirs = (rr__ipc_export *)(c->map + l.ipc[r]);
  return RR_OK;
}

/* Lower rank: create, seal and fill in the mapping. */
static int rr__shm_create(rr__shm_conn *c, const rr__peer_info *self, const rr__peer_info *peer,
                          size_t total, int *memfd) {
  int fd = memfd_create("ringreduce-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return rr__set_error(RR_ESYS, "memfd_create: %s", strerror(errno));
  int st = RR_OK;
  if (ftruncate(fd, (off_t)total) != 0) {
    st = rr__set_error(RR_ESYS, "ftruncate to %zu bytes: %s", total, strerror(errno));
    goto fail;
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    st = rr__set_error(RR_ESYS, "sealing the memfd: %s", strerror(errno));
    goto fail;
  }
  RR__CHECK_GOTO(rr__shm_attach(c, fd, total, 1), st, fail);
  rr__shm_hdr *h = (rr__shm_hdr *)c->map;
  *h = (rr__shm_hdr){.magic = RR__SHM_MAGIC,
                     .version = RR__SHM_VERSION,
                     .nslots = c->nslots,
                     .slot_bytes = c->slot,
                     .total_bytes = total,
                     .lower_rank = self->global_rank,
                     .higher_rank = peer->global_rank,
                     .lower_pid = self->pid,
                     .higher_pid = peer->pid};
  *memfd = fd;
  return RR_OK;
fail:
  close(fd);
  return st;
}

/* Higher rank: check what the lower rank handed over, then map it. */
static int rr__shm_open(rr__shm_conn *c, const rr__peer_info *self, const rr__peer_info *peer,
                        int memfd, const rr__shm_offer *o, size_t total) {
  struct stat sb;
  if (o->magic != RR__SHM_MAGIC || o->total_bytes != total)
    return rr__set_error(RR_EPROTO, "shared-memory offer does not match the agreed geometry");
  if (fstat(memfd, &sb) != 0) return rr__set_error(RR_ESYS, "fstat: %s", strerror(errno));
  if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != total)
    return rr__set_error(RR_EPROTO, "the shared-memory file has %lld bytes, not %zu",
                         (long long)sb.st_size, total);
  int seals = fcntl(memfd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    return rr__set_error(RR_EPROTO, "the shared-memory file is not sealed against shrinking");
  RR__CHECK(rr__shm_attach(c, memfd, total, 0));
  const rr__shm_hdr *h = (const rr__shm_hdr *)c->map;
  if (h->magic != RR__SHM_MAGIC || h->version != RR__SHM_VERSION || h->nslots != c->nslots ||
      h->slot_bytes != c->slot || h->total_bytes != total || h->lower_rank != peer->global_rank ||
      h->higher_rank != self->global_rank)
    return rr__set_error(RR_EPROTO, "the shared-memory header does not match the agreed setup");
  return RR_OK;
}

static int rr__shm_check_hello(const rr__shm_hello *h, const rr__peer_info *peer, int lower_peer) {
  if (h->magic != RR__SHM_MAGIC || h->version != RR__SHM_VERSION)
    return rr__set_error(RR_EPROTO, "garbage instead of the shared-memory hello");
  if (h->global_rank != peer->global_rank || h->pid != peer->pid)
    return rr__set_error(RR_EPROTO,
                         "shared-memory hello from rank %d pid %d, expected rank %d pid %d",
                         h->global_rank, h->pid, peer->global_rank, peer->pid);
  if (h->nslots < RR__SHM_MIN_SLOTS || h->nslots > RR__SHM_MAX_SLOTS ||
      h->slot_bytes < RR__SHM_MIN_SLOT || h->slot_bytes > RR__SHM_MAX_SLOT ||
      h->slot_bytes % RR__SHM_PAGE)
    return rr__set_error(RR_EPROTO, "shared-memory hello with a bad geometry");
  if (lower_peer && (h->name[0] != '@' || !memchr(h->name, '\0', sizeof h->name)))
    return rr__set_error(RR_EPROTO, "shared-memory hello without a socket name");
  return RR_OK;
}

static int rr__shm_connect(const rr__peer_info *self, const rr__peer_info *peer, int peer_rank,
                           const int *fds, int nfds, int ctrl_fd, int64_t deadline_ms,
                           rr__conn **conns, int max_lanes, int *nlanes) {
  int st = RR_OK, lfd = -1, sock = -1, memfd = -1;
  for (int i = 0; i < nfds; i++) close(fds[i]); /* none are asked for */
  const int lower = self->global_rank < peer->global_rank;
  rr__shm_conn *c = rr__calloc(1, sizeof *c);
  if (!c) return RR_ENOMEM;
  c->sock = -1;
  if (max_lanes < 1) {
    st = rr__set_error(RR_EINVAL, "shm: no room for a lane");
    goto fail;
  }

  rr__shm_hello mine = {.magic = RR__SHM_MAGIC,
                        .version = RR__SHM_VERSION,
                        .global_rank = self->global_rank,
                        .pid = self->pid};
  rr__shm_wishes(&mine.nslots, &mine.slot_bytes);
  if (lower) {
    uint64_t nonce;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) nonce = (uint64_t)rr__now_ns();
    snprintf(mine.name, sizeof mine.name, "@ringreduce-shm/%d/%d/%016llx", self->pid, peer->pid,
             (unsigned long long)nonce);
    struct sockaddr_un sa;
    socklen_t sl = 0;
    RR__CHECK_GOTO(rr__shm_sockaddr(mine.name, &sa, &sl), st, fail);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0) {
      st = rr__set_error(RR_ESYS, "socket(AF_UNIX): %s", strerror(errno));
      goto fail;
    }
    if (bind(lfd, (struct sockaddr *)&sa, sl) != 0 || listen(lfd, 4) != 0) {
      st = rr__set_error(RR_ESYS, "listening on an abstract UNIX socket: %s", strerror(errno));
      goto fail;
    }
  }
  /* Both hellos are small: the sends never wait on each other. */
  rr__shm_hello theirs;
  RR__CHECK_GOTO(rr__sock_send_all(ctrl_fd, &mine, sizeof mine, deadline_ms), st, fail);
  /* A peer that failed before its hello sent an ABORT instead: leave it for the bootstrap
   * to read (it says why), rather than taking its bytes for a garbled hello. */
  if (rr__ctl_next_is_ctl(ctrl_fd, deadline_ms)) {
    st = rr__set_error(RR_EPEER, "rank %d gave up before its shared-memory hello",
                       peer->global_rank);
    goto fail;
  }
  RR__CHECK_GOTO(rr__sock_recv_all(ctrl_fd, &theirs, sizeof theirs, deadline_ms), st, fail);
  RR__CHECK_GOTO(rr__shm_check_hello(&theirs, peer, !lower), st, fail);
  c->nslots = RR__MAX(mine.nslots, theirs.nslots);
  c->slot = (size_t)RR__MAX(mine.slot_bytes, theirs.slot_bytes);
  rr__shm_layout l;
  rr__shm_layout_of(c->nslots, c->slot, &l);
  rr__shm_offer offer = {.magic = RR__SHM_MAGIC, .total_bytes = l.total};

  if (lower) {
    RR__CHECK_GOTO(rr__shm_create(c, self, peer, l.total, &memfd), st, fail);
    /* Anyone on the host can see the name: accept until the right process shows up. */
    for (;;) {
      RR__CHECK_GOTO(rr__sock_accept(lfd, deadline_ms, &sock, NULL), st, fail);
      if (rr__shm_check_peer(sock, peer) == RR_OK) break;
      RR__LOG_WARN(RR__SUB_INIT, "shm: refused a stranger on the socket for rank %d: %s",
              peer->global_rank, rr__error());
      close(sock);
      sock = -1;
    }
    close(lfd);
    lfd = -1;
    RR__CHECK_GOTO(rr__shm_send_fd(sock, memfd, &offer, deadline_ms), st, fail);
    close(memfd);
    memfd = -1;
    char ack = 0;
    RR__CHECK_GOTO(rr__sock_recv_all(sock, &ack, 1, deadline_ms), st, fail);
    if (ack != 'K') {
      st = rr__set_error(RR_EPROTO, "rank %d refused the shared memory", peer->global_rank);
      goto fail;
    }
  } else {
    struct sockaddr_un sa;
    socklen_t sl = 0;
    RR__CHECK_GOTO(rr__shm_sockaddr(theirs.name, &sa, &sl), st, fail);
    sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) {
      st = rr__set_error(RR_ESYS, "socket(AF_UNIX): %s", strerror(errno));
      goto fail;
    }
    int rc;
    do rc = connect(sock, (struct sockaddr *)&sa, sl);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      st = rr__set_error(RR_ESYS,
                         "connecting to rank %d's shared-memory socket: %s (ranks in different "
                         "network namespaces with one RR_HOSTID? set RR_TRANSPORT=tcp)",
                         peer->global_rank, strerror(errno));
      goto fail;
    }
    RR__CHECK_GOTO(rr__shm_check_peer(sock, peer), st, fail);
    rr__shm_offer got;
    RR__CHECK_GOTO(rr__shm_recv_fd(sock, &memfd, &got, deadline_ms), st, fail);
    RR__CHECK_GOTO(rr__shm_open(c, self, peer, memfd, &got, l.total), st, fail);
    close(memfd);
    memfd = -1;
    RR__CHECK_GOTO(rr__sock_send_all(sock, "K", 1, deadline_ms), st, fail);
  }
  RR__CHECK_GOTO(rr__sock_nonblock(sock, 1), st, fail);
  c->sock = sock;
  sock = -1;
  c->base.tp = &rr__shm_transport;
  c->base.peer = peer_rank;
  c->base.peer_global = peer->global_rank;
  c->self_global = self->global_rank;
  c->peer_pid = peer->pid;
  c->base.lane = 0;
  c->base.last_rx_ms = rr__now_ms_coarse();
  conns[0] = &c->base;
  *nlanes = 1;
  RR__LOG_INFO(RR__SUB_INIT, "shm: rank %d <-> rank %d: %u slots of %zu KiB each way (%zu KiB mapped)",
          self->global_rank, peer->global_rank, c->nslots, c->slot >> 10, l.total >> 10);
  return RR_OK;
fail:
  if (lfd >= 0) close(lfd);
  if (sock >= 0) close(sock);
  if (memfd >= 0) close(memfd);
  rr__shm_close(&c->base);
  return st;
}

const rr__transport rr__shm_transport = {
    .name = "shm",
    .device_msgs = 1,
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
