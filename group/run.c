/* How a call of a group runs, and running it on the current thread. Its path is decided once,
 * at submission (rr__pg_path: host memory, managed memory, staged through pinned memory, or
 * device to device over CUDA IPC, or piped) and kept in its record (group/pg.h, rr__pg_call);
 * rr__pg_run is a switch over it. The device paths prepare and finish around the ring
 * (group/staging.c, group/ipc.c), which this file alone runs. The ring (ring/coll.c) runs
 * the algorithm; this file is what the group adds around it: a look at the control sockets
 * before starting, refusing calls on a group that already failed, and turning any failure
 * into one sentence that names this rank, the call, the place in the algorithm and the
 * cause, then aborting the group so no peer waits for us in vain. */
#include <stdio.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "group/pg.h"

/* dev != NULL: the algorithm runs on the device buffers themselves (CUDA IPC, or piped:
 * through pinned slots over host lanes). */
static int rr__run_coll(rr_pg *pg, const rr__args *a, int64_t timeout_ms, const rr__req_dev *dev,
                        int piped, const rr__pg_call *call) {
  rr__coll c;
  rr__coll_init(&c, &pg->cs, pg->comm, a, pg->rank, pg->size, timeout_ms);
  c.may_spin = pg->inline_call;
  /* A device call's waits end with device work: they spin, but never count in (or wait out)
   * the back-off host calls adapt (transport/comm.h). */
  if (dev && c.may_spin) c.may_spin = RR__COMM_SPIN_DEVICE;
  if (dev) rr__coll_on_device(&c, dev, piped);
  /* The ring and chain kinds through CUDA IPC take larger segments than host lanes do:
   * each segment passes between two processes' device work, which cost about 50 us per
   * hand-off on the first GPU run whatever the size (docs/gpu-runs/2026-11-27-h200.md). */
  if (dev && !piped) rr__coll_set_seg(&c, rr__pg_ipc_seg(pg, a->kind));
  int me = pg->global_ranks[pg->rank];
  char desc[192];

  /* A peer may have aborted while this rank was busy elsewhere: look before starting, so
   * a call does not complete on data buffered before a peer failed long ago. Every wait
   * watches the control sockets anyway; this look costs a system call (1-2 us here), so
   * back-to-back calls take it at most once per clock tick (a few ms). */
  int64_t now_ms = rr__now_ms_coarse();
  if (now_ms != pg->ctl_seen_ms) {
    pg->ctl_seen_ms = now_ms;
    rr__comm_poll_ctl(pg->comm);
  }
  rr__coll_begin(&c);
  if (rr__log_enabled(RR__LEVEL_TRACE, RR__SUB_COLL))
    RR__LOG_TRACE(RR__SUB_COLL, "start %s", rr__coll_describe(&c, desc, sizeof desc));
  if (rr__comm_abort_concerns(pg->comm, !rr__coll_is_p2p(&c), c.hdr.seq)) {
    /* The first call to meet the abort reports its cause; later ones say the group is gone. */
    int st = rr__comm_check(pg->comm);
    rr__coll_describe(&c, desc, sizeof desc);
    /* A revoked group says so in every call, with who revoked it (rr_pg_revoke). */
    if (pg->comm->reported && st != RR_EREVOKED)
      return rr__prefix_error(
          RR_EABORTED, "rank %d: %s: the group is unusable after an earlier failure", me, desc);
    pg->comm->reported = 1;
    return rr__prefix_error(st, "rank %d: %s", me, desc);
  }

  int st = rr__coll_exec(&c);
  /* Stream memory operations: the ring only queued the call's device work; it runs now, and
   * a peer's death is seen here (group/ipc.c). */
  const int memops = dev && dev->memops;
  if (st == RR_OK && memops) st = rr__pg_memop_wait(pg, call, &c, dev);
  if (st != RR_OK) {
    if (rr__coll_where(&c)[0]) rr__prefix_error(st, "%s", c.where);
    rr__prefix_error(st, "rank %d: %s", me, rr__coll_describe(&c, desc, sizeof desc));
    /* The group's state is unknown now: stop it here and tell every peer why. */
    rr__comm_abort(pg->comm, st, rr__error(), 1);
    pg->comm->reported = 1;
    /* No wait of this rank's stream may outlive the call. */
    if (memops) rr__pg_memop_release(call, dev);
    return st;
  }
  if (rr__log_enabled(RR__LEVEL_TRACE, RR__SUB_COLL))
    RR__LOG_TRACE(RR__SUB_COLL, "done %s", rr__coll_describe(&c, desc, sizeof desc));
  return RR_OK;
}

