/* The host fake of the CUDA table (cuda/api.h): the library's device paths run on a machine
 * without a GPU, and the rules of the CUDA runtime that those paths depend on are enforced,
 * so that breaking one fails a test. Test code only; never the library's default
 * (rr__cuda_use_api installs it, reachable only through the internal static library).
 *
 * Each rule below names the CUDA documentation it encodes: the CUDA Runtime API reference
 * (function pages and the "Stream synchronization behavior" / "API synchronization
 * behavior" notes) and the CUDA C++ Programming Guide (PG), "Asynchronous Concurrent
 * Execution", "Stream and Event Behavior", "Interprocess Communication", "Initialization".
 *
 * Memory.
 *   - Device memory is a memfd mapped twice: the address the caller gets is PROT_NONE (the
 *     host dereferencing a device pointer faults, as on a GPU without HMM), the work of
 *     streams goes through a second, readable mapping. Other processes can reach it only
 *     through an IPC handle (PG, "Interprocess Communication": device memory is private to
 *     its process unless exported with cudaIpcGetMemHandle).
 *   - cudaHostAlloc (pinned) and cudaMallocManaged memory are host-readable; pointer
 *     attributes tell the four kinds apart (cudaPointerGetAttributes: cudaMemoryType).
 *   - cudaFree waits for the device first (Runtime API, "API synchronization behavior").
 * Streams (PG, "Asynchronous Concurrent Execution", "Streams"; Runtime API "Stream
 * synchronization behavior").
 *   - Every stream has a worker thread; copies, memsets and kernels are queued and run later,
 *     in the stream's order, after a delay (RR_FAKE_CUDA_DELAY_US: a random 0 to 2x that, default 1
 * ms, per operation), so a result read without waiting is the old data, and TSan sees the race.
 *   - cudaMemcpyAsync / cudaMemsetAsync return before the copy is done, for every kind of
 *     memory (stricter than the runtime, whose pageable-memory copies may be synchronous:
 *     the library must never rely on that).
 *   - The legacy default stream (NULL) waits for all earlier work of the device's blocking
 *     streams, and blocking streams wait for its earlier work; cudaStreamNonBlocking streams
 *     do neither (Runtime API, "Stream synchronization behavior", legacy default stream).
 *   - A kernel launch into a stream of another device than the current one fails
 *     (PG, "Stream and Event Behavior"); copies may go to any stream.
 * Events (cudaEventCreateWithFlags, cudaEventRecord, cudaStreamWaitEvent,
 * cudaEventSynchronize, cudaEventQuery).
 *   - A wait covers the most recent cudaEventRecord before the wait call; a never-recorded
 *     event is complete.
 *   - cudaEventRecord fails when the event and the stream are on different devices
 *     (PG, "Stream and Event Behavior").
 *   - cudaEventInterprocess needs cudaEventDisableTiming (cudaEventCreateWithFlags), and
 *     only such events give an IPC handle (cudaIpcGetEventHandle).
 * Graph capture (cudaStreamBeginCapture, cudaStreamEndCapture, cudaStreamIsCapturing; PG,
 * "CUDA Graphs", "Stream Capture", cross-stream dependencies).
 *   - Work queued on a capturing stream is captured, not run. An event recorded there
 *     stands for a graph node: cudaEventSynchronize / cudaEventQuery on it fail
 *     (cudaErrorCapturedEvent), and a stream that waits on it joins the capture.
 *   - cudaStreamSynchronize of a capturing stream fails (cudaErrorStreamCaptureUnsupported);
 *     so does beginning a capture on the legacy stream; beginning one twice is
 *     cudaErrorIllegalState.
 *   - Ending a capture on another stream than its origin fails
 *     (cudaErrorStreamCaptureUnmatched); a joined stream not joined back (the origin waiting
 *     on an event recorded in it) fails it too (cudaErrorStreamCaptureUnjoined).
 * IPC handles (cudaIpcGetMemHandle, cudaIpcOpenMemHandle, cudaIpcCloseMemHandle,
 * cudaIpcOpenEventHandle).
 *   - A handle is for the base of a device allocation.
 *   - Opening a handle in the process that exported it fails (the documentation says the
 *     handle comes "from another process"; the runtime answers cudaErrorDeviceUninitialized,
 *     "invalid device context"; test_cuda ipc, tests/gpu/run.sh's probe step, checks the
 *     real runtime).
 *   - Opening the same handle twice in one process returns the same pointer and counts
 *     references; cudaIpcCloseMemHandle unmaps at the last close.
 * Devices, threads and contexts: fake_devices.c (several devices, a current device per
 * thread, device 0 for a thread that never chose one, which call on which thread made each
 * context, and the legacy-stream waits that crossed devices). Every call here that needs a
 * context asks it for one on the calling thread's current device (rr__fk_ctx).
 *
 * One file of about 1200 lines: every rule reads and writes the one state the fake keeps
 * under one lock (F, the streams' and events' records); split by area, each part would
 * reach into the others' structures. The devices and contexts share none of it and live in
 * fake_devices.c.
 *
 * Kernels run as the host versions of the device code: cuda/reduce_elem.cuh and
 * cuda/ddp_elem.cuh are plain C (the kernels' element functions, checked bit for bit
 * against ring/op.c and ddp/hooks.c by cuda_elem_vs_op and ddp.elem_vs_host), so the fake's
 * "kernels" are the GPU kernels' own element code in a loop, with reduce.cu's and ddp.cu's
 * argument rules (AVG with a divisor <= 1 is the sum; the DDP scalars built as ddp.cu
 * builds them).
 *
 * What it cannot prove: docs/cuda.md ("The fake").
 *
 * Longer than the house's ~800 lines on purpose: the registry, the streams, the events and
 * the IPC handles are one state under one lock, each rule next to the state it guards; the
 * kernels and the devices, which share nothing with it, are in fake_kernels.c and
 * fake_devices.c. */
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_cuda/fake_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/dtype.h"
#include "cuda/cuda.h"
#include "ringreduce/ringreduce.h"

