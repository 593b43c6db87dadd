/* Elastic groups (issue 26, docs/elastic.md): rr_pg_revoke.
 *
 *   test_elastic <scenario>     (RR_TRANSPORT from the environment: tcp or shm)
 *
 * revoke_blocked  world 3: ranks 1 and 2 wait in an all_reduce (and queued async ones) that
 *                 rank 0 never joins; rank 0 revokes. Every pending and later call fails
 *                 with RR_EREVOKED naming rank 0, within a bound far below the timeout;
 *                 subgroups made from the world fail with it; destroy does not block.
 * revoke_kill9    world 3: rank 2 dies by SIGKILL during all_reduces; the survivors fail
 *                 naming it; rank 0 revokes: its calls say RR_EREVOKED and keep the cause;
 *                 rank 1's fail too; destroy does not block.
 * revoke_leaks    world 3, five rounds of init, subgroup, revoke, destroy: open fds,
 *                 threads and /dev/shm entries of the library are what they were before.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/harness.h"

/* The bound on "promptly": the group's timeout (RR_TIMEOUT, 30 s in CTest) is far above. */
#define T_PROMPT_S 5.0

static int join(rr_pg **pg) {
  rr_pg_options o = RR_PG_OPTIONS_INIT;
  return rr_init_process_group(pg, &o);
}

/* ---- revoke while peers are blocked in a collective ---- */
static int revoke_blocked(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg, *a = NULL, *b = NULL;
  T_OK(join(&pg));
  const int ra[] = {1, 2}, rb[] = {0, 1};
  T_OK(rr_new_group(pg, ra, 2, 0, &a));
  T_OK(rr_new_group(pg, rb, 2, 0, &b));
  T_OK(rr_barrier(pg));
  size_t n = (size_t)1 << 16;
  int32_t *x = t_alloc(n * sizeof *x);
  memset(x, 0, n * sizeof *x);
  double t0 = t_now();
  if (rank == 0) {
    usleep(300 * 1000); /* let the others block */
    T_OK(rr_pg_revoke(pg));
    T_OK(rr_pg_revoke(pg)); /* twice is harmless */
  } else {
    rr_work *w[2];
    for (int i = 0; i < 2; i++) T_OK(rr_all_reduce_async(pg, x, x, n, RR_INT32, RR_SUM, &w[i]));
    int st = rr_all_reduce(pg, x, x, n, RR_INT32, RR_SUM);
    double dt = t_now() - t0;
    T_CHECK(st == RR_EREVOKED, "blocked call: %s: %s", rr_status_name(st), rr_last_error());
    T_HAS(rr_last_error(), "rank 0 revoked group w");
    T_CHECK(dt < T_PROMPT_S, "the blocked call failed after %.2f s", dt);
    for (int i = 0; i < 2; i++) {
      int ws = rr_work_wait(w[i], 0);
      T_CHECK(ws == RR_EREVOKED, "queued work %d: %s: %s", i, rr_status_name(ws),
              rr_work_error(w[i]));
      rr_work_free(w[i]);
    }
  }
  /* Later calls fail at once, on every rank, the revoking one too. */
  double t1 = t_now();
  int st = rr_barrier(pg);
  T_CHECK(st == RR_EREVOKED, "later call: %s: %s", rr_status_name(st), rr_last_error());
  T_HAS(rr_last_error(), "rank 0 revoked group w");
  /* Subgroups were revoked with their parent (B holds rank 0, A does not: 1 and 2 heard the
   * revoke on the world's control sockets and passed it down). */
  if (a) {
    st = rr_all_reduce(a, x, x, n, RR_INT32, RR_SUM);
    T_CHECK(st == RR_EREVOKED, "subgroup {1,2}: %s: %s", rr_status_name(st), rr_last_error());
    T_HAS(rr_last_error(), "revoked with its parent w");
  }
  if (b) {
    st = rr_all_reduce(b, x, x, n, RR_INT32, RR_SUM);
    T_CHECK(st == RR_EREVOKED, "subgroup {0,1}: %s: %s", rr_status_name(st), rr_last_error());
    T_HAS(rr_last_error(), "revoked with its parent w");
  }
  T_CHECK(t_now() - t1 < T_PROMPT_S, "later calls took %.2f s", t_now() - t1);
  double t2 = t_now();
  if (a) T_CHECK(rr_destroy_process_group(a) == RR_EREVOKED, "destroy A did not report");
  if (b) T_CHECK(rr_destroy_process_group(b) == RR_EREVOKED, "destroy B did not report");
  st = rr_destroy_process_group(pg);
  T_CHECK(st == RR_EREVOKED, "destroy: %s", rr_status_name(st));
  T_CHECK(t_now() - t2 < 1.0, "destroy after revoke took %.2f s", t_now() - t2);
  free(x);
  return 0;
}

