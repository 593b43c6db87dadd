/* Device buffers in every collective: stage through pinned host memory; and the CUDA
 * bookkeeping every device path shares (the call's events, the group's copy streams).
 *
 * Where a call's buffers are is looked at once, at submission (rr__cuda_pg_buffers, for
 * group/run.c's rr__pg_path), and kept in its record (rr__pg_call); group/run.c then runs
 * a call whose path is RR__PATH_STAGED or RR__PATH_MANAGED between rr__pg_stage_in and
 * rr__pg_stage_out. Host calls never pass through this file after that look. Without a CUDA
 * table, or with CUDA but no driver, the look is one flag read per buffer.
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
 * This is the correct-everywhere path (any GPU, any transport, several ranks per GPU).
 * By default (RR_CUDA_IPC=0 turns it off), ring collectives of ranks on one host whose buffers are device memory
 * go device to device over CUDA IPC instead, reducing with kernels (group/ipc.c;
 * docs/cuda.md). On this path the host reduces the staged copy: the GPU kernels are not
 * wired into it.
 *
 * A failure here (a CUDA error, or buffers on two devices) aborts the group like any other
 * failure inside a call, so no peer waits for this rank in vain. */
#include <stdio.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "group/pg.h"

#define RR__STAGE_ALIGN ((uintptr_t)256)

void *rr__cuda_pg_stream(rr_pg *pg) { return atomic_load(&pg->cuda_stream); }

int rr_pg_set_cuda_stream(rr_pg *pg, void *stream) {
  if (!pg) return rr__set_error(RR_EINVAL, "rr_pg_set_cuda_stream: NULL group");
  if (!rr__cuda_built())
    return rr__set_error(RR_ENOTSUP,
                         "rank %d: rr_pg_set_cuda_stream: this build of ringreduce has no CUDA "
                         "support (configure with -DRR_CUDA=ON; see docs/cuda.md)",
                         pg->global_ranks[pg->rank]);
  /* The copies run on the group's worker thread, where cudaStreamPerThread would name the
   * worker's own default stream, ordered with nothing the caller queued (CUDA Runtime API,
   * "Stream synchronization behavior": the per-thread default stream belongs to the thread
   * that uses the handle). cudaStreamLegacy is one stream per device, shared by every
   * thread: it is the same as NULL and allowed. */
  if (stream == RR__CUDA_STREAM_PER_THREAD)
    return rr__set_error(RR_EINVAL,
                         "rank %d: rr_pg_set_cuda_stream: cudaStreamPerThread is refused: the "
                         "group's calls may run on its worker thread, where that handle names "
                         "another stream; pass the stream itself (e.g. torch's current stream) "
                         "or NULL for the legacy default stream",
                         pg->global_ranks[pg->rank]);
  atomic_store(&pg->cuda_stream, stream);
  return RR_OK;
}

int rr_cuda_built(void) { return rr__cuda_built(); }

int rr__cuda_pg_use_device(int device, int rank) {
  int d = -1, prev = -1;
  int st = rr__cuda_pick_device(device, -1, &d);
  if (st == RR_OK) st = rr__cuda_set_device(d, &prev); /* kept: not restored */
  if (st != RR_OK)
    return rr__prefix_error(st, "rank %d: rr_pg_options.device = %d", rank, device);
  return RR_OK;
}

/* The pinned buffer may still be read by the last call's copy back: wait for it before the
 * buffer is written or freed. */
static int rr__host_idle(rr_pg *pg) {
  if (!pg->cuda_host_busy) return RR_OK;
  int st = rr__cuda_stream_sync(pg->cuda_host_busy);
  pg->cuda_host_busy = NULL;
  return st;
}

/* A device the group's CUDA resources live on, -1 when it has none: the destroy runs on
 * whatever thread calls it (a garbage collector's, a watchdog's), which may never have chosen
 * a device, and a CUDA call there would create a context on device 0 first. */
static int rr__cuda_pg_home(const rr_pg *pg) {
  for (int d = 0; d < RR__CUDA_MAX_DEVICES; d++)
    if (pg->cuda_copy[d]) return d;
  if (pg->cs.dev_scratch) return pg->cs.dev_scratch_device;
  if (pg->cuda_host || pg->cs.piped || pg->cs.cuda_retired) return pg->device >= 0 ? pg->device : 0;
  return -1;
}

