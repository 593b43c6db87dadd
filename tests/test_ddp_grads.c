/* test_ddp: averaged gradients of the mixed-dtype model against the float64 mean, and the
 * fp16 / bf16 / allreduce communication hooks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_ddp.h"

/* ---------------------------------------------------------------------------------------------
 * grads: averaged gradients of a mixed model.
 */

int grads_rank(int rank, void *arg) {
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
 * hooks.
 */

int hooks_rank(int rank, void *arg) {
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