#define F_MAX_DEV 8
#define F_MAGIC 0x4b414652u /* "RFAK" */
#define E_LAUNCH_FAILED 719 /* cudaErrorLaunchFailure: a kernel given host memory */

typedef struct falloc {
  char *base;   /* what the caller sees (PROT_NONE for device memory) */
  char *shadow; /* readable and writable view (== base for host-readable kinds) */
  size_t bytes; /* mapped length */
  int type;     /* RR__CUDA_MEM_* */
  int device;
  int fd;           /* memfd of device memory, else -1 */
  pid_t from_pid;   /* IPC-opened: the exporter */
  uint64_t from_id; /* IPC-opened: the exporter's allocation id */
  int refs;         /* IPC-opened: opens not yet closed */
  uint64_t id;
  struct falloc *next;
} falloc;

typedef struct fevshm {      /* an event's state; in a memfd when interprocess */
  _Atomic uint64_t recorded; /* records issued */
  _Atomic uint64_t done;     /* highest record completed */
} fevshm;

typedef struct fevent {
  uint32_t magic;
  unsigned flags;
  int device;
  fevshm *sh;
  int fd;                /* interprocess: the memfd of sh */
  int ipc_opened;        /* opened from another process's handle */
  int refs;              /* the handle, and each queued operation that reads sh (F.mu) */
  struct fstream *rec_s; /* local events: the stream and position of the last record */
  uint64_t rec_seq;
  struct fstream *captured; /* the last record was made in this capturing stream, or NULL */
} fevent;

struct fstream;
typedef struct fdep {
  struct fstream *s; /* wait until s->done >= seq ... */
  uint64_t seq;
  fevshm *ev; /* ... or until ev->done >= gen */
  uint64_t gen;
} fdep;

enum { OP_COPY, OP_SET, OP_REDUCE, OP_DDP, OP_RECORD, OP_WAIT };

typedef struct fop {
  int kind;
  void *dst, *dst2;
  const void *a, *b;
  size_t n;
  int dtype, op, div, ddp_kind, wire, world, value;
  fevshm *ev;
  struct fevent *hold; /* an event this operation keeps alive until it ran */
  uint64_t gen, seq;
  fdep *deps;
  int ndeps;
  struct fop *next;
} fop;

typedef struct fstream {
  uint32_t magic;
  int device, nonblocking, legacy, dead;
  pthread_t th;
  fop *head, *tail;
  uint64_t enq, done;
  /* Graph capture: the stream that began the capture this stream takes part in (itself for
   * that one, NULL: not capturing), and, for a stream that joined by waiting on an event of
   * the capture, whether it still has to be joined back (the origin waiting on an event
   * recorded in it) before the capture may end. */
  struct fstream *cap;
  int unjoined;
  struct fstream *next;
} fstream;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  long delay_us;   /* set at install, before any thread */
  int ptr_fail;    /* RR_FAKE_CUDA_PTR_FAIL: pointer attributes fail (set at install) */
  uint64_t next_id;
  falloc *allocs;
  fstream *streams;
  fstream *legacy[F_MAX_DEV];
} F = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

#define fail rr__fk_fail

/* A call that needs a context on the calling thread's current device (fake_devices.c). */
static int f_ctx(const char *call) { return rr__fk_ctx(call); }

/* ---- the allocation registry ---- */

static falloc *f_find(const void *p) {
  for (falloc *a = F.allocs; a; a = a->next)
    if ((const char *)p >= a->base && (const char *)p < a->base + a->bytes) return a;
  return NULL;
}

/* The readable address for [p, p+n), or NULL when the range leaves its allocation. Host
 * memory unknown to the fake is used as it is (cudaMemcpyDefault accepts pageable memory). */
static void *f_xlate(const void *p, size_t n, int *type) {
  falloc *a = f_find(p);
  *type = a ? a->type : RR__CUDA_MEM_UNREGISTERED;
  if (!a) return (void *)p;
  size_t off = (size_t)((const char *)p - a->base);
  if (n > a->bytes - off) return NULL;
  return a->shadow + off;
}

static size_t f_round(size_t b) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (b + pg - 1) / pg * pg;
}

/* Device memory: a memfd, seen PROT_NONE by the caller and read-write by the streams. */
static int f_map_device(int fd, size_t bytes, char **base, char **shadow) {
  *shadow = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (*shadow == MAP_FAILED) return -1;
  *base = mmap(NULL, bytes, PROT_NONE, MAP_SHARED, fd, 0);
  if (*base == MAP_FAILED) {
    munmap(*shadow, bytes);
    return -1;
  }
  return 0;
}

static falloc *f_register(char *base, char *shadow, size_t bytes, int type, int device, int fd) {
  falloc *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  *a = (falloc){.base = base,
                .shadow = shadow,
                .bytes = bytes,
                .type = type,
                .device = device,
                .fd = fd,
                .id = ++F.next_id};
  a->next = F.allocs;
  F.allocs = a;
  return a;
}

