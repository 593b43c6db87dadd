/* The CUDA runtime layer (cuda/cuda.h): lazy initialisation, pointer detection, device
 * choice, pinned memory, copies and the reduction launcher, each CUDA call checked and its
 * failure turned into "<call>: <cudaGetErrorString> (<cudaGetErrorName>)".
 *
 * Built without CUDA (RR_HAVE_CUDA undefined) this file is the stubs: no device, no device
 * pointers, and the calls that need CUDA fail with RR_ENOTSUP.
 *
 * Pointer detection. cudaPointerGetAttributes initialises the runtime and may create a
 * context on the current device (hundreds of MB of GPU memory per process), which a CPU-only
 * program on a GPU machine must not pay on every collective. So the driver's
 * cuPointerGetAttributes is used, fetched through cudaGetDriverEntryPointByVersion (no
 * libcuda link: the runtime is static and the library loads without a driver); it needs no
 * context. If that entry point is missing, cudaPointerGetAttributes is asked instead, but
 * only once some device's primary context is active (device memory from cudaMalloc cannot
 * exist before one). */
#include "cuda/cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/status.h"

int rr__cuda_built(void) {
#ifdef RR_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

#ifndef RR_HAVE_CUDA
/* ---- stubs ---------------------------------------------------------------------------- */

static int rr__no_cuda(const char *what) {
  return rr__set_error(RR_ENOTSUP,
                       "%s: this build of ringreduce has no CUDA support (configure with "
                       "-DRR_CUDA=ON and a CUDA toolkit; see docs/cuda.md)",
                       what);
}

int rr__cuda_available(void) { return 0; }
int rr__cuda_device_count(void) { return 0; }
int rr__cuda_is_device_ptr(const void *p) { (void)p; return 0; }
int rr__cuda_ptr_device(const void *p, int *device) {
  (void)p;
  if (device) *device = -1;
  return 0;
}
int rr__cuda_pick_device(int option, int local_rank, int *device) {
  (void)option, (void)local_rank;
  if (device) *device = -1;
  return rr__no_cuda("choosing a CUDA device");
}
int rr__cuda_set_device(int device, int *previous) {
  (void)device;
  if (previous) *previous = -1;
  return rr__no_cuda("cudaSetDevice");
}
int rr__cuda_host_alloc(void **p, size_t bytes) {
  (void)bytes;
  *p = NULL;
  return rr__no_cuda("cudaHostAlloc");
}
void rr__cuda_host_free(void *p) { (void)p; }
int rr__cuda_memcpy_sync(void *dst, const void *src, size_t bytes, void *stream) {
  (void)dst, (void)src, (void)bytes, (void)stream;
  return rr__no_cuda("cudaMemcpyAsync");
}
int rr__cuda_stream_sync(void *stream) {
  (void)stream;
  return rr__no_cuda("cudaStreamSynchronize");
}
int rr__cuda_reduce(void *dst, void *dst2, const void *a, const void *b, size_t n, rr_dtype dtype,
                    rr_op op, int avg_div, void *stream) {
  (void)dst, (void)dst2, (void)a, (void)b, (void)n, (void)dtype, (void)op, (void)avg_div,
      (void)stream;
  return rr__no_cuda("the CUDA reduction kernel");
}
int rr__cuda_malloc(void **p, size_t bytes) {
  (void)bytes;
  *p = NULL;
  return rr__no_cuda("cudaMalloc");
}
void rr__cuda_free(void *p) { (void)p; }
int rr__cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream) {
  (void)dst, (void)src, (void)bytes, (void)stream;
  return rr__no_cuda("cudaMemcpyAsync");
}
int rr__cuda_ddp(int kind, void *dst, const void *src, size_t n, rr_dtype dtype, rr_dtype wire,
                 int world, void *stream) {
  (void)kind, (void)dst, (void)src, (void)n, (void)dtype, (void)wire, (void)world, (void)stream;
  return rr__no_cuda("the CUDA DDP kernels");
}

