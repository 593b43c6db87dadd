/* The public collectives: each checks everything a rank can know alone (dtype, op, ranks,
 * sizes, NULL and overlapping buffers) before anything is sent, then hands the call to the
 * group's queue (group/work.c). A bad argument fails here, on this rank, with RR_EINVAL. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/status.h"
#include "common/util.h"
#include "group/pg.h"
#include "ring/op.h"

static const char *rr__api_name(int kind) {
  return rr__kind(kind)->name;
}

/* Do [a, a+na) and [b, b+nb) overlap? */
static int rr__overlap(const void *a, size_t na, const void *b, size_t nb) {
  if (!a || !b || !na || !nb) return 0;
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}

static int rr__rank_arg(rr_pg *pg, const char *what, int global, int *group) {
  int g = rr__pg_group_rank(pg, global);
  if (g < 0) {
    if (pg->world == pg)
      return rr__set_error(RR_EINVAL, "%s %d is out of range 0..%d", what, global, pg->size - 1);
    char members[256] = "";
    size_t o = 0;
    for (int i = 0; i < pg->size && o < sizeof members - 16; i++)
      o += (size_t)snprintf(members + o, sizeof members - o, "%s%d", i ? ", " : "",
                            pg->global_ranks[i]);
    return rr__set_error(RR_EINVAL, "%s %d (a global rank) is not a member of this group (%s)",
                         what, global, members);
  }
  *group = g;
  return RR_OK;
}

/* One side of an all_to_allv: every block's end must be addressable. Sets *total (elements
 * over all blocks) and the span [*lo, *hi) in bytes from the buffer's start that the
 * non-empty blocks cover (0, 0 when all are empty). */
static int rr__check_blocks(const rr_pg *pg, const char *cname, const size_t *counts,
                            const char *dname, const size_t *displs, size_t es, size_t *total,
                            size_t *lo, size_t *hi) {
  if (!counts || !displs) return rr__set_error(RR_EINVAL, "%s or %s is NULL", cname, dname);
  const size_t limit = SIZE_MAX / es / 2;
  *total = *lo = *hi = 0;
  for (int j = 0; j < pg->size; j++) {
    if (counts[j] > limit || displs[j] > limit - counts[j] || *total > limit - counts[j])
      return rr__set_error(RR_EINVAL, "%s[%d] = %zu at %s[%d] = %zu overflows the addressable size",
                           cname, j, counts[j], dname, j, displs[j]);
    *total += counts[j];
    if (!counts[j]) continue;
    size_t a = displs[j] * es, b = (displs[j] + counts[j]) * es;
    if (*hi == 0 || a < *lo) *lo = a;
    if (b > *hi) *hi = b;
  }
  return RR_OK;
}

/* No element of an all_to_allv's recvbuf may be written by two blocks: which one wins
 * would depend on timing. Sorting the blocks by displacement leaves only neighbours to
 * compare. */
typedef struct rr__span {
  size_t lo, hi;
  int rank;
} rr__span;
static int rr__span_cmp(const void *x, const void *y) {
  const rr__span *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}
static int rr__check_recv_disjoint(const rr_pg *pg, const size_t *counts, const size_t *displs) {
  rr__span *sp = rr__calloc((size_t)pg->size, sizeof *sp);
  if (!sp) return RR_ENOMEM;
  int m = 0, st = RR_OK;
  for (int j = 0; j < pg->size; j++)
    if (counts[j]) sp[m++] = (rr__span){displs[j], displs[j] + counts[j], j};
  qsort(sp, (size_t)m, sizeof *sp, rr__span_cmp);
  for (int k = 1; k < m && st == RR_OK; k++)
    if (sp[k].lo < sp[k - 1].hi)
      st = rr__set_error(RR_EINVAL,
                         "recvbuf blocks %d and %d overlap (rdispls[%d] = %zu with %zu "
                         "elements reaches past rdispls[%d] = %zu): an element would be "
                         "written twice",
                         sp[k - 1].rank, sp[k].rank, sp[k - 1].rank, sp[k - 1].lo,
                         sp[k - 1].hi - sp[k - 1].lo, sp[k].rank, sp[k].lo);
  free(sp);
  return st;
}