static void f_unregister(falloc *a) {
  for (falloc **pp = &F.allocs; *pp; pp = &(*pp)->next)
    if (*pp == a) {
      *pp = a->next;
      break;
    }
  if (a->shadow != a->base) munmap(a->shadow, a->bytes);
  munmap(a->base, a->bytes);
  if (a->fd >= 0) close(a->fd);
  free(a);
}

/* ---- streams ---- */

static void f_wait_locked(void) {
  /* Interprocess events complete in another process: nothing signals our condition
   * variable, so blocked waiters look again every 100 us. */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 100000;
  if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_cond_timedwait(&F.cv, &F.mu, &ts);
}

static int f_deps_met(const fop *o) {
  for (int i = 0; i < o->ndeps; i++) {
    const fdep *d = &o->deps[i];
    if (d->s && d->s->done < d->seq) return 0;
    if (d->ev && atomic_load(&d->ev->done) < d->gen) return 0;
  }
  return 1;
}

static void f_exec(const fop *o) {
  switch (o->kind) {
    case OP_COPY:
      memmove(o->dst, o->a, o->n);
      break;
    case OP_SET:
      memset(o->dst, o->value, o->n);
      break;
    case OP_REDUCE:
      rr_fake_reduce_run(o->dst, o->dst2, o->a, o->b, o->n, o->dtype, o->op, o->div);
      break;
    case OP_DDP:
      rr_fake_ddp_run(o->ddp_kind, o->dst, o->a, o->n, o->dtype, o->wire, o->world);
      break;
    case OP_RECORD: {
      uint64_t cur = atomic_load(&o->ev->done);
      while (cur < o->gen && !atomic_compare_exchange_weak(&o->ev->done, &cur, o->gen)) {
      }
      break;
    }
    case OP_WAIT:
      break; /* its dependency was the whole point */
  }
}

/* Drop a reference to an event; the last one frees it. F.mu held. */
static void f_event_unref(struct fevent *ev) {
  if (--ev->refs > 0) return;
  if (ev->fd >= 0 || ev->ipc_opened) {
    munmap(ev->sh, f_round(sizeof(fevshm)));
    if (ev->fd >= 0) close(ev->fd);
  } else {
    free(ev->sh);
  }
  free(ev);
}

static void *f_worker(void *arg) {
  fstream *s = arg;
  /* Each operation waits a random 0..2x RR_FAKE_CUDA_DELAY_US before it runs, so work on
   * two streams finishes in either order: an ordering the caller forgot shows up. */
  unsigned seed = (unsigned)(uintptr_t)s ^ (unsigned)getpid();
  pthread_mutex_lock(&F.mu);
  for (;;) {
    while (!s->head && !s->dead) pthread_cond_wait(&F.cv, &F.mu);
    if (!s->head) break; /* destroyed and drained */
    fop *o = s->head;
    while (!f_deps_met(o)) f_wait_locked();
    pthread_mutex_unlock(&F.mu);
    if (F.delay_us > 0 && o->kind != OP_WAIT && o->kind != OP_RECORD)
      usleep((useconds_t)(rand_r(&seed) % (2 * F.delay_us + 1)));
    f_exec(o);
    pthread_mutex_lock(&F.mu);
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->done = o->seq;
    if (o->hold) f_event_unref(o->hold);
    free(o->deps);
    free(o);
    pthread_cond_broadcast(&F.cv);
  }
  pthread_mutex_unlock(&F.mu);
  return NULL;
}

static fstream *f_new_stream(int device, int nonblocking, int legacy) {
  fstream *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->magic = F_MAGIC;
  s->device = device;
  s->nonblocking = nonblocking;
  s->legacy = legacy;
  if (pthread_create(&s->th, NULL, f_worker, s) != 0) {
    free(s);
    return NULL;
  }
  pthread_detach(s->th);
  /* Never freed, only marked dead: dependencies recorded earlier may still point here. */
  s->next = F.streams;
  F.streams = s;
  return s;
}

/* The stream a handle names (NULL and cudaStreamLegacy: the current device's legacy
 * stream), or NULL with *err set. Called with F.mu held. */
static fstream *f_stream(void *h, int *err) {
  *err = 0;
  if (h == RR__CUDA_STREAM_PER_THREAD) {
    *err = RR__CUDA_ERR_INVALID_HANDLE; /* not modelled: the library refuses it */
    return NULL;
  }
  if (!h || h == RR__CUDA_STREAM_LEGACY) {
    /* Runtime API, "Stream synchronization behavior": the calling thread's current device's
     * legacy stream, whatever device the call's other arguments are on. */
    const int d = rr__fk_device();
    if (!F.legacy[d]) F.legacy[d] = f_new_stream(d, 0, 1);
    if (!F.legacy[d]) *err = RR__CUDA_ERR_MEMORY_ALLOCATION;
    return F.legacy[d];
  }
  fstream *s = h;
  if (s->magic != F_MAGIC || s->dead) {
    *err = RR__CUDA_ERR_INVALID_HANDLE;
    return NULL;
  }
  return s;
}

