/* Tests of the rendezvous store through the public API (TCP and file stores), with real
 * processes (fork) and threads. One binary; argv[1] names the test, so that CTest runs each
 * in its own process with its own time limit:  test_store <name>   (test_store lists them).
 *
 * Fork safety: a test forks only while it has no threads of its own; when a master must run
 * beside forked clients it runs in a child process of its own (master_proc_start). */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ringreduce/ringreduce.h"

/* ---------------------------------------------------------------------------------------------
 * Harness
 */
static int g_in_child; /* a failing check in a forked child must not run the parent's atexit */

static void fail_exit(void) {
  fflush(stderr);
  if (g_in_child) _exit(1);
  exit(1);
}

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: [pid %d] CHECK(%s) failed: ", __FILE__, __LINE__, (int)getpid(), \
              #cond);                                                                          \
      fprintf(stderr, __VA_ARGS__);                                                            \
      fprintf(stderr, "\n    rr_last_error: %s\n", rr_last_error());                           \
      fail_exit();                                                                             \
    }                                                                                          \
  } while (0)

#define OK(call)                                                             \
  do {                                                                       \
    int ok_rc_ = (call);                                                     \
    CHECK(ok_rc_ == RR_OK, "%s returned %s", #call, rr_status_name(ok_rc_)); \
  } while (0)

static int error_has(const char *needle) {
  return needle == NULL || strstr(rr_last_error(), needle) != NULL;
}

/* Expect a status; the last error must contain `needle` (NULL: anything). */
#define EXPECT(status, needle, call)                                                        \
  do {                                                                                      \
    int ex_rc_ = (call);                                                                    \
    const char *ex_needle_ = (needle);                                                      \
    CHECK(ex_rc_ == (status), "%s returned %s, expected %s", #call, rr_status_name(ex_rc_), \
          rr_status_name(status));                                                          \
    CHECK(error_has(ex_needle_), "%s: error text lacks '%s'", #call,                        \
          ex_needle_ ? ex_needle_ : "");                                                    \
  } while (0)

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* xorshift64*: reproducible random data from the seed printed at start. g_seed advances
 * with every rnd(); g_base stays, so that any process can recompute fill_bytes(g_base, tag). */
static uint64_t g_seed, g_base;
static uint64_t rnd_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}
static uint64_t rnd(void) {
  return rnd_next(&g_seed);
}
/* Bytes that depend only on (seed, tag): another process can recompute them. */
static void fill_bytes(void *buf, size_t n, uint64_t seed, uint64_t tag) {
  uint64_t s = (seed ^ (tag * 0x9E3779B97F4A7C15ULL)) | 1;
  uint8_t *p = buf;
  for (size_t i = 0; i < n; i++) {
    if ((i & 7) == 0) rnd_next(&s);
    p[i] = (uint8_t)(s >> (8 * (i & 7)));
  }
  if (n > 2) p[n / 2] = 0; /* always a NUL inside: values are binary */
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  CHECK(p != NULL, "out of memory (%zu bytes)", n);
  return p;
}

/* Run fn(arg) in a child process that exits 0 when fn returns. */
static pid_t spawn(void (*fn)(void *), void *arg) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    g_in_child = 1;
    g_seed ^= (uint64_t)getpid() << 32;
    fn(arg);
    _exit(0);
  }
  return pid;
}

/* Exit status of a child (128 + signal if killed); kills it after timeout_ms. */
static int wait_child(pid_t pid, int64_t timeout_ms) {
  int64_t end = now_ms() + timeout_ms;
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    CHECK(r >= 0, "waitpid: %s", strerror(errno));
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (now_ms() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      fprintf(stderr, "child %d did not finish within %" PRId64 " ms: killed\n", (int)pid,
              timeout_ms);
      return -1;
    }
    sleep_ms(2);
  }
}

static void *shared_mem(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
  memset(p, 0, n);
  return p;
}

/* A TCP port nothing listens on right now. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0, "socket: %s", strerror(errno));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0, "bind: %s", strerror(errno));
  CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0, "getsockname: %s", strerror(errno));
  close(fd);
  return ntohs(a.sin_port);
}

/* A master serving in its own process: it reports its port, serves until *ctl is closed,
 * then frees the store (exit status 0 only if all of that worked). */
typedef struct master_proc {
  pid_t pid;
  int port;
  int ctl; /* write end: close it to stop the master */
} master_proc;

static void master_proc_start(master_proc *m, int port, int64_t timeout_ms) {
  int up[2], ctl[2];
  CHECK(pipe(up) == 0 && pipe(ctl) == 0, "pipe: %s", strerror(errno));
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    g_in_child = 1;
    close(up[0]);
    close(ctl[1]);
    rr_store *s = NULL;
    OK(rr_store_tcp("127.0.0.1", port, 1, timeout_ms, &s));
    int p = rr_store_port(s);
    CHECK(write(up[1], &p, sizeof p) == (ssize_t)sizeof p, "write: %s", strerror(errno));
    char c;
    while (read(ctl[0], &c, 1) < 0 && errno == EINTR) {
    }
    rr_store_free(s);
    _exit(0);
  }
  close(up[1]);
  close(ctl[0]);
  int p = 0;
  ssize_t r;
  do r = read(up[0], &p, sizeof p);
  while (r < 0 && errno == EINTR);
  close(up[0]);
  CHECK(r == (ssize_t)sizeof p && p > 0, "the master process did not start (read %zd)", r);
  m->pid = pid;
  m->port = p;
  m->ctl = ctl[1];
}

static void master_proc_stop(master_proc *m) {
  close(m->ctl);
  CHECK(wait_child(m->pid, 20000) == 0, "the master process failed");
}

