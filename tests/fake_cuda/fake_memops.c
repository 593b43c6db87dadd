/* The fake CUDA table's stream memory operations, registered host memory, the allocations'
 * ranges, the one-kernel launch and the test hooks around them (tests only; the state is
 * fake_cuda.c's, fake_state.h).
 *
 * Stream memory operations (Driver API, "Stream Memory Operations": cuStreamWaitValue32,
 * cuStreamWriteValue32, CUstreamWaitValue_flags, CUstreamWriteValue_flags).
 *   - A wait is a dependency of the stream's next work that only its word can meet: GEQ is
 *     the cyclic (int32_t)(*addr - value) >= 0, so epochs compare right across 2^32; EQ, AND.
 *     A wait nobody writes never completes; the host storing into a registered word ends it.
 *   - A write runs after the stream's earlier work, fenced (the default flags).
 *   - Their pointers are device pointers: device memory (own or IPC-opened) or the device
 *     pointer of registered host memory; never managed memory, and (stricter than a GPU that
 *     maps host pointers) never the host address of registered memory.
 *   - RR_FAKE_CUDA_NO_MEMOPS=1: a device without them (the library must keep its old
 *     hand-off then).
 * Registered host memory (cudaHostRegister, cudaHostGetDevicePointer, cudaHostUnregister):
 *   page-aligned ranges, never overlapping another; the device pointer is an address of its
 *   own ("may or may not match the original host pointer": here it never does).
 * Allocations (cuPointerGetAttributes RANGE_START_ADDR, RANGE_SIZE, BUFFER_ID): a pointer's
 *   allocation and an id unique per allocation; a freed device range's address is handed out
 *   again first, as the runtime does, so a cache keyed by address serves stale memory;
 *   rr_fake_cuda_malloc_noexport gives memory without an IPC handle (as cudaMallocAsync's
 *   default pool). rr_fake_cuda_malloc_vmm gives memory without one whose BUFFER_ID is 0:
 *   memory made by cuMemCreate + cuMemMap (PyTorch's expandable segments) is no allocation of
 *   the legacy kind (cudaIpcGetMemHandle "takes a pointer to the base of an existing device
 *   memory allocation previously allocated with cudaMalloc"); what its pointer attributes
 *   answer is for a GPU run to see (docs/cuda.md, "Still needs a GPU run").
 */
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
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_cuda/fake_state.h"

/* ---- stream memory operations, registered host memory, the allocations' ranges ---- */

/* The readable view of a stream memory operation's word, or NULL. Driver API, "Stream Memory
 * Operations": "all memory pointers passed as parameters to these operations are device
 * pointers" (device memory, this process's or IPC-opened, or registered host memory's device
 * pointer, "obtained, for example, with cuMemHostGetDevicePointer()": the host address of
 * registered memory is refused here even where a GPU would take it), and "none of the
 * operations accepts pointers to managed memory". A word is 4-byte aligned. F.mu held. */
static _Atomic uint32_t *f_word(void *addr) {
  if (!addr || ((uintptr_t)addr & 3)) return NULL;
  falloc *a = f_find(addr);
  if (!a || !(a->type == RR__CUDA_MEM_DEVICE || a->devmap)) return NULL;
  int t;
  return f_xlate(addr, sizeof(uint32_t), &t);
}

/* cuStreamWaitValue32 / cuStreamWriteValue32: queued in stream order. A wait is a dependency
 * of the stream's next operation that only the word can meet: nothing else ends it, so a wait
 * nobody writes blocks the stream for good (the host may store into a registered word). It
 * holds no device meanwhile (fake_gpu.c). Flags: the wait's comparisons GEQ, EQ, AND; a
 * write's default only (NO_MEMORY_BARRIER "is not supported in the v2 API"). Without stream
 * memory operations (RR_FAKE_CUDA_NO_MEMOPS=1, as a driver without them) both fail with
 * CUDA_ERROR_NOT_SUPPORTED. */