/* Queue o on s with the legacy stream's implicit ordering, plus one extra dependency. */
static int f_enqueue(fstream *s, fop *o, const fdep *extra) {
  /* Runtime API, cudaStreamBeginCapture: work launched into a capturing stream is not
   * enqueued for execution but captured into the graph (which the fake does not keep). */
  if (s->cap) {
    if (o->hold) f_event_unref(o->hold);
    free(o);
    return 0;
  }
  int cap = 1, n = 0;
  for (fstream *t = F.streams; t; t = t->next) cap++;
  o->deps = calloc((size_t)cap, sizeof *o->deps);
  if (!o->deps) {
    free(o);
    return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  }
  if (extra) o->deps[n++] = *extra;
  /* Runtime API, "Stream synchronization behavior": the legacy default stream waits for the
   * work already queued in the device's blocking streams, and they wait for its work. */
  for (fstream *t = F.streams; t; t = t->next) {
    if (t == s || t->dead || t->device != s->device || t->nonblocking || s->nonblocking) continue;
    if (s->legacy != t->legacy && (s->legacy || t->legacy) && t->enq > t->done && n < cap)
      o->deps[n++] = (fdep){.s = t, .seq = t->enq};
  }
  o->ndeps = n;
  o->seq = ++s->enq;
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  pthread_cond_broadcast(&F.cv);
  return 0;
}

static fop *f_op(int kind) {
  fop *o = calloc(1, sizeof *o);
  if (o) o->kind = kind;
  return o;
}

/* ---- the table's entries ---- */

static int f_ptr_attrs(const void *p, int *type, int *device) {
  *type = RR__CUDA_MEM_UNREGISTERED;
  *device = -1;
  int e = rr__fk_init();
  if (e) return e;
  /* cuPointerGetAttributes may fail (CUDA_ERROR_INVALID_CONTEXT, _DEINITIALIZED, ...: Driver
   * API reference) whatever the pointer; RR_FAKE_CUDA_PTR_FAIL=1 makes every question fail
   * so, to test what the library does then ("invalid device context"). */
  if (F.ptr_fail) return fail(RR__CUDA_ERR_DEVICE_UNINITIALIZED);
  pthread_mutex_lock(&F.mu);
  falloc *a = f_find(p);
  if (a) *type = a->type, *device = a->type == RR__CUDA_MEM_HOST ? -1 : a->device;
  pthread_mutex_unlock(&F.mu);
  return 0;
}

/* Wait until every stream of this process is idle (the implicit synchronisation of cudaFree,
 * cudaFreeHost and cudaDeviceSynchronize). Called with F.mu held. */
static void f_drain_locked(void) {
  for (;;) {
    int busy = 0;
    for (fstream *s = F.streams; s; s = s->next) busy |= s->head != NULL;
    if (!busy) return;
    f_wait_locked();
  }
}

static int f_device_sync(void) {
  int e = f_ctx("cudaDeviceSynchronize");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  f_drain_locked();
  pthread_mutex_unlock(&F.mu);
  return 0;
}

static int f_alloc(void **p, size_t bytes, int type) {
  *p = NULL;
  int e = f_ctx(type == RR__CUDA_MEM_DEVICE ? "cudaMalloc"
                : type == RR__CUDA_MEM_HOST ? "cudaHostAlloc"
                                            : "cudaMallocManaged");
  if (e) return e;
  size_t len = f_round(bytes ? bytes : 1);
  char *base, *shadow;
  int fd = -1;
  if (type == RR__CUDA_MEM_DEVICE) {
    fd = memfd_create("rr_fake_cuda_device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0 || f_map_device(fd, len, &base, &shadow) != 0) {
      if (fd >= 0) close(fd);
      return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
    }
  } else {
    base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
    shadow = base;
  }
  pthread_mutex_lock(&F.mu);
  falloc *a = f_register(base, shadow, len, type, rr__fk_device(), fd);
  pthread_mutex_unlock(&F.mu);
  if (!a) {
    if (shadow != base) munmap(shadow, len);
    munmap(base, len);
    if (fd >= 0) close(fd);
    return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  }
  *p = base;
  return 0;
}

static int f_malloc(void **p, size_t b) {
  return f_alloc(p, b, RR__CUDA_MEM_DEVICE);
}
static int f_malloc_managed(void **p, size_t b) {
  return f_alloc(p, b, RR__CUDA_MEM_MANAGED);
}
static int f_host_alloc(void **p, size_t b) {
  return f_alloc(p, b, RR__CUDA_MEM_HOST);
}

/* cudaFree / cudaFreeHost: the base of an allocation of the right kind, after the device
 * finished with it (Runtime API, "API synchronization behavior"). */
static int f_release(void *p, int host) {
  if (!p) return 0;
  int e = f_ctx(host ? "cudaFreeHost" : "cudaFree");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  falloc *a = f_find(p);
  if (!a || a->base != p || a->from_pid || (host != (a->type == RR__CUDA_MEM_HOST))) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  f_drain_locked();
  f_unregister(a);
  pthread_mutex_unlock(&F.mu);
  return 0;
}
static int f_free(void *p) {
  return f_release(p, 0);
}
static int f_host_free(void *p) {
  return f_release(p, 1);
}

static int f_memcpy_async(void *dst, const void *src, size_t bytes, void *stream) {
  int e = f_ctx("cudaMemcpyAsync");
  if (e) return e;
  if (bytes == 0) return 0;
  pthread_mutex_lock(&F.mu);
  int td, ts, err;
  void *d = f_xlate(dst, bytes, &td);
  const void *s = f_xlate(src, bytes, &ts);
  fstream *st = f_stream(stream, &err);
  fop *o = f_op(OP_COPY);
  if (!d || !s || !st || !o) {
    pthread_mutex_unlock(&F.mu);
    free(o);
    return fail(err ? err : !o ? RR__CUDA_ERR_MEMORY_ALLOCATION : RR__CUDA_ERR_INVALID_VALUE);
  }
  o->dst = d, o->a = s, o->n = bytes;
  e = f_enqueue(st, o, NULL);
  pthread_mutex_unlock(&F.mu);
  return e;
}

