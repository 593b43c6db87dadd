/* The collective matrix. One process per rank (rr_spawn); for a collective and a world
 * size it runs every dtype x op x count x placement (in / out of place) x root, each rank
 * checking every element of its result against an exact (integers) or float64 (floats,
 * tolerance in harness.h) reference on random non-zero data. Results that must be equal
 * on all ranks are compared bit for bit through a hash all-gather, outputs that must stay
 * untouched are checked, and out-of-place inputs must come back unchanged.
 *
 *   test_coll <all_reduce|reduce_scatter|all_gather|broadcast|reduce|gather|scatter|
 *              all_to_all|all_to_allv|sendrecv|barrier> <world> [matrix|large]
 *
 * matrix: counts 0, 1, 7, world-1, world+1 with every combination, and 1,000,003 with
 * every dtype (two ops each, rotating); where the count is one block of n (reduce_scatter,
 * all_gather, gather, scatter, all_to_all) the big count is 1,000,003 / n but at least
 * 300,007, so a rank moves about as much as in an all-reduce of 1,000,003 while every
 * dtype's block still spans more than two default segments (128 KiB; before, all_to_all at 8 ranks
 * moved 8M elements per rank per case: most of the matrix's time under the sanitizers, no path the
 * smaller blocks miss). large: 64 MiB of float32 and of int32. all_to_all and all_to_allv have no
 * in-place form: their second placement is the _async call. For all_to_allv the count sets the
 * scale of random per-pair counts (zeros among them). RR_TEST_MATRIX=lean (the sanitizer stages)
 * narrows dtypes and ops: see t_lean in harness.h. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"

typedef struct targs {
  const char *coll;
  int world;
  int large;
} targs;

/* Every rank must hold the same bytes. */
static int same_everywhere(rr_pg *pg, const void *buf, size_t bytes, const char *what) {
  int differs;
  T_OK(t_differing_rank(pg, buf, bytes, &differs));
  T_CHECK(differs < 0, "%s: rank %d's result differs in its bits from rank %d's", what, differs,
          t_rank);
  return 0;
}

static int case_all_reduce(rr_pg *pg, size_t count, rr_dtype d, rr_op op, int inplace,
                           uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t bytes = count * rr_dtype_size(d);
  char *src = t_alloc(bytes), *dst = inplace ? src : t_alloc(bytes);
  t_fill(src, count, d, op, seed, r, 0);
  if (!inplace) memset(dst, 0xa5, bytes); /* an element never written fails the check */
  T_OK(rr_all_reduce(pg, src, dst, count, d, op));
  char what[96];
  snprintf(what, sizeof what, "all_reduce %s count %zu", inplace ? "in place" : "out of place",
           count);
  size_t wrong = t_check_reduced(dst, count, d, op, seed, n, 0, what);
  if (!inplace)
    wrong += t_check_copied(src, count, d, op, seed, r, 0, "all_reduce input (must be unchanged)");
  int bad = wrong || same_everywhere(pg, dst, bytes, what);
  if (!inplace) free(dst);
  free(src);
  T_CHECK(!bad, "%s: %zu wrong elements", what, wrong);
  return 0;
}

