/* rr_spawn (group/spawn.c): success with a real collective, and every failure path — a worker
 * that returns non-zero stops the others with SIGTERM; one that ignores SIGTERM is SIGKILLed
 * after RR_GRACE_PERIOD; a worker killed by a signal is reported with it; return values that
 * are not 0..255 (256, -1) still fail; and children of the caller that rr_spawn did not start
 * are never reaped by it.
 *
 *   test_spawn <success|fail_code|grace_kill|signal|exit_codes|unrelated_child>
 *
 * Workers write files into a fresh directory: ready.R once their SIGTERM handler is
 * installed, sig.R with the number of a SIGTERM they received, pid.R with their pid. Each
 * case sets RR_GRACE_PERIOD (and RR_TIMEOUT) itself, so its expectations are exact. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

static char g_dir[256];
static char g_sig_path[300]; /* DIR/sig.RANK, set before the handler is installed */
static int g_ignore_term;    /* the worker survives SIGTERM */

static void path_of(char *buf, size_t n, const char *what, int rank) {
  snprintf(buf, n, "%s/%s.%d", g_dir, what, rank);
}

/* Only async-signal-safe calls. */
static void on_term(int sig) {
  int saved = errno;
  int fd = open(g_sig_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    char b[3] = {(char)('0' + sig / 10), (char)('0' + sig % 10), '\n'};
    if (write(fd, b, 3) != 3) _exit(120);
    if (close(fd) != 0) _exit(120);
  }
  errno = saved;
  if (g_ignore_term) return;
  signal(sig, SIG_DFL);
  raise(sig);
}

static void write_file(const char *what, int rank, long value) {
  char path[300], tmp[310];
  path_of(path, sizeof path, what, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%ld\n", value) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
    fprintf(stderr, "rank %d: writing %s: %s\n", rank, path, strerror(errno));
    _exit(120);
  }
}

/* The number in DIR/what.rank, or -1 when the file is missing. */
static long read_file(const char *what, int rank) {
  char path[300];
  path_of(path, sizeof path, what, rank);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  if (fscanf(f, "%ld", &v) != 1) v = -2;
  if (fclose(f) != 0) v = -3;
  return v;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0)
    if (errno != EINTR) _exit(121);
}

/* Worker start: handler for SIGTERM, pid and ready files. */
static void worker_setup(int rank, int ignore_term) {
  t_rank = rank;
  g_ignore_term = ignore_term;
  path_of(g_sig_path, sizeof g_sig_path, "sig", rank);
  struct sigaction sa = {.sa_handler = on_term};
  if (sigaction(SIGTERM, &sa, NULL) != 0) _exit(122);
  write_file("pid", rank, (long)getpid());
  write_file("ready", rank, 1);
}

/* Waits (up to 10 s) until ranks 0..n-1 have written their ready files. */
static void wait_ready(int n) {
  for (int r = 0; r < n; r++)
    for (int i = 0; i < 1000 && read_file("ready", r) != 1; i++) sleep_ms(10);
}

static void block_forever(void) {
  for (;;) pause();
}

/* rr_init_process_group, blocked in the rendezvous while a rank never comes. */
static void block_in_init(void) {
  rr_pg *pg;
  int st = rr_init_process_group(&pg, NULL);
  fprintf(stderr, "rank %d: rr_init_process_group returned %s (%s)\n", t_rank, rr_status_name(st),
          st == RR_OK ? "" : rr_last_error());
  /* Returning early is fine for the library: the rank that hosts the store (rank 0) may take
   * its SIGTERM first, and then this rendezvous fails with "store closed" before rr_spawn's
   * signal reaches us. What the tests check is that the SIGTERM comes, so wait for it (if it
   * never does, rr_spawn's SIGKILL after the grace period ends us and the test's time check
   * fails). */
  block_forever();
}

