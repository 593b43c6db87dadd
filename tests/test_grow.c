/* Growing back (issue 26 part 2, docs/elastic.md "Growing back"): rr_pg_grow / rr_pg_join.
 *
 *   test_grow <scenario>     (RR_TRANSPORT from the environment: tcp or shm)
 *
 * back      world 4; a random rank (0, the store's host, included) killed by SIGKILL in an
 *           all_reduce loop; the 3 survivors shrink, then grow by one newcomer process (one
 *           that was never in the job) back to 4. On the grown group every rank checks an
 *           all_gather of member ids (survivors in their order, then the newcomer) and an
 *           exact integer all_reduce.
 * back2     the same, growing by two newcomers to 5 (newcomers in arrival order).
 * nobody    world 3 grows by one that never comes: every member fails with RR_ETIMEDOUT
 *           naming the missing rank, and the old group still works (an exact all_reduce).
 * token     RR_JOB_TOKEN set: a newcomer with another token is refused at once with an
 *           error about the token; a newcomer with the job's joins and the group grows.
 * orphan    a newcomer with nobody growing at its address fails with RR_ETIMEDOUT
 *           ("cannot reach the rendezvous store") at its own timeout (1.5 s).
 * pending   world 3 polls rr_pg_grow_pending at every step: nobody at the first; then a
 *           newcomer starts, every member sees it at the same step, and they grow.
 * requeue   the newcomer's connection is queued on rank 0's listener, then that group is
 *           destroyed (as after a death) and another grows at the address: it joins that one.
 * extra     world 3 grows by one while two newcomers come: one joins, the other is turned
 *           away by that growth and joins the next (the group of 4, polling, grows to 5).
 * leaks     world 3, six rounds of init, grow by one (the same newcomer process joins each
 *           round; every other round nobody comes and the growth times out), destroy: open
 *           fds, threads and /dev/shm entries equal before and after, on every process.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/harness.h"

#define G_MAXW 8
#define G_RETRY 75 /* exit code: the job could not start (a port taken); run it again */

typedef struct grow_case {
  int world, nnew; /* the job's first size; newcomers (process indices world..) */
  int victim, kill_at;
  char addr[64];   /* where the group grows */
  int timeout_ms;  /* for the members' growth: short in "nobody" */
  volatile int go; /* leaks: the round whose growth the newcomer may join */
} grow_case;

static int count_dir(const char *path, const char *match) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.' && (!match || strstr(e->d_name, match))) n++;
  closedir(d);
  return n;
}

/* This process's threads once none is on its way out: a thread the last destroy joined may
 * still be listed for a moment (a loaded CI run under ASan counted 2 before and 1 after,
 * the "before" taken while one was exiting). The count, once three looks 20 ms apart agree
 * (at most 2 s). */
static int settled_tasks(void) {
  int last = count_dir("/proc/self/task", NULL), same = 0;
  for (int i = 0; i < 100 && same < 2; i++) {
    usleep(20 * 1000);
    int n = count_dir("/proc/self/task", NULL);
    same = n == last ? same + 1 : 0;
    last = n;
  }
  return last;
}

/* The checks on the grown group, on every rank. id: the process index (old ranks 0..3,
 * newcomers 4..); survivors: the ids of the members in their order. */
