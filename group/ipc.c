/* Device buffers over CUDA IPC (transport/cuda_ipc.c, docs/cuda.md "The CUDA IPC path"):
 * which calls take this path, decided once at submission (rr__pg_ipc_call, asked by
 * group/run.c's rr__pg_path), and what running one adds around the ring (rr__pg_ipc_in and
 * rr__pg_ipc_out, around group/run.c's run of the ring on the device buffers themselves).
 * The events and copy streams are group/device.c's, shared with the staged path. */
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "common/param.h"
#include "common/status.h"
#include "cuda/cuda.h"
#include "group/pg.h"
#include "transport/comm.h"

static const char *rr__ipc_how(const rr__pg_call *call) {
  return call->path == RR__PATH_PIPED ? "device buffer piped through pinned host memory"
                                      : "device buffer through CUDA IPC";
}

/* What both device-to-device paths need: a kind that may take the path (its dev column,
 * ring/kind.h: the piped path runs only plain pipelined steps, CUDA IPC also forwarding
 * ones, a reduce chain's landing area in the device scratch, and local copies on the
 * device); something this rank moves; RR_ALGO auto or ring (the device paths run no whole
 * steps); no trace (it copies a step's values on the host); every buffer the call touches on
 * this rank on one device (a buffer it does not read or write, a broadcast's sendbuf off the
 * root, a reduce's recvbuf, is not looked at: device -1). all_to_allv decides from the
 * rank's own sizes, not its count: a rank that moves nothing stays on the host path, and
 * sends and receives no segment either. */
static int rr__pg_ring_on_device(const rr_pg *pg, const rr__pg_call *call, int ipc) {
  const rr__args *a = &call->a;
  const int dev = rr__kind(a->kind)->dev;
  if (dev == RR__DEV_HOST || (!ipc && dev != RR__DEV_PIPE) || pg->size < 2) return 0;
  if (pg->cs.algo != RR__ALGO_NONE && pg->cs.algo != RR__ALGO_RING) return 0;
  if (pg->cs.trace != RR__TRACE_OFF) return 0;
  const rr__call_io io = rr__kind_io(a, pg->size, pg->rank);
  const int reads = io.reads && io.in > 0, writes = io.writes && io.out > 0;
  if (!reads && !writes) return 0;
  if (reads && call->send_device < 0) return 0;
  if (writes && call->recv_device < 0) return 0;
  return !reads || !writes || call->send_device == call->recv_device;
}

/* Every rank decides alone, from what all ranks share: the call (kind, count), the group's
 * ranks all on one host (then every lane is shared memory; otherwise every rank has a peer
 * elsewhere), RR_TRANSPORT and RR_ALGO (checked equal at setup / in the call header), and
 * its own buffers. A rank whose buffers are host memory while its peers' are device memory
 * fails the call with RR_EMISMATCH (the lane sees host bytes where it expects device ones);
 * RR_TRANSPORT=shm or RR_CUDA_IPC=0 pipes or stages instead. Asked only of a call whose path
 * is RR__PATH_STAGED, which gets its events at submission (rr__cuda_pg_prepare) or fails
 * there. On by default: a peer killed mid-call leaves nothing on this rank's device that only
 * it could complete (transport/cuda_ipc.h; cudafake.ipc_kill_w3). Whether IPC works between
 * the group's GPUs at all is agreed where the call runs (rr__pg_ipc_agreed, group/run.c),
 * since that takes an exchange this thread may not make. */
int rr__pg_ipc_call(const rr_pg *pg, const rr__pg_call *call) {
  const rr__params *p = rr__params_get();
  if (!p->cuda_ipc || strcmp(p->transport, "auto") || !rr__pg_ring_on_device(pg, call, 1)) return 0;
  if (rr__pg_ipc_form(pg, call) == RR__FORM_STAGED) return 0;
  /* A segment must fit one device message on the lane to every peer (0 where a peer's
   * transport carries none). */
  return rr__pg_ipc_seg(pg, call->a.kind) <= rr__comm_device_msg_max(pg->comm);
}

/* Where the call runs, the group may still turn it away from CUDA IPC (rr__pg_ipc_agreed:
 * GPUs without peer access, devices without IPC); counted here. */
static atomic_ullong rr__ipc_ndeclined;

uint64_t rr__pg_ipc_declined(void) {
  return atomic_load(&rr__ipc_ndeclined);
}
void rr__pg_ipc_declined_add(void) {
  atomic_fetch_add_explicit(&rr__ipc_ndeclined, 1, memory_order_relaxed);
}