static char g_tmpdir[256];
static void rm_tmpdir(void) {
  if (!g_tmpdir[0] || g_in_child) return;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmpdir);
}
static const char *tmp_path(const char *name) {
  static char path[400];
  if (!g_tmpdir[0]) {
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/rr_store_test.XXXXXX", base);
    CHECK(mkdtemp(g_tmpdir) != NULL, "mkdtemp %s: %s", g_tmpdir, strerror(errno));
    atexit(rm_tmpdir);
  }
  snprintf(path, sizeof path, "%s/%s", g_tmpdir, name);
  return path;
}

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* ---------------------------------------------------------------------------------------------
 * Semantics, the same for both kinds of store. s and s2 are two clients of one store.
 */
static void expect_value(rr_store *s, const char *key, const void *want, size_t wlen) {
  void *v = NULL;
  size_t len = 12345;
  OK(rr_store_get(s, key, &v, &len));
  CHECK(len == wlen, "get '%s': %zu bytes, expected %zu", key, len, wlen);
  CHECK(wlen == 0 || memcmp(v, want, wlen) == 0, "get '%s': wrong bytes", key);
  free(v);
}

static void semantics(rr_store *s, rr_store *s2) {
  /* set / get, binary values with NULs, seen by the other client. */
  size_t n = 1000 + rnd() % 5000;
  uint8_t *val = xmalloc(n);
  fill_bytes(val, n, g_base, 1);
  OK(rr_store_set(s, "bin", val, n));
  expect_value(s2, "bin", val, n);
  expect_value(s, "bin", val, n);
  /* Overwrite with a shorter value. */
  OK(rr_store_set(s2, "bin", "x\0y", 3));
  expect_value(s, "bin", "x\0y", 3);
  /* Empty value. */
  OK(rr_store_set(s, "empty", NULL, 0));
  expect_value(s2, "empty", NULL, 0);
  /* Many keys with random values, read back through the other client. */
  enum { NK = 100 };
  size_t lens[NK];
  for (int i = 0; i < NK; i++) {
    char key[64];
    snprintf(key, sizeof key, "many/%d/\x01\xff", i);
    lens[i] = rnd() % 300;
    uint8_t buf[300];
    fill_bytes(buf, lens[i], g_base, 100 + (uint64_t)i);
    OK(rr_store_set(i % 2 ? s : s2, key, buf, lens[i]));
  }
  for (int i = 0; i < NK; i++) {
    char key[64];
    uint8_t buf[300];
    snprintf(key, sizeof key, "many/%d/\x01\xff", i);
    fill_bytes(buf, lens[i], g_base, 100 + (uint64_t)i);
    expect_value(i % 2 ? s2 : s, key, buf, lens[i]);
  }
  /* Longest key. */
  char *longkey = xmalloc(4097 + 1);
  memset(longkey, 'k', 4096);
  longkey[4096] = '\0';
  OK(rr_store_set(s, longkey, "L", 1));
  expect_value(s2, longkey, "L", 1);

  /* add: absent is 0, returns the new value, stores ASCII decimal. */
  int64_t r = 99;
  OK(rr_store_add(s, "ctr", 5, &r));
  CHECK(r == 5, "add to an absent key gave %" PRId64, r);
  OK(rr_store_add(s2, "ctr", -7, &r));
  CHECK(r == -2, "add -7 gave %" PRId64, r);
  expect_value(s, "ctr", "-2", 2);
  OK(rr_store_add(s, "zero", 0, &r));
  CHECK(r == 0, "add 0 gave %" PRId64, r);
  int ex = 0;
  const char *zk[] = {"zero"};
  OK(rr_store_check(s2, zk, 1, &ex));
  CHECK(ex == 1, "add of 0 must create the key");
  OK(rr_store_set(s, "num", "41", 2));
  OK(rr_store_add(s2, "num", 1, &r));
  CHECK(r == 42, "41 + 1 gave %" PRId64, r);
  OK(rr_store_add(s2, "num", 1, NULL)); /* result may be NULL */
  expect_value(s, "num", "43", 2);
  OK(rr_store_set(s, "big", "9223372036854775806", 19));
  OK(rr_store_add(s, "big", 1, &r));
  CHECK(r == INT64_MAX, "add to INT64_MAX - 1 gave %" PRId64, r);
  EXPECT(RR_EINVAL, "overflow", rr_store_add(s, "big", 1, &r));
  expect_value(s2, "big", "9223372036854775807", 19);
  OK(rr_store_add(s, "big", INT64_MIN, &r));
  CHECK(r == -1, "INT64_MAX + INT64_MIN gave %" PRId64, r);
  OK(rr_store_set(s, "text", "abc", 3));
  EXPECT(RR_EINVAL, "'text'", rr_store_add(s2, "text", 1, &r));
  CHECK(strstr(rr_last_error(), "not an integer"), "the error must say why");
  expect_value(s, "text", "abc", 3);
  OK(rr_store_set(s, "nul", "12\0", 3)); /* a NUL is not a digit */
  EXPECT(RR_EINVAL, "not an integer", rr_store_add(s, "nul", 1, &r));
  OK(rr_store_set(s, "sp", " 1", 2));
  EXPECT(RR_EINVAL, "not an integer", rr_store_add(s, "sp", 1, &r));

  /* check: never blocks; every key must exist. */
  const char *k1[] = {"bin"};
  const char *k2[] = {"bin", "nosuchkey"};
  int64_t t0 = now_ms();
  OK(rr_store_check(s, k1, 1, &ex));
  CHECK(ex == 1, "check of an existing key gave %d", ex);
  OK(rr_store_check(s, k2, 2, &ex));
  CHECK(ex == 0, "check with a missing key gave %d", ex);
  OK(rr_store_check(s, NULL, 0, &ex));
  CHECK(ex == 1, "check of no keys gave %d", ex);
  CHECK(now_ms() - t0 < 1000, "check blocked");

  /* delete. */
  int del = -1;
  OK(rr_store_delete(s, "bin", &del));
  CHECK(del == 1, "delete of an existing key gave %d", del);
  OK(rr_store_delete(s2, "bin", &del));
  CHECK(del == 0, "second delete gave %d", del);
  OK(rr_store_check(s2, k1, 1, &ex));
  CHECK(ex == 0, "a deleted key still exists");
  OK(rr_store_delete(s, "nosuchkey", NULL));
  OK(rr_store_set(s, "bin", "again", 5)); /* set after delete */
  expect_value(s2, "bin", "again", 5);

  /* wait: existing keys return at once; a missing key times out naming it. */
  const char *wk[] = {"bin", "ctr", "num"};
  t0 = now_ms();
  OK(rr_store_wait(s, wk, 3, 0));
  OK(rr_store_wait(s, NULL, 0, 0));
  CHECK(now_ms() - t0 < 1000, "wait for existing keys blocked");
  const char *wm[] = {"bin", "missing/key", "ctr"};
  t0 = now_ms();
  EXPECT(RR_ETIMEDOUT, "'missing/key'", rr_store_wait(s2, wm, 3, 200));
  int64_t el = now_ms() - t0;
  CHECK(el >= 190 && el < 1500, "wait(200 ms) took %" PRId64 " ms", el);

  /* Invalid arguments: RR_EINVAL, nothing sent. */
  void *v = NULL;
  size_t len = 0;
  EXPECT(RR_EINVAL, "NULL", rr_store_set(NULL, "k", "v", 1));
  EXPECT(RR_EINVAL, "empty", rr_store_set(s, "", "v", 1));
  EXPECT(RR_EINVAL, "NULL", rr_store_set(s, NULL, "v", 1));
  longkey[4096] = 'k';
  longkey[4097] = '\0';
  EXPECT(RR_EINVAL, "4096", rr_store_set(s, longkey, "v", 1));
  EXPECT(RR_EINVAL, "4096", rr_store_get(s, longkey, &v, &len));
  EXPECT(RR_EINVAL, "limit", rr_store_set(s, "k", val, (64u << 20) + 1));
  EXPECT(RR_EINVAL, "NULL", rr_store_set(s, "k", NULL, 5));
  EXPECT(RR_EINVAL, NULL, rr_store_get(s, "k", NULL, &len));
  EXPECT(RR_EINVAL, NULL, rr_store_get(NULL, "k", &v, &len));
  EXPECT(RR_EINVAL, NULL, rr_store_add(s, "", 1, &r));
  EXPECT(RR_EINVAL, NULL, rr_store_wait(s, wk, -1, 0));
  EXPECT(RR_EINVAL, NULL, rr_store_wait(s, NULL, 1, 0));
  EXPECT(RR_EINVAL, "negative", rr_store_wait(s, wk, 3, -5));
  const char *bad[] = {"ok", ""};
  EXPECT(RR_EINVAL, "key 1", rr_store_check(s, bad, 2, &ex));
  EXPECT(RR_EINVAL, NULL, rr_store_check(s, wk, 3, NULL));
  EXPECT(RR_EINVAL, NULL, rr_store_delete(NULL, "k", &del));
  CHECK(rr_store_port(NULL) == -1, "rr_store_port(NULL)");
  rr_store_free(NULL);
  /* None of that reached the store. */
  const char *kk[] = {"k"};
  OK(rr_store_check(s2, kk, 1, &ex));
  CHECK(ex == 0, "an invalid set reached the store");
  free(longkey);
  free(val);
}