static int grown_use(rr_pg *np, int id, const grow_case *gc, const int *survivors, int ns) {
  int k = rr_get_world_size(np), r = rr_get_rank(np);
  T_CHECK(k == ns + gc->nnew, "a grown group of %d, not %d", k, ns + gc->nnew);
  int32_t ids[G_MAXW], mine = id;
  T_OK(rr_all_gather(np, &mine, ids, 1, RR_INT32));
  for (int i = 0; i < ns; i++)
    T_CHECK(ids[i] == survivors[i], "rank %d of the grown group is process %d, not %d", i,
            (int)ids[i], survivors[i]);
  /* The newcomers follow, each once, in whatever order they reached the store. */
  int seen = 0;
  for (int i = ns; i < k; i++) {
    T_CHECK(ids[i] >= gc->world && ids[i] < gc->world + gc->nnew, "rank %d is process %d", i,
            (int)ids[i]);
    T_CHECK(!(seen & (1 << (ids[i] - gc->world))), "process %d twice", (int)ids[i]);
    seen |= 1 << (ids[i] - gc->world);
  }
  T_CHECK(ids[r] == id, "rank %d holds process %d, not this one (%d)", r, (int)ids[r], id);
  T_CHECK(rr_get_global_rank(np, r) == r, "global rank %d of rank %d", rr_get_global_rank(np, r),
          r);
  enum { N = 5000 };
  static int32_t x[N];
  int32_t sum = 0;
  for (int i = 0; i < k; i++) sum += ids[i] + 1;
  for (int i = 0; i < N; i++) x[i] = (id + 1) * (i % 101 + 1);
  T_OK(rr_all_reduce(np, x, x, N, RR_INT32, RR_SUM));
  for (int i = 0; i < N; i++)
    T_CHECK(x[i] == sum * (i % 101 + 1), "element %d: %d, not %d", i, (int)x[i],
            (int)(sum * (i % 101 + 1)));
  T_OK(rr_barrier(np));
  return 0;
}

static int join_world(rr_pg **pg, int id, int world) {
  rr_pg_options o = RR_PG_OPTIONS_INIT;
  o.rank = id;
  o.world_size = world;
  return rr_init_process_group(pg, &o);
}

/* ---- back, back2: kill, shrink, grow ---- */
static int back_rank(int id, void *arg) {
  grow_case *gc = arg;
  t_rank = id;
  int survivors[G_MAXW], ns = 0;
  for (int i = 0; i < gc->world; i++)
    if (i != gc->victim) survivors[ns++] = i;
  if (id >= gc->world) { /* a newcomer: a process that was never in the job */
    rr_pg *np = NULL;
    T_OK(rr_pg_join(gc->addr, NULL, &np));
    int rc = grown_use(np, id, gc, survivors, ns);
    T_OK(rr_destroy_process_group(np));
    return rc;
  }
  rr_pg *pg, *sp = NULL, *np = NULL;
  if (join_world(&pg, id, gc->world) != RR_OK) {
    fprintf(stderr, "rank %d: joining the job: %s\n", id, rr_last_error());
    return G_RETRY;
  }
  int32_t x[256];
  int st = RR_OK;
  for (int it = 0; st == RR_OK && it < 1000000; it++) {
    if (id == gc->victim && it == gc->kill_at) raise(SIGKILL);
    for (int i = 0; i < 256; i++) x[i] = id + i;
    st = rr_all_reduce(pg, x, x, 256, RR_INT32, RR_SUM);
  }
  T_OK(rr_pg_shrink(pg, 0, &sp));
  T_CHECK(rr_get_world_size(sp) == ns, "shrunk to %d", rr_get_world_size(sp));
  (void)rr_destroy_process_group(pg);
  T_OK(rr_pg_grow(sp, gc->addr, gc->nnew, 0, 0, &np));
  int rc = grown_use(np, id, gc, survivors, ns);
  T_OK(rr_destroy_process_group(np));
  T_OK(rr_destroy_process_group(sp));
  return rc;
}

