/* Fault injection under load: a rank is killed (SIGKILL) or frozen (SIGSTOP) at a random
 * moment while every rank runs verified collectives in a loop, and what each survivor sees
 * is checked against the contract of rr_all_reduce & co.:
 *
 *   kill    every survivor's failing call returns RR_EPEER with a message naming the dead
 *           rank (and never blaming a survivor as lost), within KILL_BOUND_S of the kill
 *           (the deadline is RR_TIMEOUT = 30 s: far below it); destroy afterwards is quick
 *           and returns the group's error; no survivor crashes (exit status 0, no signal);
 *           every call that returned RR_OK before the kill produced the exact expected
 *           data (integers exact, floats within harness.h's tolerance).
 *   stop    with a 3 s group timeout, every survivor fails with RR_ETIMEDOUT, a message
 *           that gives the position in the algorithm ("reduce-scatter step 2/3", "segment",
 *           "barrier round", "broadcast chain ...", "checking the call against rank 2" for
 *           the header exchange) and a waited-for rank, within the
 *           timeout + STOP_SLACK_S of the freeze.
 *
 *   test_stress kill <trials> [first]   random trials (world 2..8, collective, victim,
 *                                       moment, size, dtype, lanes), seed $RR_TEST_SEED
 *   test_stress sample                  10 kill trials covering every collective and
 *                                       ring position class, for CI (< 30 s)
 *   test_stress stop <trials>           SIGSTOP trials
 *   test_stress cause                   the cause of a failure wins over a peer's goodbye
 *
 * Each trial prints one line; a failing trial prints its parameters and every survivor's
 * status and message, and replays with RR_TEST_SEED and [first]. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/harness.h"

#define KILL_BOUND_S 5.0    /* survivors must report a kill this fast (deadline: 30 s) */
#define DESTROY_BOUND_S 2.0 /* destroy after a failure */
#define STOP_TIMEOUT_MS 3000
#define STOP_SLACK_S 2.0
#define MAXW 8

enum {
  C_ALL_REDUCE,
  C_BROADCAST,
  C_BARRIER,
  C_REDUCE_SCATTER,
  C_ALL_GATHER,
  C_SENDRECV,
  C_REDUCE,
  C_ASYNC,
  C_NCOLL
};
static const char *coll_names[C_NCOLL] = {"all_reduce", "broadcast", "barrier", "reduce_scatter",
                                          "all_gather", "sendrecv",  "reduce",  "all_reduce_async"};

typedef struct trial {
  int world, coll, victim, nsocks;
  size_t count;
  rr_dtype dtype;
  double delay_s; /* after every rank has completed a verified call */
  int stop;       /* SIGSTOP instead of SIGKILL */
  uint64_t seed;
} trial;

typedef struct slot {
  atomic_int ready; /* completed at least one verified call */
  atomic_int done;  /* finished: status and message are filled in */
  atomic_long calls;
  int status, destroy_status;
  long wrong; /* wrong elements in calls that returned RR_OK */
  double t_err, t_call, destroy_s;
  char msg[1024];
} slot;

typedef struct shared {
  double t_fault;
  slot s[MAXW];
} shared;

static shared *g_sh;
static char g_async_msg[1024]; /* the error of a failed async call */

/* ---- one verified call ---- */
typedef struct bufs {
  void *a, *b;
} bufs;

static long verify_call(const trial *t, int rank, long it, const bufs *B) {
  int W = t->world;
  size_t n = t->count, es = rr_dtype_size(t->dtype);
  uint64_t seed = t_bits(t->seed, 77, (uint64_t)it);
  rr_dtype d = t->dtype;
  int root = (int)(it % W), left = (rank + W - 1) % W;
  switch (t->coll) {
    case C_ALL_REDUCE:
    case C_ASYNC:
      return (long)t_check_reduced(B->a, n, d, RR_SUM, seed, W, 0, coll_names[t->coll]);
    case C_REDUCE:
      return rank == root ? (long)t_check_reduced(B->b, n, d, RR_SUM, seed, W, 0, "reduce") : 0;
    case C_BROADCAST:
      return (long)t_check_copied(B->a, n, d, RR_SUM, seed, root, 0, "broadcast");
    case C_REDUCE_SCATTER:
      return (long)t_check_reduced(B->b, n, d, RR_SUM, seed, W, (size_t)rank * n, "reduce_scatter");
    case C_ALL_GATHER: {
      long bad = 0;
      for (int r = 0; r < W; r++)
        bad += (long)t_check_copied((char *)B->b + (size_t)r * n * es, n, d, RR_SUM, seed, r, 0,
                                    "all_gather");
      return bad;
    }
    case C_SENDRECV:
      return (long)t_check_copied(B->b, n, d, RR_SUM, seed, left, 0, "sendrecv");
    default:
      return 0;
  }
}

