/* One kernel for ranks that share a GPU (issue 39 part 2; docs/cuda.md, "One kernel for ranks
 * that share a GPU").
 *
 * When every rank of a group runs on one GPU, each in its own process, the ring moves every
 * byte through the device several times (copy into a peer's slot, read it back, reduce,
 * forward). Here the lowest rank (the leader, group rank 0) runs one kernel that reads every
 * rank's input and writes every rank's output: 2nS bytes of device memory traffic for n ranks
 * of S bytes, the least any form can move. all_reduce, reduce_scatter, all_gather, broadcast
 * and reduce take it; the other kinds keep the ring over CUDA IPC.
 *
 * One call, on the group's copy stream of each rank (after cuda_ready, group/ipc.c):
 *
 *   leader   sends its call header to every peer; takes every peer's header and the
 *            description of its buffers (host messages on message 0); maps each peer buffer
 *            (its allocation's IPC handle, opened once and cached, plus the offset); queues
 *            on its stream a wait for each peer's signal, the kernel, a signal to each peer
 *   peer     [copies its input into its scratch, when its buffer cannot be exported];
 *            sends its header and description; checks the leader's header; queues a signal
 *            to the leader ("my input is ready, my output may be written"), a wait for the
 *            leader's signal ("done") [and the copy of its output out of the scratch]
 *
 * The signals are the stream memory operations of the CUDA IPC lanes (transport/cuda_ipc.h,
 * rr__req.signal): one process's stream waits for another's write, no kernel ever spins on
 * memory another process writes, and the host only queues work and then waits for its own
 * event while it watches the group (rr__pg_memop_wait). A failed call releases this rank's
 * waits (rr__pg_memop_release) so that no stream waits for a peer that will never write.
 *
 * The cache. A peer describes each buffer by its allocation: the base and size, the id that
 * cuPointerGetAttributes gives it (unique for the life of the process: memory freed and
 * allocated again, even at the same address, has a new id), the IPC handle of the base and
 * the offset. The leader keys what it opened by (peer, id), never by address, so a buffer
 * freed and reused is never read through the old mapping; and a new allocation of a peer
 * that overlaps one it has mapped means the old one was freed: that mapping is closed then.
 * Memory that gives no IPC handle (cudaMallocAsync's pools, say) goes through the peer's
 * scratch instead, device memory of its own that is exported once.
 *
 * Who takes it is decided by every rank alike: at the group's first ring or chain call through
 * CUDA IPC, the ranks tell each other their GPU's UUID, their process and whether their
 * device has stream memory operations (a host all_gather, once per group, which also tells
 * whether CUDA IPC works between their GPUs at all: rr__pg_ipc_agreed); then a call takes it when
 * every rank is on that one GPU in its own process and the call's kind has the form. A rank that
 * runs the ring meanwhile (its buffers on the host, say) meets a header naming another algorithm
 * and the call fails as any mismatch does. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "group/pg.h"

#define RR__DIRECT_ALIGN 256 /* where the scratch's areas start (the kernel's vectors) */
#define RR__DIRECT_SIG_MSG 1 /* the message number (so the lane) the signals travel on */

/* What each rank tells the others once (rr__direct_learn). The devices it sees come with
 * peer access among them, so that every rank can judge every pair of the group's GPUs from
 * the same table and all decide alike (rr__direct_ipc_ok). */
#define RR__P2P_VIS 16
typedef struct rr__direct_info {
  unsigned char uuid[16];
  int32_t pid, device, memops;
  int32_t ipc;  /* a trial cudaIpcGetMemHandle on device succeeded */
  int32_t nvis; /* vis[0] is device's UUID, then the other devices this rank sees */
  int32_t pad;
  unsigned char vis[RR__P2P_VIS][16];
  uint16_t access[RR__P2P_VIS]; /* bit j of access[i]: vis[i] can access vis[j]'s memory */
} rr__direct_info;

typedef struct rr__direct rr__direct;
struct rr__direct {
  int known;  /* the ranks told each other */
  int device; /* this rank's device then, whose UUID is uuid */
  int ok;     /* every rank on one GPU in its own process, with stream memory operations */
  int ipc_ok; /* CUDA IPC works between every two ranks' GPUs (rr__direct_ipc_ok) */
  unsigned char uuid[16];
  /* This rank's scratch, for buffers that cannot be exported (device memory of its own,
   * grow-only; outgrown ones are kept until the group is freed). */
  char *scratch;
  size_t scratch_bytes;
  int scratch_device;
  rr__cuda_retired *retired;
};

