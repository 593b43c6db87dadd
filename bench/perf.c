/*
 * The *_perf driver: options, the size sweep, timing, checking and the nccl-tests table.
 * See perf.h for the method and bench/README.md for the output.
 *
 * Only rank 0 prints (stdout, plus the -J file); any rank prints its own errors to stderr,
 * prefixed with its rank. Exit status: 0 success, 1 wrong results or a failed call, 2 bad
 * usage (as getopt tools do).
 *
 * (Over 800 lines: nccl-tests' every flag and column in one driver that all the *_perf tools
 * share; the per-collective parts are in their own files.)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "perf_report.h"

/* -d all / -o all, in nccl-tests' order (it also has uint32/uint64, which ringreduce lacks). */
static const rr_dtype all_dtypes[] = {RR_INT8,    RR_UINT8,   RR_INT32,   RR_INT64,
                                      RR_FLOAT16, RR_FLOAT32, RR_FLOAT64, RR_BFLOAT16};
static const rr_op all_ops[] = {RR_SUM, RR_PROD, RR_MAX, RR_MIN, RR_AVG};

/* Sizes of at most 2^40 bytes: far beyond any host's buffers, and size * factor cannot
 * overflow. */
#define PERF_MAX_BYTES ((size_t)1 << 40)

typedef struct perf_state {
  const perf_coll *coll;
  perf_opts o;
  perf_ctx ctx;
  perf_report rep;
  char *sendbuf, *recvbuf;
  char *hsend, *hrecv; /* --mem cuda: host mirrors of the device buffers, for data and checks */
  int mem;             /* --mem: -1 not given, 0 host, 1 cuda */
  int cuda_dev;        /* the CUDA device the buffers are on (--mem cuda), else -1 */
  size_t bufbytes;     /* -e: the largest call's bytes */
  size_t allocbytes;   /* each buffer: bufbytes, -u's shift and a margin */
  double *iter_us;     /* this rank's per-iteration times of one timed loop (-n entries) */
  /* -I / --percentiles, per half (out of place, in place): the max over ranks of each
   * iteration, and on rank 0 every rank's row (nranks x -n), kept until the row is printed. */
  double *iter_max[2], *iter_all[2];
  double *sorted;   /* scratch for the statistics */
  int corrupt_rank; /* $RR_PERF_CORRUPT: the test hook that proves checking can fail */
} perf_state;

/* ---------------------------------------------------------------------------------------
 * Errors. */

const char *perf_tool_name(const perf_coll *coll) {
  static char name[64];
  if (coll->tool) return coll->tool;
  snprintf(name, sizeof name, "%s_perf", coll->name);
  return name;
}

/* Before the group exists the rank comes from the launcher's environment. */
static int env_rank0(void) {
  const char *r = getenv("RANK");
  return r == NULL || strcmp(r, "0") == 0;
}

/* Flag errors are the same on every rank, so rank 0 (or a process run alone) reports them
 * at once. Other ranks wait a second first: the first rank to exit makes rrun stop the rest,
 * and that must not be a silent rank that kills rank 0 before it has printed. Should rank 0
 * be slower still, they report it themselves. */
__attribute__((noreturn, format(printf, 2, 3))) static void usage_error(const perf_coll *coll,
                                                                        const char *fmt, ...) {
  if (!env_rank0()) {
    sleep(1);
    fprintf(stderr, "%s: rank %s: ", perf_tool_name(coll), getenv("RANK"));
  } else {
    fprintf(stderr, "%s: ", perf_tool_name(coll));
  }
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s -h' for the options.\n", perf_tool_name(coll));
  exit(2);
}

/* Every library call goes through here: a failure ends this rank with the library's own
 * sentence (who, which call, why); rrun then stops the other ranks. */
static void check_call(perf_state *s, int status, const char *what) {
  if (status == RR_OK) return;
  char rank[32];
  /* Before the group exists (a failed init), the launcher's RANK is all there is. */
  if (s->ctx.rank >= 0)
    snprintf(rank, sizeof rank, "%d", s->ctx.rank);
  else
    snprintf(rank, sizeof rank, "%s", getenv("RANK") ? getenv("RANK") : "?");
  fprintf(stderr, "%s: rank %s: %s failed: %s (%s): %s\n", perf_tool_name(s->coll), rank, what,
          rr_status_name(status), rr_strerror(status), rr_last_error());
  /* Rank 0's JSON ends as a valid document whose "errors" says why (nccl-tests closes its
   * JSON on early errors too), so a script reading it sees the failure, not a parse error. */
  if (s->rep.json) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s failed: %s: %s", what, rr_status_name(status), rr_last_error());
    perf_report_abort(&s->rep, msg);
  }
  fflush(stdout);
  exit(1);
}
#define PERF_CHECK(s, call) check_call((s), (call), #call)

static void *alloc_or_die(const perf_state *s, size_t bytes, const char *what) {
  void *p = NULL;
  /* Page-aligned, as device allocations are: no tool pays for a misaligned start. */
  if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) {
    fprintf(stderr, "%s: rank %d: cannot allocate %zu bytes for %s (lower -e)\n",
            perf_tool_name(s->coll), s->ctx.rank, bytes, what);
    exit(1);
  }
  return p;
}

/* --mem cuda: data is made and checked in host mirrors of the device buffers (same
 * offsets) and copied across; with host memory these are no-ops. */
static char *host_of(const perf_state *s, char *p) {
  if (!s->ctx.mem_cuda) return p;
  uintptr_t x = (uintptr_t)p, b = (uintptr_t)s->sendbuf;
  if (x >= b && x < b + s->allocbytes) return s->hsend + (x - b);
  return s->hrecv + (x - (uintptr_t)s->recvbuf);
}