static int f_memset_async(void *dst, int value, size_t bytes, void *stream) {
  int e = f_ctx("cudaMemsetAsync");
  if (e) return e;
  if (bytes == 0) return 0;
  pthread_mutex_lock(&F.mu);
  int td, err;
  void *d = f_xlate(dst, bytes, &td);
  fstream *st = f_stream(stream, &err);
  fop *o = f_op(OP_SET);
  /* cudaMemsetAsync writes device (or managed) memory only. */
  if (!d || td == RR__CUDA_MEM_UNREGISTERED || td == RR__CUDA_MEM_HOST || !st || !o) {
    pthread_mutex_unlock(&F.mu);
    free(o);
    return fail(err ? err : RR__CUDA_ERR_INVALID_VALUE);
  }
  o->dst = d, o->n = bytes, o->value = value;
  e = f_enqueue(st, o, NULL);
  pthread_mutex_unlock(&F.mu);
  return e;
}

/* A kernel's pointer: device, managed or pinned memory (all reachable from a GPU through
 * unified addressing); pageable host memory makes the kernel fail. */
static void *f_kernel_ptr(const void *p, size_t bytes, int *bad) {
  if (!p) return NULL;
  int t;
  void *x = f_xlate(p, bytes, &t);
  if (!x || t == RR__CUDA_MEM_UNREGISTERED) *bad = 1;
  return x;
}

/* Checks common to both launchers; F.mu held. */
static int f_launch(fop *o, void *stream, const char **what) {
  int err;
  fstream *st = f_stream(stream, &err);
  if (!st) {
    *what = "kernel launch (stream)";
    free(o);
    return fail(err);
  }
  /* PG, "Stream and Event Behavior": a kernel launch fails when its stream is not the
   * current device's. */
  if (st->device != rr__fk_device()) {
    *what = "kernel launch (stream of another device)";
    free(o);
    return fail(RR__CUDA_ERR_INVALID_HANDLE);
  }
  return f_enqueue(st, o, NULL);
}

static int f_reduce_launch(void *dst, void *dst2, const void *a, const void *b, size_t n, int dtype,
                           int op, int avg_div, void *stream, const char **what) {
  *what = "";
  int e = f_ctx("the reduce kernel launch");
  if (e) return e;
  if (n == 0) return 0;
  if (!rr__op_applies((rr_dtype)dtype, (rr_op)op)) {
    *what = "reduce dispatch";
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  size_t bytes = n * rr_dtype_size((rr_dtype)dtype);
  fop *o = f_op(OP_REDUCE);
  if (!o) return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  pthread_mutex_lock(&F.mu);
  int bad = 0;
  o->dst = f_kernel_ptr(dst, bytes, &bad);
  o->dst2 = f_kernel_ptr(dst2, bytes, &bad);
  o->a = f_kernel_ptr(a, bytes, &bad);
  o->b = f_kernel_ptr(b, bytes, &bad);
  o->n = n, o->dtype = dtype, o->op = op, o->div = avg_div;
  if (bad || !o->dst || !o->a || !o->b) {
    pthread_mutex_unlock(&F.mu);
    free(o);
    *what = "reduce kernel (a pointer is not device-accessible memory)";
    return fail(E_LAUNCH_FAILED);
  }
  e = f_launch(o, stream, what);
  pthread_mutex_unlock(&F.mu);
  return e;
}

static int f_ddp_launch(int kind, void *dst, const void *src, size_t n, int dtype, int wire,
                        int world, void *stream, const char **what) {
  *what = "DDP kernel dispatch";
  int e = f_ctx("a DDP kernel launch");
  if (e) return e;
  int fdt =
      dtype == RR_FLOAT32 || dtype == RR_FLOAT64 || dtype == RR_FLOAT16 || dtype == RR_BFLOAT16;
  int packed = kind == RR__CUDA_DDP_COMPRESS || kind == RR__CUDA_DDP_DECOMPRESS;
  if (world < 1 || !fdt || kind < 0 || kind > RR__CUDA_DDP_DECOMPRESS ||
      (packed && wire != RR_FLOAT16 && wire != RR_BFLOAT16))
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  if (n == 0) return 0;
  size_t es = rr_dtype_size((rr_dtype)dtype);
  size_t dbytes = n * (kind == RR__CUDA_DDP_COMPRESS ? 2 : es);
  size_t sbytes = n * (kind == RR__CUDA_DDP_DECOMPRESS ? 2 : es);
  fop *o = f_op(OP_DDP);
  if (!o) return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  pthread_mutex_lock(&F.mu);
  int bad = 0;
  o->dst = f_kernel_ptr(dst, dbytes, &bad);
  /* The divide works in place: its source is dst (ddp.cu). */
  o->a = kind == RR__CUDA_DDP_DIVIDE ? o->dst : f_kernel_ptr(src, sbytes, &bad);
  o->n = n, o->dtype = dtype, o->ddp_kind = kind, o->wire = wire, o->world = world;
  if (bad || !o->dst || !o->a) {
    pthread_mutex_unlock(&F.mu);
    free(o);
    *what = "DDP kernel (a pointer is not device-accessible memory)";
    return fail(E_LAUNCH_FAILED);
  }
  e = f_launch(o, stream, what);
  pthread_mutex_unlock(&F.mu);
  return e;
}

static int f_stream_create(void **stream, int nonblocking) {
  *stream = NULL;
  int e = f_ctx("cudaStreamCreateWithFlags");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  fstream *s = f_new_stream(rr__fk_device(), nonblocking, 0);
  pthread_mutex_unlock(&F.mu);
  if (!s) return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  *stream = s;
  return 0;
}

/* cudaStreamDestroy returns at once; the stream's queued work still completes. */
static int f_stream_destroy(void *stream) {
  int e = f_ctx("cudaStreamDestroy");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  int err;
  fstream *s = stream ? f_stream(stream, &err) : NULL;
  if (!s || s->legacy) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_INVALID_HANDLE);
  }
  s->dead = 1;
  pthread_cond_broadcast(&F.cv);
  pthread_mutex_unlock(&F.mu);
  return 0;
}