static int make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "%s/rr-spawn-test.XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_dir)) {
    fprintf(stderr, "mkdtemp %s: %s\n", g_dir, strerror(errno));
    return -1;
  }
  return 0;
}

static void remove_dir(int n) {
  static const char *const what[] = {"ready", "sig", "pid"};
  for (int r = 0; r < n; r++)
    for (size_t k = 0; k < sizeof what / sizeof what[0]; k++) {
      char path[300];
      path_of(path, sizeof path, what[k], r);
      if (unlink(path) != 0 && errno != ENOENT)
        fprintf(stderr, "unlink %s: %s\n", path, strerror(errno));
    }
  if (rmdir(g_dir) != 0) fprintf(stderr, "rmdir %s: %s\n", g_dir, strerror(errno));
}

static void set_env(const char *name, const char *value) {
  if (setenv(name, value, 1) != 0) {
    perror("setenv");
    exit(2);
  }
}

/* ---------------------------------------------------------------------------------------- */

/* Every rank all-reduces rank + 1 and checks the sum exactly. */
static int success_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int world = rr_get_world_size(pg);
  int32_t v[5];
  for (int i = 0; i < 5; i++) v[i] = (rank + 1) * (i + 1);
  T_OK(rr_all_reduce(pg, v, v, 5, RR_INT32, RR_SUM));
  for (int i = 0; i < 5; i++)
    T_CHECK(v[i] == world * (world + 1) / 2 * (i + 1), "v[%d] = %d", i, (int)v[i]);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

static int case_success(void) {
  rr_spawn_status st = {7, 7, 7};
  int rc = rr_spawn(3, success_rank, NULL, &st);
  T_CHECK(rc == RR_OK, "rr_spawn returned %s: %s", rr_status_name(rc), rr_last_error());
  T_CHECK(st.failed_rank == -1 && st.exit_code == 0 && st.signal == 0, "status {%d, %d, %d}",
          st.failed_rank, st.exit_code, st.signal);
  return 0;
}

/* Rank 2 returns 3 once the others are blocked: ranks 0 and 3 in the rendezvous of
 * rr_init_process_group (which waits for rank 2 for RR_TIMEOUT = 60 s), rank 1 in pause(). */
static int fail_rank(int rank, void *arg) {
  (void)arg;
  worker_setup(rank, 0);
  if (rank == 2) {
    wait_ready(4);
    sleep_ms(200);
    return 3;
  }
  if (rank == 1) block_forever();
  block_in_init();
  return 0;
}

static int case_fail_code(void) {
  set_env("RR_GRACE_PERIOD", "30");
  set_env("RR_TIMEOUT", "60");
  if (make_dir()) return 1;
  rr_spawn_status st;
  double t0 = t_now();
  int rc = rr_spawn(4, fail_rank, NULL, &st);
  double dt = t_now() - t0;
  const char *msg = rr_last_error();
  printf("rr_spawn: %s in %.3f s: %s\n", rr_status_name(rc), dt, msg);
  T_CHECK(rc == RR_EPEER, "rr_spawn returned %s", rr_status_name(rc));
  T_CHECK(st.failed_rank == 2 && st.exit_code == 3 && st.signal == 0, "status {%d, %d, %d}",
          st.failed_rank, st.exit_code, st.signal);
  T_HAS(msg, "rr_spawn: rank 2 exited with code 3");
  /* SIGTERM, not the SIGKILL 30 s later, stopped them. */
  T_CHECK(dt < 10, "took %.3f s: the others were not stopped by SIGTERM", dt);
  for (int r = 0; r < 4; r++) {
    if (r == 2) continue;
    T_CHECK(read_file("sig", r) == SIGTERM, "rank %d: sig file says %ld, expected %d", r,
            read_file("sig", r), SIGTERM);
    pid_t p = (pid_t)read_file("pid", r);
    T_CHECK(p > 0 && kill(p, 0) != 0 && errno == ESRCH, "rank %d (pid %d) still exists", r, (int)p);
  }
  T_CHECK(read_file("sig", 2) == -1, "the failed rank got a signal too");
  remove_dir(4);
  return 0;
}

