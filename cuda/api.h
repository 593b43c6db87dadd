/* The one table through which the library makes every CUDA call (internal: rr__ prefix).
 *
 * Two implementations fill it:
 *   - cuda/real.c: the CUDA runtime, linked statically (built when RR_HAVE_CUDA is defined,
 *     i.e. nvcc was found). It is the table the library uses unless told otherwise.
 *   - tests/fake_cuda/: a host fake for tests only, which runs the same library code on a
 *     machine with no GPU and enforces the runtime's contract (docs/cuda.md, "The fake").
 * cuda/runtime.c is the only reader of the table; the rest of the library calls the
 * rr__cuda_* functions of cuda/cuda.h, which add error text and the rules of when to ask.
 *
 * Conventions. Every entry returns a CUDA error code as an int (cudaError_t's values: 0 is
 * success), so the fake reports the codes the runtime would. Streams and events are opaque
 * pointers (cudaStream_t, cudaEvent_t); NULL as a stream is the legacy default stream. An
 * entry that fails leaves the runtime's "last error" as the runtime does; runtime.c calls
 * clear_error after every failure so a non-sticky error is not reported twice.
 *
 * rr__cuda_use_api (cuda/cuda.h) replaces the table; it is internal (hidden in the shared
 * library), so only code linked against the internal static library, i.e. the tests, can
 * reach it. */
#ifndef RR__CUDA_API_H_
#define RR__CUDA_API_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudaError_t values the library looks at (driver_types.h; the fake returns these). */
enum {
  RR__CUDA_SUCCESS = 0,
  RR__CUDA_ERR_INVALID_VALUE = 1,     /* cudaErrorInvalidValue */
  RR__CUDA_ERR_MEMORY_ALLOCATION = 2, /* cudaErrorMemoryAllocation */
  RR__CUDA_ERR_INITIALIZATION = 3,    /* cudaErrorInitializationError */
  RR__CUDA_ERR_NO_DEVICE = 100,       /* cudaErrorNoDevice */
  RR__CUDA_ERR_INVALID_DEVICE = 101,  /* cudaErrorInvalidDevice */
  RR__CUDA_ERR_DEVICE_UNINITIALIZED =
      201,                            /* cudaErrorDeviceUninitialized: "invalid device context" */
  RR__CUDA_ERR_MAP_FAILED = 205,      /* cudaErrorMapBufferObjectFailed */
  RR__CUDA_ERR_NO_PEER = 217,         /* cudaErrorPeerAccessUnsupported */
  RR__CUDA_ERR_INVALID_HANDLE = 400,  /* cudaErrorInvalidResourceHandle */
  RR__CUDA_ERR_ILLEGAL_STATE = 401,   /* cudaErrorIllegalState */
  RR__CUDA_ERR_NOT_READY = 600,       /* cudaErrorNotReady */
  RR__CUDA_ERR_LAUNCH_TIMEOUT = 702,  /* cudaErrorLaunchTimeout: a kernel ran past its limit */
  RR__CUDA_ERR_HOST_REGISTERED = 712, /* cudaErrorHostMemoryAlreadyRegistered */
  RR__CUDA_ERR_NOT_SUPPORTED = 801,   /* cudaErrorNotSupported */
  RR__CUDA_ERR_CAPTURE_UNSUPPORTED = 900, /* cudaErrorStreamCaptureUnsupported */
  RR__CUDA_ERR_CAPTURE_UNMATCHED = 903,   /* cudaErrorStreamCaptureUnmatched */
  RR__CUDA_ERR_CAPTURE_UNJOINED = 904,    /* cudaErrorStreamCaptureUnjoined */
  RR__CUDA_ERR_CAPTURED_EVENT = 907,      /* cudaErrorCapturedEvent */
};

/* cudaPointerAttributes.type (cudaMemoryType). */
enum {
  RR__CUDA_MEM_UNREGISTERED = 0,
  RR__CUDA_MEM_HOST = 1,
  RR__CUDA_MEM_DEVICE = 2,
  RR__CUDA_MEM_MANAGED = 3,
  RR__CUDA_MEM_ERROR = -1, /* rr__cuda_ptr_type only: the question failed (error set) */
};

/* Event flags (cudaEventDisableTiming, cudaEventInterprocess). */
enum { RR__CUDA_EVENT_DISABLE_TIMING = 0x2, RR__CUDA_EVENT_INTERPROCESS = 0x4 };

