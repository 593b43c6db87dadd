/* A rank that forks without exec (issue 38 item 5): the child must not keep the group or the
 * store alive, and must not be able to use them.
 *
 *   test_fork kill        3 ranks loop all-reduces; rank 1 forks a child that only sleeps,
 *                         then rank 1 is killed (SIGKILL). Ranks 0 and 2 must fail within 5 s
 *                         (RR_TIMEOUT is 15 s: a child holding rank 1's sockets shows as a
 *                         15 s wait) naming rank 1. Over shared memory, or with
 *                         RR_TRANSPORT=tcp over loopback sockets.
 *   test_fork kill_clone  the same, the child made by a raw clone() that runs no fork hook,
 *                         so it does hold rank 1's sockets: the survivors must see rank 1's
 *                         process exit (its pidfd: ranks on one host over shared memory) and
 *                         say so.
 *   test_fork child_call  rank 0 forks a child that calls collectives on the inherited group:
 *                         each fails at once with RR_ESTATE / RR_EABORTED saying the process
 *                         was forked, the child holds no socket (the growth's listener
 *                         included), and destroying the group there returns at once; then
 *                         the parent's group still works (exact sums with rank 1) and
 *                         destroys cleanly.
 *   test_fork store       a store master forks a child, then exits without a word while a
 *                         client waits on the store: the client must fail at once, not at its
 *                         timeout (the child must not hold the server's connections). The
 *                         child inherits no socket, and its own store calls work over a
 *                         connection of their own.
 *   test_fork bye         a rank whose group is freed by an exit handler, and one that
 *                         destroys it, while the other rank still needs it: the message says
 *                         which (the goodbye's reason).
 *
 * The children a test forks are killed at its end (their pids in a scratch directory). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness.h"

typedef struct fork_case {
  int clone; /* kill: make the child with a raw clone(), not fork() */
  int victim;
  double killed_at;
  char dir[64]; /* scratch: ready files, the children's pids */
} fork_case;

/* A child that holds whatever it inherited for a while and does nothing (bounded, in case the
 * test dies before killing it). */
static void idle_child(void) {
  for (int i = 0; i < 250; i++) usleep(100 * 1000);
  _exit(0);
}

static void put_file(const char *dir, const char *name, long value) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (f) {
    fprintf(f, "%ld\n", value);
    fclose(f);
  }
}

static int read_file(const char *dir, const char *name, long *value) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int ok = fscanf(f, "%ld", value) == 1;
  fclose(f);
  return ok ? 0 : -1;
}

/* Kill the forked children the ranks left (pid files "child*"), then empty the directory. */
static void cleanup(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    long pid;
    if (!strncmp(e->d_name, "child", 5) && read_file(dir, e->d_name, &pid) == 0 && pid > 1)
      kill((pid_t)pid, SIGKILL);
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* Sockets and pidfds this process holds. */
static int count_fds(const char *kind) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[300], target[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t l = readlink(path, target, sizeof target - 1);
    if (l <= 0) continue;
    target[l] = '\0';
    n += strstr(target, kind) != NULL;
  }
  closedir(d);
  return n;
}

/* ---- kill, kill_clone ---- */

static int kill_rank(int rank, void *arg) {
  fork_case *fc = arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  size_t n = (size_t)1 << 16;
  float *x = calloc(n, sizeof *x);
  T_CHECK(x != NULL, "out of memory");
  T_OK(rr_all_reduce(pg, x, x, n, RR_FLOAT32, RR_SUM));
  if (rank == fc->victim) {
    /* A helper forked without exec, as a DataLoader worker or a forked logger is. */
    long child = fc->clone ? syscall(SYS_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, NULL)
                           : (long)fork();
    T_CHECK(child >= 0, "fork: %s", strerror(errno));
    if (child == 0) idle_child();
    put_file(fc->dir, "child1", child);
  }
  char name[16];
  snprintf(name, sizeof name, "ready%d", rank);
  put_file(fc->dir, name, 1);
  int st;
  do st = rr_all_reduce(pg, x, x, n, RR_FLOAT32, RR_SUM);
  while (st == RR_OK);
  const char *e = rr_last_error();
  char want[32];
  snprintf(want, sizeof want, "rank %d", fc->victim);
  T_CHECK(st == RR_EPEER, "status %s: %s", rr_status_name(st), e);
  T_HAS(e, want);
  if (fc->clone)
    T_HAS(e, "its process (pid"); /* seen by its pid: the child holds its sockets */
  else
    T_CHECK(strstr(e, "lost rank") || strstr(e, "closed by the peer") || strstr(e, "reset"),
            "message does not say the peer is gone: %s", e);
  printf("rank %d: %s\n", rank, e);
  free(x);
  (void)rr_destroy_process_group(pg);
  return 0;
}

