/* Process groups: creation (init_process_group, new_group), the in-order execution of
 * calls, work handles, and the checks every call's arguments pass before anything is sent.
 *
 * Calls on a group run one at a time, in the order they were issued. A blocking call on an
 * idle group runs on the caller's thread (no hand-off, lowest latency); otherwise calls go
 * through a FIFO served by the group's worker thread, which is what lets async calls
 * overlap the caller's compute. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/param.h"
#include "common/siphash.h"
#include "common/status.h"
#include "common/util.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/init_method.h"
#include "ring/op.h"
#include "group/pg.h"
#include "rendezvous/store.h"

void rr_pg_options_init(rr_pg_options *opt) {
  if (opt) *opt = (rr_pg_options)RR_PG_OPTIONS_INIT;
}

int rr_get_rank(const rr_pg *pg) { return pg ? pg->rank : -1; }
int rr_get_world_size(const rr_pg *pg) { return pg ? pg->size : -1; }

int rr_get_global_rank(const rr_pg *pg, int group_rank) {
  if (!pg || group_rank < 0 || group_rank >= pg->size) return -1;
  return pg->global_ranks[group_rank];
}

int rr_get_group_rank(const rr_pg *pg, int global_rank) {
  if (!pg) return -1;
  for (int i = 0; i < pg->size; i++)
    if (pg->global_ranks[i] == global_rank) return i;
  return -1;
}

int rr_pg_set_timeout(rr_pg *pg, int64_t timeout_ms) {
  if (!pg || timeout_ms <= 0)
    return rr__set_error(RR_EINVAL, "rr_pg_set_timeout: need a group and a timeout > 0 ms");
  atomic_store(&pg->timeout_override, timeout_ms);
  return RR_OK;
}

int rr_abort(rr_pg *pg) {
  if (!pg) return rr__set_error(RR_EINVAL, "rr_abort: NULL group");
  char reason[128];
  snprintf(reason, sizeof reason, "rank %d called rr_abort", pg->global_ranks[pg->rank]);
  rr__comm_abort(pg->comm, RR_EABORTED, reason, 1);
  return RR_OK;
}

static int64_t rr__call_timeout(rr_pg *pg) {
  int64_t t = atomic_load(&pg->timeout_override);
  return t > 0 ? t : pg->timeout_ms;
}

/* ---------------------------------------------------------------------------------------
 * Execution: FIFO + worker thread. */

static void rr__work_unref(rr_work *w) {
  if (atomic_fetch_sub(&w->refs, 1) != 1) return;
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
}

static void rr__work_finish(rr_work *w, int status) {
  pthread_mutex_lock(&w->mu);
  w->status = status;
  if (status < 0) snprintf(w->error, sizeof w->error, "%s", rr__error());
  w->done = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static void *rr__worker_main(void *arg) {
  rr_pg *pg = arg;
  pthread_mutex_lock(&pg->mu);
  for (;;) {
    while (!(pg->qhead && !pg->busy) && !(pg->stop && !pg->qhead))
      pthread_cond_wait(&pg->cv, &pg->mu);
    if (!pg->qhead) break; /* stopping, and nothing left to run */
    rr_work *w = pg->qhead;
    pg->qhead = w->next;
    if (!pg->qhead) pg->qtail = NULL;
    pg->busy = 1;
    pthread_mutex_unlock(&pg->mu);

    rr__clear_error();
    int st = rr__coll_run(pg, &w->args, rr__call_timeout(pg));
    rr__work_finish(w, st);
    rr__work_unref(w); /* the queue's reference */

    pthread_mutex_lock(&pg->mu);
    pg->busy = 0;
    pthread_cond_broadcast(&pg->cv);
  }
  pthread_mutex_unlock(&pg->mu);
  return NULL;
}

static int rr__enqueue(rr_pg *pg, const rr__args *a, rr_work **out) {
  rr_work *w = rr__calloc(1, sizeof *w);
  if (!w) return RR_ENOMEM;
  w->pg = pg;
  w->args = *a;
  atomic_init(&w->refs, 2);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&w->mu, NULL);
  pthread_mutex_lock(&pg->mu);
  if (pg->stop) {
    pthread_mutex_unlock(&pg->mu);
    rr__work_unref(w);
    rr__work_unref(w);
    return rr__set_error(RR_ESTATE, "the group is being destroyed");
  }
  if (pg->qtail)
    pg->qtail->next = w;
  else
    pg->qhead = w;
  pg->qtail = w;
  pthread_cond_broadcast(&pg->cv);
  pthread_mutex_unlock(&pg->mu);
  *out = w;
  return RR_OK;
}