static int one_call(rr_pg *pg, const trial *t, int rank, long it, const bufs *B) {
  int W = t->world;
  size_t n = t->count;
  uint64_t seed = t_bits(t->seed, 77, (uint64_t)it);
  rr_dtype d = t->dtype;
  int root = (int)(it % W);
  switch (t->coll) {
    case C_ALL_REDUCE:
      t_fill(B->a, n, d, RR_SUM, seed, rank, 0);
      return rr_all_reduce(pg, B->a, B->a, n, d, RR_SUM);
    case C_REDUCE:
      t_fill(B->a, n, d, RR_SUM, seed, rank, 0);
      return rr_reduce(pg, B->a, B->b, n, d, RR_SUM, root);
    case C_BROADCAST:
      if (rank == root)
        t_fill(B->a, n, d, RR_SUM, seed, rank, 0);
      else
        memset(B->a, 0, n * rr_dtype_size(d));
      return rr_broadcast(pg, B->a, B->a, n, d, root);
    case C_BARRIER:
      return rr_barrier(pg);
    case C_REDUCE_SCATTER:
      t_fill(B->a, n * (size_t)W, d, RR_SUM, seed, rank, 0);
      return rr_reduce_scatter(pg, B->a, B->b, n, d, RR_SUM);
    case C_ALL_GATHER:
      t_fill(B->a, n, d, RR_SUM, seed, rank, 0);
      return rr_all_gather(pg, B->a, B->b, n, d);
    case C_SENDRECV:
      t_fill(B->a, n, d, RR_SUM, seed, rank, 0);
      return rr_sendrecv(pg, B->a, n, (rank + 1) % W, B->b, n, (rank + W - 1) % W, d);
    case C_ASYNC: {
      /* Two calls queued on the group's worker; the kill may land while one waits. */
      rr_work *w1, *w2;
      t_fill(B->a, n, d, RR_SUM, seed, rank, 0);
      memset(B->b, 0, n * rr_dtype_size(d));
      int st = rr_all_reduce_async(pg, B->a, B->a, n, d, RR_SUM, &w1);
      if (st != RR_OK) return st;
      st = rr_barrier_async(pg, &w2);
      if (st != RR_OK) {
        rr_work_free(w1);
        return st;
      }
      int s1 = rr_work_wait(w1, 0), s2 = rr_work_wait(w2, 0);
      /* Report the first failing call's own words (the barrier only says "unusable"). */
      snprintf(g_async_msg, sizeof g_async_msg, "%s", rr_work_error(s1 != RR_OK ? w1 : w2));
      rr_work_free(w1);
      rr_work_free(w2);
      return s1 != RR_OK ? s1 : s2;
    }
  }
  return RR_EINVAL;
}

static int rank_main(int rank, void *arg) {
  const trial *t = arg;
  slot *me = &g_sh->s[rank];
  char v[16];
  snprintf(v, sizeof v, "%d", t->nsocks);
  setenv("RR_NSOCKS", v, 1);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  if (t->stop) T_OK(rr_pg_set_timeout(pg, STOP_TIMEOUT_MS));
  size_t es = rr_dtype_size(t->dtype), big = t->count * (size_t)t->world * es + 64;
  bufs B = {calloc(1, big), calloc(1, big)};
  T_CHECK(B.a && B.b, "out of memory");
  int st = RR_OK;
  for (long it = 0;; it++) {
    me->t_call = t_now();
    st = one_call(pg, t, rank, it, &B);
    if (st != RR_OK) break;
    long bad = verify_call(t, rank, it, &B);
    if (bad) {
      me->wrong += bad;
      snprintf(me->msg, sizeof me->msg, "call %ld returned RR_OK with %ld wrong elements", it, bad);
      break;
    }
    atomic_store(&me->calls, it + 1);
    atomic_store(&me->ready, 1);
  }
  me->t_err = t_now();
  me->status = st;
  if (!me->wrong)
    snprintf(me->msg, sizeof me->msg, "%s", t->coll == C_ASYNC ? g_async_msg : rr_last_error());
  double t0 = t_now();
  me->destroy_status = rr_destroy_process_group(pg);
  me->destroy_s = t_now() - t0;
  free(B.a);
  free(B.b);
  atomic_store(&me->done, 1);
  return me->wrong ? 3 : 0;
}

