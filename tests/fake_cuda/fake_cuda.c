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
 * Events: fake_events.c.
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
 * IPC handles: fake_ipc.c. Stream memory operations, registered host memory, the
 * allocations' ranges and ids, the one-kernel launch: fake_memops.c.
 * One context at a time per device, across the test's processes (fake_gpu.c: MPS docs, "When
 *   to Use MPS"): copies, memsets, kernels and stream writes run only while their process
 *   holds the device; waits hold none; a kernel that spins on another process's word hangs
 *   until the watchdog's cudaErrorLaunchTimeout, sticky afterwards.
 * Devices, threads and contexts: fake_devices.c (several devices, a current device per
 * thread, device 0 for a thread that never chose one, which call on which thread made each
 * context, and the legacy-stream waits that crossed devices). Every call here that needs a
 * context asks it for one on the calling thread's current device (rr__fk_ctx).
 *
 * Every rule reads and writes the one state the fake keeps under one lock (F, the streams'
 * and events' records, tests/fake_cuda/fake_state.h); this file owns it and runs the streams,
 * fake_ipc.c and fake_memops.c add their entries on it. The devices and contexts share none
 * of it and live in fake_devices.c, the GPUs the test's processes share in fake_gpu.c.
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
 * (Over 800 lines: one table's fake, whose rules cite the same pages of the docs and share one
 * device model; split, each part would need the whole model.)
 */
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

#include "tests/fake_cuda/fake_state.h"

fstate F = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* ---- the allocation registry ---- */

falloc *f_find(const void *p) {
  for (falloc *a = F.allocs; a; a = a->next)
    if ((const char *)p >= a->base && (const char *)p < a->base + a->bytes) return a;
  return NULL;
}

/* The readable address for [p, p+n), or NULL when the range leaves its allocation. Host
 * memory unknown to the fake is used as it is (cudaMemcpyDefault accepts pageable memory). */
void *f_xlate(const void *p, size_t n, int *type) {
  falloc *a = f_find(p);
  *type = a ? a->type : RR__CUDA_MEM_UNREGISTERED;
  if (!a) return (void *)p;
  size_t off = (size_t)((const char *)p - a->base);
  if (n > a->bytes - off) return NULL;
  return a->shadow + off;
}

size_t f_round(size_t b) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (b + pg - 1) / pg * pg;
}

/* Device memory: a memfd, seen PROT_NONE by the caller and read-write by the streams. F.mu
 * held (the freed ranges it may take are F's). */