static int rr__submit(rr_pg *pg, const rr__args *a, rr_work **work) {
  if (work) return rr__enqueue(pg, a, work);
  pthread_mutex_lock(&pg->mu);
  if (!pg->busy && !pg->qhead && !pg->stop) {
    pg->busy = 1;
    pthread_mutex_unlock(&pg->mu);
    rr__clear_error();
    pg->inline_call = 1;
    int st = rr__coll_run(pg, a, rr__call_timeout(pg));
    pg->inline_call = 0;
    char saved[RR__ERRMSG_MAX];
    if (st < 0) snprintf(saved, sizeof saved, "%s", rr__error());
    pthread_mutex_lock(&pg->mu);
    pg->busy = 0;
    /* Only queued work waits for busy to clear; waking the idle worker on every inline call
     * would cost two context switches per call. */
    if (pg->qhead) pthread_cond_broadcast(&pg->cv);
    pthread_mutex_unlock(&pg->mu);
    if (st < 0) rr__copy_error(saved);
    return st;
  }
  pthread_mutex_unlock(&pg->mu);
  rr_work *w;
  RR__CHECK(rr__enqueue(pg, a, &w));
  int st = rr_work_wait(w, 0);
  rr_work_free(w);
  return st;
}

/* The caller is about to block on a work that the worker has not started: run it on the
 * caller's thread instead. That saves the hand-off to the worker and back (two wake-ups,
 * ~80 us here, most of a small async all-reduce) and lets the call poll before sleeping, as
 * a blocking call does. Calls still run one at a time and in issue order: only the queue's
 * head is taken, and only while no call runs. */
static void rr__work_run_here(rr_work *w) {
  rr_pg *pg = w->pg;
  pthread_mutex_lock(&pg->mu);
  if (pg->qhead != w || pg->busy || pg->stop) {
    pthread_mutex_unlock(&pg->mu);
    return;
  }
  pg->qhead = w->next;
  if (!pg->qhead) pg->qtail = NULL;
  pg->busy = 1;
  pthread_mutex_unlock(&pg->mu);

  rr__clear_error();
  pg->inline_call = 1;
  int st = rr__coll_run(pg, &w->args, rr__call_timeout(pg));
  pg->inline_call = 0;
  rr__work_finish(w, st);
  rr__work_unref(w); /* the queue's reference */

  pthread_mutex_lock(&pg->mu);
  pg->busy = 0;
  if (pg->qhead || pg->stop) pthread_cond_broadcast(&pg->cv);
  pthread_mutex_unlock(&pg->mu);
}

int rr_work_wait(rr_work *w, int64_t timeout_ms) {
  if (!w) return rr__set_error(RR_EINVAL, "rr_work_wait: NULL work");
  /* A bounded wait must be able to give up at its own deadline, so only an unbounded one
   * runs the call itself. */
  if (timeout_ms <= 0) rr__work_run_here(w);
  int timed_out = 0;
  pthread_mutex_lock(&w->mu);
  if (timeout_ms > 0 && !w->done) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(timeout_ms / 1000);
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (!w->done)
      if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) == ETIMEDOUT) break;
    if (!w->done) {
      /* A collective cannot stop half-way and resume: give up on the group. */
      timed_out = 1;
      pthread_mutex_unlock(&w->mu);
      char reason[256];
      snprintf(reason, sizeof reason, "rank %d: rr_work_wait gave up on %s after %lld ms",
               w->pg->global_ranks[w->pg->rank], rr__kind_name(w->args.kind == RR__K_RECV
                                                                  ? RR__K_SEND
                                                                  : w->args.kind),
               (long long)timeout_ms);
      rr__comm_abort(w->pg->comm, RR_ETIMEDOUT, reason, 1);
      pthread_mutex_lock(&w->mu);
    }
  }
  while (!w->done) pthread_cond_wait(&w->cv, &w->mu);
  int st = w->status;
  if (st < 0) rr__copy_error(w->error);
  pthread_mutex_unlock(&w->mu);
  if (timed_out && st < 0) st = RR_ETIMEDOUT;
  return st;
}

int rr_work_test(rr_work *w) {
  if (!w) return rr__set_error(RR_EINVAL, "rr_work_test: NULL work");
  pthread_mutex_lock(&w->mu);
  int st = w->done ? w->status : RR_INPROGRESS;
  if (st < 0) rr__copy_error(w->error);
  pthread_mutex_unlock(&w->mu);
  return st;
}

