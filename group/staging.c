/* Device buffers in every collective: stage through pinned host memory. group/run.c runs a
 * call whose path is RR__PATH_STAGED or RR__PATH_MANAGED between rr__pg_stage_in and
 * rr__pg_stage_out; nothing else enters this file. What every device path shares (where the
 * buffers are, the call's events, the group's copy streams) is group/device.c's.
 *
 * Order with the caller's stream, by events (docs/cuda.md, "Streams"): at submission, on
 * the caller's thread, rr__cuda_pg_prepare records cuda_ready on the call's stream. Here a
 * device buffer is copied into the group's pinned host buffer (cudaHostAlloc, grow-only,
 * freed with the group) on the group's copy stream for the device, after cuda_ready (so
 * kernels queued before the call have written it, and nothing queued after it is waited
 * for); the host collective runs on the copy; the result is copied back on the copy stream
 * and cuda_done recorded, not waited for here: a blocking call waits for it on the host,
 * rr_work_wait makes the call's stream wait for it. Managed buffers are read by the host as
 * they are, once cuda_ready (recorded on the caller's current device) has completed.
 *
 * In-place calls stay in place: when the send and receive ranges of one device buffer
 * overlap (NCCL's aliasing for all_gather / reduce_scatter included) they are staged as one
 * range with the same offsets, so the host collective sees the same aliasing the user passed.
 *
 * This is the correct-everywhere path (any GPU, any transport, several ranks per GPU). By
 * default (RR_CUDA_IPC=0 turns it off), collectives of ranks on one host whose buffers are
 * device memory go device to device over CUDA IPC instead, reducing with kernels, and ring
 * collectives over other lanes are piped (group/ipc.c; docs/cuda.md). On this path the host
 * reduces the staged copy: the GPU kernels are not wired into it.
 *
 * A failure here (a CUDA error, or buffers on two devices) aborts the group like any other
 * failure inside a call, so no peer waits for this rank in vain. */
#include <stdio.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "group/pg.h"

#define RR__STAGE_ALIGN ((uintptr_t)256)

/* The pinned buffer may still be read by the last call's copy back: wait for it before the
 * buffer is written or freed. */
static int rr__host_idle(rr_pg *pg) {
  if (!pg->cuda_host_busy) return RR_OK;
  int st = rr__cuda_stream_sync(pg->cuda_host_busy);
  pg->cuda_host_busy = NULL;
  return st;
}

static uintptr_t rr__align_up(uintptr_t x) {
  return (x + RR__STAGE_ALIGN - 1) & ~(RR__STAGE_ALIGN - 1);
}

static int rr__stage_fail(rr_pg *pg, const rr__args *a, int st, const char *what) {
  return rr__cuda_pg_fail(pg, a, st, what, "device buffer staged through host memory");
}