/* *by_role is set when a failed check is one that only some ranks of a correct call make:
 * the root's buffers of a broadcast or reduce, the in-place offset of an all-gather or
 * reduce-scatter (which depends on the rank). */
static int rr__validate(rr_pg *pg, rr__args *a, int root_or_peer, int *by_role) {
  *by_role = 0;
  size_t es = rr_dtype_size(a->dtype);
  if ((int)a->dtype < 0 || a->dtype >= RR_NUM_DTYPES || es == 0)
    return rr__set_error(RR_EINVAL, "invalid dtype %d", (int)a->dtype);
  const rr__kind_info *k = rr__kind(a->kind);
  if (k->flags & RR__KF_REDUCES)
    RR__CHECK(rr__op_check(a->dtype, a->op));
  else
    a->op = RR_SUM;
  if (a->count > SIZE_MAX / es / (size_t)pg->size / 2)
    return rr__set_error(RR_EINVAL, "count %zu of %s overflows the addressable size", a->count,
                         rr_dtype_name(a->dtype));
  a->root = -1;
  a->peer = -1;
  if (k->flags & RR__KF_ROOTED) RR__CHECK(rr__rank_arg(pg, "root", root_or_peer, &a->root));
  if (a->kind == RR__K_RECV && root_or_peer == RR_ANY_SOURCE) {
    if (pg->size < 2)
      return rr__set_error(RR_EINVAL,
                           "peer RR_ANY_SOURCE in a group of one rank: no other "
                           "rank could ever send");
    a->peer = RR__PEER_ANY;
  } else if (k->flags & RR__KF_P2P) {
    if (root_or_peer == RR_ANY_SOURCE && a->kind != RR__K_RECV)
      return rr__set_error(RR_EINVAL,
                           "%s RR_ANY_SOURCE (-1): only a receive may take it; a "
                           "send needs its destination",
                           a->kind == RR__K_SENDRECV ? "dst" : "peer");
    RR__CHECK(rr__rank_arg(pg, a->kind == RR__K_SENDRECV ? "dst" : "peer", root_or_peer, &a->peer));
    if (a->peer == pg->rank)
      return rr__set_error(RR_EINVAL, "peer %d is this rank: sending to oneself is not supported",
                           root_or_peer);
  }
  if (a->kind == RR__K_SENDRECV) {
    int global_src = a->src;
    if (global_src == RR_ANY_SOURCE)
      return rr__set_error(RR_EINVAL,
                           "src RR_ANY_SOURCE (-1) is not supported by sendrecv: "
                           "use rr_recv with RR_ANY_SOURCE");
    RR__CHECK(rr__rank_arg(pg, "src", global_src, &a->src));
    if (a->src == pg->rank)
      return rr__set_error(
          RR_EINVAL, "src %d is this rank: receiving from oneself is not supported", global_src);
    if (a->recvcount > SIZE_MAX / es / 2)
      return rr__set_error(RR_EINVAL, "recvcount %zu overflows the addressable size", a->recvcount);
  }

  /* Sizes of what is read and written, in bytes from the buffers' starts. An all_to_allv's
   * blocks may leave the start of a buffer unused: only [in_lo, in) and [out_lo, out) must
   * not overlap. */
  size_t in_lo = 0, out_lo = 0, in_end, out_end; /* the ends: rr__kind_io's in and out */
  if (a->kind == RR__K_ALL_TO_ALLV) {
    RR__CHECK(rr__check_blocks(pg, "sendcounts", a->sendcounts, "sdispls", a->sdispls, es,
                               &a->count, &in_lo, &in_end));
    RR__CHECK(rr__check_blocks(pg, "recvcounts", a->recvcounts, "rdispls", a->rdispls, es,
                               &a->recvcount, &out_lo, &out_end));
    RR__CHECK(rr__check_recv_disjoint(pg, a->recvcounts, a->rdispls));
  }
  const rr__call_io io = rr__kind_io(a, pg->size, pg->rank);
  const size_t in = io.in * es, out = io.out * es;
  /* Only the root reads the sendbuf of a broadcast or scatter, and writes the recvbuf of a
   * reduce or gather: a rooted call's buffers are checked differently on each side. */
  *by_role = (k->flags & RR__KF_ROOTED) != 0;
  if (io.reads && in > 0 && !a->sendbuf)
    return rr__set_error(RR_EINVAL, "%s is NULL but %zu bytes are to be sent",
                         a->kind == RR__K_SEND ? "buf" : "sendbuf", in);
  if (io.writes && out > 0 && !a->recvbuf)
    return rr__set_error(RR_EINVAL, "%s is NULL but %zu bytes are to be received",
                         a->kind == RR__K_RECV ? "buf" : "recvbuf", out);
  if (io.reads && io.writes && in > 0 && a->recvbuf) {
    /* The in-place offset of an all-gather or reduce-scatter depends on the rank. */
    if (k->inplace == RR__INPLACE_SEND_AT_RANK || k->inplace == RR__INPLACE_RECV_AT_RANK)
      *by_role = 1;
    const char *s = a->sendbuf, *r = a->recvbuf;
    char rule[64];
    if (!rr__kind_in_place(a, pg->rank, in, out) &&
        rr__overlap(s + in_lo, in - in_lo, r + out_lo, out - out_lo))
      return rr__set_error(RR_EINVAL,
                           "sendbuf and recvbuf overlap without being in place (in place is "
                           "%s)",
                           rr__kind_in_place_rule(a->kind, rule, sizeof rule));
  }
  return RR_OK;
}

