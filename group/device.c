/* The CUDA side of a group's calls on device buffers, whatever path they take (staged,
 * group/staging.c; device to device over CUDA IPC or piped, group/ipc.c): where a call's
 * buffers are, looked at once at submission (rr__cuda_pg_buffers, for group/run.c's
 * rr__pg_path) and kept in its record (rr__pg_call); the call's events, made then on the
 * buffers' device (rr__cuda_pg_prepare records cuda_ready on the call's stream, so the call
 * starts after the work queued before it without blocking anyone); the group's copy streams
 * the device paths run on after cuda_ready; and the end of a call (a blocking caller waits
 * for cuda_done on the host, rr_work_wait makes the call's stream wait for it). Host calls
 * pass through here only for the look at their buffers: without a CUDA table, or with CUDA
 * but no driver, one flag read per buffer (docs/cuda.md, "Streams").
 *
 * Every CUDA call made for a call runs on the call's device (call->device, recorded at
 * submission), set around it and restored after (rr__cuda_set_device: where the thread's
 * previous device has a context): the thread making it may never have chosen a device (the
 * group's worker, torch's futures thread, whoever frees the work), and there the runtime
 * would take NULL for device 0's legacy stream and create a context on device 0 first
 * (docs/cuda.md, "Devices and threads").
 *
 * A failure (a CUDA error, a stream capturing a graph) aborts the group like any other
 * failure inside a call, so no peer waits for this rank in vain. */
#include <stdio.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "group/pg.h"

void *rr__cuda_pg_stream(rr_pg *pg) {
  return atomic_load(&pg->cuda_stream);
}

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

int rr_cuda_built(void) {
  return rr__cuda_built();
}

int rr__cuda_pg_use_device(int device, int rank) {
  int d = -1, prev = -1;
  int st = rr__cuda_pick_device(device, -1, &d);
  if (st == RR_OK) st = rr__cuda_set_device(d, &prev); /* kept: not restored */
  if (st != RR_OK) return rr__prefix_error(st, "rank %d: rr_pg_options.device = %d", rank, device);
  return RR_OK;
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
  /* The pinned staging buffer may still be read by the last call's copy back. */
  if (pg->cuda_host_busy) (void)rr__cuda_stream_sync(pg->cuda_host_busy);
  pg->cuda_host_busy = NULL;
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

int rr__cuda_pg_fail(rr_pg *pg, const rr__args *a, int st, const char *what, const char *how) {
  rr__prefix_error(st, "%s", what);
  rr__prefix_error(st, "rank %d: %s (%zu x %s, %s)", pg->global_ranks[pg->rank],
                   rr__kind_name(a->kind), a->count, rr_dtype_name(a->dtype), how);
  /* The peers are (or will be) in this call: stop the group and tell them why. */
  rr__comm_abort(pg->comm, st, rr__error(), 1);
  pg->comm->reported = 1;
  return st;
}

/* A failure while a call is prepared: named as the staged path names its own. */
static int rr__prepare_fail(rr_pg *pg, const rr__args *a, int st, const char *what) {
  return rr__cuda_pg_fail(pg, a, st, what, "device buffer staged through host memory");
}

/* Device memory counts as the device it is on; managed memory (which the host reads as it
 * is, but only once the stream's kernels have written it) as a reason to synchronise. A
 * buffer the call does not read or write is not looked at. */
int rr__cuda_pg_buffers(const rr_pg *pg, rr__pg_call *call) {
  const rr__args *a = &call->a;
  size_t in, out;
  int reads, writes, gaps;
  rr__pg_call_io(pg, a, &in, &out, &reads, &writes, &gaps);
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
  /* Back to the pool (cuda/runtime.c): a later call records them again, which replaces
   * whatever is still recorded on them; a stream's wait already queued on one keeps the
   * record it was queued after (cudaStreamWaitEvent). */
  rr__cuda_event_give(call->cuda_ready, call->device);
  rr__cuda_event_give(call->cuda_done, call->device);
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
    return rr__prepare_fail(pg, a, RR_ECUDA, "finding the current CUDA device (managed buffer)");
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
                            call->path == RR__PATH_IPC
                                ? "device buffer through CUDA IPC"
                                : "device buffer staged through host memory");
  }
  /* From the pool: made once, not per call (each make and destroy is a driver call). */
  if (st == RR_OK) st = rr__cuda_event_take(&call->cuda_ready);
  /* A managed buffer's result is written by the host: nothing on a stream to wait for. */
  if (st == RR_OK && !managed) st = rr__cuda_event_take(&call->cuda_done);
  if (st == RR_OK) st = rr__cuda_event_record(call->cuda_ready, call->stream);
  rr__cuda_restore_device(prev);
  if (st != RR_OK) {
    rr__cuda_pg_release(call);
    char what[96];
    snprintf(what, sizeof what, "ordering the call after its stream (CUDA device %d)", device);
    return rr__prepare_fail(pg, a, st, what);
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
