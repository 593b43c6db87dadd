/* Calls run one at a time, in the order they were issued. A blocking call on an idle group
 * runs on the caller's thread (no hand-off, lowest latency); otherwise calls go through a
 * FIFO served by the group's worker thread, which is what lets async calls overlap the
 * caller's compute. Work handles (rr_work_*) are the caller's view of a queued call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "group/pg.h"

static int64_t rr__call_timeout(rr_pg *pg) {
  int64_t t = atomic_load(&pg->timeout_override);
  return t > 0 ? t : pg->timeout_ms;
}

static void rr__work_unref(rr_work *w) {
  if (atomic_fetch_sub(&w->refs, 1) != 1) return;
  /* An async call's events are its work's: nothing uses them once the work is gone. */
  if (w->cuda_owned) rr__cuda_pg_release(&w->call);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->call.owned);
  free(w);
}

/* A queued call may run after its caller has returned and reused its arrays (an async
 * all_to_allv), so the work takes a copy of the per-rank counts and displacements and
 * frees it with itself. Calls that run at once read the caller's arrays. */
static int rr__work_own_counts(rr_work *w, int size) {
  rr__args *a = &w->call.a;
  if (a->kind != RR__K_ALL_TO_ALLV) return RR_OK;
  const size_t n = (size_t)size;
  size_t *p = rr__calloc(4 * n, sizeof *p);
  if (!p) return RR_ENOMEM;
  const size_t *from[4] = {a->sendcounts, a->sdispls, a->recvcounts, a->rdispls};
  for (int i = 0; i < 4; i++) memcpy(p + (size_t)i * n, from[i], n * sizeof *p);
  a->sendcounts = p;
  a->sdispls = p + n;
  a->recvcounts = p + 2 * n;
  a->rdispls = p + 3 * n;
  w->call.owned = p;
  return RR_OK;
}

static void rr__work_finish(rr_work *w, int status) {
  pthread_mutex_lock(&w->mu);
  w->status = status;
  if (status < 0) snprintf(w->error, sizeof w->error, "%s", rr__error());
  w->done = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

void *rr__pg_worker_main(void *arg) {
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
    int st = rr__pg_run(pg, &w->call, rr__call_timeout(pg));
    rr__work_finish(w, st);
    rr__work_unref(w); /* the queue's reference */

    pthread_mutex_lock(&pg->mu);
    pg->busy = 0;
    pthread_cond_broadcast(&pg->cv);
  }
  pthread_mutex_unlock(&pg->mu);
  return NULL;
}

static int rr__enqueue(rr_pg *pg, const rr__pg_call *call, rr_work **out, int async) {
  rr_work *w = rr__calloc(1, sizeof *w);
  if (!w) return RR_ENOMEM;
  w->pg = pg;
  w->call = *call;
  w->cuda_owned = async; /* a blocking call keeps its events (group/api.c) */
  w->call.owned = NULL;
  /* The caller's int may be gone when a queued call runs: the sender goes into the work,
   * and a blocking caller copies it out (rr__pg_submit). */
  w->source = -1;
  w->call.a.source = &w->source;
  if (rr__work_own_counts(w, pg->size) != RR_OK) {
    free(w);
    return RR_ENOMEM;
  }
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

int rr__pg_submit(rr_pg *pg, const rr__pg_call *call, rr_work **work) {
  if (work) return rr__enqueue(pg, call, work, 1);
  pthread_mutex_lock(&pg->mu);
  if (!pg->busy && !pg->qhead && !pg->stop) {
    pg->busy = 1;
    pthread_mutex_unlock(&pg->mu);
    rr__clear_error();
    pg->inline_call = 1;
    int st = rr__pg_run(pg, call, rr__call_timeout(pg));
    pg->inline_call = 0;
    char saved[RR__ERRMSG_MAX];
    if (st < 0) snprintf(saved, sizeof saved, "%s", rr__error());
    pthread_mutex_lock(&pg->mu);
    pg->busy = 0;
    /* Only queued work and a destroy wait for busy to clear; waking the idle worker on
     * every inline call would cost two context switches per call. */
    if (pg->qhead || pg->stop) pthread_cond_broadcast(&pg->cv);
    pthread_mutex_unlock(&pg->mu);
    if (st < 0) rr__copy_error(saved);
    return st;
  }
  pthread_mutex_unlock(&pg->mu);
  rr_work *w;
  RR__CHECK(rr__enqueue(pg, call, &w, 0));
  int st = rr_work_wait(w, 0);
  if (call->a.source) *call->a.source = w->source; /* the wait saw `done` under w->mu */
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
  int st = rr__pg_run(pg, &w->call, rr__call_timeout(pg));
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
               w->pg->global_ranks[w->pg->rank], rr__kind_name(w->call.a.kind),
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
  /* Device buffers: the caller's stream waits for the copy back (once), so its later work
   * sees the result without the host waiting for the copy. On the call's device, whatever
   * this thread's (group/device.c). */
  if (st == RR_OK && w->call.cuda_done && !w->cuda_waited) {
    w->cuda_waited = 1;
    st = rr__cuda_pg_finish(w->pg, &w->call, 0);
  }
  return st;
}

int rr_work_test(rr_work *w) {
  if (!w) return rr__set_error(RR_EINVAL, "rr_work_test: NULL work");
  pthread_mutex_lock(&w->mu);
  int st = w->done ? w->status : RR_INPROGRESS;
  if (st < 0) rr__copy_error(w->error);
  pthread_mutex_unlock(&w->mu);
  /* Device buffers: complete once the copy back is, so that a caller who saw completion
   * here (and may never call rr_work_wait) finds the result in the buffer. */
  if (st == RR_OK && w->call.cuda_done) {
    int d = rr__cuda_pg_done(&w->call); /* on the call's device, as every CUDA call for it */
    if (d == 0) return RR_INPROGRESS;
    if (d < 0) return d;
  }
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

int rr_work_source(const rr_work *w) {
  if (!w) return -1;
  rr_work *m = (rr_work *)w; /* the lock protects `done`; the source never changes after it */
  pthread_mutex_lock(&m->mu);
  int src = m->done && m->status == RR_OK && m->call.a.kind == RR__K_RECV ? m->source : -1;
  pthread_mutex_unlock(&m->mu);
  return src;
}

void rr_work_free(rr_work *w) {
  if (w) rr__work_unref(w);
}
