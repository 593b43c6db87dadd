/* What the files of test_ddp share: the run's seed, the mixed-dtype model, a few helpers, and
 * each section's entry point, which main (test_ddp.c) dispatches to by name. */
#ifndef RR__TESTS_TEST_DDP_H_
#define RR__TESTS_TEST_DDP_H_

#include <stddef.h>
#include <stdint.h>

#include "ringreduce/ddp.h"
#include "ringreduce/ringreduce.h"
#include "tests/harness.h"

#define MIB (1024.0 * 1024.0)

extern uint64_t g_seed; /* t_seed(), read once by main */

#define NP_GRADS 7
extern const size_t g_counts[NP_GRADS];
extern const rr_dtype g_dtypes[NP_GRADS];

/* 1 in *same on every rank when buf is bit-identical on all ranks; returns the status. */
int same_on_all(rr_pg *pg, const void *buf, size_t bytes, int *same);
/* A permutation of 0..n-1 from (seed, stream). */
void shuffle(int *a, int n, uint64_t seed, uint64_t stream);
/* Rank r's gradient values from element `base` on (never zero). */
void fill_grad(void *g, size_t n, rr_dtype d, uint64_t seed, int r, size_t base);

/* test_ddp_buckets.c */
int sec_buckets(void);
int order_rank(int rank, void *arg);

/* test_ddp_grads.c */
int grads_rank(int rank, void *arg);
int hooks_rank(int rank, void *arg);

/* test_ddp_train.c: equiv and identical differ only in these numbers. */
typedef struct mlp_case {
  int steps, local, hook;
  double cap_mb, tol;
} mlp_case;
int equiv_rank(int rank, void *arg);
int nosync_rank(int rank, void *arg);

/* test_ddp_state.c */
typedef struct ckpt_arg {
  char dir[256];
} ckpt_arg;
int checkpoint_rank(int rank, void *arg);
int broadcast_rank(int rank, void *arg);

/* test_ddp_errors.c */
int missing_rank(int rank, void *arg);
int mismatch_rank(int rank, void *arg);
int cuda_rank(int rank, void *arg);
int args_rank(int rank, void *arg);

/* test_ddp_gpu.c: 77 (skipped) without a GPU; fake: on the host fake of the CUDA table. */
int sec_gpu(int w, int fake);

/* test_ddp_elastic.c: rr_ddp_set_group after a rank is killed (issue 26). */
int sec_elastic(int w);

/* test_ddp_gpucost.c: CUDA calls per DDP step on device tensors, counted on the fake. */
int sec_gpucost(int w);

#endif /* RR__TESTS_TEST_DDP_H_ */
