/* The library's CUDA layer (cuda/cuda.h) over the CUDA table (cuda/api.h): lazy
 * initialisation, pointer detection, device choice, pinned memory, copies, streams, events
 * and the kernel launchers, each call checked and its failure turned into
 * "<call>: <error string> (<error name>)".
 *
 * The table is the real runtime's (cuda/real.c) in a build with CUDA, none in a build
 * without (then nothing is a device pointer and the calls that need CUDA fail with
 * RR_ENOTSUP), or, in tests only, the host fake installed with rr__cuda_use_api before the
 * first CUDA question (tests/fake_cuda/). This file makes no CUDA call of its own. */
#include "cuda/cuda.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/status.h"
#include "cuda/api.h"

static pthread_once_t rr__table_once = PTHREAD_ONCE_INIT;
static pthread_once_t rr__cuda_once = PTHREAD_ONCE_INIT;
static const rr__cuda_api *rr__api_override; /* set by rr__cuda_use_api (tests) */
static atomic_int rr__api_fixed;             /* the table was chosen: no more overrides */
static const rr__cuda_api *rr__api;          /* the table in use, or NULL */
static int rr__ndev;                         /* 0: no table, no driver, or no device */

/* Choosing the table makes no CUDA call: a process may ask rr__cuda_built and then fork. */
static void rr__table_init(void) {
  atomic_store(&rr__api_fixed, 1);
  rr__api = rr__api_override ? rr__api_override : rr__cuda_real_api();
}

/* The first CUDA call of the process (it starts the driver: no fork after it). */
static void rr__cuda_init(void) {
  pthread_once(&rr__table_once, rr__table_init);
  int n = 0;
  if (rr__api && rr__api->device_count(&n) != 0) {
    /* No driver, a driver older than this runtime, or no device: the CPU path is all. */
    rr__api->clear_error();
    n = 0;
  }
  rr__ndev = n > 0 ? n : 0;
}

int rr__cuda_use_api(const rr__cuda_api *api) {
  if (atomic_load(&rr__api_fixed))
    return rr__set_error(RR_ESTATE,
                         "rr__cuda_use_api: the CUDA table is already in use (install "
                         "the fake before the first CUDA call)");
  rr__api_override = api;
  return RR_OK;
}

/* The table, initialised; NULL when this build has none. */
static const rr__cuda_api *rr__cu(void) {
  pthread_once(&rr__cuda_once, rr__cuda_init);
  return rr__api;
}

int rr__cuda_built(void) {
  pthread_once(&rr__table_once, rr__table_init);
  return rr__api != NULL;
}

int rr__cuda_available(void) {
  pthread_once(&rr__cuda_once, rr__cuda_init);
  return rr__ndev > 0;
}

int rr__cuda_device_count(void) {
  return rr__cuda_available() ? rr__ndev : 0;
}

static int rr__no_cuda(const char *what) {
  return rr__set_error(RR_ENOTSUP,
                       "%s: this build of ringreduce has no CUDA support (configure with "
                       "-DRR_CUDA=ON and a CUDA toolkit; see docs/cuda.md)",
                       what);
}

static int rr__cuda_fail(int e, const char *call) {
  const rr__cuda_api *api = rr__cu();
  /* A non-sticky error would otherwise be reported again by the next unrelated call. */
  api->clear_error();
  return rr__set_error(RR_ECUDA, "%s: %s (%s)", call, api->error_string(e), api->error_name(e));
}

/* Run a table entry; on failure set the error naming `what` and return RR_ECUDA. Without a
 * table, RR_ENOTSUP. */
#define RR__CU(what, call)                               \
  do {                                                   \
    const rr__cuda_api *cu_ = rr__cu();                  \
    if (!cu_) return rr__no_cuda(what);                  \
    int rr__e_ = cu_->call;                              \
    if (rr__e_ != 0) return rr__cuda_fail(rr__e_, what); \
  } while (0)