const char *rr_work_error(const rr_work *w) {
  if (!w) return "";
  rr_work *m = (rr_work *)w; /* the lock protects `done`; the text never changes after it */
  pthread_mutex_lock(&m->mu);
  const char *e = m->done ? m->error : "";
  pthread_mutex_unlock(&m->mu);
  return e;
}

void rr_work_free(rr_work *w) {
  if (w) rr__work_unref(w);
}

/* ---------------------------------------------------------------------------------------
 * Argument checks: everything a rank can know alone is checked before anything is sent. */

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

static int rr__validate(rr_pg *pg, rr__args *a, int root_or_peer) {
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
  int st = rr__validate(pg, &a, root_or_peer);
  if (st != RR_OK)
    return rr__prefix_error(st, "rank %d: %s", pg->global_ranks[pg->rank], rr__api_name(kind));
  return rr__submit(pg, &a, async ? work : NULL);
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
  int st = rr__validate(pg, &a, dst);
  if (st != RR_OK)
    return rr__prefix_error(st, "rank %d: sendrecv", pg->global_ranks[pg->rank]);
  return rr__submit(pg, &a, async ? w : NULL);
}
int rr_sendrecv(rr_pg *pg, const void *s, size_t sn, int dst, void *r, size_t rn, int src,
                rr_dtype d) {
  return rr__sendrecv(pg, s, sn, dst, r, rn, src, d, NULL, 0);
}
int rr_sendrecv_async(rr_pg *pg, const void *s, size_t sn, int dst, void *r, size_t rn, int src,
                      rr_dtype d, rr_work **w) {
  return rr__sendrecv(pg, s, sn, dst, r, rn, src, d, w, 1);
}

/* ---------------------------------------------------------------------------------------
 * Creating and destroying groups. */

static void rr__pg_free(rr_pg *pg) {
  if (!pg) return;
  if (pg->comm) rr__comm_free(pg->comm);
  rr__cuda_pg_free(pg);
  pthread_mutex_destroy(&pg->mu);
  pthread_cond_destroy(&pg->cv);
  free(pg->global_ranks);
  free(pg->p2p_sent);
  free(pg->p2p_recvd);
  free(pg->staging);
  free(pg->scratch);
  free(pg);
}

static int rr__pg_new(int size, rr_pg **out) {
  const rr__params *prm = rr__params_get();
  rr_pg *pg = rr__calloc(1, sizeof *pg);
  if (!pg) return RR_ENOMEM;
  pthread_mutex_init(&pg->mu, NULL);
  pthread_cond_init(&pg->cv, NULL);
  pg->size = size;
  pg->device = -1;
  pg->global_ranks = rr__calloc((size_t)size, sizeof *pg->global_ranks);
  pg->p2p_sent = rr__calloc((size_t)size, sizeof *pg->p2p_sent);
  pg->p2p_recvd = rr__calloc((size_t)size, sizeof *pg->p2p_recvd);
  pg->seg_bytes = (size_t)prm->seg_bytes;
  pg->nslots = (int)prm->slots;
  /* Page-aligned staging: receive slots for reductions, reused by every call. */
  if (posix_memalign((void **)&pg->staging, 4096, pg->seg_bytes * (size_t)pg->nslots) != 0)
    pg->staging = NULL;
  if (!pg->global_ranks || !pg->p2p_sent || !pg->p2p_recvd || !pg->staging) {
    rr__pg_free(pg);
    return rr__set_error(RR_ENOMEM, "out of memory creating a group of %d", size);
  }
  *out = pg;
  return RR_OK;
}

/* Connect the group and start its worker. */
static int rr__pg_start(rr_pg *pg, int64_t deadline_ms) {
  rr__boot b = {.store = pg->store, .group_id = pg->id, .rank = pg->rank, .size = pg->size,
                .global_ranks = pg->global_ranks, .hint = pg->have_hint ? &pg->hint : NULL,
                .deadline_ms = deadline_ms, .timeout_ms = pg->timeout_ms,
                .token_key = pg->have_token ? pg->token_key : NULL};
  RR__CHECK(rr__bootstrap(&b, &pg->comm));
  int e = pthread_create(&pg->worker, NULL, rr__worker_main, pg);
  if (e != 0) return rr__set_error(RR_ESYS, "pthread_create: %s", strerror(e));
  pg->worker_started = 1;
  return RR_OK;
}

/* Catch launch mistakes that would otherwise look like hangs: two processes claiming one
 * rank, or ranks that disagree on the world size. */
