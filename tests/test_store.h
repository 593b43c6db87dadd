/* What the files of test_store share: checks that end the process (in a forked child without
 * running the parent's atexit), the random source, child processes, a master store in a
 * process of its own, temporary paths; the cases both kinds of store run; and every test's
 * entry point, listed in test_store.c's table. Only the public API: this test links the
 * library as users do, not the test harness. */
#ifndef RR__TESTS_TEST_STORE_H_
#define RR__TESTS_TEST_STORE_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#include "ringreduce/ringreduce.h"

extern int g_in_child; /* set in every forked child */
void fail_exit(void);

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

int error_has(const char *needle);

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

int64_t now_ms(void);
void sleep_ms(int64_t ms);

/* xorshift64*: reproducible random data from the seed printed at start. g_seed advances
 * with every rnd(); g_base stays, so that any process can recompute fill_bytes(g_base, tag). */
extern uint64_t g_seed, g_base;
uint64_t rnd_next(uint64_t *s);
uint64_t rnd(void);
/* Bytes that depend only on (seed, tag): another process can recompute them. */
void fill_bytes(void *buf, size_t n, uint64_t seed, uint64_t tag);

void *xmalloc(size_t n);
/* Run fn(arg) in a child process that exits 0 when fn returns. */
pid_t spawn(void (*fn)(void *), void *arg);
/* Exit status of a child (128 + signal if killed); kills it after timeout_ms. */
int wait_child(pid_t pid, int64_t timeout_ms);
void *shared_mem(size_t n);
/* A TCP port nothing listens on right now. */
int free_port(void);

/* A master serving in its own process: it reports its port, serves until *ctl is closed,
 * then frees the store (exit status 0 only if all of that worked). */
typedef struct master_proc {
  pid_t pid;
  int port;
  int ctl; /* write end: close it to stop the master */
} master_proc;
void master_proc_start(master_proc *m, int port, int64_t timeout_ms);
void master_proc_stop(master_proc *m);

/* name inside a fresh directory removed at exit (by the parent only). */
const char *tmp_path(const char *name);
int file_exists(const char *path);

/* test_store_common.c: a TCP client (tcp_port) or a user of the file at path. */
rr_store *open_client(int tcp_port, const char *path, int64_t timeout_ms);
void expect_value(rr_store *s, const char *key, const void *want, size_t wlen);
void semantics(rr_store *s, rr_store *s2);
void add_procs(int tcp_port, const char *path);
void get_blocks(rr_store *s, int tcp_port, const char *path);
void get_timeout(rr_store *s_short, rr_store *s_long);
void threads(rr_store *s);

/* test_store_tcp.c */
void test_tcp_semantics(void);
void test_tcp_large(void);
void test_tcp_goodbye(void);
void test_tcp_add_procs(void);
void test_tcp_get_blocks(void);
void test_tcp_get_timeout(void);
void test_tcp_client_first(void);
void test_tcp_unreachable(void);
void test_tcp_port_in_use(void);
void test_tcp_master_dies(void);
void test_tcp_master_frozen(void);
void test_tcp_many_clients(void);
void test_tcp_threads(void);
void test_tcp_ipv6(void);

/* test_store_file.c */
void test_file_semantics(void);
void test_file_add_procs(void);
void test_file_get_blocks(void);
void test_file_get_timeout(void);
void test_file_refcount(void);
void test_file_threads(void);
void test_file_corrupt(void);

#endif /* RR__TESTS_TEST_STORE_H_ */