static void mirror_copy(const perf_state *s, char *dev, size_t bytes, int to_device) {
  if (!s->ctx.mem_cuda || bytes == 0) return;
  char *h = host_of(s, dev);
  if (perf_mem_copy(1, to_device ? dev : h, to_device ? h : dev, bytes) != 0) {
    fprintf(stderr, "%s: rank %d: cudaMemcpy of %zu bytes %s the device failed\n",
            perf_tool_name(s->coll), s->ctx.rank, bytes, to_device ? "to" : "from");
    exit(1);
  }
}
#define upload(s, dev, bytes) mirror_copy((s), (dev), (bytes), 1)
#define download(s, dev, bytes) mirror_copy((s), (dev), (bytes), 0)

/* ---------------------------------------------------------------------------------------
 * Options. */

static void usage(const perf_coll *coll) {
  if (!env_rank0()) return;
  printf(
      "usage: rrun --nproc-per-node N %s [options]\n"
      "\n"
      "nccl-tests' %s for ringreduce: times rr_%s over a range of sizes on every rank of\n"
      "the job (env://, as set by rrun), checks the results and prints nccl-tests' table.\n"
      "\n"
      "  -b, --minbytes N       smallest size in bytes, K/M/G suffixes (default 32M)\n"
      "  -e, --maxbytes N       largest size (default 32M)\n"
      "  -f, --stepfactor N     multiply the size by N each step (default 1: use -i)\n"
      "  -i, --stepbytes N      add N bytes each step when -f is 1 (default 1M)\n"
      "  -n, --iters N          timed iterations per size (default 20)\n"
      "  -w, --warmup_iters N   warm-up iterations at the largest and smallest size (default 5)\n"
      "  -c, --check N          check the results N times per size, 0: no check (default 1)\n"
      "  -d, --datatype T       int8 uint8 int32 int64 half float double bfloat16, or all\n"
      "                         (default float)\n"
      "  -o, --op OP            sum prod min max avg (band bor bxor: integers), or all\n"
      "                         (default sum)\n"
      "  -r, --root R           root rank of broadcast and reduce (default 0)\n"
      "  -a, --average N        time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 1)\n"
      "  -I, --per_iter_timing 0|1  columns after each half's #wrong: min, max, p99 and\n"
      "                         coefficient of variation of the per-iteration times, each\n"
      "                         iteration at its slowest rank; with -J every time (default 0)\n"
      "  -K, --per_iter_skip N  leave the first N iterations out of -I's statistics\n"
      "  -z, --blocking N       0, 2: calls back to back (ringreduce's calls always block);\n"
      "                         1: a barrier after each call, timed; 3: a barrier after each\n"
      "                         call, not timed (default 0)\n"
      "  -u, --unalign N        misalign both buffers by N elements (default 0)\n"
      "  -N, --run_cycles N     run the sweep N times, printing each; 0: until killed\n"
      "  -C, --report_cputime 0|1  label the time columns cputime (the same host times)\n"
      "  -S, --report_timestamps 0|1  end each row with the local date and time\n"
      "  -J, --output_file FILE.json  also write the results as JSON (rank 0; FILE.json.N\n"
      "                         when FILE.json exists, as nccl-tests)\n"
      "  -T, --timeout S        fail a call that takes longer than S seconds (default: the\n"
      "                         library's, $RR_TIMEOUT or 30 min)\n"
      "  -t, -g, -m, -G, -p, -y, -R, -M, -D, -x  nccl-tests' threads, GPUs, aggregation,\n"
      "                         graphs, parallel init, null stream, registration, memory\n"
      "                         report, device kernels, CTA policy: accepted with the only\n"
      "                         values that apply here (1 1 1 0 0 0 0 0 0 and -x -1)\n"
      "  -h, --help             this help\n"
      "\n"
      "Extras (not in nccl-tests; extra columns go after the standard ones):\n"
      "  --link-gbps X|auto     column: busbw as %% of a link of X Gbit/s (auto: the speed of\n"
      "                         the interface carrying the traffic, from /sys/class/net)\n"
      "  --percentiles          columns: p50 and p99 of the per-iteration times (as -I's:\n"
      "                         each iteration at its slowest rank, -K applies)\n"
      "  --mem host|cuda        buffers in host or CUDA device memory (device LOCAL_RANK\n"
      "                         modulo the GPUs); default cuda when a GPU is present\n"
      "%s"
      "\n"
      "Example: rrun --nproc-per-node 4 %s -b 8 -e 256M -f 4\n",
      perf_tool_name(coll), perf_tool_name(coll), coll->name,
      coll->split
          ? "  --split                columns: the reduce-scatter and all-gather halves of\n"
            "                         the all-reduce, timed separately\n"
          : "",
      perf_tool_name(coll));
}

/* A size as nccl-tests reads it: a number and an optional K, M or G (powers of 1024). */
static int parse_size(const char *arg, size_t *out) {
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (end == arg || errno != 0 || !(v >= 0)) return -1;
  double mult = 1;
  if (*end) {
    switch (*end) {
      case 'K':
      case 'k':
        mult = 1024.0;
        break;
      case 'M':
      case 'm':
        mult = 1024.0 * 1024;
        break;
      case 'G':
      case 'g':
        mult = 1024.0 * 1024 * 1024;
        break;
      default:
        return -1;
    }
    if (end[1] != '\0') return -1;
  }
  v *= mult;
  if (v > (double)PERF_MAX_BYTES) return -1;
  *out = (size_t)v;
  return 0;
}

