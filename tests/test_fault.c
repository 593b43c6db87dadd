/* Faults: dead, late, slow and duplicate ranks, and a wrong environment. Each scenario
 * asserts what every rank sees: the status, that the message names the rank and the cause,
 * and that it arrives within a bounded time.
 *
 *   test_fault <scenario>
 *
 * transport_mismatch, late_rank, kill9, timeout, wait_timeout, destroy_early, abort,
 * port_in_use, unreachable, env_errors, env_params, env_transport, env_debug, env_ranges,
 * duplicate_rank, world_mismatch
 *
 * Bad arguments and mismatched calls: test_fault_args.c. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness.h"

/* ---- ranks with different RR_TRANSPORT: init fails saying so, not "mismatched calls" ---- */
static int transport_mismatch(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  if (rank == 2) setenv("RR_TRANSPORT", "auto", 1); /* the others run with tcp (the env) */
  rr_pg *pg = (rr_pg *)1;
  double t0 = t_now();
  int st = rr_init_process_group(&pg, NULL);
  double dt = t_now() - t0;
  const char *e = rr_last_error();
  T_CHECK(st != RR_OK && pg == NULL, "init succeeded (%s)", rr_status_name(st));
  T_CHECK(dt < 10.0, "took %.1f s to fail", dt);
  T_CHECK(!strstr(e, "mismatched calls"), "blamed on mismatched calls: %s", e);
  /* A rank that got every record says what differs; one that lost the race with rank 0
   * (which leaves at once, taking the store) says the store went away. */
  if (strstr(e, "RR_TRANSPORT differs between the ranks")) {
    T_CHECK(st == RR_EMISMATCH, "status %s for a transport mismatch", rr_status_name(st));
    T_HAS(e, "'tcp'");
    T_HAS(e, "'auto'");
    if (rank == 0) printf("transport_mismatch: rank 0: %s\n", e);
  } else {
    T_CHECK(rank != 0, "rank 0 holds every record but did not name RR_TRANSPORT: %s", e);
    T_HAS(e, "rendezvous store");
  }
  return 0;
}

/* ---- a rank that never joins: everyone else names it within the timeout ---- */
static int late_rank(int rank, void *arg) {
  (void)arg;
  if (rank == 3) {
    sleep(8);
    return 0;
  }
  double t0 = t_now();
  rr_pg *pg;
  int st = rr_init_process_group(&pg, NULL);
  double dt = t_now() - t0;
  T_CHECK(st == RR_ETIMEDOUT, "init returned %s: %s", rr_status_name(st), rr_last_error());
  T_HAS(rr_last_error(), "rank 3 to join");
  T_HAS(rr_last_error(), "3 of 4 arrived");
  T_CHECK(dt >= 1.5 && dt < 5.0, "reported after %.1f s with RR_TIMEOUT=2", dt);
  return 0;
}

/* ---- kill -9 during collectives: survivors name the dead rank fast ---- */
typedef struct kill_case {
  int victim;
  const char *coll;
  double kill_after;
  double killed_at;
  char ready_dir[64]; /* each rank drops a file here once it is inside the loop */
} kill_case;

static int kill9(int rank, void *arg) {
  kill_case *kc = arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  size_t n = strcmp(kc->coll, "barrier") ? (size_t)1 << 21 : 0;
  float *x = calloc(n + 1, sizeof *x);
  int st;
  T_OK(rr_barrier(pg)); /* everyone is in: the kill may come now */
  T_CHECK(!t_ready_mark(kc->ready_dir, rank), "cannot mark rank %d ready in %s", rank,
          kc->ready_dir);
  for (long it = 0;; it++) {
    if (!strcmp(kc->coll, "all_reduce"))
      st = rr_all_reduce(pg, x, x, n, RR_FLOAT32, RR_SUM);
    else if (!strcmp(kc->coll, "broadcast"))
      st = rr_broadcast(pg, x, x, n, RR_FLOAT32, (int)(it % 4));
    else
      st = rr_barrier(pg);
    if (st != RR_OK) break;
  }
  char want[32];
  snprintf(want, sizeof want, "rank %d", kc->victim);
  const char *e = rr_last_error();
  T_CHECK(st == RR_EPEER, "status %s: %s", rr_status_name(st), e);
  T_CHECK(strstr(e, "lost rank") || strstr(e, "closed by the peer") || strstr(e, "reset"),
          "message does not say the peer is gone: %s", e);
  T_HAS(e, want);
  free(x);
  rr_destroy_process_group(pg);
  return 0;
}