/* Rank 0 returns 5; rank 1 ignores SIGTERM (only SIGKILL ends it); rank 2 sleeps. */
static int grace_rank(int rank, void *arg) {
  (void)arg;
  worker_setup(rank, rank == 1);
  if (rank == 0) {
    wait_ready(3);
    return 5;
  }
  /* If rr_spawn never sent SIGKILL, SIGALRM ends rank 1 and the time check fails, inside
   * the test rather than at CTest's limit. */
  if (rank == 1) alarm(20);
  block_forever();
  return 0;
}

static int case_grace_kill(void) {
  set_env("RR_GRACE_PERIOD", "1");
  if (make_dir()) return 1;
  rr_spawn_status st;
  double t0 = t_now();
  int rc = rr_spawn(3, grace_rank, NULL, &st);
  double dt = t_now() - t0;
  const char *msg = rr_last_error();
  printf("rr_spawn: %s in %.3f s: %s\n", rr_status_name(rc), dt, msg);
  T_CHECK(rc == RR_EPEER, "rr_spawn returned %s", rr_status_name(rc));
  T_CHECK(st.failed_rank == 0 && st.exit_code == 5 && st.signal == 0, "status {%d, %d, %d}",
          st.failed_rank, st.exit_code, st.signal);
  T_HAS(msg, "rr_spawn: rank 0 exited with code 5");
  /* Rank 1 lived on through the 1 s grace period, then was killed: bounded either way. */
  T_CHECK(dt >= 1.0, "returned after %.3f s, before the 1 s grace period was over", dt);
  T_CHECK(dt < 5.0, "took %.3f s with a 1 s grace period", dt);
  for (int r = 1; r < 3; r++) {
    T_CHECK(read_file("sig", r) == SIGTERM, "rank %d: sig file says %ld", r, read_file("sig", r));
    pid_t p = (pid_t)read_file("pid", r);
    T_CHECK(p > 0 && kill(p, 0) != 0 && errno == ESRCH, "rank %d (pid %d) still exists", r, (int)p);
  }
  remove_dir(3);
  return 0;
}

/* The victim kills itself with arg's signal once the others are ready; the others sleep. */
struct sig_arg {
  int victim, sig;
};
static int signal_rank(int rank, void *arg) {
  const struct sig_arg *a = arg;
  worker_setup(rank, 0);
  if (rank == a->victim) {
    struct rlimit no_core = {0, 0}; /* a SIGSEGV test should not leave a core file */
    if (setrlimit(RLIMIT_CORE, &no_core) != 0) return 124;
    wait_ready(3);
    signal(a->sig, SIG_DFL);
    raise(a->sig);
    return 124; /* not reached */
  }
  block_forever();
  return 0;
}

static int case_signal(void) {
  set_env("RR_GRACE_PERIOD", "30");
  const struct sig_arg cases[] = {{1, SIGKILL}, {0, SIGSEGV}, {2, SIGABRT}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    if (make_dir()) return 1;
    rr_spawn_status st;
    double t0 = t_now();
    int rc = rr_spawn(3, signal_rank, (void *)&cases[k], &st);
    double dt = t_now() - t0;
    const char *msg = rr_last_error();
    printf("rr_spawn: %s in %.3f s: %s\n", rr_status_name(rc), dt, msg);
    T_CHECK(rc == RR_EPEER, "rr_spawn returned %s", rr_status_name(rc));
    T_CHECK(st.failed_rank == cases[k].victim && st.exit_code == 0 && st.signal == cases[k].sig,
            "status {%d, %d, %d}, expected {%d, 0, %d}", st.failed_rank, st.exit_code, st.signal,
            cases[k].victim, cases[k].sig);
    char want[96];
    snprintf(want, sizeof want, "rr_spawn: rank %d was killed by signal %d (%s)", cases[k].victim,
             cases[k].sig, strsignal(cases[k].sig));
    T_HAS(msg, want);
    T_CHECK(dt < 10, "took %.3f s", dt);
    for (int r = 0; r < 3; r++)
      if (r != cases[k].victim)
        T_CHECK(read_file("sig", r) == SIGTERM, "rank %d: sig file says %ld", r,
                read_file("sig", r));
    remove_dir(3);
  }
  return 0;
}

