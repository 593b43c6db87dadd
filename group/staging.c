/* Device buffers in every collective: stage through pinned host memory.
 *
 * group/run.c sends a call here only when one of its buffers is CUDA device (or managed)
 * memory (rr__pg_device_call); host calls never pass through. Without a CUDA table, or
 * with CUDA but no driver, that check is one flag read.
 *
 * Order with the caller's stream, by events (docs/cuda.md, "Streams"): at submission, on
 * the caller's thread, rr__cuda_pg_prepare records cuda_ready on the call's stream. Here a
 * device buffer is copied into the group's pinned host buffer (cudaHostAlloc, grow-only,
 * freed with the group) on the group's copy stream for the device, after cuda_ready (so
 * kernels queued before the call have written it, and nothing queued after it is waited
 * for); the host collective runs on the copy; the result is copied back on the copy stream
 * and cuda_done recorded, not waited for here: a blocking call waits for it on the host,
 * rr_work_wait makes the call's stream wait for it. Managed buffers are read by the host as
 * they are, after a synchronisation of the call's stream.
 *
 * In-place calls stay in place: when the send and receive ranges of one device buffer
 * overlap (NCCL's aliasing for all_gather / reduce_scatter included) they are staged as one
 * range with the same offsets, so rr__pg_run_host sees the same aliasing the user passed.
 *
 * This is the correct-everywhere path (any GPU, any transport, several ranks per GPU).
 * With RR_CUDA_IPC=1, ring collectives of ranks on one host whose buffers are device memory
 * go device to device over CUDA IPC instead, reducing with kernels (rr__pg_ipc_call and
 * rr__pg_run_ipc, at the end of this file; docs/cuda.md). On this path the host reduces the
 * staged copy: the GPU kernels are not wired into it.
 *
 * A failure here (a CUDA error, or buffers on two devices) aborts the group like any other
 * failure inside a call, so no peer waits for this rank in vain. */
#include <stdio.h>
#include <string.h>

#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "group/pg.h"
#include "transport/shm.h"

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