/* ---- revoke after a kill -9 ---- */
static int revoke_kill9(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(join(&pg));
  size_t n = 4096;
  int32_t *x = t_alloc(n * sizeof *x);
  int st = RR_OK;
  for (int it = 0; st == RR_OK && it < 100000; it++) {
    if (rank == 2 && it == 20) raise(SIGKILL);
    for (size_t i = 0; i < n; i++) x[i] = 1;
    st = rr_all_reduce(pg, x, x, n, RR_INT32, RR_SUM);
    if (st == RR_OK) T_CHECK(x[0] == 3 && x[n - 1] == 3, "sum %d, not 3", (int)x[0]);
  }
  T_CHECK(st == RR_EPEER || st == RR_EABORTED, "after the kill: %s: %s", rr_status_name(st),
          rr_last_error());
  T_HAS(rr_last_error(), "rank 2");
  double t0 = t_now();
  if (rank == 0) {
    T_OK(rr_pg_revoke(pg));
    st = rr_barrier(pg);
    T_CHECK(st == RR_EREVOKED, "after the revoke: %s: %s", rr_status_name(st), rr_last_error());
    T_HAS(rr_last_error(), "rank 0 revoked group w");
    T_HAS(rr_last_error(), "rank 2"); /* the failure before it stays in the text */
    printf("revoke_kill9: rank 0: %s\n", rr_last_error());
  } else {
    st = rr_barrier(pg);
    T_CHECK(st != RR_OK, "a call on the failed group succeeded");
  }
  st = rr_destroy_process_group(pg);
  T_CHECK(st != RR_OK, "destroy forgot the failure");
  T_CHECK(t_now() - t0 < T_PROMPT_S, "revoke, call and destroy took %.2f s", t_now() - t0);
  free(x);
  return 0;
}

/* ---- nothing leaks across init, subgroup, revoke, destroy ---- */
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

static int revoke_leaks(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  /* Counted before the first group and after the last: whatever the library opens once
   * per process (none today) would show as a difference too, so a first round warms up. */
  int fds0 = -1, tasks0 = -1, shm0 = -1;
  for (int round = 0; round < 6; round++) {
    if (round == 1) {
      fds0 = count_dir("/proc/self/fd", NULL);
      tasks0 = count_dir("/proc/self/task", NULL);
      shm0 = count_dir("/dev/shm", "ringreduce");
    }
    /* A rendezvous file per round: a TCP store on one port would meet the last round's. */
    char init[128];
    snprintf(init, sizeof init, "file:///tmp/rr_elastic_leaks_%d_%d?rank=%d&world_size=3",
             (int)getppid(), round, rank);
    rr_pg_options o = RR_PG_OPTIONS_INIT;
    o.init_method = init;
    rr_pg *pg, *a = NULL;
    T_OK(rr_init_process_group(&pg, &o));
    const int ra[] = {0, 2};
    T_OK(rr_new_group(pg, ra, 2, 0, &a));
    int32_t x[64] = {0};
    T_OK(rr_all_reduce(pg, x, x, 64, RR_INT32, RR_SUM));
    if (rank == round % 3) T_OK(rr_pg_revoke(pg));
    int st = rr_barrier(pg);
    T_CHECK(st == RR_EREVOKED, "round %d: %s: %s", round, rr_status_name(st), rr_last_error());
    if (a) (void)rr_destroy_process_group(a);
    (void)rr_destroy_process_group(pg);
    /* The file store removes its file when the last rank leaves; a rank gone first leaves
     * it to the others. */
    init[strcspn(init, "?")] = '\0';
    if (unlink(init + strlen("file://")) != 0 && errno != ENOENT)
      T_FAIL("unlink %s: %s", init + strlen("file://"), strerror(errno));
  }
  int fds1 = count_dir("/proc/self/fd", NULL), tasks1 = count_dir("/proc/self/task", NULL);
  int shm1 = count_dir("/dev/shm", "ringreduce");
  T_CHECK(fds0 > 0 && fds1 == fds0, "open fds: %d before, %d after", fds0, fds1);
  T_CHECK(tasks0 > 0 && tasks1 == tasks0, "threads: %d before, %d after", tasks0, tasks1);
  T_CHECK(shm1 == shm0, "/dev/shm entries: %d before, %d after", shm0, shm1);
  if (rank == 0)
    printf("revoke_leaks: %d fds, %d threads, %d shm files before and after\n", fds1, tasks1, shm1);
  return 0;
}

