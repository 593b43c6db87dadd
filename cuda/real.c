/* The CUDA runtime behind the library's CUDA table (cuda/api.h): each entry one runtime
 * call, its cudaError_t returned as an int. Built only with RR_HAVE_CUDA (nvcc found); the
 * runtime is linked statically, so the library still loads where there is no driver.
 *
 * Pointer attributes. cudaPointerGetAttributes initialises the runtime and may create a
 * context on the current device (hundreds of MB of GPU memory per process), which a CPU-only
 * program on a GPU machine must not pay on every collective. So the driver's
 * cuPointerGetAttributes is used, fetched through cudaGetDriverEntryPointByVersion (before
 * CUDA 12.5, cudaGetDriverEntryPoint; no libcuda link); it needs no context. If that entry point is
 * missing, cudaPointerGetAttributes is asked instead, but only once some device's primary context
 * is active (device memory from cudaMalloc cannot exist before one); with neither entry point it is
 * asked always. */
#include "cuda/api.h"

#ifndef RR_HAVE_CUDA
const rr__cuda_api *rr__cuda_real_api(void) {
  return NULL;
}
#else

#include <cuda.h> /* driver types only; the driver is reached through the runtime */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda.h"

typedef CUresult (*rr__pfn_ptr_attrs)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
typedef CUresult (*rr__pfn_ctx_state)(CUdevice, unsigned int *, int *);
typedef CUresult (*rr__pfn_memop)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

static pthread_once_t rr__real_once = PTHREAD_ONCE_INIT;
static rr__pfn_ptr_attrs rr__drv_ptr_attrs; /* cuPointerGetAttributes, or NULL */
static rr__pfn_ctx_state rr__drv_ctx_state; /* cuDevicePrimaryCtxGetState, or NULL */
/* cuStreamWaitValue32 / cuStreamWriteValue32 as of CUDA 12.0 (the "v2" operations, on by
 * default on every platform since 11.7; the v1 ones needed NVreg_EnableStreamMemOPs=1), or
 * NULL: then the old hand-off is kept (docs/cuda.md, "Stream memory operations"). */
static rr__pfn_memop rr__drv_wait32, rr__drv_write32;
static int rr__real_ndev;
static atomic_int rr__ctx_seen; /* a primary context was seen active */

/* cudaGetDriverEntryPointByVersion came with CUDA 12.5; before it, cudaGetDriverEntryPoint
 * (deprecated since) answers the same question for the driver the runtime found, and 11.x's
 * form of it has no query result. RR__CUDA_ENTRY_LEGACY forces the pre-12.5 form, so that a
 * newer toolkit can check it compiles (tests/cuda.cmake, cuda_entry_legacy). */
#if CUDART_VERSION >= 12050 && !defined(RR__CUDA_ENTRY_LEGACY)
#define RR__ENTRY_BY_VERSION 1
#else
#define RR__ENTRY_BY_VERSION 0
#endif

