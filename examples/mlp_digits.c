/* Train an MLP on the 8x8 handwritten digits (1,797 images, 10 classes) with data parallelism:
 * the DistributedSampler gives each rank its share of every epoch, the DDP wrapper averages
 * gradients with bucketed all-reduces that overlap the backward pass, rank 0 reports loss and
 * held-out accuracy per epoch and saves a checkpoint.
 *
 *   build/bin/rrun --nproc-per-node 4 build/bin/mlp_digits        # under the launcher
 *   build/bin/mlp_digits --spawn 4                               # one program, 4 ranks
 *   build/bin/mlp_digits --spawn 4 --no-comm                     # no all-reduce (timing base)
 *   build/bin/mlp_digits --spawn 2 --device cuda                 # on a GPU (cuBLAS), 2 ranks
 *
 * The split is fixed: the first 1,437 images of randperm(1797, seed 0) train, the other 360
 * are held out. --batch is the global batch; each rank takes batch / world of it, so results
 * do not depend on the number of ranks (up to float rounding).
 *
 * At the end rank 0 prints a timing summary: the mean training step, the communication a step
 * needs when nothing overlaps it (measured separately after training: every bucket reduced
 * back to back), the part of it a step still waits for in rr_ddp_sync (exposed), and so the
 * share that overlap hid.
 *
 * --device cuda (the default when this example was built with CUDA and cuBLAS and a GPU is
 * visible; else cpu) runs forward and backward with cuBLAS on the device LOCAL_RANK (or
 * Slurm's or Open MPI's local rank) modulo the number of GPUs (several ranks share one GPU
 * when there are more ranks than GPUs), keeps
 * parameters and gradients in device memory, and hands DDP the device tensors: buckets,
 * scaling and hooks run on the GPU, ordered on the model's stream (rr_pg_set_cuda_stream).
 * The CPU path (--device cpu) is the code it always was.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef MLP_HAVE_CBLAS
#include <cblas.h>
#endif

#include "examples/mlp.h"
#include "ringreduce/ddp.h"
#include "ringreduce/ringreduce.h"
#include "ringreduce/sampler.h"

#define NTRAIN 1437
#define GROW_WAIT_MS 10000 /* --elastic: how long the ranks wait for a newcomer to join */

enum { DEV_AUTO, DEV_CPU, DEV_CUDA };

typedef struct args {
  int spawn, epochs, batch, nhidden, no_comm, check_identical, comm_iters;
  int elastic;       /* survive a dead rank: revoke, shrink, go on (docs/elastic.md) */
  int step_sleep_ms; /* after each step: slows training so a test can kill a rank mid-epoch */
  int end_sleep_ms;  /* after training, before its end: a test's window to kill a rank there */
  int join;          /* --elastic with RR_GROW_JOIN=1: a newcomer joining a running job */
  int device;        /* DEV_* as asked */
  int ncuda;         /* CUDA devices visible (asked in a child: CUDA must not start before fork) */
  int use_cuda;      /* the choice: 1 runs on the GPU */
  int hidden[MLP_MAX_LAYERS - 1];
  float lr;
  uint64_t seed;
  double bucket_cap_mb, min_accuracy;
  rr_ddp_hook hook;
  const char *data, *checkpoint;
  /* loaded before the ranks start, shared by fork */
  float *x;
  int *y, n;
} args;