int rr__pg_stage_in(rr_pg *pg, const rr__pg_call *call, rr__args *h, rr__stage *sg) {
  const rr__args *a = &call->a;
  *h = *a;
  *sg = (rr__stage){.prev = -1};
  if (call->path == RR__PATH_MANAGED) {
    /* Managed memory: the host reads and writes it directly, once the work queued on the
     * call's stream before the call (a kernel writing it) is done: the event recorded at
     * submission, not the stream, whose work queued after the call (a kernel waiting for
     * the result) must not be waited for here, nor run before the host read the buffer.
     * Kernels queued after the call's wait (or a blocking call) see the host's writes. */
    int prev = -1;
    int st = rr__cuda_set_device(call->device, &prev);
    if (st != RR_OK)
      return rr__stage_fail(pg, a, st, "selecting the call's device (managed buffer)");
    st = call->cuda_ready ? rr__cuda_event_sync(call->cuda_ready)
                          : rr__cuda_stream_sync(call->stream);
    rr__cuda_restore_device(prev);
    if (st != RR_OK) return rr__stage_fail(pg, a, st, "waiting for the stream (managed buffer)");
    return RR_OK;
  }
  size_t in, out;
  int reads, writes, gaps;
  rr__pg_call_io(pg, a, &in, &out, &reads, &writes, &gaps);
  int sdev = call->send_device >= 0, rdev = call->recv_device >= 0;
  if (sdev && rdev && call->send_device != call->recv_device) {
    rr__set_error(RR_EINVAL, "sendbuf is on CUDA device %d but recvbuf on device %d",
                  call->send_device, call->recv_device);
    return rr__stage_fail(pg, a, RR_EINVAL, "checking buffers");
  }
  int device = call->device;

  /* Lay out the host copy: one range when one device buffer's send and receive ranges
   * overlap (in place), else a send area and a receive area. */
  const char *s = a->sendbuf;
  char *r = a->recvbuf;
  uintptr_t soff = 0, roff = 0, total = 0;
  int joint = sdev && rdev && (uintptr_t)s < (uintptr_t)r + out && (uintptr_t)r < (uintptr_t)s + in;
  if (joint) {
    uintptr_t lo = RR__MIN((uintptr_t)s, (uintptr_t)r);
    uintptr_t hi = (uintptr_t)s + in > (uintptr_t)r + out ? (uintptr_t)s + in : (uintptr_t)r + out;
    soff = (uintptr_t)s - lo;
    roff = (uintptr_t)r - lo;
    total = hi - lo;
  } else {
    if (sdev) total = rr__align_up(in);
    roff = total;
    if (rdev) total += out;
  }

  int prev = -1;
  int st = rr__cuda_set_device(device, &prev);
  if (st != RR_OK) return rr__stage_fail(pg, a, st, "selecting the buffers' device");
  void *cs = NULL;
  st = rr__cuda_pg_copy_stream(pg, call, device, &cs);
  if (st == RR_OK) st = rr__host_idle(pg);
  if (st != RR_OK) {
    rr__cuda_restore_device(prev);
    return rr__stage_fail(pg, a, st, "ordering the copies after the call's stream");
  }
  if (total > pg->cuda_host_bytes) {
    /* Grown at least twofold; the old buffer is retired, not freed: cudaFreeHost would wait
     * for the whole device (the user's kernels on every stream). Freed with the group. */
    void *grown = NULL;
    size_t bytes = 0;
    st = rr__cuda_alloc_grown(&grown, &bytes, pg->cuda_host_bytes, (size_t)total, 1);
    if (st != RR_OK) {
      rr__cuda_restore_device(prev);
      return rr__stage_fail(pg, a, st, "allocating pinned host memory");
    }
    rr__cuda_retire(&pg->cs.cuda_retired, pg->cuda_host, pg->cuda_host_bytes, -1);
    pg->cuda_host = grown;
    pg->cuda_host_bytes = bytes;
  }
  char *host = pg->cuda_host;
  if (sdev) h->sendbuf = host + soff;
  if (rdev) h->recvbuf = host + roff;

  const char *what = NULL;
  if (sdev) {
    st = rr__cuda_memcpy_sync(host + soff, s, in, cs);
    if (st != RR_OK) what = "copying the send buffer from the device";
  }
  /* The whole receive range goes back to the device: where the call writes only parts of
   * it, the host copy must start as the device's, so the parts between come back
   * unchanged. (When joint, this may copy bytes of the send range again: the same ones.) */
  if (st == RR_OK && rdev && gaps) {
    st = rr__cuda_memcpy_sync(host + roff, r, out, cs);
    if (st != RR_OK) what = "copying the receive buffer from the device";
  }
  if (st != RR_OK) {
    rr__cuda_restore_device(prev);
    return rr__stage_fail(pg, a, st, what);
  }
  *sg = (rr__stage){
      .staged = 1, .prev = prev, .stream = cs, .result = rdev ? host + roff : NULL, .out = out};
  return RR_OK;
}

int rr__pg_stage_out(rr_pg *pg, const rr__pg_call *call, const rr__stage *sg, int st) {
  const rr__args *a = &call->a;
  if (!sg->staged) return st;
  const char *what = NULL;
  if (st == RR_OK && sg->result && call->cuda_done) {
    /* Not waited for here: cuda_done tells the caller (rr__cuda_pg_finish), and the next
     * call waits before it writes the pinned buffer again (rr__host_idle). */
    st = rr__cuda_memcpy_async(a->recvbuf, sg->result, sg->out, sg->stream);
    if (st == RR_OK) pg->cuda_host_busy = sg->stream;
    if (st == RR_OK) st = rr__cuda_event_record(call->cuda_done, sg->stream);
    if (st != RR_OK) what = "copying the result to the device";
  } else if (st == RR_OK && sg->result) {
    st = rr__cuda_memcpy_sync(a->recvbuf, sg->result, sg->out, sg->stream);
    if (st != RR_OK) what = "copying the result to the device";
  }
  /* Restoring never touches the error text (it clears its own failure), and it happens only
   * where the previous device already had a context (rr__cuda_set_device). */
  rr__cuda_restore_device(sg->prev);
  /* A failed collective has its message and abort from group/run.c already. */
  if (st != RR_OK && what) return rr__stage_fail(pg, a, st, what);
  return st;
}