/* A peer's buffers as it describes them to the leader (a host message; every rank is on one
 * host; transport/cuda_ipc.h's rr__ipc_region). bytes 0: no buffer. */
typedef struct rr__direct_desc {
  unsigned char uuid[16];
  rr__ipc_region r[2]; /* 0: what the rank reads (sendbuf), 1: what it writes (recvbuf) */
} rr__direct_desc;

static atomic_ullong rr__direct_ncalls, rr__direct_nopens, rr__direct_ncopies;

uint64_t rr__direct_calls(void) {
  return atomic_load(&rr__direct_ncalls);
}
uint64_t rr__direct_opens(void) {
  return atomic_load(&rr__direct_nopens);
}
uint64_t rr__direct_copies(void) {
  return atomic_load(&rr__direct_ncopies);
}

/* The kinds with a one-kernel form. */
static int rr__direct_kind(int kind) {
  return kind == RR__K_ALL_REDUCE || kind == RR__K_REDUCE_SCATTER || kind == RR__K_ALL_GATHER ||
         kind == RR__K_BROADCAST || kind == RR__K_REDUCE;
}

/* A call failed: the same sentence and abort as group/run.c's failures (this rank, the call,
 * where it was, the cause; every peer told). */
static int rr__direct_failed(rr_pg *pg, rr__coll *c, int st) {
  char desc[192];
  if (rr__coll_where(c)[0]) rr__prefix_error(st, "%s", c->where);
  rr__prefix_error(st, "rank %d: %s", pg->global_ranks[pg->rank],
                   rr__coll_describe(c, desc, sizeof desc));
  rr__comm_abort(pg->comm, st, rr__error(), 1);
  pg->comm->reported = 1;
  return st;
}

/* Start a call as group/run.c does: its number and header, the abort a peer may have sent. */
static int rr__direct_begin(rr_pg *pg, rr__coll *c) {
  /* At most once per clock tick, as group/run.c looks (a system call each time). */
  int64_t now_ms = rr__now_ms_coarse();
  if (now_ms != pg->ctl_seen_ms) {
    pg->ctl_seen_ms = now_ms;
    rr__comm_poll_ctl(pg->comm);
  }
  rr__coll_begin(c);
  if (!rr__comm_abort_concerns(pg->comm, 1, c->hdr.seq)) return RR_OK;
  int st = rr__comm_check(pg->comm);
  char desc[192];
  rr__coll_describe(c, desc, sizeof desc);
  if (pg->comm->reported && st != RR_EREVOKED)
    return rr__prefix_error(RR_EABORTED,
                            "rank %d: %s: the group is unusable after an earlier failure",
                            pg->global_ranks[pg->rank], desc);
  pg->comm->reported = 1;
  return rr__prefix_error(st, "rank %d: %s", pg->global_ranks[pg->rank], desc);
}

/* ---- whether CUDA IPC works between the group's GPUs ----
 *
 * CUDA IPC maps a peer's device memory into this rank's device: between two GPUs that needs
 * peer access (cudaIpcOpenMemHandle: "cudaDeviceCanAccessPeer can determine if a mapping is
 * possible"; without it the open fails, cudaErrorPeerAccessUnsupported), and a device must
 * give IPC handles at all (not between MIG instances, not on WSL). NCCL's p2p transport
 * checks the same before it uses IPC (p2pCanConnect). */

/* This rank's part: its device's UUID first, then the others it sees; peer access among
 * them both ways; and whether a handle of fresh memory on device can be had. Failures only
 * say no (an unknown answer is a no). */
