/*
 * Shared by the bench/compare harnesses (mpi_allreduce.c, gloo_allreduce.cc, socket_ring.c):
 * the option parser (nccl-tests' -b -e -f -n -w, plus -N for the per-size iteration rule
 * and -I for in place where a harness has both forms),
 * the data pattern, the check and the result line.
 *
 * Result line, one per size, printed by rank 0 only:
 *
 *   RESULT <system> <np> <bytes> <time_us> <busbw_GBps> <wrong>
 *
 * time_us: the mean over the timed iterations on each rank, then the maximum over ranks (the
 * collective ends when its slowest rank does). busbw = bytes / time * 2(n-1)/n, GB = 1e9.
 * wrong: elements that differ from the expected sum, on the worst rank.
 */
#ifndef COMPARE_COMMON_H
#define COMPARE_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cmp_opts {
  size_t minbytes, maxbytes;
  size_t factor;
  int iters, warmup;
  int auto_iters; /* -N: iterations scale down with size (see cmp_iters) */
  int in_place;   /* -I: the result overwrites the input (mpi_allreduce: MPI_IN_PLACE) */
  const char *system;
  const char *algo; /* gloo: ring, ring_chunked, allreduce */
} cmp_opts;

static inline size_t cmp_parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'k':
    case 'K':
      v *= 1024.0;
      break;
    case 'm':
    case 'M':
      v *= 1024.0 * 1024.0;
      break;
    case 'g':
    case 'G':
      v *= 1024.0 * 1024.0 * 1024.0;
      break;
    default:
      break;
  }
  return (size_t)v;
}

static inline void cmp_usage(const char *prog) {
  fprintf(stderr,
          "usage: %s [-b BYTES] [-e BYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] [-N] "
          "[-I] [-s SYSTEM] [-a ALGO]\n"
          "  -N: iterations by size (200 up to 128K, then fewer; -n is the cap)\n"
          "  -I: in place (mpi_allreduce)\n",
          prog);
  exit(2);
}

static inline void cmp_parse(int argc, char **argv, cmp_opts *o, const char *system) {
  o->minbytes = o->maxbytes = 32u << 20;
  o->factor = 4;
  o->iters = 20;
  o->warmup = 5;
  o->auto_iters = 0;
  o->in_place = 0;
  o->system = system;
  o->algo = "ring";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-N") == 0) {
      o->auto_iters = 1;
      continue;
    }
    if (strcmp(a, "-I") == 0) {
      o->in_place = 1;
      continue;
    }
    if (i + 1 >= argc || a[0] != '-' || a[2] != 0) cmp_usage(argv[0]);
    const char *v = argv[++i];
    switch (a[1]) {
      case 'b':
        o->minbytes = cmp_parse_size(v);
        break;
      case 'e':
        o->maxbytes = cmp_parse_size(v);
        break;
      case 'f':
        o->factor = (size_t)atol(v);
        break;
      case 'n':
        o->iters = atoi(v);
        break;
      case 'w':
        o->warmup = atoi(v);
        break;
      case 's':
        o->system = v;
        break;
      case 'a':
        o->algo = v;
        break;
      default:
        cmp_usage(argv[0]);
    }
  }
  if (o->factor < 2) o->factor = 2;
  if (o->minbytes < 4) o->minbytes = 4;
  if (o->iters < 1) o->iters = 1;
  if (o->warmup < 0) o->warmup = 0;
}

/* With -N: about 200 iterations for small messages, fewer as the size grows so that one size
 * takes about a second at ~1 GB/s; never more than -n. */
static inline int cmp_iters(const cmp_opts *o, size_t bytes) {
  if (!o->auto_iters) return o->iters;
  int n;
  if (bytes <= (128u << 10))
    n = 200;
  else if (bytes <= (2u << 20))
    n = 50;
  else if (bytes <= (8u << 20))
    n = 20;
  else if (bytes <= (32u << 20))
    n = 10;
  else
    n = 5;
  return n < o->iters ? n : o->iters;
}
static inline int cmp_warmup(const cmp_opts *o, size_t bytes) {
  if (!o->auto_iters) return o->warmup;
  int w = bytes >= (64u << 20) ? 1 : bytes >= (2u << 20) ? 2 : 20;
  return w < o->warmup ? w : o->warmup;
}

/* Small integers, exact in float32 when summed over up to thousands of ranks. */
static inline float cmp_value(int rank, size_t i) {
  return (float)(rank + 1 + (int)(i % 7));
}
static inline float cmp_expected(int np, size_t i) {
  return (float)(np * (np + 1) / 2 + np * (int)(i % 7));
}
static inline void cmp_fill(float *p, size_t count, int rank) {
  for (size_t i = 0; i < count; i++) p[i] = cmp_value(rank, i);
}
static inline long cmp_check(const float *p, size_t count, int np) {
  long wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += p[i] != cmp_expected(np, i);
  return wrong;
}

static inline double cmp_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static inline void cmp_report(const char *system, int np, size_t bytes, double time_us,
                              long wrong) {
  double busbw = time_us > 0 ? bytes / (time_us * 1e3) * (2.0 * (np - 1) / np) : 0.0;
  printf("RESULT %s %d %zu %.2f %.4f %ld\n", system, np, bytes, time_us, busbw, wrong);
  fflush(stdout);
}

/* Rank and world size from whichever launcher started us. */
static inline int cmp_env_int(const char *a, const char *b, int dflt) {
  const char *v = getenv(a);
  if (!v) v = getenv(b);
  return v ? atoi(v) : dflt;
}

#endif
