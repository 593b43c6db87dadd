/* The DDP wrapper (ddp/) against torch's rules and against single-process references.
 *
 *   test_ddp SECTION [WORLD]
 *
 *   buckets     torch's bucket assignment: the reference file's worked example, default vs
 *               explicit cap, per-dtype bucket sets, frozen parameters, the rebuild order, and
 *               the rules checked as invariants over 300 random models
 *   grads W     averaged gradients of a mixed-dtype model (float32/64, bfloat16, float16, a
 *               frozen int parameter, a buffer; many small buckets; each rank marks in its own
 *               random order) equal the float64 mean within (W+2)*eps*mean|g|, and are
 *               bit-identical on every rank, over 3 iterations (the 2nd after the rebuild)
 *   order       buckets launch strictly in index order (a full bucket waits for its
 *               predecessors); after the first iteration they are rebuilt in rank 0's ready
 *               order on every rank
 *   equiv W     an MLP trained by W ranks, each on 1/W of every global batch, keeps the same
 *               parameters as one process on the whole batch (|diff| <= 1e-6 * (1 + |p|)
 *               after each of 12 SGD steps), and all ranks hold bit-identical parameters
 *               after every step (hash all-gather)
 *   identical   3 ranks, fp16 hook, 3 buckets, 20 steps: bit-identical parameters everywhere
 *               after every step (and within 1e-3 * (1 + |p|) of the single-process float32 run)
 *   nosync      k = 3 micro-batches under no_sync, then a synchronised one, equal one step on
 *               their union (tolerance 1e-6 * (1 + |p|)); nothing is sent under no_sync
 *   hooks       fp16 / bf16 compression hooks: the mean within (W+3)*eps16*mean|g|, and the
 *               wire really is 16-bit; the allreduce hook within the float32 tolerance
 *   missing     a gradient never marked ready: torch's "Expected to have finished reduction"
 *               error listing the indices, from rr_ddp_sync and every later call; a backward
 *               left without rr_ddp_sync; a gradient marked twice
 *   mismatch    models that differ across ranks (count, shape, dtype, trainability, a local
 *               error on one rank): every rank fails, naming the rank and the difference
 *   checkpoint  save (rank 0 writes) / load (broadcast) round trip, bit-exact; a corrupt
 *               file, a different model and an unwritable path fail on every rank
 *   broadcast   construction copies rank 0's parameters and buffers everywhere (chunks
 *               smaller than a tensor); buffers re-broadcast at forward, torch's rule after
 *               no_sync, and not at all when broadcast_buffers is off
 *   cuda        a CUDA tensor where there can be none fails saying why: this build has no
 *               CUDA, or no device is visible (RR_ENOTSUP), on every rank; on a GPU machine,
 *               host memory described as device memory (RR_EINVAL)
 *   args        argument and state errors
 *   gpu W       (needs a GPU; "skipped: no CUDA device" and 77 without one) the same mixed
 *               model in device memory and in host memory, through every hook, on the legacy
 *               stream and on a user stream still writing the gradients when they are marked
 *               ready: averaged gradients, broadcast parameters and buffers, no_sync and the
 *               checkpoint file bit-identical to the host path's (tolerance zero, by design:
 *               see the section), and identical on all ranks
 *
 * Data is random (t_value: never zero), from $RR_TEST_SEED or a fixed seed, printed.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "examples/mlp.h"
#include "ringreduce/ddp.h"
#include "ringreduce/ringreduce.h"
#include "tests/harness.h"

static uint64_t g_seed;

/* ---------------------------------------------------------------------------------------------
 * Helpers.
 */

static int run_ranks(int w, int (*fn)(int, void *), void *arg, double timeout_s) {
  int codes[16], sigs[16];
  if (t_run(w, fn, arg, NULL, timeout_s, codes, sigs) != 0) return 1;
  int bad = 0;
  for (int r = 0; r < w; r++)
    if (codes[r] != 0 || sigs[r] != 0) {
      fprintf(stderr, "rank %d exited with code %d, signal %d\n", r, codes[r], sigs[r]);
      bad = 1;
    }
  return bad;
}

/* 1 on every rank when buf is bit-identical on all ranks. */
static int same_on_all(rr_pg *pg, const void *buf, size_t bytes, int *same) {
  int w = rr_get_world_size(pg);
  uint64_t h = t_hash(buf, bytes), all[16];
  int st = rr_all_gather(pg, &h, all, 1, RR_INT64);
  *same = 1;
  for (int r = 0; st == RR_OK && r < w; r++) *same &= all[r] == h;
  return st;
}