static void rr__direct_ipc_mine(rr__direct *d, int device, rr__direct_info *mine) {
  char why[RR__ERRMSG_MAX];
  snprintf(why, sizeof why, "%s", rr__error());
  int ord[RR__P2P_VIS];
  const int ndev = rr__cuda_device_count();
  static const unsigned char zero[16];
  mine->nvis = 0;
  if (memcmp(mine->uuid, zero, sizeof zero)) {
    memcpy(mine->vis[0], mine->uuid, 16);
    ord[0] = device;
    mine->nvis = 1;
  }
  for (int o = 0; o < ndev && mine->nvis > 0 && mine->nvis < RR__P2P_VIS; o++) {
    if (o == device || rr__cuda_device_uuid(o, mine->vis[mine->nvis]) != RR_OK) continue;
    ord[mine->nvis++] = o;
  }
  for (int i = 0; i < mine->nvis; i++)
    for (int j = 0; j < mine->nvis; j++) {
      int can = 0;
      if (i != j && rr__cuda_can_access_peer(ord[i], ord[j], &can) == RR_OK && can)
        mine->access[i] |= (uint16_t)(1u << j);
    }
  int prev = -1;
  void *p = NULL;
  if (rr__cuda_set_device(device, &prev) == RR_OK) {
    rr__cuda_ipc_handle h;
    if (rr__cuda_malloc(&p, 4096) == RR_OK) {
      mine->ipc = rr__cuda_ipc_mem_handle(&h, p) == RR_OK;
      /* Freed with the group: cudaFree would wait for the whole device now, other groups'
       * work included. */
      rr__cuda_retire(&d->retired, p, 4096, device);
    }
    rr__cuda_restore_device(prev);
  }
  rr__copy_error(why);
}

static int rr__direct_vis(const rr__direct_info *k, const unsigned char uuid[16]) {
  for (int i = 0; i < k->nvis && i < RR__P2P_VIS; i++)
    if (!memcmp(k->vis[i], uuid, 16)) return i;
  return -1;
}

/* Every rank judges from the same table, so all decide alike: CUDA IPC is usable when every
 * rank's device gives handles and every two ranks are on one GPU or on GPUs that can access
 * each other both ways, as any rank that sees both says. A pair that no rank sees both of
 * (each rank limited to its own GPU by CUDA_VISIBLE_DEVICES) cannot be checked here and is
 * taken as usable, as NCCL does (an IPC handle opens on a device the process cannot see).
 * Every pair, not only ring neighbours: the pull, the one-kernel form and the other kinds
 * map other ranks' memory too. */
static int rr__direct_ipc_ok(const rr_pg *pg, const rr__direct_info *all, char *why, size_t len) {
  static const unsigned char zero[16];
  for (int r = 0; r < pg->size; r++) {
    if (!all[r].ipc) {
      snprintf(why, len,
               "rank %d's device gives no CUDA IPC handle (cudaIpcGetMemHandle failed: a MIG "
               "instance, WSL, or no memory)",
               pg->global_ranks[r]);
      return 0;
    }
    if (!memcmp(all[r].uuid, zero, 16)) {
      snprintf(why, len, "rank %d's GPU UUID is unknown", pg->global_ranks[r]);
      return 0;
    }
  }
  for (int r = 0; r < pg->size; r++)
    for (int q = r + 1; q < pg->size; q++) {
      if (!memcmp(all[r].uuid, all[q].uuid, 16)) continue;
      for (int k = 0; k < pg->size; k++) {
        const int i = rr__direct_vis(&all[k], all[r].uuid),
                  j = rr__direct_vis(&all[k], all[q].uuid);
        if (i < 0 || j < 0) continue;
        if (!(all[k].access[i] >> j & 1) || !(all[k].access[j] >> i & 1)) {
          snprintf(why, len,
                   "the GPUs of ranks %d and %d cannot access each other's memory "
                   "(cudaDeviceCanAccessPeer, asked by rank %d)",
                   pg->global_ranks[r], pg->global_ranks[q], pg->global_ranks[k]);
          return 0;
        }
        break;
      }
    }
  snprintf(why, len,
           "every two ranks share a GPU or have peer access, and every device gives "
           "IPC handles");
  return 1;
}

/* Once per group: every rank's GPU, process and stream memory operations, by a host
 * all_gather; the form applies when all are on one GPU, in processes of their own, with
 * stream memory operations. The same exchange tells whether CUDA IPC works between the
 * group's GPUs at all (above). */