/* Check a call this rank built and queue it (or run it now). `a` holds the caller's
 * arguments; the group's record of the call (its path, stream and events) is made here. */
static int rr__submit(rr_pg *pg, rr__args *a, int root_or_peer, rr_work **work, int async) {
  if (async && work) *work = NULL;
  if (!pg) return rr__set_error(RR_EINVAL, "%s: the process group is NULL", rr__api_name(a->kind));
  if (async && !work)
    return rr__set_error(RR_EINVAL, "rank %d: %s_async: work is NULL", pg->global_ranks[pg->rank],
                         rr__api_name(a->kind));
  int by_role = 0;
  int st = rr__validate(pg, a, root_or_peer, &by_role);
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: %s", pg->global_ranks[pg->rank], rr__api_name(a->kind));
    /* The other ranks may pass all their checks and already wait in this call for ours: a
     * refusal that only this rank's role can earn aborts the group, so they fail in this
     * same call, naming this rank and the reason, instead of at the next call or never.
     * (Point to point has no roles: each side checks its own half.) */
    if (by_role) rr__comm_abort(pg->comm, st, rr__error(), 1);
    return st;
  }
  /* Where its buffers are decides how the call runs: looked at once, here (group/run.c), and
   * kept in the group's record of the call beside what the ring runs. When CUDA cannot
   * tell, the call is refused (never guessed host memory: the host would read device
   * memory), and, as a refusal by role, the group aborted so no peer waits. */
  rr__pg_call call = {.a = *a};
  st = rr__pg_path(pg, &call);
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: %s", pg->global_ranks[pg->rank], rr__api_name(a->kind));
    rr__comm_abort(pg->comm, st, rr__error(), 1);
    return st;
  }
  /* The sender of a receive from any rank is found by peeking at host memory and sockets;
   * staging a device buffer around that is not done (nor tested on a GPU). */
  if (a->kind == RR__K_RECV && a->peer == RR__PEER_ANY && call.path != RR__PATH_HOST)
    return rr__set_error(RR_EINVAL,
                         "rank %d: recv from any rank: buf is CUDA device or managed "
                         "memory; RR_ANY_SOURCE takes host buffers only (name the "
                         "source, or receive into host memory)",
                         pg->global_ranks[pg->rank]);
  if (call.path != RR__PATH_HOST) {
    /* Device buffers: the call is ordered after its stream, taken now, with an event
     * (group/device.c). Host calls have nothing to order. */
    call.stream = rr__cuda_pg_stream(pg);
    RR__CHECK(rr__cuda_pg_prepare(pg, &call));
  }
  if (async) {
    st = rr__pg_submit(pg, &call, work);
    if (st != RR_OK) rr__cuda_pg_release(&call); /* never queued: the events are still ours */
    return st;
  }
  st = rr__pg_submit(pg, &call, NULL);
  if (call.cuda_ready) { /* a managed buffer's call has cuda_ready alone */
    if (st == RR_OK) st = rr__cuda_pg_finish(pg, &call, 1);
    rr__cuda_pg_release(&call);
  }
  return st;
}