/* A permutation of 0..n-1 from (seed, stream). */
static void shuffle(int *a, int n, uint64_t seed, uint64_t stream) {
  for (int i = 0; i < n; i++) a[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(t_bits(seed, stream, (uint64_t)i) % (uint64_t)(i + 1));
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

/* Fill a gradient with rank r's values for iteration `it` (never zero). */
static void fill_grad(void *g, size_t n, rr_dtype d, uint64_t seed, int r, size_t base) {
  t_fill(g, n, d, RR_SUM, seed, r, base);
}

/* ---------------------------------------------------------------------------------------------
 * buckets: pure.
 */

#define MIB (1024.0 * 1024.0)

static rr_ddp_tensor meta_tensor(size_t bytes, rr_dtype d, int trainable) {
  static char dummy;
  size_t es = rr_dtype_size(d);
  return (rr_ddp_tensor){.data = &dummy,
                         .grad = trainable ? (void *)&dummy : NULL,
                         .count = bytes / es,
                         .dtype = d,
                         .device = -1};
}

static int expect_buckets(const rr_ddp_tensor *p, int n, double cap, const int *ready,
                          const char *want, const char *what) {
  int order[64], end[64], nb = -1;
  int st = rr_ddp_assign_buckets(p, n, cap, ready, order, end, &nb);
  T_CHECK(st == RR_OK, "%s: %s", what, rr_last_error());
  char got[512];
  size_t o = 0;
  for (int b = 0, k = 0; b < nb; b++) {
    o += (size_t)snprintf(got + o, sizeof got - o, "%s[", b ? "," : "");
    for (int f = 1; k < end[b]; k++, f = 0)
      o += (size_t)snprintf(got + o, sizeof got - o, "%s%d", f ? "" : ",", order[k]);
    o += (size_t)snprintf(got + o, sizeof got - o, "]");
  }
  T_CHECK(strcmp(got, want) == 0, "%s: buckets %s, want %s", what, got, want);
  return 0;
}

/* The rules, checked on an assignment without re-running the algorithm: every trainable
 * parameter in exactly one bucket, one dtype per bucket; for each dtype its buckets are
 * consecutive runs of the walk (index order, or the ready order); every run reaches its limit
 * at its last tensor and not before, except the dtype's last run, which may stay below; the
 * limits are [1 MiB, cap, cap, ...] by default and [cap, ...] otherwise. Construction lists
 * buckets by decreasing smallest index; the rebuild lists closed buckets in the order they
 * closed, then the open ones (dtypes in order of first appearance). */
static int check_rules(const rr_ddp_tensor *p, int n, double cap, const int *ready) {
  int order[256], end[256], nb = 0, walk[256], nw = 0, bucket_of[256], pos[256];
  T_OK(rr_ddp_assign_buckets(p, n, cap, ready, order, end, &nb));
  for (int i = 0; i < n; i++)
    if (p[i].grad) walk[nw] = ready ? ready[nw] : i, nw++;
  for (int k = 0; k < nw; k++) pos[walk[k]] = k;
  T_CHECK(nb == 0 ? nw == 0 : end[nb - 1] == nw, "%d params in buckets, %d trainable",
          nb ? end[nb - 1] : 0, nw);
  for (int i = 0; i < n; i++) bucket_of[i] = -1;
  for (int b = 0, k = 0; b < nb; b++) {
    int first = order[k];
    for (; k < end[b]; k++) {
      int i = order[k];
      T_CHECK(i >= 0 && i < n && p[i].grad && bucket_of[i] < 0, "param %d listed badly", i);
      bucket_of[i] = b;
      T_CHECK(p[i].dtype == p[first].dtype, "bucket %d mixes dtypes", b);
      T_CHECK(i == first || pos[i] > pos[order[k - 1]], "bucket %d not in walk order", b);
    }
  }
  size_t later = (size_t)((cap > 0 ? cap : 25.0) * MIB), first = cap > 0 ? later : 1024 * 1024;
  int closed_at[256], nclosed = 0, open_b[RR_NUM_DTYPES], nopen = 0, done[256] = {0};
  rr_dtype key_seen[RR_NUM_DTYPES];
  int nkeys = 0;
  for (int k = 0; k < nw; k++) { /* dtypes in order of first appearance */
    int known = 0;
    for (int j = 0; j < nkeys; j++) known |= key_seen[j] == p[walk[k]].dtype;
    if (!known) key_seen[nkeys++] = p[walk[k]].dtype;
  }
  for (int kk = 0; kk < nkeys; kk++) {
    rr_dtype d = key_seen[kk];
    int cur = -1, nrun = 0, last_k = -1;
    size_t size = 0, last = 0, lim = first;
    for (int k = 0; k <= nw; k++) {
      int i = k < nw ? walk[k] : -1;
      if (i >= 0 && p[i].dtype != d) continue;
      if (i < 0 || bucket_of[i] != cur) {
        if (cur >= 0) {
          T_CHECK(size - last < lim, "bucket %d would have closed before its last tensor", cur);
          if (i >= 0)
            T_CHECK(size >= lim, "bucket %d closed at %zu bytes, limit %zu", cur, size, lim);
          if (size >= lim)
            closed_at[nclosed++] = last_k;
          else
            open_b[nopen++] = cur;
          done[cur] = 1;
          nrun++;
          lim = later;
        }
        if (i < 0) break;
        T_CHECK(!done[bucket_of[i]], "bucket %d is not one run of the walk", bucket_of[i]);
        cur = bucket_of[i], size = 0;
      }
      size += p[i].count * rr_dtype_size(d), last = p[i].count * rr_dtype_size(d), last_k = k;
    }
  }
  if (!ready) {
    for (int b = 1; b < nb; b++) {
      int m0 = n, m1 = n;
      for (int s = b >= 2 ? end[b - 2] : 0; s < end[b - 1]; s++) m0 = order[s] < m0 ? order[s] : m0;
      for (int s = end[b - 1]; s < end[b]; s++) m1 = order[s] < m1 ? order[s] : m1;
      T_CHECK(m0 > m1, "bucket %d (min %d) must come after bucket %d (min %d)", b - 1, m0, b, m1);
    }
  } else {
    /* Closed buckets sorted by the walk position of their last tensor, then open ones. */
    for (int a = 1; a < nclosed; a++)
      for (int j = a; j > 0 && closed_at[j - 1] > closed_at[j]; j--) {
        int t = closed_at[j];
        closed_at[j] = closed_at[j - 1];
        closed_at[j - 1] = t;
      }
    for (int b = 0; b < nb; b++) {
      int want = b < nclosed ? bucket_of[walk[closed_at[b]]] : open_b[b - nclosed];
      T_CHECK(want == b, "rebuild: bucket %d is in position %d of the emission order", want, b);
    }
  }
  return 0;
}

static int sec_buckets(void) {
  /* The reference file's example: 300K, 300K, 600K, 2M, 12B, 800K, 32M bytes, default cap ->
   * [[0,1,2],[3,4,5,6]] before the reversal. K and M as 1024-based and as 1000-based. */
  for (int k1024 = 0; k1024 < 2; k1024++) {
    double K = k1024 ? 1024 : 1000, M = k1024 ? 1024 * 1024 : 1000000;
    size_t sizes[7] = {(size_t)(300 * K), (size_t)(300 * K), (size_t)(600 * K), (size_t)(2 * M), 12,
                       (size_t)(800 * K), (size_t)(32 * M)};
    rr_ddp_tensor p[7];
    for (int i = 0; i < 7; i++) p[i] = meta_tensor(sizes[i], RR_FLOAT32, 1);
    if (expect_buckets(p, 7, 0, NULL, "[3,4,5,6],[0,1,2]", "reference example")) return 1;
    /* An explicit cap, even 25, has no 1 MiB first bucket. */
    if (expect_buckets(p, 7, 25, NULL, "[0,1,2,3,4,5,6]", "explicit 25 MiB")) return 1;
    /* A tiny cap: every tensor crosses it and closes its own bucket. */
    if (expect_buckets(p, 7, 1e-9, NULL, "[6],[5],[4],[3],[2],[1],[0]", "tiny cap")) return 1;
    /* Rebuild in ready order (reverse): [6] reaches 1 MiB, the rest stays under 25 MiB; not
     * reversed. */
    int ready[7] = {6, 5, 4, 3, 2, 1, 0};
    if (expect_buckets(p, 7, 0, ready, "[6],[5,4,3,2,1,0]", "rebuild order")) return 1;
    /* Frozen parameters are in no bucket. */
    p[1].grad = NULL;
    p[4].grad = NULL;
    if (expect_buckets(p, 7, 0, NULL, "[5,6],[0,2,3]", "frozen 1 and 4")) return 1;
  }
  /* One bucket set per dtype, each with its own 1 MiB first limit. */
  rr_ddp_tensor q[5] = {meta_tensor(600 * 1024, RR_FLOAT32, 1),
                        meta_tensor(600 * 1024, RR_FLOAT64, 1),
                        meta_tensor(600 * 1024, RR_FLOAT32, 1),
                        meta_tensor(600 * 1024, RR_FLOAT64, 1), meta_tensor(40, RR_FLOAT32, 1)};
  if (expect_buckets(q, 5, 0, NULL, "[4],[1,3],[0,2]", "per dtype")) return 1;
  /* Exactly at the limit closes (>=). */
  rr_ddp_tensor e[3] = {meta_tensor(512 * 1024, RR_FLOAT32, 1),
                        meta_tensor(512 * 1024, RR_FLOAT32, 1), meta_tensor(4, RR_FLOAT32, 1)};
  if (expect_buckets(e, 3, 0, NULL, "[2],[0,1]", "exactly 1 MiB")) return 1;
  /* Bad arguments. */
  int order[4], end[4], nb;
  T_CHECK(rr_ddp_assign_buckets(e, 3, -1, NULL, order, end, &nb) == RR_EINVAL, "negative cap");
  int dup[3] = {0, 0, 1};
  T_CHECK(rr_ddp_assign_buckets(e, 3, 0, dup, order, end, &nb) == RR_EINVAL, "duplicate in order");

  /* The rules over random models: 1-40 parameters, 4 dtypes, sizes from 4 B to 12 MiB, some
   * frozen, default and explicit caps, construction and rebuild orders. */
  for (int c = 0; c < 300; c++) {
    rr_ddp_tensor p[40];
    int n = 1 + (int)(t_bits(g_seed, 7, (uint64_t)c * 100) % 40);
    static const rr_dtype ds[4] = {RR_FLOAT32, RR_FLOAT64, RR_BFLOAT16, RR_FLOAT16};
    for (int i = 0; i < n; i++) {
      uint64_t b = t_bits(g_seed, 8, (uint64_t)c * 100 + (uint64_t)i);
      rr_dtype d = ds[b % (c % 3 == 0 ? 1 : 4)];
      size_t bytes = (size_t)1 << (2 + (b >> 8) % 22);
      bytes += ((b >> 20) % 1000) * 8;
      p[i] = meta_tensor(bytes, d, (b >> 40) % 7 != 0);
    }
    double caps[4] = {0, 25, 0.5, 3};
    double cap = caps[c % 4];
    if (check_rules(p, n, cap, NULL)) {
      fprintf(stderr, "random case %d (n %d, cap %g)\n", c, n, cap);
      return 1;
    }
    int perm[40], ready[40], nr = 0;
    shuffle(perm, n, g_seed, 9000 + (uint64_t)c);
    for (int k = 0; k < n; k++)
      if (p[perm[k]].grad) ready[nr++] = perm[k];
    if (check_rules(p, n, cap, ready)) {
      fprintf(stderr, "random rebuild case %d (n %d, cap %g)\n", c, n, cap);
      return 1;
    }
  }
  printf("buckets: ok\n");
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * grads: averaged gradients of a mixed model.
 */

#define NP_GRADS 7
static const size_t g_counts[NP_GRADS] = {300, 77, 5, 130, 1000, 64, 3};
static const rr_dtype g_dtypes[NP_GRADS] = {RR_FLOAT32, RR_FLOAT64, RR_INT32,  RR_BFLOAT16,
                                            RR_FLOAT32, RR_FLOAT16, RR_FLOAT32};

static int grads_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int w = rr_get_world_size(pg);
  void *data[NP_GRADS], *grad[NP_GRADS];
  rr_ddp_tensor p[NP_GRADS];
  for (int i = 0; i < NP_GRADS; i++) {
    size_t bytes = g_counts[i] * rr_dtype_size(g_dtypes[i]);
    data[i] = calloc(1, bytes);
    grad[i] = g_dtypes[i] == RR_INT32 ? NULL : calloc(1, bytes);
    p[i] = (rr_ddp_tensor){
        .data = data[i], .grad = grad[i], .count = g_counts[i], .dtype = g_dtypes[i], .device = -1};
  }
  p[4].ndim = 2, p[4].shape[0] = 10, p[4].shape[1] = 100;
  int64_t buf[4] = {1, 2, 3, 4};
  rr_ddp_tensor b = {.name = "steps", .data = buf, .count = 4, .dtype = RR_INT64, .device = -1};
  rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
  opt.bucket_cap_mb = 1000.0 / MIB; /* ~1000 bytes: many buckets */
  rr_ddp *ddp;
  T_OK(rr_ddp_init(&ddp, pg, p, NP_GRADS, &b, 1, &opt));
  int nb0 = rr_ddp_num_buckets(ddp);
  T_CHECK(nb0 >= 6, "expected many buckets, got %d", nb0);
  for (int it = 0; it < 3; it++) {
    T_OK(rr_ddp_forward(ddp));
    uint64_t seed = g_seed + (uint64_t)it * 1000;
    for (int i = 0; i < NP_GRADS; i++)
      if (grad[i]) fill_grad(grad[i], g_counts[i], g_dtypes[i], seed, rank, (size_t)i * 100000);
    /* Each rank its own order, different every iteration. */
    int ord[NP_GRADS];
    shuffle(ord, NP_GRADS, seed, 100 + (uint64_t)rank);
    for (int k = 0; k < NP_GRADS; k++)
      if (grad[ord[k]]) T_OK(rr_ddp_grad_ready(ddp, ord[k]));
    T_OK(rr_ddp_sync(ddp));
    size_t wrong = 0;
    for (int i = 0; i < NP_GRADS; i++) {
      if (!grad[i]) continue;
      rr_dtype d = g_dtypes[i];
      for (size_t j = 0; j < g_counts[i]; j++) {
        double sum = 0, abs = 0;
        for (int r = 0; r < w; r++) {
          double v = t_value(d, RR_SUM, seed, r, (size_t)i * 100000 + j);
          sum += v, abs += fabs(v);
        }
        double ref = sum / w, got = t_load(grad[i], j, d);
        double tol = (w + 2) * t_eps(d) * abs / w;
        if (!(fabs(got - ref) <= tol)) {
          if (wrong++ < 5)
            fprintf(stderr,
                    "rank %d: iteration %d param %d (%s) element %zu: got %.9g, want %.9g "
                    "(tolerance %.3g)\n",
                    rank, it, i, rr_dtype_name(d), j, got, ref, tol);
        }
      }
      int same;
      T_OK(same_on_all(pg, grad[i], g_counts[i] * rr_dtype_size(d), &same));
      T_CHECK(same, "iteration %d: param %d's averaged gradient differs across ranks", it, i);
    }
    T_CHECK(wrong == 0, "iteration %d: %zu elements off the float64 mean", it, wrong);
    T_CHECK(buf[0] == 1 && buf[3] == 4, "buffers are not touched by the reduction");
    rr_ddp_stats s;
    T_OK(rr_ddp_get_stats(ddp, &s));
    T_CHECK(s.syncs == it + 1 && s.rebuilt == (it >= 1), "stats: %lld syncs, rebuilt %d",
            (long long)s.syncs, s.rebuilt);
  }
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  for (int i = 0; i < NP_GRADS; i++) free(data[i]), free(grad[i]);
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * order: launch order and rebuild.
 */

static int launched(rr_ddp *ddp, int b) {
  rr_ddp_bucket_info info;
  return rr_ddp_get_bucket(ddp, b, &info) == RR_OK ? info.launched : -1;
}

static int order_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float data[4][100], grad[4][100];
  rr_ddp_tensor p[4];
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 100; j++) data[i][j] = (float)(i + 1), grad[i][j] = (float)(rank + 1);
    p[i] = (rr_ddp_tensor){
        .data = data[i], .grad = grad[i], .count = 100, .dtype = RR_FLOAT32, .device = -1};
  }
  rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
  opt.bucket_cap_mb = 800.0 / MIB; /* two 400-byte params per bucket */
  rr_ddp *ddp;
  T_OK(rr_ddp_init(&ddp, pg, p, 4, NULL, 0, &opt));
  rr_ddp_bucket_info b0, b1;
  T_OK(rr_ddp_get_bucket(ddp, 0, &b0));
  T_OK(rr_ddp_get_bucket(ddp, 1, &b1));
  T_CHECK(rr_ddp_num_buckets(ddp) == 2 && b0.nparams == 2 && b0.params[0] == 2 &&
              b0.params[1] == 3 && b1.params[0] == 0 && b1.params[1] == 1,
          "construction buckets should be [2,3],[0,1]");
  T_OK(rr_ddp_forward(ddp));
  /* Rank 0 marks 0 1 3 2, rank 1 marks 1 3 0 2: bucket 1 fills first on both, and must wait
   * for bucket 0. */
  const int ord[2][4] = {{0, 1, 3, 2}, {1, 3, 0, 2}};
  const int *o = ord[rank % 2];
  for (int k = 0; k < 3; k++) {
    T_OK(rr_ddp_grad_ready(ddp, o[k]));
    T_CHECK(launched(ddp, 0) == 0 && launched(ddp, 1) == 0,
            "after marking %d of 4 (param %d): bucket 0 launched %d, bucket 1 launched %d", k + 1,
            o[k], launched(ddp, 0), launched(ddp, 1));
  }
  T_OK(rr_ddp_grad_ready(ddp, o[3]));
  T_CHECK(launched(ddp, 0) == 1 && launched(ddp, 1) == 1,
          "both buckets launch once bucket 0 is full");
  T_OK(rr_ddp_sync(ddp));
  T_CHECK(launched(ddp, 0) == 0, "launched flags reset by sync");
  for (int i = 0; i < 4; i++) T_CHECK(grad[i][0] == 1.5f && grad[i][99] == 1.5f, "mean of 1 and 2");
  /* The rebuild at the next forward: rank 0's order 0 1 3 2 -> [0,1],[3,2], not reversed, on
   * both ranks even though rank 1 marked differently. */
  T_OK(rr_ddp_forward(ddp));
  T_OK(rr_ddp_get_bucket(ddp, 0, &b0));
  T_OK(rr_ddp_get_bucket(ddp, 1, &b1));
  T_CHECK(b0.params[0] == 0 && b0.params[1] == 1 && b1.params[0] == 3 && b1.params[1] == 2,
          "rebuilt buckets [%d,%d],[%d,%d], want [0,1],[3,2]", b0.params[0], b0.params[1],
          b1.params[0], b1.params[1]);
  /* Now parameters 0 and 1 fill bucket 0 and launch at once. */
  T_OK(rr_ddp_grad_ready(ddp, 0));
  T_OK(rr_ddp_grad_ready(ddp, 1));
  T_CHECK(launched(ddp, 0) == 1 && launched(ddp, 1) == 0, "rebuilt bucket 0 launches first");
  T_OK(rr_ddp_grad_ready(ddp, 3));
  T_OK(rr_ddp_grad_ready(ddp, 2));
  T_OK(rr_ddp_sync(ddp));
  rr_ddp_stats s;
  T_OK(rr_ddp_get_stats(ddp, &s));
  T_CHECK(s.rebuilt == 1 && s.buckets_reduced == 4, "stats rebuilt %d buckets %lld", s.rebuilt,
          (long long)s.buckets_reduced);
  /* no_rebuild keeps the construction buckets. */
  T_OK(rr_ddp_destroy(ddp));
  opt.no_rebuild = 1;
  T_OK(rr_ddp_init(&ddp, pg, p, 4, NULL, 0, &opt));
  for (int k = 0; k < 4; k++) T_OK(rr_ddp_grad_ready(ddp, o[k]));
  T_OK(rr_ddp_sync(ddp));
  T_OK(rr_ddp_forward(ddp));
  T_OK(rr_ddp_get_bucket(ddp, 0, &b0));
  T_CHECK(b0.params[0] == 2, "no_rebuild: bucket 0 still starts with param 2");
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * MLP-based tests: equiv, identical, nosync.
 */

#define IN 16
#define CLASSES 10

/* Sample s of the synthetic data set: inputs in +-[1/16, 1) (never zero), a random label. */
static void sample(float *x, int *y, uint64_t seed, size_t s) {
  for (int k = 0; k < IN; k++)
    x[k] = (float)(t_value(RR_FLOAT32, RR_SUM, seed, 0, s * IN + k) / 4.0);
  *y = (int)(t_bits(seed, 77, s) % CLASSES);
}

static void batch(float *x, int *y, uint64_t seed, size_t first, int n) {
  for (int i = 0; i < n; i++) sample(x + (size_t)i * IN, y + i, seed, first + (size_t)i);
}

typedef struct ready_ctx {
  rr_ddp *ddp;
  int st;
} ready_ctx;

static int mark_layer(int layer, void *p) {
  ready_ctx *c = p;
  c->st = rr_ddp_grad_ready(c->ddp, 2 * layer);
  if (c->st == RR_OK) c->st = rr_ddp_grad_ready(c->ddp, 2 * layer + 1);
  return c->st != RR_OK;
}

static double max_rel_diff(const float *a, const float *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
    if (!(d <= worst)) worst = d; /* NaN counts as worst */
  }
  return worst;
}