static int rr__direct_learn(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms) {
  rr__direct *d = pg->direct;
  rr__direct_info mine, *all = rr__calloc((size_t)pg->size, sizeof *all);
  if (!all) return RR_ENOMEM;
  memset(&mine, 0, sizeof mine);
  mine.pid = (int32_t)getpid();
  mine.device = call->device;
  mine.memops = rr__params_get()->cuda_memops && rr__cuda_mem_ops(call->device);
  int st = rr__cuda_device_uuid(call->device, mine.uuid);
  /* A device whose UUID cannot be had takes the ring: a UUID of zeros and no memops. */
  if (st != RR_OK) memset(mine.uuid, 0, sizeof mine.uuid), mine.memops = 0;
  rr__direct_ipc_mine(d, call->device, &mine);
  const rr__args a = {.kind = RR__K_ALL_GATHER,
                      .sendbuf = &mine,
                      .recvbuf = all,
                      .count = sizeof mine,
                      .dtype = RR_UINT8,
                      .root = -1,
                      .peer = -1,
                      .src = -1};
  rr__coll c;
  rr__coll_init(&c, &pg->cs, pg->comm, &a, pg->rank, pg->size, timeout_ms);
  c.may_spin = pg->inline_call;
  st = rr__direct_begin(pg, &c);
  if (st != RR_OK) {
    free(all);
    return st;
  }
  st = rr__coll_exec(&c);
  if (st != RR_OK) {
    free(all);
    rr__prefix_error(st, "telling the ranks which GPU each one uses (for the one-kernel form)");
    return rr__direct_failed(pg, &c, st);
  }
  int ok = 1;
  for (int r = 0; r < pg->size; r++) {
    ok &= all[r].memops && !memcmp(all[r].uuid, all[0].uuid, sizeof mine.uuid);
    for (int q = 0; q < r; q++) ok &= all[q].pid != all[r].pid;
  }
  static const unsigned char zero[16];
  ok &= memcmp(all[0].uuid, zero, sizeof zero) != 0;
  char why[256];
  d->ipc_ok = rr__direct_ipc_ok(pg, all, why, sizeof why);
  memcpy(d->uuid, mine.uuid, sizeof d->uuid);
  d->device = call->device;
  d->ok = ok && d->ipc_ok;
  d->known = 1;
  free(all);
  RR__LOG_INFO(RR__SUB_COLL,
               "rank %d: device buffers of this group: %s (%s); one-kernel form for ranks "
               "sharing a GPU: %s",
               pg->global_ranks[pg->rank],
               d->ipc_ok ? "through CUDA IPC" : "staged or piped through pinned host memory", why,
               d->ok ? "on (every rank on one GPU)"
                     : "off (ranks on different GPUs, in one process, without stream memory "
                       "operations, or without CUDA IPC)");
  return RR_OK;
}

/* ---- a peer: its buffers described, through its scratch where they cannot be exported ---- */

/* The scratch, at least need bytes, on the current device `device`. */
static int rr__direct_scratch(rr__direct *d, size_t need, int device) {
  if (d->scratch && d->scratch_bytes >= need && d->scratch_device == device) return RR_OK;
  void *p = NULL;
  size_t got = 0;
  const size_t have = d->scratch_device == device ? d->scratch_bytes : 0;
  RR__CHECK(rr__cuda_alloc_grown(&p, &got, have, need, 0));
  /* Earlier calls through it are done (each waited for its stream); the leader may keep
   * it mapped until the group ends, so it is not freed before. */
  rr__cuda_retire(&d->retired, d->scratch, d->scratch_bytes, d->scratch_device);
  d->scratch = p;
  d->scratch_bytes = got;
  d->scratch_device = device;
  return RR_OK;
}

static size_t rr__direct_round(size_t x) {
  return (x + RR__DIRECT_ALIGN - 1) / RR__DIRECT_ALIGN * RR__DIRECT_ALIGN;
}

/* The peer's two regions into desc; where one cannot be exported, its bytes go through the
 * scratch: the input copied in now, the output out after the leader's signal (*out_copy). */
typedef struct rr__direct_copy {
  void *dst;
  const void *src;
  size_t bytes;
} rr__direct_copy;