/* ---- shrink: kill -9 of a rank, the survivors shrink and go on ---- */
#define T_MAXW 8
#define T_RETRY 75 /* exit code: the trial's job could not start; run it again */
typedef struct shrink_case {
  int world;
  int victim, kill_at; /* the rank killed, at which iteration of the loop */
  int second;          /* a second rank killed while it shrinks (-1: none) ... */
  int second_us;       /* ... this long after it entered rr_pg_shrink */
  int slow;            /* a rank that calls rr_pg_shrink only after 2 timeouts (-1: none) */
  /* Shared with the parent (MAP_SHARED): each rank's outcome, for the cross-rank checks. */
  struct {
    int status; /* of rr_pg_shrink; 1: not reached */
    int size;   /* of the new group */
    int members[T_MAXW];
    int used;  /* the new group carried an exact all_reduce */
    int again; /* ... after a second shrink (the first group lost a member) */
  } out[T_MAXW];
} shrink_case;

static int shrink_use(shrink_case *sc, int rank, rr_pg *np) {
  int k = rr_get_world_size(np);
  int mine[T_MAXW], all[T_MAXW * T_MAXW];
  for (int i = 0; i < k; i++) mine[i] = rr_get_global_rank(np, i);
  /* Contiguous ranks in the old order: members ascending, this rank where its old one is. */
  for (int i = 0; i + 1 < k; i++)
    T_CHECK(mine[i] < mine[i + 1], "members out of the old order at %d", i);
  T_CHECK(mine[rr_get_rank(np)] == rank, "new rank %d holds old rank %d, not %d", rr_get_rank(np),
          mine[rr_get_rank(np)], rank);
  int st = rr_all_gather(np, mine, all, (size_t)k, RR_INT32);
  if (st != RR_OK) return st;
  for (int r = 0; r < k; r++)
    T_CHECK(!memcmp(all + r * k, mine, (size_t)k * sizeof *mine),
            "rank %d of the new group lists other members", r);
  enum { N = 3000 };
  static int32_t x[N];
  int32_t sum = 0;
  for (int i = 0; i < k; i++) sum += mine[i] + 1;
  for (int i = 0; i < N; i++) x[i] = (rank + 1) * (i % 97 + 1);
  st = rr_all_reduce(np, x, x, N, RR_INT32, RR_SUM);
  if (st != RR_OK) return st;
  for (int i = 0; i < N; i++)
    T_CHECK(x[i] == sum * (i % 97 + 1), "element %d: %d, not %d", i, (int)x[i],
            (int)(sum * (i % 97 + 1)));
  T_OK(rr_barrier(np));
  sc->out[rank].used = 1;
  return RR_OK;
}

typedef struct shrink_arg {
  rr_pg *pg, *np;
  int st;
} shrink_arg;

static int shrink_thread(void *arg) {
  shrink_arg *a = arg;
  a->st = rr_pg_shrink(a->pg, 0, &a->np);
  return 0;
}