static void *rr__entry(const char *sym) {
  void *fn = NULL;
#if CUDART_VERSION >= 12000
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if RR__ENTRY_BY_VERSION
  cudaError_t e = cudaGetDriverEntryPointByVersion(sym, &fn, 12000, cudaEnableDefault, &q);
#else
  cudaError_t e = cudaGetDriverEntryPoint(sym, &fn, cudaEnableDefault, &q);
#endif
  int found = q == cudaDriverEntryPointSuccess;
#else
  cudaError_t e = cudaGetDriverEntryPoint(sym, &fn, cudaEnableDefault);
  int found = fn != NULL;
#endif
  if (e != cudaSuccess || !found) {
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

/* The driver entry points, once, and only when a driver with a device is there. */
static void rr__real_init(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  rr__real_ndev = n;
  if (n > 0) {
    rr__drv_ptr_attrs = (rr__pfn_ptr_attrs)rr__entry("cuPointerGetAttributes");
    rr__drv_ctx_state = (rr__pfn_ctx_state)rr__entry("cuDevicePrimaryCtxGetState");
#if CUDART_VERSION >= 11070
    rr__drv_wait32 = (rr__pfn_memop)rr__entry("cuStreamWaitValue32");
    rr__drv_write32 = (rr__pfn_memop)rr__entry("cuStreamWriteValue32");
#endif
    /* Before 11.7, cudaGetDriverEntryPoint answers for the runtime's own version: the v1
     * operations, which the driver refuses (CUDA_ERROR_NOT_SUPPORTED) unless it was loaded
     * with NVreg_EnableStreamMemOPs=1. They stay NULL there, as if missing. */
  }
}

static int r_device_count(int *n) {
  pthread_once(&rr__real_once, rr__real_init);
  *n = 0;
  return (int)cudaGetDeviceCount(n);
}
static int r_get_device(int *d) {
  return (int)cudaGetDevice(d);
}
static int r_set_device(int d) {
  return (int)cudaSetDevice(d);
}
static int r_device_sync(void) {
  return (int)cudaDeviceSynchronize();
}

static int r_primary_ctx_active(int device, int *active) {
  pthread_once(&rr__real_once, rr__real_init);
  *active = 0;
  if (!rr__drv_ctx_state) return (int)cudaErrorInvalidValue;
  unsigned flags = 0;
  if (rr__drv_ctx_state((CUdevice)device, &flags, active) != CUDA_SUCCESS)
    return (int)cudaErrorInvalidDevice;
  return (int)cudaSuccess;
}

/* May cudaPointerGetAttributes be asked without creating a context? */
static int rr__some_context_active(void) {
  if (atomic_load_explicit(&rr__ctx_seen, memory_order_relaxed)) return 1;
  if (!rr__drv_ctx_state) return 1; /* cannot tell: ask anyway (docs/cuda.md) */
  for (int d = 0; d < rr__real_ndev; d++) {
    int active = 0;
    if (r_primary_ctx_active(d, &active) == 0 && active) {
      atomic_store_explicit(&rr__ctx_seen, 1, memory_order_relaxed);
      return 1;
    }
  }
  return 0;
}

static int r_ptr_attrs(const void *p, int *type, int *device) {
  pthread_once(&rr__real_once, rr__real_init);
  *type = 0;
  *device = -1;
  if (rr__drv_ptr_attrs) {
    CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned int mtype = 0;
    int ordinal = -1;
    unsigned int managed = 0; /* the driver writes a bool-sized flag; zeroed so any width reads */
    void *out[3] = {&mtype, &ordinal, &managed};
    /* It answers any pointer, CUDA's or not (unknown ones get the default attributes), so a
     * failure says nothing about p. Its documented failures (CUDA_ERROR_INVALID_CONTEXT,
     * _DEINITIALIZED, _INVALID_VALUE, _INVALID_DEVICE) have the runtime's numbers for the
     * same errors, so the code is passed on as it is, for its name in the message. */
    CUresult r = rr__drv_ptr_attrs(3, at, out, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS) return (int)r;
    *type = managed                         ? RR__CUDA_MEM_MANAGED
            : mtype == CU_MEMORYTYPE_DEVICE ? RR__CUDA_MEM_DEVICE
            : mtype == CU_MEMORYTYPE_HOST   ? RR__CUDA_MEM_HOST
                                            : RR__CUDA_MEM_UNREGISTERED;
    *device = ordinal;
    return 0;
  }
  if (!rr__some_context_active()) return 0; /* no context: no device memory can exist */
  struct cudaPointerAttributes at;
  memset(&at, 0, sizeof at);
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) return (int)e;
  *type = (int)at.type;
  *device = at.device;
  return 0;
}

static int r_malloc(void **p, size_t b) {
  return (int)cudaMalloc(p, b);
}
static int r_free(void *p) {
  return (int)cudaFree(p);
}
static int r_malloc_managed(void **p, size_t b) {
  return (int)cudaMallocManaged(p, b, cudaMemAttachGlobal);
}
static int r_host_alloc(void **p, size_t b) {
  return (int)cudaHostAlloc(p, b, cudaHostAllocPortable);
}
static int r_host_free(void *p) {
  return (int)cudaFreeHost(p);
}
static int r_memcpy_async(void *dst, const void *src, size_t b, void *s) {
  return (int)cudaMemcpyAsync(dst, src, b, cudaMemcpyDefault, (cudaStream_t)s);
}
static int r_memset_async(void *dst, int v, size_t b, void *s) {
  return (int)cudaMemsetAsync(dst, v, b, (cudaStream_t)s);
}
static int r_stream_create(void **s, int nonblocking) {
  return (int)cudaStreamCreateWithFlags((cudaStream_t *)s,
                                        nonblocking ? cudaStreamNonBlocking : cudaStreamDefault);
}
static int r_stream_destroy(void *s) {
  return (int)cudaStreamDestroy((cudaStream_t)s);
}
static int r_stream_sync(void *s) {
  return (int)cudaStreamSynchronize((cudaStream_t)s);
}
static int r_stream_is_capturing(void *s, int *capturing) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing((cudaStream_t)s, &st);
  *capturing = e == cudaSuccess && st != cudaStreamCaptureStatusNone;
  return (int)e;
}
static int r_stream_begin_capture(void *s) {
  return (int)cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeRelaxed);
}
static int r_stream_end_capture(void *s) {
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture((cudaStream_t)s, &g);
  if (g) (void)cudaGraphDestroy(g);
  return (int)e;
}
static int r_stream_wait_event(void *s, void *e) {
  return (int)cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0);
}
static int r_event_create(void **e, unsigned flags) {
  return (int)cudaEventCreateWithFlags((cudaEvent_t *)e, flags);
}
static int r_event_destroy(void *e) {
  return (int)cudaEventDestroy((cudaEvent_t)e);
}
static int r_event_record(void *e, void *s) {
  return (int)cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s);
}
static int r_event_sync(void *e) {
  return (int)cudaEventSynchronize((cudaEvent_t)e);
}
static int r_event_query(void *e) {
  return (int)cudaEventQuery((cudaEvent_t)e);
}

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(rr__cuda_ipc_handle), "IPC handle size");
_Static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(rr__cuda_ipc_handle), "IPC handle size");

