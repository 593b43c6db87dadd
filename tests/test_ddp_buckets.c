/* test_ddp: bucket assignment (torch's rules, pure) and the launch order of buckets in a live
 * group, with the rebuild after the first iteration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_ddp.h"

/* ---------------------------------------------------------------------------------------------
 * buckets: pure.
 */

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

int sec_buckets(void) {
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
 * order: launch order and rebuild.
 */

static int launched(rr_ddp *ddp, int b) {
  rr_ddp_bucket_info info;
  return rr_ddp_get_bucket(ddp, b, &info) == RR_OK ? info.launched : -1;
}

int order_rank(int rank, void *arg) {
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