int rr__cuda_ptr_type(const void *p, int *device) {
  if (device) *device = -1;
  if (!p || !rr__cuda_available()) return RR__CUDA_MEM_UNREGISTERED;
  int type = 0, dev = -1;
  int e = rr__api->ptr_attrs(p, &type, &dev);
  if (e != 0) {
    rr__cuda_fail(e, "cuPointerGetAttributes");
    rr__prefix_error(RR_ECUDA, "cannot tell whether %p is device or host memory", p);
    return RR__CUDA_MEM_ERROR;
  }
  if (type == RR__CUDA_MEM_DEVICE && device) *device = dev;
  return type;
}

int rr__cuda_ptr_device(const void *p, int *device) {
  /* Managed memory is host-accessible: used as it is, ordered on the stream (staging.c). */
  int t = rr__cuda_ptr_type(p, device);
  return t == RR__CUDA_MEM_ERROR ? -1 : t == RR__CUDA_MEM_DEVICE;
}

int rr__cuda_pick_device(int option, int local_rank, int *device) {
  *device = -1;
  if (!rr__cuda_built()) return rr__no_cuda("choosing a CUDA device");
  if (!rr__cuda_available())
    return rr__set_error(RR_ECUDA,
                         "no CUDA device: the CUDA runtime found no usable driver or GPU");
  if (option >= 0) {
    if (option >= rr__ndev)
      return rr__set_error(RR_EINVAL, "CUDA device %d requested, but this machine has %d", option,
                           rr__ndev);
    *device = option;
  } else {
    /* Ranks beyond the device count share devices round-robin (tests run 4 ranks on one). */
    *device = local_rank > 0 ? local_rank % rr__ndev : 0;
  }
  return RR_OK;
}

int rr__cuda_primary_ctx_active(int device) {
  const rr__cuda_api *api = rr__cu();
  int active = 0;
  if (!api || !rr__cuda_available()) return 0;
  if (api->primary_ctx_active(device, &active) != 0) {
    api->clear_error();
    return -1;
  }
  return active;
}

int rr__cuda_set_device(int device, int *previous) {
  int cur = -1;
  *previous = -1;
  RR__CU("cudaGetDevice", get_device(&cur));
  if (cur == device) return RR_OK;
  /* Since CUDA 12, cudaSetDevice initialises the device's primary context at once. A thread
   * that never chose a device (the group's worker) reports device 0: "restoring" it would
   * create a context on GPU 0 in every rank (hundreds of MiB each), and fail in
   * exclusive-process mode. So the previous device is restored only where its context
   * already exists (or where the driver cannot tell us). */
  if (rr__cuda_primary_ctx_active(cur) != 0) *previous = cur;
  RR__CU("cudaSetDevice", set_device(device));
  return RR_OK;
}

void rr__cuda_restore_device(int previous) {
  if (previous < 0) return;
  const rr__cuda_api *api = rr__cu();
  if (api && api->set_device(previous) != 0) api->clear_error();
}

/* Pinned host memory or device memory: the same checks and words either way. A size of 0
 * allocates one byte, so that success always gives a pointer to free. */
static int rr__cuda_alloc(void **p, size_t bytes, int pinned) {
  const char *call = pinned ? "cudaHostAlloc" : "cudaMalloc";
  *p = NULL;
  const rr__cuda_api *api = rr__cu();
  if (!api) return rr__no_cuda(call);
  int e = pinned ? api->host_alloc(p, bytes ? bytes : 1) : api->malloc(p, bytes ? bytes : 1);
  if (e != 0) {
    *p = NULL;
    rr__cuda_fail(e, call);
    return rr__prefix_error(
        RR_ECUDA,
        pinned ? "pinned staging buffer of %zu bytes" : "allocating %zu bytes of device memory",
        bytes);
  }
  return RR_OK;
}

int rr__cuda_host_alloc(void **p, size_t bytes) {
  return rr__cuda_alloc(p, bytes, 1);
}

void rr__cuda_host_free(void *p) {
  const rr__cuda_api *api = rr__cu();
  if (p && api && api->host_free(p) != 0) api->clear_error();
}

