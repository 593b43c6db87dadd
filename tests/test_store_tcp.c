/* test_store: the TCP store: its server's port, large values, clients that start first,
 * unreachable and busy ports, a master that dies or freezes, many blocked clients, IPv6; and
 * the shared cases (test_store_common.c) against a master in this or another process. */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_store.h"

/* ---------------------------------------------------------------------------------------------
 * TCP store
 */
void test_tcp_semantics(void) {
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

void test_tcp_large(void) {
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

void test_tcp_add_procs(void) {
  master_proc m;
  master_proc_start(&m, 0, 20000);
  add_procs(m.port, NULL);
  master_proc_stop(&m);
}

void test_tcp_get_blocks(void) {
  master_proc m;
  master_proc_start(&m, 0, 10000);
  rr_store *s = open_client(m.port, NULL, 10000);
  get_blocks(s, m.port, NULL);
  rr_store_free(s);
  master_proc_stop(&m);
}

/* A store whose process runs out of descriptors gives up (after 2 s of failed accepts) and
 * winds down (1 s). A client that asks only after that, its connection idle all along (a
 * poll's pause, a loaded machine: the CI run that failed rrun_fd_exhaustion), must still
 * hear why, not "connection reset": the goodbye waits in its socket (store_proto.h). */
void test_tcp_goodbye(void) {
  int up[2];
  CHECK(pipe(up) == 0, "pipe: %s", strerror(errno));
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    g_in_child = 1;
    close(up[0]);
    rr_store *s = NULL;
    OK(rr_store_tcp("127.0.0.1", 0, 1, 20000, &s));
    int p = rr_store_port(s);
    /* A few descriptors past those open now: the flood below takes them. */
    int next = dup(0);
    CHECK(next >= 0, "dup: %s", strerror(errno));
    close(next);
    struct rlimit rl = {(rlim_t)next + 3, (rlim_t)next + 3};
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
    CHECK(write(up[1], &p, sizeof p) == (ssize_t)sizeof p, "write: %s", strerror(errno));
    sleep(30); /* killed before */
    _exit(0);
  }
  close(up[1]);
  int port = 0;
  CHECK(read(up[0], &port, sizeof port) == (ssize_t)sizeof port, "the master did not start");
  close(up[0]);
  rr_store *c = open_client(port, NULL, 20000);
  OK(rr_store_set(c, "k", "v", 1)); /* its connection, idle from now on */
  enum { FLOOD = 16 };
  int fds[FLOOD];
  for (int i = 0; i < FLOOD; i++) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
          strerror(errno));
  }
  sleep(4); /* 2 s of failed accepts, 1 s of wind-down, and a margin */
  const char *keys[1] = {"k"};
  int exists = -1;
  int st = rr_store_check(c, keys, 1, &exists);
  CHECK(st == RR_EPEER && strstr(rr_last_error(), "ran out of file descriptors"),
        "a check after the store gave up: %s: %s", rr_status_name(st), rr_last_error());
  rr_store_free(c);
  for (int i = 0; i < FLOOD; i++) close(fds[i]);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

void test_tcp_get_timeout(void) {
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

void test_tcp_client_first(void) {
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
void test_tcp_unreachable(void) {
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
void test_tcp_port_in_use(void) {
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

void test_tcp_master_dies(void) {
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
void test_tcp_master_frozen(void) {
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

void test_tcp_many_clients(void) {
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

void test_tcp_threads(void) {
  rr_store *m = NULL;
  OK(rr_store_tcp("127.0.0.1", 0, 1, 10000, &m));
  rr_store *c = open_client(rr_store_port(m), NULL, 10000);
  threads(c);
  threads(m); /* the master's own client too */
  rr_store_free(c);
  rr_store_free(m);
}

void test_tcp_ipv6(void) {
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