int f_map_device(int fd, size_t bytes, char **base, char **shadow) {
  *shadow = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (*shadow == MAP_FAILED) return -1;
  /* A range of the same size freed before: at its address again, where it is still free. */
  *base = MAP_FAILED;
  for (int i = 0; i < 8 && *base == MAP_FAILED; i++)
    if (F.freed[i].base && F.freed[i].bytes == bytes) {
      *base = mmap(F.freed[i].base, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
      if (*base != MAP_FAILED && *base != F.freed[i].base) munmap(*base, bytes), *base = MAP_FAILED;
      F.freed[i].base = NULL;
    }
  if (*base == MAP_FAILED) *base = mmap(NULL, bytes, PROT_NONE, MAP_SHARED, fd, 0);
  if (*base == MAP_FAILED) {
    munmap(*shadow, bytes);
    return -1;
  }
  return 0;
}

falloc *f_register(char *base, char *shadow, size_t bytes, int type, int device, int fd) {
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

void f_unregister(falloc *a) {
  for (falloc **pp = &F.allocs; *pp; pp = &(*pp)->next)
    if (*pp == a) {
      *pp = a->next;
      break;
    }
  if (a->registered) { /* the caller's pages stay; only a device pointer of our own goes */
    if (a->devmap && a->base != a->shadow) munmap(a->base, a->bytes);
    free(a);
    return;
  }
  if (a->type == RR__CUDA_MEM_DEVICE && !a->from_pid) { /* its address may come back */
    static unsigned next;
    F.freed[next++ % 8].base = a->base;
    F.freed[(next - 1) % 8].bytes = a->bytes;
  }
  if (a->shadow != a->base) munmap(a->shadow, a->bytes);
  munmap(a->base, a->bytes);
  if (a->fd >= 0) close(a->fd);
  free(a);
}

/* ---- streams ---- */

void f_wait_locked(void) {
  /* Interprocess events complete in another process: nothing signals our condition
   * variable, so blocked waiters look again every 100 us. */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 100000;
  if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_cond_timedwait(&F.cv, &F.mu, &ts);
}

/* Driver API, CUstreamWaitValue_flags: GEQ is "(int32_t)(*addr - value) >= 0 ... a cyclic
 * comparison which ignores wraparound"; EQ "*addr == value"; AND "(*addr & value) != 0". */
int f_compare(uint32_t w, uint32_t v, int cmp) {
  switch (cmp) {
    case RR__CUDA_WAIT_GEQ:
      return (int32_t)(w - v) >= 0;
    case RR__CUDA_WAIT_EQ:
      return w == v;
    default:
      return (w & v) != 0;
  }
}

static int f_deps_met(const fop *o) {
  for (int i = 0; i < o->ndeps; i++) {
    const fdep *d = &o->deps[i];
    if (d->s && d->s->done < d->seq) return 0;
    if (d->ev && atomic_load(&d->ev->done) < d->gen) return 0;
    if (d->word && !f_compare(atomic_load(d->word), d->value, d->cmp)) return 0;
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
    case OP_WAITV:
      break; /* its dependency was the whole point */
    case OP_WRITEV:
      /* cuStreamWriteValue32 without CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER: a fence first,
       * "similar semantics to __threadfence_system()": the stream's earlier writes are seen
       * by whoever sees this one (seq_cst, as every operation ran before it in order). */
      atomic_store(o->word, o->uval);
      break;
    case OP_SPIN: {
      /* The planted design (fake_cuda.h): spin on the word while holding the device. */
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      const int64_t until = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + rr__fk_watchdog_ms();
      for (;;) {
        if (f_compare(atomic_load(o->word), o->uval, RR__CUDA_WAIT_GEQ)) break;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if ((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 > until) {
          rr__fk_set_sticky(RR__CUDA_ERR_LAUNCH_TIMEOUT);
          break;
        }
        usleep(100);
      }
      break;
    }
    case OP_DIRECT:
      rr_fake_direct_run(o->direct);
      break;
  }
}

/* Operations that run on the device (its SMs or copy engines): they need it to be this
 * process's (fake_gpu.c). Waits and records are the stream's own bookkeeping. */
static int f_on_device(int kind) {
  return kind != OP_WAIT && kind != OP_WAITV && kind != OP_RECORD;
}

/* Drop a reference to an event; the last one frees it. F.mu held. */
void f_event_unref(struct fevent *ev) {
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
    const int dev = f_on_device(o->kind);
    if (dev) rr__fk_gpu_enter(s->device);
    /* A context whose kernel failed runs nothing more (its error is sticky). */
    if (dev && F.delay_us > 0 && o->kind != OP_WRITEV)
      usleep((useconds_t)(rand_r(&seed) % (2 * F.delay_us + 1)));
    if (!rr__fk_sticky() || !dev) f_exec(o);
    if (dev) rr__fk_gpu_leave(s->device);
    pthread_mutex_lock(&F.mu);
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->done = o->seq;
    if (o->hold) f_event_unref(o->hold);
    free(o->direct);
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
fstream *f_stream(void *h, int *err) {
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
int f_enqueue(fstream *s, fop *o, const fdep *extra) {
  /* Runtime API, cudaStreamBeginCapture: work launched into a capturing stream is not
   * enqueued for execution but captured into the graph (which the fake does not keep). */
  if (s->cap) {
    if (o->hold) f_event_unref(o->hold);
    free(o->direct);
    free(o);
    return 0;
  }
  int cap = 1, n = 0;
  for (fstream *t = F.streams; t; t = t->next) cap++;
  o->deps = calloc((size_t)cap, sizeof *o->deps);
  if (!o->deps) {
    free(o->direct);
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

fop *f_op(int kind) {
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
void f_drain_locked(void) {
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
  return rr__fk_sticky() ? fail(rr__fk_sticky()) : 0;
}

int f_alloc(void **p, size_t bytes, int type) {
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
    int m = fd < 0 || ftruncate(fd, (off_t)len) != 0 ? -1 : 0;
    /* f_map_device takes a freed range, which frees (other threads) put back under F.mu. */
    pthread_mutex_lock(&F.mu);
    if (m == 0) m = f_map_device(fd, len, &base, &shadow);
    pthread_mutex_unlock(&F.mu);
    if (m != 0) {
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
  if (!a || a->base != p || a->from_pid || a->registered ||
      (host != (a->type == RR__CUDA_MEM_HOST))) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  f_drain_locked();
  f_ipc_freeing(a); /* another process still mapping it: counted (fake_ipc.c) */
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
void *f_kernel_ptr(const void *p, size_t bytes, int *bad) {
  if (!p) return NULL;
  int t;
  void *x = f_xlate(p, bytes, &t);
  if (!x || t == RR__CUDA_MEM_UNREGISTERED) *bad = 1;
  return x;
}

/* Checks common to both launchers; F.mu held. */
int f_launch(fop *o, void *stream, const char **what) {
  int err;
  fstream *st = f_stream(stream, &err);
  if (!st) {
    *what = "kernel launch (stream)";
    free(o->direct);
    free(o);
    return fail(err);
  }
  /* PG, "Stream and Event Behavior": a kernel launch fails when its stream is not the
   * current device's. */
  if (st->device != rr__fk_device()) {
    *what = "kernel launch (stream of another device)";
    free(o->direct);
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
  /* A kernel that failed makes every later synchronisation report it (a sticky error). */
  return rr__fk_sticky() ? fail(rr__fk_sticky()) : 0;
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
  e = !s          ? err
      : s->legacy ? RR__CUDA_ERR_CAPTURE_UNSUPPORTED
      : s->cap    ? RR__CUDA_ERR_ILLEGAL_STATE
                  : 0;
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
    .stream_wait_value32 = f_wait_value32,
    .stream_write_value32 = f_write_value32,
    .mem_ops = f_mem_ops,
    .host_register = f_host_register,
    .host_unregister = f_host_unregister,
    .host_device_ptr = f_host_device_ptr,
    .ptr_range = f_ptr_range,
    .device_uuid = rr__fk_device_uuid,
    .can_access_peer = rr__fk_can_access_peer,
    .direct = f_direct_launch,
    .error_string = rr__fk_error_string,
    .error_name = rr__fk_error_name,
    .clear_error = rr__fk_clear_error,
};

const rr__cuda_api *rr_fake_cuda(int devices) {
  rr__fk_setup(devices);
  const char *d = getenv("RR_FAKE_CUDA_DELAY_US");
  F.delay_us = d ? atol(d) : 1000;
  const char *pf = getenv("RR_FAKE_CUDA_PTR_FAIL");
  F.ptr_fail = pf && !strcmp(pf, "1");
  const char *nm = getenv("RR_FAKE_CUDA_NO_MEMOPS");
  F.no_memops = nm && !strcmp(nm, "1");
  rr__fk_gpu_setup();
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