static int rr__direct_peer_regions(rr_pg *pg, const rr__pg_call *call, rr__coll *c,
                                   const rr__req_dev *dev, rr__direct_desc *desc,
                                   rr__direct_copy *out_copy) {
  rr__direct *d = pg->direct;
  const rr__args *a = &call->a;
  size_t in = 0, out = 0;
  int reads = 0, writes = 0, gaps = 0;
  rr__pg_call_io(pg, a, &in, &out, &reads, &writes, &gaps);
  const char *p[2] = {reads && in ? a->sendbuf : NULL, writes && out ? a->recvbuf : NULL};
  const size_t len[2] = {reads ? in : 0, writes ? out : 0};
  int ok[2] = {1, 1};
  rr__ipc_cache *k_cache = rr__pg_ipc_cache(pg);
  if (!k_cache) return RR_ENOMEM;
  /* The GPU of this call's buffers, which the leader compares with its own. */
  if (call->device == d->device)
    memcpy(desc->uuid, d->uuid, sizeof desc->uuid);
  else
    RR__CHECK(rr__cuda_device_uuid(call->device, desc->uuid));
  *out_copy = (rr__direct_copy){0};
  RR__WHERE(c, "describing this rank's buffers to rank %d", pg->global_ranks[0]);
  for (int k = 0; k < 2; k++) {
    if (!p[k]) continue;
    int e = rr__ipc_describe(k_cache, p[k], len[k], &desc->r[k]);
    if (e < 0) return e;
    ok[k] = e;
  }
  if ((!p[0] || ok[0]) && (!p[1] || ok[1])) return RR_OK;
  /* The scratch: the two ranges as one where they overlap (in place: one allocation, so
   * both cannot be exported), else one after the other. */
  size_t off[2] = {0, 0}, need = 0;
  const int both = p[0] && p[1] && !ok[0] && !ok[1];
  if (both && p[0] < p[1] + len[1] && p[1] < p[0] + len[0]) {
    const char *lo = p[0] < p[1] ? p[0] : p[1];
    off[0] = (size_t)(p[0] - lo);
    off[1] = (size_t)(p[1] - lo);
    need = RR__MAX(off[0] + len[0], off[1] + len[1]);
  } else {
    for (int k = 0; k < 2; k++)
      if (p[k] && !ok[k]) off[k] = need, need = rr__direct_round(need + len[k]);
  }
  RR__WHERE(c, "copying through this rank's scratch (its buffer gives no IPC handle)");
  RR__CHECK(rr__direct_scratch(d, need, dev->device));
  rr__ipc_region s;
  int e = rr__ipc_describe(k_cache, d->scratch, need, &s);
  if (e <= 0)
    return e < 0 ? e
                 : rr__set_error(RR_ECUDA, "this rank's scratch (cudaMalloc) gives no IPC handle");
  for (int k = 0; k < 2; k++) {
    if (!p[k] || ok[k]) continue;
    desc->r[k] = s;
    desc->r[k].offset = s.offset + off[k];
  }
  atomic_fetch_add_explicit(&rr__direct_ncopies, 1, memory_order_relaxed);
  if (p[0] && !ok[0])
    RR__CHECK(rr__cuda_memcpy_async(d->scratch + off[0], p[0], len[0], dev->stream));
  if (p[1] && !ok[1])
    *out_copy = (rr__direct_copy){.dst = a->recvbuf, .src = d->scratch + off[1], .bytes = len[1]};
  return RR_OK;
}

static int rr__direct_peer(rr_pg *pg, const rr__pg_call *call, rr__coll *c, rr__req_dev *dev) {
  rr__comm *cm = pg->comm;
  rr__direct_desc desc;
  memset(&desc, 0, sizeof desc);
  rr__direct_copy out_copy;
  RR__CHECK(rr__direct_peer_regions(pg, call, c, dev, &desc, &out_copy));
  /* The header, then the description, on message 0 (one lane, in order). */
  RR__CHECK(rr__coll_send_hdr(c, 0));
  rr__req dr;
  memset(&dr, 0, sizeof dr);
  dr.buf = (char *)&desc;
  dr.len = sizeof desc;
  RR__CHECK(rr__comm_isend(cm, 0, 0, &dr));
  /* The leader runs this form too: only then may this stream wait for it. */
  uint8_t wire[RR__HDR_BYTES];
  rr__req hr;
  RR__CHECK(rr__coll_post_hdr(c, 0, &hr, wire));
  RR__CHECK(rr__coll_wait(c, &hr, 0));
  RR__CHECK(rr__coll_check_hdr(c, 0, wire));
  RR__WHERE(c, "queuing the hand-off with rank %d on this rank's stream", pg->global_ranks[0]);
  rr__req ready, done;
  memset(&ready, 0, sizeof ready);
  memset(&done, 0, sizeof done);
  ready.signal = done.signal = 1;
  ready.dev = done.dev = dev;
  RR__CHECK(rr__comm_isend(cm, 0, RR__DIRECT_SIG_MSG, &ready));
  RR__CHECK(rr__comm_irecv(cm, 0, RR__DIRECT_SIG_MSG, &done));
  RR__CHECK(rr__coll_wait(c, &ready, 0));
  RR__CHECK(rr__coll_wait(c, &done, 0));
  if (out_copy.bytes)
    RR__CHECK(rr__cuda_memcpy_async(out_copy.dst, out_copy.src, out_copy.bytes, dev->stream));
  RR__WHERE(c, "sending this rank's buffers to rank %d", pg->global_ranks[0]);
  return rr__coll_wait(c, &dr, 0);
}