size_t rr__pg_ipc_seg(const rr_pg *pg, int kind) {
  return rr__kind(kind)->dev == RR__DEV_IPC ? pg->cs.seg_bytes : pg->cs.ipc_seg_bytes;
}

/* Any transport carries the pinned slots. The ring must be the algorithm a host call would
 * run too (an all_reduce up to RR_SMALL_BYTES takes recursive doubling: staged, it keeps
 * it), so ranks whose buffers are host memory and ranks whose buffers are on a device run
 * the same steps with the same bytes on the wire: unlike CUDA IPC's, that mix works. Every
 * rank decides alike from what all share (the call, RR_ALGO, RR_SMALL_BYTES, RR_TRACE,
 * RR_CUDA_PIPE: docs/env.md says to set them alike) and its own buffers. */
int rr__pg_piped_call(const rr_pg *pg, const rr__pg_call *call) {
  const rr__args *a = &call->a;
  if (!rr__params_get()->cuda_pipe || !rr__pg_ring_on_device(pg, call, 0)) return 0;
  if (rr__kind_has(a->kind, RR__KF_CHOOSE) && pg->cs.algo == RR__ALGO_NONE &&
      a->count * rr_dtype_size(a->dtype) <= pg->cs.small_bytes)
    return 0;
  return 1;
}

/* ---- which form a ring or chain kind takes, by size ----
 *
 * all_reduce, reduce_scatter, all_gather, broadcast and reduce on device buffers of ranks on
 * one host can go four ways. The first row whose bound holds for the call's size wins: the
 * largest buffer it reads or writes on a rank, in bytes, which is the same on every rank, so
 * every rank picks alike (a difference is caught anyway: the call header carries the segment
 * size and the hand-off). None of the bounds was measured on a GPU: the defaults keep what
 * the library did before the table (CUDA IPC for every size, stream memory operations where
 * the device has them); the GPU commands (tests/gpu/run.sh) time each form by size, and the
 * defaults are to be set from them. The one-kernel row is group/direct.c's: it takes a call
 * before the ring (rr__pg_direct_run) when its own rules hold and the size is within this
 * row's bound; the loop below, which also picks the ring's form, passes over it. */
static const struct rr__form_row {
  rr__ipc_form form;
  const char *name;
  const char *env; /* the bound: calls of at most this many bytes (NULL: no bound here) */
} rr__ipc_forms[] = {
    {RR__FORM_STAGED, "staged through pinned host memory", "RR_CUDA_STAGED_BYTES"},
    {RR__FORM_DIRECT, "one kernel for ranks sharing a GPU (group/direct.c)",
     "RR_CUDA_DIRECT_BYTES"},
    {RR__FORM_HOSTED, "ring, the host handing segments over", "RR_CUDA_MEMOPS_BYTES - 1"},
    {RR__FORM_MEMOPS, "ring, the GPUs' streams handing segments over", "RR_CUDA_PULL_BYTES - 1"},
    {RR__FORM_PULL, "ring, the streams handing over, the all-gather steps pulling", NULL},
};

int64_t rr__pg_call_bytes(const rr_pg *pg, const rr__pg_call *call) {
  const rr__call_io io = rr__kind_io(&call->a, pg->size, pg->rank);
  return (int64_t)(RR__MAX(io.in, io.out) * rr_dtype_size(call->a.dtype));
}

/* The row's bound in bytes: the call takes the row when its size is at most this; -1 never.
 * pull: the kind has a pull form (all_gather, all_reduce); for the others the stream hand-off
 * takes every size past the host's. */
static int64_t rr__form_upto(rr__ipc_form form, const rr__params *p, int pull) {
  switch (form) {
    case RR__FORM_STAGED:
      return p->cuda_staged_bytes ? p->cuda_staged_bytes : -1;
    case RR__FORM_HOSTED:
      return p->cuda_memops_bytes - 1;
    case RR__FORM_DIRECT:
      return p->cuda_direct_bytes;
    case RR__FORM_MEMOPS:
      return pull ? p->cuda_pull_bytes - 1 : INT64_MAX;
    case RR__FORM_PULL:
    default:
      return INT64_MAX;
  }
}

int rr__pg_direct_size(const rr_pg *pg, const rr__pg_call *call) {
  return rr__pg_call_bytes(pg, call) <= rr__form_upto(RR__FORM_DIRECT, rr__params_get(), 0);
}

/* Stream memory operations (transport/cuda_ipc.h) need the ring and chain kinds, where every
 * rank moves the same bytes: the others keep the host hand-off, since their ranks may meet
 * host buffers (point to point, an all_to_allv rank that moves nothing). Every rank decides
 * alike from RR_CUDA_MEMOPS (set alike) and its device's support (a driver without them has
 * none on any device). */