void rr__cuda_pg_free(rr_pg *pg) {
  const int home = rr__cuda_pg_home(pg);
  if (home < 0) return; /* no CUDA call was ever made for this group */
  int prev = -1;
  if (rr__cuda_set_device(home, &prev) != RR_OK) prev = -1; /* the frees still run */
  (void)rr__host_idle(pg);
  rr__piped_free(&pg->cs); /* on its own device; waits for the device work still using it */
  if (pg->cs.dev_scratch) {
    int p2 = -1;
    if (rr__cuda_set_device(pg->cs.dev_scratch_device, &p2) != RR_OK) p2 = -1;
    rr__cuda_free(pg->cs.dev_scratch); /* likewise */
    rr__cuda_restore_device(p2);
  }
  pg->cs.dev_scratch = NULL;
  pg->cs.dev_scratch_bytes = 0;
  rr__cuda_free_retired(&pg->cs.cuda_retired); /* each on its device (cuda/cuda.h) */
  for (int d = 0; d < RR__CUDA_MAX_DEVICES; d++) {
    if (!pg->cuda_copy[d]) continue;
    int p2 = -1;
    if (rr__cuda_set_device(d, &p2) != RR_OK) p2 = -1;
    rr__cuda_stream_destroy(pg->cuda_copy[d]);
    rr__cuda_restore_device(p2);
    pg->cuda_copy[d] = NULL;
  }
  rr__cuda_host_free(pg->cuda_host);
  pg->cuda_host = NULL;
  pg->cuda_host_bytes = 0;
  rr__cuda_restore_device(prev);
}

/* What a call reads and writes, in bytes from each buffer's start (ring/kind.c, as
 * rr__validate checks them); 0 on a side whose buffer is NULL. *gaps is set when the call
 * writes only parts of [recvbuf, recvbuf + out): an all_to_allv's blocks need not tile its
 * recvbuf. */
static void rr__io(const rr_pg *pg, const rr__args *a, size_t *in, size_t *out, int *reads,
                   int *writes, int *gaps) {
  const size_t es = rr_dtype_size(a->dtype);
  const rr__call_io io = rr__kind_io(a, pg->size, pg->rank);
  *reads = io.reads;
  *writes = io.writes;
  *gaps = io.gaps;
  *in = a->sendbuf ? io.in * es : 0;
  *out = a->recvbuf ? io.out * es : 0;
}

static uintptr_t rr__align_up(uintptr_t x) { return (x + RR__STAGE_ALIGN - 1) & ~(RR__STAGE_ALIGN - 1); }

int rr__cuda_pg_fail(rr_pg *pg, const rr__args *a, int st, const char *what, const char *how) {
  rr__prefix_error(st, "%s", what);
  rr__prefix_error(
      st, "rank %d: %s (%zu x %s, %s)", pg->global_ranks[pg->rank],
      rr__kind_name(a->kind),
      a->count, rr_dtype_name(a->dtype), how);
  /* The peers are (or will be) in this call: stop the group and tell them why. */
  rr__comm_abort(pg->comm, st, rr__error(), 1);
  pg->comm->reported = 1;
  return st;
}

static int rr__stage_fail(rr_pg *pg, const rr__args *a, int st, const char *what) {
  return rr__cuda_pg_fail(pg, a, st, what, "device buffer staged through host memory");
}

/* Device memory counts as the device it is on; managed memory (which the host reads as it
 * is, but only once the stream's kernels have written it) as a reason to synchronise. A
 * buffer the call does not read or write is not looked at. */
int rr__cuda_pg_buffers(const rr_pg *pg, rr__pg_call *call) {
  const rr__args *a = &call->a;
  size_t in, out;
  int reads, writes, gaps;
  rr__io(pg, a, &in, &out, &reads, &writes, &gaps);
  call->send_device = call->recv_device = -1;
  int stype = in > 0 ? rr__cuda_ptr_type(a->sendbuf, &call->send_device) : RR__CUDA_MEM_HOST;
  if (stype == RR__CUDA_MEM_ERROR) return rr__prefix_error(RR_ECUDA, "sendbuf");
  int rtype = out > 0 ? rr__cuda_ptr_type(a->recvbuf, &call->recv_device) : RR__CUDA_MEM_HOST;
  if (rtype == RR__CUDA_MEM_ERROR) return rr__prefix_error(RR_ECUDA, "recvbuf");
  call->device = call->send_device >= 0 ? call->send_device : call->recv_device;
  int managed = stype == RR__CUDA_MEM_MANAGED || rtype == RR__CUDA_MEM_MANAGED;
  call->path = call->device >= 0 ? RR__PATH_STAGED : managed ? RR__PATH_MANAGED : RR__PATH_HOST;
  return RR_OK;
}

/* Every CUDA call made for a call runs on the call's device (call->device, recorded at
 * submission), set around it and restored after (rr__cuda_set_device: where the thread's
 * previous device has a context): the thread making it may never have chosen a device (the
 * group's worker, torch's futures thread, whoever frees the work), and there the runtime
 * would take NULL for device 0's legacy stream and create a context on device 0 first
 * (docs/cuda.md, "Devices and threads"). */
void rr__cuda_pg_release(rr__pg_call *call) {
  if (!call->cuda_ready && !call->cuda_done) return;
  int prev = -1;
  /* Destroyed whether or not the device could be made current (they are this call's), and
   * without touching the thread's error text: a failed call's is still to be read. */
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error());
  if (rr__cuda_set_device(call->device, &prev) != RR_OK) rr__copy_error(saved);
  rr__cuda_event_destroy(call->cuda_ready);
  rr__cuda_event_destroy(call->cuda_done);
  rr__cuda_restore_device(prev);
  call->cuda_ready = call->cuda_done = NULL;
}

