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
  if (rank == 0) printf("revoke_leaks: %d fds, %d threads, %d shm files before and after\n",
                        fds1, tasks1, shm1);
  return 0;
}

int main(int argc, char **argv) {
  const char *s = argc > 1 ? argv[1] : "";
  const char *tp = getenv("RR_TRANSPORT");
  printf("%s over %s\n", s, tp ? tp : "auto");
  if (!strcmp(s, "revoke_blocked")) return t_run_all(3, revoke_blocked, NULL, 60, s);
  if (!strcmp(s, "revoke_leaks")) return t_run_all(3, revoke_leaks, NULL, 120, s);
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
  fprintf(stderr, "usage: test_elastic revoke_blocked|revoke_kill9|revoke_leaks\n");
  return 2;
}
