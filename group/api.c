/* The public collectives: each checks everything a rank can know alone (dtype, op, ranks,
 * sizes, NULL and overlapping buffers) before anything is sent, then hands the call to the
 * group's queue (group/work.c). A bad argument fails here, on this rank, with RR_EINVAL. */
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"
#include "group/pg.h"
#include "ring/op.h"

static const char *rr__api_name(int kind) {
  switch (kind) {
    case RR__K_ALL_REDUCE: return "all_reduce";
    case RR__K_REDUCE_SCATTER: return "reduce_scatter";
    case RR__K_ALL_GATHER: return "all_gather";
    case RR__K_BROADCAST: return "broadcast";
    case RR__K_REDUCE: return "reduce";
    case RR__K_BARRIER: return "barrier";
    case RR__K_SEND: return "send";
    case RR__K_SENDRECV: return "sendrecv";
    default: return "recv";
  }
}

/* Do [a, a+na) and [b, b+nb) overlap? */
static int rr__overlap(const void *a, size_t na, const void *b, size_t nb) {
  if (!a || !b || !na || !nb) return 0;
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}

static int rr__rank_arg(rr_pg *pg, const char *what, int global, int *group) {
  int g = rr_get_group_rank(pg, global);
  if (g < 0) {
    if (pg->world == pg)
      return rr__set_error(RR_EINVAL, "%s %d is out of range 0..%d", what, global,
                           pg->size - 1);
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

/* *by_role is set when a failed check is one that only some ranks of a correct call make:
 * the root's buffers of a broadcast or reduce, the in-place offset of an all-gather or
 * reduce-scatter (which depends on the rank). */
static int rr__validate(rr_pg *pg, rr__args *a, int root_or_peer, int *by_role) {
  *by_role = 0;
  size_t es = rr_dtype_size(a->dtype);
  if ((int)a->dtype < 0 || a->dtype >= RR_NUM_DTYPES || es == 0)
    return rr__set_error(RR_EINVAL, "invalid dtype %d", (int)a->dtype);
  int reducing = a->kind == RR__K_ALL_REDUCE || a->kind == RR__K_REDUCE ||
                 a->kind == RR__K_REDUCE_SCATTER;
  if (reducing) RR__CHECK(rr__op_check(a->dtype, a->op));
  else a->op = RR_SUM;
  if (a->count > SIZE_MAX / es / (size_t)pg->size / 2)
    return rr__set_error(RR_EINVAL, "count %zu of %s overflows the addressable size", a->count,
                         rr_dtype_name(a->dtype));
  a->root = -1;
  a->peer = -1;
  if (a->kind == RR__K_BROADCAST || a->kind == RR__K_REDUCE)
    RR__CHECK(rr__rank_arg(pg, "root", root_or_peer, &a->root));
  if (a->kind == RR__K_SEND || a->kind == RR__K_RECV || a->kind == RR__K_SENDRECV) {
    RR__CHECK(rr__rank_arg(pg, a->kind == RR__K_SENDRECV ? "dst" : "peer", root_or_peer, &a->peer));
    if (a->peer == pg->rank)
      return rr__set_error(RR_EINVAL, "peer %d is this rank: sending to oneself is not supported",
                           root_or_peer);
  }
  if (a->kind == RR__K_SENDRECV) {
    int global_src = a->src;
    RR__CHECK(rr__rank_arg(pg, "src", global_src, &a->src));
    if (a->src == pg->rank)
      return rr__set_error(RR_EINVAL, "src %d is this rank: receiving from oneself is not supported",
                           global_src);
    if (a->recvcount > SIZE_MAX / es / 2)
      return rr__set_error(RR_EINVAL, "recvcount %zu overflows the addressable size", a->recvcount);
  }

  /* Sizes of what is read and written, in bytes. */
  size_t n = (size_t)pg->size, in = a->count * es, out = a->count * es;
  if (a->kind == RR__K_SENDRECV) out = a->recvcount * es;
  if (a->kind == RR__K_ALL_GATHER) out = in * n;
  if (a->kind == RR__K_REDUCE_SCATTER) in = out * n;
  int reads = a->kind != RR__K_RECV && a->kind != RR__K_BARRIER &&
              !(a->kind == RR__K_BROADCAST && a->root != pg->rank);
  int writes = a->kind != RR__K_SEND && a->kind != RR__K_BARRIER &&
               !(a->kind == RR__K_REDUCE && a->root != pg->rank);
  /* Only the root reads a broadcast's sendbuf and writes a reduce's recvbuf. */
  *by_role = a->kind == RR__K_BROADCAST || a->kind == RR__K_REDUCE;
  if (reads && in > 0 && !a->sendbuf)
    return rr__set_error(RR_EINVAL, "%s is NULL but %zu bytes are to be sent",
                         a->kind == RR__K_SEND ? "buf" : "sendbuf", in);
  if (writes && out > 0 && !a->recvbuf)
    return rr__set_error(RR_EINVAL, "%s is NULL but %zu bytes are to be received",
                         a->kind == RR__K_RECV ? "buf" : "recvbuf", out);
  if (reads && writes && in > 0) {
    /* In place means exactly NCCL's aliasing; any other overlap would corrupt data. */
    const char *s = a->sendbuf, *r = a->recvbuf;
    int in_place = s == r;
    /* The in-place offset of an all-gather or reduce-scatter depends on the rank. */
    if (a->kind == RR__K_ALL_GATHER || a->kind == RR__K_REDUCE_SCATTER) *by_role = 1;
    if (a->kind == RR__K_ALL_GATHER) in_place = s == r + (size_t)pg->rank * in;
    if (a->kind == RR__K_REDUCE_SCATTER) in_place = r == s + (size_t)pg->rank * out;
    if (a->kind == RR__K_SENDRECV) in_place = 0; /* receiving over what is being sent */
    if (!in_place && rr__overlap(s, in, r, out))
      return rr__set_error(RR_EINVAL,
                           "sendbuf and recvbuf overlap without being in place (in place is "
                           "%s)",
                           a->kind == RR__K_ALL_GATHER       ? "sendbuf == recvbuf + rank*count"
                           : a->kind == RR__K_REDUCE_SCATTER ? "recvbuf == sendbuf + rank*count"
                           : a->kind == RR__K_SENDRECV       ? "not possible for sendrecv"
                                                             : "sendbuf == recvbuf");
  }
  return RR_OK;
}

static int rr__call(rr_pg *pg, int kind, const void *sendbuf, void *recvbuf, size_t count,
                    rr_dtype dtype, rr_op op, int root_or_peer, rr_work **work, int async) {
  if (async && work) *work = NULL;
  if (!pg) return rr__set_error(RR_EINVAL, "%s: the process group is NULL", rr__api_name(kind));
  if (async && !work)
    return rr__set_error(RR_EINVAL, "rank %d: %s_async: work is NULL",
                         pg->global_ranks[pg->rank], rr__api_name(kind));
  rr__args a = {.kind = kind, .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                .dtype = dtype, .op = op, .stream = rr__cuda_pg_stream(pg)};
  int by_role = 0;
  int st = rr__validate(pg, &a, root_or_peer, &by_role);
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: %s", pg->global_ranks[pg->rank], rr__api_name(kind));
    /* The other ranks may pass all their checks and already wait in this call for ours: a
     * refusal that only this rank's role can earn aborts the group, so they fail in this
     * same call, naming this rank and the reason, instead of at the next call or never. */
    if (by_role) rr__comm_abort(pg->comm, st, rr__error(), 1);
    return st;
  }
  return rr__pg_submit(pg, &a, async ? work : NULL);
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

static int rr__sendrecv(rr_pg *pg, const void *s, size_t sn, int dst, void *r, size_t rn,
                        int src, rr_dtype d, rr_work **w, int async) {
  if (async && w) *w = NULL;
  if (!pg) return rr__set_error(RR_EINVAL, "sendrecv: the process group is NULL");
  if (async && !w)
    return rr__set_error(RR_EINVAL, "rank %d: sendrecv_async: work is NULL",
                         pg->global_ranks[pg->rank]);
  rr__args a = {.kind = RR__K_SENDRECV, .sendbuf = s, .recvbuf = r, .count = sn,
                .recvcount = rn, .src = src, .dtype = d, .op = RR_SUM,
                .stream = rr__cuda_pg_stream(pg)};
  int by_role; /* point to point has no roles: each side checks its own half */
  int st = rr__validate(pg, &a, dst, &by_role);
  if (st != RR_OK)
    return rr__prefix_error(st, "rank %d: sendrecv", pg->global_ranks[pg->rank]);
  return rr__pg_submit(pg, &a, async ? w : NULL);
}
int rr_sendrecv(rr_pg *pg, const void *s, size_t sn, int dst, void *r, size_t rn, int src,
                rr_dtype d) {
  return rr__sendrecv(pg, s, sn, dst, r, rn, src, d, NULL, 0);
}
int rr_sendrecv_async(rr_pg *pg, const void *s, size_t sn, int dst, void *r, size_t rn, int src,
                      rr_dtype d, rr_work **w) {
  return rr__sendrecv(pg, s, sn, dst, r, rn, src, d, w, 1);
}