static int f_stream_sync(void *stream) {
  int e = f_ctx("cudaStreamSynchronize");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  int err;
  fstream *s = f_stream(stream, &err);
  /* cudaErrorStreamCaptureUnsupported: a capturing stream cannot be synchronised. */
  if (!s || s->cap) {
    pthread_mutex_unlock(&F.mu);
    return fail(s ? RR__CUDA_ERR_CAPTURE_UNSUPPORTED : err);
  }
  uint64_t want = s->enq;
  while (s->done < want) f_wait_locked();
  pthread_mutex_unlock(&F.mu);
  return 0;
}

static int f_stream_is_capturing(void *stream, int *capturing) {
  *capturing = 0;
  int e = f_ctx("cudaStreamIsCapturing");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  int err;
  fstream *s = f_stream(stream, &err);
  if (s) *capturing = s->cap != NULL;
  pthread_mutex_unlock(&F.mu);
  return s ? 0 : fail(err);
}

/* cudaStreamBeginCapture: not on the legacy stream (cudaErrorStreamCaptureUnsupported), not
 * twice (cudaErrorIllegalState). */
static int f_stream_begin_capture(void *stream) {
  int e = f_ctx("cudaStreamBeginCapture");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  int err;
  fstream *s = f_stream(stream, &err);
  e = !s ? err : s->legacy ? RR__CUDA_ERR_CAPTURE_UNSUPPORTED : s->cap ? RR__CUDA_ERR_ILLEGAL_STATE : 0;
  if (!e) s->cap = s;
  pthread_mutex_unlock(&F.mu);
  return e ? fail(e) : 0;
}

/* cudaStreamEndCapture: only on the stream that began it (cudaErrorStreamCaptureUnmatched);
 * a stream that joined and was not joined back fails it (cudaErrorStreamCaptureUnjoined).
 * Either way every stream of the capture leaves it. */
static int f_stream_end_capture(void *stream) {
  int e = f_ctx("cudaStreamEndCapture");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  int err;
  fstream *s = f_stream(stream, &err);
  if (!s || s->cap != s) {
    pthread_mutex_unlock(&F.mu);
    return fail(s ? RR__CUDA_ERR_CAPTURE_UNMATCHED : err);
  }
  for (fstream *t = F.streams; t; t = t->next)
    if (t->cap == s) {
      if (t != s && t->unjoined) e = RR__CUDA_ERR_CAPTURE_UNJOINED;
      t->cap = NULL;
      t->unjoined = 0;
    }
  pthread_mutex_unlock(&F.mu);
  return e ? fail(e) : 0;
}

static fevent *f_event(void *h) {
  fevent *ev = h;
  return ev && ev->magic == F_MAGIC ? ev : NULL;
}