/* ---- the leader: the peers' buffers mapped, the kernel ---- */

/* The leader's pointer to bytes `need` of peer's region r: the group's cache of mapped peer
 * allocations (transport/cuda_ipc.c, rr__ipc_map), shared with the ring's pull. */
static int rr__direct_map_region(rr_pg *pg, int peer, const rr__ipc_region *r, size_t need,
                                 char **out) {
  rr__ipc_cache *k = rr__pg_ipc_cache(pg);
  if (!k) return RR_ENOMEM;
  int o = rr__ipc_map(k, peer, pg->global_ranks[peer], r, need, out);
  if (o > 0) atomic_fetch_add_explicit(&rr__direct_nopens, 1, memory_order_relaxed);
  return o < 0 ? o : RR_OK;
}

/* The kernel's tasks for the call, from every rank's input and output (in, out: [n]). */
static void rr__direct_tasks(const rr__args *a, int n, char *const *in, char *const *out,
                             rr__cuda_direct *k) {
  const size_t blk = a->count * rr_dtype_size(a->dtype);
  memset(k, 0, sizeof *k);
  k->dtype = (int)a->dtype;
  k->op = rr__kind_has(a->kind, RR__KF_REDUCES) ? (int)a->op : (int)RR_SUM;
  k->avg_div = rr__kind_has(a->kind, RR__KF_REDUCES) && a->op == RR_AVG ? n : 0;
  k->n = a->count;
  switch (a->kind) {
    case RR__K_ALL_REDUCE:
    case RR__K_REDUCE:
      k->ntasks = 1;
      k->task[0].nin = n;
      for (int r = 0; r < n; r++) k->task[0].in[r] = in[r];
      if (a->kind == RR__K_REDUCE) {
        k->task[0].nout = 1;
        k->task[0].out[0] = out[a->root];
      } else {
        k->task[0].nout = n;
        for (int r = 0; r < n; r++) k->task[0].out[r] = out[r];
      }
      break;
    case RR__K_BROADCAST:
      k->ntasks = 1;
      k->task[0].nin = 1;
      k->task[0].in[0] = in[a->root];
      k->task[0].nout = n;
      for (int r = 0; r < n; r++) k->task[0].out[r] = out[r];
      break;
    case RR__K_REDUCE_SCATTER: /* task t: block t of every input, into rank t's output */
      k->ntasks = n;
      for (int t = 0; t < n; t++) {
        k->task[t].nin = n;
        for (int r = 0; r < n; r++) k->task[t].in[r] = in[r] + (size_t)t * blk;
        k->task[t].nout = 1;
        k->task[t].out[0] = out[t];
      }
      break;
    case RR__K_ALL_GATHER: /* task t: rank t's input, into block t of every output */
      k->ntasks = n;
      for (int t = 0; t < n; t++) {
        k->task[t].nin = 1;
        k->task[t].in[0] = in[t];
        k->task[t].nout = n;
        for (int r = 0; r < n; r++) k->task[t].out[r] = out[r] + (size_t)t * blk;
      }
      break;
  }
}