static int rr__call(rr_pg *pg, int kind, const void *sendbuf, void *recvbuf, size_t count,
                    rr_dtype dtype, rr_op op, int root_or_peer, rr_work **work, int async) {
  rr__args a = {.kind = kind,
                .sendbuf = sendbuf,
                .recvbuf = recvbuf,
                .count = count,
                .dtype = dtype,
                .op = op};
  return rr__submit(pg, &a, root_or_peer, work, async);
}

/* The public calls. */
int rr_all_reduce(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, rr_op op) {
  return rr__call(pg, RR__K_ALL_REDUCE, s, r, n, d, op, -1, NULL, 0);
}
int rr_all_reduce_async(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, rr_op op,
                        rr_work **w) {
  return rr__call(pg, RR__K_ALL_REDUCE, s, r, n, d, op, -1, w, 1);
}
int rr_reduce_scatter(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, rr_op op) {
  return rr__call(pg, RR__K_REDUCE_SCATTER, s, r, n, d, op, -1, NULL, 0);
}
int rr_reduce_scatter_async(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, rr_op op,
                            rr_work **w) {
  return rr__call(pg, RR__K_REDUCE_SCATTER, s, r, n, d, op, -1, w, 1);
}
int rr_all_gather(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d) {
  return rr__call(pg, RR__K_ALL_GATHER, s, r, n, d, RR_SUM, -1, NULL, 0);
}
int rr_all_gather_async(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, rr_work **w) {
  return rr__call(pg, RR__K_ALL_GATHER, s, r, n, d, RR_SUM, -1, w, 1);
}
int rr_broadcast(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, int root) {
  return rr__call(pg, RR__K_BROADCAST, s, r, n, d, RR_SUM, root, NULL, 0);
}
int rr_broadcast_async(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, int root,
                       rr_work **w) {
  return rr__call(pg, RR__K_BROADCAST, s, r, n, d, RR_SUM, root, w, 1);
}
int rr_reduce(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, rr_op op, int root) {
  return rr__call(pg, RR__K_REDUCE, s, r, n, d, op, root, NULL, 0);
}
int rr_reduce_async(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, rr_op op, int root,
                    rr_work **w) {
  return rr__call(pg, RR__K_REDUCE, s, r, n, d, op, root, w, 1);
}
int rr_gather(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, int root) {
  return rr__call(pg, RR__K_GATHER, s, r, n, d, RR_SUM, root, NULL, 0);
}
int rr_gather_async(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, int root,
                    rr_work **w) {
  return rr__call(pg, RR__K_GATHER, s, r, n, d, RR_SUM, root, w, 1);
}
int rr_scatter(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, int root) {
  return rr__call(pg, RR__K_SCATTER, s, r, n, d, RR_SUM, root, NULL, 0);
}
int rr_scatter_async(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, int root,
                     rr_work **w) {
  return rr__call(pg, RR__K_SCATTER, s, r, n, d, RR_SUM, root, w, 1);
}
int rr_all_to_all(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d) {
  return rr__call(pg, RR__K_ALL_TO_ALL, s, r, n, d, RR_SUM, -1, NULL, 0);
}
int rr_all_to_all_async(rr_pg *pg, const void *s, void *r, size_t n, rr_dtype d, rr_work **w) {
  return rr__call(pg, RR__K_ALL_TO_ALL, s, r, n, d, RR_SUM, -1, w, 1);
}