int rr__cuda_memcpy_sync(void *dst, const void *src, size_t bytes, void *stream) {
  if (bytes == 0) return RR_OK;
  RR__CU("cudaMemcpyAsync", memcpy_async(dst, src, bytes, stream));
  RR__CU("cudaStreamSynchronize", stream_sync(stream));
  return RR_OK;
}

int rr__cuda_stream_sync(void *stream) {
  RR__CU("cudaStreamSynchronize", stream_sync(stream));
  return RR_OK;
}

int rr__cuda_malloc(void **p, size_t bytes) {
  return rr__cuda_alloc(p, bytes, 0);
}

void rr__cuda_free(void *p) {
  const rr__cuda_api *api = rr__cu();
  if (p && api && api->free(p) != 0) api->clear_error();
}

int rr__cuda_alloc_grown(void **p, size_t *bytes, size_t have, size_t need, int pinned) {
  size_t want = need;
  if (need > have && have <= SIZE_MAX / 2 && 2 * have > need) want = 2 * have;
  int st = rr__cuda_alloc(p, want, pinned);
  if (st != RR_OK && want > need) { /* the doubling is a convenience, not a need */
    want = need;
    st = rr__cuda_alloc(p, want, pinned);
  }
  *bytes = st == RR_OK ? want : 0;
  return st;
}

/* device: the device memory's own, made current around the free (the caller's thread may
 * have another one, or none); -1 for pinned host memory, freed on the caller's device. */
static void rr__cuda_free_now(void *p, int device) {
  if (device < 0) {
    rr__cuda_host_free(p);
    return;
  }
  int prev = -1;
  if (rr__cuda_set_device(device, &prev) != RR_OK) prev = -1;
  rr__cuda_free(p);
  rr__cuda_restore_device(prev);
}

void rr__cuda_retire(rr__cuda_retired **list, void *p, size_t bytes, int device) {
  if (!p) return;
  rr__cuda_retired *r = malloc(sizeof *r);
  if (!r) {
    rr__cuda_free_now(p, device);
    return;
  }
  *r = (rr__cuda_retired){.p = p, .bytes = bytes, .device = device, .next = *list};
  *list = r;
}

void *rr__cuda_unretire(rr__cuda_retired **list, int device, size_t need, size_t *bytes) {
  rr__cuda_retired **best = NULL;
  for (rr__cuda_retired **r = list; *r; r = &(*r)->next)
    if ((*r)->device == device && (*r)->bytes >= need && (!best || (*r)->bytes < (*best)->bytes))
      best = r;
  if (!best) return NULL;
  rr__cuda_retired *r = *best;
  void *p = r->p;
  *bytes = r->bytes;
  *best = r->next;
  free(r);
  return p;
}

void rr__cuda_free_retired(rr__cuda_retired **list) {
  while (*list) {
    rr__cuda_retired *r = *list;
    *list = r->next;
    rr__cuda_free_now(r->p, r->device);
    free(r);
  }
}

int rr__cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream) {
  if (bytes == 0) return RR_OK;
  RR__CU("cudaMemcpyAsync", memcpy_async(dst, src, bytes, stream));
  return RR_OK;
}

int rr__cuda_stream_create(void **stream) {
  *stream = NULL;
  RR__CU("cudaStreamCreateWithFlags(cudaStreamNonBlocking)", stream_create(stream, 1));
  return RR_OK;
}

void rr__cuda_stream_destroy(void *stream) {
  const rr__cuda_api *api = rr__cu();
  if (stream && api && api->stream_destroy(stream) != 0) api->clear_error();
}

int rr__cuda_event_create(void **event) {
  *event = NULL;
  RR__CU("cudaEventCreateWithFlags(cudaEventDisableTiming)",
         event_create(event, RR__CUDA_EVENT_DISABLE_TIMING));
  return RR_OK;
}

void rr__cuda_event_destroy(void *event) {
  const rr__cuda_api *api = rr__cu();
  if (event && api && api->event_destroy(event) != 0) api->clear_error();
}

