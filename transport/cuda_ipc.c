/* CUDA IPC: the device side of a shared-memory lane. The protocol is in cuda_ipc.h; this file
 * owns the slots and events, their export and import, and the two queued operations. Every
 * CUDA call goes through cuda/cuda.h (the table), so the host fake of the tests runs it. */
#include "transport/cuda_ipc.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"

struct rr__ipc {
  int device;
  int self_global, peer_global;
  uint32_t nslots;
  size_t slot;
  /* Ours: the slots we receive into; done[i] behind our read of slot i, sent[i] behind our
   * copy into the peer's slot i. Plain events: only this process records or queries them. */
  char *slots;
  void *done[RR__IPC_MAX_SLOTS], *sent[RR__IPC_MAX_SLOTS];
  /* The peer's slots, once opened (opened: closed by us; same process: a borrowed pointer). */
  int opened, same_process; /* same process: set at start, from the lane's checked pid */
  char *peer_slots;
  rr__ipc_export *mine, *theirs; /* in the pair's mapping (theirs: once opened) */
};

static atomic_ullong rr__ipc_nseg;

/* Threads of one process see each other's export through two mappings of one file, at two
 * addresses: a thread sanitizer cannot see that the `ready` flag orders the objects behind
 * the pointers (events made by the other thread). Taking this lock after making them and
 * again after seeing the flag states that order where it can see it (setup only). */
static pthread_mutex_t rr__ipc_publish = PTHREAD_MUTEX_INITIALIZER;

static void rr__ipc_publish_point(void) {
  pthread_mutex_lock(&rr__ipc_publish);
  pthread_mutex_unlock(&rr__ipc_publish);
}

uint64_t rr__ipc_segments(void) {
  return atomic_load(&rr__ipc_nseg);
}

int rr__ipc_opened(const rr__ipc *x) {
  return x->opened;
}
int rr__ipc_device(const rr__ipc *x) {
  return x->device;
}

/* Is the peer gone? EOF (or a reset) on the lane's socket, or no process peer_pid. Reads
 * what waits on the socket (wake-up bytes: the lane is being torn down). */