static int rr__direct_lead(rr_pg *pg, const rr__pg_call *call, rr__coll *c, rr__req_dev *dev) {
  rr__comm *cm = pg->comm;
  rr__direct *d = pg->direct;
  const rr__args *a = &call->a;
  const int n = pg->size;
  for (int p = 1; p < n; p++) RR__CHECK(rr__coll_send_hdr(c, p));
  uint8_t wire[RR__CUDA_DIRECT_MAX][RR__HDR_BYTES];
  rr__req hr[RR__CUDA_DIRECT_MAX], dr[RR__CUDA_DIRECT_MAX];
  rr__direct_desc desc[RR__CUDA_DIRECT_MAX];
  for (int p = 1; p < n; p++) {
    RR__CHECK(rr__coll_post_hdr(c, p, &hr[p], wire[p]));
    memset(&dr[p], 0, sizeof dr[p]);
    dr[p].buf = (char *)&desc[p];
    dr[p].len = sizeof desc[p];
    RR__CHECK(rr__comm_irecv(cm, p, 0, &dr[p]));
  }
  char *in[RR__CUDA_DIRECT_MAX] = {0}, *out[RR__CUDA_DIRECT_MAX] = {0};
  in[0] = (char *)a->sendbuf;
  out[0] = a->recvbuf;
  for (int p = 1; p < n; p++) {
    const int g = pg->global_ranks[p];
    RR__WHERE(c, "waiting for rank %d's call and buffers", g);
    RR__CHECK(rr__coll_wait(c, &hr[p], p));
    RR__CHECK(rr__coll_check_hdr(c, p, wire[p]));
    RR__CHECK(rr__coll_wait(c, &dr[p], p));
    if (memcmp(desc[p].uuid, d->uuid, sizeof d->uuid))
      return rr__set_error(RR_EINVAL,
                           "rank %d's buffers are on another GPU than rank %d's: the one-kernel "
                           "form needs every rank of the group on one GPU for the group's life",
                           g, pg->global_ranks[0]);
    /* What rank p reads and writes, as its own call says (the header matched ours). */
    const rr__call_io io = rr__kind_io(a, n, p);
    const size_t es = rr_dtype_size(a->dtype);
    RR__WHERE(c, "mapping rank %d's buffers", g);
    if (io.reads && io.in)
      RR__CHECK(rr__direct_map_region(pg, p, &desc[p].r[0], io.in * es, &in[p]));
    if (io.writes && io.out)
      RR__CHECK(rr__direct_map_region(pg, p, &desc[p].r[1], io.out * es, &out[p]));
  }
  RR__WHERE(c, "queuing the one-kernel collective on this rank's stream");
  rr__req ready[RR__CUDA_DIRECT_MAX], done[RR__CUDA_DIRECT_MAX];
  for (int p = 1; p < n; p++) {
    memset(&ready[p], 0, sizeof ready[p]);
    ready[p].signal = 1;
    ready[p].dev = dev;
    RR__CHECK(rr__comm_irecv(cm, p, RR__DIRECT_SIG_MSG, &ready[p]));
  }
  for (int p = 1; p < n; p++) RR__CHECK(rr__coll_wait(c, &ready[p], p));
  rr__cuda_direct k;
  rr__direct_tasks(a, n, in, out, &k);
  RR__CHECK(rr__cuda_direct_run(&k, dev->stream));
  for (int p = 1; p < n; p++) {
    memset(&done[p], 0, sizeof done[p]);
    done[p].signal = 1;
    done[p].dev = dev;
    RR__CHECK(rr__comm_isend(cm, p, RR__DIRECT_SIG_MSG, &done[p]));
  }
  for (int p = 1; p < n; p++) RR__CHECK(rr__coll_wait(c, &done[p], p));
  return RR_OK;
}

/* ---- the call ---- */

