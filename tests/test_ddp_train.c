/* test_ddp: the MLP of examples/ trained under DDP against one process on the whole batch
 * (equiv, identical), and gradient accumulation under no_sync (nosync). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "examples/mlp.h"
#include "tests/test_ddp.h"

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

static const int g_dims[4] = {IN, 32, 24, CLASSES};

int equiv_rank(int rank, void *arg) {
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
int nosync_rank(int rank, void *arg) {
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
