/* test_ddp: what the wrapper refuses and how it says so: gradients never marked or marked twice,
 * models that differ across ranks, device tensors where there can be none, bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "tests/test_ddp.h"

/* ---------------------------------------------------------------------------------------------
 * missing / twice / no sync.
 */

int missing_rank(int rank, void *arg) {
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

int mismatch_rank(int rank, void *arg) {
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

int cuda_rank(int rank, void *arg) {
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
    printf("cuda: device tensors refused: %s\n", !rr__cuda_built() ? "no CUDA in this build"
                                                 : !rr__cuda_available()
                                                     ? "no CUDA device visible"
                                                     : "host memory described as device memory");
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

int args_rank(int rank, void *arg) {
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
