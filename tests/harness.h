/* Shared test helpers: deterministic random data every rank can regenerate for every other
 * rank (so each rank checks its whole result against a reference without communication),
 * references in exact integer or float64 arithmetic, stated tolerances, and check macros
 * that name the rank. */
#ifndef RR__TESTS_HARNESS_H_
#define RR__TESTS_HARNESS_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ringreduce/ringreduce.h"

extern _Thread_local int t_rank; /* for messages; -1 in the parent */

#define T_FAIL(...)                                                          \
  do {                                                                       \
    fprintf(stderr, "rank %d: %s:%d: ", t_rank, __FILE__, __LINE__);         \
    fprintf(stderr, __VA_ARGS__);                                            \
    fputc('\n', stderr);                                                     \
    return 1;                                                                \
  } while (0)
#define T_CHECK(cond, ...)                                                   \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", t_rank, __FILE__, \
              __LINE__, #cond);                                              \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
      return 1;                                                              \
    }                                                                        \
  } while (0)
/* A call that must return RR_OK. */
#define T_OK(call)                                                               \
  do {                                                                           \
    int t_st_ = (call);                                                          \
    if (t_st_ != RR_OK) T_FAIL("%s returned %s: %s", #call, rr_status_name(t_st_), \
                               rr_last_error());                                 \
  } while (0)

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
size_t t_check_reduced(const void *got, size_t n, rr_dtype d, rr_op op, uint64_t seed,
                       int nranks, size_t first, const char *what);
/* Check got[0..n) equals rank src's data elements first..first+n exactly. */
size_t t_check_copied(const void *got, size_t n, rr_dtype d, rr_op op, uint64_t seed, int src,
                      size_t first, const char *what);

/* Float tolerance for a reduction over n ranks: |got - ref| <= n * eps * sum|x_i| for
 * SUM/AVG (plus eps * |ref| for AVG's division), n * eps * |ref| for PROD, where eps is the
 * dtype's machine epsilon (2^-10 half, 2^-7 bfloat16, 2^-23 float, 2^-52 double). */
double t_eps(rr_dtype d);

/* Element as double (floats) or as int64 bits sign-extended (integers). */
double t_load(const void *buf, size_t i, rr_dtype d);

/* Wall clock for timing checks, in seconds (CLOCK_MONOTONIC). */
double t_now(void);

/* FNV-1a of a buffer, to compare results across ranks bit for bit. */
uint64_t t_hash(const void *buf, size_t bytes);

#endif /* RR__TESTS_HARNESS_H_ */

/* Launch n ranks as child processes with the env:// variables set (MASTER_ADDR=127.0.0.1,
 * a free MASTER_PORT), without stopping the others when one fails (unlike rr_spawn), so
 * fault tests can see what survivors report. `during` (may be NULL) runs in the parent
 * after the start with the children's pids, e.g. to kill one. All children are killed
 * when timeout_s passes (then the call returns -1). Exit codes / signals land in the
 * arrays (each n long). Returns 0 when all exited. */
typedef void (*t_during_fn)(const int *pids, int n, void *arg);
int t_run(int n, int (*fn)(int rank, void *arg), void *arg, t_during_fn during,
          double timeout_s, int *exit_codes, int *signals);
/* A TCP port nobody listens on right now. */
int t_free_port(void);