static int shrink_rank(int rank, void *arg) {
  shrink_case *sc = arg;
  t_rank = rank;
  rr_pg *pg;
  /* Not what is tested: t_free_port's port can be taken before rank 0 binds it (by any
   * process on the host). The parent runs such a trial again. */
  if (join(&pg) != RR_OK) {
    fprintf(stderr, "rank %d: joining the trial's job: %s\n", rank, rr_last_error());
    return T_RETRY;
  }
  /* "No timeout" (rr_pg_set_timeout's largest value): the shrink's deadlines must not
   * overflow (a member's two-step wait for its coordinator once did, and gave up at once). */
  if (getenv("RR_TEST_NO_TIMEOUT")) T_OK(rr_pg_set_timeout(pg, INT64_MAX));
  enum { N = 1024 };
  int32_t x[N];
  int st = RR_OK;
  for (int it = 0; st == RR_OK && it < 1000000; it++) {
    if (rank == sc->victim && it == sc->kill_at) raise(SIGKILL);
    for (int i = 0; i < N; i++) x[i] = rank + i;
    st = rr_all_reduce(pg, x, x, N, RR_INT32, RR_SUM);
    int w = sc->world;
    if (st == RR_OK) T_CHECK(x[5] == w * (w - 1) / 2 + 5 * w, "sum %d before the kill", (int)x[5]);
  }
  T_CHECK(st != RR_OK, "the loop never failed");
  /* Too slow: it comes after the coordinator's whole wait for votes (the group's timeout,
   * RR_TIMEOUT seconds) is over. */
  const char *to = getenv("RR_TIMEOUT");
  if (rank == sc->slow) usleep((useconds_t)(2.5e6 * (to ? atof(to) : 30.0)));
  double t0 = t_now();
  shrink_arg a = {.pg = pg, .st = 1};
  if (rank == sc->second) { /* killed as it enters the shrink, or inside it */
    t_thread th;
    T_CHECK(t_thread_start(&th, shrink_thread, &a) == 0, "pthread_create");
    usleep((useconds_t)sc->second_us);
    raise(SIGKILL);
  }
  (void)shrink_thread(&a);
  double dt = t_now() - t0;
  sc->out[rank].status = a.st;
  /* Bounded: each epoch waits at most two timeouts, and a trial has at most three. */
  T_CHECK(dt < 6.5 * (to ? atof(to) : 30.0), "the shrink took %.2f s", dt);
  if (a.st != RR_OK) {
    printf("rank %d: shrink failed after %.2f s: %s\n", rank, dt, rr_last_error());
    T_CHECK(a.np == NULL, "a group returned with an error");
    T_HAS(rr_last_error(), "rr_pg_shrink");
  } else {
    sc->out[rank].size = rr_get_world_size(a.np);
    for (int i = 0; i < sc->out[rank].size && i < T_MAXW; i++)
      sc->out[rank].members[i] = rr_get_global_rank(a.np, i);
    st = shrink_use(sc, rank, a.np);
    if (st != RR_OK) { /* a rank in the new group died after it committed: shrink again */
      printf("rank %d: the new group failed: %s\n", rank, rr_last_error());
      rr_pg *np2 = NULL;
      int st2 = rr_pg_shrink(a.np, 0, &np2);
      if (st2 == RR_OK) {
        sc->out[rank].again = 1;
        sc->out[rank].size = rr_get_world_size(np2);
        memset(sc->out[rank].members, 0, sizeof sc->out[rank].members);
        for (int i = 0; i < sc->out[rank].size && i < T_MAXW; i++)
          sc->out[rank].members[i] = rr_get_global_rank(np2, i);
        st = shrink_use(sc, rank, np2);
        if (st != RR_OK) printf("rank %d: the second group failed: %s\n", rank, rr_last_error());
        (void)rr_destroy_process_group(np2);
      } else {
        printf("rank %d: the second shrink failed: %s\n", rank, rr_last_error());
      }
    }
    double t1 = t_now();
    (void)rr_destroy_process_group(a.np);
    T_CHECK(t_now() - t1 < 2.0, "destroying the new group took %.2f s", t_now() - t1);
  }
  double t1 = t_now();
  T_CHECK(rr_destroy_process_group(pg) != RR_OK, "the old group's failure was lost");
  T_CHECK(t_now() - t1 < 1.0, "destroying the old group took %.2f s", t_now() - t1);
  return 0;
}

/* One trial; 0 when every check held. expect_all: every survivor must get the group of all
 * survivors (no second death, no slow rank). */
static int shrink_trial(shrink_case *sc, const char *what) {
  int codes[T_MAXW], sigs[T_MAXW];
  for (int r = 0; r < T_MAXW; r++) sc->out[r].status = 1, sc->out[r].used = 0;
  double t0 = t_now();
  if (t_run(sc->world, shrink_rank, sc, NULL, 120, codes, sigs) != 0) {
    fprintf(stderr, "%s: timed out (a hang)\n", what);
    return 1;
  }
  for (int r = 0; r < sc->world; r++)
    if (codes[r] == T_RETRY) return -1;
  int bad = 0, ref = -1;
  for (int r = 0; r < sc->world; r++) {
    int killed = r == sc->victim || r == sc->second;
    if (killed) {
      if (sigs[r] != SIGKILL) bad = fprintf(stderr, "%s: rank %d not killed\n", what, r) > 0;
      continue;
    }
    if (codes[r] != 0 || sigs[r] != 0) {
      fprintf(stderr, "%s: rank %d: exit %d signal %d\n", what, r, codes[r], sigs[r]);
      bad = 1;
      continue;
    }
    if (sc->out[r].status != RR_OK) continue;
    /* Never two groups: every rank that got one got the same. */
    if (ref < 0) ref = r;
    if (sc->out[r].size != sc->out[ref].size ||
        memcmp(sc->out[r].members, sc->out[ref].members, sizeof sc->out[r].members)) {
      fprintf(stderr, "%s: ranks %d and %d got different groups\n", what, ref, r);
      bad = 1;
    }
  }
  int survivors = sc->world - 1 - (sc->second >= 0) - (sc->slow >= 0);
  if (sc->second < 0) /* one death: every survivor (but a slow one) gets the group, and uses it */
    for (int r = 0; r < sc->world; r++) {
      if (r == sc->victim || r == sc->slow) continue;
      if (sc->out[r].status != RR_OK || sc->out[r].size != survivors || !sc->out[r].used) {
        fprintf(stderr, "%s: rank %d: status %d, group of %d (want %d), used %d\n", what, r,
                sc->out[r].status, sc->out[r].size, survivors, sc->out[r].used);
        bad = 1;
      }
    }
  if (sc->slow >= 0 && sc->out[sc->slow].status == RR_OK) {
    fprintf(stderr, "%s: the slow rank %d was not left out\n", what, sc->slow);
    bad = 1;
  }
  if (bad) fprintf(stderr, "%s: FAILED (%.2f s)\n", what, t_now() - t0);
  return bad;
}