/* The parent's side: wait until the job is under way, then strike. */
static void strike(const int *pids, int n, void *arg) {
  trial *t = arg;
  double give_up = t_now() + 60;
  for (;;) {
    int ready = 0;
    for (int r = 0; r < n; r++) ready += atomic_load(&g_sh->s[r].ready);
    if (ready == n || t_now() > give_up) break;
    /* A rank that failed before it was ready: strike anyway, the checks will say. */
    int done = 0;
    for (int r = 0; r < n; r++) done += atomic_load(&g_sh->s[r].done);
    if (done) break;
    usleep(1000);
  }
  usleep((useconds_t)(t->delay_s * 1e6));
  kill(pids[t->victim], t->stop ? SIGSTOP : SIGKILL);
  g_sh->t_fault = t_now();
  if (!t->stop) return;
  /* Frozen: wait for every survivor to report, then put the victim down. */
  give_up = t_now() + STOP_TIMEOUT_MS / 1000.0 + 30;
  for (;;) {
    int done = 0;
    for (int r = 0; r < n; r++) done += r != t->victim && atomic_load(&g_sh->s[r].done);
    if (done == n - 1 || t_now() > give_up) break;
    usleep(2000);
  }
  kill(pids[t->victim], SIGKILL);
}

static int has(const char *s, const char *sub) {
  return strstr(s, sub) != NULL;
}

/* The reasons a trial failed, one line each. */
typedef struct verdict {
  int bad;
  char text[4096];
  size_t len;
} verdict;

