/*
 * alltoallv_perf: rr_all_to_allv with nccl-tests' traffic patterns (its alltoallv_perf, new
 * in 2.19), where every pair of ranks exchanges a different amount.
 *
 * Generated pattern (the default). Each size of the sweep is what every rank sends in all:
 * the count column is the per-peer share, count = size / n elements rounded down to 16
 * bytes, and rank i sends rank j
 *
 *   bytes(i, j) = ((1 - spread) * T / n  +  spread * d * T / (n (n - 1) / 2))  rounded down to 16
 *
 * with T = count * n * element size and d = (j - i) mod n, the distance from i to j on the
 * ring: with spread 1 (the default) nothing to itself and most to the farthest rank, with
 * spread 0 the same to everyone (an all_to_all). NCCL_TESTS_ALLTOALLV_SPREAD sets it (0..1,
 * clamped as nccl-tests does). Every rank then sends and receives the same total.
 *
 * Matrix file (NCCL_TESTS_ALLTOALLV_MATRIX_FILE): a square matrix of numbers, whitespace
 * separated, row i column j the bytes rank i sends rank j, times
 * NCCL_TESTS_ALLTOALLV_MATRIX_SCALE (default 1), rounded down to 16 bytes; the first n rows
 * and columns are used. The sizes then come from the matrix: -b and -e must be equal, and at
 * least the largest total any rank sends or receives; the count column is 0.
 *
 * Columns as nccl-tests: size is the largest total any rank sends or receives, algbw = size
 * / time, busbw = algbw * (n-1)/n. With an uneven matrix, -a 3 (the slowest rank's time) is
 * the meaningful time, as nccl-tests says.
 *
 * Checking: rank i's send stream is its own data (rank-unique values, perf_data.c), so the
 * block it gets from j must be elements sum_{k<i} bytes(j, k) / size... of j's data; the rest
 * of the receive buffer must keep the poison. In place: ringreduce's all_to_allv cannot
 * receive into the buffer it sends from (nccl-tests times an in-place call it cannot check,
 * #wrong N/A), so the in-place columns time what a user must do instead, copy the data
 * aside and exchange, and are checked like the others; the trailing note says so.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

static double spread = 1.0; /* generated pattern */
static size_t *matrix;      /* matrix mode: dim x dim bytes, already scaled and rounded */
static int dim;             /* 0: generated pattern */
static const char *matrix_file;
static double matrix_scale = 1.0;
static size_t *sendcounts, *sdispls, *recvcounts, *rdispls; /* this rank's call, n each */

/* Bytes from rank i to rank j; T (generated mode) is what each rank sends in all. */
static size_t pair_bytes(int i, int j, int n, size_t T) {
  if (dim) return matrix[(size_t)i * (size_t)dim + (size_t)j];
  if (n == 1) return T & ~(size_t)15;
  const int d = (j - i + n) % n;
  const double uniform = (double)T / n,
               weighted = (double)d * (double)T / ((double)n * (n - 1) / 2);
  return (size_t)((1.0 - spread) * uniform + spread * weighted) & ~(size_t)15;
}

static size_t total_of(size_t count, int n, size_t es) {
  return count * (size_t)n * es;
}

/* The largest total (elements) any rank sends / receives. */
static void max_totals(size_t count, int n, size_t es, size_t *send, size_t *recv) {
  const size_t T = total_of(count, n, es);
  *send = *recv = 0;
  for (int i = 0; i < n; i++) {
    size_t s = 0, r = 0;
    for (int j = 0; j < n; j++) {
      s += pair_bytes(i, j, n, T) / es;
      r += pair_bytes(j, i, n, T) / es;
    }
    if (s > *send) *send = s;
    if (r > *recv) *recv = r;
    if (!dim) break; /* a generated pattern is the same for every rank */
  }
}

static void counts(const perf_ctx *c, size_t count, perf_counts *k) {
  /* nccl-tests: whole 16-byte chunks per peer; none in matrix mode (sizes from the file). */
  const size_t es = c->esize;
  const size_t param = dim ? 0 : (count / (size_t)c->nranks) & ~(16 / es - 1);
  size_t s, r;
  max_totals(param, c->nranks, es, &s, &r);
  *k = (perf_counts){.send = s, .recv = r, .param = param};
}