int rr__cuda_event_record(void *event, void *stream) {
  RR__CU("cudaEventRecord", event_record(event, stream));
  return RR_OK;
}

int rr__cuda_stream_capturing(void *stream, int *capturing) {
  *capturing = 0;
  RR__CU("cudaStreamIsCapturing", stream_is_capturing(stream, capturing));
  return RR_OK;
}

int rr__cuda_stream_wait_event(void *stream, void *event) {
  RR__CU("cudaStreamWaitEvent", stream_wait_event(stream, event));
  return RR_OK;
}

int rr__cuda_event_sync(void *event) {
  RR__CU("cudaEventSynchronize", event_sync(event));
  return RR_OK;
}

int rr__cuda_event_done(void *event) {
  const rr__cuda_api *api = rr__cu();
  if (!api) return rr__no_cuda("cudaEventQuery");
  int e = api->event_query(event);
  if (e == 0) return 1;
  if (e == RR__CUDA_ERR_NOT_READY) return 0;
  return rr__cuda_fail(e, "cudaEventQuery");
}

int rr__cuda_get_device(int *device) {
  *device = -1;
  RR__CU("cudaGetDevice", get_device(device));
  return RR_OK;
}

int rr__cuda_ipc_mem_handle(rr__cuda_ipc_handle *h, void *p) {
  RR__CU("cudaIpcGetMemHandle", ipc_get_mem_handle(h, p));
  return RR_OK;
}

int rr__cuda_ipc_open_mem(void **p, const rr__cuda_ipc_handle *h) {
  *p = NULL;
  RR__CU("cudaIpcOpenMemHandle", ipc_open_mem_handle(p, h));
  return RR_OK;
}

void rr__cuda_ipc_close_mem(void *p) {
  const rr__cuda_api *api = rr__cu();
  if (p && api && api->ipc_close_mem_handle(p) != 0) api->clear_error();
}

/* ---- the one-kernel form (group/direct.c) ---- */

int rr__cuda_ptr_range(const void *p, void **base, size_t *bytes, unsigned long long *id) {
  *base = NULL;
  *bytes = 0;
  *id = 0;
  RR__CU("cuPointerGetAttributes(RANGE_START_ADDR, RANGE_SIZE, BUFFER_ID)",
         ptr_range(p, base, bytes, id));
  return RR_OK;
}

int rr__cuda_device_uuid(int device, unsigned char uuid[16]) {
  memset(uuid, 0, 16);
  RR__CU("cudaGetDeviceProperties (uuid)", device_uuid(device, uuid));
  return RR_OK;
}

int rr__cuda_can_access_peer(int device, int peer, int *can) {
  *can = 0;
  RR__CU("cudaDeviceCanAccessPeer", can_access_peer(can, device, peer));
  return RR_OK;
}

int rr__cuda_direct_run(const rr__cuda_direct *d, void *stream) {
  const rr__cuda_api *api = rr__cu();
  if (!api) return rr__no_cuda("the one-kernel collective");
  const char *what = "";
  int e = api->direct(d, stream, &what);
  if (e != 0) return rr__cuda_fail(e, what && what[0] ? what : "the one-kernel collective");
  return RR_OK;
}

int rr__cuda_ddp(int kind, void *dst, const void *src, size_t n, rr_dtype dtype, rr_dtype wire,
                 int world, void *stream) {
  const rr__cuda_api *api = rr__cu();
  if (!api) return rr__no_cuda("the CUDA DDP kernels");
  if (n == 0) return RR_OK;
  const char *what = "";
  int e = api->ddp(kind, dst, src, n, (int)dtype, (int)wire, world, stream, &what);
  if (e != 0) return rr__cuda_fail(e, what);
  return RR_OK;
}