/* Rank 1 returns *arg, rank 0 returns 0. */
static int value_rank(int rank, void *arg) {
  return rank == 1 ? *(const int *)arg : 0;
}

static int case_exit_codes(void) {
  set_env("RR_GRACE_PERIOD", "30");
  /* fn's return value -> the exit code rr_spawn reports (0: success). */
  const int map[][2] = {{0, 0},   {1, 1},   {7, 7},  {255, 255}, {256, 1},
                        {512, 1}, {257, 1}, {-1, 1}, {-256, 1},  {1 << 30, 1}};
  for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
    rr_spawn_status st;
    int rc = rr_spawn(2, value_rank, (void *)&map[k][0], &st);
    printf("return %d: rr_spawn %s, status {%d, %d, %d}: %s\n", map[k][0], rr_status_name(rc),
           st.failed_rank, st.exit_code, st.signal, rc == RR_OK ? "" : rr_last_error());
    if (map[k][1] == 0) {
      T_CHECK(rc == RR_OK && st.failed_rank == -1, "return 0 failed: %s", rr_last_error());
      continue;
    }
    T_CHECK(rc == RR_EPEER, "a worker returning %d: rr_spawn returned %s", map[k][0],
            rr_status_name(rc));
    T_CHECK(st.failed_rank == 1 && st.exit_code == map[k][1] && st.signal == 0,
            "a worker returning %d: status {%d, %d, %d}, expected {1, %d, 0}", map[k][0],
            st.failed_rank, st.exit_code, st.signal, map[k][1]);
    char want[64];
    snprintf(want, sizeof want, "rr_spawn: rank 1 exited with code %d", map[k][1]);
    T_HAS(rr_last_error(), want);
  }
  return 0;
}

/* Workers that take 300 ms, so the caller's own child has exited (a zombie) meanwhile. */
static int slow_rank(int rank, void *arg) {
  sleep_ms(300);
  return rank == 1 && *(const int *)arg ? 9 : 0;
}

static pid_t fork_child(int code, int forever) {
  pid_t parent = getpid(), p = fork();
  if (p == 0) {
    if (forever) {
      /* "Forever" ends with the test, even one that fails before it kills this child. */
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
      block_forever();
    }
    _exit(code);
  }
  return p;
}

static int case_unrelated_child(void) {
  set_env("RR_GRACE_PERIOD", "30");
  for (int failing = 0; failing < 2; failing++) {
    /* One child exits at once, one runs until we kill it. */
    pid_t quick = fork_child(42, 0), slow = fork_child(0, 1);
    T_CHECK(quick > 0 && slow > 0, "fork: %s", strerror(errno));
    rr_spawn_status st;
    double t0 = t_now();
    int rc = rr_spawn(2, slow_rank, &failing, &st);
    double dt = t_now() - t0;
    printf("%s job: rr_spawn %s in %.3f s\n", failing ? "failing" : "good", rr_status_name(rc), dt);
    if (failing) {
      T_CHECK(rc == RR_EPEER && st.failed_rank == 1 && st.exit_code == 9,
              "rr_spawn returned %s, status {%d, %d, %d}", rr_status_name(rc), st.failed_rank,
              st.exit_code, st.signal);
      T_HAS(rr_last_error(), "rr_spawn: rank 1 exited with code 9");
    } else {
      T_CHECK(rc == RR_OK, "rr_spawn returned %s: %s", rr_status_name(rc), rr_last_error());
    }
    /* rr_spawn did not wait for the still-running child of ours... */
    T_CHECK(dt < 10, "rr_spawn took %.3f s", dt);
    /* ...and did not reap either child: both are still ours to wait for. */
    int ws = 0;
    pid_t w = waitpid(quick, &ws, WNOHANG);
    T_CHECK(w == quick, "waitpid(quick child %d) returned %d (%s): rr_spawn reaped it", (int)quick,
            (int)w, w < 0 ? strerror(errno) : "still running?");
    T_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 42, "quick child: wait status %#x", ws);
    w = waitpid(slow, &ws, WNOHANG);
    T_CHECK(w == 0, "waitpid(running child %d) returned %d (%s)", (int)slow, (int)w,
            w < 0 ? strerror(errno) : "exited");
    T_CHECK(kill(slow, SIGKILL) == 0, "kill: %s", strerror(errno));
    w = waitpid(slow, &ws, 0);
    T_CHECK(w == slow && WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
            "waitpid(slow child) returned %d, status %#x", (int)w, ws);
  }
  return 0;
}