static int rr__ipc_peer_gone(int sock, int peer_pid) {
  if (peer_pid > 0 && kill(peer_pid, 0) != 0 && errno == ESRCH) return 1;
  if (sock < 0) return 0;
  char b[64];
  for (;;) {
    ssize_t r = recv(sock, b, sizeof b, MSG_DONTWAIT);
    if (r > 0) continue;
    if (r < 0 && errno == EINTR) continue;
    return !(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  }
}

/* The exporter's side of the close hand-shake (cuda_ipc.h, rr__ipc_free): until the peer that
 * mapped our memory closed it, is gone, or RR__IPC_CLOSE_MS passed. */
#define RR__IPC_CLOSE_MS 5000
static void rr__ipc_wait_closed(const _Atomic uint32_t *mapped, const _Atomic uint32_t *closed,
                                int sock, int peer_pid, int self, int peer, const char *what) {
  if (!atomic_load(mapped)) return;
  const int64_t until = rr__now_ms() + RR__IPC_CLOSE_MS;
  while (!atomic_load(closed)) {
    const int gone = rr__ipc_peer_gone(sock, peer_pid);
    if (gone || rr__now_ms() >= until) {
      if (!gone)
        RR__LOG_WARN(RR__SUB_INIT,
                     "cuda_ipc: rank %d -> rank %d: freeing %s before rank %d closed its "
                     "mapping of them (waited 5 s)",
                     self, peer, what, peer);
      return;
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

void rr__ipc_free(rr__ipc *x, int sock, int peer_pid) {
  if (!x) return;
  /* On the slots' device (the closing thread may never have chosen it). */
  int prev = -1;
  int on = rr__cuda_set_device(x->device, &prev) == RR_OK;
  /* A call that failed (a peer died) can leave our copies into the peer's slots queued:
   * they must be done before its memory is unmapped. They wait for nothing of the peer's. */
  for (uint32_t i = 0; i < x->nslots; i++)
    if (x->sent[i]) (void)rr__cuda_event_sync(x->sent[i]); /* a device error: nothing to do */
  if (x->opened && !x->same_process) rr__cuda_ipc_close_mem(x->peer_slots);
  if (x->theirs) atomic_store(&x->theirs->closed, 1);
  for (uint32_t i = 0; i < x->nslots; i++) {
    rr__cuda_event_destroy(x->done[i]);
    rr__cuda_event_destroy(x->sent[i]);
  }
  if (x->mine)
    rr__ipc_wait_closed(&x->mine->mapped, &x->mine->closed, sock, peer_pid, x->self_global,
                        x->peer_global, "the device slots it receives into");
  rr__cuda_free(x->slots); /* waits for the device first: our reads of the slots */
  if (on) rr__cuda_restore_device(prev);
  free(x);
}

int rr__ipc_start(rr__ipc **out, rr__ipc_export *mine, uint32_t nslots, size_t slot,
                  int self_global, int peer_global, int same_process) {
  *out = NULL;
  if (nslots > RR__IPC_MAX_SLOTS)
    return rr__set_error(RR_EINVAL, "CUDA IPC: %u slots, at most %d", nslots, RR__IPC_MAX_SLOTS);
  rr__ipc *x = rr__calloc(1, sizeof *x);
  if (!x) return RR_ENOMEM;
  x->nslots = nslots;
  x->slot = slot;
  x->self_global = self_global;
  x->peer_global = peer_global;
  x->same_process = same_process;
  x->mine = mine;
  int st = rr__cuda_get_device(&x->device);
  if (st == RR_OK) st = rr__cuda_malloc((void **)&x->slots, (size_t)nslots * slot);
  for (uint32_t i = 0; st == RR_OK && i < nslots; i++) {
    st = rr__cuda_event_create(&x->done[i]);
    if (st == RR_OK) st = rr__cuda_event_create(&x->sent[i]);
  }
  if (st == RR_OK) st = rr__cuda_ipc_mem_handle(&mine->slots, x->slots);
  if (st != RR_OK) {
    rr__ipc_free(x, -1, 0); /* never published: nobody maps them */
    return rr__prefix_error(st, "CUDA IPC with rank %d: setting up %u device slots of %zu KiB",
                            peer_global, nslots, slot >> 10);
  }
  mine->pid = (int32_t)getpid();
  mine->device = x->device;
  mine->nslots = nslots;
  mine->slot_bytes = slot;
  mine->slots_ptr = (uint64_t)(uintptr_t)x->slots;
  rr__ipc_publish_point();
  atomic_store(&mine->ready, 1); /* seq_cst: the fields above are visible before it */
  RR__LOG_INFO(RR__SUB_INIT,
               "cuda_ipc: rank %d -> rank %d: %u device slots of %zu KiB on device %d", peer_global,
               self_global, nslots, slot >> 10, x->device);
  *out = x;
  return RR_OK;
}

int rr__ipc_open_peer(rr__ipc *x, rr__ipc_export *theirs) {
  if (x->opened) return 1;
  if (!atomic_load(&theirs->ready)) return 0;
  /* Read once each (the peer could change them later), then checked. */
  rr__ipc_export t;
  memcpy((char *)&t + sizeof t.ready, (const char *)theirs + sizeof t.ready,
         sizeof t - sizeof t.ready);
  if (t.nslots != x->nslots || t.slot_bytes != x->slot)
    return rr__set_error(RR_EPROTO,
                         "CUDA IPC with rank %d: its device slots (%u of %llu bytes) do not "
                         "match the shared-memory lane's (%u of %zu)",
                         x->peer_global, t.nslots, (unsigned long long)t.slot_bytes, x->nslots,
                         x->slot);
  if (x->same_process) {
    /* Threads of one process: the runtime refuses to open our own handles; use the
     * pointers. */
    rr__ipc_publish_point();
    x->peer_slots = (char *)(uintptr_t)t.slots_ptr;
    x->opened = 1;
    RR__LOG_INFO(RR__SUB_INIT,
                 "cuda_ipc: rank %d -> rank %d: its device slots by pointer (same process)",
                 x->self_global, x->peer_global);
    return 1;
  }
  /* Said before the open, so that the peer's free cannot miss a mapping (cuda_ipc.h). */
  atomic_store(&theirs->mapped, 1);
  x->theirs = theirs; /* closed is set at our free, or below */
  int st = rr__cuda_ipc_open_mem((void **)&x->peer_slots, &t.slots);
  if (st != RR_OK) {
    atomic_store(&theirs->closed, 1);
    x->peer_slots = NULL;
    return rr__prefix_error(st,
                            "CUDA IPC with rank %d (pid %d, device %d): opening its device "
                            "slots (CUDA IPC between these processes refused? "
                            "RR_TRANSPORT=shm stages through host memory instead)",
                            x->peer_global, (int)t.pid, (int)t.device);
  }
  x->opened = 1;
  RR__LOG_INFO(RR__SUB_INIT,
               "cuda_ipc: rank %d -> rank %d: opened its device slots (device %d, pid %d)",
               x->self_global, x->peer_global, (int)t.device, (int)t.pid);
  return 1;
}

int rr__ipc_put(rr__ipc *x, uint32_t i, const void *src, size_t n, void *stream) {
  char *slot = x->peer_slots + (size_t)i * x->slot;
  /* No wait on the device: the host slot is ours only after the peer saw its read of this
   * device slot complete (rr__ipc_take_done) and released it. */
  int st = rr__cuda_memcpy_async(slot, src, n, stream);
  if (st == RR_OK) st = rr__cuda_event_record(x->sent[i], stream);
  if (st != RR_OK)
    return rr__prefix_error(st, "CUDA IPC: sending %zu bytes to rank %d (slot %u)", n,
                            x->peer_global, i);
  atomic_fetch_add_explicit(&rr__ipc_nseg, 1, memory_order_relaxed);
  return RR_OK;
}

/* One of our events, polled from the lane's progress: the host decides when the peer may
 * see the slot, so the peer's device never waits for ours. */
static int rr__ipc_poll(rr__ipc *x, void *ev, uint32_t i, const char *what) {
  int d = rr__cuda_event_done(ev);
  if (d < 0)
    return rr__prefix_error(d, "CUDA IPC with rank %d: waiting for %s slot %u", x->peer_global,
                            what, i);
  return d;
}

int rr__ipc_put_done(rr__ipc *x, uint32_t i) {
  return rr__ipc_poll(x, x->sent[i], i, "the copy into its");
}

int rr__ipc_take_done(rr__ipc *x, uint32_t i) {
  return rr__ipc_poll(x, x->done[i], i, "the read of our");
}

int rr__ipc_take(rr__ipc *x, uint32_t i, rr__req *r, size_t n, void *stream) {
  char *slot = x->slots + (size_t)i * x->slot;
  /* No wait on the device: the sender published the slot only after its copy completed. */
  int st = RR_OK;
  if (r->consume && r->done == 0 && n == r->len) {
    r->consume(r, slot, n); /* the ring's kernel reads the slot on this stream */
    r->consumed = 1;
  } else if (r->consume) {
    st = rr__set_error(RR_EINVAL,
                       "internal: a device segment of %zu bytes from rank %d does not fit "
                       "one %zu-byte slot",
                       r->len, x->peer_global, x->slot);
  } else {
    st = rr__cuda_memcpy_async(r->buf + r->done, slot, n, stream);
  }
  /* Behind the read: the slot is released (and the sender may overwrite it) once this
   * completes. */
  if (st == RR_OK) st = rr__cuda_event_record(x->done[i], stream);
  if (st != RR_OK)
    return rr__prefix_error(st, "CUDA IPC: receiving %zu bytes from rank %d (slot %u)", n,
                            x->peer_global, i);
  return RR_OK;
}

int rr__ipc_take_host(rr__ipc *x, uint32_t i, void *dst, size_t n) {
  /* A host buffer's thread may never have chosen the slots' device. The sender published
   * the slot once its copy completed, so nothing on the device precedes this read; it is
   * synchronous, so the slot may be released as soon as it returns. */
  int prev = -1;
  int st = rr__cuda_set_device(x->device, &prev);
  if (st == RR_OK) {
    st = rr__cuda_memcpy_sync(dst, x->slots + (size_t)i * x->slot, n, NULL);
    rr__cuda_restore_device(prev);
  }
  if (st != RR_OK)
    return rr__prefix_error(st,
                            "CUDA IPC: receiving %zu bytes from rank %d (slot %u) into "
                            "host memory",
                            n, x->peer_global, i);
  return RR_OK;
}

/* ---- stream memory operations (cuda_ipc.h) ---- */

struct rr__mop {
  int device, self_global, peer_global;
  uint32_t nslots, epoch0;
  size_t slot;
  rr__mop_page *pg; /* in the pair's mapping, as the host sees it */
  char *pg_dev;     /* its device pointer (registered: NULL until then) */
  size_t pg_bytes;
  rr__mop_dir *tx, *rx; /* our direction (we send) and the peer's */
  char *slots;          /* ours, device memory: what we send sits here until read */
  char *peer_slots;     /* the peer's, once opened */
  int opened;
  /* Segments and signals queued each way over the lane's life: both sides count alike. */
  uint64_t tx_n, rx_n, sig_tx, sig_rx;
  int released; /* the host satisfied our waits after a failed call: no further use */
  /* The last segment we sent by pull (counted as tx_n counts) and not fenced yet. */
  uint64_t pull_t;
  int pull_pending;
};

static atomic_ullong rr__mop_nseg, rr__mop_nslot_bytes, rr__mop_npulled;

uint64_t rr__mop_slot_bytes(void) {
  return atomic_load(&rr__mop_nslot_bytes);
}
uint64_t rr__mop_pulled(void) {
  return atomic_load(&rr__mop_npulled);
}

uint64_t rr__mop_segments(void) {
  return atomic_load(&rr__mop_nseg);
}

size_t rr__mop_host_page(void) {
  const long p = sysconf(_SC_PAGESIZE);
  return p > 4096 ? (size_t)p : 4096;
}

size_t rr__mop_area(size_t page) {
  const size_t a = page > 4096 ? page : 4096;
  return (sizeof(rr__mop_page) + a - 1) / a * a;
}

void rr__mop_page_init(rr__mop_page *pg, uint32_t epoch0) {
  memset(pg, 0, sizeof *pg);
  pg->epoch0 = epoch0;
  for (int d = 0; d < 2; d++) {
    for (int i = 0; i < RR__IPC_MAX_SLOTS; i++) {
      atomic_store(&pg->dir[d].ready[i], epoch0);
      atomic_store(&pg->dir[d].freed[i], epoch0);
    }
    atomic_store(&pg->dir[d].sig, epoch0);
  }
  pg->magic = RR__MOP_MAGIC;
}

int rr__mop_device(const rr__mop *m) {
  return m->device;
}

/* The device address of a word of the page (host view w). */
static void *rr__mop_dev(const rr__mop *m, const _Atomic uint32_t *w) {
  return m->pg_dev + ((const char *)w - (const char *)m->pg);
}

/* The epoch of segment t of a direction. */
static uint32_t rr__mop_epoch(const rr__mop *m, uint64_t t) {
  return m->epoch0 + (uint32_t)(t / m->nslots) + 1u;
}

/* The peer's kernels read the slots we send from, in its own time: a call of ours completes
 * once our copies into them did, not once the peer read them. Before the slots are freed,
 * wait until the peer released the last segment of each (its freed words, in the shared page)
 * or its process is gone; bounded, as a peer may also be stuck. Not after a failed call whose
 * waits were released: the peer's reads of that call may never come. */
#define RR__MOP_DRAIN_MS 5000
static void rr__mop_drain(const rr__mop *m, int peer_pid) {
  if (!m->tx_n || m->released) return;
  const int64_t until = rr__now_ms() + RR__MOP_DRAIN_MS;
  for (uint32_t i = 0; i < m->nslots && i < m->tx_n; i++) {
    const uint64_t last = i + (m->tx_n - 1 - i) / m->nslots * m->nslots; /* its last segment */
    const uint32_t e = rr__mop_epoch(m, last);
    while ((int32_t)(atomic_load(&m->tx->freed[i]) - e) < 0) {
      if ((peer_pid > 0 && kill(peer_pid, 0) != 0 && errno == ESRCH) || rr__now_ms() >= until) {
        RR__LOG_WARN(RR__SUB_INIT,
                     "cuda_ipc: rank %d -> rank %d: freeing the device slots it sends from "
                     "before rank %d released slot %u (%s)",
                     m->self_global, m->peer_global, m->peer_global, i,
                     rr__now_ms() >= until ? "waited 5 s" : "its process is gone");
        return;
      }
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
}

void rr__mop_free(rr__mop *m, int peer_pid, int sock) {
  if (!m) return;
  rr__mop_drain(m, peer_pid);
  int prev = -1;
  int on = rr__cuda_set_device(m->device, &prev) == RR_OK;
  if (m->opened) rr__cuda_ipc_close_mem(m->peer_slots);
  if (m->opened) atomic_store(&m->rx->exp.closed, 1);
  rr__ipc_wait_closed(&m->tx->exp.mapped, &m->tx->exp.closed, sock, peer_pid, m->self_global,
                      m->peer_global, "the device slots it sends from");
  rr__cuda_free(m->slots); /* waits for the device first */
  if (m->pg_dev) rr__cuda_host_unregister(m->pg);
  if (on) rr__cuda_restore_device(prev);
  free(m);
}

int rr__mop_start(rr__mop **out, rr__mop_page *pg, int lower, uint32_t nslots, size_t slot,
                  int self_global, int peer_global) {
  *out = NULL;
  if (nslots > RR__IPC_MAX_SLOTS || nslots == 0)
    return rr__set_error(RR_EINVAL, "CUDA IPC: %u slots, at most %d", nslots, RR__IPC_MAX_SLOTS);
  if (pg->magic != RR__MOP_MAGIC)
    return rr__set_error(RR_EPROTO, "shared memory with rank %d: its flag page is corrupt",
                         peer_global);
  rr__mop *m = rr__calloc(1, sizeof *m);
  if (!m) return RR_ENOMEM;
  *m = (rr__mop){.self_global = self_global,
                 .peer_global = peer_global,
                 .nslots = nslots,
                 .slot = slot,
                 .pg = pg,
                 .epoch0 = pg->epoch0,                          /* read once */
                 .pg_bytes = rr__mop_area(rr__mop_host_page()), /* as the layout's */
                 .tx = &pg->dir[lower ? 0 : 1],
                 .rx = &pg->dir[lower ? 1 : 0]};
  void *dptr = NULL;
  int st = rr__cuda_get_device(&m->device);
  if (st == RR_OK) st = rr__cuda_host_register(pg, m->pg_bytes, &dptr);
  if (st == RR_OK) m->pg_dev = dptr;
  if (st == RR_OK) st = rr__cuda_malloc((void **)&m->slots, (size_t)nslots * slot);
  rr__mop_export *e = &m->tx->exp;
  if (st == RR_OK) st = rr__cuda_ipc_mem_handle(&e->slots, m->slots);
  if (st != RR_OK) {
    rr__mop_free(m, 0, -1); /* never published: nobody maps them */
    return rr__prefix_error(st,
                            "CUDA IPC with rank %d: setting up stream memory operations "
                            "(%u device slots of %zu KiB, the pair's flag page)",
                            peer_global, nslots, slot >> 10);
  }
  e->pid = (int32_t)getpid();
  e->device = m->device;
  e->nslots = nslots;
  e->slot_bytes = slot;
  e->slots_ptr = (uint64_t)(uintptr_t)m->slots;
  rr__ipc_publish_point();
  atomic_store(&e->ready, 1); /* seq_cst: the fields above first */
  RR__LOG_INFO(RR__SUB_INIT,
               "cuda_ipc: rank %d -> rank %d: stream memory operations, %u device slots of %zu "
               "KiB on device %d",
               self_global, peer_global, nslots, slot >> 10, m->device);
  *out = m;
  return RR_OK;
}

int rr__mop_open_peer(rr__mop *m) {
  if (m->opened) return 1;
  const rr__mop_export *theirs = &m->rx->exp;
  if (!atomic_load(&theirs->ready)) return 0;
  rr__mop_export t;
  memcpy((char *)&t + sizeof t.ready, (const char *)theirs + sizeof t.ready,
         sizeof t - sizeof t.ready);
  if (t.nslots != m->nslots || t.slot_bytes != m->slot)
    return rr__set_error(RR_EPROTO,
                         "CUDA IPC with rank %d: its device slots (%u of %llu bytes) do not "
                         "match the shared-memory lane's (%u of %zu)",
                         m->peer_global, t.nslots, (unsigned long long)t.slot_bytes, m->nslots,
                         m->slot);
  atomic_store(&m->rx->exp.mapped, 1); /* before the open: the peer's free waits for closed */
  int st = rr__cuda_ipc_open_mem((void **)&m->peer_slots, &t.slots);
  if (st != RR_OK) atomic_store(&m->rx->exp.closed, 1);
  if (st != RR_OK)
    return rr__prefix_error(st,
                            "CUDA IPC with rank %d (pid %d, device %d): opening the device "
                            "slots it sends from (RR_TRANSPORT=shm stages through host memory "
                            "instead)",
                            m->peer_global, (int)t.pid, (int)t.device);
  rr__ipc_publish_point();
  m->opened = 1;
  return 1;
}

/* The lane goes on the call's list of lanes its stream waits on (rr__dev_release). */
static int rr__mop_note(rr__mop *m, const rr__req *r) {
  rr__dev_waits *w = r->dev->waits;
  if (m->released)
    return rr__set_error(RR_ESTATE,
                         "CUDA IPC with rank %d: the lane's flag words were released after a "
                         "failed call",
                         m->peer_global);
  if (!w)
    return rr__set_error(RR_EINVAL, "internal: a stream-memory message without its call's waits");
  for (int i = 0; i < w->n; i++)
    if (w->lane[i] == m) return RR_OK;
  if (w->n == RR__DEV_WAITS_MAX)
    return rr__set_error(RR_EINVAL, "internal: a call waits on more than %d lanes",
                         RR__DEV_WAITS_MAX);
  w->lane[w->n++] = m;
  return RR_OK;
}

/* The counts move before anything is queued, so that a release covers a wait queued by a
 * call that then failed half way. */
int rr__mop_send(rr__mop *m, rr__req *r) {
  RR__CHECK(rr__mop_note(m, r));
  void *s = r->dev->stream;
  int st;
  if (r->signal) {
    uint64_t k = ++m->sig_tx;
    st = rr__cuda_write_value(s, rr__mop_dev(m, &m->tx->sig), m->epoch0 + (uint32_t)k);
  } else {
    if (r->len > m->slot)
      return rr__set_error(RR_EINVAL, "internal: a device segment of %zu bytes, slots of %zu",
                           r->len, m->slot);
    const uint64_t t = m->tx_n++;
    const uint32_t i = (uint32_t)(t % m->nslots), e = rr__mop_epoch(m, t);
    if (r->pull) {
      /* The receiver reads the segment where it is: only the flag (cuda_ipc.h, "pull"). */
      st = rr__cuda_write_value(s, rr__mop_dev(m, &m->tx->ready[i]), e);
      m->pull_t = t;
      m->pull_pending = 1;
    } else {
      st = rr__cuda_wait_value(s, rr__mop_dev(m, &m->tx->freed[i]), e - 1);
      if (st == RR_OK)
        st = rr__cuda_memcpy_async(m->slots + (size_t)i * m->slot, r->buf, r->len, s);
      if (st == RR_OK) st = rr__cuda_write_value(s, rr__mop_dev(m, &m->tx->ready[i]), e);
      atomic_fetch_add_explicit(&rr__mop_nslot_bytes, r->len, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&rr__mop_nseg, 1, memory_order_relaxed);
  }
  if (st != RR_OK)
    return rr__prefix_error(st, "CUDA IPC: sending %zu bytes to rank %d", r->len, m->peer_global);
  r->done = r->len;
  r->complete = 1;
  return RR_OK;
}

/* Where a pulled segment is: the sender's buffer (its description came with the call),
 * mapped through the call's cache, plus the segment's offset. */
static int rr__mop_pull_src(rr__mop *m, const rr__req *r, const char **out) {
  const rr__ipc_pull *pl = r->dev->pull;
  if (r->consume || !pl || !pl->theirs.ok)
    return rr__set_error(RR_EINVAL, "internal: a pull from rank %d without its description",
                         m->peer_global);
  if (r->pull_off > pl->theirs.len || r->len > pl->theirs.len - r->pull_off)
    return rr__set_error(RR_EPROTO,
                         "rank %d's buffer (%llu bytes) does not hold the %zu bytes at %zu this "
                         "rank pulls from it",
                         m->peer_global, (unsigned long long)pl->theirs.len, r->len, r->pull_off);
  char *base = NULL;
  int o = rr__ipc_map(pl->cache, pl->from, m->peer_global, &pl->theirs.out, pl->theirs.len, &base);
  if (o < 0) return o;
  *out = base + r->pull_off;
  return RR_OK;
}

int rr__mop_recv(rr__mop *m, rr__req *r) {
  RR__CHECK(rr__mop_note(m, r));
  void *s = r->dev->stream;
  int st;
  r->consumed = 0;
  if (r->signal) {
    uint64_t k = ++m->sig_rx;
    st = rr__cuda_wait_value(s, rr__mop_dev(m, &m->rx->sig), m->epoch0 + (uint32_t)k);
  } else {
    if (!m->opened || r->len > m->slot)
      return rr__set_error(RR_EINVAL, "internal: a device receive of %zu bytes from rank %d %s",
                           r->len, m->peer_global,
                           m->opened ? "exceeds a slot" : "before its slots");
    /* A pull reads the sender's buffer, mapped before the counts move. */
    const char *from = NULL;
    if (r->pull) RR__CHECK(rr__mop_pull_src(m, r, &from));
    const uint64_t t = m->rx_n++;
    const uint32_t i = (uint32_t)(t % m->nslots), e = rr__mop_epoch(m, t);
    const char *slot = m->peer_slots + (size_t)i * m->slot;
    st = rr__cuda_wait_value(s, rr__mop_dev(m, &m->rx->ready[i]), e);
    if (st == RR_OK && from) {
      st = rr__cuda_memcpy_async(r->buf, from, r->len, s);
      atomic_fetch_add_explicit(&rr__mop_npulled, 1, memory_order_relaxed);
    } else if (st == RR_OK && r->consume) {
      r->consume(r, slot, r->len); /* the ring's kernel reads the peer's slot, on this stream */
      r->consumed = 1;
    } else if (st == RR_OK) {
      st = rr__cuda_memcpy_async(r->buf, slot, r->len, s);
    }
    if (st == RR_OK) st = rr__cuda_write_value(s, rr__mop_dev(m, &m->rx->freed[i]), e);
  }
  if (st != RR_OK)
    return rr__prefix_error(st, "CUDA IPC: receiving %zu bytes from rank %d", r->len,
                            m->peer_global);
  r->done = r->len;
  r->complete = 1;
  return RR_OK;
}

/* Each wait our stream has on a word is for a value at most the last one queued on it; the
 * host stores that value (a host store into registered memory: the GPU sees it). Only words
 * our stream waits on are touched, and each is written by nothing of ours: freed of our
 * direction, ready and sig of the peer's. */
static void rr__mop_release(rr__mop *m) {
  if (m->tx_n) {
    const uint32_t v = rr__mop_epoch(m, m->tx_n - 1);
    for (uint32_t i = 0; i < m->nslots; i++) atomic_store(&m->tx->freed[i], v);
  }
  if (m->rx_n) {
    const uint32_t v = rr__mop_epoch(m, m->rx_n - 1);
    for (uint32_t i = 0; i < m->nslots; i++) atomic_store(&m->rx->ready[i], v);
  }
  if (m->sig_rx) atomic_store(&m->rx->sig, m->epoch0 + (uint32_t)m->sig_rx);
  m->released = 1;
}

void rr__dev_release(rr__dev_waits *w) {
  for (int i = 0; w && i < w->n; i++) rr__mop_release(w->lane[i]);
}

int rr__dev_fence(rr__dev_waits *w, void *stream) {
  for (int k = 0; w && k < w->n; k++) {
    rr__mop *m = w->lane[k];
    if (!m->pull_pending || m->released) continue;
    const uint32_t i = (uint32_t)(m->pull_t % m->nslots), e = rr__mop_epoch(m, m->pull_t);
    m->pull_pending = 0;
    int st = rr__cuda_wait_value(stream, rr__mop_dev(m, &m->tx->freed[i]), e);
    if (st != RR_OK)
      return rr__prefix_error(st,
                              "CUDA IPC: waiting for rank %d to finish reading this rank's "
                              "buffer",
                              m->peer_global);
  }
  return RR_OK;
}

/* ---- the caches of mapped peer allocations and of own handles (cuda_ipc.h) ---- */

void rr__ipc_cache_init(rr__ipc_cache *k) {
  memset(k, 0, sizeof *k);
  for (int i = 0; i < RR__IPC_MAPS; i++) k->map[i].peer = -1;
}

void rr__ipc_cache_close(rr__ipc_cache *k) {
  for (int i = 0; i < RR__IPC_MAPS; i++)
    if (k->map[i].peer >= 0) rr__cuda_ipc_close_mem(k->map[i].mapped), k->map[i].peer = -1;
}

/* The handle of the allocation of id at base, from the cache or asked (0 when it has none). */
static int rr__ipc_handle(rr__ipc_cache *k, void *base, unsigned long long id,
                          rr__cuda_ipc_handle *h) {
  for (int i = 0; i < RR__IPC_EXPORTS; i++)
    if (k->exp[i].id == id) {
      *h = k->exp[i].h;
      return k->exp[i].ok;
    }
  /* Memory without a handle fails here; the caller goes another way, so the error it set is
   * not the call's. */
  char keep[RR__ERRMSG_MAX];
  snprintf(keep, sizeof keep, "%s", rr__error());
  int ok = rr__cuda_ipc_mem_handle(h, base) == RR_OK;
  rr__copy_error(keep);
  const int j = k->exp_next;
  k->exp_next = (k->exp_next + 1) % RR__IPC_EXPORTS;
  k->exp[j].id = id;
  k->exp[j].ok = ok;
  if (ok) k->exp[j].h = *h;
  return ok;
}

int rr__ipc_describe(rr__ipc_cache *k, const void *p, size_t bytes, rr__ipc_region *r) {
  void *base = NULL;
  size_t size = 0;
  unsigned long long id = 0;
  memset(r, 0, sizeof *r);
  /* Memory whose range or id the driver cannot give, or gives as no legacy allocation (VMM
   * memory, cuMemCreate + cuMemMap as PyTorch's expandable segments: the range is the mapped
   * range and the id may be 0; cudaMallocAsync's pools), is memory without an IPC handle:
   * the callers go another way (the one-kernel form through its scratch, the pull through
   * the slots), so neither the answer nor its error is the call's. */
  char keep[RR__ERRMSG_MAX];
  snprintf(keep, sizeof keep, "%s", rr__error());
  int st = rr__cuda_ptr_range(p, &base, &size, &id);
  rr__copy_error(keep);
  if (st != RR_OK || id == 0 || (const char *)p < (char *)base ||
      (size_t)((const char *)p - (char *)base) > size ||
      bytes > size - (size_t)((const char *)p - (char *)base))
    return 0;
  r->id = id;
  r->base = (uint64_t)(uintptr_t)base;
  r->bytes = size;
  r->offset = (uint64_t)((const char *)p - (char *)base);
  return rr__ipc_handle(k, base, id, &r->h);
}

int rr__ipc_map(rr__ipc_cache *k, int peer, int peer_global, const rr__ipc_region *r, size_t need,
                char **out) {
  *out = NULL;
  if (r->bytes == 0 || r->offset > r->bytes || need > r->bytes - r->offset)
    return rr__set_error(RR_EPROTO,
                         "rank %d described a buffer of %zu bytes at offset %llu of an "
                         "allocation of %llu bytes",
                         peer_global, need, (unsigned long long)r->offset,
                         (unsigned long long)r->bytes);
  k->tick++;
  int free_slot = -1, oldest = -1;
  for (int i = 0; i < RR__IPC_MAPS; i++)
    if (k->map[i].peer == peer && k->map[i].id == r->id) {
      k->map[i].used = k->tick;
      *out = k->map[i].mapped + r->offset;
      return 0;
    }
  for (int i = 0; i < RR__IPC_MAPS; i++) {
    if (k->map[i].peer == peer && k->map[i].base < r->base + r->bytes &&
        r->base < k->map[i].base + k->map[i].bytes) {
      /* Two live allocations never overlap: this one was freed. */
      rr__cuda_ipc_close_mem(k->map[i].mapped);
      k->map[i].peer = -1;
    }
    if (k->map[i].peer < 0 && free_slot < 0) free_slot = i;
    if (k->map[i].peer >= 0 && (oldest < 0 || k->map[i].used < k->map[oldest].used)) oldest = i;
  }
  if (free_slot < 0) {
    rr__cuda_ipc_close_mem(k->map[oldest].mapped);
    k->map[oldest].peer = -1;
    free_slot = oldest;
  }
  void *p = NULL;
  int st = rr__cuda_ipc_open_mem(&p, &r->h);
  if (st != RR_OK)
    return rr__prefix_error(st, "mapping rank %d's buffer (an allocation of %llu bytes)",
                            peer_global, (unsigned long long)r->bytes);
  k->map[free_slot].peer = peer;
  k->map[free_slot].id = r->id;
  k->map[free_slot].base = r->base;
  k->map[free_slot].bytes = r->bytes;
  k->map[free_slot].mapped = p;
  k->map[free_slot].used = k->tick;
  *out = (char *)p + r->offset;
  return 1;
}