/* ---------------------------------------------------------------------------------------------
 * TCP store
 */
static void test_tcp_semantics(void) {
  rr_store *m = NULL, *c = NULL;
  OK(rr_store_tcp("127.0.0.1", 0, 1, 5000, &m));
  int port = rr_store_port(m);
  CHECK(port > 0 && port < 65536, "rr_store_port gave %d", port);
  OK(rr_store_tcp("localhost", port, 0, 5000, &c));
  CHECK(rr_store_port(c) == port, "the client's port is %d, not %d", rr_store_port(c), port);
  semantics(m, c);
  rr_store_free(c);
  rr_store_free(m);
}

static void test_tcp_large(void) {
  rr_store *m = NULL;
  OK(rr_store_tcp("127.0.0.1", 0, 1, 20000, &m));
  size_t n = 64u << 20;
  uint8_t *val = xmalloc(n);
  fill_bytes(val, n, g_base, 7);
  OK(rr_store_set(m, "huge", val, n));
  expect_value(m, "huge", val, n);
  EXPECT(RR_EINVAL, "limit", rr_store_set(m, "huge", val, n + 1));
  rr_store_free(m);
  free(val);
}

/* 8 processes x 1000 adds: exactly 8000, and every result 1..8000 seen exactly once. */
enum { ADD_PROCS = 8, ADD_EACH = 1000 };
typedef struct add_arg {
  int tcp_port;     /* TCP, or */
  const char *path; /* file */
  int idx;
  int64_t *results; /* shared */
} add_arg;

static rr_store *open_client(int tcp_port, const char *path, int64_t timeout_ms) {
  rr_store *s = NULL;
  if (path)
    OK(rr_store_file(path, timeout_ms, &s));
  else
    OK(rr_store_tcp("127.0.0.1", tcp_port, 0, timeout_ms, &s));
  return s;
}