/* This rank's counts and displacements for a call of `count` per peer (elements). */
static size_t layout(const perf_ctx *c, size_t count) {
  const int n = c->nranks, me = c->rank;
  const size_t es = c->esize, T = total_of(count, n, es);
  size_t so = 0, ro = 0;
  for (int j = 0; j < n; j++) {
    sendcounts[j] = pair_bytes(me, j, n, T) / es;
    recvcounts[j] = pair_bytes(j, me, n, T) / es;
    sdispls[j] = so;
    rdispls[j] = ro;
    so += sendcounts[j];
    ro += recvcounts[j];
  }
  return so; /* what this rank sends in all */
}

static int run(perf_ctx *c, const void *sendbuf, void *recvbuf, size_t count) {
  const size_t sent = layout(c, count);
  if (sendbuf == recvbuf) {
    /* In place: the data goes aside first (see the top of the file). */
    if (perf_mem_copy(c->mem_cuda, c->scratch, sendbuf, sent * c->esize) != 0) return RR_ECUDA;
    sendbuf = c->scratch;
  }
  return rr_all_to_allv(c->pg, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls,
                        c->dtype);
}

static int64_t check(perf_ctx *c, const void *recvbuf, size_t count, int in_place) {
  const int n = c->nranks, me = c->rank;
  const size_t es = c->esize, T = total_of(count, n, es);
  const char *p = recvbuf;
  int64_t wrong = 0;
  size_t off = 0;
  for (int src = 0; src < n; src++) {
    /* Where this rank's block starts in src's stream: after what src sends ranks < me. */
    size_t first = 0;
    for (int k = 0; k < me; k++) first += pair_bytes(src, k, n, T) / es;
    const size_t cnt = pair_bytes(src, me, n, T) / es;
    wrong += perf_wrong_input(c, p + off * es, first, cnt, src);
    off += cnt;
  }
  /* Beyond the blocks nothing may have been written: the driver filled [0, most any rank
   * receives) with poison and, in place, [0, most any rank sends) with this rank's data. */
  size_t maxs, maxr;
  max_totals(count, n, es, &maxs, &maxr);
  size_t poison_from = off;
  if (in_place && off < maxs) {
    wrong += perf_wrong_input(c, p + off * es, off, maxs - off, me);
    poison_from = maxs;
  }
  if (poison_from < maxr) wrong += perf_wrong_poison(c, p + poison_from * es, maxr - poison_from);
  return wrong;
}

/* The matrix file: rows of whitespace-separated non-negative numbers, all rows as long as
 * there are rows. -1 with err set on any fault. */
static int read_matrix(char *err, size_t cap) {
  FILE *f = fopen(matrix_file, "r");
  if (!f)
    return snprintf(err, cap, "NCCL_TESTS_ALLTOALLV_MATRIX_FILE %s: %s", matrix_file,
                    strerror(errno)),
           -1;
  size_t n = 0, alloc = 0, rows = 0, cols = 0, in_row = 0;
  double *v = NULL;
  int rc = 0, ch;
  char tok[128];
  size_t tl = 0;
  /* One character at a time: a newline ends a row, a number ends at whitespace. */
  do {
    ch = fgetc(f);
    if (ch != EOF && !isspace(ch)) {
      if (tl + 1 < sizeof tok) tok[tl++] = (char)ch;
      continue;
    }
    if (tl) {
      tok[tl] = '\0';
      char *end;
      errno = 0;
      double x = strtod(tok, &end);
      if (*end || errno || !(x >= 0) || !isfinite(x)) {
        snprintf(err, cap, "%s: row %zu: '%s' is not a byte count", matrix_file, rows + 1, tok);
        rc = -1;
        break;
      }
      if (n == alloc) {
        alloc = alloc ? 2 * alloc : 64;
        double *nv = realloc(v, alloc * sizeof *v);
        if (!nv) {
          snprintf(err, cap, "%s: out of memory", matrix_file);
          rc = -1;
          break;
        }
        v = nv;
      }
      v[n++] = x;
      in_row++;
      tl = 0;
    }
    if ((ch == '\n' || ch == EOF) && in_row) {
      if (rows == 0) cols = in_row;
      if (in_row != cols) {
        snprintf(err, cap, "%s: row %zu has %zu numbers, row 1 has %zu", matrix_file, rows + 1,
                 in_row, cols);
        rc = -1;
        break;
      }
      rows++;
      in_row = 0;
    }
  } while (ch != EOF);
  if (ferror(f) && rc == 0) rc = -1, snprintf(err, cap, "%s: read error", matrix_file);
  fclose(f);
  if (rc == 0 && rows == 0) rc = -1, snprintf(err, cap, "%s: no numbers", matrix_file);
  if (rc == 0 && rows != cols)
    rc = -1, snprintf(err, cap, "%s: %zu rows of %zu: not square", matrix_file, rows, cols);
  if (rc == 0 && (matrix = malloc(n * sizeof *matrix)) == NULL)
    rc = -1, snprintf(err, cap, "%s: out of memory", matrix_file);
  if (rc == 0) {
    for (size_t i = 0; i < n; i++) {
      double b = floor(v[i] * matrix_scale);
      if (b > 1e15) { /* far beyond any buffer; keeps the sums from overflowing */
        rc = -1;
        snprintf(err, cap, "%s: %g bytes (scaled) is too large", matrix_file, b);
        break;
      }
      matrix[i] = (size_t)b & ~(size_t)15; /* 16-byte blocks, as nccl-tests */
    }
    dim = (int)rows;
  }
  free(v);
  return rc;
}