static void kill_victim(const int *pids, int n, void *arg) {
  fork_case *fc = arg;
  for (double end = t_now() + 30; t_now() < end;) {
    int ready = 0;
    long v;
    for (int r = 0; r < n; r++) {
      char name[16];
      snprintf(name, sizeof name, "ready%d", r);
      ready += read_file(fc->dir, name, &v) == 0;
    }
    if (ready == n) break;
    usleep(10000);
  }
  usleep(200 * 1000); /* inside the loop of all-reduces */
  kill(pids[fc->victim], SIGKILL);
  fc->killed_at = t_now();
}

static int kill_case(int clone) {
  fork_case fc = {.clone = clone, .victim = 1};
  snprintf(fc.dir, sizeof fc.dir, "/tmp/rr-fork-XXXXXX");
  T_CHECK(mkdtemp(fc.dir) != NULL, "mkdtemp: %s", strerror(errno));
  int codes[3], sigs[3];
  int rc = t_run(3, kill_rank, &fc, kill_victim, 40, codes, sigs);
  double took = t_now() - fc.killed_at;
  cleanup(fc.dir);
  T_CHECK(rc == 0, "ranks still running 40 s after the start");
  printf("%s: survivors done %.2f s after rank 1 was killed (RR_TIMEOUT=15)\n",
         clone ? "clone()d child" : "forked child", took);
  int bad = 0;
  for (int r = 0; r < 3; r++)
    if (r != fc.victim && (codes[r] != 0 || sigs[r] != 0))
      bad = 1, fprintf(stderr, "survivor rank %d: exit %d signal %d\n", r, codes[r], sigs[r]);
  if (sigs[fc.victim] != SIGKILL) bad = 1, fprintf(stderr, "rank 1 was not killed\n");
  if (took > 5.0)
    bad = 1, fprintf(stderr, "survivors took %.1f s: the child kept rank 1's sockets open\n", took);
  return bad;
}

/* ---- child_call ---- */

static int forked_child_calls(rr_pg *pg) {
  float x[16] = {0};
  double t0 = t_now();
  int st = rr_all_reduce(pg, x, x, 16, RR_FLOAT32, RR_SUM);
  const char *e = rr_last_error();
  T_CHECK(st == RR_ESTATE, "all_reduce in the child: %s: %s", rr_status_name(st), e);
  T_HAS(e, "forked");
  st = rr_barrier(pg);
  T_CHECK(st != RR_OK, "barrier in the child succeeded");
  T_HAS(rr_last_error(), "forked");
  rr_work *w = NULL;
  st = rr_all_reduce_async(pg, x, x, 16, RR_FLOAT32, RR_SUM, &w);
  if (st == RR_OK) {
    st = rr_work_wait(w, 0);
    rr_work_free(w);
  }
  T_CHECK(st != RR_OK, "async all_reduce in the child succeeded");
  T_HAS(rr_last_error(), "forked");
  double dt = t_now() - t0;
  T_CHECK(dt < 2.0, "the child's calls took %.1f s to fail", dt);
  T_CHECK(count_fds("socket:") == 0, "the child still holds %d socket(s)", count_fds("socket:"));
  T_CHECK(count_fds("pidfd") == 0, "the child still holds %d pidfd(s)", count_fds("pidfd"));
  return 0;
}

