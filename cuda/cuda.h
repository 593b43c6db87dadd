/* The library's CUDA layer, as plain C (internal: rr__ prefix, not exported).
 *
 * Every CUDA call goes through one table (cuda/api.h). Built with CUDA (RR_HAVE_CUDA=1, see
 * docs/cuda.md) the table is the CUDA runtime, linked statically: a library built with CUDA
 * still loads and runs on a machine with no driver or no GPU, where rr__cuda_available() is
 * 0 and every pointer is host memory. Built without CUDA there is no table: nothing is a
 * device pointer (a device pointer passed to a collective is then read as host memory and
 * faults: such a build cannot tell), and the calls that need CUDA fail with RR_ENOTSUP
 * "built without CUDA". Tests may install the host fake instead (rr__cuda_use_api).
 *
 * Every function that fails sets the last error (rr_last_error) naming the CUDA call and
 * cudaGetErrorString's text, and returns RR_ECUDA (or RR_ENOTSUP / RR_EINVAL). */
#ifndef RR__CUDA_CUDA_H_
#define RR__CUDA_CUDA_H_

#include <stddef.h>
#include <stdint.h>

#include "cuda/api.h"
#include "ringreduce/ringreduce.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tests only: use `api` instead of the real runtime. Must come
 * before the first CUDA question of the process (RR_ESTATE after it). Hidden in the shared
 * library; reached through the internal static library. */
int rr__cuda_use_api(const rr__cuda_api *api);

/* 1 when this process has a CUDA table: the build has CUDA compiled in (whether or not a GPU
 * is present), or a test installed the fake. */
int rr__cuda_built(void);

/* Lazy, once per process: 1 when the CUDA runtime found a driver and at least one device.
 * Never fails and never leaves a CUDA error behind: without a driver it is 0. */
int rr__cuda_available(void);

/* Number of devices (0 without CUDA). */
int rr__cuda_device_count(void);

/* 1 when p is device memory (cudaMalloc, cudaMallocAsync, IPC-mapped), 0 for anything else:
 * host memory, pinned host memory, managed memory (host-accessible, used as it is), NULL, or
 * no CUDA at all; -1 when CUDA could not tell (the error is set: never guess "host", the
 * host would then read device memory). It creates no context (the real table asks the
 * driver, see cuda/real.c), so CPU-only programs never create one. *device (may be NULL)
 * gets the pointer's device, or -1. */
int rr__cuda_ptr_device(const void *p, int *device);
/* What p is: RR__CUDA_MEM_DEVICE (and *device), RR__CUDA_MEM_MANAGED (cudaMallocManaged:
 * host-accessible, but written by kernels in stream order), RR__CUDA_MEM_HOST /
 * RR__CUDA_MEM_UNREGISTERED (also for NULL and without CUDA), or RR__CUDA_MEM_ERROR when
 * CUDA could not tell, as above. */
int rr__cuda_ptr_type(const void *p, int *device);
/* 1 when device's primary context is initialised, 0 when not, -1 when the driver cannot
 * tell (or there is no CUDA). Creates none. */
int rr__cuda_primary_ctx_active(int device);

/* The device a rank uses: `option` when >= 0, else LOCAL_RANK modulo the device count
 * (several ranks may share one GPU), else 0. RR_ENOTSUP without CUDA. */
int rr__cuda_pick_device(int option, int local_rank, int *device);

/* Make `device` current on this thread. *previous gets the device to give back to
 * rr__cuda_restore_device afterwards, or -1 when nothing is to be restored: the previous
 * device's context does not exist (a thread that never chose a device, such as the group's
 * worker; restoring would create a context there). */
int rr__cuda_set_device(int device, int *previous);
void rr__cuda_restore_device(int previous);

/* Page-locked host memory, usable by every device (cudaHostAlloc, portable). */
int rr__cuda_host_alloc(void **p, size_t bytes);
void rr__cuda_host_free(void *p);

/* Copy bytes (any direction, unified addressing) ordered on `stream` (a cudaStream_t, NULL:
 * the legacy default stream), then wait for the stream: returns when the copy is done. */