static int rr__check_world(rr_pg *pg, const rr__init_info *in) {
  char key[64];
  int64_t claims = 0;
  snprintf(key, sizeof key, "rr/w/claim/%d", in->rank);
  RR__CHECK(rr_store_add(pg->store, key, 1, &claims));
  if (claims > 1)
    return rr__set_error(RR_EINVAL,
                         "rank %d was claimed by %lld processes (two processes with the same "
                         "RANK, or a stale rendezvous file from an earlier run)",
                         in->rank, (long long)claims);
  char ws[32];
  int len = snprintf(ws, sizeof ws, "%d", in->world_size);
  if (in->rank == 0) return rr_store_set(pg->store, "rr/w/world_size", ws, (size_t)len);
  void *v = NULL;
  size_t vl = 0;
  int st = rr_store_get(pg->store, "rr/w/world_size", &v, &vl);
  if (st == RR_ETIMEDOUT)
    return rr__set_error(RR_ETIMEDOUT, "rank 0 never reached the rendezvous");
  RR__CHECK(st);
  int same = vl == (size_t)len && memcmp(v, ws, vl) == 0;
  char theirs[32];
  snprintf(theirs, sizeof theirs, "%.*s", (int)RR__MIN(vl, 31), (const char *)v);
  free(v);
  if (!same)
    return rr__set_error(RR_EINVAL, "this rank has world size %d but rank 0 has %s",
                         in->world_size, theirs);
  return RR_OK;
}

int rr_init_process_group(rr_pg **out, const rr_pg_options *opt) {
  if (!out) return rr__set_error(RR_EINVAL, "init_process_group: pg is NULL");
  *out = NULL;
  RR__CHECK(rr__params_check());
  rr__init_info in;
  int st = rr__init_parse(opt, &in);
  if (st != RR_OK) return rr__prefix_error(st, "init_process_group");
  rr__log_set_rank(in.rank);
  int64_t timeout = opt && opt->timeout_ms > 0
                        ? opt->timeout_ms
                        : (int64_t)(rr__params_get()->timeout_s * 1000.0);
  int64_t deadline = rr__deadline(timeout);

  rr_pg *pg = NULL;
  RR__CHECK_GOTO(rr__pg_new(in.world_size, &pg), st, fail);
  pg->world = pg;
  pg->rank = in.rank;
  pg->timeout_ms = timeout;
  pg->local_rank = in.local_rank;
  pg->local_size = in.local_world_size;
  pg->device = opt ? opt->device : -1;
  snprintf(pg->id, sizeof pg->id, "w");
  for (int i = 0; i < in.world_size; i++) pg->global_ranks[i] = i;

  /* The interface is a local choice: check it before the rendezvous, so a bad
   * RR_SOCKET_IFNAME fails here with its own message instead of as store trouble elsewhere. */
  {
    rr__addr probe, hint;
    int have = in.kind != RR__INIT_FILE && rr__addr_resolve(in.host, in.port, &hint) == RR_OK;
    RR__CHECK_GOTO(rr__if_select(rr__params_get()->socket_ifname, have ? &hint : NULL, &probe,
                                NULL, 0),
                  st, fail);
  }
  /* The job token: only a proof derived from it crosses the wire (store and greetings). */
  const char *token = rr__params_get()->job_token;
  char proof[32] = "";
  if (token[0]) {
    rr__token_key(token, pg->token_key);
    pg->have_token = 1;
    snprintf(proof, sizeof proof, "%016llx",
             (unsigned long long)rr__siphash(pg->token_key, "rr-store-v1", 11));
  }
  if (in.kind == RR__INIT_FILE) {
    st = rr_store_file(in.path, timeout, &pg->store);
  } else {
    st = rr__addr_resolve(in.host, in.port, &pg->hint);
    if (st == RR_OK) {
      pg->have_hint = 1;
      st = rr__store_tcp_open(in.host, in.port, in.rank == 0, timeout, proof[0] ? proof : NULL,
                              &pg->store);
    }
  }
  if (st != RR_OK) {
    rr__prefix_error(st, "rendezvous store");
    goto fail;
  }
  RR__CHECK_GOTO(rr__check_world(pg, &in), st, fail);
  RR__CHECK_GOTO(rr__pg_start(pg, deadline), st, fail);
  RR__LOG_INFO(RR__SUB_INIT, "rank %d of %d ready (rank and size from %s)", in.rank, in.world_size,
          in.source);
  *out = pg;
  return RR_OK;
fail:
  rr__prefix_error(st, "rank %d: init_process_group", in.rank);
  if (pg) {
    rr_store_free(pg->store);
    rr__pg_free(pg);
  }
  return st;
}