int rr__pg_path(const rr_pg *pg, rr__pg_call *call) {
  call->path = RR__PATH_HOST;
  call->device = call->send_device = call->recv_device = -1;
  /* Without a CUDA driver every buffer is host memory: nothing to look at. */
  if (!rr__cuda_available()) return RR_OK;
  RR__CHECK(rr__cuda_pg_buffers(pg, call));
  if (call->path == RR__PATH_STAGED && rr__pg_ipc_call(pg, call))
    call->path = RR__PATH_IPC;
  else if (call->path == RR__PATH_STAGED && rr__pg_piped_call(pg, call))
    call->path = RR__PATH_PIPED;
  return RR_OK;
}

/* The ring on a host copy of the device buffers (or on managed memory, as it is). */
static int rr__run_staged(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms) {
  rr__args h;
  rr__stage sg;
  RR__CHECK(rr__pg_stage_in(pg, call, &h, &sg));
  return rr__pg_stage_out(pg, call, &sg, rr__run_coll(pg, &h, timeout_ms, NULL, 0, call));
}

/* CUDA IPC and piped: the ring on the device buffers, on the group's copy stream. */
static int rr__run_device(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms, int piped) {
  rr__req_dev dev;
  rr__dev_waits waits;
  waits.n = 0;
  int prev = -1;
  RR__CHECK(rr__pg_ipc_in(pg, call, &dev, &prev));
  dev.waits = &waits;
  return rr__pg_ipc_out(pg, call, &dev, prev,
                        rr__run_coll(pg, &call->a, timeout_ms, &dev, piped, call));
}

/* A call rr__pg_path sent through CUDA IPC whose group cannot take it (GPUs without peer
 * access, a device without IPC: rr__pg_ipc_agreed): the way RR_CUDA_IPC=0 sends it, piped
 * or staged, decided as rr__pg_path would. Its events serve either path. */
static int rr__run_declined(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms) {
  rr__pg_call c = *call;
  c.path = rr__pg_piped_call(pg, &c) ? RR__PATH_PIPED : RR__PATH_STAGED;
  rr__pg_ipc_declined_add();
  return c.path == RR__PATH_PIPED ? rr__run_device(pg, &c, timeout_ms, 1)
                                  : rr__run_staged(pg, &c, timeout_ms);
}

int rr__pg_run(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms) {
  switch (call->path) {
    case RR__PATH_MANAGED:
    case RR__PATH_STAGED:
      return rr__run_staged(pg, call, timeout_ms);
    case RR__PATH_IPC: {
      int st = RR_OK;
      if (!rr__pg_ipc_agreed(pg, call, timeout_ms, &st))
        return st != RR_OK ? st : rr__run_declined(pg, call, timeout_ms);
      /* Ranks that share one GPU: one kernel instead of the ring (group/direct.c). */
      if (rr__pg_direct_run(pg, call, timeout_ms, &st)) return st;
      return rr__run_device(pg, call, timeout_ms, 0);
    }
    case RR__PATH_PIPED:
      return rr__run_device(pg, call, timeout_ms, 1);
    case RR__PATH_HOST:
    default:
      return rr__run_coll(pg, &call->a, timeout_ms, NULL, 0, call);
  }
}