static int case_reduce_scatter(rr_pg *pg, size_t count, rr_dtype d, rr_op op, int inplace,
                               uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t es = rr_dtype_size(d), blk = count * es;
  char *src = t_alloc(blk * (size_t)n);
  char *dst = inplace ? src + (size_t)r * blk : t_alloc(blk);
  t_fill(src, count * (size_t)n, d, op, seed, r, 0);
  if (!inplace) memset(dst, 0xa5, blk);
  T_OK(rr_reduce_scatter(pg, src, dst, count, d, op));
  char what[96];
  snprintf(what, sizeof what, "reduce_scatter %s count %zu", inplace ? "in place" : "out of place",
           count);
  size_t wrong = t_check_reduced(dst, count, d, op, seed, n, (size_t)r * count, what);
  if (!inplace)
    wrong += t_check_copied(src, count * (size_t)n, d, op, seed, r, 0, "reduce_scatter input");
  else /* in place, the other blocks of the input must be left alone */
    for (int q = 0; q < n; q++)
      if (q != r)
        wrong += t_check_copied(src + (size_t)q * blk, count, d, op, seed, r, (size_t)q * count,
                                "reduce_scatter untouched block");
  if (!inplace) free(dst);
  free(src);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

static int case_all_gather(rr_pg *pg, size_t count, rr_dtype d, int inplace, uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t es = rr_dtype_size(d), blk = count * es;
  char *dst = t_alloc(blk * (size_t)n), *src = inplace ? dst + (size_t)r * blk : t_alloc(blk);
  memset(dst, 0xa5, blk * (size_t)n);
  t_fill(src, count, d, RR_SUM, seed, r, 0);
  T_OK(rr_all_gather(pg, src, dst, count, d));
  char what[96];
  snprintf(what, sizeof what, "all_gather %s count %zu", inplace ? "in place" : "out of place",
           count);
  size_t wrong = 0;
  for (int q = 0; q < n; q++)
    wrong += t_check_copied(dst + (size_t)q * blk, count, d, RR_SUM, seed, q, 0, what);
  int bad = wrong || same_everywhere(pg, dst, blk * (size_t)n, what);
  if (!inplace) free(src);
  free(dst);
  T_CHECK(!bad, "%s: %zu wrong elements", what, wrong);
  return 0;
}

static int case_broadcast(rr_pg *pg, size_t count, rr_dtype d, int inplace, int root,
                          uint64_t seed) {
  int r = rr_get_rank(pg);
  size_t bytes = count * rr_dtype_size(d);
  char *dst = t_alloc(bytes), *src = NULL;
  memset(dst, 0xa5, bytes);
  if (inplace) {
    src = dst;
    if (r == root) t_fill(dst, count, d, RR_SUM, seed, root, 0);
  } else if (r == root) {
    src = t_alloc(bytes);
    t_fill(src, count, d, RR_SUM, seed, root, 0);
  } /* out of place, other ranks pass NULL: their sendbuf is never read */
  T_OK(rr_broadcast(pg, src, dst, count, d, rr_get_global_rank(pg, root)));
  char what[96];
  snprintf(what, sizeof what, "broadcast %s count %zu root %d",
           inplace ? "in place" : "out of place", count, root);
  size_t wrong = t_check_copied(dst, count, d, RR_SUM, seed, root, 0, what);
  if (!inplace && r == root)
    wrong += t_check_copied(src, count, d, RR_SUM, seed, root, 0, "broadcast input");
  int bad = wrong || same_everywhere(pg, dst, bytes, what);
  if (!inplace && r == root) free(src);
  free(dst);
  T_CHECK(!bad, "%s: %zu wrong elements", what, wrong);
  return 0;
}

static int case_reduce(rr_pg *pg, size_t count, rr_dtype d, rr_op op, int inplace, int root,
                       uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t bytes = count * rr_dtype_size(d);
  char *src = t_alloc(bytes), *dst = inplace ? src : t_alloc(bytes);
  t_fill(src, count, d, op, seed, r, 0);
  if (!inplace) memset(dst, 0xa5, bytes);
  T_OK(rr_reduce(pg, src, dst, count, d, op, rr_get_global_rank(pg, root)));
  char what[96];
  snprintf(what, sizeof what, "reduce %s count %zu root %d", inplace ? "in place" : "out of place",
           count, root);
  size_t wrong = 0;
  if (r == root) {
    wrong = t_check_reduced(dst, count, d, op, seed, n, 0, what);
  } else {
    /* Not the root: neither buffer may change. */
    wrong = t_check_copied(src, count, d, op, seed, r, 0, "reduce input on a non-root");
    if (!inplace)
      for (size_t i = 0; i < bytes; i++) wrong += ((unsigned char)dst[i] != 0xa5);
  }
  if (!inplace && r == root) wrong += t_check_copied(src, count, d, op, seed, r, 0, "reduce input");
  if (!inplace) free(dst);
  free(src);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

/* Bytes of buf[from, to) that are not the fill pattern: a rank's buffer the call may not
 * touch, or what lies between the blocks of one. */
static size_t untouched(const char *buf, size_t from, size_t to) {
  size_t wrong = 0;
  for (size_t i = from; i < to; i++) wrong += (unsigned char)buf[i] != 0xa5;
  return wrong;
}

/* The root gets block q from rank q. Out of place, the other ranks pass no recvbuf; in
 * place, every rank passes one with its own block at its offset, and outside the root
 * nothing in it may change. */
static int case_gather(rr_pg *pg, size_t count, rr_dtype d, int inplace, int root, uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t es = rr_dtype_size(d), blk = count * es, all = blk * (size_t)n;
  char *dst = NULL, *src;
  if (inplace || r == root) {
    dst = t_alloc(all);
    memset(dst, 0xa5, all);
  }
  src = inplace ? dst + (size_t)r * blk : t_alloc(blk);
  t_fill(src, count, d, RR_SUM, seed, r, 0);
  T_OK(rr_gather(pg, src, dst, count, d, rr_get_global_rank(pg, root)));
  char what[96];
  snprintf(what, sizeof what, "gather %s count %zu root %d", inplace ? "in place" : "out of place",
           count, root);
  size_t wrong =
      t_check_copied(src, count, d, RR_SUM, seed, r, 0, "gather input (must be unchanged)");
  if (r == root) {
    for (int q = 0; q < n; q++)
      wrong += t_check_copied(dst + (size_t)q * blk, count, d, RR_SUM, seed, q, 0, what);
  } else if (inplace) { /* a non-root's recvbuf: everything but its own block still the fill */
    wrong += untouched(dst, 0, (size_t)r * blk) + untouched(dst, (size_t)(r + 1) * blk, all);
  }
  if (!inplace) free(src);
  free(dst);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

/* Rank r gets block r of the root's sendbuf. Out of place, the other ranks pass no
 * sendbuf; in place, each passes a sendbuf around its recvbuf whose other blocks must stay
 * as they were. */
static int case_scatter(rr_pg *pg, size_t count, rr_dtype d, int inplace, int root, uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t es = rr_dtype_size(d), blk = count * es, all = blk * (size_t)n;
  char *src = NULL, *dst;
  if (inplace || r == root) {
    src = t_alloc(all);
    memset(src, 0xa5, all);
    if (r == root) t_fill(src, count * (size_t)n, d, RR_SUM, seed, root, 0);
  }
  dst = inplace ? src + (size_t)r * blk : t_alloc(blk);
  if (!inplace) memset(dst, 0xa5, blk);
  T_OK(rr_scatter(pg, src, dst, count, d, rr_get_global_rank(pg, root)));
  char what[96];
  snprintf(what, sizeof what, "scatter %s count %zu root %d", inplace ? "in place" : "out of place",
           count, root);
  size_t wrong = t_check_copied(dst, count, d, RR_SUM, seed, root, (size_t)r * count, what);
  if (r == root)
    wrong += t_check_copied(src, count * (size_t)n, d, RR_SUM, seed, root, 0,
                            "scatter input (must be unchanged)");
  else if (inplace)
    wrong += untouched(src, 0, (size_t)r * blk) + untouched(src, (size_t)(r + 1) * blk, all);
  if (!inplace) free(dst);
  free(src);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

/* Block j of rank i's input (its elements j*count...) lands as block i of rank j's output.
 * `async` runs the _async form. */
static int case_all_to_all(rr_pg *pg, size_t count, rr_dtype d, int async, uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t es = rr_dtype_size(d), blk = count * es, all = blk * (size_t)n;
  char *src = t_alloc(all), *dst = t_alloc(all);
  t_fill(src, count * (size_t)n, d, RR_SUM, seed, r, 0);
  memset(dst, 0xa5, all);
  if (async) {
    rr_work *w;
    T_OK(rr_all_to_all_async(pg, src, dst, count, d, &w));
    T_OK(rr_work_wait(w, 0));
    rr_work_free(w);
  } else {
    T_OK(rr_all_to_all(pg, src, dst, count, d));
  }
  char what[96];
  snprintf(what, sizeof what, "all_to_all%s count %zu", async ? " (async)" : "", count);
  size_t wrong = t_check_copied(src, count * (size_t)n, d, RR_SUM, seed, r, 0,
                                "all_to_all input (must be unchanged)");
  for (int q = 0; q < n; q++)
    wrong +=
        t_check_copied(dst + (size_t)q * blk, count, d, RR_SUM, seed, q, (size_t)r * count, what);
  free(src);
  free(dst);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

/* all_to_allv's layout, which every rank can work out for every rank from the seed: the
 * count of pair i -> j (zero about one time in five, else up to twice `count` / n rounded
 * up, so a rank moves about `count` elements in all), and where the blocks lie: in an order
 * of their own on each side, with gaps of up to two elements before each. */
static size_t a2av_count(uint64_t seed, int n, size_t count, int i, int j) {
  if (count == 0) return 0;
  uint64_t b = t_bits(seed, 101, (uint64_t)i * (uint64_t)n + (uint64_t)j);
  size_t most = (2 * count + (size_t)n - 1) / (size_t)n;
  return b % 5 == 0 ? 0 : 1 + (size_t)((b >> 8) % most);
}

/* Rank `rank`'s counts and displacements on one side (send: to each j; recv: from each i);
 * returns the elements its buffer spans. */
static size_t a2av_layout(uint64_t seed, int n, size_t count, int rank, int send, size_t *counts,
                          size_t *displs) {
  size_t at = 0;
  for (int k = 0; k < n; k++) {
    int j = send ? n - 1 - k : (rank + k) % n; /* the block placed k-th */
    counts[j] = send ? a2av_count(seed, n, count, rank, j) : a2av_count(seed, n, count, j, rank);
    at += t_bits(seed, send ? 102 : 103, (uint64_t)rank * (uint64_t)n + (uint64_t)k) % 3;
    displs[j] = at;
    at += counts[j];
  }
  return at;
}

static int case_all_to_allv(rr_pg *pg, size_t count, rr_dtype d, int async, uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t es = rr_dtype_size(d);
  size_t *sc = t_alloc(4 * (size_t)n * sizeof *sc), *sd = sc + n, *rc = sc + 2 * n,
         *rd = sc + 3 * n;
  size_t *peer = t_alloc(2 * (size_t)n * sizeof *peer); /* a sender's counts and displacements */
  size_t sspan = a2av_layout(seed, n, count, r, 1, sc, sd);
  size_t rspan = a2av_layout(seed, n, count, r, 0, rc, rd);
  char *src = t_alloc(sspan * es), *dst = t_alloc(rspan * es);
  t_fill(src, sspan, d, RR_SUM, seed, r, 0);
  memset(dst, 0xa5, rspan * es);
  if (async) { /* the arrays are the caller's only until the call returns */
    rr_work *w;
    T_OK(rr_all_to_allv_async(pg, src, sc, sd, dst, rc, rd, d, &w));
    size_t *keep = t_alloc(4 * (size_t)n * sizeof *keep);
    memcpy(keep, sc, 4 * (size_t)n * sizeof *keep);
    memset(sc, 0xff, 4 * (size_t)n * sizeof *sc);
    free(sc);
    sc = keep, sd = sc + n, rc = sc + 2 * n, rd = sc + 3 * n;
    T_OK(rr_work_wait(w, 0));
    rr_work_free(w);
  } else {
    T_OK(rr_all_to_allv(pg, src, sc, sd, dst, rc, rd, d));
  }
  char what[96];
  snprintf(what, sizeof what, "all_to_allv%s count %zu", async ? " (async)" : "", count);
  size_t wrong =
      t_check_copied(src, sspan, d, RR_SUM, seed, r, 0, "all_to_allv input (must be unchanged)");
  size_t at = 0;
  for (int k = 0; k < n; k++) { /* in the order the blocks lie, checking the gaps too */
    int q = (r + k) % n;
    wrong += untouched(dst, at * es, rd[q] * es);
    a2av_layout(seed, n, count, q, 1, peer, peer + n);
    T_CHECK(peer[r] == rc[q], "layout: rank %d sends %zu, rank %d expects %zu", q, peer[r], r,
            rc[q]);
    wrong += t_check_copied(dst + rd[q] * es, rc[q], d, RR_SUM, seed, q, peer[n + r], what);
    at = rd[q] + rc[q];
  }
  free(peer);
  free(sc);
  free(src);
  free(dst);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

/* Ring shift with sendrecv, then blocking send/recv in pairs, then ordering of several
 * messages between one pair. */
static int case_sendrecv(rr_pg *pg, size_t count, rr_dtype d, uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t bytes = count * rr_dtype_size(d);
  char *src = t_alloc(bytes), *dst = t_alloc(bytes);
  char what[96];
  t_fill(src, count, d, RR_SUM, seed, r, 0);
  size_t wrong = 0;
  if (n > 1) {
    memset(dst, 0xa5, bytes);
    int right = (r + 1) % n, left = (r + n - 1) % n;
    T_OK(rr_sendrecv(pg, src, count, right, dst, count, left, d));
    snprintf(what, sizeof what, "sendrecv ring shift count %zu", count);
    wrong += t_check_copied(dst, count, d, RR_SUM, seed, left, 0, what);

    int partner = r ^ 1;
    if (partner < n) {
      memset(dst, 0xa5, bytes);
      if (r < partner) {
        T_OK(rr_send(pg, src, count, d, partner));
        T_OK(rr_recv(pg, dst, count, d, partner));
      } else {
        T_OK(rr_recv(pg, dst, count, d, partner));
        T_OK(rr_send(pg, src, count, d, partner));
      }
      snprintf(what, sizeof what, "send/recv pair count %zu", count);
      wrong += t_check_copied(dst, count, d, RR_SUM, seed, partner, 0, what);
    }
    /* Three messages of different sizes from the first to the last rank, in order. */
    size_t sizes[3] = {count, count / 2 + 1, 1};
    for (int k = 0; k < 3; k++) {
      size_t c = sizes[k] < count ? sizes[k] : count;
      if (r == 0) T_OK(rr_send(pg, src, c, d, n - 1));
      if (r == n - 1) {
        memset(dst, 0xa5, bytes);
        T_OK(rr_recv(pg, dst, c, d, 0));
        snprintf(what, sizeof what, "ordered message %d of %zu elements", k, c);
        wrong += t_check_copied(dst, c, d, RR_SUM, seed, 0, 0, what);
      }
    }
  }
  free(src);
  free(dst);
  T_CHECK(!wrong, "sendrecv count %zu: %zu wrong elements", count, wrong);
  return 0;
}

/* No rank may leave a barrier before every rank entered it. */
static int case_barrier(rr_pg *pg, uint64_t seed, int iter) {
  int early;
  double left, entered;
  T_OK(t_barrier_early(pg, seed, iter, &early, &left, &entered));
  T_CHECK(early < 0, "barrier %d: rank %d left at %.6f before rank %d entered at %.6f", iter,
          rr_get_rank(pg), left, early, entered);
  return 0;
}

static size_t dedupe(size_t *c, size_t n) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    int seen = 0;
    for (size_t j = 0; j < m; j++) seen |= c[j] == c[i];
    if (!seen) c[m++] = c[i];
  }
  return m;
}

static int body(int rank, void *arg) {
  const targs *ta = arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  const int n = rr_get_world_size(pg);
  const char *c = ta->coll;
  uint64_t seed = t_seed();
  int cases = 0, fails = 0;
  const int lean = t_lean();

  if (!strcmp(c, "barrier")) {
    for (int i = 0; i < 30; i++) fails += case_barrier(pg, seed, i), cases++;
  } else if (ta->large) {
    /* 64 MiB buffers: float32 sum and int32 bxor, both placements. */
    const rr_dtype ds[2] = {RR_FLOAT32, RR_INT32};
    const rr_op os[2] = {RR_SUM, RR_BXOR};
    size_t total = (size_t)64 << 20;
    for (int k = 0; k < 2; k++) {
      size_t count = total / rr_dtype_size(ds[k]);
      size_t per = count / (size_t)n;
      uint64_t s = seed + (uint64_t)k;
      int inplace = k;
      if (!strcmp(c, "all_reduce"))
        fails += case_all_reduce(pg, count, ds[k], os[k], inplace, s);
      else if (!strcmp(c, "reduce_scatter"))
        fails += case_reduce_scatter(pg, per, ds[k], os[k], inplace, s);
      else if (!strcmp(c, "all_gather"))
        fails += case_all_gather(pg, per, ds[k], inplace, s);
      else if (!strcmp(c, "broadcast"))
        fails += case_broadcast(pg, count, ds[k], inplace, (k + 1) % n, s);
      else if (!strcmp(c, "reduce"))
        fails += case_reduce(pg, count, ds[k], os[k], inplace, (k + 1) % n, s);
      else if (!strcmp(c, "sendrecv"))
        fails += case_sendrecv(pg, count, ds[k], s);
      else if (!strcmp(c, "gather"))
        fails += case_gather(pg, per, ds[k], inplace, (k + 1) % n, s);
      else if (!strcmp(c, "scatter"))
        fails += case_scatter(pg, per, ds[k], inplace, (k + 1) % n, s);
      else if (!strcmp(c, "all_to_all"))
        fails += case_all_to_all(pg, per, ds[k], k, s);
      else if (!strcmp(c, "all_to_allv"))
        fails += case_all_to_allv(pg, per, ds[k], k, s);
      cases++;
    }
  } else {
    int blocks = !strcmp(c, "reduce_scatter") || !strcmp(c, "all_gather") || !strcmp(c, "gather") ||
                 !strcmp(c, "scatter") || !strcmp(c, "all_to_all");
    size_t bigc = blocks ? 1000003 / (size_t)n : 1000003;
    if (bigc < 300007) bigc = 300007;
    size_t counts[6] = {0, 1, 7, (size_t)n - 1, (size_t)n + 1, bigc};
    size_t ncounts = dedupe(counts, 6);
    for (size_t ci = 0; ci < ncounts; ci++) {
      size_t count = counts[ci];
      int big = count > 100000;
      for (int di = 0; di < RR_NUM_DTYPES; di++) {
        rr_dtype d = (rr_dtype)di;
        if (lean && !t_lean_dtype(d)) continue;
        rr_op ops[8];
        int nops = t_valid_ops(d, ops);
        if (big) { /* two ops per dtype, rotating so every op meets a big count */
          ops[1] = ops[1 + (size_t)di % (size_t)(nops - 1)];
          nops = 2;
        } else if (lean) { /* sum and one more, rotating with the count */
          ops[1] = ops[1 + (ci + (size_t)di) % (size_t)(nops - 1)];
          nops = 2;
        }
        int reduces =
            !strcmp(c, "all_reduce") || !strcmp(c, "reduce_scatter") || !strcmp(c, "reduce");
        if (!reduces) nops = 1;
        for (int oi = 0; oi < nops; oi++) {
          for (int inplace = 0; inplace < 2; inplace++) {
            if (big && inplace != (di + oi) % 2) continue;
            uint64_t s = seed + (uint64_t)cases * 7919;
            int nroots = (!strcmp(c, "broadcast") || !strcmp(c, "reduce") || !strcmp(c, "gather") ||
                          !strcmp(c, "scatter"))
                             ? n
                             : 1;
            for (int root = 0; root < nroots; root++) {
              /* A big count runs at one root per (dtype, op), rotating. all_to_all(v) have
               * no root and run it for every dtype; the other unrooted calls keep only the
               * (dtype, op) pairs whose rotation lands on 0. */
              int rotates = nroots > 1 || strncmp(c, "all_to_all", 10) != 0;
              if (big && rotates && root != (di + oi) % n) continue;
              if (!strcmp(c, "all_reduce"))
                fails += case_all_reduce(pg, count, d, ops[oi], inplace, s);
              else if (!strcmp(c, "reduce_scatter"))
                fails += case_reduce_scatter(pg, count, d, ops[oi], inplace, s);
              else if (!strcmp(c, "all_gather"))
                fails += case_all_gather(pg, count, d, inplace, s);
              else if (!strcmp(c, "broadcast"))
                fails += case_broadcast(pg, count, d, inplace, root, s);
              else if (!strcmp(c, "reduce"))
                fails += case_reduce(pg, count, d, ops[oi], inplace, root, s);
              else if (!strcmp(c, "sendrecv")) {
                if (!inplace) fails += case_sendrecv(pg, count, d, s);
              } else if (!strcmp(c, "gather"))
                fails += case_gather(pg, count, d, inplace, root, s);
              else if (!strcmp(c, "scatter"))
                fails += case_scatter(pg, count, d, inplace, root, s);
              /* No in-place form: the second placement runs the _async call instead. */
              else if (!strcmp(c, "all_to_all"))
                fails += case_all_to_all(pg, count, d, inplace, s);
              else if (!strcmp(c, "all_to_allv"))
                fails += case_all_to_allv(pg, count, d, inplace, s);
              else
                T_FAIL("unknown collective %s", c);
              cases++;
              if (fails) goto out; /* the first failure is the informative one */
            }
          }
        }
      }
    }
  }
out:
  T_OK(rr_destroy_process_group(pg));
  if (rank == 0)
    printf("%s world %d: %d cases%s, %d failed\n", c, n, cases, lean ? " (lean matrix)" : "",
           fails);
  return fails ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <collective> <world> [matrix|large]\n", argv[0]);
    return 2;
  }
  targs ta = {
      .coll = argv[1], .world = atoi(argv[2]), .large = argc > 3 && !strcmp(argv[3], "large")};
  t_seed_announce(argv[1]);
  rr_spawn_status st;
  if (rr_spawn(ta.world, body, &ta, &st) != RR_OK) {
    fprintf(stderr, "FAILED: %s\n", rr_last_error());
    return 1;
  }
  return 0;
}