static int rr__cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int rr_new_group(rr_pg *parent, const int *ranks, int nranks, int64_t timeout_ms,
                 rr_pg **group) {
  if (group) *group = NULL;
  if (!parent || !group || !ranks || nranks < 1)
    return rr__set_error(RR_EINVAL, "new_group: need a parent group, a rank list and an output");
  int me = parent->global_ranks[parent->rank];
  if (nranks > parent->size)
    return rr__set_error(RR_EINVAL, "rank %d: new_group: %d ranks listed, the parent has %d", me,
                         nranks, parent->size);
  int *sorted = rr__calloc((size_t)nranks, sizeof *sorted);
  if (!sorted) return RR_ENOMEM;
  memcpy(sorted, ranks, (size_t)nranks * sizeof *sorted);
  qsort(sorted, (size_t)nranks, sizeof *sorted, rr__cmp_int);
  int st = RR_OK, my_index = -1;
  for (int i = 0; i < nranks && st == RR_OK; i++) {
    if (i > 0 && sorted[i] == sorted[i - 1])
      st = rr__set_error(RR_EINVAL, "rank %d: new_group: rank %d is listed twice", me, sorted[i]);
    else if (rr_get_group_rank(parent, sorted[i]) < 0)
      st = rr__set_error(RR_EINVAL, "rank %d: new_group: rank %d is not in the parent group", me,
                         sorted[i]);
    if (sorted[i] == me) my_index = i;
  }
  /* Every rank of the parent takes the next child number, members or not, so that ids agree. */
  int child = parent->next_child++;
  if (st != RR_OK) { /* the same list gives the same verdict on every rank: no barrier */
    free(sorted);
    return st;
  }
  if (my_index < 0) {
    /* Like torch's new_group, a barrier over the parent: a non-member (rank 0 with the store
     * above all) must not leave and take the store with it while members still set up. */
    free(sorted);
    st = rr_barrier(parent);
    return st == RR_OK ? st : rr__prefix_error(st, "rank %d: new_group", me);
  }
  rr_pg *pg = NULL;
  st = rr__pg_new(nranks, &pg);
  if (st != RR_OK) {
    free(sorted);
    return st;
  }
  memcpy(pg->global_ranks, sorted, (size_t)nranks * sizeof *sorted);
  free(sorted);
  pg->world = parent->world;
  pg->parent = parent;
  pg->rank = my_index;
  pg->timeout_ms = timeout_ms > 0 ? timeout_ms : parent->timeout_ms;
  pg->store = parent->world->store;
  pg->hint = parent->world->hint;
  pg->have_hint = parent->world->have_hint;
  pg->local_rank = parent->local_rank;
  pg->local_size = parent->local_size;
  pg->device = parent->device;
  pg->have_token = parent->world->have_token;
  memcpy(pg->token_key, parent->world->token_key, sizeof pg->token_key);
  if (snprintf(pg->id, sizeof pg->id, "%s.%d", parent->id, child) >= (int)sizeof pg->id) {
    rr__pg_free(pg);
    return rr__set_error(RR_EINVAL, "rank %d: new_group: groups nested too deeply", me);
  }
  st = rr__pg_start(pg, rr__deadline(pg->timeout_ms));
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: new_group %s", me, pg->id);
    rr__pg_free(pg);
    return st; /* the non-members' barrier then fails on the parent's deadline or abort */
  }
  atomic_fetch_add(&parent->nchildren, 1);
  *group = pg;
  st = rr_barrier(parent);
  return st == RR_OK ? st : rr__prefix_error(st, "rank %d: new_group", me);
}

int rr_destroy_process_group(rr_pg *pg) {
  if (!pg) return rr__set_error(RR_EINVAL, "destroy_process_group: NULL group");
  int me = pg->global_ranks[pg->rank];
  int kids = atomic_load(&pg->nchildren);
  if (kids > 0)
    return rr__set_error(RR_ESTATE, "rank %d: destroy_process_group: destroy its %d subgroup(s) first",
                         me, kids);
  if (pg->worker_started) {
    pthread_mutex_lock(&pg->mu);
    pg->stop = 1;
    pthread_cond_broadcast(&pg->cv);
    pthread_mutex_unlock(&pg->mu);
    pthread_join(pg->worker, NULL);
  }
  int st = RR_OK;
  if (pg->comm && atomic_load(&pg->comm->aborted)) {
    st = rr__comm_check(pg->comm);
    rr__prefix_error(st, "rank %d: the group had failed", me);
  }
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error());
  if (pg->parent) atomic_fetch_sub(&pg->parent->nchildren, 1);
  if (pg->world == pg) rr_store_free(pg->store);
  rr__pg_free(pg);
  if (st != RR_OK) rr__copy_error(saved);
  return st;
}