static int child_call_rank(int rank, void *arg) {
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  /* Rank 0 holds the growth's listener from here on: the child must not keep it either. */
  char grow[32];
  int waiting = 0;
  snprintf(grow, sizeof grow, "127.0.0.1:%d", *(const int *)arg);
  T_OK(rr_pg_grow_pending(pg, grow, &waiting));
  int32_t v[1000];
  for (int round = 0; round < 4; round++) {
    if (rank == 0 && round == 1) {
      pid_t child = fork();
      T_CHECK(child >= 0, "fork: %s", strerror(errno));
      if (child == 0) {
        alarm(20); /* a hang in the child becomes a failure, not a stuck test */
        int rc = forked_child_calls(pg);
        /* Destroying the child's copy (Python's finalizers do, as a forked child exits)
         * frees it at once: no worker thread to join here, nothing said to the peers. */
        double t0 = t_now();
        int st = rc ? RR_OK : rr_destroy_process_group(pg);
        if (!rc && (st != RR_OK || t_now() - t0 > 1.0)) {
          fprintf(stderr, "rank 0's child: destroy: %s after %.1f s: %s\n", rr_status_name(st),
                  t_now() - t0, rr_last_error());
          rc = 1;
        }
        fflush(NULL);
        _exit(rc);
      }
      int ws;
      T_CHECK(waitpid(child, &ws, 0) == child, "waitpid: %s", strerror(errno));
      T_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the forked child failed (status %#x)", ws);
    }
    for (int i = 0; i < 1000; i++) v[i] = (rank + 1) * (i + round);
    T_OK(rr_all_reduce(pg, v, v, 1000, RR_INT32, RR_SUM));
    for (int i = 0; i < 1000; i++)
      T_CHECK(v[i] == 3 * (i + round), "round %d: element %d is %d", round, i, (int)v[i]);
  }
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---- store ---- */

static int store_rank(int rank, void *arg) {
  fork_case *fc = arg;
  const char *port_s = getenv("MASTER_PORT");
  int port = port_s ? atoi(port_s) : 0;
  rr_store *st;
  T_OK(rr_store_tcp("127.0.0.1", port, rank == 0, 20000, &st));
  if (rank == 0) {
    T_OK(rr_store_set(st, "up", "1", 1));
    pid_t child = fork();
    T_CHECK(child >= 0, "fork: %s", strerror(errno));
    if (child == 0) {
      /* It holds none of the server's or the pool's connections, and its store calls go
       * over a connection of its own. */
      int held = count_fds("socket:");
      void *v = NULL;
      size_t len = 0;
      int s = rr_store_get(st, "up", &v, &len);
      int ok = held == 0 && s == RR_OK && len == 1 && !memcmp(v, "1", 1);
      if (!ok)
        fprintf(stderr, "forked child: %d socket(s) inherited; store get: %s: %s\n", held,
                rr_status_name(s), s == RR_OK ? "" : rr_last_error());
      free(v);
      put_file(fc->dir, "verdict", ok);
      idle_child();
    }
    put_file(fc->dir, "child0", child);
    long verdict = -1;
    for (double end = t_now() + 10; t_now() < end && read_file(fc->dir, "verdict", &verdict);)
      usleep(10000);
    T_CHECK(verdict == 1, "the forked child's store call (verdict %ld)", verdict);
    /* Rank 1 is parked in a wait on the server; now this process dies without a word. */
    const char *keys[] = {"waiting"};
    T_OK(rr_store_wait(st, keys, 1, 10000));
    usleep(200 * 1000);
    fflush(NULL);
    _exit(0);
  }
  T_OK(rr_store_set(st, "waiting", "1", 1));
  const char *never[] = {"never"};
  double t0 = t_now();
  int s = rr_store_wait(st, never, 1, 15000);
  double dt = t_now() - t0;
  printf("client: wait returned %s after %.2f s: %s\n", rr_status_name(s), dt, rr_last_error());
  T_CHECK(s != RR_OK, "the wait succeeded");
  T_CHECK(dt < 5.0, "the client waited %.1f s: the master's child held its connection", dt);
  rr_store_free(st);
  return 0;
}

static int store_case(void) {
  fork_case fc = {0};
  snprintf(fc.dir, sizeof fc.dir, "/tmp/rr-fork-XXXXXX");
  T_CHECK(mkdtemp(fc.dir) != NULL, "mkdtemp: %s", strerror(errno));
  int codes[2], sigs[2];
  int rc = t_run(2, store_rank, &fc, NULL, 40, codes, sigs);
  cleanup(fc.dir);
  T_CHECK(rc == 0, "still running 40 s after the start");
  return t_exits_ok(2, codes, sigs, "store");
}

/* ---- bye ---- */

static rr_pg *bye_pg;
static void free_at_exit(void) {
  (void)rr_destroy_process_group(bye_pg);
}

static int bye_rank(int rank, void *arg) {
  int at_exit = *(int *)arg;
  /* Registered before the group exists, as a program's cleanup usually is: it runs after the
   * library's own exit handler, so the goodbye says the process is ending. */
  if (rank == 1 && at_exit) T_CHECK(atexit(free_at_exit) == 0, "atexit");
  T_OK(rr_init_process_group(&bye_pg, NULL));
  T_OK(rr_barrier(bye_pg));
  if (rank == 1) {
    if (!at_exit) {
      T_OK(rr_destroy_process_group(bye_pg));
      sleep(1); /* the process lives on: only the group went */
    }
    fflush(NULL);
    exit(0); /* not _exit: the exit handlers run */
  }
  float x[1000] = {0};
  int st = rr_all_reduce(bye_pg, x, x, 1000, RR_FLOAT32, RR_SUM); /* rank 1 never joins */
  const char *e = rr_last_error();
  printf("rank 0 (%s): %s\n", at_exit ? "freed at exit" : "destroyed", e);
  T_CHECK(st == RR_EPEER, "status %s: %s", rr_status_name(st), e);
  if (at_exit)
    T_HAS(e, "rank 1 exited without destroying its process group first");
  else
    T_HAS(e, "rank 1 destroyed its process group while this call still needed it");
  (void)rr_destroy_process_group(bye_pg);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_fork kill|kill_clone|child_call|store|bye\n");
    return 2;
  }
  t_rank = -1;
  setenv("RR_TIMEOUT", "15", 1); /* a wait for the dead shows as 15 s, not 30 min */
  const char *s = argv[1];
  if (!strcmp(s, "kill")) return kill_case(0);
  if (!strcmp(s, "kill_clone")) return kill_case(1);
  if (!strcmp(s, "child_call")) {
    int grow_port = t_free_port();
    return t_run_all(2, child_call_rank, &grow_port, 40, s);
  }
  if (!strcmp(s, "store")) return store_case();
  if (!strcmp(s, "bye")) {
    int at_exit = 1, destroyed = 0;
    return t_run_all(2, bye_rank, &at_exit, 40, "bye at exit") |
           t_run_all(2, bye_rank, &destroyed, 40, "bye destroyed");
  }
  fprintf(stderr, "unknown scenario %s\n", s);
  return 2;
}