static void usage(FILE *f) {
  fprintf(f,
          "usage: mlp_digits [options]   (under rrun, or --spawn N)\n"
          "  --spawn N            start N ranks from this program (rr_spawn)\n"
          "  --epochs N           (10)\n"
          "  --batch N            global batch, split over the ranks (64)\n"
          "  --lr X               SGD learning rate (0.3)\n"
          "  --hidden A,B,...     hidden layer widths (128)\n"
          "  --seed N             weights and sampler seed (0)\n"
          "  --data PATH          digits.csv.gz (default: $RR_DIGITS, tests/data/digits.csv.gz)\n"
          "  --checkpoint PATH    written by rank 0 at the end (mlp_digits.ckpt; '' for none)\n"
          "  --bucket-cap-mb X    DDP bucket size (default: torch's 25 with a 1 MiB first)\n"
          "  --hook H             none | allreduce | fp16 | bf16\n"
          "  --no-comm            skip DDP's all-reduce (to measure its overhead)\n"
          "  --check-identical    after every step, check all ranks hold the same parameters\n"
          "  --comm-iters N       repetitions of the standalone communication timing (20)\n"
          "  --min-accuracy PCT   exit 3 when the final held-out accuracy is lower\n"
          "  --elastic            when a peer dies during training, the survivors revoke, shrink,\n"
          "                       move DDP to the new group (parameters from its rank 0) and go\n"
          "                       on; needs rrun --keep-going (--spawn stops all at a death).\n"
          "                       With RR_GROW_ADDR set (host:port) the ranks also look for a\n"
          "                       newcomer after every step and take it in (rr_pg_grow); a\n"
          "                       process started with RR_GROW_JOIN=1 is one (rr_pg_join)\n"
          "  --step-sleep-ms N    sleep N ms after each step (to kill a rank mid-epoch in tests)\n"
          "  --end-sleep-ms N     sleep N ms after training, before the checkpoint and checks\n"
          "                       (to kill a rank there in tests; --elastic survives it too)\n"
          "  --device D           cpu | cuda | auto (auto: cuda when a GPU is visible and this\n"
          "                       example was built with CUDA and cuBLAS, else cpu)\n");
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t fnv(const void *p, size_t n) {
  const unsigned char *c = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define CHECK_RR(call)                                                                             \
  do {                                                                                             \
    int st_ = (call);                                                                              \
    if (st_ != RR_OK) {                                                                            \
      fprintf(stderr, "mlp_digits rank %d: %s failed: %s: %s\n", rank, #call, rr_status_name(st_), \
              rr_last_error());                                                                    \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

/* A GPU model's call failed: say which and why, then leave through `out`. */
#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    if ((call) != 0) {                                                                         \
      fprintf(stderr, "mlp_digits rank %d: %s failed: %s\n", rank, #call, mlp_cuda_error(&g)); \
      goto out;                                                                                \
    }                                                                                          \
  } while (0)

typedef struct ready_ctx {
  rr_ddp *ddp;
  int status;
} ready_ctx;

/* mlp_backward's callback: layer l's weight and bias gradients are final. */
static int on_ready(int layer, void *p) {
  ready_ctx *c = p;
  if (!c->ddp) return 0;
  c->status = rr_ddp_grad_ready(c->ddp, 2 * layer);
  if (c->status == RR_OK) c->status = rr_ddp_grad_ready(c->ddp, 2 * layer + 1);
  return c->status != RR_OK;
}

/* All ranks hold bit-identical parameters: gather every rank's hash and compare. */
static int params_identical(rr_pg *pg, const mlp *m, int *same) {
  int w = rr_get_world_size(pg);
  uint64_t h = fnv(m->params, m->nweights * sizeof(float));
  if (rr_get_rank(pg) == 0) printf("parameter hash on rank 0: %016" PRIx64 "\n", h);
  uint64_t *all = calloc((size_t)w, sizeof *all);
  if (!all) return RR_ENOMEM;
  int st = rr_all_gather(pg, &h, all, 1, RR_INT64);
  *same = 1;
  for (int r = 0; st == RR_OK && r < w; r++) *same &= all[r] == all[0];
  free(all);
  return st;
}

/* The failures --elastic survives: a peer lost, or the group stopped because of one. */
static int peer_failure(int st) {
  return st == RR_EPEER || st == RR_EABORTED || st == RR_EREVOKED || st == RR_ETIMEDOUT;
}

/* --elastic, after a collective failed with `why`: revoke the group (so every survivor stops
 * promptly, not at its timeout), shrink to the survivors, move the DDP wrapper there
 * (rr_ddp_set_group: drops the failed step, averages over the new world, broadcasts the
 * parameters from the new rank 0), then take the new rank 0's training position `pos`
 * (epoch, samples seen), since survivors may have failed one step or one epoch end apart.
 * A death during this starts it again on the group just made. The old group is destroyed
 * here; *pg becomes the new one. */
static int elastic_recover(rr_pg **pg, rr_ddp *ddp, mlp_cuda *g, int why, int64_t pos[2]) {
  double t0 = now_s();
  int old_world = rr_get_world_size(*pg), st = why;
  for (int attempt = 0; attempt < 8 && peer_failure(st); attempt++) {
    /* The wall-clock time: tests/test_train.sh takes the time a survivor saw the failure
     * from it (docs/elastic.md, "Time from the kill to training resuming"). */
    struct timespec wall;
    if (clock_gettime(CLOCK_REALTIME, &wall) != 0) wall.tv_sec = wall.tv_nsec = 0;
    fprintf(stderr, "mlp_digits rank %d (world %d, unix time %.6f): %s: %s; shrinking\n",
            rr_get_rank(*pg), rr_get_world_size(*pg),
            (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9, rr_status_name(st), rr_last_error());
    st = rr_pg_revoke(*pg);
    if (st != RR_OK && st != RR_EREVOKED) break;
    rr_pg *np = NULL;
    if ((st = rr_pg_shrink(*pg, 0, &np)) != RR_OK) break;
    if (g) st = rr_pg_set_cuda_stream(np, g->stream);
    if (st == RR_OK) st = rr_ddp_set_group(ddp, np);
    /* The old group is revoked: its destroy returns that failure, which is known. */
    (void)rr_destroy_process_group(*pg);
    *pg = np;
    if (st == RR_OK) st = rr_broadcast(*pg, pos, pos, 2, RR_INT64, rr_get_global_rank(*pg, 0));
  }
  if (st != RR_OK) {
    fprintf(stderr, "mlp_digits: rank %d: --elastic: could not go on: %s: %s\n", rr_get_rank(*pg),
            rr_status_name(st), rr_last_error());
    return st;
  }
  if (rr_get_rank(*pg) == 0) {
    struct timespec wall;
    if (clock_gettime(CLOCK_REALTIME, &wall) != 0) wall.tv_sec = wall.tv_nsec = 0;
    printf(
        "elastic: world %d -> %d (new rank 0 is rank %d of the original group); resuming "
        "epoch %" PRId64 " at sample %" PRId64
        ", %.1f ms after the failure was seen "
        "(unix time %.6f)\n",
        old_world, rr_get_world_size(*pg), rr_get_global_rank(*pg, 0), pos[0], pos[1],
        (now_s() - t0) * 1e3, (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9);
    fflush(stdout);
  }
  return RR_OK;
}

/* --elastic with RR_GROW_ADDR, after a completed step: is a newcomer waiting (rank 0 looks,
 * everyone hears the same answer)? Then grow the group by it, make the DDP wrapper afresh on
 * the grown group (the newcomer makes its own with rr_ddp_init, which this matches:
 * rr_ddp_set_group's collectives would not), and send the newcomer the position. A growth
 * that fails leaves the old group as it was: training goes on without the newcomer. A
 * failure of the old group itself is returned, for elastic_recover. */
static int elastic_grow(rr_pg **pg, rr_ddp **ddp, const rr_ddp_tensor *params, int nparams,
                        const rr_ddp_options *opt, mlp_cuda *g, int64_t pos[2]) {
  int waiting = 0;
  int st = rr_pg_grow_pending(*pg, NULL, &waiting);
  if (st != RR_OK || !waiting) return st;
  double t0 = now_s();
  rr_pg *np = NULL;
  /* A queued connection that is no working newcomer (refused for its token, dead since)
   * costs this wait, not the group's whole timeout; a live newcomer is already connected. */
  st = rr_pg_grow(*pg, NULL, 1, GROW_WAIT_MS, 0, &np);
  if (st != RR_OK) {
    fprintf(stderr,
            "mlp_digits rank %d: a newcomer could not join: %s: %s; going on with %d "
            "ranks\n",
            rr_get_rank(*pg), rr_status_name(st), rr_last_error(), rr_get_world_size(*pg));
    return RR_OK;
  }
  if (g) st = rr_pg_set_cuda_stream(np, g->stream);
  if (st == RR_OK) st = rr_ddp_destroy(*ddp);
  *ddp = NULL;
  if (st == RR_OK) st = rr_ddp_init(ddp, np, params, nparams, NULL, 0, opt);
  if (st != RR_OK && !*ddp)
    fprintf(stderr, "mlp_digits rank %d: no DDP wrapper on the grown group: %s: %s\n",
            rr_get_rank(np), rr_status_name(st), rr_last_error());
  int old_world = rr_get_world_size(*pg);
  (void)rr_destroy_process_group(*pg);
  *pg = np;
  if (st == RR_OK) st = rr_broadcast(np, pos, pos, 2, RR_INT64, rr_get_global_rank(np, 0));
  if (st == RR_OK && rr_get_rank(np) == 0) {
    printf("elastic: world %d -> %d (a newcomer joined); resuming epoch %" PRId64
           " at sample %" PRId64 " after %.1f ms\n",
           old_world, rr_get_world_size(np), pos[0], pos[1], (now_s() - t0) * 1e3);
    fflush(stdout);
  }
  return st;
}

/* The collective end of training (see its call): *same says whether every rank holds the
 * same parameters (m: this rank's, on the host), *comm the standalone communication time of
 * one step. The first failed collective's status. */
static int end_of_training(const args *a, rr_pg *pg, rr_ddp *ddp, const mlp *m, int nl, int *same,
                           double *comm) {
  int rank = rr_get_rank(pg), st;
  if (a->checkpoint && a->checkpoint[0]) {
    if ((st = rr_ddp_save(ddp, a->checkpoint)) != RR_OK) return st;
    if (rank == 0) printf("checkpoint: %s\n", a->checkpoint);
  }
  if (!a->no_comm) {
    if ((st = params_identical(pg, m, same)) != RR_OK) return st;
    if (rank == 0)
      printf("parameters bit-identical on all %d ranks: %s\n", rr_get_world_size(pg),
             *same ? "yes" : "NO");
  }
  *comm = 0;
  if (!a->no_comm && a->comm_iters > 0) {
    /* The communication of one step with nothing to hide it: every gradient marked at once,
     * then wait. (Gradients are stale here; training is over.) */
    if ((st = rr_barrier(pg)) != RR_OK) return st;
    double t0 = now_s();
    for (int it = 0; it < a->comm_iters; it++) {
      for (int i = 2 * nl - 1; i >= 0; i--)
        if ((st = rr_ddp_grad_ready(ddp, i)) != RR_OK) return st;
      if ((st = rr_ddp_sync(ddp)) != RR_OK) return st;
    }
    *comm = (now_s() - t0) / a->comm_iters;
  }
  return RR_OK;
}

static int worker(int rank, void *p) {
  args *a = p;
  int rc = 1;
  rr_pg *pg = NULL;
  rr_ddp *ddp = NULL;
  mlp m = {0};
  int64_t *idx = NULL;
  float *xb = NULL;
  int *yb = NULL, *test_y = NULL, *train = NULL;
  float *test_x = NULL;
  double *step_times = NULL;
  mlp_cuda g = {.device = -1};
  int gpu = a->use_cuda;
#if defined(MLP_HAVE_CBLAS) && defined(OPENBLAS_VERSION)
  openblas_set_num_threads(1); /* one core per rank: ranks are the parallelism */
#endif
  if (a->join)
    CHECK_RR(rr_pg_join(NULL, NULL, &pg));
  else
    CHECK_RR(rr_init_process_group(&pg, NULL));
  rank = rr_get_rank(pg);
  int world = rr_get_world_size(pg);

  /* The fixed split: randperm(n, seed 0), first NTRAIN train, the rest held out. */
  int n = a->n, ntest = n - NTRAIN;
  int64_t *perm = malloc((size_t)n * sizeof *perm);
  train = malloc((size_t)NTRAIN * sizeof *train);
  test_x = malloc((size_t)ntest * 64 * sizeof *test_x);
  test_y = malloc((size_t)ntest * sizeof *test_y);
  if (!perm || !train || !test_x || !test_y) {
    free(perm);
    fprintf(stderr, "rank %d: out of memory\n", rank);
    goto out;
  }
  CHECK_RR(rr_randperm((uint64_t)n, 0, perm));
  for (int i = 0; i < NTRAIN; i++) train[i] = (int)perm[i];
  for (int i = 0; i < ntest; i++) {
    memcpy(test_x + (size_t)i * 64, a->x + (size_t)perm[NTRAIN + i] * 64, 64 * sizeof(float));
    test_y[i] = a->y[perm[NTRAIN + i]];
  }
  free(perm);

  int local = a->batch / world > 0 ? a->batch / world : 1;
  int dims[MLP_MAX_LAYERS + 1], nl = a->nhidden + 1;
  dims[0] = 64;
  for (int i = 0; i < a->nhidden; i++) dims[i + 1] = a->hidden[i];
  dims[nl] = 10;
  /* Each rank starts from different weights: DDP's construction broadcast makes them rank 0's. */
  if (mlp_init(&m, nl, dims, a->batch > 256 ? a->batch : 256, a->seed + (uint64_t)rank) != 0) {
    fprintf(stderr, "rank %d: mlp_init failed\n", rank);
    goto out;
  }
  rr_ddp_tensor params[2 * MLP_MAX_LAYERS];
  if (gpu) {
    /* The rank's GPU; the initial weights drawn above go there. */
    const char *lr = getenv("LOCAL_RANK");
    if (!lr) lr = getenv("SLURM_LOCALID");
    if (!lr) lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int dev = (lr ? atoi(lr) : rank) % a->ncuda;
    CHECK_CUDA(mlp_cuda_init(&g, &m, dev));
    /* DDP's copies and kernels, and the all-reduces' staging, on the model's stream. */
    CHECK_RR(rr_pg_set_cuda_stream(pg, g.stream));
    mlp_cuda_ddp_params(&g, params);
  } else {
    mlp_ddp_params(&m, params);
  }
  rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
  opt.bucket_cap_mb = a->bucket_cap_mb;
  opt.hook = a->hook;
  CHECK_RR(rr_ddp_init(&ddp, pg, params, 2 * nl, NULL, 0, &opt));
  int64_t pos[2] = {0, 0};
  if (a->join) { /* where the group stands: elastic_grow on the members sends it */
    CHECK_RR(rr_broadcast(pg, pos, pos, 2, RR_INT64, rr_get_global_rank(pg, 0)));
    printf("mlp_digits: joined as rank %d of %d at epoch %" PRId64 ", sample %" PRId64 "\n", rank,
           world, pos[0], pos[1]);
    fflush(stdout);
  }
  const char *grow_addr = getenv("RR_GROW_ADDR");
  int grow = a->elastic && grow_addr && *grow_addr;

  rr_sampler sampler;
  CHECK_RR(rr_sampler_init(&sampler, NTRAIN, world, rank, 1, (int64_t)a->seed, 0));
  uint64_t ns = rr_sampler_len(&sampler);
  int steps = (int)((ns + (uint64_t)local - 1) / (uint64_t)local);
  /* Sized for any world down to 1: --elastic may shrink it. */
  idx = malloc((size_t)NTRAIN * sizeof *idx);
  xb = malloc((size_t)a->batch * 64 * sizeof *xb);
  yb = malloc((size_t)a->batch * sizeof *yb);
  step_times = malloc(((size_t)a->epochs * steps + 1) * sizeof *step_times);
  if (!idx || !xb || !yb || !step_times) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    goto out;
  }
  if (rank == 0) {
    char engine[200];
    if (gpu)
      snprintf(engine, sizeof engine, "cuBLAS on CUDA device %d (%s)", g.device, g.name);
    else
      snprintf(engine, sizeof engine, "%s", mlp_have_blas() ? "OpenBLAS" : "plain C gemm");
    printf("mlp_digits: %d ranks, MLP", world);
    for (int l = 0; l <= nl; l++) printf("%s%d", l ? "-" : " ", dims[l]);
    printf(
        " (%zu parameters, %d DDP buckets), %s, global batch %d (%d per rank), lr %g, %d "
        "train / %d held out, %s\n",
        m.nweights, rr_ddp_num_buckets(ddp), engine, local * world, local, (double)a->lr, NTRAIN,
        ntest, a->no_comm ? "NO COMMUNICATION (--no-comm)" : "DDP all-reduce");
    fflush(stdout);
  }

  ready_ctx rctx = {.ddp = a->no_comm ? NULL : ddp};
  int nsteps = 0, maxsteps = a->epochs * steps + 1;
  double acc = 0;
  /* Where training stands: epoch e, and seen, the samples of the epoch's shuffled list that the
   * group has consumed (the sampler gives rank r the list's positions r, r + world, ...; a
   * step at local offset j covers positions [j * world, (j + b) * world)). A position
   * independent of the world size, so an --elastic restart on fewer ranks goes on from it. */
  int e = (int)pos[0], epoch_ready = 0;
  uint64_t seen = (uint64_t)pos[1];
  double loss_sum[2] = {0, 0}; /* summed loss, samples: this rank's, in this epoch */
  while (e < a->epochs) {
    if (!epoch_ready) { /* (again) after a shrink: this rank's share under the new world */
      CHECK_RR(rr_sampler_init(&sampler, NTRAIN, world, rank, 1, (int64_t)a->seed, 0));
      rr_sampler_set_epoch(&sampler, e);
      ns = rr_sampler_len(&sampler);
      CHECK_RR(rr_sampler_indices(&sampler, idx, ns));
      epoch_ready = 1;
    }
    uint64_t j = (seen + (uint64_t)world - 1) / (uint64_t)world;
    int st = RR_OK;
    if (j < ns) {
      int b = (int)(j + (uint64_t)local <= ns ? (uint64_t)local : ns - j);
      for (int i = 0; i < b; i++) {
        int k = train[idx[j + (uint64_t)i]];
        memcpy(xb + (size_t)i * 64, a->x + (size_t)k * 64, 64 * sizeof(float));
        yb[i] = a->y[k];
      }
      double t0 = now_s();
      if (!a->no_comm) st = rr_ddp_forward(ddp);
      if (st == RR_OK && gpu) {
        double l;
        CHECK_CUDA(mlp_cuda_forward(&g, xb, b));
        CHECK_CUDA(mlp_cuda_loss(&g, yb, b, 1.0f / (float)b, &l));
        loss_sum[0] += l;
        loss_sum[1] += b;
        int brc = mlp_cuda_backward(&g, b, 0, on_ready, &rctx);
        CHECK_CUDA(brc < 0);
        if (brc != 0) st = rctx.status;
        if (st == RR_OK && !a->no_comm) st = rr_ddp_sync(ddp);
        /* A failed step is dropped: its gradients are this rank's own (docs/elastic.md). */
        if (st == RR_OK) CHECK_CUDA(mlp_cuda_sgd(&g, a->lr));
        CHECK_CUDA(mlp_cuda_sync(&g)); /* the step is over when its kernels are */
      } else if (st == RR_OK) {
        mlp_forward(&m, xb, b);
        loss_sum[0] += mlp_loss(&m, yb, b, 1.0f / (float)b);
        loss_sum[1] += b;
        if (mlp_backward(&m, b, 0, on_ready, &rctx) != 0) st = rctx.status;
        if (st == RR_OK && !a->no_comm) st = rr_ddp_sync(ddp);
        if (st == RR_OK) mlp_sgd(&m, a->lr);
      }
      if (st == RR_OK) {
        if (nsteps < maxsteps) step_times[nsteps++] = now_s() - t0;
        seen = (j + (uint64_t)b) * (uint64_t)world;
        /* A throttle only: a signal cutting it short (EINTR) changes nothing that matters. */
        if (a->step_sleep_ms > 0 && usleep((useconds_t)a->step_sleep_ms * 1000) != 0 &&
            errno != EINTR)
          fprintf(stderr, "rank %d: usleep: %s\n", rank, strerror(errno));
      }
      if (st == RR_OK && a->check_identical && !a->no_comm) {
        int same;
        if (gpu) CHECK_CUDA(mlp_cuda_download(&g, &m));
        st = params_identical(pg, &m, &same);
        if (st == RR_OK && !same) {
          fprintf(stderr,
                  "rank %d: parameters differ across ranks in epoch %d at sample %" PRIu64 "\n",
                  rank, e, seen);
          goto out;
        }
      }
    } else { /* the epoch's end */
      if (!a->no_comm) st = rr_all_reduce(pg, loss_sum, loss_sum, 2, RR_FLOAT64, RR_SUM);
      if (st == RR_OK && rank == 0) {
        int correct;
        if (gpu)
          CHECK_CUDA(mlp_cuda_correct(&g, test_x, test_y, ntest, &correct));
        else
          correct = mlp_correct(&m, test_x, test_y, ntest);
        acc = 100.0 * correct / ntest;
        printf("epoch %2d  loss %.4f  held-out accuracy %.2f%% (%d/%d)\n", e,
               loss_sum[0] / loss_sum[1], acc, correct, ntest);
        fflush(stdout);
      }
      if (st == RR_OK) e++, seen = 0, epoch_ready = 0, loss_sum[0] = loss_sum[1] = 0;
    }
    if (st == RR_OK && grow) { /* a step boundary: take in a waiting newcomer */
      pos[0] = e, pos[1] = (int64_t)seen;
      int was = world;
      st = elastic_grow(&pg, &ddp, params, 2 * nl, &opt, gpu ? &g : NULL, pos);
      rctx.ddp = a->no_comm ? NULL : ddp;
      rank = rr_get_rank(pg);
      world = rr_get_world_size(pg);
      if (st == RR_OK && world != was) {
        local = a->batch / world > 0 ? a->batch / world : 1;
        epoch_ready = 0;
      }
    }
    if (st == RR_OK) continue;
    if (!ddp) goto out; /* its remaking after a growth failed (said why): nothing to train */
    if (!a->elastic || !peer_failure(st)) {
      fprintf(stderr, "mlp_digits rank %d: training failed: %s: %s\n", rank, rr_status_name(st),
              rr_last_error());
      goto out;
    }
    /* --elastic: go on with the survivors, from the new rank 0's position and parameters. */
    pos[0] = e, pos[1] = (int64_t)seen;
    if (elastic_recover(&pg, ddp, gpu ? &g : NULL, st, pos) != RR_OK) goto out;
    rank = rr_get_rank(pg);
    world = rr_get_world_size(pg);
    local = a->batch / world > 0 ? a->batch / world : 1;
    if (pos[1] == 0) loss_sum[0] = loss_sum[1] = 0; /* the new rank 0 starts an epoch */
    e = (int)pos[0], seen = (uint64_t)pos[1], epoch_ready = 0;
  }
  /* The end of training, collective too: the checkpoint, the check that every rank holds the
   * same parameters, the communication timing. With --elastic a death here is survived as one
   * during training: the survivors shrink and do the end again (the new rank 0, which may not
   * have held the accuracy, measures it). */
  if (a->end_sleep_ms > 0 && usleep((useconds_t)a->end_sleep_ms * 1000) != 0 && errno != EINTR)
    fprintf(stderr, "rank %d: usleep: %s\n", rank, strerror(errno));
  if (gpu) CHECK_CUDA(mlp_cuda_download(&g, &m));
  double comm = 0;
  for (;;) {
    int same = 1, st = end_of_training(a, pg, ddp, &m, nl, &same, &comm);
    if (st == RR_OK && !same) goto out;
    if (st == RR_OK) break;
    if (!a->elastic || !peer_failure(st)) {
      fprintf(stderr, "mlp_digits rank %d: the end of training failed: %s: %s\n", rank,
              rr_status_name(st), rr_last_error());
      goto out;
    }
    pos[0] = a->epochs, pos[1] = 0;
    if (elastic_recover(&pg, ddp, gpu ? &g : NULL, st, pos) != RR_OK) goto out;
    rank = rr_get_rank(pg);
    world = rr_get_world_size(pg);
    if (gpu) CHECK_CUDA(mlp_cuda_download(&g, &m)); /* the new rank 0's, broadcast */
    if (rank == 0) acc = 100.0 * mlp_correct(&m, test_x, test_y, ntest) / ntest;
  }

  /* Timing. Steps after the first epoch's first 3 (warm-up: page faults, bucket rebuild). */
  rr_ddp_stats st0;
  CHECK_RR(rr_ddp_get_stats(ddp, &st0));
  int skip = nsteps > 6 ? 3 : 0, cnt = nsteps - skip;
  double sum = 0;
  for (int i = skip; i < nsteps; i++) sum += step_times[i];
  double mean = cnt > 0 ? sum / cnt : 0;
  qsort(step_times + skip, (size_t)cnt, sizeof *step_times, cmp_double);
  double p50 = cnt > 0 ? step_times[skip + cnt / 2] : 0;
  if (rank == 0) {
    printf("final held-out accuracy %.2f%%\n", acc);
    if (a->no_comm)
      printf("timing: world %d, %d steps, step %.3f ms mean (p50 %.3f ms), no communication\n",
             world, cnt, mean * 1e3, p50 * 1e3);
    else {
      double exposed = st0.syncs > 0 ? st0.sync_wait_s / (double)st0.syncs : 0;
      printf(
          "timing: world %d, %d steps, step %.3f ms mean (p50 %.3f ms), comm %.3f ms/step "
          "standalone, exposed %.3f ms/step (wait in rr_ddp_sync), hidden %.0f%%, "
          "%.1f KiB/step reduced in %" PRId64 " buckets/step\n",
          world, cnt, mean * 1e3, p50 * 1e3, comm * 1e3, exposed * 1e3,
          comm > 0 ? fmax(0.0, 100.0 * (1.0 - exposed / comm)) : 0.0,
          st0.syncs ? st0.bytes_reduced / (double)st0.syncs / 1024.0 : 0.0,
          st0.syncs ? st0.buckets_reduced / st0.syncs : 0);
    }
    fflush(stdout);
  }
  rc = rank == 0 && a->min_accuracy > 0 && acc < a->min_accuracy ? 3 : 0;
  if (rc == 3)
    fprintf(stderr, "held-out accuracy %.2f%% is below --min-accuracy %.2f%%\n", acc,
            a->min_accuracy);
out:
  if (ddp) {
    int st = rr_ddp_destroy(ddp);
    if (st != RR_OK) {
      fprintf(stderr, "rank %d: rr_ddp_destroy: %s\n", rank, rr_last_error());
      rc = rc ? rc : 1;
    }
  }
  if (pg && rr_destroy_process_group(pg) != RR_OK) {
    fprintf(stderr, "rank %d: rr_destroy_process_group: %s\n", rank, rr_last_error());
    rc = rc ? rc : 1;
  }
  if (gpu) mlp_cuda_free(&g);
  mlp_free(&m);
  free(idx), free(xb), free(yb), free(step_times), free(train), free(test_x), free(test_y);
  return rc;
}

/* CUDA devices visible, asked in a child process: the ranks fork (rr_spawn) after this, and a
 * process that has started CUDA cannot use it in its forked children. */
static int cuda_devices_forked(void) {
  if (!mlp_cuda_built()) return 0;
  fflush(NULL);
  pid_t p = fork();
  if (p < 0) return 0;
  if (p == 0) {
    int n = mlp_cuda_device_count();
    _exit(n > 100 ? 100 : n);
  }
  int ws = 0;
  while (waitpid(p, &ws, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int parse_double(const char *s, double lo, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo)) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  args a = {.epochs = 10,
            .batch = 64,
            .lr = 0.3f,
            .nhidden = 1,
            .hidden = {128},
            .checkpoint = "mlp_digits.ckpt",
            .comm_iters = 20};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    double d;
    if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(o, "--no-comm")) {
      a.no_comm = 1;
      continue;
    } else if (!strcmp(o, "--elastic")) {
      a.elastic = 1;
      continue;
    } else if (!strcmp(o, "--check-identical")) {
      a.check_identical = 1;
      continue;
    } else if (!v) {
      bad = 1;
    } else if (!strcmp(o, "--spawn")) {
      bad = parse_int(v, 1, 256, &a.spawn);
    } else if (!strcmp(o, "--epochs")) {
      bad = parse_int(v, 1, 100000, &a.epochs);
    } else if (!strcmp(o, "--batch")) {
      bad = parse_int(v, 1, 4096, &a.batch);
    } else if (!strcmp(o, "--step-sleep-ms")) {
      bad = parse_int(v, 0, 100000, &a.step_sleep_ms);
    } else if (!strcmp(o, "--end-sleep-ms")) {
      bad = parse_int(v, 0, 100000, &a.end_sleep_ms);
    } else if (!strcmp(o, "--comm-iters")) {
      bad = parse_int(v, 0, 100000, &a.comm_iters);
    } else if (!strcmp(o, "--lr")) {
      bad = parse_double(v, 0, &d);
      a.lr = (float)d;
    } else if (!strcmp(o, "--seed")) {
      bad = parse_double(v, 0, &d);
      a.seed = (uint64_t)d;
    } else if (!strcmp(o, "--bucket-cap-mb")) {
      bad = parse_double(v, 0, &a.bucket_cap_mb);
    } else if (!strcmp(o, "--min-accuracy")) {
      bad = parse_double(v, 0, &a.min_accuracy);
    } else if (!strcmp(o, "--device")) {
      if (!strcmp(v, "cpu"))
        a.device = DEV_CPU;
      else if (!strcmp(v, "cuda"))
        a.device = DEV_CUDA;
      else if (!strcmp(v, "auto"))
        a.device = DEV_AUTO;
      else
        bad = 1;
    } else if (!strcmp(o, "--data")) {
      a.data = v;
    } else if (!strcmp(o, "--checkpoint")) {
      a.checkpoint = v;
    } else if (!strcmp(o, "--hook")) {
      if (!strcmp(v, "none"))
        a.hook = RR_DDP_HOOK_NONE;
      else if (!strcmp(v, "allreduce"))
        a.hook = RR_DDP_HOOK_ALLREDUCE;
      else if (!strcmp(v, "fp16"))
        a.hook = RR_DDP_HOOK_FP16;
      else if (!strcmp(v, "bf16"))
        a.hook = RR_DDP_HOOK_BF16;
      else
        bad = 1;
    } else if (!strcmp(o, "--hidden")) {
      a.nhidden = 0;
      const char *p = v;
      while (*p && !bad) {
        char *end;
        long w = strtol(p, &end, 10);
        if (end == p || w < 1 || w > 65536 || a.nhidden == MLP_MAX_LAYERS - 1)
          bad = 1;
        else
          a.hidden[a.nhidden++] = (int)w;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') bad = 1;
      }
    } else {
      fprintf(stderr, "mlp_digits: unknown option %s\n", o);
      usage(stderr);
      return 2;
    }
    if (bad) {
      fprintf(stderr, "mlp_digits: bad or missing value for %s\n", o);
      usage(stderr);
      return 2;
    }
    i++;
  }
  /* Started by a launcher (one process per rank): rrun or torchrun (RANK), srun
   * (SLURM_PROCID), mpirun (OMPI_COMM_WORLD_RANK), as the library's env:// reads them. */
  const char *launched = getenv("RANK");
  if (!launched) launched = getenv("SLURM_PROCID");
  if (!launched) launched = getenv("OMPI_COMM_WORLD_RANK");
  /* rr_spawn (torch.multiprocessing.spawn) stops every rank when one dies, so there would be
   * no survivors; rrun --keep-going lets them run. */
  const char *gj = getenv("RR_GROW_JOIN");
  a.join = a.elastic && gj && !strcmp(gj, "1");
  if (a.elastic && (a.no_comm || (a.spawn > 0 || (!launched && !a.join)))) {
    fprintf(stderr, "mlp_digits: --elastic %s\n",
            a.no_comm ? "needs communication (not --no-comm)"
                      : "needs rrun --keep-going: --spawn stops every rank when one dies");
    return 2;
  }
  const char *path = a.data ? a.data : digits_default_path();
  if (digits_load(path, &a.x, &a.y, &a.n) != 0) return 1;
  if (a.n <= NTRAIN) {
    fprintf(stderr, "mlp_digits: %s holds %d images, need more than %d\n", path, a.n, NTRAIN);
    return 1;
  }
  /* The device, decided once for all ranks. */
  if (a.device != DEV_CPU) {
    a.ncuda = cuda_devices_forked();
    if (a.device == DEV_CUDA && a.ncuda == 0) {
      fprintf(stderr, "mlp_digits: --device cuda: %s\n",
              mlp_cuda_built() ? "no CUDA device is visible (the CUDA runtime found no usable "
                                 "driver or GPU)"
                               : "this example was built without CUDA and cuBLAS (configure "
                                 "with a CUDA toolkit that has cuBLAS; see docs/cuda.md)");
      free(a.x), free(a.y);
      return 2;
    }
    a.use_cuda = a.ncuda > 0;
  }
  int rc;
  /* Under a launcher this process is one rank; otherwise start the ranks here. */
  if (a.spawn == 0 && (launched || a.join)) {
    rc = worker(a.join ? -1 : atoi(launched), &a);
  } else {
    rr_spawn_status st;
    int s = rr_spawn(a.spawn ? a.spawn : 1, worker, &a, &st);
    if (s != RR_OK) fprintf(stderr, "mlp_digits: %s\n", rr_last_error());
    rc = s == RR_OK ? 0 : st.exit_code ? st.exit_code : 1;
  }
  free(a.x), free(a.y);
  return rc;
}