static int r_ipc_get_mem_handle(rr__cuda_ipc_handle *h, void *p) {
  cudaIpcMemHandle_t m;
  cudaError_t e = cudaIpcGetMemHandle(&m, p);
  if (e == cudaSuccess) memcpy(h->bytes, &m, sizeof m);
  return (int)e;
}
static int r_ipc_open_mem_handle(void **p, const rr__cuda_ipc_handle *h) {
  cudaIpcMemHandle_t m;
  memcpy(&m, h->bytes, sizeof m);
  return (int)cudaIpcOpenMemHandle(p, m, cudaIpcMemLazyEnablePeerAccess);
}
static int r_ipc_close_mem_handle(void *p) {
  return (int)cudaIpcCloseMemHandle(p);
}
static int r_ipc_get_event_handle(rr__cuda_ipc_handle *h, void *ev) {
  cudaIpcEventHandle_t m;
  cudaError_t e = cudaIpcGetEventHandle(&m, (cudaEvent_t)ev);
  if (e == cudaSuccess) memcpy(h->bytes, &m, sizeof m);
  return (int)e;
}
static int r_ipc_open_event_handle(void **ev, const rr__cuda_ipc_handle *h) {
  cudaIpcEventHandle_t m;
  memcpy(&m, h->bytes, sizeof m);
  return (int)cudaIpcOpenEventHandle((cudaEvent_t *)ev, m);
}
/* Driver errors carry their own numbers; the ones a stream memory operation documents
 * (CUDA_ERROR_INVALID_VALUE, _NOT_SUPPORTED, _INVALID_HANDLE, _INVALID_CONTEXT) have the
 * runtime's numbers for the same errors, so the code is passed on for its name. */
static int r_stream_wait_value32(void *s, void *addr, unsigned v, unsigned flags) {
  pthread_once(&rr__real_once, rr__real_init);
  if (!rr__drv_wait32) return (int)cudaErrorNotSupported;
  return (int)rr__drv_wait32((CUstream)s, (CUdeviceptr)(uintptr_t)addr, v, flags);
}
static int r_stream_write_value32(void *s, void *addr, unsigned v, unsigned flags) {
  pthread_once(&rr__real_once, rr__real_init);
  if (!rr__drv_write32) return (int)cudaErrorNotSupported;
  return (int)rr__drv_write32((CUstream)s, (CUdeviceptr)(uintptr_t)addr, v, flags);
}
/* The words the operations wait on are host memory registered with cudaHostRegister and
 * mapped (transport/cuda_ipc.c), so the device must map host memory and take registrations:
 * "cudaHostRegister is supported only on I/O coherent devices that have a non-zero value for
 * the device attribute cudaDevAttrHostRegisterSupported" (runtime API, cudaHostRegister).
 * Where it is 0 the lane's cudaHostRegister would fail the call instead of keeping the host
 * hand-off. */