rr__ipc_form rr__pg_ipc_form(const rr_pg *pg, const rr__pg_call *call) {
  const rr__args *a = &call->a;
  const int dev = rr__kind(a->kind)->dev;
  const rr__params *p = rr__params_get();
  const int ring = dev == RR__DEV_IPC_SEG || dev == RR__DEV_PIPE;
  /* A group where some ranks are threads of one process and others are not would hand
   * segments over by the host on some lanes and by the streams on others in one call: the
   * host-handed requests complete late, which breaks the order ring/pipe_dev.c queues each
   * stream's sends and receives in, and the streams then wait on each other in a circle
   * (cudafake.mixproc_seg_w3). Such a group keeps the host's hand-off on every lane
   * (RR_CUDA_MEMOPS_MIXED=1, for tests, lets it mix them). */
  const int memops = ring && p->cuda_memops && rr__cuda_mem_ops(call->device) &&
                     (p->cuda_memops_mixed || !rr__comm_shares_process(pg->comm));
  if (!ring) return RR__FORM_HOSTED;
  /* The kinds whose ring has all-gather steps (ring/all_gather.c, ring/all_reduce.c). */
  const int pull = memops && (a->kind == RR__K_ALL_GATHER || a->kind == RR__K_ALL_REDUCE);
  const int64_t bytes = rr__pg_call_bytes(pg, call);
  for (size_t i = 0; i < sizeof rr__ipc_forms / sizeof rr__ipc_forms[0]; i++) {
    const rr__ipc_form f = rr__ipc_forms[i].form;
    if (f == RR__FORM_DIRECT || (f == RR__FORM_MEMOPS && !memops) || (f == RR__FORM_PULL && !pull))
      continue;
    if (bytes <= rr__form_upto(f, p, pull)) return f;
  }
  return RR__FORM_HOSTED;
}

rr__ipc_cache *rr__pg_ipc_cache(rr_pg *pg) {
  if (!pg->ipc_cache) {
    pg->ipc_cache = rr__calloc(1, sizeof *pg->ipc_cache);
    if (!pg->ipc_cache) {
      rr__set_error(RR_ENOMEM, "no memory for the group's cache of mapped device buffers");
      return NULL;
    }
    rr__ipc_cache_init(pg->ipc_cache);
  }
  return pg->ipc_cache;
}

/* A pulling call (transport/cuda_ipc.h, "pull"): this rank's output described for its ring
 * successor, which the ring sends behind the call header (ring/pipe_dev.c). An output whose
 * allocation gives no IPC handle (cudaMallocAsync's pools) says so: both sides keep the
 * slots. Same-process lanes never pull (the lane ignores the request's pull), whatever it
 * says. */
static int rr__pg_pull_in(rr_pg *pg, const rr__pg_call *call, rr__ipc_pull **out) {
  *out = NULL;
  rr__ipc_cache *k = rr__pg_ipc_cache(pg);
  if (!k) return RR_ENOMEM;
  if (!pg->ipc_pull) {
    pg->ipc_pull = rr__calloc(1, sizeof *pg->ipc_pull);
    if (!pg->ipc_pull) return rr__set_error(RR_ENOMEM, "no memory for the all-gather's pull state");
  }
  rr__ipc_pull *pl = pg->ipc_pull;
  size_t in = 0, bytes = 0;
  int reads = 0, writes = 0, gaps = 0;
  rr__pg_call_io(pg, &call->a, &in, &bytes, &reads, &writes, &gaps);
  memset(&pl->mine, 0, sizeof pl->mine);
  pl->cache = k;
  pl->recvbuf = call->a.recvbuf;
  pl->mine.magic = RR__PULL_MAGIC;
  pl->mine.len = bytes;
  int ok = rr__ipc_describe(k, call->a.recvbuf, bytes, &pl->mine.out);
  if (ok < 0) return ok;
  pl->mine.ok = (uint32_t)ok;
  *out = pl;
  return RR_OK;
}

static int rr__pg_memops(const rr_pg *pg, const rr__pg_call *call) {
  if (call->path != RR__PATH_IPC) return 0;
  const rr__ipc_form f = rr__pg_ipc_form(pg, call);
  return f == RR__FORM_MEMOPS || f == RR__FORM_PULL;
}

/* The ring runs on the group's copy stream for the device, which first waits for the call's
 * stream (cuda_ready); cuda_done is recorded behind the last of it, and nothing is waited
 * for here (rr__cuda_pg_finish does, as for the staged path). */