static int f_memop(void *stream, void *addr, unsigned value, unsigned flags, int wait) {
  int e = f_ctx(wait ? "cuStreamWaitValue32" : "cuStreamWriteValue32");
  if (e) return e;
  if (F.no_memops) return fail(RR__CUDA_ERR_NOT_SUPPORTED);
  if (wait ? flags > RR__CUDA_WAIT_AND : flags != RR__CUDA_WRITE_DEFAULT)
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  pthread_mutex_lock(&F.mu);
  int err = 0;
  _Atomic uint32_t *w = f_word(addr);
  fstream *st = f_stream(stream, &err);
  fop *o = w && st ? f_op(wait ? OP_WAITV : OP_WRITEV) : NULL;
  if (!o) {
    pthread_mutex_unlock(&F.mu);
    return fail(err ? err : w ? RR__CUDA_ERR_MEMORY_ALLOCATION : RR__CUDA_ERR_INVALID_VALUE);
  }
  fdep d = {.word = w, .value = value, .cmp = (int)flags};
  o->word = w;
  o->uval = value;
  e = f_enqueue(st, o, wait ? &d : NULL);
  pthread_mutex_unlock(&F.mu);
  return e;
}
int f_wait_value32(void *stream, void *addr, unsigned value, unsigned flags) {
  return f_memop(stream, addr, value, flags, 1);
}
int f_write_value32(void *stream, void *addr, unsigned value, unsigned flags) {
  return f_memop(stream, addr, value, flags, 0);
}
void rr_fake_cuda_no_memops(int on) {
  F.no_memops = on;
}

int f_mem_ops(int device, int *ok) {
  *ok = 0;
  int e = rr__fk_init();
  if (e) return e;
  *ok = !F.no_memops;
  return 0;
}

/* cudaHostRegister(cudaHostRegisterMapped | cudaHostRegisterPortable): page-aligned host
 * memory becomes reachable from every device, through a device pointer that
 * cudaHostGetDevicePointer gives ("may or may not match the original host pointer": here it
 * never does, so a stream operation given the host address fails). Registering a range that
 * overlaps a registered or CUDA-allocated one fails (cudaErrorHostMemoryAlreadyRegistered).
 * The alignment is the fake's condition: the library registers whole pages. */
int f_host_register(void *p, size_t bytes) {
  int e = f_ctx("cudaHostRegister");
  if (e) return e;
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  if (!p || !bytes || (uintptr_t)p % pg) return fail(RR__CUDA_ERR_INVALID_VALUE);
  const size_t len = f_round(bytes);
  char *dev = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (dev == MAP_FAILED) return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  pthread_mutex_lock(&F.mu);
  for (falloc *a = F.allocs; a; a = a->next)
    if (!a->devmap && (char *)p < a->base + a->bytes && a->base < (char *)p + len) {
      pthread_mutex_unlock(&F.mu);
      munmap(dev, len);
      return fail(RR__CUDA_ERR_HOST_REGISTERED);
    }
  falloc *h = f_register(p, p, len, RR__CUDA_MEM_HOST, rr__fk_device(), -1);
  falloc *d = h ? f_register(dev, p, len, RR__CUDA_MEM_HOST, rr__fk_device(), -1) : NULL;
  if (h) h->registered = 1;
  if (d) d->registered = d->devmap = 1;
  pthread_mutex_unlock(&F.mu);
  if (!d) {
    if (h) {
      pthread_mutex_lock(&F.mu);
      f_unregister(h);
      pthread_mutex_unlock(&F.mu);
    }
    munmap(dev, len);
    return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  }
  return 0;
}

/* The registered range's device pointer entry (F.mu held). */
static falloc *f_devmap_of(const falloc *h) {
  for (falloc *a = F.allocs; a; a = a->next)
    if (a->devmap && a->shadow == h->base) return a;
  return NULL;
}

/* cudaHostUnregister: the base of a registered range; the device's work on it is done first
 * (as the fake's cudaFree waits). */