static void kill_one(const int *pids, int n, void *arg) {
  kill_case *kc = arg;
  /* Wait until every rank is running calls (slow under load), then a random moment. */
  t_ready_wait(kc->ready_dir, n, 30);
  usleep((useconds_t)(kc->kill_after * 1e6));
  kill(pids[kc->victim], SIGKILL);
  kc->killed_at = t_now();
}

/* ---- a rank that does not make the call: the others time out with a clear message ---- */
static int timeout_case(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  T_OK(rr_pg_set_timeout(pg, 2000));
  float x[1000] = {0};
  double t0 = t_now();
  if (rank == 2) {
    sleep(5); /* busy elsewhere: it misses the deadline */
    t0 = t_now();
  }
  int st = rr_all_reduce(pg, x, x, 1000, RR_FLOAT32, RR_SUM);
  double dt = t_now() - t0;
  T_CHECK(st != RR_OK, "rank %d: the call succeeded", rank);
  if (rank != 2) {
    T_CHECK(st == RR_ETIMEDOUT, "status %s: %s", rr_status_name(st), rr_last_error());
    T_HAS(rr_last_error(), "timed out after 2.0 s");
    T_CHECK(dt >= 1.9 && dt < 4.0, "gave up after %.1f s with a 2 s timeout", dt);
  } else {
    /* The late rank learns at once that the others gave up: its clock starts after its
     * sleep, and it must not wait out its own 2 s timeout. */
    T_CHECK(dt < 1.9, "late rank waited %.1f s after its sleep", dt);
  }
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- rr_work_wait with a limit: gives up, aborts, says so ---- */
static int wait_timeout(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float x[16] = {0};
  if (rank == 1) {
    sleep(3);
  } else {
    rr_work *w;
    T_OK(rr_all_reduce_async(pg, x, x, 16, RR_FLOAT32, RR_SUM, &w));
    double t0 = t_now();
    int st = rr_work_wait(w, 500);
    double dt = t_now() - t0;
    T_CHECK(st == RR_ETIMEDOUT, "status %s", rr_status_name(st));
    T_HAS(rr_last_error(), "gave up");
    T_CHECK(dt >= 0.45 && dt < 2.0, "returned after %.2f s", dt);
    rr_work_free(w);
    T_CHECK(rr_barrier(pg) == RR_EABORTED, "group still usable after the abort");
  }
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- a rank destroys its group while the others still need it ---- */
static int destroy_early(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float x[1 << 16] = {0};
  T_OK(rr_all_reduce(pg, x, x, 1 << 16, RR_FLOAT32, RR_SUM));
  if (rank == 0) {
    T_OK(rr_destroy_process_group(pg));
    return 0;
  }
  int st = rr_all_reduce(pg, x, x, 1 << 16, RR_FLOAT32, RR_SUM);
  T_CHECK(st == RR_EPEER, "status %s: %s", rr_status_name(st), rr_last_error());
  T_HAS(rr_last_error(), "rank 0");
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- rr_abort from another thread: the running call and later ones fail fast ---- */
static int abort_case(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  size_t n = (size_t)1 << 22;
  float *x = calloc(n, sizeof *x);
  t_aborter ab;
  if (rank == 1) T_CHECK(t_abort_after(&ab, pg, 300) == 0, "pthread_create");
  /* Keep the group busy until the abort lands (queued async calls too). */
  rr_work *w[4];
  for (int i = 0; i < 4; i++) T_OK(rr_all_reduce_async(pg, x, x, n, RR_FLOAT32, RR_SUM, &w[i]));
  int st = RR_OK;
  double t_fail = 0;
  for (int it = 0; st == RR_OK && it < 100000; it++) {
    st = rr_all_reduce(pg, x, x, n, RR_FLOAT32, RR_SUM);
    if (st != RR_OK) t_fail = t_now();
  }
  T_CHECK(st == RR_EABORTED, "status %s: %s", rr_status_name(st), rr_last_error());
  T_HAS(rr_last_error(), "rank 1 called rr_abort");
  for (int i = 0; i < 4; i++) {
    int ws = rr_work_wait(w[i], 0);
    T_CHECK(ws == RR_OK || ws == RR_EABORTED, "queued work %d: %s", i, rr_status_name(ws));
    rr_work_free(w[i]);
  }
  T_CHECK(rr_barrier(pg) == RR_EABORTED, "a later call did not fail");
  double t0 = t_now();
  rr_destroy_process_group(pg);
  T_CHECK(t_now() - t0 < 1.0, "destroy after abort took %.2f s", t_now() - t0);
  T_CHECK(t_fail > 0, "no failure time");
  if (rank == 1) t_thread_join(&ab.thread);
  free(x);
  return 0;
}

/* ---- abort, then destroy, from another thread while a call runs ----
 * What torch's ProcessGroup.abort() does from a timer or watchdog thread: rr_abort and
 * rr_destroy_process_group while the main thread is inside a call on the group (a blocking
 * call, or rr_work_wait(w, 0), which runs a queued call on the waiter's thread). The destroy
 * must wait for that thread to leave the group, not free the group under it (ASan:
 * heap-use-after-free on the caller's way out). */
static int abort_destroy_thread(void *arg) {
  rr_pg *pg = arg;
  usleep(300 * 1000);
  T_OK(rr_abort(pg));
  double t0 = t_now();
  rr_destroy_process_group(pg);
  T_CHECK(t_now() - t0 < 5.0, "destroy after abort took %.2f s", t_now() - t0);
  return 0;
}

static int abort_destroy(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float x[4] = {1, 2, 3, 4};
  if (rank == 0) {
    /* Rank 1 never joins this call: it runs until the abort. */
    t_thread th;
    T_CHECK(t_thread_start(&th, abort_destroy_thread, pg) == 0, "pthread_create");
    int st = rr_all_reduce(pg, x, x, 4, RR_FLOAT32, RR_SUM);
    T_CHECK(st == RR_EABORTED, "status %s: %s", rr_status_name(st), rr_last_error());
    T_HAS(rr_last_error(), "rank 0 called rr_abort");
    T_CHECK(t_thread_join(&th) == 0, "the aborting thread failed");
    return 0;
  }
  /* Rank 1 calls once the abort has landed: its call fails naming rank 0. */
  usleep(1000 * 1000);
  int st = rr_all_reduce(pg, x, x, 4, RR_FLOAT32, RR_SUM);
  T_CHECK(st != RR_OK, "a call after rank 0's abort succeeded");
  T_HAS(rr_last_error(), "rank 0");
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- duplicate RANK and inconsistent WORLD_SIZE: named, not hung ---- */
static int duplicate_rank(int rank, void *arg) {
  (void)arg;
  if (rank == 2) setenv("RANK", "1", 1); /* two processes claim rank 1; rank 2 is missing */
  rr_pg *pg;
  int st = rr_init_process_group(&pg, NULL);
  T_CHECK(st != RR_OK, "init succeeded with a duplicate rank");
  const char *e = rr_last_error();
  /* One claimant is told about the duplicate; the others time out naming rank 2. */
  if (strstr(e, "claimed by 2 processes")) return 10;
  T_HAS(e, "rank 2");
  return 0;
}

static int world_mismatch(int rank, void *arg) {
  (void)arg;
  if (rank == 1) setenv("WORLD_SIZE", "3", 1);
  rr_pg *pg;
  int st = rr_init_process_group(&pg, NULL);
  if (rank == 1) {
    T_CHECK(st == RR_EINVAL, "status %s: %s", rr_status_name(st), rr_last_error());
    T_HAS(rr_last_error(), "world size 3 but rank 0 has 2");
  } else {
    T_CHECK(st != RR_OK, "rank 0 formed a group without rank 1");
  }
  return 0;
}

/* ---- single-process scenarios ---- */
static int port_in_use(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof a;
  T_CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0,
          "cannot occupy a port");
  char port[16];
  snprintf(port, sizeof port, "%d", ntohs(a.sin_port));
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port, 1);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  rr_pg *pg;
  double t0 = t_now();
  int st = rr_init_process_group(&pg, NULL);
  T_CHECK(st == RR_EADDR, "status %s: %s", rr_status_name(st), rr_last_error());
  T_HAS(rr_last_error(), "in use");
  T_HAS(rr_last_error(), port);
  T_HAS(rr_last_error(), "rank 0");
  T_CHECK(t_now() - t0 < 1.0, "took %.1f s", t_now() - t0);
  close(fd);
  return 0;
}

static int unreachable(void) {
  char port[16];
  snprintf(port, sizeof port, "%d", t_free_port());
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port, 1);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  rr_pg *pg;
  double t0 = t_now();
  int st = rr_init_process_group(&pg, NULL);
  double dt = t_now() - t0;
  T_CHECK(st == RR_ETIMEDOUT || st == RR_EADDR, "status %s: %s", rr_status_name(st),
          rr_last_error());
  T_HAS(rr_last_error(), port);
  T_HAS(rr_last_error(), "127.0.0.1");
  T_CHECK(dt >= 1.5 && dt < 5.0, "gave up after %.1f s with RR_TIMEOUT=2", dt);
  return 0;
}

static int expect_env_error(const char *needle, int want) {
  rr_pg *pg = (rr_pg *)1;
  int st = rr_init_process_group(&pg, NULL);
  T_CHECK(st == want, "status %s, want %s: %s", rr_status_name(st), rr_status_name(want),
          rr_last_error());
  T_CHECK(pg == NULL, "*pg not NULL after a failed init");
  T_HAS(rr_last_error(), needle);
  return 0;
}

static int env_errors(void) {
  unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
  unsetenv("SLURM_PROCID"), unsetenv("SLURM_NTASKS"), unsetenv("OMPI_COMM_WORLD_RANK"),
      unsetenv("OMPI_COMM_WORLD_SIZE");
  int bad = 0;
  bad |= expect_env_error("RANK expected, but not set", RR_EENV);
  setenv("RANK", "0", 1);
  bad |= expect_env_error("WORLD_SIZE expected, but not set", RR_EENV);
  setenv("WORLD_SIZE", "2", 1);
  bad |= expect_env_error("MASTER_ADDR expected, but not set", RR_EENV);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  bad |= expect_env_error("MASTER_PORT expected, but not set", RR_EENV);
  setenv("MASTER_PORT", "70000", 1);
  bad |= expect_env_error("MASTER_PORT='70000'", RR_EENV);
  setenv("MASTER_PORT", "29500", 1);
  setenv("RANK", "abc", 1);
  bad |= expect_env_error("RANK='abc'", RR_EENV);
  setenv("RANK", "2", 1);
  bad |= expect_env_error("rank 2 is outside 0..1", RR_EINVAL);
  unsetenv("RANK"), unsetenv("WORLD_SIZE");
  setenv("SLURM_PROCID", "1", 1);
  bad |= expect_env_error("SLURM_NTASKS expected, but not set", RR_EENV);
  unsetenv("SLURM_PROCID");
  rr_pg_options o = RR_PG_OPTIONS_INIT;
  rr_pg *pg;
  o.init_method = "tcp://127.0.0.1:29500?rank=0";
  T_CHECK(rr_init_process_group(&pg, &o) == RR_EINVAL && strstr(rr_last_error(), "world_size"),
          "%s", rr_last_error());
  o.init_method = "tcp://127.0.0.1?rank=0&world_size=1";
  T_CHECK(rr_init_process_group(&pg, &o) == RR_EINVAL && strstr(rr_last_error(), "host:port"), "%s",
          rr_last_error());
  o.init_method = "tcp://127.0.0.1:29500?rank=0&wrld_size=1";
  T_CHECK(rr_init_process_group(&pg, &o) == RR_EINVAL && strstr(rr_last_error(), "wrld_size"), "%s",
          rr_last_error());
  o.init_method = "udp://x";
  T_CHECK(
      rr_init_process_group(&pg, &o) == RR_EINVAL && strstr(rr_last_error(), "unknown init_method"),
      "%s", rr_last_error());
  /* As torch: env:// takes nothing but a query, whose rank and world_size win over RANK
   * and WORLD_SIZE one by one; a key given twice is refused, not settled silently. */
  o.init_method = "env://garbage";
  T_CHECK(rr_init_process_group(&pg, &o) == RR_EINVAL &&
              strstr(rr_last_error(), "env:// takes no host"),
          "%s", rr_last_error());
  o.init_method = "tcp://127.0.0.1:29500?rank=0&rank=1&world_size=2";
  T_CHECK(
      rr_init_process_group(&pg, &o) == RR_EINVAL && strstr(rr_last_error(), "'rank' given twice"),
      "%s", rr_last_error());
  o.init_method = "env://?world_size=2&rank=0&world_size=3";
  T_CHECK(rr_init_process_group(&pg, &o) == RR_EINVAL &&
              strstr(rr_last_error(), "'world_size' given twice"),
          "%s", rr_last_error());
  setenv("RANK", "0", 1), setenv("WORLD_SIZE", "2", 1);
  o.init_method = "env://?rank=4&world_size=3";
  T_CHECK(rr_init_process_group(&pg, &o) == RR_EINVAL &&
              strstr(rr_last_error(), "rank 4 is outside 0..2 (world size 3, from init_method)"),
          "%s", rr_last_error());
  o.init_method = "env://?rank=3";
  T_CHECK(rr_init_process_group(&pg, &o) == RR_EINVAL &&
              strstr(rr_last_error(), "rank 3 is outside 0..1 (world size 2"),
          "%s", rr_last_error());
  unsetenv("WORLD_SIZE");
  T_CHECK(rr_init_process_group(&pg, &o) == RR_EENV &&
              strstr(rr_last_error(),
                     "WORLD_SIZE expected, but not set (the init_method gives only rank)"),
          "%s", rr_last_error());
  unsetenv("RANK");
  return bad;
}

static int env_params(void) {
  setenv("RR_NSOCKS", "banana", 1);
  return expect_env_error("RR_NSOCKS='banana'", RR_EENV);
}

/* Tunables are read once per process, so each bad value gets its own process. */
static int env_transport(void) {
  setenv("RR_TRANSPORT", "shared-memory", 1);
  return expect_env_error("RR_TRANSPORT='shared-memory'", RR_EENV);
}

static int env_debug(void) {
  setenv("RR_DEBUG", "VERBOSE", 1);
  return expect_env_error("RR_DEBUG='VERBOSE'", RR_EENV);
}

/* Every numeric tunable refuses what it cannot mean, naming itself and its range: each case
 * runs in a child (tunables are read once per process). Values at the edges are accepted. */
static int spawn_noop(int rank, void *arg) {
  (void)rank, (void)arg;
  return 0;
}

static int env_range_case(const char *var, const char *val, const char *needle) {
  pid_t p = fork();
  if (p < 0) return 1;
  if (p == 0) {
    setenv(var, val, 1);
    int st;
    if (!strcmp(var, "RR_GRACE_PERIOD")) {
      st = rr_spawn(1, spawn_noop, NULL, NULL);
    } else {
      rr_pg *pg = (rr_pg *)1;
      st = rr_init_process_group(&pg, NULL);
      if (pg != NULL) _exit(3);
    }
    const char *e = rr_last_error();
    if (needle) { /* refused, naming the variable, the value and the range */
      char want[128];
      snprintf(want, sizeof want, "%s='%s' is out of range (%s", var, val, needle);
      if (st != RR_EENV || !strstr(e, want)) {
        printf("%s=%s: got %s '%s', want RR_EENV with '%s'\n", var, val, rr_status_name(st), e,
               want);
        _exit(1);
      }
    } else if (strstr(e, var)) { /* accepted: any later error is not about it */
      printf("%s=%s was refused: %s\n", var, val, e);
      _exit(1);
    }
    _exit(0);
  }
  int ws = 0;
  if (waitpid(p, &ws, 0) != p || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
    printf("FAIL: %s=%s\n", var, val);
    return 1;
  }
  return 0;
}

static int env_ranges(void) {
  unsetenv("RANK"), unsetenv("WORLD_SIZE"); /* an accepted value fails later, on RANK */
  static const struct {
    const char *var, *val, *range; /* range NULL: the value must be accepted */
  } cases[] = {
      {"RR_TIMEOUT", "inf", "a finite number of seconds from 0.001 to 1e+09"},
      {"RR_TIMEOUT", "nan", "a finite number of seconds from 0.001 to 1e+09"},
      {"RR_TIMEOUT", "1e300", "a finite number of seconds from 0.001 to 1e+09"},
      {"RR_TIMEOUT", "9.3e15", "a finite number of seconds from 0.001 to 1e+09"},
      {"RR_TIMEOUT", "1e-9", "a finite number of seconds from 0.001 to 1e+09"},
      {"RR_TIMEOUT", "-5", "a finite number of seconds from 0.001 to 1e+09"},
      {"RR_TIMEOUT", "0", "a finite number of seconds from 0.001 to 1e+09"},
      {"RR_TIMEOUT", "0.001", NULL},
      {"RR_TIMEOUT", "1e9", NULL},
      {"RR_GRACE_PERIOD", "inf", "a finite number of seconds from 0 to 1e+06"},
      {"RR_GRACE_PERIOD", "-1", "a finite number of seconds from 0 to 1e+06"},
      {"RR_NSOCKS", "0", "a whole number from 1 to 16"},
      {"RR_NSOCKS", "17", "a whole number from 1 to 16"},
      {"RR_SEG_BYTES", "1", "a whole number from 4096 to 67108864"},
      {"RR_SEG_BYTES", "1G", "a whole number from 4096 to 67108864"},
      {"RR_SLOTS", "65", "a whole number from 2 to 64"},
      {"RR_SMALL_BYTES", "2048G", "a whole number from 0 to 1099511627776"},
      {"RR_SOCKBUF", "2G", "a whole number from 0 to 1073741824"},
      {"RR_SPIN_US", "-2", "a whole number from -1 to 1000000"},
      {"RR_TRACE", "2", "0, 1 or a file path for JSON lines"},
      {"RR_SPIN_US", "-1", NULL},
      {"RR_SPIN_YIELD", "2", "a whole number from -1 to 1"},
      {"RR_SPIN_YIELD", "0", NULL},
      {"RR_SMALL_BYTES", "0", NULL},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bad |= env_range_case(cases[i].var, cases[i].val, cases[i].range);
  return bad;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <scenario>\n", argv[0]);
    return 2;
  }
  const char *s = argv[1];
  int codes[8], sigs[8];
  if (!strcmp(s, "transport_mismatch")) return t_run_all(3, transport_mismatch, NULL, 60, s);
  if (!strcmp(s, "late_rank")) {
    setenv("RR_TIMEOUT", "2", 1);
    return t_run_all(4, late_rank, NULL, 60, s);
  }
  if (!strcmp(s, "kill9")) {
    /* Each position of the ring, in each kind of call, at a random moment. */
    const char *colls[] = {"all_reduce", "broadcast", "barrier"};
    int bad = 0;
    for (int victim = 0; victim < 4; victim++)
      for (int c = 0; c < 3; c++) {
        kill_case kc = {
            .victim = victim,
            .coll = colls[c],
            .kill_after =
                0.05 + (double)(t_bits(t_seed(), (uint64_t)victim, (uint64_t)c) % 400) / 1000.0};
        snprintf(kc.ready_dir, sizeof kc.ready_dir, "/tmp/rr-kill9-XXXXXX");
        if (!mkdtemp(kc.ready_dir)) return 1;
        if (t_run(4, kill9, &kc, kill_one, 60, codes, sigs)) return 1;
        double took = t_now() - kc.killed_at;
        printf("kill -9 rank %d in %s after %.2f s: survivors reported in %.2f s\n", victim,
               colls[c], kc.kill_after, took);
        for (int r = 0; r < 4; r++)
          if (r != victim && (codes[r] != 0 || sigs[r] != 0)) {
            fprintf(stderr, "survivor rank %d: exit %d signal %d\n", r, codes[r], sigs[r]);
            bad = 1;
          }
        if (sigs[victim] != SIGKILL) bad = 1, fprintf(stderr, "victim was not killed\n");
        if (took > 5.0) bad = 1, fprintf(stderr, "survivors took %.1f s (timeout is 30 s)\n", took);
        t_ready_remove(kc.ready_dir, 4);
      }
    return bad;
  }
  if (!strcmp(s, "abort")) {
    double t0 = t_now();
    if (t_run(3, abort_case, NULL, NULL, 60, codes, sigs)) return 1;
    printf("abort: all ranks done %.2f s after the start (abort at 0.3 s)\n", t_now() - t0);
    return t_exits_ok(3, codes, sigs, s);
  }
  if (!strcmp(s, "abort_destroy")) {
    return t_run_all(2, abort_destroy, NULL, 60, s);
  }
  if (!strcmp(s, "timeout")) {
    return t_run_all(3, timeout_case, NULL, 60, s);
  }
  if (!strcmp(s, "wait_timeout")) {
    return t_run_all(2, wait_timeout, NULL, 60, s);
  }
  if (!strcmp(s, "destroy_early")) {
    return t_run_all(3, destroy_early, NULL, 60, s);
  }
  if (!strcmp(s, "duplicate_rank")) {
    setenv("RR_TIMEOUT", "3", 1);
    if (t_run(3, duplicate_rank, NULL, NULL, 60, codes, sigs)) return 1;
    int told = 0, bad = 0;
    for (int r = 0; r < 3; r++) {
      if (codes[r] == 10)
        told++;
      else if (codes[r] != 0 || sigs[r])
        bad = 1;
    }
    if (told != 1) fprintf(stderr, "%d processes were told about the duplicate, want 1\n", told);
    return bad || told != 1;
  }
  if (!strcmp(s, "world_mismatch")) {
    setenv("RR_TIMEOUT", "3", 1);
    return t_run_all(2, world_mismatch, NULL, 60, s);
  }
  if (!strcmp(s, "port_in_use")) return port_in_use();
  if (!strcmp(s, "unreachable")) {
    setenv("RR_TIMEOUT", "2", 1);
    return unreachable();
  }
  if (!strcmp(s, "env_errors")) return env_errors();
  if (!strcmp(s, "env_params")) return env_params();
  if (!strcmp(s, "env_transport")) return env_transport();
  if (!strcmp(s, "env_debug")) return env_debug();
  if (!strcmp(s, "env_ranges")) return env_ranges();
  fprintf(stderr, "unknown scenario %s\n", s);
  return 2;
}
