/* CUDA IPC: the device side of a shared-memory lane. The protocol is in cuda_ipc.h; this file
 * owns the slots and events, their export and import, and the two queued operations. Every
 * CUDA call goes through cuda/cuda.h (the table), so the host fake of the tests runs it. */
#include "transport/cuda_ipc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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

void rr__ipc_free(rr__ipc *x) {
  if (!x) return;
  /* On the slots' device (the closing thread may never have chosen it). */
  int prev = -1;
  int on = rr__cuda_set_device(x->device, &prev) == RR_OK;
  /* A call that failed (a peer died) can leave our copies into the peer's slots queued:
   * they must be done before its memory is unmapped. They wait for nothing of the peer's. */
  for (uint32_t i = 0; i < x->nslots; i++)
    if (x->sent[i]) (void)rr__cuda_event_sync(x->sent[i]); /* a device error: nothing to do */
  if (x->opened && !x->same_process) rr__cuda_ipc_close_mem(x->peer_slots);
  for (uint32_t i = 0; i < x->nslots; i++) {
    rr__cuda_event_destroy(x->done[i]);
    rr__cuda_event_destroy(x->sent[i]);
  }
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
  int st = rr__cuda_get_device(&x->device);
  if (st == RR_OK) st = rr__cuda_malloc((void **)&x->slots, (size_t)nslots * slot);
  for (uint32_t i = 0; st == RR_OK && i < nslots; i++) {
    st = rr__cuda_event_create(&x->done[i]);
    if (st == RR_OK) st = rr__cuda_event_create(&x->sent[i]);
  }
  if (st == RR_OK) st = rr__cuda_ipc_mem_handle(&mine->slots, x->slots);
  if (st != RR_OK) {
    rr__ipc_free(x);
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

int rr__ipc_open_peer(rr__ipc *x, const rr__ipc_export *theirs) {
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
  int st = rr__cuda_ipc_open_mem((void **)&x->peer_slots, &t.slots);
  if (st != RR_OK) {
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
    return rr__prefix_error(st, "CUDA IPC: receiving %zu bytes from rank %d (slot %u) into "
                                "host memory", n, x->peer_global, i);
  return RR_OK;
}