#else /* RR_HAVE_CUDA */
/* ---- CUDA ----------------------------------------------------------------------------- */

#include <cuda.h> /* driver types only; the driver is reached through the runtime */
#include <cuda_runtime_api.h>

static int rr__cuda_fail(cudaError_t e, const char *call) {
  /* A non-sticky error would otherwise be reported again by the next unrelated call. */
  (void)cudaGetLastError();
  return rr__set_error(RR_ECUDA, "%s: %s (%s)", call, cudaGetErrorString(e),
                       cudaGetErrorName(e));
}

#define RR__CU(call)                                              \
  do {                                                            \
    cudaError_t rr__e_ = (call);                                  \
    if (rr__e_ != cudaSuccess) return rr__cuda_fail(rr__e_, #call); \
  } while (0)

typedef CUresult (*rr__pfn_ptr_attrs)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
typedef CUresult (*rr__pfn_ctx_state)(CUdevice, unsigned int *, int *);

static pthread_once_t rr__cuda_once = PTHREAD_ONCE_INIT;
static int rr__ndev;                     /* 0: no driver, no device, or init failed */
static rr__pfn_ptr_attrs rr__ptr_attrs;  /* cuPointerGetAttributes, or NULL */
static rr__pfn_ctx_state rr__ctx_state;  /* cuDevicePrimaryCtxGetState, or NULL */
static atomic_int rr__ctx_seen;          /* a primary context was seen active */

static void *rr__entry(const char *sym) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  cudaError_t e = cudaGetDriverEntryPointByVersion(sym, &fn, 12000, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

static void rr__cuda_init(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    /* No driver, a driver older than this runtime, or no device: the CPU path is all. */
    (void)cudaGetLastError();
    n = 0;
  }
  rr__ndev = n > 0 ? n : 0;
  if (rr__ndev > 0) {
    rr__ptr_attrs = (rr__pfn_ptr_attrs)rr__entry("cuPointerGetAttributes");
    rr__ctx_state = (rr__pfn_ctx_state)rr__entry("cuDevicePrimaryCtxGetState");
  }
}

int rr__cuda_available(void) {
  pthread_once(&rr__cuda_once, rr__cuda_init);
  return rr__ndev > 0;
}

int rr__cuda_device_count(void) { return rr__cuda_available() ? rr__ndev : 0; }

/* May cudaPointerGetAttributes be asked without creating a context? */
static int rr__some_context_active(void) {
  if (atomic_load_explicit(&rr__ctx_seen, memory_order_relaxed)) return 1;
  if (!rr__ctx_state) return 1; /* cannot tell: ask anyway (documented) */
  for (int d = 0; d < rr__ndev; d++) {
    unsigned flags = 0;
    int active = 0;
    if (rr__ctx_state((CUdevice)d, &flags, &active) == CUDA_SUCCESS && active) {
      atomic_store_explicit(&rr__ctx_seen, 1, memory_order_relaxed);
      return 1;
    }
  }
  return 0;
}

int rr__cuda_ptr_device(const void *p, int *device) {
  if (device) *device = -1;
  if (!p || !rr__cuda_available()) return 0;
  if (rr__ptr_attrs) {
    CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned int mtype = 0;
    int ordinal = -1;
    unsigned int managed = 0; /* the driver writes a bool-sized flag; zeroed so any width reads */
    void *out[3] = {&mtype, &ordinal, &managed};
    if (rr__ptr_attrs(3, at, out, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) return 0;
    if (mtype != CU_MEMORYTYPE_DEVICE || managed) return 0;
    if (device) *device = ordinal;
    return 1;
  }
  if (!rr__some_context_active()) return 0;
  struct cudaPointerAttributes at;
  memset(&at, 0, sizeof at);
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* host memory unknown to CUDA, on old drivers */
    return 0;
  }
  if (at.type != cudaMemoryTypeDevice) return 0;
  if (device) *device = at.device;
  return 1;
}

int rr__cuda_is_device_ptr(const void *p) { return rr__cuda_ptr_device(p, NULL); }

int rr__cuda_pick_device(int option, int local_rank, int *device) {
  *device = -1;
  if (!rr__cuda_available())
    return rr__set_error(RR_ECUDA, "no CUDA device: the CUDA runtime found no usable driver or GPU");
  if (option >= 0) {
    if (option >= rr__ndev)
      return rr__set_error(RR_EINVAL, "CUDA device %d requested, but this machine has %d",
                           option, rr__ndev);
    *device = option;
  } else {
    /* Ranks beyond the device count share devices round-robin (tests run 4 ranks on one). */
    *device = local_rank > 0 ? local_rank % rr__ndev : 0;
  }
  return RR_OK;
}

int rr__cuda_set_device(int device, int *previous) {
  int cur = -1;
  RR__CU(cudaGetDevice(&cur));
  if (previous) *previous = cur;
  if (cur != device) RR__CU(cudaSetDevice(device));
  return RR_OK;
}

int rr__cuda_host_alloc(void **p, size_t bytes) {
  *p = NULL;
  if (bytes == 0) bytes = 1;
  cudaError_t e = cudaHostAlloc(p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    *p = NULL;
    rr__cuda_fail(e, "cudaHostAlloc");
    char what[64];
    snprintf(what, sizeof what, "pinned staging buffer of %zu bytes", bytes);
    return rr__prefix_error(RR_ECUDA, "%s", what);
  }
  return RR_OK;
}

void rr__cuda_host_free(void *p) {
  if (p && cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
}

int rr__cuda_memcpy_sync(void *dst, const void *src, size_t bytes, void *stream) {
  if (bytes == 0) return RR_OK;
  cudaStream_t s = (cudaStream_t)stream;
  RR__CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  RR__CU(cudaStreamSynchronize(s));
  return RR_OK;
}

int rr__cuda_stream_sync(void *stream) {
  RR__CU(cudaStreamSynchronize((cudaStream_t)stream));
  return RR_OK;
}

int rr__cuda_malloc(void **p, size_t bytes) {
  *p = NULL;
  cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    *p = NULL;
    rr__cuda_fail(e, "cudaMalloc");
    return rr__prefix_error(RR_ECUDA, "allocating %zu bytes of device memory", bytes);
  }
  return RR_OK;
}

void rr__cuda_free(void *p) {
  if (p && cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

int rr__cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream) {
  if (bytes == 0) return RR_OK;
  RR__CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream));
  return RR_OK;
}

int rr__cuda_ddp(int kind, void *dst, const void *src, size_t n, rr_dtype dtype, rr_dtype wire,
                 int world, void *stream) {
  if (n == 0) return RR_OK;
  const char *what = "";
  int e = rr__cuda_ddp_launch(kind, dst, src, n, (int)dtype, (int)wire, world, stream, &what);
  if (e != (int)cudaSuccess) return rr__cuda_fail((cudaError_t)e, what);
  return RR_OK;
}

int rr__cuda_reduce(void *dst, void *dst2, const void *a, const void *b, size_t n, rr_dtype dtype,
                    rr_op op, int avg_div, void *stream) {
  if (!rr__cuda_reduce_supported((int)dtype, (int)op))
    return rr__set_error(RR_EINVAL, "CUDA reduce: op %s is not defined for dtype %s",
                         rr_op_name(op), rr_dtype_name(dtype));
  const char *what = "";
  int e = rr__cuda_reduce_launch(dst, dst2, a, b, n, (int)dtype, (int)op, avg_div, stream, &what);
  if (e != (int)cudaSuccess) return rr__cuda_fail((cudaError_t)e, what);
  return RR_OK;
}

#endif /* RR_HAVE_CUDA */