static int f_event_create(void **event, unsigned flags) {
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

static int f_event_destroy(void *event) {
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

static int f_event_record(void *event, void *stream) {
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
static int f_stream_wait_event(void *stream, void *event) {
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

static int f_event_sync(void *event) {
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
  return 0;
}

static int f_event_query(void *event) {
  int e = f_ctx("cudaEventQuery");
  if (e) return e;
  fevent *ev = f_event(event);
  if (!ev) return fail(RR__CUDA_ERR_INVALID_HANDLE);
  pthread_mutex_lock(&F.mu); /* pairs with the worker's unlock: the work's effects are seen */
  if (ev->captured) { /* as f_event_sync */
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_CAPTURED_EVENT);
  }
  int done = atomic_load(&ev->sh->done) >= atomic_load(&ev->sh->recorded);
  pthread_mutex_unlock(&F.mu);
  return done ? 0 : RR__CUDA_ERR_NOT_READY; /* not an error: the last error is untouched */
}

/* ---- IPC ---- */

typedef struct fhandle { /* the 64 bytes of a fake IPC handle */
  uint32_t magic;
  uint32_t is_event;
  int32_t pid, fd, device;
  uint32_t pad;
  uint64_t bytes, id;
} fhandle;
_Static_assert(sizeof(fhandle) <= sizeof(rr__cuda_ipc_handle), "fake handle fits");

static int f_open_fd(const fhandle *h) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
  return open(path, O_RDWR | O_CLOEXEC);
}

static int f_ipc_get_mem_handle(rr__cuda_ipc_handle *out, void *p) {
  int e = f_ctx("cudaIpcGetMemHandle");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  falloc *a = f_find(p);
  /* cudaIpcGetMemHandle: the base of a device allocation made in this process. */
  if (!a || a->type != RR__CUDA_MEM_DEVICE || a->base != p || a->from_pid) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  fhandle h = {.magic = F_MAGIC,
               .pid = (int32_t)getpid(),
               .fd = a->fd,
               .device = a->device,
               .bytes = a->bytes,
               .id = a->id};
  pthread_mutex_unlock(&F.mu);
  memset(out, 0, sizeof *out);
  memcpy(out->bytes, &h, sizeof h);
  return 0;
}

static int f_ipc_open_mem_handle(void **p, const rr__cuda_ipc_handle *in) {
  *p = NULL;
  int e = f_ctx("cudaIpcOpenMemHandle");
  if (e) return e;
  fhandle h;
  memcpy(&h, in->bytes, sizeof h);
  if (h.magic != F_MAGIC || h.is_event) return fail(RR__CUDA_ERR_INVALID_VALUE);
  /* cudaIpcOpenMemHandle opens a handle "exported from another process": in the exporter
   * itself the runtime refuses it. */
  if (h.pid == (int32_t)getpid()) return fail(RR__CUDA_ERR_DEVICE_UNINITIALIZED);
  pthread_mutex_lock(&F.mu);
  /* Opened already by this process: the same pointer, one more reference. */
  for (falloc *a = F.allocs; a; a = a->next)
    if (a->from_pid == h.pid && a->from_id == h.id) {
      a->refs++;
      *p = a->base;
      pthread_mutex_unlock(&F.mu);
      return 0;
    }
  int fd = f_open_fd(&h);
  char *base, *shadow;
  if (fd < 0 || f_map_device(fd, (size_t)h.bytes, &base, &shadow) != 0) {
    if (fd >= 0) close(fd);
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_MAP_FAILED);
  }
  falloc *a = f_register(base, shadow, (size_t)h.bytes, RR__CUDA_MEM_DEVICE, h.device, fd);
  if (!a) {
    munmap(base, (size_t)h.bytes), munmap(shadow, (size_t)h.bytes), close(fd);
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  }
  a->from_pid = h.pid, a->from_id = h.id, a->refs = 1;
  *p = base;
  pthread_mutex_unlock(&F.mu);
  return 0;
}

static int f_ipc_close_mem_handle(void *p) {
  int e = f_ctx("cudaIpcCloseMemHandle");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  falloc *a = f_find(p);
  if (!a || a->base != p || !a->from_pid) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  if (--a->refs == 0) {
    f_drain_locked(); /* work still queued on the mapping finishes first */
    f_unregister(a);
  }
  pthread_mutex_unlock(&F.mu);
  return 0;
}

static int f_ipc_get_event_handle(rr__cuda_ipc_handle *out, void *event) {
  int e = f_ctx("cudaIpcGetEventHandle");
  if (e) return e;
  fevent *ev = f_event(event);
  /* cudaIpcGetEventHandle: only events created with cudaEventInterprocess and
   * cudaEventDisableTiming; others are an invalid resource handle. */
  if (!ev || !(ev->flags & RR__CUDA_EVENT_INTERPROCESS) || ev->ipc_opened)
    return fail(RR__CUDA_ERR_INVALID_HANDLE);
  fhandle h = {.magic = F_MAGIC,
               .is_event = 1,
               .pid = (int32_t)getpid(),
               .fd = ev->fd,
               .device = ev->device};
  memset(out, 0, sizeof *out);
  memcpy(out->bytes, &h, sizeof h);
  return 0;
}

static int f_ipc_open_event_handle(void **event, const rr__cuda_ipc_handle *in) {
  *event = NULL;
  int e = f_ctx("cudaIpcOpenEventHandle");
  if (e) return e;
  fhandle h;
  memcpy(&h, in->bytes, sizeof h);
  if (h.magic != F_MAGIC || !h.is_event) return fail(RR__CUDA_ERR_INVALID_VALUE);
  /* cudaIpcOpenEventHandle: an event handle "exported from another process". */
  if (h.pid == (int32_t)getpid()) return fail(RR__CUDA_ERR_DEVICE_UNINITIALIZED);
  int fd = f_open_fd(&h);
  if (fd < 0) return fail(RR__CUDA_ERR_MAP_FAILED);
  fevshm *sh = mmap(NULL, f_round(sizeof(fevshm)), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (sh == MAP_FAILED) return fail(RR__CUDA_ERR_MAP_FAILED);
  fevent *ev = calloc(1, sizeof *ev);
  if (!ev) {
    munmap(sh, f_round(sizeof(fevshm)));
    return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  }
  *ev = (fevent){.magic = F_MAGIC,
                 .flags = RR__CUDA_EVENT_INTERPROCESS | RR__CUDA_EVENT_DISABLE_TIMING,
                 .device = h.device,
                 .sh = sh,
                 .fd = -1,
                 .ipc_opened = 1,
                 .refs = 1};
  *event = ev;
  return 0;
}

static const char *f_error_name(int e) {
  switch (e) {
    case 0:
      return "cudaSuccess";
    case RR__CUDA_ERR_INVALID_VALUE:
      return "cudaErrorInvalidValue";
    case RR__CUDA_ERR_MEMORY_ALLOCATION:
      return "cudaErrorMemoryAllocation";
    case RR__CUDA_ERR_INITIALIZATION:
      return "cudaErrorInitializationError";
    case RR__CUDA_ERR_NO_DEVICE:
      return "cudaErrorNoDevice";
    case RR__CUDA_ERR_INVALID_DEVICE:
      return "cudaErrorInvalidDevice";
    case RR__CUDA_ERR_DEVICE_UNINITIALIZED:
      return "cudaErrorDeviceUninitialized";
    case RR__CUDA_ERR_MAP_FAILED:
      return "cudaErrorMapBufferObjectFailed";
    case RR__CUDA_ERR_INVALID_HANDLE:
      return "cudaErrorInvalidResourceHandle";
    case RR__CUDA_ERR_NOT_READY:
      return "cudaErrorNotReady";
    case RR__CUDA_ERR_ILLEGAL_STATE:
      return "cudaErrorIllegalState";
    case RR__CUDA_ERR_CAPTURE_UNSUPPORTED:
      return "cudaErrorStreamCaptureUnsupported";
    case RR__CUDA_ERR_CAPTURE_UNMATCHED:
      return "cudaErrorStreamCaptureUnmatched";
    case RR__CUDA_ERR_CAPTURE_UNJOINED:
      return "cudaErrorStreamCaptureUnjoined";
    case RR__CUDA_ERR_CAPTURED_EVENT:
      return "cudaErrorCapturedEvent";
    case E_LAUNCH_FAILED:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

static const char *f_error_string(int e) {
  switch (e) {
    case 0:
      return "no error";
    case RR__CUDA_ERR_INVALID_VALUE:
      return "invalid argument";
    case RR__CUDA_ERR_MEMORY_ALLOCATION:
      return "out of memory";
    case RR__CUDA_ERR_INITIALIZATION:
      return "initialization error";
    case RR__CUDA_ERR_INVALID_DEVICE:
      return "invalid device ordinal";
    case RR__CUDA_ERR_DEVICE_UNINITIALIZED:
      return "invalid device context";
    case RR__CUDA_ERR_MAP_FAILED:
      return "mapping of buffer object failed";
    case RR__CUDA_ERR_INVALID_HANDLE:
      return "invalid resource handle";
    case RR__CUDA_ERR_NOT_READY:
      return "device not ready";
    case RR__CUDA_ERR_ILLEGAL_STATE:
      return "the operation cannot be performed in the present state";
    case RR__CUDA_ERR_CAPTURE_UNSUPPORTED:
      return "operation not permitted when stream is capturing";
    case RR__CUDA_ERR_CAPTURE_UNMATCHED:
      return "capture was not initiated in this stream";
    case RR__CUDA_ERR_CAPTURE_UNJOINED:
      return "capturing stream has unjoined work";
    case RR__CUDA_ERR_CAPTURED_EVENT:
      return "operation not permitted on an event last recorded in a capturing stream";
    case E_LAUNCH_FAILED:
      return "unspecified launch failure";
  }
  return "unknown error";
}

static const rr__cuda_api rr__fake = {
    .name = "fake CUDA (tests)",
    .device_count = rr__fk_device_count,
    .get_device = rr__fk_get_device,
    .set_device = rr__fk_set_device,
    .device_sync = f_device_sync,
    .primary_ctx_active = rr__fk_primary_ctx_active,
    .ptr_attrs = f_ptr_attrs,
    .malloc = f_malloc,
    .free = f_free,
    .malloc_managed = f_malloc_managed,
    .host_alloc = f_host_alloc,
    .host_free = f_host_free,
    .memcpy_async = f_memcpy_async,
    .memset_async = f_memset_async,
    .reduce = f_reduce_launch,
    .ddp = f_ddp_launch,
    .stream_create = f_stream_create,
    .stream_destroy = f_stream_destroy,
    .stream_sync = f_stream_sync,
    .stream_is_capturing = f_stream_is_capturing,
    .stream_begin_capture = f_stream_begin_capture,
    .stream_end_capture = f_stream_end_capture,
    .stream_wait_event = f_stream_wait_event,
    .event_create = f_event_create,
    .event_destroy = f_event_destroy,
    .event_record = f_event_record,
    .event_sync = f_event_sync,
    .event_query = f_event_query,
    .ipc_get_mem_handle = f_ipc_get_mem_handle,
    .ipc_open_mem_handle = f_ipc_open_mem_handle,
    .ipc_close_mem_handle = f_ipc_close_mem_handle,
    .ipc_get_event_handle = f_ipc_get_event_handle,
    .ipc_open_event_handle = f_ipc_open_event_handle,
    .error_string = f_error_string,
    .error_name = f_error_name,
    .clear_error = rr__fk_clear_error,
};

const rr__cuda_api *rr_fake_cuda(int devices) {
  rr__fk_setup(devices);
  const char *d = getenv("RR_FAKE_CUDA_DELAY_US");
  F.delay_us = d ? atol(d) : 1000;
  const char *pf = getenv("RR_FAKE_CUDA_PTR_FAIL");
  F.ptr_fail = pf && !strcmp(pf, "1");
  return &rr__fake;
}

int rr_fake_cuda_install(int devices) {
  return rr__cuda_use_api(rr_fake_cuda(devices));
}

int rr_fake_cuda_pending(void) {
  int n = 0;
  pthread_mutex_lock(&F.mu);
  for (fstream *s = F.streams; s; s = s->next)
    for (fop *o = s->head; o; o = o->next) n++;
  pthread_mutex_unlock(&F.mu);
  return n;
}