int f_host_unregister(void *p) {
  int e = f_ctx("cudaHostUnregister");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  falloc *h = f_find(p);
  if (!h || h->base != p || !h->registered || h->devmap) {
    pthread_mutex_unlock(&F.mu);
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  f_drain_locked();
  falloc *d = f_devmap_of(h);
  if (d) f_unregister(d);
  f_unregister(h);
  pthread_mutex_unlock(&F.mu);
  return 0;
}

int f_host_device_ptr(void **dptr, void *p) {
  *dptr = NULL;
  int e = f_ctx("cudaHostGetDevicePointer");
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  falloc *h = f_find(p);
  falloc *d = h && h->registered && !h->devmap ? f_devmap_of(h) : NULL;
  if (d) *dptr = d->base + ((char *)p - h->base);
  pthread_mutex_unlock(&F.mu);
  return d ? 0 : fail(RR__CUDA_ERR_INVALID_VALUE);
}

/* cuPointerGetAttributes(RANGE_START_ADDR, RANGE_SIZE, BUFFER_ID): the allocation a pointer
 * lies in; "BUFFER_ID: a process-wide unique ID for an allocated memory region" (Driver API,
 * CUpointer_attribute): a new allocation at a freed one's address has a new id. Memory the
 * fake does not know fails (CUDA_ERROR_INVALID_VALUE). */
int f_ptr_range(const void *p, void **base, size_t *bytes, unsigned long long *id) {
  *base = NULL;
  *bytes = 0;
  *id = 0;
  int e = rr__fk_init();
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  falloc *a = f_find(p);
  if (a) *base = a->base, *bytes = a->bytes, *id = a->vmm ? 0 : a->id;
  pthread_mutex_unlock(&F.mu);
  return a ? 0 : fail(RR__CUDA_ERR_INVALID_VALUE);
}

/* The one-kernel form: every pointer as a kernel's (device, managed or pinned memory; n
 * elements each), the tasks run by fake_kernels.c. */
int f_direct_launch(const rr__cuda_direct *d, void *stream, const char **what) {
  *what = "";
  int e = f_ctx("the one-kernel collective launch");
  if (e) return e;
  int ok = rr__op_applies((rr_dtype)d->dtype, (rr_op)d->op) && d->ntasks >= 1 &&
           d->ntasks <= RR__CUDA_DIRECT_MAX;
  for (int k = 0; ok && k < d->ntasks; k++)
    ok = d->task[k].nin >= 1 && d->task[k].nin <= RR__CUDA_DIRECT_MAX && d->task[k].nout >= 0 &&
         d->task[k].nout <= RR__CUDA_DIRECT_MAX;
  if (!ok) {
    *what = "one-kernel collective dispatch";
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  if (d->n == 0) return 0;
  const size_t bytes = d->n * rr_dtype_size((rr_dtype)d->dtype);
  fop *o = f_op(OP_DIRECT);
  if (o) o->direct = malloc(sizeof *d);
  if (!o || !o->direct) {
    free(o);
    return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  }
  *o->direct = *d;
  pthread_mutex_lock(&F.mu);
  int bad = 0;
  for (int k = 0; k < d->ntasks; k++) {
    rr__cuda_direct_task *t = &o->direct->task[k];
    for (int r = 0; r < t->nin; r++)
      t->in[r] = f_kernel_ptr(t->in[r], bytes, &bad), bad |= !t->in[r];
    for (int j = 0; j < t->nout; j++)
      t->out[j] = f_kernel_ptr(t->out[j], bytes, &bad), bad |= !t->out[j];
  }
  if (bad) {
    pthread_mutex_unlock(&F.mu);
    free(o->direct);
    free(o);
    *what = "one-kernel collective (a pointer is not device-accessible memory)";
    return fail(E_LAUNCH_FAILED);
  }
  e = f_launch(o, stream, what);
  pthread_mutex_unlock(&F.mu);
  return e;
}

int rr_fake_cuda_spin_kernel(void *word, unsigned value, void *stream) {
  int e = f_ctx("the spin kernel launch");
  if (e) return e;
  fop *o = f_op(OP_SPIN);
  if (!o) return fail(RR__CUDA_ERR_MEMORY_ALLOCATION);
  pthread_mutex_lock(&F.mu);
  o->word = f_word(word);
  o->uval = value;
  if (!o->word) {
    pthread_mutex_unlock(&F.mu);
    free(o);
    return fail(RR__CUDA_ERR_INVALID_VALUE);
  }
  const char *what = "";
  e = f_launch(o, stream, &what);
  pthread_mutex_unlock(&F.mu);
  return e;
}

int rr_fake_cuda_malloc_noexport(void **p, size_t bytes) {
  int e = f_alloc(p, bytes, RR__CUDA_MEM_DEVICE);
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  f_find(*p)->noexport = 1;
  pthread_mutex_unlock(&F.mu);
  return 0;
}

int rr_fake_cuda_malloc_vmm(void **p, size_t bytes) {
  int e = f_alloc(p, bytes, RR__CUDA_MEM_DEVICE);
  if (e) return e;
  pthread_mutex_lock(&F.mu);
  falloc *a = f_find(*p);
  a->noexport = a->vmm = 1;
  pthread_mutex_unlock(&F.mu);
  return 0;
}
