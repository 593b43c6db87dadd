/* The fake CUDA table's events (tests only; the state is fake_cuda.c's, fake_state.h).
 *
 * Events (cudaEventCreateWithFlags, cudaEventRecord, cudaStreamWaitEvent,
 * cudaEventSynchronize, cudaEventQuery).
 *   - A wait covers the most recent cudaEventRecord before the wait call; a never-recorded
 *     event is complete.
 *   - cudaEventRecord fails when the event and the stream are on different devices
 *     (PG, "Stream and Event Behavior").
 *   - cudaEventInterprocess needs cudaEventDisableTiming (cudaEventCreateWithFlags), and
 *     only such events give an IPC handle (cudaIpcGetEventHandle).
 * Graph capture's rules for events (an event recorded in a capture stands for a node):
 * fake_cuda.c, "Graph capture".
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_cuda/fake_state.h"

fevent *f_event(void *h) {
  fevent *ev = h;
  return ev && ev->magic == F_MAGIC ? ev : NULL;
}

int f_event_create(void **event, unsigned flags) {
  *event = NULL;
  int e = f_ctx("cudaEventCreateWithFlags");
  if (e) return e;
  /* cudaEventCreateWithFlags: cudaEventInterprocess must come with cudaEventDisableTiming. */
  if ((flags & RR__CUDA_EVENT_INTERPROCESS) && !(flags & RR__CUDA_EVENT_DISABLE_TIMING))
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  fevent *ev = calloc(1, sizeof *ev);
  if (!ev) return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  *ev = (fevent){.magic = F_MAGIC, .flags = flags, .device = rr__fk_device(), .fd = -1, .refs = 1};
  if (flags & RR__CUDA_EVENT_INTERPROCESS) {
    /* Its state in shared memory, so another process can wait for it. */
    ev->fd = memfd_create("rr_fake_cuda_event", MFD_CLOEXEC);
    if (ev->fd >= 0 && ftruncate(ev->fd, (off_t)f_round(sizeof(fevshm))) == 0)
      ev->sh = mmap(NULL, f_round(sizeof(fevshm)), PROT_READ | PROT_WRITE, MAP_SHARED, ev->fd, 0);
    if (!ev->sh || ev->sh == MAP_FAILED) {
      if (ev->fd >= 0) close(ev->fd);
      free(ev);
      return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
    }
  } else {
    ev->sh = calloc(1, sizeof *ev->sh);
    if (!ev->sh) {
      free(ev);
      return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
    }
  }
  *event = ev;
  return 0;
}

int f_event_destroy(void *event) {
  int e = f_ctx("cudaEventDestroy");
  if (e) return e;
  fevent *ev = f_event(event);
  if (!ev) return fail(RR__CUDA_ERR_INVALID_HANDLE);
  /* cudaEventDestroy returns at once, even with a record or a wait still queued: those keep
   * the event's state alive until they ran. */
  pthread_mutex_lock(&F.mu);
  ev->magic = 0;
  f_event_unref(ev);
  pthread_mutex_unlock(&F.mu);
  return 0;
}

int f_event_record(void *event, void *stream) {
  int e = f_ctx("cudaEventRecord");
  if (e) return e;
  fevent *ev = f_event(event);
  if (!ev) return fail(RR__CUDA_ERR_INVALID_HANDLE);
  pthread_mutex_lock(&F.mu);
  int err;
  fstream *s = f_stream(stream, &err);
  /* PG, "Stream and Event Behavior": cudaEventRecord fails when the event and the stream
   * belong to different devices. */
  if (!s || s->device != ev->device) {
    pthread_mutex_unlock(&F.mu);
    return fail(s ? RR__CUDA_ERR_INVALID_HANDLE : err);
  }
  /* A record in a capturing stream becomes a node of the graph: the event then stands for
   * that node (host waits on it fail, cudaErrorCapturedEvent), not for work that runs. */
  ev->captured = s->cap ? s : NULL;
  if (s->cap) {
    pthread_mutex_unlock(&F.mu);
    return 0;
  }
  fop *o = f_op(OP_RECORD);
  if (!o) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  }
  o->ev = ev->sh;
  o->hold = ev;
  ev->refs++;
  o->gen = atomic_fetch_add(&ev->sh->recorded, 1) + 1;
  e = f_enqueue(s, o, NULL);
  if (e == 0) ev->rec_s = s, ev->rec_seq = o->seq; /* o is still queued: F.mu is held */
  pthread_mutex_unlock(&F.mu);
  return e;
}