static long parse_int(const perf_coll *coll, const char *flag, const char *arg, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(arg, &end, 0);
  if (end == arg || *end != '\0' || errno != 0 || v < lo || v > hi)
    usage_error(coll, "invalid value '%s' for %s (an integer from %ld to %ld)", arg, flag, lo, hi);
  return v;
}

static void parse_options(perf_state *s, int argc, char **argv) {
  const perf_coll *coll = s->coll;
  perf_opts *o = &s->o;
  *o = (perf_opts){.minbytes = 32u << 20,
                   .maxbytes = 32u << 20,
                   .stepbytes = 1u << 20,
                   .stepfactor = 1,
                   .iters = 20,
                   .warmup = 5,
                   .check = 1,
                   .agg = 1,
                   .cycles = 1,
                   .dtype = RR_FLOAT32,
                   .op = RR_SUM};
  enum { OPT_LINK = 1000, OPT_PERCENTILES, OPT_SPLIT, OPT_MEM };
  static const struct option longopts[] = {{"nthreads", required_argument, 0, 't'},
                                           {"ngpus", required_argument, 0, 'g'},
                                           {"minbytes", required_argument, 0, 'b'},
                                           {"maxbytes", required_argument, 0, 'e'},
                                           {"stepbytes", required_argument, 0, 'i'},
                                           {"stepfactor", required_argument, 0, 'f'},
                                           {"iters", required_argument, 0, 'n'},
                                           {"agg_iters", required_argument, 0, 'm'},
                                           {"warmup_iters", required_argument, 0, 'w'},
                                           {"check", required_argument, 0, 'c'},
                                           {"op", required_argument, 0, 'o'},
                                           {"datatype", required_argument, 0, 'd'},
                                           {"root", required_argument, 0, 'r'},
                                           {"blocking", required_argument, 0, 'z'},
                                           {"timeout", required_argument, 0, 'T'},
                                           {"cudagraph", required_argument, 0, 'G'},
                                           {"average", required_argument, 0, 'a'},
                                           {"output_file", required_argument, 0, 'J'},
                                           {"json", required_argument, 0, 'J'},
                                           {"per_iter_timing", required_argument, 0, 'I'},
                                           {"per_iter_skip", required_argument, 0, 'K'},
                                           {"unalign", required_argument, 0, 'u'},
                                           {"run_cycles", required_argument, 0, 'N'},
                                           {"report_cputime", required_argument, 0, 'C'},
                                           {"report_timestamps", required_argument, 0, 'S'},
                                           {"parallel_init", required_argument, 0, 'p'},
                                           {"stream_null", required_argument, 0, 'y'},
                                           {"local_register", required_argument, 0, 'R'},
                                           {"memory", required_argument, 0, 'M'},
                                           {"device_implementation", required_argument, 0, 'D'},
                                           {"device_cta_count", required_argument, 0, 'V'},
                                           {"cta_policy", required_argument, 0, 'x'},
                                           {"help", no_argument, 0, 'h'},
                                           {"link-gbps", required_argument, 0, OPT_LINK},
                                           {"link_gbps", required_argument, 0, OPT_LINK},
                                           {"percentiles", no_argument, 0, OPT_PERCENTILES},
                                           {"split", no_argument, 0, OPT_SPLIT},
                                           {"mem", required_argument, 0, OPT_MEM},
                                           {0, 0, 0, 0}};
  opterr = 0; /* our messages, printed once (rank 0) */
  int c;
  const char *opts = "+:t:g:b:e:i:f:n:m:w:c:o:d:r:z:T:G:a:J:I:K:u:N:C:S:p:y:R:M:D:V:x:h";
  while ((c = getopt_long(argc, argv, opts, longopts, NULL)) != -1) {
    char flag[3] = {'-', (char)c, '\0'};
    switch (c) {
      case 't':
      case 'g':
      case 'm':
        /* One rank per process: parallelism comes from rrun --nproc-per-node. */
        parse_int(coll, flag, optarg, 1, 1);
        break;
      case 'G': /* CUDA graphs */
      case 'p': /* threads initialising NCCL in parallel: one rank per process here */
      case 'y': /* the CUDA null stream */
      case 'R': /* NCCL buffer registration */
      case 'M': /* the GPU memory report: cudaMemGetInfo around NCCL's own allocations */
      case 'D': /* NCCL device-API kernels (NCCL >= 2.28) */
        parse_int(coll, flag, optarg, 0, 0);
        break;
      case 'V': /* CTAs of -D's kernels: meaningless without them, any valid value passes */
        parse_int(coll, flag, optarg, 1, 127);
        break;
      case 'x': /* NCCL's CTA policy: -1 leaves it unset, as nccl-tests' default */
        parse_int(coll, flag, optarg, -1, -1);
        break;
      case 'z':
        o->blocking = (int)parse_int(coll, "-z", optarg, 0, 3);
        break;
      case 'I':
        o->per_iter = (int)parse_int(coll, "-I", optarg, 0, 1);
        break;
      case 'K':
        o->per_iter_skip = (int)parse_int(coll, "-K", optarg, 0, 1 << 24);
        break;
      case 'u':
        o->unalign = (int)parse_int(coll, "-u", optarg, 0, 1 << 20);
        break;
      case 'N':
        o->cycles = parse_int(coll, "-N", optarg, 0, 1L << 30);
        break;
      case 'C':
        o->cputime = (int)parse_int(coll, "-C", optarg, 0, 1);
        break;
      case 'S':
        o->timestamps = (int)parse_int(coll, "-S", optarg, 0, 1);
        break;
      case 'b':
      case 'e':
        if (parse_size(optarg, c == 'b' ? &o->minbytes : &o->maxbytes) != 0)
          usage_error(coll, "invalid size '%s' for -%c (bytes, with an optional K, M or G)", optarg,
                      c);
        break;
      case 'i':
        if (parse_size(optarg, &o->stepbytes) != 0)
          usage_error(coll, "invalid size '%s' for -i", optarg);
        break;
      case 'f':
        o->stepfactor = (size_t)parse_int(coll, "-f", optarg, 1, 1 << 20);
        break;
      case 'n':
        o->iters = (int)parse_int(coll, "-n", optarg, 1, 1 << 24);
        break;
      case 'w':
        o->warmup = (int)parse_int(coll, "-w", optarg, 0, 1 << 24);
        break;
      case 'c':
        o->check = (int)parse_int(coll, "-c", optarg, 0, 1 << 20);
        break;
      case 'a':
        o->agg = (int)parse_int(coll, "-a", optarg, 0, 3);
        break;
      case 'r':
        o->root = (int)parse_int(coll, "-r", optarg, 0, 1 << 30);
        break;
      case 'T':
        o->timeout_ms = 1000 * parse_int(coll, "-T", optarg, 0, 1 << 30);
        break;
      case 'd':
        o->all_dtypes = strcmp(optarg, "all") == 0;
        if (!o->all_dtypes && rr_dtype_from_name(optarg, &o->dtype) != RR_OK)
          usage_error(coll, "unknown datatype '%s' (%s)", optarg, rr_last_error());
        break;
      case 'o':
        o->all_ops = strcmp(optarg, "all") == 0;
        if (!o->all_ops && rr_op_from_name(optarg, &o->op) != RR_OK)
          usage_error(coll, "unknown op '%s' (%s)", optarg, rr_last_error());
        break;
      case 'J': {
        /* nccl-tests picks the format by the suffix and writes nothing for any other; a
         * silent no-op is refused here instead. */
        const char *dot = strrchr(optarg, '.'), *slash = strrchr(optarg, '/');
        if (!dot || (slash && slash > dot) || strcasecmp(dot, ".json") != 0)
          usage_error(coll, "-J %s: the file name must end in .json (the only output format)",
                      optarg);
        o->json = optarg;
        break;
      }
      case OPT_LINK:
        if (strcmp(optarg, "auto") == 0) {
          o->link_auto = 1;
        } else {
          char *end;
          o->link_gbps = strtod(optarg, &end);
          if (end == optarg || *end || !(o->link_gbps > 0) || !isfinite(o->link_gbps))
            usage_error(coll, "invalid value '%s' for --link-gbps (Gbit/s > 0, or auto)", optarg);
        }
        break;
      case OPT_PERCENTILES:
        o->percentiles = 1;
        break;
      case OPT_SPLIT:
        if (!coll->split) usage_error(coll, "--split applies to all_reduce_perf only");
        o->split = 1;
        break;
      case OPT_MEM:
        if (!strcmp(optarg, "host"))
          s->mem = 0;
        else if (!strcmp(optarg, "cuda"))
          s->mem = 1;
        else
          usage_error(coll, "invalid value '%s' for --mem (host or cuda)", optarg);
        break;
      case 'h':
        usage(coll);
        exit(0);
      case ':':
        usage_error(coll, "option '%s' needs a value", argv[optind - 1]);
      default:
        if (optopt) usage_error(coll, "unknown option '-%c'", optopt);
        usage_error(coll, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) usage_error(coll, "unexpected argument '%s'", argv[optind]);
  o->argc = argc;
  o->argv = argv;
  if (o->per_iter_skip && !o->per_iter && !o->percentiles)
    usage_error(coll, "-K %d needs -I 1 (or --percentiles): it trims their statistics",
                o->per_iter_skip);
  if (o->per_iter_skip >= o->iters)
    usage_error(coll, "-K %d leaves no iteration of -n %d to summarise", o->per_iter_skip,
                o->iters);
  if (o->minbytes > o->maxbytes)
    usage_error(coll, "minbytes %zu is larger than maxbytes %zu", o->minbytes, o->maxbytes);
  if (o->stepfactor <= 1 && o->stepbytes == 0 && o->minbytes < o->maxbytes)
    usage_error(coll, "a step of 0 bytes (-i 0 with -f 1) never reaches maxbytes");
  int bitwise = o->op == RR_BAND || o->op == RR_BOR || o->op == RR_BXOR;
  if (coll->reduces && bitwise && !o->all_dtypes && o->dtype >= RR_FLOAT16)
    usage_error(coll, "op %s needs an integer datatype, not %s", rr_op_name(o->op),
                rr_dtype_name(o->dtype));
}

/* ---------------------------------------------------------------------------------------
 * Timing. */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* nccl-tests' -a: every rank's mean time per call, combined over ranks. */
static double aggregate(perf_state *s, double t) {
  if (s->o.agg == 0) return t; /* rank 0 prints its own */
  rr_op op = s->o.agg == 1 ? RR_SUM : s->o.agg == 2 ? RR_MIN : RR_MAX;
  PERF_CHECK(s, rr_all_reduce(s->ctx.pg, &t, &t, 1, RR_FLOAT64, op));
  return s->o.agg == 1 ? t / s->ctx.nranks : t;
}

/* -I / --percentiles: rank 0 gathers every rank's per-iteration times (nccl-tests' per-process
 * rows), and takes each iteration at its slowest rank: a collective ends when its last rank
 * does. Decided from the options, so every rank takes part. */
static void iter_stats(perf_state *s, int in_place, perf_half *h) {
  const int n = s->o.iters;
  double *all = s->iter_all[in_place], *mx = s->iter_max[in_place];
  PERF_CHECK(s, rr_gather(s->ctx.pg, s->iter_us, all, (size_t)n, RR_FLOAT64, 0));
  if (s->ctx.rank != 0) return;
  for (int i = 0; i < n; i++) {
    mx[i] = all[i];
    for (int r = 1; r < s->ctx.nranks; r++)
      if (all[(size_t)r * (size_t)n + (size_t)i] > mx[i])
        mx[i] = all[(size_t)r * (size_t)n + (size_t)i];
  }
  perf_iter_stats_of(mx, n, s->o.per_iter_skip, s->sorted, &h->st);
  h->have_iter = 1;
  h->times = mx;
  h->rank_times = all;
}

static void run_coll(perf_state *s, const void *send, void *recv, size_t count, int in_place) {
  int st = s->coll->run(&s->ctx, send, recv, count);
  if (st != RR_OK) {
    char what[160];
    snprintf(what, sizeof what, "rr_%s of %zu x %s%s%s (%s)", s->coll->name, count,
             rr_dtype_name(s->ctx.dtype), s->coll->reduces ? " " : "",
             s->coll->reduces ? rr_op_name(s->ctx.op) : "", in_place ? "in place" : "out of place");
    check_call(s, st, what);
  }
}

static void counts_for(const perf_state *s, size_t bytes, perf_counts *k) {
  s->coll->counts(&s->ctx, bytes / s->ctx.esize, k);
}

/* The buffers of one call: in place they alias as NCCL's; iteration `iter` shifts both by
 * whole buffers within the -e allocation, as nccl-tests does, so small sizes do not always
 * find their data in cache. */
static void placement(const perf_state *s, const perf_counts *k, int in_place, int iter,
                      char **send, char **recv) {
  const size_t es = s->ctx.esize, r = (size_t)s->ctx.rank;
  size_t total = (k->send > k->recv ? k->send : k->recv) * es;
  size_t steps = total ? s->bufbytes / total : 1;
  size_t shift = iter >= 0 && steps ? total * ((size_t)iter % steps) : 0;
  shift += (size_t)s->o.unalign * es; /* -u: both buffers start that many elements late */
  *send = in_place ? s->recvbuf + shift + k->send_inplace * r * es : s->sendbuf + shift;
  *recv = s->recvbuf + shift + (in_place ? k->recv_inplace * r * es : 0);
}

static void warmup(perf_state *s, size_t bytes) {
  perf_counts k;
  counts_for(s, bytes, &k);
  for (int i = 0; i < s->o.warmup; i++) {
    char *send, *recv;
    placement(s, &k, 0, i, &send, &recv);
    run_coll(s, send, recv, k.param, 0);
  }
}

/* Re-initialise, run once, count this rank's wrong elements; summed over ranks. */
static int64_t check_once(perf_state *s, const perf_counts *k, int in_place) {
  char *send, *recv;
  placement(s, k, in_place, -1, &send, &recv);
  perf_fill_poison(&s->ctx, host_of(s, recv), k->recv);
  perf_fill_input(&s->ctx, host_of(s, send), 0, k->send, s->ctx.rank);
  upload(s, recv, k->recv * s->ctx.esize);
  upload(s, send, k->send * s->ctx.esize);
  run_coll(s, send, recv, k->param, in_place);
  download(s, recv, k->recv * s->ctx.esize);
  recv = host_of(s, recv);
  if (s->corrupt_rank == s->ctx.rank && k->recv > 0) {
    /* Flip a high bit of the last byte of one result element (exponent or high-order bit):
     * a wrong value in every dtype, beyond the AVG tolerance. */
    recv[s->ctx.esize - 1] ^= 0x40;
    s->corrupt_rank = -1;
  }
  int64_t wrong = s->coll->check(&s->ctx, recv, k->param, in_place);
  PERF_CHECK(s, rr_all_reduce(s->ctx.pg, &wrong, &wrong, 1, RR_INT64, RR_SUM));
  return wrong;
}

static void bench_half(perf_state *s, const perf_counts *k, size_t bytes, int in_place,
                       perf_half *h) {
  char *send, *recv;
  placement(s, k, in_place, 0, &send, &recv);
  run_coll(s, send, recv, k->param, in_place); /* untimed, as nccl-tests' "sync" call */
  PERF_CHECK(s, rr_barrier(s->ctx.pg));
  /* -z: every call blocks until it is done here, so 0 and 2 are the same loop; 1 waits for
   * every rank after each call inside the time, 3 outside it (the time is then the calls
   * alone, without the skew between ranks that back-to-back calls absorb). */
  const int z = s->o.blocking;
  double t_start = now_us(), calls_us = 0;
  for (int i = 0; i < s->o.iters; i++) {
    placement(s, k, in_place, i, &send, &recv);
    double t0 = now_us();
    run_coll(s, send, recv, k->param, in_place);
    if (z == 1) PERF_CHECK(s, rr_barrier(s->ctx.pg));
    s->iter_us[i] = now_us() - t0;
    calls_us += s->iter_us[i];
    if (z == 3) PERF_CHECK(s, rr_barrier(s->ctx.pg));
  }
  double mean = (z == 3 ? calls_us : now_us() - t_start) / s->o.iters;
  h->time_us = aggregate(s, mean);
  h->algbw = h->time_us > 0 ? (double)bytes / (h->time_us * 1e3) : 0; /* GB/s, GB = 1e9 */
  h->busbw = h->algbw * s->coll->bus_factor(s->ctx.nranks);
  if (s->o.per_iter || s->o.percentiles) iter_stats(s, in_place, h);
  h->wrong = -1;
  for (int c = 0; c < s->o.check; c++) {
    h->wrong = check_once(s, k, in_place);
    if (h->wrong) break;
  }
}

/* all_reduce_perf --split: reduce-scatter into this rank's block of recvbuf, then an
 * in-place all-gather of it: the two halves of a ring all-reduce, each timed alone. */
static void bench_split(perf_state *s, size_t count, perf_split *sp) {
  const size_t rc = count / (size_t)s->ctx.nranks, es = s->ctx.esize;
  sp->valid = rc > 0;
  if (!sp->valid) return;
  const char *what[2] = {"reduce-scatter half of --split", "all-gather half of --split"};
  double t[2] = {0, 0};
  PERF_CHECK(s, rr_barrier(s->ctx.pg));
  for (int i = -1; i < s->o.iters; i++) { /* i == -1: untimed */
    for (int phase = 0; phase < 2; phase++) {
      double t0 = now_us();
      check_call(s, s->coll->split(&s->ctx, phase, s->sendbuf, s->recvbuf, rc), what[phase]);
      if (i >= 0) t[phase] += now_us() - t0;
    }
  }
  sp->rs_us = aggregate(s, t[0] / s->o.iters);
  sp->ag_us = aggregate(s, t[1] / s->o.iters);
  double bytes = (double)(rc * (size_t)s->ctx.nranks * es), f = perf_factor_ring(s->ctx.nranks);
  sp->rs_busbw = sp->rs_us > 0 ? bytes / (sp->rs_us * 1e3) * f : 0;
  sp->ag_busbw = sp->ag_us > 0 ? bytes / (sp->ag_us * 1e3) * f : 0;
  sp->wrong = -1;
  if (s->o.check) {
    const size_t n = rc * (size_t)s->ctx.nranks;
    perf_fill_poison(&s->ctx, host_of(s, s->recvbuf), n);
    perf_fill_input(&s->ctx, host_of(s, s->sendbuf), 0, n, s->ctx.rank);
    upload(s, s->recvbuf, n * es);
    upload(s, s->sendbuf, n * es);
    for (int phase = 0; phase < 2; phase++)
      check_call(s, s->coll->split(&s->ctx, phase, s->sendbuf, s->recvbuf, rc), what[phase]);
    download(s, s->recvbuf, n * es);
    int64_t wrong = perf_wrong_reduced(&s->ctx, host_of(s, s->recvbuf), 0, n);
    PERF_CHECK(s, rr_all_reduce(s->ctx.pg, &wrong, &wrong, 1, RR_INT64, RR_SUM));
    sp->wrong = wrong;
  }
}

/* ---------------------------------------------------------------------------------------
 * The sweep. */

static int next_size(const perf_opts *o, size_t size, size_t *next) {
  size_t n;
  if (o->stepfactor > 1)
    n = size == 0 ? 1 : size * o->stepfactor; /* -b 0: one 0-byte row, then on from 1 */
  else
    n = size + o->stepbytes;
  if (n <= size || n > o->maxbytes) return 0;
  *next = n;
  return 1;
}

static void sweep_size(perf_state *s, size_t size);

/* nccl-tests' TimeTest for one (dtype, op). */
static void time_test(perf_state *s) {
  const perf_opts *o = &s->o;
  /* Fresh data of this dtype in both buffers: timed calls then never start from another
   * dtype's bit patterns (NaNs, subnormals) that would run slower than real data. */
  const size_t fill = s->bufbytes + (size_t)o->unalign * s->ctx.esize; /* what calls can touch */
  perf_fill_input(&s->ctx, host_of(s, s->sendbuf), 0, fill / s->ctx.esize, s->ctx.rank);
  perf_fill_input(&s->ctx, host_of(s, s->recvbuf), 0, fill / s->ctx.esize, s->ctx.rank);
  upload(s, s->sendbuf, fill);
  upload(s, s->recvbuf, fill);
  PERF_CHECK(s, rr_barrier(s->ctx.pg));
  warmup(s, o->maxbytes);
  warmup(s, o->minbytes);
  long cycle = o->cycles; /* -N: 0 counts down past 0 and never ends, as nccl-tests' */
  do {
    size_t size = o->minbytes;
    do {
      sweep_size(s, size);
    } while (next_size(o, size, &size));
  } while (--cycle != 0);
}

/* One row: both halves of one size. */
static void sweep_size(perf_state *s, size_t size) {
  perf_counts k;
  counts_for(s, size, &k);
  if (k.send == 0 && k.recv == 0 && size > 0) return; /* less than an element per rank */
  perf_row row = {.count = k.param,
                  .bytes = (k.send > k.recv ? k.send : k.recv) * s->ctx.esize,
                  .dtype = s->ctx.dtype,
                  .op = s->coll->reduces ? rr_op_name(s->ctx.op) : "none",
                  .root = s->coll->rooted ? s->ctx.root : -1};
  bench_half(s, &k, row.bytes, 0, &row.half[0]);
  bench_half(s, &k, row.bytes, 1, &row.half[1]);
  if (s->o.split) bench_split(s, k.param, &row.split);
  if (s->ctx.rank == 0) perf_report_row(&s->rep, &row);
}

static void gather_ranks(perf_state *s) {
  perf_rank_info me;
  memset(&me, 0, sizeof me);
  me.pid = (int32_t)getpid();
  const char *lr = getenv("LOCAL_RANK");
  me.device = s->cuda_dev >= 0 ? s->cuda_dev : lr ? atoi(lr) : 0;
  me.cuda = s->cuda_dev >= 0;
  if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
  s->rep.ranks = alloc_or_die(s, sizeof me * (size_t)s->ctx.nranks, "the rank table");
  PERF_CHECK(s, rr_all_gather(s->ctx.pg, &me, s->rep.ranks, sizeof me, RR_UINT8));
}

/* Rank 0 opens the JSON file; every rank learns whether it could, so all stop together. As
 * nccl-tests, an existing file is never overwritten: FILE.json taken, FILE.json.0, .1, ... is
 * written instead, and the header's first line names it. (nccl-tests goes on without JSON
 * when it cannot write; here that ends the run, so a script never waits for a file that
 * will not come.) */
static void open_json(perf_state *s) {
  static char path[4096];
  int32_t failed = 0;
  if (s->ctx.rank == 0 && s->o.json) {
    snprintf(path, sizeof path, "%s", s->o.json);
    for (int k = 0; !(s->rep.json = fopen(path, "wx")) && errno == EEXIST && k < 1000; k++)
      snprintf(path, sizeof path, "%s.%d", s->o.json, k);
    if (!s->rep.json) {
      fprintf(stderr, "%s: rank 0: cannot write %s: %s\n", perf_tool_name(s->coll), path,
              strerror(errno));
      failed = 1;
    } else {
      s->rep.json_path = path;
      printf("# Writing JSON output to %s\n", path);
    }
  }
  PERF_CHECK(s, rr_all_reduce(s->ctx.pg, &failed, &failed, 1, RR_INT32, RR_MAX));
  if (failed) {
    PERF_CHECK(s, rr_destroy_process_group(s->ctx.pg));
    exit(2);
  }
}

/* The tool's own checks of the options and the environment against the world (alltoallv's
 * traffic pattern). Every rank runs them; rank 0 reports, or a rank that alone fails. */
static void setup_tool(perf_state *s) {
  if (!s->coll->setup) return;
  char err[512] = "";
  int32_t f[2] = {0, 0}; /* anyone failed, rank 0 failed */
  f[0] = s->coll->setup(&s->ctx, s->o.minbytes, s->o.maxbytes, err, sizeof err) != 0;
  f[1] = s->ctx.rank == 0 ? f[0] : 0;
  const int mine = f[0];
  PERF_CHECK(s, rr_all_reduce(s->ctx.pg, f, f, 2, RR_INT32, RR_MAX));
  if (!f[0]) return;
  if (mine && (s->ctx.rank == 0 || !f[1]))
    fprintf(stderr, "%s: rank %d: %s\n", perf_tool_name(s->coll), s->ctx.rank, err);
  /* Nobody exits (and so has rrun stop the others) before the reports are out. */
  PERF_CHECK(s, rr_barrier(s->ctx.pg));
  PERF_CHECK(s, rr_destroy_process_group(s->ctx.pg));
  exit(2);
}

/* Bytes this host can still give: MemAvailable (free plus reclaimable cache), else all
 * physical memory. */
static int64_t host_memory(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[128];
  long long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  if (f) fclose(f);
  if (kib > 0) return (int64_t)kib * 1024;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (int64_t)pages * page : INT64_MAX;
}

/* As nccl-tests: lower -e when the buffers of every rank on a host would not fit in its
 * memory (keeping 1 GiB and a tenth for the library and the rest), rather than be killed
 * half-way. Every rank reads the memory before any allocates (the all-reduce orders it), and
 * the smallest limit wins, so all ranks sweep the same sizes. */
static void limit_memory(perf_state *s) {
  const char *lws = getenv("LOCAL_WORLD_SIZE");
  const int64_t local = lws && atoi(lws) > 0 ? atoi(lws) : 1;
  const int64_t nbuf = s->coll->needs_scratch ? 3 : 2, mem = host_memory();
  int64_t limit = mem == INT64_MAX ? mem : (mem - ((int64_t)1 << 30)) / 10 * 9 / local / nbuf;
  if (limit < 0) limit = 0;
  PERF_CHECK(s, rr_all_reduce(s->ctx.pg, &limit, &limit, 1, RR_INT64, RR_MIN));
  if ((uint64_t)limit >= s->o.maxbytes) return;
  s->rep.reduced_max = (size_t)limit;
  s->o.maxbytes = (size_t)limit;
  if (s->o.minbytes > s->o.maxbytes) s->o.minbytes = s->o.maxbytes;
}

/* Checks that need the world size; reported by rank 0, every rank exits 2. */
static void check_world(perf_state *s) {
  const char *err = NULL;
  char msg[160];
  if (s->ctx.nranks < s->coll->min_ranks) {
    snprintf(msg, sizeof msg, "needs at least %d ranks, got %d (rrun --nproc-per-node N)",
             s->coll->min_ranks, s->ctx.nranks);
    err = msg;
  } else if (s->coll->rooted && s->o.root >= s->ctx.nranks) {
    snprintf(msg, sizeof msg, "root %d is out of range: %d ranks", s->o.root, s->ctx.nranks);
    err = msg;
  }
  if (!err) return;
  if (s->ctx.rank == 0) fprintf(stderr, "%s: %s\n", perf_tool_name(s->coll), err);
  /* Nobody exits (and so has rrun stop the others) before rank 0 has said why. */
  PERF_CHECK(s, rr_barrier(s->ctx.pg));
  PERF_CHECK(s, rr_destroy_process_group(s->ctx.pg));
  exit(2);
}

int perf_main(int argc, char **argv, const perf_coll *coll) {
  perf_state st;
  perf_state *s = &st;
  memset(s, 0, sizeof *s);
  s->coll = coll;
  s->mem = -1;
  s->corrupt_rank = getenv("RR_PERF_CORRUPT") ? atoi(getenv("RR_PERF_CORRUPT")) : -1;
  setlinebuf(stdout); /* each row appears as soon as it is measured */
  parse_options(s, argc, argv);
  const perf_opts *o = &s->o;

  rr_pg_options pgo;
  rr_pg_options_init(&pgo);
  pgo.timeout_ms = o->timeout_ms;
  s->ctx.rank = -1;
  PERF_CHECK(s, rr_init_process_group(&s->ctx.pg, &pgo));
  s->ctx.rank = rr_get_rank(s->ctx.pg);
  s->ctx.nranks = rr_get_world_size(s->ctx.pg);
  s->ctx.root = o->root;
  s->ctx.reduces = coll->reduces;
  check_world(s);
  setup_tool(s);
  /* --mem: device memory by default when this rank sees a GPU (chosen before the rank
   * table is gathered, so that its lines name the device). */
  s->cuda_dev = -1;
  s->ctx.mem_cuda = s->mem >= 0 ? s->mem : perf_mem_cuda_devices() > 0;
  if (s->ctx.mem_cuda) {
    char err[160];
    const char *lr = getenv("LOCAL_RANK");
    if ((s->cuda_dev = perf_mem_select(lr ? atoi(lr) : 0, err, sizeof err)) < 0) {
      fprintf(stderr, "%s: rank %d: --mem cuda: %s\n", perf_tool_name(coll), s->ctx.rank, err);
      exit(2);
    }
  }
  gather_ranks(s);
  open_json(s);
  s->rep.header_min = o->minbytes;
  s->rep.header_max = o->maxbytes;
  limit_memory(s);

  /* One allocation per buffer for the largest size, reused by every size (nccl-tests). */
  s->bufbytes = o->maxbytes;
  s->allocbytes = s->bufbytes + 64 + (size_t)o->unalign * 8; /* 8: the widest element */
  if (s->ctx.mem_cuda) {
    s->hsend = alloc_or_die(s, s->allocbytes, "the send buffer's host mirror");
    s->hrecv = alloc_or_die(s, s->allocbytes, "the receive buffer's host mirror");
    s->sendbuf = perf_mem_alloc(1, s->allocbytes);
    s->recvbuf = perf_mem_alloc(1, s->allocbytes);
    if (coll->needs_scratch) s->ctx.scratch = perf_mem_alloc(1, s->allocbytes);
    if (!s->sendbuf || !s->recvbuf || (coll->needs_scratch && !s->ctx.scratch)) {
      fprintf(stderr, "%s: rank %d: cudaMalloc of %zu bytes failed (lower -e)\n",
              perf_tool_name(coll), s->ctx.rank, s->allocbytes);
      exit(1);
    }
  } else {
    s->sendbuf = alloc_or_die(s, s->allocbytes, "the send buffer");
    s->recvbuf = alloc_or_die(s, s->allocbytes, "the receive buffer");
    if (coll->needs_scratch) s->ctx.scratch = alloc_or_die(s, s->allocbytes, "scratch");
  }
  s->iter_us = alloc_or_die(s, sizeof(double) * (size_t)o->iters, "timings");
  s->sorted = alloc_or_die(s, sizeof(double) * (size_t)o->iters, "timings");
  if ((o->per_iter || o->percentiles) && s->ctx.rank == 0)
    for (int h = 0; h < 2; h++) {
      s->iter_max[h] = alloc_or_die(s, sizeof(double) * (size_t)o->iters, "timings");
      s->iter_all[h] = alloc_or_die(s, sizeof(double) * (size_t)o->iters * (size_t)s->ctx.nranks,
                                    "every rank's timings");
    }

  s->rep.tool = perf_tool_name(coll);
  s->rep.coll = coll;
  s->rep.o = o;
  s->rep.nranks = s->ctx.nranks;
  s->rep.ctx = &s->ctx;
  if (s->ctx.rank == 0) {
    perf_report_link(&s->rep);
    if (s->ctx.mem_cuda) printf("#  Buffers: CUDA device memory (--mem cuda)\n");
    perf_report_header(&s->rep);
  }

  const int ndt = o->all_dtypes ? (int)(sizeof all_dtypes / sizeof *all_dtypes) : 1;
  const int nop = coll->reduces && o->all_ops ? (int)(sizeof all_ops / sizeof *all_ops) : 1;
  for (int d = 0; d < ndt; d++) {
    s->ctx.dtype = o->all_dtypes ? all_dtypes[d] : o->dtype;
    s->ctx.esize = rr_dtype_size(s->ctx.dtype);
    for (int p = 0; p < nop; p++) {
      s->ctx.op = o->all_ops ? all_ops[p] : o->op;
      if (!coll->reduces) s->ctx.op = RR_SUM; /* unused; keeps the data pattern fixed */
      int bitwise = s->ctx.op == RR_BAND || s->ctx.op == RR_BOR || s->ctx.op == RR_BXOR;
      if (coll->reduces && bitwise && s->ctx.dtype >= RR_FLOAT16) continue; /* -d all */
      time_test(s);
    }
  }

  int failed = 0;
  if (s->ctx.rank == 0) failed = perf_report_footer(&s->rep);
  /* Every rank returns the same status: rank 0's verdict, shared. */
  int32_t f32 = failed;
  PERF_CHECK(s, rr_broadcast(s->ctx.pg, &f32, &f32, 1, RR_INT32, 0));
  PERF_CHECK(s, rr_destroy_process_group(s->ctx.pg));
  perf_mem_free(s->ctx.mem_cuda, s->sendbuf);
  perf_mem_free(s->ctx.mem_cuda, s->recvbuf);
  perf_mem_free(s->ctx.mem_cuda, s->ctx.scratch);
  free(s->hsend);
  free(s->hrecv);
  free(s->iter_us);
  free(s->sorted);
  for (int h = 0; h < 2; h++) {
    free(s->iter_max[h]);
    free(s->iter_all[h]);
  }
  free(s->rep.ranks);
  return f32 ? 1 : 0;
}