static int rr__all_to_allv(rr_pg *pg, const void *s, const size_t *sc, const size_t *sd, void *r,
                           const size_t *rc, const size_t *rd, rr_dtype d, rr_work **w, int async) {
  rr__args a = {.kind = RR__K_ALL_TO_ALLV,
                .sendbuf = s,
                .recvbuf = r,
                .sendcounts = sc,
                .sdispls = sd,
                .recvcounts = rc,
                .rdispls = rd,
                .dtype = d,
                .op = RR_SUM};
  return rr__submit(pg, &a, -1, w, async);
}
int rr_all_to_allv(rr_pg *pg, const void *s, const size_t *sc, const size_t *sd, void *r,
                   const size_t *rc, const size_t *rd, rr_dtype d) {
  return rr__all_to_allv(pg, s, sc, sd, r, rc, rd, d, NULL, 0);
}
int rr_all_to_allv_async(rr_pg *pg, const void *s, const size_t *sc, const size_t *sd, void *r,
                         const size_t *rc, const size_t *rd, rr_dtype d, rr_work **w) {
  return rr__all_to_allv(pg, s, sc, sd, r, rc, rd, d, w, 1);
}
int rr_barrier(rr_pg *pg) {
  return rr__call(pg, RR__K_BARRIER, NULL, NULL, 0, RR_UINT8, RR_SUM, -1, NULL, 0);
}
int rr_barrier_async(rr_pg *pg, rr_work **w) {
  return rr__call(pg, RR__K_BARRIER, NULL, NULL, 0, RR_UINT8, RR_SUM, -1, w, 1);
}
int rr_send(rr_pg *pg, const void *buf, size_t n, rr_dtype d, int peer) {
  return rr__call(pg, RR__K_SEND, buf, NULL, n, d, RR_SUM, peer, NULL, 0);
}
int rr_send_async(rr_pg *pg, const void *buf, size_t n, rr_dtype d, int peer, rr_work **w) {
  return rr__call(pg, RR__K_SEND, buf, NULL, n, d, RR_SUM, peer, w, 1);
}
int rr_recv(rr_pg *pg, void *buf, size_t n, rr_dtype d, int peer) {
  return rr__call(pg, RR__K_RECV, NULL, buf, n, d, RR_SUM, peer, NULL, 0);
}
int rr_recv_async(rr_pg *pg, void *buf, size_t n, rr_dtype d, int peer, rr_work **w) {
  return rr__call(pg, RR__K_RECV, NULL, buf, n, d, RR_SUM, peer, w, 1);
}

int rr_recv_any(rr_pg *pg, void *buf, size_t n, rr_dtype d, int *src) {
  int from = -1;
  rr__args a = {
      .kind = RR__K_RECV, .recvbuf = buf, .count = n, .dtype = d, .op = RR_SUM, .source = &from};
  int st = rr__submit(pg, &a, RR_ANY_SOURCE, NULL, 0);
  if (src) *src = st == RR_OK ? from : -1;
  return st;
}

static int rr__sendrecv(rr_pg *pg, const void *s, size_t sn, int dst, void *r, size_t rn, int src,
                        rr_dtype d, rr_work **w, int async) {
  rr__args a = {.kind = RR__K_SENDRECV,
                .sendbuf = s,
                .recvbuf = r,
                .count = sn,
                .recvcount = rn,
                .src = src,
                .dtype = d,
                .op = RR_SUM};
  return rr__submit(pg, &a, dst, w, async);
}
int rr_sendrecv(rr_pg *pg, const void *s, size_t sn, int dst, void *r, size_t rn, int src,
                rr_dtype d) {
  return rr__sendrecv(pg, s, sn, dst, r, rn, src, d, NULL, 0);
}
int rr_sendrecv_async(rr_pg *pg, const void *s, size_t sn, int dst, void *r, size_t rn, int src,
                      rr_dtype d, rr_work **w) {
  return rr__sendrecv(pg, s, sn, dst, r, rn, src, d, w, 1);
}