int rr__cuda_reduce(void *dst, void *dst2, const void *a, const void *b, size_t n, rr_dtype dtype,
                    rr_op op, int avg_div, void *stream) {
  const rr__cuda_api *api = rr__cu();
  if (!api) return rr__no_cuda("the CUDA reduction kernel");
  if (rr__op_check(dtype, op) != RR_OK) return rr__prefix_error(RR_EINVAL, "CUDA reduce");
  const char *what = "";
  int e = api->reduce(dst, dst2, a, b, n, (int)dtype, (int)op, avg_div, stream, &what);
  if (e != 0) return rr__cuda_fail(e, what);
  return RR_OK;
}

/* ---- stream memory operations, registered host memory, allocations, pooled events ---- */

#define RR__CUDA_DEV_CACHE 64 /* devices whose answers are cached (more: asked every time) */

/* 0: not asked yet, 1: no, 2: yes (racing threads store the same answer). */
static atomic_int rr__memops_known[RR__CUDA_DEV_CACHE];

int rr__cuda_mem_ops(int device) {
  const rr__cuda_api *api = rr__cu();
  if (!api || !rr__cuda_available() || device < 0) return 0;
  int k = device < RR__CUDA_DEV_CACHE ? atomic_load(&rr__memops_known[device]) : 0;
  if (k) return k == 2;
  int ok = 0;
  if (api->mem_ops(device, &ok) != 0) {
    api->clear_error();
    ok = 0;
  }
  if (device < RR__CUDA_DEV_CACHE) atomic_store(&rr__memops_known[device], ok ? 2 : 1);
  return ok;
}

int rr__cuda_wait_value(void *stream, void *addr, uint32_t value) {
  RR__CU("cuStreamWaitValue32(CU_STREAM_WAIT_VALUE_GEQ)",
         stream_wait_value32(stream, addr, value, RR__CUDA_WAIT_GEQ));
  return RR_OK;
}

int rr__cuda_write_value(void *stream, void *addr, uint32_t value) {
  RR__CU("cuStreamWriteValue32", stream_write_value32(stream, addr, value, RR__CUDA_WRITE_DEFAULT));
  return RR_OK;
}

int rr__cuda_host_register(void *p, size_t bytes, void **dptr) {
  *dptr = NULL;
  RR__CU("cudaHostRegister(cudaHostRegisterMapped | cudaHostRegisterPortable)",
         host_register(p, bytes));
  const rr__cuda_api *api = rr__cu();
  int e = api->host_device_ptr(dptr, p);
  if (e != 0) {
    *dptr = NULL;
    if (api->host_unregister(p) != 0) api->clear_error();
    return rr__cuda_fail(e, "cudaHostGetDevicePointer");
  }
  return RR_OK;
}

void rr__cuda_host_unregister(void *p) {
  const rr__cuda_api *api = rr__cu();
  if (p && api && api->host_unregister(p) != 0) api->clear_error();
}

/* The pool: a few events per device, enough for the calls in flight at once (two each). */
#define RR__EVENT_POOL 64
static pthread_mutex_t rr__pool_mu = PTHREAD_MUTEX_INITIALIZER;
static void *rr__pool[RR__CUDA_DEV_CACHE][RR__EVENT_POOL];
static int rr__pool_n[RR__CUDA_DEV_CACHE];

int rr__cuda_event_take(void **event) {
  *event = NULL;
  int d = -1;
  RR__CHECK(rr__cuda_get_device(&d));
  if (d >= 0 && d < RR__CUDA_DEV_CACHE) {
    pthread_mutex_lock(&rr__pool_mu);
    if (rr__pool_n[d] > 0) *event = rr__pool[d][--rr__pool_n[d]];
    pthread_mutex_unlock(&rr__pool_mu);
    if (*event) return RR_OK;
  }
  return rr__cuda_event_create(event);
}

void rr__cuda_event_give(void *event, int device) {
  if (!event) return;
  if (device >= 0 && device < RR__CUDA_DEV_CACHE) {
    pthread_mutex_lock(&rr__pool_mu);
    int kept = rr__pool_n[device] < RR__EVENT_POOL;
    if (kept) rr__pool[device][rr__pool_n[device]++] = event;
    pthread_mutex_unlock(&rr__pool_mu);
    if (kept) return;
  }
  rr__cuda_event_destroy(event);
}