int rr__cuda_memcpy_sync(void *dst, const void *src, size_t bytes, void *stream);
/* Wait for everything queued on `stream` so far. */
/* Is the stream capturing a CUDA graph (cudaStreamIsCapturing)? */
int rr__cuda_stream_capturing(void *stream, int *capturing);
int rr__cuda_stream_sync(void *stream);

/* Device memory on the current device (cudaMalloc; 0 bytes allocate 1) and its release. */
int rr__cuda_malloc(void **p, size_t bytes);
void rr__cuda_free(void *p);

/* Grow-only buffers (the group's pinned staging buffer, the ring's device scratch). cudaFree
 * and cudaFreeHost wait for the whole device, so a call that freed a buffer it outgrew would
 * stall behind every other stream's work (the user's kernels). An outgrown buffer is retired
 * instead, onto its owner's list, and the list is freed where the owner waits for the device
 * anyway (a group's destroy); buffers grow at least twofold, so each is replaced O(log) times
 * and what is retired stays under the current buffer's size. */
typedef struct rr__cuda_retired {
  void *p;
  size_t bytes;
  int device; /* -1: pinned host memory */
  struct rr__cuda_retired *next;
} rr__cuda_retired;
/* A new buffer for `need` bytes in place of one of `have` (0: none): pinned host memory or
 * device memory on the current device, of max(need, 2 * have) bytes when need > have (need
 * alone if that much cannot be had), in *bytes. */
int rr__cuda_alloc_grown(void **p, size_t *bytes, size_t have, size_t need, int pinned);
/* Keep p (NULL: nothing) until rr__cuda_free_retired. Should no memory be left for the
 * list's entry, p is freed now: slow (the device is waited for), never leaked. */
void rr__cuda_retire(rr__cuda_retired **list, void *p, size_t bytes, int device);
/* Take back the smallest retired buffer of `device` that holds `need` bytes (its size in
 * *bytes); NULL when there is none. */
void *rr__cuda_unretire(rr__cuda_retired **list, int device, size_t need, size_t *bytes);
/* Free every retired buffer (waits for the devices) and empty the list. */
void rr__cuda_free_retired(rr__cuda_retired **list);

/* Queue a copy of bytes (any direction) on `stream`; not waited for. */
int rr__cuda_memcpy_async(void *dst, const void *src, size_t bytes, void *stream);

/* A non-blocking stream (not ordered with the legacy default stream) on the current device. */
int rr__cuda_stream_create(void **stream);
void rr__cuda_stream_destroy(void *stream);
/* Events without timing, on the current device: record on a stream, make a stream wait for
 * one, wait for one on the host. */
int rr__cuda_event_create(void **event);
void rr__cuda_event_destroy(void *event);
int rr__cuda_event_record(void *event, void *stream);
int rr__cuda_stream_wait_event(void *stream, void *event);
int rr__cuda_event_sync(void *event);
/* 1 when the event's work is done, 0 when not yet, or an RR_ status (error set). */
int rr__cuda_event_done(void *event);

/* The calling thread's current device. */
int rr__cuda_get_device(int *device);
/* CUDA IPC (transport/cuda_ipc.c): a handle for a cudaMalloc allocation's base; opening a
 * handle another process exported (in the exporter itself the runtime refuses it:
 * same-process peers use the pointers); closing an opened allocation. */
int rr__cuda_ipc_mem_handle(rr__cuda_ipc_handle *h, void *p);
int rr__cuda_ipc_open_mem(void **p, const rr__cuda_ipc_handle *h);
void rr__cuda_ipc_close_mem(void *p);

/* The one-kernel form (group/direct.c): the allocation p lies in (its base, size, and an id
 * no other allocation of this process ever has, even at the same address); the device's
 * UUID (the same GPU in every process, whatever its ordinal there); and the kernel, queued
 * on stream (cuda/api.h, rr__cuda_direct). */