void rr__cuda_pg_free(rr_pg *pg) {
  (void)rr__host_idle(pg);
  rr__cuda_free(pg->cs.dev_scratch); /* waits for the device work still using it */
  pg->cs.dev_scratch = NULL;
  pg->cs.dev_scratch_bytes = 0;
  for (int d = 0; d < RR__CUDA_MAX_DEVICES; d++) {
    rr__cuda_stream_destroy(pg->cuda_copy[d]);
    pg->cuda_copy[d] = NULL;
  }
  rr__cuda_host_free(pg->cuda_host);
  pg->cuda_host = NULL;
  pg->cuda_host_bytes = 0;
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

static int rr__dev_fail(rr_pg *pg, const rr__args *a, int st, const char *what, const char *how) {
  rr__prefix_error(st, "%s", what);
  rr__prefix_error(
      st, "rank %d: %s (%zu x %s, %s)", pg->global_ranks[pg->rank],
      rr__kind_name(a->kind == RR__K_RECV || a->kind == RR__K_SENDRECV ? RR__K_SEND : a->kind),
      a->count, rr_dtype_name(a->dtype), how);
  /* The peers are (or will be) in this call: stop the group and tell them why. */
  rr__comm_abort(pg->comm, st, rr__error(), 1);
  pg->comm->reported = 1;
  return st;
}

static int rr__stage_fail(rr_pg *pg, const rr__args *a, int st, const char *what) {
  return rr__dev_fail(pg, a, st, what, "device buffer staged through host memory");
}

/* Device memory, or managed memory (which the host reads as it is, but only once the
 * stream's kernels have written it). */
static int rr__cuda_buffer(const void *p) {
  int t = rr__cuda_ptr_type(p, NULL);
  return t == RR__CUDA_MEM_DEVICE || t == RR__CUDA_MEM_MANAGED;
}

int rr__pg_device_call(const rr_pg *pg, const rr__args *a) {
  size_t in, out;
  int reads, writes, gaps;
  rr__io(pg, a, &in, &out, &reads, &writes, &gaps);
  return (in > 0 && rr__cuda_buffer(a->sendbuf)) || (out > 0 && rr__cuda_buffer(a->recvbuf));
}

/* The device of a call's device buffers, or -1 when it has none (host or managed only). */
static int rr__call_device(const rr_pg *pg, const rr__args *a) {
  size_t in, out;
  int reads, writes, gaps, d = -1;
  rr__io(pg, a, &in, &out, &reads, &writes, &gaps);
  if (in > 0 && rr__cuda_ptr_device(a->sendbuf, &d)) return d;
  if (out > 0 && rr__cuda_ptr_device(a->recvbuf, &d)) return d;
  return -1;
}

void rr__cuda_pg_release(rr__args *a) {
  rr__cuda_event_destroy(a->cuda_ready);
  rr__cuda_event_destroy(a->cuda_done);
  a->cuda_ready = a->cuda_done = NULL;
}

int rr__cuda_pg_prepare(rr_pg *pg, rr__args *a) {
  a->cuda_ready = a->cuda_done = NULL;
  if (!rr__cuda_available()) return RR_OK;
  int device = rr__call_device(pg, a);
  if (device < 0) return RR_OK;
  /* Events belong to a device, and cudaEventRecord wants the stream's: the buffers'. */
  int prev = -1;
  int st = rr__cuda_set_device(device, &prev);
  if (st == RR_OK) st = rr__cuda_event_create(&a->cuda_ready);
  if (st == RR_OK) st = rr__cuda_event_create(&a->cuda_done);
  if (st == RR_OK) st = rr__cuda_event_record(a->cuda_ready, a->stream);
  rr__cuda_restore_device(prev);
  if (st != RR_OK) {
    rr__cuda_pg_release(a);
    char what[96];
    snprintf(what, sizeof what, "ordering the call after its stream (CUDA device %d)", device);
    return rr__stage_fail(pg, a, st, what);
  }
  return RR_OK;
}

int rr__cuda_pg_finish(const rr_pg *pg, const rr__args *a, int blocking) {
  if (!a->cuda_done) return RR_OK;
  int st = blocking ? rr__cuda_event_sync(a->cuda_done)
                    : rr__cuda_stream_wait_event(a->stream, a->cuda_done);
  if (st != RR_OK)
    rr__prefix_error(st, "rank %d: %s", pg->global_ranks[pg->rank],
                     blocking ? "waiting for the result's copy to the device"
                              : "ordering the call's stream after the result's copy");
  return st;
}

/* The stream the staging copies go on: the group's own for the device (made once), which
 * waits for the call's stream through cuda_ready; without events, the call's stream. */
static int rr__copy_stream(rr_pg *pg, const rr__args *a, int device, void **s) {
  *s = a->stream;
  if (!a->cuda_ready || device >= RR__CUDA_MAX_DEVICES) return RR_OK;
  if (!pg->cuda_copy[device]) RR__CHECK(rr__cuda_stream_create(&pg->cuda_copy[device]));
  *s = pg->cuda_copy[device];
  return rr__cuda_stream_wait_event(*s, a->cuda_ready);
}

int rr__pg_run_staged(rr_pg *pg, const rr__args *a, int64_t timeout_ms) {
  size_t in, out;
  int reads, writes, gaps;
  rr__io(pg, a, &in, &out, &reads, &writes, &gaps);
  int sdevice = -1, rdevice = -1;
  int sdev = in > 0 && rr__cuda_ptr_device(a->sendbuf, &sdevice);
  int rdev = out > 0 && rr__cuda_ptr_device(a->recvbuf, &rdevice);
  if (!sdev && !rdev) {
    /* Managed memory: the host reads and writes it directly, once the work queued on the
     * call's stream before the call (a kernel writing it) is done. Kernels queued after the
     * call see the host's writes (the call returns after them). */
    int st = rr__cuda_stream_sync(a->stream);
    if (st != RR_OK) return rr__stage_fail(pg, a, st, "waiting for the stream (managed buffer)");
    return rr__pg_run_host(pg, a, timeout_ms);
  }

  if (sdev && rdev && sdevice != rdevice) {
    rr__set_error(RR_EINVAL, "sendbuf is on CUDA device %d but recvbuf on device %d", sdevice,
                  rdevice);
    return rr__stage_fail(pg, a, RR_EINVAL, "checking buffers");
  }
  int device = sdev ? sdevice : rdevice;

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
  st = rr__copy_stream(pg, a, device, &cs);
  if (st == RR_OK) st = rr__host_idle(pg);
  if (st != RR_OK) {
    rr__cuda_restore_device(prev);
    return rr__stage_fail(pg, a, st, "ordering the copies after the call's stream");
  }
  if (total > pg->cuda_host_bytes) {
    rr__cuda_host_free(pg->cuda_host);
    pg->cuda_host = NULL;
    pg->cuda_host_bytes = 0;
    st = rr__cuda_host_alloc(&pg->cuda_host, (size_t)total);
    if (st != RR_OK) {
      rr__cuda_restore_device(prev);
      return rr__stage_fail(pg, a, st, "allocating pinned host memory");
    }
    pg->cuda_host_bytes = (size_t)total;
  }
  char *host = pg->cuda_host;
  rr__args h = *a;
  if (sdev) h.sendbuf = host + soff;
  if (rdev) h.recvbuf = host + roff;

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
  if (st == RR_OK) {
    st = rr__pg_run_host(pg, &h, timeout_ms);
    if (st == RR_OK && rdev && a->cuda_done) {
      /* Not waited for here: cuda_done tells the caller (rr__cuda_pg_finish), and the next
       * call waits before it writes the pinned buffer again (rr__host_idle). */
      st = rr__cuda_memcpy_async(r, host + roff, out, cs);
      if (st == RR_OK) pg->cuda_host_busy = cs;
      if (st == RR_OK) st = rr__cuda_event_record(a->cuda_done, cs);
      if (st != RR_OK) what = "copying the result to the device";
    } else if (st == RR_OK && rdev) {
      st = rr__cuda_memcpy_sync(r, host + roff, out, cs);
      if (st != RR_OK) what = "copying the result to the device";
    }
  }
  /* Restoring never touches the error text (it clears its own failure), and it happens only
   * where the previous device already had a context (rr__cuda_set_device). */
  rr__cuda_restore_device(prev);
  /* A failed collective has its message and abort from rr__pg_run_host already. */
  if (st != RR_OK && what) return rr__stage_fail(pg, a, st, what);
  return st;
}

/* ---- CUDA IPC (transport/cuda_ipc.c, docs/cuda.md "The CUDA IPC path") ----
 *
 * Every rank decides alone, from what all ranks share: the call (kind, count), the group's
 * ranks all on one host (then every lane is shared memory; otherwise every rank has a peer
 * elsewhere), RR_TRANSPORT and RR_ALGO (checked equal at setup / in the call header), and
 * its own buffers. A rank whose buffers are host memory while its peers' are device memory
 * fails the call with RR_EMISMATCH (the lane sees host bytes where it expects device ones);
 * RR_TRANSPORT=shm stages instead. */
int rr__pg_ipc_call(const rr_pg *pg, const rr__args *a) {
  const rr__params *p = rr__params_get();
  /* The ring algorithms, whose steps are all pipelined send / receive(-reduce) steps. */
  const int ring =
      a->kind == RR__K_ALL_REDUCE || a->kind == RR__K_REDUCE_SCATTER || a->kind == RR__K_ALL_GATHER;
  /* Opt-in (RR_CUDA_IPC=1) until a peer killed mid-call cannot leave this rank's streams
   * waiting for its events (docs/cuda.md): the staged path fails such a call cleanly. */
  if (!p->cuda_ipc) return 0;
  if (!ring || a->count == 0 || pg->size < 2 || !a->cuda_ready) return 0;
  if (strcmp(p->transport, "auto") || (strcmp(p->algo, "auto") && strcmp(p->algo, "ring")))
    return 0;
  if (rr__trace_on()) return 0;                      /* traces copy a step's values on the host */
  if (pg->cs.seg_bytes > RR__SHM_MAX_SLOT) return 0; /* a segment must fit one slot */
  int sd = -1, rd = -1;
  if (rr__cuda_ptr_type(a->sendbuf, &sd) != RR__CUDA_MEM_DEVICE ||
      rr__cuda_ptr_type(a->recvbuf, &rd) != RR__CUDA_MEM_DEVICE || sd != rd)
    return 0;
  for (int i = 0; i < pg->size; i++)
    if (i != pg->rank && !(pg->comm->peers[i].tp && pg->comm->peers[i].tp->device_msgs)) return 0;
  return 1;
}

/* The ring runs on the device buffers themselves: segments go device to device through the
 * lanes, reductions are kernels, all on the group's copy stream for the device, which first
 * waits for the call's stream (cuda_ready); cuda_done is recorded behind the last of it, and
 * nothing is waited for here (rr__cuda_pg_finish does, as for the staged path). */
int rr__pg_run_ipc(rr_pg *pg, const rr__args *a, int64_t timeout_ms) {
  const char *how = "device buffer through CUDA IPC";
  int device = -1, prev = -1;
  rr__cuda_ptr_device(a->recvbuf, &device);
  int st = rr__cuda_set_device(device, &prev);
  if (st != RR_OK) return rr__dev_fail(pg, a, st, "selecting the buffers' device", how);
  void *cs = NULL;
  st = rr__copy_stream(pg, a, device, &cs);
  if (st != RR_OK) {
    rr__cuda_restore_device(prev);
    return rr__dev_fail(pg, a, st, "ordering the call after its stream", how);
  }
  rr__req_dev dev = {.stream = cs, .device = device};
  st = rr__pg_run_coll(pg, a, timeout_ms, &dev);
  int rec = st == RR_OK ? rr__cuda_event_record(a->cuda_done, cs) : RR_OK;
  rr__cuda_restore_device(prev);
  if (rec != RR_OK) return rr__dev_fail(pg, a, rec, "marking the result's completion", how);
  return st;
}