typedef struct mlp_case {
  int steps, local, hook;
  double cap_mb, tol;
} mlp_case;

static const int g_dims[4] = {IN, 32, 24, CLASSES};

static int equiv_rank(int rank, void *arg) {
  const mlp_case *c = arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int w = rr_get_world_size(pg), gb = c->local * w;
  mlp m, ref;
  /* Different initial weights on each rank: the construction broadcast must fix that. The
   * reference starts from rank 0's. */
  T_CHECK(mlp_init(&m, 3, g_dims, gb, g_seed + (uint64_t)rank) == 0, "mlp_init");
  T_CHECK(mlp_init(&ref, 3, g_dims, gb, g_seed) == 0, "mlp_init");
  rr_ddp_tensor p[6];
  mlp_ddp_params(&m, p);
  rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
  opt.bucket_cap_mb = c->cap_mb;
  opt.hook = (rr_ddp_hook)c->hook;
  rr_ddp *ddp;
  T_OK(rr_ddp_init(&ddp, pg, p, 6, NULL, 0, &opt));
  T_CHECK(memcmp(m.params, ref.params, m.nweights * sizeof(float)) == 0,
          "after construction every rank holds rank 0's initial weights");
  float *x = malloc((size_t)gb * IN * sizeof *x);
  int *y = malloc((size_t)gb * sizeof *y);
  ready_ctx rc = {.ddp = ddp};
  double worst = 0;
  for (int s = 0; s < c->steps; s++) {
    batch(x, y, g_seed ^ 0xda7a, (size_t)s * gb, gb);
    /* DDP: this rank's 1/W of the global batch, local mean loss. */
    T_OK(rr_ddp_forward(ddp));
    mlp_forward(&m, x + (size_t)rank * c->local * IN, c->local);
    mlp_loss(&m, y + rank * c->local, c->local, 1.0f / (float)c->local);
    T_CHECK(mlp_backward(&m, c->local, 0, mark_layer, &rc) == 0, "grad_ready: %s", rr_last_error());
    T_OK(rr_ddp_sync(ddp));
    mlp_sgd(&m, 0.1f);
    /* Reference: one process, the whole batch. */
    mlp_forward(&ref, x, gb);
    mlp_loss(&ref, y, gb, 1.0f / (float)gb);
    mlp_backward(&ref, gb, 0, NULL, NULL);
    mlp_sgd(&ref, 0.1f);
    int same;
    T_OK(same_on_all(pg, m.params, m.nweights * sizeof(float), &same));
    T_CHECK(same, "step %d: parameters differ across ranks", s);
    double d = max_rel_diff(m.params, ref.params, m.nweights);
    if (d > worst) worst = d;
    T_CHECK(d <= c->tol,
            "step %d: DDP parameters differ from the single-process run by %.3g (x(1+|p|)), "
            "tolerance %.3g",
            s, d, c->tol);
  }
  if (rank == 0)
    printf(
        "world %d: %d steps, largest |ddp - single| / (1 + |p|) = %.3g (tolerance %.3g), "
        "parameters bit-identical on every rank after every step\n",
        w, c->steps, worst, c->tol);
  free(x), free(y);
  mlp_free(&m), mlp_free(&ref);
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* k micro-batches: no_sync for the first k-1, then a synchronised one; versus one
 * synchronised step on the union. Loss of each micro-batch scaled by 1/(k*b) so the
 * accumulated gradient is the union's mean. */
static int nosync_rank(int rank, void *arg) {
  (void)arg;
  const int k = 3, b = 5, steps = 4;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int w = rr_get_world_size(pg);
  mlp acc, uni;
  T_CHECK(mlp_init(&acc, 3, g_dims, k * b, g_seed) == 0, "mlp_init");
  T_CHECK(mlp_init(&uni, 3, g_dims, k * b, g_seed) == 0, "mlp_init");
  rr_ddp_tensor pa[6], pu[6];
  mlp_ddp_params(&acc, pa);
  mlp_ddp_params(&uni, pu);
  rr_ddp *da, *du;
  T_OK(rr_ddp_init(&da, pg, pa, 6, NULL, 0, NULL));
  T_OK(rr_ddp_init(&du, pg, pu, 6, NULL, 0, NULL));
  float *x = malloc((size_t)k * b * IN * sizeof *x);
  int *y = malloc((size_t)k * b * sizeof *y);
  double worst = 0;
  for (int s = 0; s < steps; s++) {
    /* This rank's k*b samples of step s. */
    batch(x, y, g_seed ^ 0x5eed, ((size_t)s * w + (size_t)rank) * k * b, k * b);
    rr_ddp_stats before, after;
    T_OK(rr_ddp_get_stats(da, &before));
    ready_ctx ra = {.ddp = da};
    T_OK(rr_ddp_no_sync(da, 1));
    for (int mb = 0; mb < k; mb++) {
      if (mb == k - 1) T_OK(rr_ddp_no_sync(da, 0));
      T_OK(rr_ddp_forward(da));
      mlp_forward(&acc, x + (size_t)mb * b * IN, b);
      mlp_loss(&acc, y + mb * b, b, 1.0f / (float)(k * b));
      T_CHECK(mlp_backward(&acc, b, mb > 0, mark_layer, &ra) == 0, "%s", rr_last_error());
      if (mb == k - 2) { /* still local: nothing sent, gradients differ across ranks */
        T_OK(rr_ddp_get_stats(da, &after));
        T_CHECK(after.buckets_reduced == before.buckets_reduced, "no_sync sent something");
        int same;
        T_OK(same_on_all(pg, acc.grads, acc.nweights * sizeof(float), &same));
        T_CHECK(!same || w == 1, "under no_sync the accumulated gradients must still be local");
      }
      T_OK(rr_ddp_sync(da));
    }
    mlp_sgd(&acc, 0.1f);
    ready_ctx ru = {.ddp = du};
    T_OK(rr_ddp_forward(du));
    mlp_forward(&uni, x, k * b);
    mlp_loss(&uni, y, k * b, 1.0f / (float)(k * b));
    T_CHECK(mlp_backward(&uni, k * b, 0, mark_layer, &ru) == 0, "%s", rr_last_error());
    T_OK(rr_ddp_sync(du));
    mlp_sgd(&uni, 0.1f);
    double d = max_rel_diff(acc.params, uni.params, acc.nweights);
    if (d > worst) worst = d;
    T_CHECK(d <= 1e-6,
            "step %d: accumulated over %d micro-batches differs from the union by "
            "%.3g (tolerance 1e-6)",
            s, k, d);
  }
  if (rank == 0)
    printf(
        "no_sync: %d steps of %d micro-batches x %d samples x %d ranks: largest difference "
        "from one step on the union %.3g (tolerance 1e-6)\n",
        steps, k, b, w, worst);
  free(x), free(y);
  T_OK(rr_ddp_destroy(da));
  T_OK(rr_ddp_destroy(du));
  mlp_free(&acc), mlp_free(&uni);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * hooks.
 */

static int hooks_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int w = rr_get_world_size(pg);
  enum { N = 5000 };
  const rr_ddp_hook hooks[3] = {RR_DDP_HOOK_FP16, RR_DDP_HOOK_BF16, RR_DDP_HOOK_ALLREDUCE};
  const rr_dtype gdt[2] = {RR_FLOAT32, RR_FLOAT64};
  for (int h = 0; h < 3; h++)
    for (int g = 0; g < 2; g++) {
      rr_dtype d = gdt[g];
      size_t es = rr_dtype_size(d);
      char *data = calloc(N, es), *grad = calloc(N, es), *plain = calloc(N, es);
      rr_ddp_tensor p = {.data = data, .grad = grad, .count = N, .dtype = d, .device = -1};
      rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
      opt.hook = hooks[h];
      rr_ddp *ddp, *ref;
      T_OK(rr_ddp_init(&ddp, pg, &p, 1, NULL, 0, &opt));
      /* The same gradients through the default path, for comparison. */
      rr_ddp_tensor q = {.data = data, .grad = plain, .count = N, .dtype = d, .device = -1};
      T_OK(rr_ddp_init(&ref, pg, &q, 1, NULL, 0, NULL));
      fill_grad(grad, N, d, g_seed + (uint64_t)h, rank, 0);
      fill_grad(plain, N, d, g_seed + (uint64_t)h, rank, 0);
      T_OK(rr_ddp_grad_ready(ddp, 0));
      T_OK(rr_ddp_sync(ddp));
      T_OK(rr_ddp_grad_ready(ref, 0));
      T_OK(rr_ddp_sync(ref));
      rr_ddp_stats s;
      T_OK(rr_ddp_get_stats(ddp, &s));
      size_t wire = hooks[h] == RR_DDP_HOOK_ALLREDUCE ? es : 2;
      T_CHECK(s.bytes_reduced == (double)N * (double)wire,
              "hook %d: %.0f bytes on the wire, want %zu", h, s.bytes_reduced, (size_t)N * wire);
      double eps = hooks[h] == RR_DDP_HOOK_FP16   ? ldexp(1, -10)
                   : hooks[h] == RR_DDP_HOOK_BF16 ? ldexp(1, -7)
                                                  : t_eps(d);
      size_t wrong = 0, differs = 0;
      for (size_t j = 0; j < N; j++) {
        double sum = 0, abs = 0;
        for (int r = 0; r < w; r++) {
          double v = t_value(d, RR_SUM, g_seed + (uint64_t)h, r, j);
          sum += v, abs += fabs(v);
        }
        double ref_v = sum / w, got = t_load(grad, j, d), tol = (w + 3) * eps * abs / w;
        differs += got != t_load(plain, j, d);
        if (!(fabs(got - ref_v) <= tol) && wrong++ < 5)
          fprintf(stderr, "rank %d: hook %d %s element %zu: got %.9g want %.9g (tolerance %.3g)\n",
                  rank, h, rr_dtype_name(d), j, got, ref_v, tol);
      }
      T_CHECK(wrong == 0, "hook %d on %s gradients: %zu elements out of tolerance", h,
              rr_dtype_name(d), wrong);
      /* Compression must show: 16-bit results differ from the float32/64 mean somewhere. */
      if (hooks[h] != RR_DDP_HOOK_ALLREDUCE)
        T_CHECK(differs > N / 4,
                "hook %d: only %zu of %d elements differ from the uncompressed mean", h, differs,
                N);
      int same;
      T_OK(same_on_all(pg, grad, N * es, &same));
      T_CHECK(same, "hook %d: results differ across ranks", h);
      T_OK(rr_ddp_destroy(ddp));
      T_OK(rr_ddp_destroy(ref));
      free(data), free(grad), free(plain);
    }
  if (rank == 0) printf("hooks: fp16, bf16, allreduce within tolerance on %d ranks\n", w);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * missing / twice / no sync.
 */

static int missing_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float data[4][8] = {{0}}, grad[4][8];
  static const char *names[4] = {"a", "b", "c", "d"};
  rr_ddp_tensor p[4];
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 8; j++) grad[i][j] = 1.0f + (float)j;
    p[i] = (rr_ddp_tensor){.name = names[i],
                           .data = data[i],
                           .grad = grad[i],
                           .count = 8,
                           .dtype = RR_FLOAT32,
                           .device = -1};
  }
  rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
  opt.bucket_cap_mb = 32.0 / MIB; /* one bucket per parameter: [3],[2],[1],[0] */
  rr_ddp *ddp;
  /* A gradient marked twice. */
  T_OK(rr_ddp_init(&ddp, pg, p, 4, NULL, 0, &opt));
  T_OK(rr_ddp_grad_ready(ddp, 3));
  int st = rr_ddp_grad_ready(ddp, 3);
  T_CHECK(st == RR_ESTATE &&
              strstr(rr_last_error(), "Expected to mark a variable ready only once") &&
              strstr(rr_last_error(), "index 3 with name 'd'"),
          "twice: %s: %s", rr_status_name(st), rr_last_error());
  for (int i = 2; i >= 0; i--) T_OK(rr_ddp_grad_ready(ddp, i));
  T_OK(rr_ddp_sync(ddp));
  /* Parameters 1 and 3 never marked (as an unused layer would be). */
  T_OK(rr_ddp_forward(ddp));
  T_OK(rr_ddp_grad_ready(ddp, 2));
  T_OK(rr_ddp_grad_ready(ddp, 0));
  st = rr_ddp_sync(ddp);
  char want[160];
  snprintf(want, sizeof want,
           "Parameter indices which did not receive grad for rank %d: 1 (b) 3 (d)", rank);
  T_CHECK(st == RR_ESTATE &&
              strstr(rr_last_error(),
                     "Expected to have finished reduction in the prior iteration "
                     "before starting a new one") &&
              strstr(rr_last_error(), want),
          "missing: %s: %s", rr_status_name(st), rr_last_error());
  /* The state is unusable now: every later call says why. */
  st = rr_ddp_forward(ddp);
  T_CHECK(st == RR_ESTATE && strstr(rr_last_error(), want), "forward after: %s", rr_last_error());
  T_CHECK(rr_ddp_grad_ready(ddp, 0) == RR_ESTATE, "grad_ready after");
  T_CHECK(rr_ddp_destroy(ddp) == RR_ESTATE, "destroy reports the error too");
  /* torch's path: no sync call at all, the next forward finds the unfinished reduction. */
  T_OK(rr_ddp_init(&ddp, pg, p, 4, NULL, 0, &opt));
  T_OK(rr_ddp_grad_ready(ddp, 3));
  st = rr_ddp_forward(ddp);
  snprintf(want, sizeof want, "did not receive grad for rank %d: 0 (a) 1 (b) 2 (c)", rank);
  T_CHECK(st == RR_ESTATE && strstr(rr_last_error(), want), "forward: %s", rr_last_error());
  (void)rr_ddp_destroy(ddp);
  /* Every gradient marked, but rr_ddp_sync forgotten. */
  T_OK(rr_ddp_init(&ddp, pg, p, 4, NULL, 0, &opt));
  for (int i = 3; i >= 0; i--) T_OK(rr_ddp_grad_ready(ddp, i));
  st = rr_ddp_forward(ddp);
  T_CHECK(st == RR_ESTATE && strstr(rr_last_error(), "rr_ddp_sync was not called"), "no sync: %s",
          rr_last_error());
  (void)rr_ddp_destroy(ddp);
  /* The group itself is fine after all this. */
  T_OK(rr_barrier(pg));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * mismatch.
 */