int rr__pg_ipc_in(rr_pg *pg, const rr__pg_call *call, rr__req_dev *dev, int *prev) {
  const rr__args *a = &call->a;
  int st = rr__cuda_set_device(call->device, prev);
  if (st != RR_OK)
    return rr__cuda_pg_fail(pg, a, st, "selecting the buffers' device", rr__ipc_how(call));
  void *cs = NULL;
  st = rr__cuda_pg_copy_stream(pg, call, call->device, &cs);
  if (st != RR_OK) {
    rr__cuda_restore_device(*prev);
    return rr__cuda_pg_fail(pg, a, st, "ordering the call after its stream", rr__ipc_how(call));
  }
  *dev = (rr__req_dev){.stream = cs, .device = call->device, .memops = rr__pg_memops(pg, call)};
  if (dev->memops && rr__pg_ipc_form(pg, call) == RR__FORM_PULL) {
    st = rr__pg_pull_in(pg, call, &dev->pull);
    if (st != RR_OK) {
      rr__cuda_restore_device(*prev);
      return rr__cuda_pg_fail(pg, a, st, "describing the output for the all-gather's pull",
                              rr__ipc_how(call));
    }
  }
  return RR_OK;
}

int rr__pg_memop_wait(rr_pg *pg, const rr__pg_call *call, rr__coll *c, const rr__req_dev *dev) {
  RR__WHERE(c, "waiting for the call's device work");
  /* The call ends only once the peers pulling from this rank's output finished reading it. */
  int st = rr__dev_fence(dev->waits, dev->stream);
  if (st == RR_OK) st = rr__cuda_event_record(call->cuda_done, dev->stream);
  int64_t looked = 0;
  for (int spins = 0; st == RR_OK; spins++) {
    int d = rr__cuda_event_done(call->cuda_done);
    if (d != 0) return d < 0 ? d : RR_OK;
    /* Once per millisecond: the control sockets (a death, a peer's abort) and the deadline.
     * The wait is this rank's own: the comm's spin policy is not involved. */
    int64_t now = rr__now_ms();
    if (now != looked) {
      looked = now;
      rr__comm_poll_ctl(pg->comm);
      if (rr__comm_abort_concerns(pg->comm, 1, c->hdr.seq)) {
        return rr__comm_check(pg->comm);
      }
      if (now >= c->deadline_ms)
        return rr__set_error(RR_ETIMEDOUT,
                             "timed out after %.1f s waiting for this rank's device work (its "
                             "stream waits for the peers' streams: is a peer's GPU stuck?)",
                             (double)c->timeout_ms / 1000.0);
    }
    /* The first ~100 looks give the core away; a longer call sleeps between looks. */
    if (spins < 100) {
      sched_yield();
    } else {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
  }
  return st;
}

void rr__pg_memop_release(const rr__pg_call *call, const rr__req_dev *dev) {
  /* The failure's text is what the caller reports: nothing here may replace it. */
  char why[RR__ERRMSG_MAX];
  snprintf(why, sizeof why, "%s", rr__error());
  void *ev = NULL;
  if (rr__cuda_event_take(&ev) == RR_OK && rr__cuda_event_record(ev, dev->stream) == RR_OK) {
    /* A live peer that fails too may still write an older value into a word after ours, so
     * the release is stored again until the stream is through. Bounded by the device work
     * queued before the failure. */
    for (int d = 0; d == 0;) {
      rr__dev_release(dev->waits);
      d = rr__cuda_event_done(ev);
      if (d == 0) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
      }
    }
  } else {
    rr__dev_release(dev->waits);
  }
  rr__cuda_event_give(ev, call->device);
  rr__copy_error(why);
}

int rr__pg_ipc_out(rr_pg *pg, const rr__pg_call *call, const rr__req_dev *dev, int prev, int st) {
  const rr__args *a = &call->a;
  int rec = st == RR_OK ? rr__cuda_event_record(call->cuda_done, dev->stream) : RR_OK;
  /* A failed call records no completion, so nothing would order its copies and kernels
   * still queued on the copy stream before what the caller does next with the buffers (DDP
   * reuses its buckets on the next group after a shrink): wait for them here. Bounded: no
   * work on our streams waits for another process. Its own failure adds nothing to st's. */
  if (st != RR_OK) {
    char why[RR__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", rr__error());
    (void)rr__cuda_stream_sync(dev->stream);
    rr__copy_error(why);
  }
  rr__cuda_restore_device(prev);
  if (rec != RR_OK)
    return rr__cuda_pg_fail(pg, a, rec, "marking the result's completion", rr__ipc_how(call));
  return st;
}