static void why(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void why(verdict *v, const char *fmt, ...) {
  v->bad = 1;
  if (v->len >= sizeof v->text - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(v->text + v->len, sizeof v->text - v->len, fmt, ap);
  va_end(ap);
  if (n > 0) v->len = v->len + (size_t)n < sizeof v->text ? v->len + (size_t)n : sizeof v->text - 1;
}

/* Run one trial; 0 when every check passed. *worst gets the slowest survivor's report time. */
static int run_trial(int idx, trial *t, double *worst) {
  memset(g_sh, 0, sizeof *g_sh);
  int codes[MAXW], sigs[MAXW];
  double t0 = t_now();
  int rc = t_run(t->world, rank_main, t, strike, 90, codes, sigs);
  double wall = t_now() - t0;
  verdict v = {0};
  if (rc != 0) why(&v, "  ranks still running after 90 s: a hang\n");
  if (sigs[t->victim] != SIGKILL)
    why(&v, "  victim rank %d: exit %d signal %d (not killed)\n", t->victim, codes[t->victim],
        sigs[t->victim]);
  double slowest = 0;
  long calls = 0;
  for (int r = 0; r < t->world; r++) {
    if (r == t->victim) continue;
    slot *s = &g_sh->s[r];
    double lat = s->t_err - g_sh->t_fault;
    calls += atomic_load(&s->calls);
    if (lat > slowest) slowest = lat;
    if (codes[r] != 0 || sigs[r] != 0)
      why(&v, "  rank %d: exit %d signal %d\n", r, codes[r], sigs[r]);
    if (!atomic_load(&s->done)) {
      why(&v, "  rank %d never finished\n", r);
      continue;
    }
    if (s->wrong) why(&v, "  rank %d: WRONG DATA: %s\n", r, s->msg);
    if (!atomic_load(&s->ready)) why(&v, "  rank %d failed before its first verified call\n", r);
    if (lat < -0.01) why(&v, "  rank %d failed %.3f s before the fault\n", r, -lat);
    char victim[32];
    snprintf(victim, sizeof victim, "rank %d", t->victim);
    if (!t->stop) {
      if (s->status != RR_EPEER)
        why(&v, "  rank %d: status %s, want RR_EPEER\n", r, rr_status_name(s->status));
      if (!has(s->msg, victim)) why(&v, "  rank %d: message does not name %s\n", r, victim);
      if (!has(s->msg, "lost rank") && !has(s->msg, "closed") && !has(s->msg, "reset"))
        why(&v, "  rank %d: message does not say a peer is gone\n", r);
      for (int q = 0; q < t->world; q++) {
        char wrongly[32];
        snprintf(wrongly, sizeof wrongly, "lost rank %d:", q);
        if (q != t->victim && has(s->msg, wrongly))
          why(&v, "  rank %d: blames survivor %d\n", r, q);
      }
      if (lat > KILL_BOUND_S)
        why(&v, "  rank %d: reported %.2f s after the kill (bound %.1f s)\n", r, lat, KILL_BOUND_S);
    } else {
      double bound = STOP_TIMEOUT_MS / 1000.0 + STOP_SLACK_S;
      if (s->status != RR_ETIMEDOUT)
        why(&v, "  rank %d: status %s, want RR_ETIMEDOUT\n", r, rr_status_name(s->status));
      if (!has(s->msg, "timed out after 3.0 s waiting"))
        why(&v, "  rank %d: not a timeout message\n", r);
      if (!has(s->msg, "from rank") && !has(s->msg, "waiting for rank"))
        why(&v, "  rank %d: message does not name the rank waited for\n", r);
      if (!has(s->msg, "step ") && !has(s->msg, "segment") && !has(s->msg, "round") &&
          !has(s->msg, "chain") && !has(s->msg, "exchanging") &&
          !has(s->msg, "completion notice") && !has(s->msg, "checking the call against") &&
          !has(s->msg, "recursive doubling"))
        why(&v, "  rank %d: message gives no position in the algorithm\n", r);
      if (lat > bound)
        why(&v, "  rank %d: reported %.2f s after the freeze (bound %.1f s)\n", r, lat, bound);
    }
    if (s->destroy_s > DESTROY_BOUND_S)
      why(&v, "  rank %d: destroy took %.2f s\n", r, s->destroy_s);
    if (s->destroy_status == RR_OK)
      why(&v, "  rank %d: destroy returned RR_OK after a failure\n", r);
  }
  printf(
      "trial %3d: %-7s world %d, %-16s %7zu x %-6s nsocks %d, rank %d after %.0f ms: "
      "%ld verified calls, survivors reported within %.3f s (%.1f s wall)%s\n",
      idx, t->stop ? "SIGSTOP" : "SIGKILL", t->world, coll_names[t->coll], t->count,
      rr_dtype_name(t->dtype), t->nsocks, t->victim, t->delay_s * 1000, calls, slowest, wall,
      v.bad ? "  FAILED" : "");
  if (v.bad) {
    printf("%s", v.text);
    for (int r = 0; r < t->world; r++)
      if (r != t->victim)
        printf("    rank %d: %s: %s\n", r, rr_status_name(g_sh->s[r].status), g_sh->s[r].msg);
  }
  fflush(stdout);
  if (slowest > *worst) *worst = slowest;
  return v.bad;
}

static const size_t counts[] = {1, 1000, 70000, 1 << 20};
static const rr_dtype dtypes[] = {RR_INT32, RR_FLOAT32, RR_INT64, RR_BFLOAT16};

static void make_trial(trial *t, int i, int sample, int stop) {
  uint64_t s = t_seed();
  memset(t, 0, sizeof *t);
  t->seed = t_bits(s, 1, (uint64_t)i);
  if (sample) {
    /* Every collective, worlds 2..8, the victim at the start, middle and end of the ring. */
    static const int colls[10] = {C_ALL_REDUCE, C_BROADCAST, C_BARRIER, C_REDUCE_SCATTER,
                                  C_ALL_GATHER, C_SENDRECV,  C_REDUCE,  C_ASYNC,
                                  C_ALL_REDUCE, C_BROADCAST};
    static const int worlds[10] = {4, 3, 5, 2, 6, 4, 3, 4, 8, 7};
    t->coll = colls[i % 10];
    t->world = worlds[i % 10];
    t->victim = (i % 3 == 0) ? 0 : (i % 3 == 1) ? t->world - 1 : t->world / 2;
    t->count = t->coll == C_BARRIER ? 0 : counts[(i + 1) % 4 == 0 ? 2 : 1 + i % 3];
    if (t->count > 70000 && t->world > 5) t->count = 70000;
  } else {
    t->coll = (int)(t_bits(s, 2, (uint64_t)i) % C_NCOLL);
    t->world = 2 + (int)(t_bits(s, 3, (uint64_t)i) % 7);
    t->victim = (int)(t_bits(s, 4, (uint64_t)i) % (uint64_t)t->world);
    t->count = t->coll == C_BARRIER ? 0 : counts[t_bits(s, 5, (uint64_t)i) % 4];
  }
  /* Keep each rank's buffers and verification modest: at most 2^21 elements per call. */
  if (t->count * (size_t)t->world > ((size_t)1 << 21))
    t->count = ((size_t)1 << 21) / (size_t)t->world;
  t->dtype = dtypes[t_bits(s, 6, (uint64_t)i) % 4];
  t->nsocks = 1 + (int)(t_bits(s, 7, (uint64_t)i) % 2);
  t->delay_s = (double)(t_bits(s, 8, (uint64_t)i) % 300) / 1000.0;
  t->stop = stop;
  if (stop && t->coll == C_SENDRECV) t->coll = C_ALL_REDUCE; /* p2p has no ring position */
}

/* ---- which cause wins: an ABORT already queued from a third rank, or a peer's goodbye ----
 * Four ranks in an all-reduce that rank 2 never joins. Rank 1 is frozen (SIGSTOP) while it
 * waits for data from rank 0; rank 3 calls rr_abort; rank 0 receives the ABORT, destroys its
 * group and exits (goodbye + close). Rank 1 then resumes and finds, all at once, rank 0's
 * data connection closed, rank 0's goodbye, and rank 3's ABORT on its control socket. The
 * group failed because rank 3 aborted it, so rank 1 must say so (RR_EABORTED, "rank 3 called
 * rr_abort"), like every other rank, not blame rank 0 for leaving. Deterministic. */
static int cause_rank(int rank, void *arg) {
  (void)arg;
  slot *me = &g_sh->s[rank];
  setenv("RR_ALGO", "ring", 1);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  size_t n = 1 << 16;
  float *x = calloc(n, sizeof *x);
  T_CHECK(x != NULL, "out of memory");
  T_OK(rr_all_reduce(pg, x, x, n, RR_FLOAT32, RR_SUM)); /* every connection is up */
  t_aborter ab;
  if (rank == 3) T_CHECK(t_abort_after(&ab, pg, 1000) == 0, "pthread_create");
  atomic_store(&me->ready, 1);
  if (rank == 2) {
    sleep(4); /* never makes the second call */
    me->status = RR_OK;
  } else {
    me->status = rr_all_reduce(pg, x, x, n, RR_FLOAT32, RR_SUM);
    snprintf(me->msg, sizeof me->msg, "%s", rr_last_error());
  }
  if (rank == 3) t_thread_join(&ab.thread);
  me->t_err = t_now();
  rr_destroy_process_group(pg);
  free(x);
  atomic_store(&me->done, 1);
  return 0;
}

static void cause_during(const int *pids, int n, void *arg) {
  (void)arg;
  double give_up = t_now() + 30;
  while (t_now() < give_up) {
    int ready = 0;
    for (int r = 0; r < n; r++) ready += atomic_load(&g_sh->s[r].ready);
    if (ready == n) break;
    usleep(1000);
  }
  usleep(300 * 1000); /* rank 1 is blocked on rank 0's data now */
  kill(pids[1], SIGSTOP);
  while (t_now() < give_up && !(atomic_load(&g_sh->s[0].done) && atomic_load(&g_sh->s[3].done)))
    usleep(1000);
  usleep(200 * 1000); /* rank 0's goodbye and close are on rank 1's sockets */
  kill(pids[1], SIGCONT);
}

static int cause_test(void) {
  memset(g_sh, 0, sizeof *g_sh);
  int codes[4], sigs[4];
  if (t_run(4, cause_rank, NULL, cause_during, 60, codes, sigs) != 0) return 1;
  int bad = 0;
  for (int r = 0; r < 4; r++) {
    slot *s = &g_sh->s[r];
    printf("rank %d: exit %d, %s: %s\n", r, codes[r], rr_status_name(s->status), s->msg);
    if (codes[r] || sigs[r]) bad = 1;
    if (r == 2) continue;
    if (s->status != RR_EABORTED || !has(s->msg, "rank 3 called rr_abort")) {
      printf("  rank %d: want RR_EABORTED naming rank 3's rr_abort as the cause\n", r);
      bad = 1;
    }
  }
  return bad;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s kill <trials> [first] | sample | stop <trials> [first]\n", argv[0]);
    return 2;
  }
  g_sh = mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_sh == MAP_FAILED) return perror("mmap"), 1;
  t_seed_announce("test_stress");
  if (!strcmp(argv[1], "cause")) return cause_test();
  int sample = !strcmp(argv[1], "sample"), stop = !strcmp(argv[1], "stop");
  if (!sample && !stop && strcmp(argv[1], "kill"))
    return fprintf(stderr, "unknown mode %s\n", argv[1]), 2;
  int n = sample ? 10 : argc > 2 ? atoi(argv[2]) : 100;
  int first = argc > 3 ? atoi(argv[3]) : 0;
  int failed = 0;
  double worst = 0, t0 = t_now();
  for (int i = first; i < first + n; i++) {
    trial t;
    make_trial(&t, i, sample, stop);
    failed += run_trial(i, &t, &worst);
  }
  printf(
      "test_stress %s: %d trial(s), %d failed; slowest survivor report %.3f s after the "
      "fault; %.1f s in all\n",
      argv[1], n, failed, worst, t_now() - t0);
  return failed ? 1 : 0;
}