static int mismatch_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float w0[20] = {0}, g0[20], w1[20] = {0}, g1[20], w2[20] = {0}, g2[20];
  double wd[20] = {0}, gd[20];
  rr_ddp_tensor base[2] = {
      {.name = "fc.weight",
       .data = w0,
       .grad = g0,
       .count = 20,
       .dtype = RR_FLOAT32,
       .device = -1,
       .ndim = 2,
       .shape = {5, 4}},
      {.name = "fc.bias", .data = w1, .grad = g1, .count = 5, .dtype = RR_FLOAT32, .device = -1}};
  rr_ddp_tensor p[3];
  rr_ddp *ddp = NULL;
  int st;
  char want[200];

  /* 1. Rank 2 has an extra parameter. */
  memcpy(p, base, sizeof base);
  p[2] = (rr_ddp_tensor){.data = w2, .grad = g2, .count = 3, .dtype = RR_FLOAT32, .device = -1};
  st = rr_ddp_init(&ddp, pg, p, rank == 2 ? 3 : 2, NULL, 0, NULL);
  if (rank == 2)
    snprintf(want, sizeof want,
             "DDP expects same model across all ranks, but Rank 2 has 3 params, "
             "while rank 0 has inconsistent 2 params.");
  else
    snprintf(want, sizeof want,
             "DDP expects same model across all ranks, but Rank %d has 2 params, "
             "while rank 2 has inconsistent 3 params.",
             rank);
  T_CHECK(st == RR_EMISMATCH && !ddp && strstr(rr_last_error(), want), "count: %s: %s",
          rr_status_name(st), rr_last_error());

  /* 2. Rank 1's weight is [4, 5] where the others have [5, 4]. */
  memcpy(p, base, sizeof base);
  if (rank == 1) p[0].shape[0] = 4, p[0].shape[1] = 5;
  st = rr_ddp_init(&ddp, pg, p, 2, NULL, 0, NULL);
  T_CHECK(st == RR_EMISMATCH && strstr(rr_last_error(),
                                       "rank 1's params[0] 'fc.weight' has shape "
                                       "[4, 5], dtype float, trainable, while "
                                       "rank 0's has shape [5, 4], dtype float"),
          "shape: %s: %s", rr_status_name(st), rr_last_error());

  /* 3. Rank 2's bias is double. */
  memcpy(p, base, sizeof base);
  if (rank == 2) p[1].data = wd, p[1].grad = gd, p[1].dtype = RR_FLOAT64;
  st = rr_ddp_init(&ddp, pg, p, 2, NULL, 0, NULL);
  T_CHECK(st == RR_EMISMATCH && strstr(rr_last_error(),
                                       "rank 2's params[1] 'fc.bias' has shape [5], "
                                       "dtype double"),
          "dtype: %s: %s", rr_status_name(st), rr_last_error());

  /* 4. Rank 1 froze the bias. */
  memcpy(p, base, sizeof base);
  if (rank == 1) p[1].grad = NULL;
  st = rr_ddp_init(&ddp, pg, p, 2, NULL, 0, NULL);
  T_CHECK(st == RR_EMISMATCH && strstr(rr_last_error(), "rank 1's params[1] 'fc.bias'") &&
              strstr(rr_last_error(), "frozen"),
          "frozen: %s", rr_last_error());

  /* 5. Rank 0 describes a tensor wrongly (shape holds 20, count says 19): it fails locally,
   * the others learn why instead of waiting. */
  memcpy(p, base, sizeof base);
  if (rank == 0) p[0].count = 19;
  st = rr_ddp_init(&ddp, pg, p, 2, NULL, 0, NULL);
  T_CHECK(st == RR_EINVAL &&
              strstr(rr_last_error(), "shape [5, 4] holds 20 elements, count is 19") &&
              (rank == 0 || strstr(rr_last_error(), "rank 0 failed")),
          "local: %s", rr_last_error());

  /* 6. Buffers counted too. */
  int64_t bufv = 0;
  rr_ddp_tensor b = {.data = &bufv, .count = 1, .dtype = RR_INT64, .device = -1};
  memcpy(p, base, sizeof base);
  st = rr_ddp_init(&ddp, pg, p, 2, &b, rank == 0 ? 1 : 0, NULL);
  T_CHECK(st == RR_EMISMATCH && strstr(rr_last_error(), "buffers"), "buffers: %s", rr_last_error());

  /* The group survives all of it: the same models now work. */
  memcpy(p, base, sizeof base);
  T_OK(rr_ddp_init(&ddp, pg, p, 2, NULL, 0, NULL));
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * checkpoint.
 */