/* cudaStreamWaitEvent: the stream's later work waits for the most recent record (any
 * device); an event never recorded is complete. */
int f_stream_wait_event(void *stream, void *event) {
  int e = f_ctx("cudaStreamWaitEvent");
  if (e) return e;
  fevent *ev = f_event(event);
  if (!ev) return fail(RR__CUDA_ERR_INVALID_HANDLE);
  pthread_mutex_lock(&F.mu);
  int err;
  fstream *s = f_stream(stream, &err);
  /* Programming Guide, "CUDA Graphs", cross-stream dependencies: a stream that waits on an
   * event recorded in a capture joins that capture (its later work is captured too), and
   * must be joined back into the origin stream before the capture ends; the origin joins
   * it back by waiting on an event recorded in it. */
  if (s && ev->captured) {
    fstream *from = ev->captured;
    if (!s->cap) {
      s->cap = from->cap;
      s->unjoined = 1;
    } else if (s == s->cap && from != s) {
      from->unjoined = 0;
    }
    pthread_mutex_unlock(&F.mu);
    return 0;
  }
  /* Legal, but what a caller's NULL stream becomes on a thread whose current device is not
   * the caller's: the stream meant is not ordered (fake_devices.c, "The legacy default
   * stream"). Counted for the tests. */
  if (s && s->legacy && ev->device != s->device)
    rr__fk_legacy_cross("cudaStreamWaitEvent", s->device, ev->device);
  fop *o = s ? f_op(OP_WAIT) : NULL;
  if (!o) {
    pthread_mutex_unlock(&F.mu);
    return fail(s ? RR__CUDA_ERR_MEMORY_ALLOCATION : err);
  }
  /* A local event: wait for its record's place in its stream (the event may be destroyed
   * before the wait runs, as the runtime allows). Another process's: its shared state. */
  fdep d = {0};
  if (ev->ipc_opened) {
    d = (fdep){.ev = ev->sh, .gen = atomic_load(&ev->sh->recorded)};
    o->hold = ev;
    ev->refs++;
  } else if (ev->rec_s)
    d = (fdep){.s = ev->rec_s, .seq = ev->rec_seq};
  e = f_enqueue(s, o, &d);
  pthread_mutex_unlock(&F.mu);
  return e;
}

int f_event_sync(void *event) {
  int e = f_ctx("cudaEventSynchronize");
  if (e) return e;
  fevent *ev = f_event(event);
  if (!ev) return fail(RR__CUDA_ERR_INVALID_HANDLE);
  pthread_mutex_lock(&F.mu);
  /* cudaErrorCapturedEvent: not permitted on an event last recorded in a capturing stream. */
  if (ev->captured) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_CAPTURED_EVENT);
  }
  uint64_t want = atomic_load(&ev->sh->recorded);
  while (atomic_load(&ev->sh->done) < want) f_wait_locked();
  pthread_mutex_unlock(&F.mu);
  return rr__fk_sticky() ? fail(rr__fk_sticky()) : 0;
}

int f_event_query(void *event) {
  int e = f_ctx("cudaEventQuery");
  if (e) return e;
  fevent *ev = f_event(event);
  if (!ev) return fail(RR__CUDA_ERR_INVALID_HANDLE);
  pthread_mutex_lock(&F.mu); /* pairs with the worker's unlock: the work's effects are seen */
  if (ev->captured) {        /* as f_event_sync */
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_CAPTURED_EVENT);
  }
  int done = atomic_load(&ev->sh->done) >= atomic_load(&ev->sh->recorded);
  pthread_mutex_unlock(&F.mu);
  if (done && rr__fk_sticky()) return fail(rr__fk_sticky());
  return done ? 0 : RR__CUDA_ERR_NOT_READY; /* not an error: the last error is untouched */
}