static int rr__direct_call(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms) {
  rr__req_dev dev;
  rr__dev_waits waits;
  waits.n = 0;
  int prev = -1;
  RR__CHECK(rr__pg_ipc_in(pg, call, &dev, &prev));
  dev.waits = &waits;
  dev.memops = 1;  /* every rank has them (rr__direct_learn) */
  dev.pull = NULL; /* no ring steps */
  rr__coll c;
  rr__coll_init(&c, &pg->cs, pg->comm, &call->a, pg->rank, pg->size, timeout_ms);
  c.may_spin = pg->inline_call;
  int st = rr__direct_begin(pg, &c);
  if (st != RR_OK) return rr__pg_ipc_out(pg, call, &dev, prev, st);
  /* Every rank's header names this form: a rank that runs the ring meets another algorithm
   * in it and the call fails as a mismatch, instead of waiting. The header sends live in
   * this frame, as in the dispatcher's (ring/coll.c, rr__coll_exec). */
  c.hdr.algo = RR__ALGO_DIRECT;
  c.hdr.seg_bytes = 0;
  rr__hdr_sends sends;
  sends.n = 0;
  c.sends = &sends;
  rr__comm_new_call(pg->comm, 1, c.hdr.seq);
  st = pg->rank == 0 ? rr__direct_lead(pg, call, &c, &dev) : rr__direct_peer(pg, call, &c, &dev);
  if (st == RR_OK) st = rr__coll_flush_hdrs(&c);
  if (st == RR_OK) st = rr__pg_memop_wait(pg, call, &c, &dev);
  c.sends = NULL;
  if (st == RR_OK) {
    rr__comm_call_done(pg->comm, c.hdr.seq);
    atomic_fetch_add_explicit(&rr__direct_ncalls, 1, memory_order_relaxed);
  } else {
    rr__direct_failed(pg, &c, st);
    /* No wait of this rank's stream may outlive the call. */
    if (waits.n) rr__pg_memop_release(call, &dev);
  }
  return rr__pg_ipc_out(pg, call, &dev, prev, st);
}

/* The group's state, made at its first device call through CUDA IPC. */
static int rr__direct_state(rr_pg *pg) {
  if (pg->direct) return RR_OK;
  pg->direct = rr__calloc(1, sizeof *pg->direct);
  if (!pg->direct) {
    int st = rr__set_error(RR_ENOMEM, "rank %d: no memory for the group's device-path state",
                           pg->global_ranks[pg->rank]);
    rr__comm_abort(pg->comm, st, rr__error(), 1);
    return st;
  }
  pg->direct->scratch_device = -1;
  return RR_OK;
}

/* Learned at the first call of a ring or chain kind (every rank makes it, and takes this
 * path, at the same place in its calls: group/ipc.c's rules are the same for all). The other
 * kinds may leave ranks off the path (all_to_allv) or out of the call (point to point): they
 * never learn, and before the group learned they go the way RR_CUDA_IPC=0 sends them, which
 * every rank agrees on too. */
int rr__pg_ipc_agreed(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms, int *st) {
  *st = RR_OK;
  if (pg->direct && pg->direct->known) return pg->direct->ipc_ok;
  const int dev = rr__kind(call->a.kind)->dev;
  if (dev != RR__DEV_IPC_SEG && dev != RR__DEV_PIPE) return 0;
  if ((*st = rr__direct_state(pg)) != RR_OK) return 0;
  if ((*st = rr__direct_learn(pg, call, timeout_ms)) != RR_OK) return 0;
  return pg->direct->ipc_ok;
}

int rr__pg_direct_run(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms, int *st) {
  *st = RR_OK;
  if (!rr__params_get()->cuda_direct || !rr__direct_kind(call->a.kind) || pg->size < 2 ||
      pg->size > RR__CUDA_DIRECT_MAX || call->path != RR__PATH_IPC || !rr__pg_direct_size(pg, call))
    return 0;
  if ((*st = rr__direct_state(pg)) != RR_OK) return 1;
  if (!pg->direct->known) {
    *st = rr__direct_learn(pg, call, timeout_ms);
    if (*st != RR_OK) return 1;
  }
  if (!pg->direct->ok) return 0;
  *st = rr__direct_call(pg, call, timeout_ms);
  return 1;
}

void rr__pg_direct_free(rr_pg *pg) {
  /* The mappings first: the leader's and the ring's pulls share them (group/ipc.c). */
  if (pg->ipc_cache) {
    rr__ipc_cache_close(pg->ipc_cache);
    free(pg->ipc_cache);
    pg->ipc_cache = NULL;
  }
  free(pg->ipc_pull);
  pg->ipc_pull = NULL;
  rr__direct *d = pg->direct;
  if (!d) return;
  pg->direct = NULL;
  if (d->scratch) {
    int prev = -1;
    if (rr__cuda_set_device(d->scratch_device, &prev) != RR_OK) prev = -1;
    rr__cuda_free(d->scratch); /* waits for the device first */
    rr__cuda_restore_device(prev);
  }
  rr__cuda_free_retired(&d->retired);
  free(d);
}