/* trials of world ranks: a random rank killed at a random iteration; with `second`, a
 * second random rank killed at a random moment of its shrink; with `slow`, a random
 * survivor that comes too late. */
static int shrink_trials(int world, int trials, int second, int slow) {
  shrink_case *sc =
      mmap(NULL, sizeof *sc, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sc == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  uint64_t seed = t_seed();
  int failed = 0, groups = 0, errors = 0, retries = 0, broken = 0, regrouped = 0;
  for (int t = 0; t < trials; t++) {
    memset(sc, 0, sizeof *sc);
    sc->world = world;
    sc->victim = (int)(t_bits(seed, (uint64_t)t, 0) % (uint64_t)world);
    sc->kill_at = 1 + (int)(t_bits(seed, (uint64_t)t, 1) % 5);
    sc->second = sc->slow = -1;
    if (second) {
      sc->second =
          (sc->victim + 1 + (int)(t_bits(seed, (uint64_t)t, 2) % (uint64_t)(world - 1))) % world;
      sc->second_us = (int)(t_bits(seed, (uint64_t)t, 3) % 3000);
    }
    if (slow)
      sc->slow =
          (sc->victim + 1 + (int)(t_bits(seed, (uint64_t)t, 2) % (uint64_t)(world - 1))) % world;
    char what[128];
    snprintf(what, sizeof what,
             "trial %d (world %d, rank %d killed at %d, second %d at %d us, slow %d)", t, world,
             sc->victim, sc->kill_at, sc->second, sc->second_us, sc->slow);
    int bad = shrink_trial(sc, what);
    if (bad < 0 && retries < 10) {
      retries++;
      t--;
      continue;
    }
    failed += bad != 0;
    for (int r = 0; r < world; r++)
      if (r != sc->victim && r != sc->second && r != sc->slow) {
        if (sc->out[r].status != RR_OK)
          errors++;
        else if (sc->out[r].used && !sc->out[r].again)
          groups++;
        else if (sc->out[r].used)
          regrouped++; /* its first group lost a member after the
                        * commit; a second shrink worked */
        else
          broken++;
      }
  }
  printf(
      "shrink: world %d, %d trials, %d failed; survivors: %d got a working group; %d a "
      "group that lost a member after the commit (its first call failed naming it), then a "
      "working one from a second shrink; %d ended with no working group; %d a clear error "
      "from the shrink (%d trials run again: their job could not start)\n",
      world, trials, failed, groups, regrouped, broken, errors, retries);
  munmap(sc, sizeof *sc);
  return failed != 0;
}

/* ---- nothing leaks across revoke, shrink and destroy ----
 * World W (4 unless given), six rounds: in even rounds every rank shrinks (a group of all
 * W), in odd ones one rank destroys its group instead and the others shrink without it. */
static int shrink_leaks(int rank, void *arg) {
  const int world = *(const int *)arg;
  t_rank = rank;
  int fds0 = -1, tasks0 = -1, shm0 = -1;
  for (int round = 0; round < 6; round++) {
    if (round == 1) {
      fds0 = count_dir("/proc/self/fd", NULL);
      tasks0 = count_dir("/proc/self/task", NULL);
      shm0 = count_dir("/dev/shm", "ringreduce");
    }
    char init[128];
    snprintf(init, sizeof init, "file:///tmp/rr_elastic_sleaks_%d_%d?rank=%d&world_size=%d",
             (int)getppid(), round, rank, world);
    rr_pg_options o = RR_PG_OPTIONS_INIT;
    o.init_method = init;
    rr_pg *pg, *np = NULL;
    T_OK(rr_init_process_group(&pg, &o));
    int32_t x[64] = {0};
    T_OK(rr_all_reduce(pg, x, x, 64, RR_INT32, RR_SUM));
    int leaver = round % 2 ? round % world : -1;
    if (rank == leaver) { /* the others' shrink may have revoked the group already */
      int st = rr_destroy_process_group(pg);
      T_CHECK(st == RR_OK || st == RR_EREVOKED, "leaving: %s: %s", rr_status_name(st),
              rr_last_error());
    } else {
      T_OK(rr_pg_shrink(pg, 0, &np));
      int want = leaver < 0 ? world : world - 1;
      T_CHECK(rr_get_world_size(np) == want, "round %d: a group of %d, not %d", round,
              rr_get_world_size(np), want);
      for (int i = 0; i < 64; i++) x[i] = i;
      T_OK(rr_all_reduce(np, x, x, 64, RR_INT32, RR_SUM));
      T_CHECK(x[63] == 63 * want, "round %d: sum %d", round, (int)x[63]);
      T_OK(rr_destroy_process_group(np));
      T_CHECK(rr_destroy_process_group(pg) == RR_EREVOKED, "the old group was not revoked");
    }
    init[strcspn(init, "?")] = '\0';
    if (unlink(init + strlen("file://")) != 0 && errno != ENOENT)
      T_FAIL("unlink %s: %s", init + strlen("file://"), strerror(errno));
  }
  int fds1 = count_dir("/proc/self/fd", NULL), tasks1 = count_dir("/proc/self/task", NULL);
  int shm1 = count_dir("/dev/shm", "ringreduce");
  T_CHECK(fds0 > 0 && fds1 == fds0, "open fds: %d before, %d after", fds0, fds1);
  T_CHECK(tasks0 > 0 && tasks1 == tasks0, "threads: %d before, %d after", tasks0, tasks1);
  T_CHECK(shm1 == shm0, "/dev/shm entries: %d before, %d after", shm0, shm1);
  if (rank == 0)
    printf("shrink_leaks: %d fds, %d threads, %d shm files before and after\n", fds1, tasks1, shm1);
  return 0;
}

int main(int argc, char **argv) {
  const char *s = argc > 1 ? argv[1] : "";
  const char *tp = getenv("RR_TRANSPORT");
  printf("%s over %s\n", s, tp ? tp : "auto");
  if (!strcmp(s, "revoke_blocked")) return t_run_all(3, revoke_blocked, NULL, 60, s);
  if (!strcmp(s, "revoke_leaks")) return t_run_all(3, revoke_leaks, NULL, 120, s);
  if (!strcmp(s, "shrink_leaks")) {
    int world = argc > 2 ? atoi(argv[2]) : 4;
    if (world < 3 || world > T_MAXW) return 2;
    return t_run_all(world, shrink_leaks, &world, 120, s);
  }
  if (!strcmp(s, "revoke_kill9")) {
    int codes[3], sigs[3];
    if (t_run(3, revoke_kill9, NULL, NULL, 60, codes, sigs) != 0) {
      fprintf(stderr, "revoke_kill9: timed out\n");
      return 1;
    }
    if (sigs[2] != SIGKILL) {
      fprintf(stderr, "revoke_kill9: rank 2 was not killed (exit %d, signal %d)\n", codes[2],
              sigs[2]);
      return 1;
    }
    return t_exits_ok(2, codes, sigs, s);
  }
  if (!strcmp(s, "shrink") || !strcmp(s, "shrink_second") || !strcmp(s, "shrink_slow")) {
    int world = argc > 2 ? atoi(argv[2]) : 3, trials = argc > 3 ? atoi(argv[3]) : 3;
    if (world < 3 || world > T_MAXW || trials < 1) return 2;
    t_seed_announce("test_elastic");
    return shrink_trials(world, trials, !strcmp(s, "shrink_second"), !strcmp(s, "shrink_slow"));
  }
  fprintf(stderr,
          "usage: test_elastic revoke_blocked|revoke_kill9|revoke_leaks|"
          "shrink_leaks [world]|shrink|shrink_second|shrink_slow [world] [trials]\n");
  return 2;
}