/* The runtime's special stream handles (driver_types.h): cudaStreamLegacy is the legacy
 * default stream named explicitly, cudaStreamPerThread the calling thread's own default
 * stream. NULL means the legacy one to code built without --default-stream per-thread, as
 * this library is. */
#define RR__CUDA_STREAM_LEGACY ((void *)0x1)
#define RR__CUDA_STREAM_PER_THREAD ((void *)0x2)

/* Stream memory operations' flags (Driver API, CUstreamWaitValue_flags and
 * CUstreamWriteValue_flags). GEQ is a cyclic comparison, (int32_t)(*addr - value) >= 0, so
 * a counter that wraps around 2^32 still compares right. */
enum { RR__CUDA_WAIT_GEQ = 0, RR__CUDA_WAIT_EQ = 1, RR__CUDA_WAIT_AND = 2 };
enum { RR__CUDA_WRITE_DEFAULT = 0 };

/* cudaIpcMemHandle_t / cudaIpcEventHandle_t: 64 opaque bytes (CUDA_IPC_HANDLE_SIZE). */
typedef struct rr__cuda_ipc_handle {
  char bytes[64];
} rr__cuda_ipc_handle;

/* The one-kernel form of a collective among ranks that share a GPU (cuda/reduce.cu's
 * rr__cuda_direct_launch; ring/ and group/direct.c): every task reduces its inputs element
 * by element, in[0] (op) in[1] (op) ... in[nin-1] (a left fold; AVG divides by avg_div in the
 * last step, as ring/op.c's pairwise reduction does), and writes the result to each of its
 * outputs; nin == 1 copies. An output may be an input (in place: each element is read before
 * it is written); outputs of different tasks never overlap. */
#define RR__CUDA_DIRECT_MAX 8
typedef struct rr__cuda_direct_task {
  int nin, nout;
  const void *in[RR__CUDA_DIRECT_MAX];
  void *out[RR__CUDA_DIRECT_MAX];
} rr__cuda_direct_task;
typedef struct rr__cuda_direct {
  int dtype, op, avg_div;
  size_t n; /* elements per task */
  int ntasks;
  rr__cuda_direct_task task[RR__CUDA_DIRECT_MAX];
} rr__cuda_direct;