/* ---- nobody: the newcomer never comes ---- */
static int nobody_rank(int id, void *arg) {
  grow_case *gc = arg;
  t_rank = id;
  rr_pg *pg, *np = (rr_pg *)&np;
  if (join_world(&pg, id, gc->world) != RR_OK) return G_RETRY;
  T_OK(rr_pg_set_timeout(pg, gc->timeout_ms));
  double t0 = t_now();
  int st = rr_pg_grow(pg, gc->addr, 1, 0, 0, &np);
  double dt = t_now() - t0;
  T_CHECK(st == RR_ETIMEDOUT, "grow with nobody coming: %s: %s", rr_status_name(st),
          rr_last_error());
  T_CHECK(np == NULL, "a group returned with an error");
  T_HAS(rr_last_error(), "rr_pg_grow");
  T_HAS(rr_last_error(), "still usable");
  T_HAS(rr_last_error(), "rank 3"); /* the one that never came */
  /* Bounded by the timeout (plus the old group's agreement): generous, not a timing test. */
  T_CHECK(dt < 10.0 * gc->timeout_ms / 1000.0 + 5.0, "the failed growth took %.2f s", dt);
  if (id == 0) printf("nobody: rank 0's error after %.2f s: %s\n", dt, rr_last_error());
  /* The old group is where it was. */
  int32_t x[256];
  for (int i = 0; i < 256; i++) x[i] = (id + 1) * i;
  T_OK(rr_all_reduce(pg, x, x, 256, RR_INT32, RR_SUM));
  for (int i = 0; i < 256; i++)
    T_CHECK(x[i] == 6 * i, "old group after: element %d: %d", i, (int)x[i]);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---- requeue: the newcomer's connection was queued on a group destroyed since ---- */
static int requeue_rank(int id, void *arg) {
  grow_case *gc = arg;
  t_rank = id;
  int survivors[G_MAXW] = {0, 1, 2};
  if (id == 3) {
    while (gc->go < 1) usleep(1000); /* once rank 0 listens */
    rr_pg *np = NULL;
    T_OK(rr_pg_join(gc->addr, NULL, &np));
    int rc = grown_use(np, id, gc, survivors, 3);
    T_OK(rr_destroy_process_group(np));
    return rc;
  }
  rr_pg *pg, *pg2, *np = NULL;
  if (join_world(&pg, id, 3) != RR_OK) return G_RETRY;
  int waiting = 0;
  T_OK(rr_pg_grow_pending(pg, gc->addr, &waiting));
  if (id == 0) gc->go = 1;
  while (!waiting) T_OK(rr_pg_grow_pending(pg, gc->addr, &waiting));
  /* The group goes (as after a death, before the shrink), closing the listener with the
   * newcomer's connection in its queue; a second group grows at the same address. */
  T_OK(rr_barrier(pg));
  T_OK(rr_destroy_process_group(pg));
  char init[128];
  snprintf(init, sizeof init, "file:///tmp/rr_grow_requeue_%d?rank=%d&world_size=3", (int)getppid(),
           id);
  rr_pg_options o = RR_PG_OPTIONS_INIT;
  o.init_method = init;
  T_OK(rr_init_process_group(&pg2, &o));
  T_OK(rr_pg_grow(pg2, gc->addr, 1, 0, 0, &np));
  int rc = grown_use(np, id, gc, survivors, 3);
  T_OK(rr_destroy_process_group(np));
  T_OK(rr_destroy_process_group(pg2));
  init[strcspn(init, "?")] = '\0';
  if (unlink(init + strlen("file://")) != 0 && errno != ENOENT)
    T_FAIL("unlink %s: %s", init + strlen("file://"), strerror(errno));
  return rc;
}

/* ---- extra: two newcomers for one place; the second joins at the next growth ---- */
static int extra_rank(int id, void *arg) {
  grow_case *gc = arg;
  t_rank = id;
  int survivors[G_MAXW] = {0, 1, 2};
  rr_pg *pg = NULL, *np = NULL;
  if (id >= 3) {
    T_OK(rr_pg_join(gc->addr, NULL, &pg));
    if (rr_get_world_size(pg) == 5) { /* the one that waited for the second growth */
      int rc = grown_use(pg, id, gc, survivors, 3);
      T_OK(rr_destroy_process_group(pg));
      return rc;
    }
    T_CHECK(rr_get_world_size(pg) == 4 && rr_get_rank(pg) == 3, "joined as %d of %d",
            rr_get_rank(pg), rr_get_world_size(pg));
  } else if (join_world(&pg, id, 3) != RR_OK) {
    return G_RETRY;
  } else {
    T_OK(rr_pg_grow(pg, gc->addr, 1, 0, 0, &np)); /* room for one of the two */
    T_OK(rr_destroy_process_group(pg));
    pg = np;
  }
  /* The group of 4, the first newcomer in it, looks for the second at each step. */
  int waiting = 0;
  for (int step = 0; !waiting; step++) {
    int32_t x = 1;
    T_OK(rr_all_reduce(pg, &x, &x, 1, RR_INT32, RR_SUM));
    T_CHECK(x == 4, "step %d: sum %d in the group of 4", step, (int)x);
    T_OK(rr_pg_grow_pending(pg, gc->addr, &waiting));
    if (!waiting) usleep(5000);
  }
  T_OK(rr_pg_grow(pg, gc->addr, 1, 0, 0, &np));
  int rc = grown_use(np, id, gc, survivors, 3);
  T_OK(rr_destroy_process_group(np));
  T_OK(rr_destroy_process_group(pg));
  return rc;
}

/* ---- orphan: a newcomer with nobody growing gives up at its own timeout ---- */
static int orphan_rank(int id, void *arg) {
  grow_case *gc = arg;
  t_rank = id;
  rr_pg_options o = RR_PG_OPTIONS_INIT;
  o.timeout_ms = gc->timeout_ms;
  rr_pg *np = (rr_pg *)&np;
  double t0 = t_now();
  int st = rr_pg_join(gc->addr, &o, &np);
  double dt = t_now() - t0;
  T_CHECK(st == RR_ETIMEDOUT && np == NULL, "join with nobody growing: %s: %s", rr_status_name(st),
          rr_last_error());
  T_HAS(rr_last_error(), "rr_pg_join at 127.0.0.1:");
  T_HAS(rr_last_error(), "cannot reach the rendezvous store");
  T_CHECK(dt < 10.0 * gc->timeout_ms / 1000.0 + 5.0, "the failed join took %.2f s", dt);
  printf("orphan: error after %.2f s: %s\n", dt, rr_last_error());
  return 0;
}

/* ---- token: a newcomer with another job's token is refused ---- */
static int token_rank(int id, void *arg) {
  grow_case *gc = arg;
  t_rank = id;
  int survivors[G_MAXW] = {0, 1, 2};
  if (id == 4) { /* the intruder: another token */
    setenv("RR_JOB_TOKEN", "not-this-job", 1);
    rr_pg *np = (rr_pg *)&np;
    double t0 = t_now();
    int st = rr_pg_join(gc->addr, NULL, &np);
    T_CHECK(st != RR_OK && np == NULL, "an intruder joined: %s", rr_status_name(st));
    T_HAS(rr_last_error(), "token");
    T_HAS(rr_last_error(), "rr_pg_join");
    printf("token: the intruder's error after %.2f s: %s\n", t_now() - t0, rr_last_error());
    gc->go = 1;
    return 0;
  }
  if (id == 3) { /* the rightful newcomer */
    /* Only after the intruder was refused: joining first would complete the growth (one
     * place) and close its store, and the intruder would then meet no store at all (seen
     * under TSan: "Connection refused" until its timeout), not the token check. */
    for (double end = t_now() + 60; gc->go < 1 && t_now() < end;) usleep(1000);
    rr_pg *np = NULL;
    T_OK(rr_pg_join(gc->addr, NULL, &np));
    int rc = grown_use(np, id, gc, survivors, 3);
    T_OK(rr_destroy_process_group(np));
    return rc;
  }
  rr_pg *pg, *np = NULL;
  if (join_world(&pg, id, 3) != RR_OK) return G_RETRY;
  T_OK(rr_pg_grow(pg, gc->addr, 1, 0, 0, &np));
  int rc = grown_use(np, id, gc, survivors, 3);
  T_OK(rr_destroy_process_group(np));
  T_OK(rr_destroy_process_group(pg));
  return rc;
}

/* ---- pending: members poll at each step; a newcomer arrives; all grow at one step ---- */
static int pending_rank(int id, void *arg) {
  grow_case *gc = arg;
  t_rank = id;
  int survivors[G_MAXW] = {0, 1, 2};
  if (id == 3) {
    while (gc->go < 1) usleep(1000); /* after the members' first poll said nobody */
    rr_pg *np = NULL;
    T_OK(rr_pg_join(gc->addr, NULL, &np));
    int rc = grown_use(np, id, gc, survivors, 3);
    T_OK(rr_destroy_process_group(np));
    return rc;
  }
  rr_pg *pg, *np = NULL;
  if (join_world(&pg, id, 3) != RR_OK) return G_RETRY;
  int step = 0, waiting = 0;
  for (; step < 100000; step++) {
    int32_t x = id + 1;
    T_OK(rr_all_reduce(pg, &x, &x, 1, RR_INT32, RR_SUM));
    T_CHECK(x == 6, "step %d: sum %d", step, (int)x);
    T_OK(rr_pg_grow_pending(pg, gc->addr, &waiting));
    if (step == 0) {
      T_CHECK(!waiting, "a newcomer waiting before any was started");
      if (id == 0) gc->go = 1;
    }
    /* Every member saw the same answer at the same step (rank 0's, broadcast). */
    int32_t seen[3], w = waiting;
    T_OK(rr_all_gather(pg, &w, seen, 1, RR_INT32));
    T_CHECK(seen[0] == w && seen[1] == w && seen[2] == w, "step %d: answers %d %d %d", step,
            (int)seen[0], (int)seen[1], (int)seen[2]);
    if (waiting) break;
    usleep(2000);
  }
  T_CHECK(waiting, "the newcomer never showed");
  if (id == 0) printf("pending: the newcomer was seen waiting at step %d\n", step);
  T_OK(rr_pg_grow(pg, gc->addr, 1, 0, 0, &np));
  int rc = grown_use(np, id, gc, survivors, 3);
  T_OK(rr_destroy_process_group(np));
  T_OK(rr_destroy_process_group(pg));
  return rc;
}

/* ---- leaks: rounds of grow (and of a growth nobody comes to), on every process ---- */
static int leaks_rank(int id, void *arg) {
  grow_case *gc = arg;
  t_rank = id;
  int survivors[G_MAXW] = {0, 1, 2};
  int fds0 = -1, tasks0 = -1, shm0 = -1;
  for (int round = 0; round < 6; round++) {
    if (round == 2) { /* after one round of each kind */
      fds0 = count_dir("/proc/self/fd", NULL);
      tasks0 = settled_tasks();
      shm0 = count_dir("/dev/shm", "ringreduce");
    }
    int comes = round % 2 == 0;
    if (id == 3) {
      if (comes) {
        /* Not before the members open this round's growth: it would join the growth of
         * the round before, which nobody is meant to come to. */
        while (gc->go < round + 1) usleep(1000);
        rr_pg *np = NULL;
        T_OK(rr_pg_join(gc->addr, NULL, &np));
        if (grown_use(np, id, gc, survivors, 3)) return 1;
        T_OK(rr_destroy_process_group(np));
      }
      /* Round after round in step with the members (whose barrier ends each round). */
      continue;
    }
    char init[128];
    snprintf(init, sizeof init, "file:///tmp/rr_grow_leaks_%d_%d?rank=%d&world_size=3",
             (int)getppid(), round, id);
    rr_pg_options o = RR_PG_OPTIONS_INIT;
    o.init_method = init;
    rr_pg *pg, *np = NULL;
    T_OK(rr_init_process_group(&pg, &o));
    if (comes) {
      if (id == 0) gc->go = round + 1;
      int waiting = 0;
      while (!waiting) T_OK(rr_pg_grow_pending(pg, gc->addr, &waiting));
      T_OK(rr_pg_grow(pg, gc->addr, 1, 0, 0, &np));
      if (grown_use(np, id, gc, survivors, 3)) return 1;
      T_OK(rr_destroy_process_group(np));
    } else {
      /* The wait as rr_pg_grow's argument here (nobody: as the group's timeout). */
      int st = rr_pg_grow(pg, gc->addr, 1, gc->timeout_ms, 0, &np);
      T_CHECK(st == RR_ETIMEDOUT && !np, "round %d: %s: %s", round, rr_status_name(st),
              rr_last_error());
    }
    T_OK(rr_barrier(pg));
    T_OK(rr_destroy_process_group(pg));
    init[strcspn(init, "?")] = '\0';
    if (unlink(init + strlen("file://")) != 0 && errno != ENOENT)
      T_FAIL("unlink %s: %s", init + strlen("file://"), strerror(errno));
  }
  int fds1 = count_dir("/proc/self/fd", NULL), tasks1 = settled_tasks();
  int shm1 = count_dir("/dev/shm", "ringreduce");
  T_CHECK(fds0 > 0 && fds1 == fds0, "open fds: %d before, %d after", fds0, fds1);
  T_CHECK(tasks0 > 0 && tasks1 == tasks0, "threads: %d before, %d after", tasks0, tasks1);
  T_CHECK(shm1 == shm0, "/dev/shm entries: %d before, %d after", shm0, shm1);
  printf("leaks: process %d: %d fds, %d threads, %d shm files before and after\n", id, fds1, tasks1,
         shm1);
  return 0;
}

static int run(const char *s, grow_case *gc, int nproc, int (*fn)(int, void *)) {
  for (int attempt = 0; attempt < 5; attempt++) {
    int port = t_free_port();
    snprintf(gc->addr, sizeof gc->addr, "127.0.0.1:%d", port);
    int codes[G_MAXW], sigs[G_MAXW], again = 0;
    if (t_run(nproc, fn, gc, NULL, 100, codes, sigs) != 0) {
      fprintf(stderr, "%s: timed out (a hang)\n", s);
      return 1;
    }
    for (int r = 0; r < nproc; r++) again |= codes[r] == G_RETRY;
    if (again) continue;
    int bad = 0;
    for (int r = 0; r < nproc; r++) {
      int killed = r == gc->victim;
      if (killed ? sigs[r] != SIGKILL : (codes[r] != 0 || sigs[r] != 0)) {
        fprintf(stderr, "%s: process %d: exit %d, signal %d\n", s, r, codes[r], sigs[r]);
        bad = 1;
      }
    }
    return bad;
  }
  fprintf(stderr, "%s: the job could not start in 5 tries\n", s);
  return 1;
}

int main(int argc, char **argv) {
  const char *s = argc > 1 ? argv[1] : "";
  const char *tp = getenv("RR_TRANSPORT");
  printf("%s over %s\n", s, tp ? tp : "auto");
  grow_case *gc = mmap(NULL, sizeof *gc, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (gc == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(gc, 0, sizeof *gc);
  gc->victim = -1;
  gc->timeout_ms = 1500;
  if (!strcmp(s, "back") || !strcmp(s, "back2")) {
    t_seed_announce("test_grow");
    uint64_t seed = t_seed();
    gc->world = 4;
    gc->nnew = !strcmp(s, "back") ? 1 : 2;
    gc->victim = (int)(t_bits(seed, 0, 0) % 4);
    gc->kill_at = 1 + (int)(t_bits(seed, 0, 1) % 5);
    printf("%s: rank %d killed at iteration %d; %d newcomer(s)\n", s, gc->victim, gc->kill_at,
           gc->nnew);
    return run(s, gc, 4 + gc->nnew, back_rank);
  }
  gc->world = 3;
  gc->nnew = 1;
  if (!strcmp(s, "nobody")) return run(s, gc, 3, nobody_rank);
  if (!strcmp(s, "token")) {
    setenv("RR_JOB_TOKEN", "grow-test-job", 1); /* the children inherit it */
    return run(s, gc, 5, token_rank);
  }
  if (!strcmp(s, "leaks")) return run(s, gc, 4, leaks_rank);
  if (!strcmp(s, "pending")) return run(s, gc, 4, pending_rank);
  if (!strcmp(s, "orphan")) return run(s, gc, 1, orphan_rank);
  if (!strcmp(s, "requeue")) return run(s, gc, 4, requeue_rank);
  if (!strcmp(s, "extra")) {
    gc->nnew = 2;
    return run(s, gc, 5, extra_rank);
  }
  fprintf(stderr, "usage: test_grow back|back2|nobody|token|leaks|pending|orphan|requeue|extra\n");
  return 2;
}