typedef struct ckpt_arg {
  char dir[256];
} ckpt_arg;

static int checkpoint_rank(int rank, void *arg) {
  const ckpt_arg *a = arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  enum { NW = 300, NB = 7 };
  float w[NW], gw[NW];
  double bias[NB], gb[NB];
  int64_t steps[2];
  rr_ddp_tensor p[2] = {
      {.name = "w",
       .data = w,
       .grad = gw,
       .count = NW,
       .dtype = RR_FLOAT32,
       .device = -1,
       .ndim = 2,
       .shape = {30, 10}},
      {.name = "b", .data = bias, .grad = gb, .count = NB, .dtype = RR_FLOAT64, .device = -1}};
  rr_ddp_tensor buf = {.name = "steps", .data = steps, .count = 2, .dtype = RR_INT64, .device = -1};
  rr_ddp *ddp;
  T_OK(rr_ddp_init(&ddp, pg, p, 2, &buf, 1, NULL));
  /* Trained state: the same on every rank. */
  t_fill(w, NW, RR_FLOAT32, RR_SUM, g_seed, 0, 0);
  t_fill(bias, NB, RR_FLOAT64, RR_SUM, g_seed, 0, 1000);
  steps[0] = 1234, steps[1] = -5;
  float w_saved[NW];
  double b_saved[NB];
  memcpy(w_saved, w, sizeof w);
  memcpy(b_saved, bias, sizeof bias);
  char path[320];
  snprintf(path, sizeof path, "%s/model.ckpt", a->dir);
  T_OK(rr_ddp_save(ddp, path));
  struct stat sb;
  T_CHECK(stat(path, &sb) == 0 && sb.st_size > (off_t)sizeof w, "the checkpoint exists after save");
  /* Every rank drifts differently; loading brings back rank 0's file everywhere. */
  t_fill(w, NW, RR_FLOAT32, RR_SUM, g_seed + 1, rank, 0);
  t_fill(bias, NB, RR_FLOAT64, RR_SUM, g_seed + 1, rank, 0);
  steps[0] = rank;
  T_OK(rr_ddp_load(ddp, path));
  T_CHECK(memcmp(w, w_saved, sizeof w) == 0 && memcmp(bias, b_saved, sizeof bias) == 0 &&
              steps[0] == 1234 && steps[1] == -5,
          "load restores the saved values bit for bit");
  /* A different model cannot load it. */
  float w2[NW], gw2[NW];
  rr_ddp_tensor q[2] = {p[0], p[1]};
  q[0].data = w2, q[0].grad = gw2, q[0].shape[0] = 10, q[0].shape[1] = 30;
  rr_ddp *other;
  T_OK(rr_ddp_init(&other, pg, q, 2, &buf, 1, NULL));
  int st = rr_ddp_load(other, path);
  T_CHECK(st == RR_EMISMATCH && strstr(rr_last_error(),
                                       "its params[0] is 'w' [30, 10] float, the "
                                       "model's is 'w' [10, 30] float"),
          "other model: %s: %s", rr_status_name(st), rr_last_error());
  T_OK(rr_ddp_destroy(other));
  /* A corrupt file (one byte flipped by rank 0) is refused on every rank. */
  T_OK(rr_barrier(pg));
  if (rank == 0) {
    FILE *fp = fopen(path, "r+b");
    T_CHECK(fp && fseek(fp, 100, SEEK_SET) == 0, "open %s", path);
    int c = fgetc(fp);
    T_CHECK(fseek(fp, 100, SEEK_SET) == 0 && fputc(c ^ 0x40, fp) != EOF && fclose(fp) == 0, "flip");
  }
  T_OK(rr_barrier(pg));
  st = rr_ddp_load(ddp, path);
  T_CHECK(st == RR_EPROTO && strstr(rr_last_error(), "checksum"), "corrupt: %s: %s",
          rr_status_name(st), rr_last_error());
  /* An unwritable place: rank 0 fails to write, every rank hears it. */
  st = rr_ddp_save(ddp, "/nonexistent-dir-rr/x.ckpt");
  T_CHECK(st == RR_ESYS && strstr(rr_last_error(), "nonexistent-dir-rr"), "unwritable: %s: %s",
          rr_status_name(st), rr_last_error());
  /* A missing file. */
  st = rr_ddp_load(ddp, "/nonexistent-dir-rr/x.ckpt");
  T_CHECK(st == RR_ESYS, "missing file: %s", rr_last_error());
  /* The wrapper still works after failed file operations. */
  T_OK(rr_ddp_save(ddp, path));
  T_OK(rr_ddp_load(ddp, path));
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * broadcast.
 */

static int broadcast_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  enum { NA = 257, NBF = 33 };
  float a[NA], ga[NA];
  uint16_t h[NA];
  double bn[NBF];
  int32_t cnt[3];
  t_fill(a, NA, RR_FLOAT32, RR_SUM, g_seed, rank, 0);
  t_fill(h, NA, RR_BFLOAT16, RR_SUM, g_seed, rank, 0);
  t_fill(bn, NBF, RR_FLOAT64, RR_SUM, g_seed, rank, 0);
  cnt[0] = cnt[1] = cnt[2] = 100 + rank;
  rr_ddp_tensor p[2] = {{.data = a, .grad = ga, .count = NA, .dtype = RR_FLOAT32, .device = -1},
                        {.data = h, .count = NA, .dtype = RR_BFLOAT16, .device = -1}};
  rr_ddp_tensor b[2] = {{.data = bn, .count = NBF, .dtype = RR_FLOAT64, .device = -1},
                        {.data = cnt, .count = 3, .dtype = RR_INT32, .device = -1}};
  rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
  opt.broadcast_bucket_mb = 100.0 / MIB; /* 100-byte chunks: tensors span several */
  rr_ddp *ddp;
  T_OK(rr_ddp_init(&ddp, pg, p, 2, b, 2, &opt));
  T_CHECK(t_check_copied(a, NA, RR_FLOAT32, RR_SUM, g_seed, 0, 0, "param a") == 0 &&
              t_check_copied(h, NA, RR_BFLOAT16, RR_SUM, g_seed, 0, 0, "frozen param h") == 0 &&
              t_check_copied(bn, NBF, RR_FLOAT64, RR_SUM, g_seed, 0, 0, "buffer bn") == 0 &&
              cnt[0] == 100 && cnt[2] == 100,
          "construction copies rank 0's parameters and buffers");
  /* Buffers drift (as running statistics do); the next forward copies rank 0's again. */
  t_fill(bn, NBF, RR_FLOAT64, RR_SUM, g_seed + 5, rank, 0);
  cnt[1] = 200 + rank;
  t_fill(a, NA, RR_FLOAT32, RR_SUM, g_seed + 5, rank, 0); /* parameters are never re-broadcast */
  T_OK(rr_ddp_forward(ddp));
  T_CHECK(
      t_check_copied(bn, NBF, RR_FLOAT64, RR_SUM, g_seed + 5, 0, 0, "buffer after forward") == 0 &&
          cnt[1] == 200,
      "forward broadcasts buffers");
  T_CHECK(t_check_copied(a, NA, RR_FLOAT32, RR_SUM, g_seed + 5, rank, 0, "param") == 0,
          "forward leaves parameters alone");
  /* torch's rule: a forward under no_sync turns off the broadcast of the next forward. */
  T_OK(rr_ddp_no_sync(ddp, 1));
  cnt[1] = 300 + rank;
  T_OK(rr_ddp_forward(ddp)); /* previous forward was synchronised: broadcasts */
  T_CHECK(cnt[1] == 300, "forward after a synchronised one broadcasts (got %d)", cnt[1]);
  T_OK(rr_ddp_no_sync(ddp, 0));
  cnt[1] = 400 + rank;
  T_OK(rr_ddp_forward(ddp)); /* previous forward was under no_sync: no broadcast */
  T_CHECK(cnt[1] == 400 + rank, "forward after a no_sync one does not broadcast (got %d)", cnt[1]);
  T_OK(rr_ddp_forward(ddp));
  T_CHECK(cnt[1] == 400, "and the one after broadcasts again (got %d)", cnt[1]);
  /* Explicit call. */
  cnt[2] = 500 + rank;
  T_OK(rr_ddp_broadcast_buffers(ddp));
  T_CHECK(cnt[2] == 500, "rr_ddp_broadcast_buffers");
  T_OK(rr_ddp_destroy(ddp));
  /* broadcast_buffers off: forward leaves them. */
  opt.broadcast_buffers = 0;
  T_OK(rr_ddp_init(&ddp, pg, p, 2, b, 2, &opt));
  cnt[0] = 600 + rank;
  T_OK(rr_ddp_forward(ddp));
  T_CHECK(cnt[0] == 600 + rank, "broadcast_buffers = 0: buffers stay local");
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * cuda, args.
 */

/* A device tensor where this build or machine cannot have one fails with an error that says
 * which (no CUDA in the build; no device visible); on a GPU machine, memory that does not
 * match its `device` is refused. Rank 1 alone describes a bad tensor in the second round:
 * rank 0 fails too, naming rank 1 and the cause. The host path keeps working afterwards. */
static int expect_cuda_refusal(int st, const char *tensor, int device, const char *who) {
  char want[160];
  if (!rr__cuda_built()) {
    snprintf(want, sizeof want, "%s is on CUDA device %d but this library was built without CUDA",
             tensor, device);
    T_CHECK(st == RR_ENOTSUP && strstr(rr_last_error(), want), "%s (no CUDA build): %s: %s", who,
            rr_status_name(st), rr_last_error());
  } else if (!rr__cuda_available()) {
    snprintf(want, sizeof want, "%s is on CUDA device %d but no CUDA device is visible", tensor,
             device);
    T_CHECK(st == RR_ENOTSUP && strstr(rr_last_error(), want), "%s (no device): %s: %s", who,
            rr_status_name(st), rr_last_error());
  } else if (device >= rr__cuda_device_count()) {
    snprintf(want, sizeof want, "%s is on CUDA device %d but only %d CUDA device", tensor, device,
             rr__cuda_device_count());
    T_CHECK(st == RR_EINVAL && strstr(rr_last_error(), want), "%s (device number): %s: %s", who,
            rr_status_name(st), rr_last_error());
  } else { /* a GPU: the memory below is host memory, described as device memory */
    snprintf(want, sizeof want, "%s: device is %d but its data is host memory", tensor, device);
    T_CHECK(st == RR_EINVAL && strstr(rr_last_error(), want), "%s (host memory): %s: %s", who,
            rr_status_name(st), rr_last_error());
  }
  printf("rank %d, %s: %s: %s\n", t_rank, who, rr_status_name(st), rr_last_error());
  return 0;
}

static int cuda_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float w[4] = {0}, g[4] = {0};
  int64_t steps = 0;
  rr_ddp_tensor p = {
      .name = "w", .data = w, .grad = g, .count = 4, .dtype = RR_FLOAT32, .device = 0};
  rr_ddp_tensor b = {.name = "steps", .data = &steps, .count = 1, .dtype = RR_INT64, .device = -1};
  rr_ddp *ddp = NULL;
  /* Every rank: a parameter on device 0. */
  int st = rr_ddp_init(&ddp, pg, &p, 1, NULL, 0, NULL);
  T_CHECK(!ddp && strstr(rr_last_error(), "rr_ddp_init"), "no wrapper, and the call named: %s",
          rr_last_error());
  if (expect_cuda_refusal(st, "params[0] 'w'", 0, "param on device 0")) return 1;
  /* Rank 1 only: a buffer on device 1000. Rank 0 hears why. */
  p.device = -1;
  b.device = rank == 1 ? 1000 : -1;
  st = rr_ddp_init(&ddp, pg, &p, 1, &b, 1, NULL);
  if (expect_cuda_refusal(st, "buffers[0] 'steps'", 1000, "buffer on device 1000")) return 1;
  T_CHECK(rank == 1 || strstr(rr_last_error(), "rank 1 failed"), "rank 0 names rank 1: %s",
          rr_last_error());
  /* The group and the host path are fine. */
  b.device = -1;
  T_OK(rr_ddp_init(&ddp, pg, &p, 1, &b, 1, NULL));
  T_OK(rr_ddp_destroy(ddp));
  if (rank == 0)
    printf("cuda: device tensors refused: %s\n",
           !rr__cuda_built()       ? "no CUDA in this build"
           : !rr__cuda_available() ? "no CUDA device visible"
                                   : "host memory described as device memory");
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

static int args_rank(int rank, void *arg) {
  (void)arg, (void)rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float w[4] = {0}, g[4] = {0};
  int32_t iw[4] = {0}, ig[4] = {0};
  rr_ddp_tensor p = {.data = w, .grad = g, .count = 4, .dtype = RR_FLOAT32, .device = -1};
  rr_ddp *ddp = NULL;
  T_CHECK(rr_ddp_init(&ddp, NULL, &p, 1, NULL, 0, NULL) == RR_EINVAL, "NULL group");
  T_CHECK(rr_ddp_init(NULL, pg, &p, 1, NULL, 0, NULL) == RR_EINVAL, "NULL out");
  T_CHECK(rr_ddp_init(&ddp, pg, NULL, 1, NULL, 0, NULL) == RR_EINVAL, "NULL params");
  rr_ddp_tensor ip = {.data = iw, .grad = ig, .count = 4, .dtype = RR_INT32, .device = -1};
  T_CHECK(rr_ddp_init(&ddp, pg, &ip, 1, NULL, 0, NULL) == RR_EINVAL &&
              strstr(rr_last_error(), "only floating point parameters can have gradients"),
          "int grad: %s", rr_last_error());
  rr_ddp_tensor nd = p;
  nd.data = NULL;
  T_CHECK(rr_ddp_init(&ddp, pg, &nd, 1, NULL, 0, NULL) == RR_EINVAL, "NULL data");
  rr_ddp_tensor bg = {.data = w, .grad = g, .count = 4, .dtype = RR_FLOAT32, .device = -1};
  T_CHECK(rr_ddp_init(&ddp, pg, &p, 1, &bg, 1, NULL) == RR_EINVAL &&
              strstr(rr_last_error(), "a buffer has no gradient"),
          "buffer with grad: %s", rr_last_error());
  rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
  opt.bucket_cap_mb = -1;
  T_CHECK(rr_ddp_init(&ddp, pg, &p, 1, NULL, 0, &opt) == RR_EINVAL, "negative cap");
  T_OK(rr_ddp_init(&ddp, pg, &p, 1, NULL, 0, NULL));
  T_CHECK(rr_ddp_grad_ready(ddp, 1) == RR_EINVAL && strstr(rr_last_error(), "out of 0..0"),
          "index: %s", rr_last_error());
  T_CHECK(rr_ddp_grad_ready(ddp, -1) == RR_EINVAL, "negative index");
  T_CHECK(rr_ddp_sync(ddp) == RR_ESTATE && strstr(rr_last_error(), "no gradient was marked"),
          "sync with nothing marked: %s", rr_last_error());
  T_OK(rr_ddp_grad_ready(ddp, 0));
  T_CHECK(rr_ddp_no_sync(ddp, 1) == RR_ESTATE, "no_sync during a backward");
  T_CHECK(rr_ddp_save(ddp, "/tmp/x") == RR_ESTATE, "save during a backward");
  T_OK(rr_ddp_sync(ddp));
  rr_ddp_bucket_info info;
  T_CHECK(rr_ddp_get_bucket(ddp, 1, &info) == RR_EINVAL, "bucket out of range");
  T_CHECK(rr_ddp_get_bucket(ddp, 0, &info) == RR_OK && info.count == 4 &&
              info.limit_bytes == 1024 * 1024 && info.device == -1,
          "bucket 0 info");
  T_OK(rr_ddp_destroy(ddp));
  T_CHECK(rr_ddp_destroy(NULL) == RR_OK, "destroy NULL");
  T_CHECK(rr_ddp_grad_ready(NULL, 0) == RR_EINVAL, "NULL ddp");
  /* Frozen parameters cannot be marked; a model with no trainable parameter syncs trivially. */
  rr_ddp_tensor fz = {.data = w, .count = 4, .dtype = RR_FLOAT32, .device = -1};
  T_OK(rr_ddp_init(&ddp, pg, &fz, 1, NULL, 0, NULL));
  T_CHECK(rr_ddp_grad_ready(ddp, 0) == RR_EINVAL && strstr(rr_last_error(), "frozen"), "frozen");
  T_OK(rr_ddp_sync(ddp));
  T_CHECK(rr_ddp_num_buckets(ddp) == 0, "no buckets");
  T_OK(rr_ddp_destroy(ddp));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * gpu: the device path against the host path. Needs a GPU; skips (77) without one.
 *
 * Each rank builds the mixed model of `grads` twice, once in host memory and once in device
 * memory (same values), wraps each in its own rr_ddp, and runs both through the same steps
 * for every hook (none, allreduce, fp16, bf16), with the group's stream left at the legacy
 * default and with a user stream on which the gradients are still being written when they
 * are marked ready. The tolerance between the two paths is zero: the device kernels compute
 * the host loops' bits (cuda/ddp_elem.cuh, tests/test_ddp_elem.c) and the all-reduce of a
 * device bucket is the host one on a staged copy, so every averaged gradient, broadcast
 * parameter and buffer, and the checkpoint file must be bit-identical to the host path's
 * (which ddp.grads / ddp.hooks check against the float64 mean), and identical on all ranks.
 */

#ifdef RR_HAVE_CUDA
#include "tests/cuda_harness.h"

/* 1 when count elements of device memory equal the host ones bit for bit; else prints the
 * first difference (or the CUDA error) and returns 0. */
static int dev_equals(const void *dev, const void *host, size_t count, rr_dtype d,
                      const char *what) {
  size_t es = rr_dtype_size(d), bytes = count * es;
  char *h = malloc(bytes + 1);
  cudaError_t e = h ? cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost) : cudaErrorMemoryAllocation;
  if (e != cudaSuccess) {
    fprintf(stderr, "rank %d: %s: reading device memory: %s\n", t_rank, what,
            cudaGetErrorString(e));
    free(h);
    return 0;
  }
  int same = memcmp(h, host, bytes) == 0;
  if (!same) {
    size_t i = 0;
    while (memcmp(h + i * es, (const char *)host + i * es, es) == 0) i++;
    fprintf(stderr, "rank %d: %s: element %zu is %.9g on the device path, %.9g on the host path\n",
            t_rank, what, i, t_load(h, i, d), t_load(host, i, d));
  }
  free(h);
  return same;
}

static int gpu_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int w = rr_get_world_size(pg), dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev)); /* one GPU: every rank on device 0 */
  C_OK(cudaSetDevice(dev));
  cudaStream_t user;
  C_OK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  const size_t slow_bytes = 64u << 20; /* copies that keep the user stream busy */
  char *slow_a, *slow_b;
  C_OK(cudaMalloc((void **)&slow_a, slow_bytes));
  C_OK(cudaMalloc((void **)&slow_b, slow_bytes));
  void *hdata[NP_GRADS], *hgrad[NP_GRADS], *ddata[NP_GRADS], *dgrad[NP_GRADS];
  rr_ddp_tensor hp[NP_GRADS], dp[NP_GRADS];
  for (int i = 0; i < NP_GRADS; i++) {
    size_t bytes = g_counts[i] * rr_dtype_size(g_dtypes[i]);
    int frozen = g_dtypes[i] == RR_INT32;
    hdata[i] = calloc(1, bytes), hgrad[i] = frozen ? NULL : calloc(1, bytes);
    C_OK(cudaMalloc(&ddata[i], bytes));
    dgrad[i] = NULL;
    if (!frozen) C_OK(cudaMalloc(&dgrad[i], bytes));
    hp[i] = (rr_ddp_tensor){.data = hdata[i], .grad = hgrad[i], .count = g_counts[i],
                            .dtype = g_dtypes[i], .device = -1};
    dp[i] = hp[i];
    dp[i].data = ddata[i], dp[i].grad = dgrad[i], dp[i].device = dev;
  }
  /* Buffers: a float32 running statistic and an int64 counter. */
  enum { NB = 50 };
  float hstat[NB];
  int64_t hcount[2];
  void *dstat, *dcount;
  C_OK(cudaMalloc(&dstat, sizeof hstat));
  C_OK(cudaMalloc(&dcount, sizeof hcount));
  rr_ddp_tensor hb[2] = {{.name = "stat", .data = hstat, .count = NB, .dtype = RR_FLOAT32,
                          .device = -1},
                         {.name = "count", .data = hcount, .count = 2, .dtype = RR_INT64,
                          .device = -1}};
  rr_ddp_tensor db[2] = {hb[0], hb[1]};
  db[0].data = dstat, db[0].device = dev;
  db[1].data = dcount, db[1].device = dev;
  const rr_ddp_hook hooks[4] = {RR_DDP_HOOK_NONE, RR_DDP_HOOK_ALLREDUCE, RR_DDP_HOOK_FP16,
                                RR_DDP_HOOK_BF16};
  char ckpt_h[64], ckpt_d[64];
  snprintf(ckpt_h, sizeof ckpt_h, "/tmp/rr_ddp_gpu.%d.host.ckpt", (int)getppid());
  snprintf(ckpt_d, sizeof ckpt_d, "/tmp/rr_ddp_gpu.%d.dev.ckpt", (int)getppid());
  int cases = 0;
  for (int h = 0; h < 4; h++)
    for (int use_stream = 0; use_stream < 2; use_stream++) {
      cudaStream_t s = use_stream ? user : NULL;
      T_OK(rr_pg_set_cuda_stream(pg, s));
      uint64_t seed = g_seed + (uint64_t)(h * 2 + use_stream) * 7919;
      /* Different values on every rank: construction must make them rank 0's. */
      for (int i = 0; i < NP_GRADS; i++) {
        t_fill(hdata[i], g_counts[i], g_dtypes[i], RR_SUM, seed, rank, (size_t)i * 1000);
        C_OK(cudaMemcpy(ddata[i], hdata[i], g_counts[i] * rr_dtype_size(g_dtypes[i]),
                        cudaMemcpyHostToDevice));
      }
      t_fill(hstat, NB, RR_FLOAT32, RR_SUM, seed, rank, 7);
      hcount[0] = hcount[1] = 10 + rank;
      C_OK(cudaMemcpy(dstat, hstat, sizeof hstat, cudaMemcpyHostToDevice));
      C_OK(cudaMemcpy(dcount, hcount, sizeof hcount, cudaMemcpyHostToDevice));
      rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
      opt.bucket_cap_mb = 1000.0 / MIB; /* ~1000 bytes: many buckets */
      opt.broadcast_bucket_mb = 300.0 / MIB; /* chunks smaller than some tensors */
      opt.hook = hooks[h];
      rr_ddp *hd, *dd;
      T_OK(rr_ddp_init(&hd, pg, hp, NP_GRADS, hb, 2, &opt));
      T_OK(rr_ddp_init(&dd, pg, dp, NP_GRADS, db, 2, &opt));
      T_CHECK(rr_ddp_num_buckets(dd) == rr_ddp_num_buckets(hd) && rr_ddp_num_buckets(dd) >= 6,
              "%d device buckets, %d host", rr_ddp_num_buckets(dd), rr_ddp_num_buckets(hd));
      rr_ddp_bucket_info bi;
      T_OK(rr_ddp_get_bucket(dd, 0, &bi));
      T_CHECK(bi.device == dev, "device bucket 0 is on device %d", bi.device);
      for (int i = 0; i < NP_GRADS; i++)
        T_CHECK(dev_equals(ddata[i], hdata[i], g_counts[i], g_dtypes[i], "broadcast parameter") &&
                    t_check_copied(hdata[i], g_counts[i], g_dtypes[i], RR_SUM, seed, 0,
                                   (size_t)i * 1000, "rank 0's parameter") == 0,
                "hook %d stream %d: parameter %d after construction", h, use_stream, i);
      T_CHECK(dev_equals(dstat, hstat, NB, RR_FLOAT32, "broadcast buffer") && hcount[0] == 10 &&
                  dev_equals(dcount, hcount, 2, RR_INT64, "broadcast counter"),
              "buffers after construction");
      for (int it = 0; it < 3; it++) { /* the second one runs on rebuilt buckets */
        /* Buffers drift on each rank; forward copies rank 0's (both paths). */
        t_fill(hstat, NB, RR_FLOAT32, RR_SUM, seed + (uint64_t)it + 1, rank, 7);
        C_OK(cudaMemcpy(dstat, hstat, sizeof hstat, cudaMemcpyHostToDevice));
        T_OK(rr_ddp_forward(hd));
        T_OK(rr_ddp_forward(dd));
        T_CHECK(dev_equals(dstat, hstat, NB, RR_FLOAT32, "buffer after forward") &&
                    t_check_copied(hstat, NB, RR_FLOAT32, RR_SUM, seed + (uint64_t)it + 1, 0, 7,
                                   "rank 0's buffer") == 0,
                "hook %d stream %d iteration %d: buffers after forward", h, use_stream, it);
        uint64_t gs = seed + 1000 + (uint64_t)it;
        int ord[NP_GRADS];
        shuffle(ord, NP_GRADS, gs, 100 + (uint64_t)rank);
        /* Host path: a whole backward, then the device path's (one wrapper at a time, so the
         * ranks' collectives stay in the same order). */
        for (int i = 0; i < NP_GRADS; i++)
          if (hgrad[i]) fill_grad(hgrad[i], g_counts[i], g_dtypes[i], gs, rank, (size_t)i * 1000);
        for (int k = 0; k < NP_GRADS; k++)
          if (hgrad[ord[k]]) T_OK(rr_ddp_grad_ready(hd, ord[k]));
        /* The host gradients are about to be overwritten by the average: keep the inputs,
         * in pinned memory so that the copies below are truly asynchronous. */
        void *in[NP_GRADS];
        for (int i = 0; i < NP_GRADS; i++) {
          in[i] = NULL;
          if (!hgrad[i]) continue;
          C_OK(cudaMallocHost(&in[i], g_counts[i] * rr_dtype_size(g_dtypes[i])));
          fill_grad(in[i], g_counts[i], g_dtypes[i], gs, rank, (size_t)i * 1000);
        }
        T_OK(rr_ddp_sync(hd));
        for (int k = 0; k < NP_GRADS; k++) {
          int i = ord[k];
          if (!dgrad[i]) continue;
          size_t bytes = g_counts[i] * rr_dtype_size(g_dtypes[i]);
          if (use_stream) {
            /* Still being written on the user stream when marked ready: garbage first, a
             * stretch of other work, then the real gradient. Only a copy-in ordered on the
             * group's stream (this one) sees the real one. */
            C_OK(cudaMemsetAsync(dgrad[i], 0xff, bytes, s));
            for (int q = 0; k == 0 && q < 4; q++)
              C_OK(cudaMemcpyAsync(slow_b, slow_a, slow_bytes, cudaMemcpyDefault, s));
            C_OK(cudaMemcpyAsync(dgrad[i], in[i], bytes, cudaMemcpyHostToDevice, s));
          } else {
            C_OK(cudaMemcpy(dgrad[i], in[i], bytes, cudaMemcpyHostToDevice));
          }
          T_OK(rr_ddp_grad_ready(dd, i));
        }
        T_OK(rr_ddp_sync(dd));
        for (int i = 0; i < NP_GRADS; i++) {
          if (in[i]) C_OK(cudaFreeHost(in[i])); /* rr_ddp_sync waited for the stream */
          if (!dgrad[i]) continue;
          char what[96];
          snprintf(what, sizeof what, "hook %d stream %d iteration %d param %d (%s)", h,
                   use_stream, it, i, rr_dtype_name(g_dtypes[i]));
          T_CHECK(dev_equals(dgrad[i], hgrad[i], g_counts[i], g_dtypes[i], what),
                  "%s: the device path's average differs from the host path's", what);
          int same;
          T_OK(same_on_all(pg, hgrad[i], g_counts[i] * rr_dtype_size(g_dtypes[i]), &same));
          T_CHECK(same, "%s: differs across ranks", what);
          cases++;
        }
      }
      rr_ddp_stats hs, ds;
      T_OK(rr_ddp_get_stats(hd, &hs));
      T_OK(rr_ddp_get_stats(dd, &ds));
      T_CHECK(ds.syncs == 3 && ds.rebuilt && ds.bytes_reduced == hs.bytes_reduced,
              "stats: %lld syncs, rebuilt %d, %.0f bytes (host path %.0f)", (long long)ds.syncs,
              ds.rebuilt, ds.bytes_reduced, hs.bytes_reduced);
      /* no_sync: nothing moves, device gradients stay as they are. */
      T_OK(rr_ddp_no_sync(dd, 1));
      T_OK(rr_ddp_forward(dd));
      for (int i = 0; i < NP_GRADS; i++)
        if (dgrad[i]) T_OK(rr_ddp_grad_ready(dd, i));
      T_OK(rr_ddp_sync(dd));
      for (int i = 0; i < NP_GRADS; i++)
        if (dgrad[i])
          T_CHECK(dev_equals(dgrad[i], hgrad[i], g_counts[i], g_dtypes[i], "no_sync"),
                  "no_sync changed device gradient %d", i);
      T_OK(rr_ddp_no_sync(dd, 0));
      /* Checkpoints: the device model's file is the host model's, byte for byte; loading it
       * into scrambled device parameters restores them on every rank. */
      if (h == 0 && use_stream == 0) {
        T_OK(rr_ddp_save(hd, ckpt_h));
        T_OK(rr_ddp_save(dd, ckpt_d));
        if (rank == 0) {
          FILE *a = fopen(ckpt_h, "rb"), *b = fopen(ckpt_d, "rb");
          T_CHECK(a && b, "checkpoints written");
          int ca, cb, differ = 0;
          long at = 0;
          do {
            ca = fgetc(a), cb = fgetc(b);
            differ = ca != cb;
            at++;
          } while (!differ && ca != EOF);
          fclose(a), fclose(b);
          T_CHECK(!differ, "the device model's checkpoint differs from the host model's at "
                  "byte %ld", at - 1);
        }
        for (int i = 0; i < NP_GRADS; i++)
          C_OK(cudaMemset(ddata[i], 0x3c + rank, g_counts[i] * rr_dtype_size(g_dtypes[i])));
        C_OK(cudaMemset(dcount, 0, sizeof hcount));
        T_OK(rr_ddp_load(dd, ckpt_d));
        for (int i = 0; i < NP_GRADS; i++)
          T_CHECK(dev_equals(ddata[i], hdata[i], g_counts[i], g_dtypes[i], "loaded parameter"),
                  "parameter %d after rr_ddp_load", i);
        T_CHECK(dev_equals(dcount, hcount, 2, RR_INT64, "loaded buffer"), "buffer after load");
        T_OK(rr_barrier(pg));
        if (rank == 0) unlink(ckpt_h), unlink(ckpt_d);
      }
      T_OK(rr_ddp_destroy(dd));
      T_OK(rr_ddp_destroy(hd));
    }
  T_OK(rr_pg_set_cuda_stream(pg, NULL));
  for (int i = 0; i < NP_GRADS; i++) {
    free(hdata[i]), free(hgrad[i]);
    C_OK(cudaFree(ddata[i]));
    if (dgrad[i]) C_OK(cudaFree(dgrad[i]));
  }
  C_OK(cudaFree(dstat));
  C_OK(cudaFree(dcount));
  C_OK(cudaFree(slow_a));
  C_OK(cudaFree(slow_b));
  C_OK(cudaStreamDestroy(user));
  if (rank == 0)
    printf("gpu: %d averaged gradients on device %d bit-identical to the host path on %d ranks "
           "(hooks none/allreduce/fp16/bf16, legacy and user stream), broadcasts, no_sync and "
           "checkpoints too\n",
           cases, dev, w);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}
