/*
 * The shared driver of the *_perf tools: nccl-tests' flags, output and method, for
 * ringreduce. Each tool (all_reduce.c, ...) is a perf_coll table of a few callbacks, the way
 * nccl-tests' src/<collective>.cu files are a testColl each; perf_main does the rest:
 * options, the size sweep, timing, checking, the table, JSON.
 *
 * Method (as nccl-tests' src/common.cu): buffers are allocated once for -e bytes. For every
 * size, out-of-place then in-place: one untimed call, a barrier, -n timed calls (each at a
 * different offset of the big buffers, so small sizes do not always hit the same cache
 * lines), the mean time per call aggregated over ranks by -a; then, with -c, the buffers are
 * re-initialised, the call runs once more and every rank counts its wrong elements.
 */
#ifndef RR__BENCH_PERF_H_
#define RR__BENCH_PERF_H_

#include <stddef.h>
#include <stdint.h>

#include "ringreduce/ringreduce.h"

/* What one benchmarked call sees. */
typedef struct perf_ctx {
  rr_pg *pg;
  int rank, nranks;
  rr_dtype dtype;
  size_t esize; /* rr_dtype_size(dtype) */
  rr_op op;     /* only meaningful when the collective reduces */
  int root;
  int reduces;   /* the data pattern: reducible small integers, or rank-unique values */
  void *scratch; /* -e bytes, when perf_coll.needs_scratch (in the buffers' memory) */
  int mem_cuda;  /* the buffers are CUDA device memory (--mem cuda) */
} perf_ctx;

/* Element counts of one size, as nccl-tests' getCollByteCount. */
typedef struct perf_counts {
  /* Elements this rank sends from / receives into; for all_to_allv, where ranks differ, the
   * most of any rank, so that every rank prints the same size. A size where both are 0 is
   * skipped (fewer bytes than one element per rank). */
  size_t send, recv;
  size_t param; /* the count argument of the call: the "count" column */
  /* In place, sendbuf = recvbuf + send_inplace * rank and recvbuf = recvbuf +
   * recv_inplace * rank (elements): NCCL's aliasing for all-gather and reduce-scatter. */
  size_t send_inplace, recv_inplace;
} perf_counts;

typedef struct perf_coll {
  const char *name; /* "all_reduce": the call is rr_all_reduce, the tool all_reduce_perf */
  const char *tool; /* the tool's name when it is not name + "_perf" (nccl-tests' names) */
  int reduces;      /* takes an op (the redop column); else "none" */
  int rooted;       /* takes a root (the root column); else -1 */
  int min_ranks;    /* fewer ranks is a usage error */
  int needs_scratch;
  /* busbw / algbw for n ranks: what makes sizes comparable with the hardware's speed. */
  double (*bus_factor)(int nranks);
  void (*counts)(const perf_ctx *c, size_t count, perf_counts *out); /* count: elements */
  /* One call; a status from the library. */
  int (*run)(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count);
  /* Wrong elements in this rank's result (recvbuf as the call got it) after one run on
   * buffers the driver initialised: recvbuf[0..recv) poisoned, then sendbuf[0..send)
   * filled with this rank's input (so in place, the input overwrote the poison). */
  int64_t (*check)(perf_ctx *c, const void *recvbuf, size_t count, int in_place);
  /* all_reduce_perf --split: phase 0 runs the reduce-scatter half, phase 1 the all-gather
   * half of an all-reduce of nranks * count elements; NULL where it does not apply. */
  int (*split)(perf_ctx *c, int phase, const void *sendbuf, void *recvbuf, size_t count);
  const char *note; /* printed in the trailing section, when set */
  /* Called once on every rank when the world is known, before any buffer is allocated
   * (NULL: nothing to do): reads the tool's environment and checks it and -b/-e against the
   * world. -1 with err set is a usage error (exit 2 on every rank). */
  int (*setup)(perf_ctx *c, size_t minbytes, size_t maxbytes, char *err, size_t cap);
  /* Prints "#" lines about the tool's own settings after the rank lines of the header
   * (NULL: none); rank 0 only. */
  void (*describe)(const perf_ctx *c);
} perf_coll;

int perf_main(int argc, char **argv, const perf_coll *coll);
/* "all_reduce_perf", or coll->tool. */
const char *perf_tool_name(const perf_coll *coll);

/* Data (perf_data.c). Every rank can compute any rank's input and the reduced result of
 * any element without communication, so checking needs no extra traffic. */
void perf_fill_input(const perf_ctx *c, void *buf, size_t first, size_t n, int rank);
void perf_fill_poison(const perf_ctx *c, void *buf, size_t n);
/* Wrong elements of buf[0..n) against elements first.. of: the reduction over all ranks,
 * rank src's input, or the poison. */
int64_t perf_wrong_reduced(const perf_ctx *c, const void *buf, size_t first, size_t n);
int64_t perf_wrong_input(const perf_ctx *c, const void *buf, size_t first, size_t n, int src);
int64_t perf_wrong_poison(const perf_ctx *c, const void *buf, size_t n);

/* Buffer memory (perf_mem.c): --mem host|cuda. cuda != 0 means device memory. */
int perf_mem_cuda_devices(void);                            /* 0 without CUDA, a driver or a GPU */
int perf_mem_select(int local_rank, char *err, size_t cap); /* the device set; -1: err set */
void *perf_mem_alloc(int cuda, size_t bytes);
void perf_mem_free(int cuda, void *p);
int perf_mem_copy(int cuda, void *dst, const void *src, size_t bytes); /* -1 on failure */

/* Bus factors shared by several tools. */
double perf_factor_one(int nranks);
double perf_factor_ring(int nranks); /* (n - 1) / n */

#endif /* RR__BENCH_PERF_H_ */