int rr__cuda_pg_prepare(rr_pg *pg, rr__pg_call *call) {
  const rr__args *a = &call->a;
  call->cuda_ready = call->cuda_done = NULL;
  int device = call->device;
  if (!rr__cuda_available()) return RR_OK;
  /* Managed memory belongs to no device: its call's event goes on the caller's current
   * device, the one its stream is taken to be on (torch: the current stream of the current
   * device). */
  const int managed = call->path == RR__PATH_MANAGED;
  if (managed && rr__cuda_get_device(&device) != RR_OK)
    return rr__stage_fail(pg, a, RR_ECUDA, "finding the current CUDA device (managed buffer)");
  if (device < 0) return RR_OK;
  call->device = device; /* every later CUDA call for this call runs there (rr__cuda_pg_release) */
  /* Events belong to a device, and cudaEventRecord wants the stream's: the buffers'. */
  int prev = -1, capturing = 0;
  int st = rr__cuda_set_device(device, &prev);
  /* A stream capturing a CUDA graph runs nothing now: the copies, the wait for them and the
   * peers' part of the call cannot be replayed with the graph, and the group's streams would
   * be pulled into the user's capture and break it. Refused before anything is queued. */
  if (st == RR_OK) st = rr__cuda_stream_capturing(call->stream, &capturing);
  if (st == RR_OK && capturing) {
    rr__cuda_restore_device(prev);
    rr__set_error(RR_EINVAL,
                  "the call's CUDA stream is capturing a CUDA graph (cudaStreamIsCapturing): "
                  "ringreduce calls cannot be captured; make the call outside the capture "
                  "(torch: outside torch.cuda.graph)");
    return rr__cuda_pg_fail(pg, a, RR_EINVAL, "refused",
                            call->path == RR__PATH_IPC ? "device buffer through CUDA IPC"
                                                    : "device buffer staged through host memory");
  }
  if (st == RR_OK) st = rr__cuda_event_create(&call->cuda_ready);
  /* A managed buffer's result is written by the host: nothing on a stream to wait for. */
  if (st == RR_OK && !managed) st = rr__cuda_event_create(&call->cuda_done);
  if (st == RR_OK) st = rr__cuda_event_record(call->cuda_ready, call->stream);
  rr__cuda_restore_device(prev);
  if (st != RR_OK) {
    rr__cuda_pg_release(call);
    char what[96];
    snprintf(what, sizeof what, "ordering the call after its stream (CUDA device %d)", device);
    return rr__stage_fail(pg, a, st, what);
  }
  return RR_OK;
}

int rr__cuda_pg_finish(const rr_pg *pg, const rr__pg_call *call, int blocking) {
  if (!call->cuda_done) return RR_OK;
  /* On the call's device: the NULL stream there is the one the call was ordered after. */
  int prev = -1;
  int st = rr__cuda_set_device(call->device, &prev);
  if (st == RR_OK) {
    st = blocking ? rr__cuda_event_sync(call->cuda_done)
                  : rr__cuda_stream_wait_event(call->stream, call->cuda_done);
    rr__cuda_restore_device(prev);
  }
  if (st != RR_OK)
    rr__prefix_error(st, "rank %d: %s", pg->global_ranks[pg->rank],
                     blocking ? "waiting for the result's copy to the device"
                              : "ordering the call's stream after the result's copy");
  return st;
}

int rr__cuda_pg_done(const rr__pg_call *call) {
  if (!call->cuda_done) return 1;
  int prev = -1;
  int st = rr__cuda_set_device(call->device, &prev);
  if (st != RR_OK) return st;
  int d = rr__cuda_event_done(call->cuda_done);
  rr__cuda_restore_device(prev);
  return d;
}

/* The stream the staging copies go on: the group's own for the device (made once), which
 * waits for the call's stream through cuda_ready; without events, the call's stream. */
int rr__cuda_pg_copy_stream(rr_pg *pg, const rr__pg_call *call, int device, void **s) {
  *s = call->stream;
  if (!call->cuda_ready || device >= RR__CUDA_MAX_DEVICES) return RR_OK;
  if (!pg->cuda_copy[device]) RR__CHECK(rr__cuda_stream_create(&pg->cuda_copy[device]));
  *s = pg->cuda_copy[device];
  return rr__cuda_stream_wait_event(*s, call->cuda_ready);
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
    st = call->cuda_ready ? rr__cuda_event_sync(call->cuda_ready) : rr__cuda_stream_sync(call->stream);
    rr__cuda_restore_device(prev);
    if (st != RR_OK) return rr__stage_fail(pg, a, st, "waiting for the stream (managed buffer)");
    return RR_OK;
  }
  size_t in, out;
  int reads, writes, gaps;
  rr__io(pg, a, &in, &out, &reads, &writes, &gaps);
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
  *sg = (rr__stage){.staged = 1, .prev = prev, .stream = cs, .result = rdev ? host + roff : NULL,
                    .out = out};
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
