/* test_store: what the TCP and the file store must both do, alike: set / get / add / check /
 * delete / wait and their argument checks, atomic adds from many processes, blocking gets,
 * timeouts, and one store shared by threads. s and s2 are two clients of one store. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "test_store.h"

/* ---------------------------------------------------------------------------------------------
 * Semantics, the same for both kinds of store. s and s2 are two clients of one store.
 */
void expect_value(rr_store *s, const char *key, const void *want, size_t wlen) {
  void *v = NULL;
  size_t len = 12345;
  OK(rr_store_get(s, key, &v, &len));
  CHECK(len == wlen, "get '%s': %zu bytes, expected %zu", key, len, wlen);
  CHECK(wlen == 0 || memcmp(v, want, wlen) == 0, "get '%s': wrong bytes", key);
  free(v);
}

void semantics(rr_store *s, rr_store *s2) {
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

/* 8 processes x 1000 adds: exactly 8000, and every result 1..8000 seen exactly once. */
enum { ADD_PROCS = 8, ADD_EACH = 1000 };
typedef struct add_arg {
  int tcp_port;     /* TCP, or */
  const char *path; /* file */
  int idx;
  int64_t *results; /* shared */
} add_arg;

rr_store *open_client(int tcp_port, const char *path, int64_t timeout_ms) {
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

void add_procs(int tcp_port, const char *path) {
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

void get_blocks(rr_store *s, int tcp_port, const char *path) {
  setter_arg a = {tcp_port, path, 400, "late/key", 1000 + rnd() % 1000};
  /* t0 before the fork: the child's sleep starts after it, so the bound below holds however
   * late this process runs again after forking. */
  int64_t t0 = now_ms();
  pid_t pid = spawn(setter_child, &a);
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
  t0 = now_ms();
  pid = spawn(setter_child, &a);
  const char *keys[] = {"late/key", "late/key2"};
  OK(rr_store_wait(s, keys, 2, 0));
  waited = now_ms() - t0;
  CHECK(waited >= 350 && waited < 5000, "wait returned after %" PRId64 " ms", waited);
  CHECK(wait_child(pid, 10000) == 0, "the setter failed");
}

/* Timeouts: get after the store's timeout, wait after its own, naming the key. Tolerance:
 * not earlier than the timeout - 20 ms, not later than + 1000 ms. */
void get_timeout(rr_store *s_short, rr_store *s_long) {
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

void threads(rr_store *s) {
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