/* The store's port is held from before the workers start: rank 0 gets the listening socket
 * (RR_STORE_LISTEN_FD, already listening on MASTER_PORT, so nobody else could bind it in
 * between), the others get none, and the job runs on it. Then two jobs at once, 20 times:
 * each must get its own port and finish. */
static int listener_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  const char *fd = getenv("RR_STORE_LISTEN_FD"), *port = getenv("MASTER_PORT");
  if (rank == 0) {
    T_CHECK(fd != NULL, "rank 0 got no listener");
    int listening = 0;
    socklen_t ol = sizeof listening;
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    T_CHECK(getsockopt(atoi(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) == 0 && listening,
            "RR_STORE_LISTEN_FD=%s is not a listening socket", fd);
    T_CHECK(
        getsockname(atoi(fd), (struct sockaddr *)&a, &al) == 0 && ntohs(a.sin_port) == atoi(port),
        "the listener is not on MASTER_PORT=%s", port);
  } else {
    T_CHECK(fd == NULL, "rank %d got RR_STORE_LISTEN_FD=%s", rank, fd);
  }
  return success_rank(rank, NULL);
}

static int case_store_listener(void) {
  set_env("RR_TIMEOUT", "30");
  int rc = rr_spawn(3, listener_rank, NULL, NULL);
  T_CHECK(rc == RR_OK, "rr_spawn returned %s: %s", rr_status_name(rc), rr_last_error());
  for (int round = 0; round < 20; round++) {
    pid_t p = fork();
    T_CHECK(p >= 0, "fork: %s", strerror(errno));
    int mine = rr_spawn(3, success_rank, NULL, NULL);
    if (p == 0) _exit(mine == RR_OK ? 0 : 1);
    int ws = 0;
    T_CHECK(waitpid(p, &ws, 0) == p, "waitpid");
    T_CHECK(mine == RR_OK && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
            "round %d: two rr_spawn jobs at once: %s / child exit %d: %s", round,
            rr_status_name(mine), WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, rr_last_error());
  }
  return 0;
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    int (*fn)(void);
  } cases[] = {{"success", case_success},
               {"fail_code", case_fail_code},
               {"grace_kill", case_grace_kill},
               {"signal", case_signal},
               {"exit_codes", case_exit_codes},
               {"unrelated_child", case_unrelated_child},
               {"store_listener", case_store_listener}};
  if (argc == 2)
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
      if (strcmp(argv[1], cases[i].name) == 0) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        int rc = cases[i].fn();
        printf("%s: %s\n", argv[1], rc == 0 ? "PASS" : "FAIL");
        return rc;
      }
  fprintf(stderr,
          "usage: %s <success|fail_code|grace_kill|signal|exit_codes|unrelated_child|"
          "store_listener>\n",
          argv[0]);
  return 2;
}