static void add_child(void *p) {
  add_arg *a = p;
  rr_store *s = open_client(a->tcp_port, a->path, 20000);
  for (int i = 0; i < ADD_EACH; i++)
    OK(rr_store_add(s, "counter", 1, &a->results[a->idx * ADD_EACH + i]));
  rr_store_free(s);
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

static void add_procs(int tcp_port, const char *path) {
  int64_t *results = shared_mem(sizeof(int64_t) * ADD_PROCS * ADD_EACH);
  add_arg args[ADD_PROCS];
  pid_t pids[ADD_PROCS];
  for (int i = 0; i < ADD_PROCS; i++) {
    args[i] = (add_arg){tcp_port, path, i, results};
    pids[i] = spawn(add_child, &args[i]);
  }
  for (int i = 0; i < ADD_PROCS; i++) CHECK(wait_child(pids[i], 50000) == 0, "adder %d failed", i);
  qsort(results, ADD_PROCS * ADD_EACH, sizeof *results, cmp_i64);
  for (int i = 0; i < ADD_PROCS * ADD_EACH; i++)
    CHECK(results[i] == i + 1, "sorted add results[%d] = %" PRId64 ": not atomic", i, results[i]);
  rr_store *s = open_client(tcp_port, path, 5000);
  int64_t r = 0;
  OK(rr_store_add(s, "counter", 0, &r));
  CHECK(r == ADD_PROCS * ADD_EACH, "counter is %" PRId64 ", expected %d", r, ADD_PROCS * ADD_EACH);
  rr_store_free(s);
  munmap(results, sizeof(int64_t) * ADD_PROCS * ADD_EACH);
}

static void test_tcp_add_procs(void) {
  master_proc m;
  master_proc_start(&m, 0, 20000);
  add_procs(m.port, NULL);
  master_proc_stop(&m);
}

/* get blocks until another process sets the key. */
typedef struct setter_arg {
  int tcp_port;
  const char *path;
  int64_t delay_ms;
  const char *key;
  size_t len;
} setter_arg;

static void setter_child(void *p) {
  setter_arg *a = p;
  sleep_ms(a->delay_ms);
  rr_store *s = open_client(a->tcp_port, a->path, 10000);
  uint8_t *buf = xmalloc(a->len);
  fill_bytes(buf, a->len, g_base, 42);
  OK(rr_store_set(s, a->key, buf, a->len));
  free(buf);
  rr_store_free(s);
}

static void get_blocks(rr_store *s, int tcp_port, const char *path) {
  setter_arg a = {tcp_port, path, 400, "late/key", 1000 + rnd() % 1000};
  pid_t pid = spawn(setter_child, &a);
  int64_t t0 = now_ms();
  void *v = NULL;
  size_t len = 0;
  OK(rr_store_get(s, "late/key", &v, &len));
  int64_t waited = now_ms() - t0;
  /* The setter sleeps 400 ms before it even connects. */
  CHECK(waited >= 350, "get returned after %" PRId64 " ms, before the key was set", waited);
  CHECK(waited < 5000, "get took %" PRId64 " ms", waited);
  uint8_t *want = xmalloc(a.len);
  fill_bytes(want, a.len, g_base, 42);
  CHECK(len == a.len && memcmp(v, want, len) == 0, "get returned the wrong value");
  free(want);
  free(v);
  CHECK(wait_child(pid, 10000) == 0, "the setter failed");
  /* wait() blocks the same way. */
  a.key = "late/key2";
  pid = spawn(setter_child, &a);
  t0 = now_ms();
  const char *keys[] = {"late/key", "late/key2"};
  OK(rr_store_wait(s, keys, 2, 0));
  waited = now_ms() - t0;
  CHECK(waited >= 350 && waited < 5000, "wait returned after %" PRId64 " ms", waited);
  CHECK(wait_child(pid, 10000) == 0, "the setter failed");
}

static void test_tcp_get_blocks(void) {
  master_proc m;
  master_proc_start(&m, 0, 10000);
  rr_store *s = open_client(m.port, NULL, 10000);
  get_blocks(s, m.port, NULL);
  rr_store_free(s);
  master_proc_stop(&m);
}

/* Timeouts: get after the store's timeout, wait after its own, naming the key. Tolerance:
 * not earlier than the timeout - 20 ms, not later than + 1000 ms. */
static void get_timeout(rr_store *s_short, rr_store *s_long) {
  void *v = NULL;
  size_t len = 0;
  int64_t t0 = now_ms();
  EXPECT(RR_ETIMEDOUT, "'never/set'", rr_store_get(s_short, "never/set", &v, &len));
  int64_t el = now_ms() - t0;
  CHECK(el >= 480 && el <= 1500, "get with a 500 ms timeout failed after %" PRId64 " ms", el);
  CHECK(v == NULL && len == 0, "a failed get returned a value");
  const char *keys[] = {"never/a", "never/b"};
  t0 = now_ms();
  EXPECT(RR_ETIMEDOUT, "'never/a'", rr_store_wait(s_long, keys, 2, 300));
  el = now_ms() - t0;
  CHECK(el >= 280 && el <= 1300, "wait(300 ms) failed after %" PRId64 " ms", el);
  t0 = now_ms();
  EXPECT(RR_ETIMEDOUT, "'never/b'", rr_store_wait(s_short, keys + 1, 1, 0));
  el = now_ms() - t0;
  CHECK(el >= 480 && el <= 1500, "wait(store's 500 ms) failed after %" PRId64 " ms", el);
  /* The store still works after timeouts. */
  OK(rr_store_set(s_short, "never/set", "now", 3));
  expect_value(s_long, "never/set", "now", 3);
}

static void test_tcp_get_timeout(void) {
  rr_store *m = NULL, *c = NULL;
  OK(rr_store_tcp("127.0.0.1", 0, 1, 500, &m));
  OK(rr_store_tcp("127.0.0.1", rr_store_port(m), 0, 20000, &c));
  get_timeout(m, c);
  rr_store_free(c);
  rr_store_free(m);
}

/* A client started before its master waits for it. */
typedef struct early_arg {
  int port;
  int64_t *connected_at;
} early_arg;

static void early_client(void *p) {
  early_arg *a = p;
  rr_store *s = NULL;
  OK(rr_store_tcp("127.0.0.1", a->port, 0, 10000, &s));
  *a->connected_at = now_ms();
  OK(rr_store_set(s, "from/client", "hello", 5));
  expect_value(s, "from/master", "world", 5);
  rr_store_free(s);
}

static void test_tcp_client_first(void) {
  int port = free_port();
  int64_t *connected_at = shared_mem(sizeof(int64_t));
  early_arg a = {port, connected_at};
  pid_t pid = spawn(early_client, &a);
  sleep_ms(600);
  int64_t master_at = now_ms();
  rr_store *m = NULL;
  OK(rr_store_tcp("127.0.0.1", port, 1, 10000, &m));
  expect_value(m, "from/client", "hello", 5);
  OK(rr_store_set(m, "from/master", "world", 5));
  CHECK(wait_child(pid, 10000) == 0, "the early client failed");
  CHECK(*connected_at >= master_at, "the client connected before the master existed");
  rr_store_free(m);
  munmap(connected_at, sizeof(int64_t));
}

/* Nobody serves the port: an error within the timeout naming the address. */
static void test_tcp_unreachable(void) {
  int port = free_port();
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  rr_store *s = (rr_store *)&s; /* must be reset to NULL */
  int64_t t0 = now_ms();
  int rc = rr_store_tcp("127.0.0.1", port, 0, 1000, &s);
  int64_t el = now_ms() - t0;
  CHECK(rc == RR_ETIMEDOUT || rc == RR_EADDR, "got %s", rr_status_name(rc));
  CHECK(s == NULL, "store not reset on failure");
  CHECK(strstr(rr_last_error(), addr) && strstr(rr_last_error(), "rendezvous store"),
        "the error must name the store's address %s", addr);
  CHECK(el >= 900 && el <= 2500, "gave up after %" PRId64 " ms with a 1000 ms timeout", el);
  /* A name that does not resolve. */
  t0 = now_ms();
  EXPECT(RR_EADDR, "no-such-host.invalid",
         rr_store_tcp("no-such-host.invalid", 29500, 0, 1000, &s));
  CHECK(now_ms() - t0 < 15000, "name resolution took too long");
  /* Invalid arguments. */
  EXPECT(RR_EINVAL, NULL, rr_store_tcp("127.0.0.1", 70000, 1, 1000, &s));
  EXPECT(RR_EINVAL, NULL, rr_store_tcp("127.0.0.1", 0, 0, 1000, &s));
  EXPECT(RR_EINVAL, NULL, rr_store_tcp(NULL, 1234, 0, 1000, &s));
  EXPECT(RR_EINVAL, NULL, rr_store_tcp("127.0.0.1", 1234, 0, 1000, NULL));
}

/* A port with a live listener: RR_EADDR "in use"; freed ports can be served again. */
static void test_tcp_port_in_use(void) {
  rr_store *a = NULL, *b = (rr_store *)&b;
  OK(rr_store_tcp("127.0.0.1", 0, 1, 2000, &a));
  int port = rr_store_port(a);
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  EXPECT(RR_EADDR, "in use", rr_store_tcp("127.0.0.1", port, 1, 2000, &b));
  CHECK(strstr(rr_last_error(), ps), "the error must name port %d", port);
  CHECK(b == NULL, "store not reset on failure");
  OK(rr_store_set(a, "still", "alive", 5)); /* the first master is unharmed */
  expect_value(a, "still", "alive", 5);
  rr_store_free(a);
  /* The port is free again once the master is freed (listener closed, SO_REUSEADDR). */
  OK(rr_store_tcp("127.0.0.1", port, 1, 2000, &b));
  rr_store_free(b);
  /* A plain listener that is not a store. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t sl = sizeof sa;
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 4) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &sl) == 0,
        "listener: %s", strerror(errno));
  EXPECT(RR_EADDR, "in use", rr_store_tcp("127.0.0.1", ntohs(sa.sin_port), 1, 2000, &b));
  /* ... and a client of it finds it is not a store (it accepts but never answers). */
  int64_t t0 = now_ms();
  int rc = rr_store_tcp("127.0.0.1", ntohs(sa.sin_port), 0, 500, &b);
  CHECK(rc == RR_ETIMEDOUT, "a client of a silent listener got %s", rr_status_name(rc));
  CHECK(now_ms() - t0 < 2000, "the handshake did not respect the timeout");
  close(fd);
}

/* The master dies (killed) while a client waits: an error, fast, not a hang. */
typedef struct killer_arg {
  pid_t victim;
  int64_t delay_ms;
  int sig;
} killer_arg;

static void killer_child(void *p) {
  killer_arg *a = p;
  sleep_ms(a->delay_ms);
  kill(a->victim, a->sig);
}

static void test_tcp_master_dies(void) {
  master_proc m;
  master_proc_start(&m, 0, 20000);
  rr_store *s = open_client(m.port, NULL, 20000);
  rr_store *idle = open_client(m.port, NULL, 20000);
  OK(rr_store_set(s, "before", "1", 1));
  killer_arg k = {m.pid, 300, SIGKILL};
  pid_t kp = spawn(killer_child, &k);
  int64_t t0 = now_ms();
  void *v = NULL;
  size_t len = 0;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", m.port);
  EXPECT(RR_EPEER, "closed the connection", rr_store_get(s, "never", &v, &len));
  CHECK(strstr(rr_last_error(), addr), "the error must name %s", addr);
  int64_t el = now_ms() - t0;
  CHECK(el < 5000, "the dead master was noticed after %" PRId64 " ms (store timeout 20 s)", el);
  CHECK(wait_child(kp, 5000) == 0, "killer failed");
  CHECK(wait_child(m.pid, 5000) == 128 + SIGKILL, "the master was not killed");
  close(m.ctl);
  /* Later calls fail at once. */
  t0 = now_ms();
  EXPECT(RR_EPEER, addr, rr_store_set(s, "after", "1", 1));
  CHECK(now_ms() - t0 < 1000, "a call on a lost store took %" PRId64 " ms", now_ms() - t0);
  /* An idle client notices on its next call. */
  t0 = now_ms();
  int rc = rr_store_set(idle, "after", "1", 1);
  CHECK(rc == RR_EPEER, "an idle client of a dead master got %s", rr_status_name(rc));
  CHECK(now_ms() - t0 < 5000, "took %" PRId64 " ms", now_ms() - t0);
  rr_store_free(idle);
  rr_store_free(s);
}

/* A master that stops answering without closing (a frozen host): the client's own
 * deadline (timeout + grace) ends the call. */
static void test_tcp_master_frozen(void) {
  master_proc m;
  master_proc_start(&m, 0, 500);
  rr_store *s = open_client(m.port, NULL, 500);
  OK(rr_store_set(s, "before", "1", 1));
  CHECK(kill(m.pid, SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
  int64_t t0 = now_ms();
  void *v = NULL;
  size_t len = 0;
  EXPECT(RR_ETIMEDOUT, "no reply", rr_store_get(s, "never", &v, &len));
  int64_t el = now_ms() - t0;
  CHECK(el >= 480 && el < 6000, "a frozen master was given up on after %" PRId64 " ms", el);
  t0 = now_ms();
  int rc = rr_store_set(s, "x", "1", 1);
  CHECK(rc == RR_ETIMEDOUT, "set on a frozen master got %s", rr_status_name(rc));
  CHECK(now_ms() - t0 < 3000, "set on a frozen master took %" PRId64 " ms", now_ms() - t0);
  kill(m.pid, SIGKILL);
  kill(m.pid, SIGCONT);
  CHECK(wait_child(m.pid, 5000) == 128 + SIGKILL, "master");
  close(m.ctl);
  rr_store_free(s);
}

/* 16 client processes blocked in get at once, released in a random order. */
enum { MANY = 16 };
typedef struct many_arg {
  int port;
  int idx;
} many_arg;

static void many_child(void *p) {
  many_arg *a = p;
  rr_store *s = open_client(a->port, NULL, 20000);
  char key[32];
  snprintf(key, sizeof key, "ready/%d", a->idx);
  OK(rr_store_set(s, key, "", 0));
  snprintf(key, sizeof key, "go/%d", a->idx);
  void *v = NULL;
  size_t len = 0;
  OK(rr_store_get(s, key, &v, &len));
  size_t wl = 100 + (size_t)a->idx * 37;
  uint8_t want[100 + MANY * 37];
  fill_bytes(want, wl, g_base, 500 + (uint64_t)a->idx);
  CHECK(len == wl && memcmp(v, want, wl) == 0, "client %d got the wrong value", a->idx);
  free(v);
  OK(rr_store_add(s, "done", 1, NULL));
  rr_store_free(s);
}

static void test_tcp_many_clients(void) {
  master_proc m;
  master_proc_start(&m, 0, 20000);
  many_arg args[MANY];
  pid_t pids[MANY];
  for (int i = 0; i < MANY; i++) {
    args[i] = (many_arg){m.port, i};
    pids[i] = spawn(many_child, &args[i]);
  }
  rr_store *s = open_client(m.port, NULL, 20000);
  char names[MANY][32];
  const char *ready[MANY];
  for (int i = 0; i < MANY; i++) {
    snprintf(names[i], sizeof names[i], "ready/%d", i);
    ready[i] = names[i];
  }
  OK(rr_store_wait(s, ready, MANY, 0));
  sleep_ms(100); /* let them all reach their get */
  int perm[MANY];
  for (int i = 0; i < MANY; i++) perm[i] = i;
  for (int i = MANY - 1; i > 0; i--) {
    int j = (int)(rnd() % (uint64_t)(i + 1));
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int i = 0; i < MANY; i++) {
    int c = perm[i];
    char key[32];
    snprintf(key, sizeof key, "go/%d", c);
    uint8_t val[100 + MANY * 37];
    size_t wl = 100 + (size_t)c * 37;
    fill_bytes(val, wl, g_base, 500 + (uint64_t)c);
    OK(rr_store_set(s, key, val, wl));
    sleep_ms((int64_t)(rnd() % 10));
  }
  for (int i = 0; i < MANY; i++) CHECK(wait_child(pids[i], 20000) == 0, "client %d failed", i);
  int64_t done = 0;
  OK(rr_store_add(s, "done", 0, &done));
  CHECK(done == MANY, "done = %" PRId64, done);
  rr_store_free(s);
  master_proc_stop(&m);
}

/* One store object shared by threads: blocking gets must not hold up other threads' sets,
 * and adds stay atomic. */
enum { TH_PAIRS = 8, TH_ADDERS = 4, TH_ADDS = 500 };
typedef struct th_arg {
  rr_store *s;
  int idx;
  int role; /* 0 getter, 1 setter, 2 adder */
  int64_t *results;
  uint64_t seed;
} th_arg;

static void *th_main(void *p) {
  th_arg *a = p;
  char key[32];
  snprintf(key, sizeof key, "th/%d", a->idx);
  if (a->role == 0) {
    void *v = NULL;
    size_t len = 0;
    OK(rr_store_get(a->s, key, &v, &len));
    uint8_t want[64];
    fill_bytes(want, sizeof want, g_base, 900 + (uint64_t)a->idx);
    CHECK(len == sizeof want && memcmp(v, want, len) == 0, "thread %d got a wrong value", a->idx);
    free(v);
  } else if (a->role == 1) {
    uint64_t s = a->seed | 1;
    sleep_ms((int64_t)(rnd_next(&s) % 200));
    uint8_t val[64];
    fill_bytes(val, sizeof val, g_base, 900 + (uint64_t)a->idx);
    OK(rr_store_set(a->s, key, val, sizeof val));
  } else {
    for (int i = 0; i < TH_ADDS; i++)
      OK(rr_store_add(a->s, "th/count", 1, &a->results[a->idx * TH_ADDS + i]));
  }
  return NULL;
}

static void threads(rr_store *s) {
  pthread_t t[2 * TH_PAIRS + TH_ADDERS];
  th_arg args[2 * TH_PAIRS + TH_ADDERS];
  int64_t results[TH_ADDERS * TH_ADDS];
  int n = 0;
  /* Start from nothing, so that getters block and the count starts at 0. */
  OK(rr_store_delete(s, "th/count", NULL));
  for (int i = 0; i < TH_PAIRS; i++) {
    char key[32];
    snprintf(key, sizeof key, "th/%d", i);
    OK(rr_store_delete(s, key, NULL));
  }
  for (int i = 0; i < TH_PAIRS; i++) args[n++] = (th_arg){s, i, 0, NULL, 0};
  for (int i = 0; i < TH_PAIRS; i++) args[n++] = (th_arg){s, i, 1, NULL, rnd()};
  for (int i = 0; i < TH_ADDERS; i++) args[n++] = (th_arg){s, i, 2, results, 0};
  int64_t t0 = now_ms();
  for (int i = 0; i < n; i++)
    CHECK(pthread_create(&t[i], NULL, th_main, &args[i]) == 0, "pthread_create");
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  CHECK(now_ms() - t0 < 8000, "threads took %" PRId64 " ms", now_ms() - t0);
  qsort(results, TH_ADDERS * TH_ADDS, sizeof *results, cmp_i64);
  for (int i = 0; i < TH_ADDERS * TH_ADDS; i++)
    CHECK(results[i] == i + 1, "sorted results[%d] = %" PRId64, i, results[i]);
}

static void test_tcp_threads(void) {
  rr_store *m = NULL;
  OK(rr_store_tcp("127.0.0.1", 0, 1, 10000, &m));
  rr_store *c = open_client(rr_store_port(m), NULL, 10000);
  threads(c);
  threads(m); /* the master's own client too */
  rr_store_free(c);
  rr_store_free(m);
}

static void test_tcp_ipv6(void) {
  /* Skip only where the host has no IPv6 loopback at all. */
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  if (fd < 0 || bind(fd, (struct sockaddr *)&a6, sizeof a6) != 0) {
    printf("SKIP: no IPv6 loopback here (%s)\n", strerror(errno));
    if (fd >= 0) close(fd);
    exit(77);
  }
  close(fd);
  rr_store *m = NULL, *c = NULL;
  OK(rr_store_tcp("::1", 0, 1, 2000, &m));
  OK(rr_store_tcp("[::1]", rr_store_port(m), 0, 2000, &c));
  OK(rr_store_set(c, "v6", "yes", 3));
  expect_value(m, "v6", "yes", 3);
  rr_store_free(c);
  rr_store_free(m);
}

/* ---------------------------------------------------------------------------------------------
 * File store
 */
static void test_file_semantics(void) {
  const char *path = tmp_path("sem.store");
  rr_store *a = NULL, *b = NULL;
  OK(rr_store_file(path, 5000, &a));
  OK(rr_store_file(path, 5000, &b));
  CHECK(rr_store_port(a) == -1, "a file store has no port");
  semantics(a, b);
  rr_store_free(a);
  CHECK(file_exists(path), "the file went away while a user was left");
  rr_store_free(b);
  CHECK(!file_exists(path), "the last user did not delete the file");
  /* Errors name the path. */
  rr_store *s = (rr_store *)&s;
  EXPECT(RR_ESYS, "/nonexistent-dir/x", rr_store_file("/nonexistent-dir/x", 1000, &s));
  CHECK(s == NULL, "store not reset on failure");
  EXPECT(RR_EINVAL, NULL, rr_store_file("", 1000, &s));
  EXPECT(RR_EINVAL, NULL, rr_store_file(NULL, 1000, &s));
}

static void test_file_add_procs(void) {
  const char *path = tmp_path("add.store");
  rr_store *keep = NULL;
  OK(rr_store_file(path, 20000, &keep));
  add_procs(0, path);
  rr_store_free(keep);
  CHECK(!file_exists(path), "the last user did not delete the file");
}

static void test_file_get_blocks(void) {
  const char *path = tmp_path("blocks.store");
  rr_store *s = NULL;
  OK(rr_store_file(path, 10000, &s));
  get_blocks(s, 0, path);
  rr_store_free(s);
}

static void test_file_get_timeout(void) {
  const char *path = tmp_path("timeout.store");
  rr_store *a = NULL, *b = NULL;
  OK(rr_store_file(path, 500, &a));
  OK(rr_store_file(path, 20000, &b));
  get_timeout(a, b);
  rr_store_free(a);
  rr_store_free(b);
}

/* Users counted across processes; the last one out deletes the file; a crashed user leaves
 * it behind (documented: remove it before reuse). */
typedef struct ref_arg {
  const char *path;
  int64_t hold_ms;
  int crash;
} ref_arg;

static void ref_child(void *p) {
  ref_arg *a = p;
  rr_store *s = NULL;
  OK(rr_store_file(a->path, 10000, &s));
  OK(rr_store_add(s, "joined", 1, NULL));
  sleep_ms(a->hold_ms);
  if (a->crash) _exit(3); /* no rr_store_free */
  rr_store_free(s);
}

static void test_file_refcount(void) {
  const char *path = tmp_path("ref.store");
  rr_store *s = NULL;
  OK(rr_store_file(path, 10000, &s));
  ref_arg a = {path, 0, 0};
  pid_t pids[4];
  for (int i = 0; i < 4; i++) {
    a.hold_ms = 50 * i;
    pids[i] = spawn(ref_child, &a);
  }
  for (int i = 0; i < 4; i++) CHECK(wait_child(pids[i], 10000) == 0, "user %d failed", i);
  CHECK(file_exists(path), "the file was deleted while a user was left");
  int64_t joined = 0;
  OK(rr_store_add(s, "joined", 0, &joined));
  CHECK(joined == 4, "joined = %" PRId64, joined);
  rr_store_free(s);
  CHECK(!file_exists(path), "the last user did not delete the file");
  /* A fresh store on the same path starts empty. */
  OK(rr_store_file(path, 10000, &s));
  int ex = 1;
  const char *k[] = {"joined"};
  OK(rr_store_check(s, k, 1, &ex));
  CHECK(ex == 0, "a new file store saw an old key");
  /* A user that crashes never leaves: the file stays after everyone else is gone. */
  a.hold_ms = 0;
  a.crash = 1;
  CHECK(wait_child(spawn(ref_child, &a), 10000) == 3, "crashing user");
  rr_store_free(s);
  CHECK(file_exists(path), "the file should outlive a crashed user");
  CHECK(unlink(path) == 0, "unlink: %s", strerror(errno));
}

static void test_file_threads(void) {
  const char *path = tmp_path("threads.store");
  rr_store *s = NULL;
  OK(rr_store_file(path, 10000, &s));
  threads(s);
  rr_store_free(s);
  CHECK(!file_exists(path), "file left behind");
}

/* A file that is not a store (or was cut by a crash) is reported, naming it. */
static void test_file_corrupt(void) {
  const char *path = tmp_path("corrupt.store");
  rr_store *s = NULL;
  OK(rr_store_file(path, 2000, &s));
  OK(rr_store_set(s, "k", "v", 1));
  FILE *f = fopen(path, "ab");
  CHECK(f != NULL, "fopen: %s", strerror(errno));
  uint8_t junk[37];
  fill_bytes(junk, sizeof junk, g_base, 3);
  CHECK(fwrite(junk, 1, sizeof junk, f) == sizeof junk && fclose(f) == 0, "write junk");
  void *v = NULL;
  size_t len = 0;
  EXPECT(RR_EPROTO, "corrupt", rr_store_get(s, "k2", &v, &len));
  CHECK(strstr(rr_last_error(), path), "the error must name the file");
  rr_store *t = NULL;
  EXPECT(RR_EPROTO, path, rr_store_file(path, 2000, &t));
  rr_store_free(s); /* cannot count itself out of a corrupt file: leaves it */
  CHECK(unlink(path) == 0, "unlink: %s", strerror(errno));
}

/* ---------------------------------------------------------------------------------------------
 */
static const struct {
  const char *name;
  void (*fn)(void);
} g_tests[] = {
    {"tcp_semantics", test_tcp_semantics},
    {"tcp_large", test_tcp_large},
    {"tcp_add_procs", test_tcp_add_procs},
    {"tcp_get_blocks", test_tcp_get_blocks},
    {"tcp_get_timeout", test_tcp_get_timeout},
    {"tcp_client_first", test_tcp_client_first},
    {"tcp_unreachable", test_tcp_unreachable},
    {"tcp_port_in_use", test_tcp_port_in_use},
    {"tcp_master_dies", test_tcp_master_dies},
    {"tcp_master_frozen", test_tcp_master_frozen},
    {"tcp_many_clients", test_tcp_many_clients},
    {"tcp_threads", test_tcp_threads},
    {"tcp_ipv6", test_tcp_ipv6},
    {"file_semantics", test_file_semantics},
    {"file_add_procs", test_file_add_procs},
    {"file_get_blocks", test_file_get_blocks},
    {"file_get_timeout", test_file_get_timeout},
    {"file_refcount", test_file_refcount},
    {"file_threads", test_file_threads},
    {"file_corrupt", test_file_corrupt},
};

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *env = getenv("RR_TEST_SEED");
  g_seed = env ? strtoull(env, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
  if (g_seed == 0) g_seed = 1;
  g_base = g_seed;
  if (argc != 2) {
    fprintf(stderr, "usage: %s TEST\ntests:", argv[0]);
    for (size_t i = 0; i < sizeof g_tests / sizeof g_tests[0]; i++)
      fprintf(stderr, " %s", g_tests[i].name);
    fprintf(stderr, "\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof g_tests / sizeof g_tests[0]; i++) {
    if (strcmp(argv[1], g_tests[i].name) == 0) {
      printf("%s (RR_TEST_SEED=0x%" PRIx64 ")\n", g_tests[i].name, g_seed);
      int64_t t0 = now_ms();
      g_tests[i].fn();
      printf("%s: ok (%.2f s)\n", g_tests[i].name, (double)(now_ms() - t0) / 1000);
      return 0;
    }
  }
  fprintf(stderr, "unknown test %s\n", argv[1]);
  return 2;
}
