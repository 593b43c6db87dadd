/* Tests of the rendezvous store through the public API (TCP and file stores), with real
 * processes (fork) and threads. One binary; argv[1] names the test, so that CTest runs each
 * in its own process with its own time limit:  test_store <name>   (test_store lists them).
 *
 * Fork safety: a test forks only while it has no threads of its own; when a master must run
 * beside forked clients it runs in a child process of its own (master_proc_start).
 *
 * One executable from several files: test_store_common.c (what both kinds of store must do
 * alike), test_store_tcp.c and test_store_file.c (what is particular to each). This file
 * holds the harness they share (test_store.h) and the table of tests. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_store.h"
#include "test_port.h"

/* ---------------------------------------------------------------------------------------------
 * Harness
 */
int g_in_child;

void fail_exit(void) {
  fflush(stderr);
  if (g_in_child) _exit(1);
  exit(1);
}

int error_has(const char *needle) {
  return needle == NULL || strstr(rr_last_error(), needle) != NULL;
}

int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

uint64_t g_seed, g_base;
uint64_t rnd_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}
uint64_t rnd(void) {
  return rnd_next(&g_seed);
}
void fill_bytes(void *buf, size_t n, uint64_t seed, uint64_t tag) {
  uint64_t s = (seed ^ (tag * 0x9E3779B97F4A7C15ULL)) | 1;
  uint8_t *p = buf;
  for (size_t i = 0; i < n; i++) {
    if ((i & 7) == 0) rnd_next(&s);
    p[i] = (uint8_t)(s >> (8 * (i & 7)));
  }
  if (n > 2) p[n / 2] = 0; /* always a NUL inside: values are binary */
}

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  CHECK(p != NULL, "out of memory (%zu bytes)", n);
  return p;
}

pid_t spawn(void (*fn)(void *), void *arg) {
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

int wait_child(pid_t pid, int64_t timeout_ms) {
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

void *shared_mem(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
  memset(p, 0, n);
  return p;
}

int free_port(void) {
  int port = rr_test_free_port();
  CHECK(port > 0, "no free port in %d..%d", RR_TEST_PORT_LO, RR_TEST_PORT_HI);
  return port;
}

void master_proc_start(master_proc *m, int port, int64_t timeout_ms) {
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

void master_proc_stop(master_proc *m) {
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
const char *tmp_path(const char *name) {
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

int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
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
    {"tcp_goodbye", test_tcp_goodbye},
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