typedef struct rr__cuda_api {
  const char *name; /* "CUDA runtime" or "fake CUDA (tests)" */

  /* Devices and contexts. device_count must not create a context; neither may get_device
   * nor ptr_attrs nor primary_ctx_active (pointer detection runs in CPU-only programs). */
  int (*device_count)(int *n);
  int (*get_device)(int *device);
  int (*set_device)(int device);
  int (*device_sync)(void);
  /* *active: whether device's primary context is initialised (cuDevicePrimaryCtxGetState).
   * Not every driver has the entry point: RR__CUDA_ERR_INVALID_VALUE then. */
  int (*primary_ctx_active)(int device, int *active);
  /* *type: RR__CUDA_MEM_*; *device: the allocation's device, or -1. Memory CUDA does not
   * know is RR__CUDA_MEM_UNREGISTERED, not an error (CUDA 11 and later): an error means the
   * answer is unknown, and the caller must not take the pointer for host memory. */
  int (*ptr_attrs)(const void *p, int *type, int *device);

  /* Memory. */
  int (*malloc)(void **p, size_t bytes);
  int (*free)(void *p);
  int (*malloc_managed)(void **p, size_t bytes);
  int (*host_alloc)(void **p, size_t bytes); /* page-locked, portable */
  int (*host_free)(void *p);

  /* Work queued on a stream (not waited for). */
  int (*memcpy_async)(void *dst, const void *src, size_t bytes, void *stream);
  int (*memset_async)(void *dst, int value, size_t bytes, void *stream);
  /* The kernel launchers (cuda/reduce.cu, cuda/ddp.cu): arguments and results as
   * rr__cuda_reduce_launch / rr__cuda_ddp_launch in cuda/cuda.h. */
  int (*reduce)(void *dst, void *dst2, const void *a, const void *b, size_t n, int dtype, int op,
                int avg_div, void *stream, const char **what);
  int (*ddp)(int kind, void *dst, const void *src, size_t n, int dtype, int wire, int world,
             void *stream, const char **what);

  /* Streams and events. */
  int (*stream_create)(void **stream, int nonblocking);
  int (*stream_destroy)(void *stream);
  int (*stream_sync)(void *stream);
  int (*stream_wait_event)(void *stream, void *event);
  int (*event_create)(void **event, unsigned flags);
  int (*event_destroy)(void *event);
  int (*event_record)(void *event, void *stream);
  int (*event_sync)(void *event);
  int (*event_query)(void *event); /* 0 done, RR__CUDA_ERR_NOT_READY, or an error */
  /* Graph capture (cudaStreamIsCapturing): *capturing is set while the stream is part of a
   * capture sequence (active, or invalidated and not yet ended). The library only asks; the
   * tests begin and end a capture (relaxed mode; the graph is dropped) to see it refused. */
  int (*stream_is_capturing)(void *stream, int *capturing);
  int (*stream_begin_capture)(void *stream);
  int (*stream_end_capture)(void *stream);

  /* Interprocess handles. */
  int (*ipc_get_mem_handle)(rr__cuda_ipc_handle *h, void *p);
  int (*ipc_open_mem_handle)(void **p, const rr__cuda_ipc_handle *h);
  int (*ipc_close_mem_handle)(void *p);
  int (*ipc_get_event_handle)(rr__cuda_ipc_handle *h, void *event);
  int (*ipc_open_event_handle)(void **event, const rr__cuda_ipc_handle *h);

  /* Stream memory operations (Driver API, "Stream Memory Operations": cuStreamWaitValue32,
   * cuStreamWriteValue32, reached through the driver entry point). Both are queued on the
   * stream like a copy. addr is a device pointer, 4-byte aligned: device memory (this
   * process's or IPC-opened) or the device pointer of registered host memory
   * (host_device_ptr); never managed memory. A wait holds back the stream's later work until
   * the word compares true (RR__CUDA_WAIT_*); nothing but a write ends it, so a wait nobody
   * satisfies blocks its stream for good (the host may write a host-registered word itself).
   * A write comes after the stream's earlier work and, with the default flags, after a
   * fence that makes that work's writes visible first (__threadfence_system's semantics,
   * scoped to the stream). mem_ops: *ok = 1 when `device` can run them (the entry points
   * exist and the device maps host memory); creates no context. */
  int (*stream_wait_value32)(void *stream, void *addr, unsigned value, unsigned flags);
  int (*stream_write_value32)(void *stream, void *addr, unsigned value, unsigned flags);
  int (*mem_ops)(int device, int *ok);
  /* Host memory made reachable from every device (cudaHostRegister with
   * cudaHostRegisterMapped | cudaHostRegisterPortable; page-aligned here), its device
   * pointer (cudaHostGetDevicePointer: it may differ from the host address, and stream
   * memory operations take only it), and the registration's end. */
  int (*host_register)(void *p, size_t bytes);
  int (*host_unregister)(void *p);
  int (*host_device_ptr)(void **dptr, void *p);
  /* The allocation p lies in (cuPointerGetAttributes: CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
   * _RANGE_SIZE, _BUFFER_ID). The buffer id is unique per allocation for the life of the
   * process: memory freed and allocated again at the same address has a new one. An IPC
   * handle maps the allocation's base, so a pointer inside it travels as the handle plus
   * p - base. */
  int (*ptr_range)(const void *p, void **base, size_t *bytes, unsigned long long *id);
  /* The device's UUID (cudaDeviceProp.uuid): equal in every process that sees that GPU,
   * whatever its ordinal there (CUDA_VISIBLE_DEVICES). */
  int (*device_uuid)(int device, unsigned char uuid[16]);
  /* cudaDeviceCanAccessPeer: *can = 1 when `device` can access memory of `peer` (a peer
   * mapping, an IPC handle of peer's memory opened on device, is possible: the
   * cudaIpcOpenMemHandle documentation points to this call). One direction; creates no
   * context. */
  int (*can_access_peer)(int *can, int device, int peer);
  /* The one-kernel form (above), queued on stream. */
  int (*direct)(const rr__cuda_direct *d, void *stream, const char **what);

  /* Errors: the text of a code ("<description> (<name>)"), and clearing the last error. */
  const char *(*error_string)(int err);
  const char *(*error_name)(int err);
  void (*clear_error)(void);
} rr__cuda_api;

/* The real runtime's table (cuda/real.c), or NULL in a build without CUDA. */
const rr__cuda_api *rr__cuda_real_api(void);

#ifdef __cplusplus
}
#endif

#endif /* RR__CUDA_API_H_ */