static int env_double(const char *name, double *out, char *err, size_t cap) {
  const char *s = getenv(name);
  if (!s) return 0;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v))
    return snprintf(err, cap, "%s='%s' is not a number", name, s), -1;
  *out = v;
  return 0;
}

static int setup(perf_ctx *c, size_t minbytes, size_t maxbytes, char *err, size_t cap) {
  const int n = c->nranks;
  if (env_double("NCCL_TESTS_ALLTOALLV_SPREAD", &spread, err, cap) != 0) return -1;
  spread = spread < 0 ? 0 : spread > 1 ? 1 : spread; /* nccl-tests clamps */
  if (env_double("NCCL_TESTS_ALLTOALLV_MATRIX_SCALE", &matrix_scale, err, cap) != 0) return -1;
  if (matrix_scale < 0) matrix_scale = 0;
  matrix_file = getenv("NCCL_TESTS_ALLTOALLV_MATRIX_FILE");
  if (matrix_file && *matrix_file) {
    if (read_matrix(err, cap) != 0) return -1;
    if (dim < n)
      return snprintf(err, cap, "%s is %dx%d: too small for %d ranks", matrix_file, dim, dim, n),
             -1;
    if (minbytes != maxbytes)
      return snprintf(err, cap,
                      "with a traffic matrix the sizes come from the file: give -b and -e the "
                      "same value (e.g. -b 32M -e 32M)"),
             -1;
    size_t s, r;
    max_totals(0, n, 1, &s, &r);
    if (maxbytes < (s > r ? s : r))
      return snprintf(err, cap, "-e must be at least %zu bytes for the traffic matrix %s (got %zu)",
                      s > r ? s : r, matrix_file, maxbytes),
             -1;
  }
  sendcounts = calloc((size_t)n, sizeof *sendcounts);
  sdispls = calloc((size_t)n, sizeof *sdispls);
  recvcounts = calloc((size_t)n, sizeof *recvcounts);
  rdispls = calloc((size_t)n, sizeof *rdispls);
  if (!sendcounts || !sdispls || !recvcounts || !rdispls)
    return snprintf(err, cap, "out of memory for %d ranks' counts", n), -1;
  return 0;
}

static void describe(const perf_ctx *c) {
  (void)c;
  if (dim)
    printf(
        "#\n# alltoallv: traffic matrix %s (%dx%d, scale %g): row i, column j = bytes rank i "
        "sends rank j\n",
        matrix_file, dim, dim, matrix_scale);
  else
    printf(
        "#\n# alltoallv: generated pattern, spread %.3f (NCCL_TESTS_ALLTOALLV_SPREAD; 0: "
        "uniform, 1: by ring distance)\n",
        spread);
}

static const perf_coll alltoallv = {
    .name = "all_to_allv",
    .tool = "alltoallv_perf",
    .min_ranks = 1,
    .needs_scratch = 1,
    .bus_factor = perf_factor_ring,
    .counts = counts,
    .run = run,
    .check = check,
    .setup = setup,
    .describe = describe,
    .note =
        "alltoallv in place: ringreduce cannot receive into the buffer being sent, so the "
        "in-place columns time a copy to a scratch buffer plus rr_all_to_allv.",
};

int main(int argc, char **argv) {
  return perf_main(argc, argv, &alltoallv);
}
