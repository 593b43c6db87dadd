/* Shared test helpers: deterministic random data every rank can regenerate for every other
 * rank (so each rank checks its whole result against a reference without communication),
 * references in exact integer or float64 arithmetic, stated tolerances, and check macros
 * that name the rank. */
#ifndef RR__TESTS_HARNESS_H_
#define RR__TESTS_HARNESS_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ringreduce/ringreduce.h"

extern _Thread_local int t_rank; /* for messages; -1 in the parent */

#define T_FAIL(...)                                                  \
  do {                                                               \
    fprintf(stderr, "rank %d: %s:%d: ", t_rank, __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                    \
    fputc('\n', stderr);                                             \
    return 1;                                                        \
  } while (0)
#define T_CHECK(cond, ...)                                                                      \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", t_rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                             \
      fputc('\n', stderr);                                                                      \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)
/* A call that must return RR_OK. */
#define T_OK(call)                                                                 \
  do {                                                                             \
    int t_st_ = (call);                                                            \
    if (t_st_ != RR_OK)                                                            \
      T_FAIL("%s returned %s: %s", #call, rr_status_name(t_st_), rr_last_error()); \
  } while (0)

/* An error message must name something (a rank, a call, a cause). */
#define T_HAS(msg, sub) \
  T_CHECK(strstr((msg), (sub)) != NULL, "message lacks '%s': %s", (sub), (msg))

/* The run's seed: $RR_TEST_SEED or a fixed default; printed once by t_seed_announce. */
uint64_t t_seed(void);
void t_seed_announce(const char *test);

/* 64 random bits for (seed, stream, index): a counter-based generator (splitmix64 mix),
 * so any element of any rank's data can be regenerated independently. */
uint64_t t_bits(uint64_t seed, uint64_t stream, uint64_t i);

/* The value rank `rank` holds at element i for a test of (dtype, op): never zero; floats
 * are exactly representable in the dtype; PROD magnitudes stay in [0.5, 2) so products of
 * up to 8 ranks neither overflow nor underflow. */
double t_value(rr_dtype d, rr_op op, uint64_t seed, int rank, size_t i);
/* Raw bits of the same value (integers: the integer itself). */
uint64_t t_value_bits(rr_dtype d, rr_op op, uint64_t seed, int rank, size_t i);
/* Fill buf[0..n) with element values first..first+n of rank's data. */
void t_fill(void *buf, size_t n, rr_dtype d, rr_op op, uint64_t seed, int rank, size_t first);

/* Check got[0..n) (elements first..first+n of the result) against the reduction over
 * ranks 0..nranks-1 of t_value. Integers must be exact (wrapping arithmetic); floats
 * within the tolerance t_tolerance documents; MIN/MAX exact. Prints the first few
 * differences; returns the number of wrong elements. */
size_t t_check_reduced(const void *got, size_t n, rr_dtype d, rr_op op, uint64_t seed, int nranks,
                       size_t first, const char *what);
/* Check got[0..n) equals rank src's data elements first..first+n exactly. */
size_t t_check_copied(const void *got, size_t n, rr_dtype d, rr_op op, uint64_t seed, int src,
                      size_t first, const char *what);

/* Float tolerance for a reduction over n ranks: |got - ref| <= n * eps * sum|x_i| for
 * SUM/AVG (plus eps * |ref| for AVG's division), n * eps * |ref| for PROD, where eps is the
 * dtype's machine epsilon (2^-10 half, 2^-7 bfloat16, 2^-23 float, 2^-52 double). */
double t_eps(rr_dtype d);

/* Element as double (floats) or as int64 bits sign-extended (integers). */
double t_load(const void *buf, size_t i, rr_dtype d);

/* 1 for float16, bfloat16, float32 and float64. */
int t_is_float(rr_dtype d);
/* The ops d supports (the bitwise ones only on integers), in enum order; returns how many
 * were written to out (RR_NUM_OPS at most). */
int t_valid_ops(rr_dtype d, rr_op *out);
/* RR_TEST_MATRIX=lean (tests/run.sh's sanitizer stages): 1 when the matrices run lean. A lean
 * matrix keeps one dtype of each element size (t_lean_dtype) and, for reductions, sum and one
 * other op. What a sanitizer looks for (a byte outside a buffer, two threads on one without
 * order) depends on element sizes, counts, placements, roots and the world, which all stay;
 * the arithmetic of every dtype and op runs in op.* under ASan/UBSan and in the full matrices
 * of the plain stage. */
int t_lean(void);
int t_lean_dtype(rr_dtype d);

/* malloc that does not return NULL: a rank that cannot get its buffers has nothing to check,
 * so it says so (naming the rank and the size) and exits 3. 0 bytes give a 1-byte block. */
void *t_alloc(size_t bytes);

/* Wall clock for timing checks, in seconds (CLOCK_MONOTONIC). */
double t_now(void);

/* Kill tests meet in a folder: each rank marks itself ready once it is inside its loop of
 * calls (t_ready_mark: 0, or 1 when the mark cannot be made), t_run's `during` callback waits
 * up to wait_s for all n marks before it kills (t_ready_wait), and the test removes the marks
 * and the folder (t_ready_remove). */
int t_ready_mark(const char *dir, int rank);
void t_ready_wait(const char *dir, int n, double wait_s);
void t_ready_remove(const char *dir, int n);

/* FNV-1a of a buffer, to compare results across ranks bit for bit. */
uint64_t t_hash(const void *buf, size_t bytes);

/* Whether buf is bit-identical on every rank of pg, through an all-gather of hashes: *differs
 * is the lowest rank whose bytes differ from this rank's, -1 when there is none. Returns the
 * all-gather's status (*differs is -1 then too). */
int t_differing_rank(rr_pg *pg, const void *buf, size_t bytes, int *differs);

/* A barrier entered after a random pause of up to 20 ms (from seed, this rank and iter), then
 * every rank's entry and exit times gathered: *early is a rank that entered after this one
 * had left (-1 when none), *left this rank's exit time and *entered that rank's entry time.
 * Returns the status of the first call that failed. */
int t_barrier_early(rr_pg *pg, uint64_t seed, int iter, int *early, double *left, double *entered);

/* A second thread of a rank running fn(arg); its result is kept, so code written in the
 * T_CHECK style (1 on failure) runs there as it would on the main thread. */
typedef struct t_thread {
  pthread_t id;
  int (*fn)(void *arg);
  void *arg;
  int rc;
} t_thread;
/* 0, or pthread_create's error number. */
int t_thread_start(t_thread *t, int (*fn)(void *arg), void *arg);
/* Waits for the thread; returns fn's result. */
int t_thread_join(t_thread *t);

/* rr_abort(pg) from a second thread delay_ms after the start: how a test fails a call that is
 * already running. Join with t_thread_join(&a->thread). */
typedef struct t_aborter {
  t_thread thread;
  rr_pg *pg;
  int delay_ms;
} t_aborter;
int t_abort_after(t_aborter *a, rr_pg *pg, int delay_ms);

/* Launch n ranks as child processes with the env:// variables set (MASTER_ADDR=127.0.0.1,
 * a free MASTER_PORT), without stopping the others when one fails (unlike rr_spawn), so
 * fault tests can see what survivors report. `during` (may be NULL) runs in the parent
 * after the start with the children's pids, e.g. to kill one. All children are killed
 * when timeout_s passes (then the call returns -1). Exit codes / signals land in the
 * arrays (each n long). Returns 0 when all exited. */
typedef void (*t_during_fn)(const int *pids, int n, void *arg);
int t_run(int n, int (*fn)(int rank, void *arg), void *arg, t_during_fn during, double timeout_s,
          int *exit_codes, int *signals);
/* t_run for the common case where every rank must exit 0: prints a line for each rank that
 * did not (prefixed by `what` unless it is NULL) and returns 1 then or when t_run itself
 * failed (a timeout), else 0. */
int t_run_all(int n, int (*fn)(int rank, void *arg), void *arg, double timeout_s, const char *what);
/* The exit-code half of t_run_all, for callers that expect some ranks to fail: looks at
 * ranks 0..n-1 only. */
int t_exits_ok(int n, const int *exit_codes, const int *signals, const char *what);
/* A TCP port nobody listens on right now. */
int t_free_port(void);

#endif /* RR__TESTS_HARNESS_H_ */