static int r_mem_ops(int device, int *ok) {
  pthread_once(&rr__real_once, rr__real_init);
  *ok = 0;
  if (!rr__drv_wait32 || !rr__drv_write32) return 0;
  int map = 0, reg = 0;
  cudaError_t e = cudaDeviceGetAttribute(&map, cudaDevAttrCanMapHostMemory, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&reg, cudaDevAttrHostRegisterSupported, device);
  if (e != cudaSuccess) return (int)e;
  *ok = map != 0 && reg != 0;
  return 0;
}
static int r_host_register(void *p, size_t b) {
  return (int)cudaHostRegister(p, b, cudaHostRegisterMapped | cudaHostRegisterPortable);
}
static int r_host_unregister(void *p) {
  return (int)cudaHostUnregister(p);
}
static int r_host_device_ptr(void **d, void *p) {
  return (int)cudaHostGetDevicePointer(d, p, 0);
}
static int r_ptr_range(const void *p, void **base, size_t *bytes, unsigned long long *id) {
  pthread_once(&rr__real_once, rr__real_init);
  *base = NULL;
  *bytes = 0;
  *id = 0;
  if (!rr__drv_ptr_attrs) return (int)cudaErrorNotSupported;
  CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                               CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned long long bid = 0;
  void *out[3] = {&start, &size, &bid};
  CUresult r = rr__drv_ptr_attrs(3, at, out, (CUdeviceptr)(uintptr_t)p);
  if (r != CUDA_SUCCESS) return (int)r;
  *base = (void *)(uintptr_t)start;
  *bytes = size;
  *id = bid;
  return 0;
}
static int r_device_uuid(int device, unsigned char uuid[16]) {
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e == cudaSuccess) memcpy(uuid, prop.uuid.bytes, 16);
  return (int)e;
}
_Static_assert(sizeof(((struct cudaDeviceProp *)0)->uuid) == 16, "cudaUUID_t is 16 bytes");
static int r_can_access_peer(int *can, int device, int peer) {
  *can = 0;
  return (int)cudaDeviceCanAccessPeer(can, device, peer);
}

static const char *r_error_string(int e) {
  return cudaGetErrorString((cudaError_t)e);
}
static const char *r_error_name(int e) {
  return cudaGetErrorName((cudaError_t)e);
}
static void r_clear_error(void) {
  (void)cudaGetLastError();
}

static const rr__cuda_api rr__real = {
    .name = "CUDA runtime",
    .device_count = r_device_count,
    .get_device = r_get_device,
    .set_device = r_set_device,
    .device_sync = r_device_sync,
    .primary_ctx_active = r_primary_ctx_active,
    .ptr_attrs = r_ptr_attrs,
    .malloc = r_malloc,
    .free = r_free,
    .malloc_managed = r_malloc_managed,
    .host_alloc = r_host_alloc,
    .host_free = r_host_free,
    .memcpy_async = r_memcpy_async,
    .memset_async = r_memset_async,
    .reduce = rr__cuda_reduce_launch,
    .ddp = rr__cuda_ddp_launch,
    .stream_create = r_stream_create,
    .stream_destroy = r_stream_destroy,
    .stream_sync = r_stream_sync,
    .stream_wait_event = r_stream_wait_event,
    .stream_is_capturing = r_stream_is_capturing,
    .stream_begin_capture = r_stream_begin_capture,
    .stream_end_capture = r_stream_end_capture,
    .event_create = r_event_create,
    .event_destroy = r_event_destroy,
    .event_record = r_event_record,
    .event_sync = r_event_sync,
    .event_query = r_event_query,
    .ipc_get_mem_handle = r_ipc_get_mem_handle,
    .ipc_open_mem_handle = r_ipc_open_mem_handle,
    .ipc_close_mem_handle = r_ipc_close_mem_handle,
    .ipc_get_event_handle = r_ipc_get_event_handle,
    .ipc_open_event_handle = r_ipc_open_event_handle,
    .stream_wait_value32 = r_stream_wait_value32,
    .stream_write_value32 = r_stream_write_value32,
    .mem_ops = r_mem_ops,
    .host_register = r_host_register,
    .host_unregister = r_host_unregister,
    .host_device_ptr = r_host_device_ptr,
    .ptr_range = r_ptr_range,
    .device_uuid = r_device_uuid,
    .can_access_peer = r_can_access_peer,
    .direct = rr__cuda_direct_launch,
    .error_string = r_error_string,
    .error_name = r_error_name,
    .clear_error = r_clear_error,
};

const rr__cuda_api *rr__cuda_real_api(void) {
  return &rr__real;
}

#endif /* RR_HAVE_CUDA */
