/*
 * What the driver measured and how rank 0 prints it: nccl-tests' header, rows and footer
 * (byte for byte in shape), the extra columns when asked, the trailing section and JSON.
 * Internal to bench/.
 */
#ifndef RR__BENCH_PERF_REPORT_H_
#define RR__BENCH_PERF_REPORT_H_

#include <stdint.h>
#include <stdio.h>

#include "perf.h"

typedef struct perf_opts {
  size_t minbytes, maxbytes, stepbytes, stepfactor;
  int iters, warmup, check, agg;
  int all_dtypes, all_ops;
  rr_dtype dtype;
  rr_op op;
  int root;
  int64_t timeout_ms;
  const char *json; /* -J */
  double link_gbps; /* --link-gbps X; 0 when not given */
  int link_auto;    /* --link-gbps auto */
  int percentiles, split;
  /* nccl-tests 2.17-2.19: -I per-iteration statistics, -K iterations they leave out, -z
   * blocking mode (0-3), -u elements of misalignment, -C "cputime" labels, -S timestamps,
   * -N cycles of the sweep (0: until killed). */
  int per_iter, per_iter_skip, blocking, unalign, cputime, timestamps;
  long cycles;
  int argc; /* the command line, for the JSON's "args" */
  char **argv;
} perf_opts;

/* nccl-tests' per-iteration summary (-I) of one half: each iteration counts at its slowest
 * rank, and the statistics leave out the first -K iterations. */
typedef struct perf_iter_stats {
  double min, max, avg, p50, p95, p99, stdev, cv_pct; /* microseconds; cv in % */
} perf_iter_stats;

/* One of a row's two halves (out-of-place, in-place). */
typedef struct perf_half {
  double time_us, algbw, busbw; /* time aggregated by -a; GB/s */
  int64_t wrong;                /* summed over ranks; -1: not checked */
  int have_iter;                /* -I or --percentiles: st, times and rank_times are set */
  perf_iter_stats st;
  const double *times;      /* -n per-iteration times (us), the max over ranks of each */
  const double *rank_times; /* nranks rows of -n: every rank's own times (rank 0 only) */
} perf_half;

typedef struct perf_split {
  int valid; /* fewer elements than ranks: no halves to time */
  double rs_us, ag_us, rs_busbw, ag_busbw;
  int64_t wrong;
} perf_split;

typedef struct perf_row {
  size_t bytes, count;
  rr_dtype dtype;
  const char *op;
  int root;
  perf_half half[2];
  perf_split split;
} perf_row;

/* Gathered from every rank for the "# Rank" lines; plain bytes on the wire. */
typedef struct perf_rank_info {
  int32_t pid, device; /* device: the CUDA device of --mem cuda, else the local rank */
  int32_t cuda;        /* 1: buffers in device memory */
  char host[120];
} perf_rank_info;

typedef struct perf_report {
  const char *tool;
  const perf_coll *coll;
  const perf_opts *o;
  int nranks;
  perf_rank_info *ranks;
  FILE *json;            /* rank 0, with -J */
  const char *json_path; /* the file written: -J's path, or path.N when that existed */
  int json_rows;
  int json_started, json_in_results; /* how far the document is written (for an abort) */
  const perf_ctx *ctx;               /* for coll->describe */
  /* The link: speed in Gbit/s (0: unknown), where it came from, and whether it is a column. */
  double link_gbps;
  char link_src[192];
  int link_column;
  /* Footer totals. */
  int64_t wrong_total;
  double bw_sum, best_busbw;
  int bw_count;
  /* The options line shows -b and -e as given; reduced_max is the -e used when memory
   * forced a smaller one (0: not reduced). */
  size_t header_min, header_max, reduced_max;
} perf_report;

void perf_report_link(perf_report *r);
void perf_report_header(perf_report *r);
void perf_report_row(perf_report *r, const perf_row *row);
/* Prints the footer and closes the JSON; returns non-zero when the run failed. */
int perf_report_footer(perf_report *r);
/* A call failed on rank 0: close the JSON as a valid document naming the error. */
void perf_report_abort(perf_report *r, const char *error);
/* nccl-tests' statistics of n per-iteration times, the first `skip` left out. */
void perf_iter_stats_of(const double *times, int n, int skip, double *scratch, perf_iter_stats *st);

#endif /* RR__BENCH_PERF_REPORT_H_ */