#endif /* RR_HAVE_CUDA */

static int sec_gpu(int w) {
#ifndef RR_HAVE_CUDA
  (void)w;
  printf("skipped: no CUDA device (this build has no CUDA: configure with -DRR_CUDA=ON)\n");
  return 77;
#else
  if (!have_device_forked()) {
    printf("skipped: no CUDA device (the CUDA runtime found no usable driver or GPU)\n");
    return 77;
  }
  return run_ranks(w, gpu_rank, NULL, 300);
#endif
}

/* ---------------------------------------------------------------------------------------------
 */

int main(int argc, char **argv) {
  g_seed = t_seed();
  const char *sec = argc > 1 ? argv[1] : "";
  int w = argc > 2 ? atoi(argv[2]) : 2;
  if (w < 1 || w > 16) w = 2;
  char name[64];
  snprintf(name, sizeof name, "ddp.%s", sec);
  t_seed_announce(name);
  if (!strcmp(sec, "buckets")) return sec_buckets();
  if (!strcmp(sec, "grads")) return run_ranks(w, grads_rank, NULL, 60);
  if (!strcmp(sec, "order")) return run_ranks(2, order_rank, NULL, 60);
  if (!strcmp(sec, "equiv")) {
    mlp_case c = {.steps = 12, .local = 8, .cap_mb = 2000.0 / MIB, .tol = 1e-6};
    return run_ranks(w, equiv_rank, &c, 60);
  }
  if (!strcmp(sec, "identical")) {
    mlp_case c = {
        .steps = 20, .local = 6, .cap_mb = 2000.0 / MIB, .hook = RR_DDP_HOOK_FP16, .tol = 1e-3};
    return run_ranks(3, equiv_rank, &c, 60);
  }
  if (!strcmp(sec, "nosync")) return run_ranks(w, nosync_rank, NULL, 60);
  if (!strcmp(sec, "hooks")) return run_ranks(w, hooks_rank, NULL, 60);
  if (!strcmp(sec, "missing")) return run_ranks(2, missing_rank, NULL, 60);
  if (!strcmp(sec, "mismatch")) return run_ranks(3, mismatch_rank, NULL, 60);
  if (!strcmp(sec, "checkpoint")) {
    ckpt_arg a;
    snprintf(a.dir, sizeof a.dir, "/tmp/rr_ddp_ckpt.XXXXXX");
    if (!mkdtemp(a.dir)) {
      perror("mkdtemp");
      return 1;
    }
    int rc = run_ranks(3, checkpoint_rank, &a, 60);
    char path[320];
    snprintf(path, sizeof path, "%s/model.ckpt", a.dir);
    unlink(path);
    rmdir(a.dir);
    return rc;
  }
  if (!strcmp(sec, "broadcast")) return run_ranks(3, broadcast_rank, NULL, 60);
  if (!strcmp(sec, "cuda")) return run_ranks(2, cuda_rank, NULL, 60);
  if (!strcmp(sec, "args")) return run_ranks(1, args_rank, NULL, 60);
  if (!strcmp(sec, "gpu")) return sec_gpu(w);
  fprintf(stderr,
          "usage: %s buckets | grads W | order | equiv W | identical | nosync W | hooks W | "
          "missing | mismatch | checkpoint | broadcast | cuda | args | gpu W\n",
          argv[0]);
  return 2;
}