int rr__cuda_ptr_range(const void *p, void **base, size_t *bytes, unsigned long long *id);
int rr__cuda_device_uuid(int device, unsigned char uuid[16]);
int rr__cuda_direct_run(const rr__cuda_direct *d, void *stream);
/* cudaDeviceCanAccessPeer (cuda/api.h): *can = 1 when `device` can map `peer`'s memory, the
 * condition for an IPC handle of peer's memory to open on device (group/direct.c asks it
 * before a group takes CUDA IPC). */
int rr__cuda_can_access_peer(int device, int peer, int *can);

/* Stream memory operations (cuda/api.h; docs/cuda.md, "Stream memory operations").
 * rr__cuda_mem_ops: 1 when `device` can run them, 0 when not (or no CUDA); asked once per
 * device. The wait holds back `stream`'s later work until (int32_t)(*addr - value) >= 0 (a
 * cyclic comparison: epochs may wrap around); the write stores value after the stream's
 * earlier work, fenced. addr is a device pointer (rr__cuda_host_register gives one for host
 * memory). */
int rr__cuda_mem_ops(int device);
int rr__cuda_wait_value(void *stream, void *addr, uint32_t value);
int rr__cuda_write_value(void *stream, void *addr, uint32_t value);
/* Register page-aligned host memory with every device; *dptr its device pointer. */
int rr__cuda_host_register(void *p, size_t bytes, void **dptr);
void rr__cuda_host_unregister(void *p);
/* Events without timing from a per-device pool instead of made and destroyed per call
 * (cudaEventCreate and cudaEventDestroy each cost a driver call): take one on the current
 * device, give it back with the device it was taken on (that device current). An event
 * given back may still have work recorded on it; a later record replaces it, which is all
 * a pool's user does next. */
int rr__cuda_event_take(void **event);
void rr__cuda_event_give(void *event, int device);

/* The DDP wrapper's element work on device memory (cuda/ddp.cu), queued on `stream` (not
 * waited for); bit-identical to ddp/hooks.c's host loops (cuda/ddp_elem.cuh). dtype is the
 * gradient's (float16, bfloat16, float32, float64); wire the hook's 16-bit type.
 *   SCALE       dst[i] = src[i] * (1/world)             (dst, src: dtype)
 *   DIVIDE      dst[i] = dst[i] / world                 (src unused)
 *   COMPRESS    dst[i] = wire(src[i]) / world, in wire  (dst: wire, src: dtype)
 *   DECOMPRESS  dst[i] = src[i] in dtype                (dst: dtype, src: wire) */
enum { RR__CUDA_DDP_SCALE, RR__CUDA_DDP_DIVIDE, RR__CUDA_DDP_COMPRESS, RR__CUDA_DDP_DECOMPRESS };
int rr__cuda_ddp(int kind, void *dst, const void *src, size_t n, rr_dtype dtype, rr_dtype wire,
                 int world, void *stream);

/* dst[i] = a[i] op b[i] on the device, i < n, queued on `stream` (not waited for). When
 * dst2 != NULL the result is also written there (the ring's receive-reduce-copy: the chunk
 * is read once and written to both the local buffer and the next send buffer). avg_div as
 * rr__reduce: > 1 divides the sum (AVG's last step). dst may equal a or b; dst2 must not
 * overlap the inputs. Results are bit-identical to rr__reduce (ring/op.c). */
int rr__cuda_reduce(void *dst, void *dst2, const void *a, const void *b, size_t n, rr_dtype dtype,
                    rr_op op, int avg_div, void *stream);

/* ---- implemented in cuda/reduce.cu (nvcc); the real table's reduce entry ---- */
/* Launches the kernel; returns a cudaError_t and, on failure, the call that failed. */
int rr__cuda_reduce_launch(void *dst, void *dst2, const void *a, const void *b, size_t n, int dtype,
                           int op, int avg_div, void *stream, const char **what);
int rr__cuda_direct_launch(const rr__cuda_direct *d, void *stream, const char **what);
/* ---- implemented in cuda/ddp.cu (nvcc); the real table's ddp entry ---- */
int rr__cuda_ddp_launch(int kind, void *dst, const void *src, size_t n, int dtype, int wire,
                        int world, void *stream, const char **what);

#ifdef __cplusplus
}
#endif

#endif /* RR__CUDA_CUDA_H_ */
