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
 *   gpufake W   the same on the host fake of the CUDA table (tests/fake_cuda/), no GPU needed
 *   elastic W   a random rank killed mid-backward; the survivors shrink and rr_ddp_set_group:
 *               the failed step left local gradients only, parameters identical afterwards,
 *               and exact against one process on the survivors' batches (test_ddp_elastic.c)
 *
 * Data is random (t_value: never zero), from $RR_TEST_SEED or a fixed seed, printed.
 *
 * One executable from several files, one per feature: test_ddp_buckets.c (buckets, order),
 * test_ddp_grads.c (grads, hooks), test_ddp_train.c (equiv, identical, nosync),
 * test_ddp_errors.c (missing, mismatch, cuda, args), test_ddp_state.c (checkpoint,
 * broadcast), test_ddp_gpu.c (gpu). This file holds what they share and the dispatch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/test_ddp.h"

uint64_t g_seed;

/* The mixed model of `grads` and `gpu`: every float dtype, a frozen int parameter, sizes that
 * straddle small bucket caps. */
const size_t g_counts[NP_GRADS] = {300, 77, 5, 130, 1000, 64, 3};
const rr_dtype g_dtypes[NP_GRADS] = {RR_FLOAT32, RR_FLOAT64, RR_INT32,  RR_BFLOAT16,
                                     RR_FLOAT32, RR_FLOAT16, RR_FLOAT32};

int same_on_all(rr_pg *pg, const void *buf, size_t bytes, int *same) {
  int differs, st = t_differing_rank(pg, buf, bytes, &differs);
  *same = differs < 0;
  return st;
}

/* A permutation of 0..n-1 from (seed, stream). */
void shuffle(int *a, int n, uint64_t seed, uint64_t stream) {
  for (int i = 0; i < n; i++) a[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(t_bits(seed, stream, (uint64_t)i) % (uint64_t)(i + 1));
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

/* Fill a gradient with rank r's values for iteration `it` (never zero). */
void fill_grad(void *g, size_t n, rr_dtype d, uint64_t seed, int r, size_t base) {
  t_fill(g, n, d, RR_SUM, seed, r, base);
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
  if (!strcmp(sec, "grads")) return t_run_all(w, grads_rank, NULL, 60, NULL);
  if (!strcmp(sec, "order")) return t_run_all(2, order_rank, NULL, 60, NULL);
  if (!strcmp(sec, "equiv")) {
    mlp_case c = {.steps = 12, .local = 8, .cap_mb = 2000.0 / MIB, .tol = 1e-6};
    return t_run_all(w, equiv_rank, &c, 60, NULL);
  }
  if (!strcmp(sec, "identical")) {
    mlp_case c = {
        .steps = 20, .local = 6, .cap_mb = 2000.0 / MIB, .hook = RR_DDP_HOOK_FP16, .tol = 1e-3};
    return t_run_all(3, equiv_rank, &c, 60, NULL);
  }
  if (!strcmp(sec, "nosync")) return t_run_all(w, nosync_rank, NULL, 60, NULL);
  if (!strcmp(sec, "hooks")) return t_run_all(w, hooks_rank, NULL, 60, NULL);
  if (!strcmp(sec, "missing")) return t_run_all(2, missing_rank, NULL, 60, NULL);
  if (!strcmp(sec, "mismatch")) return t_run_all(3, mismatch_rank, NULL, 60, NULL);
  if (!strcmp(sec, "checkpoint")) {
    ckpt_arg a;
    snprintf(a.dir, sizeof a.dir, "/tmp/rr_ddp_ckpt.XXXXXX");
    if (!mkdtemp(a.dir)) {
      perror("mkdtemp");
      return 1;
    }
    int rc = t_run_all(3, checkpoint_rank, &a, 60, NULL);
    char path[320];
    snprintf(path, sizeof path, "%s/model.ckpt", a.dir);
    unlink(path);
    rmdir(a.dir);
    return rc;
  }
  if (!strcmp(sec, "broadcast")) return t_run_all(3, broadcast_rank, NULL, 60, NULL);
  if (!strcmp(sec, "cuda")) return t_run_all(2, cuda_rank, NULL, 60, NULL);
  if (!strcmp(sec, "args")) return t_run_all(1, args_rank, NULL, 60, NULL);
  if (!strcmp(sec, "gpu")) return sec_gpu(w, 0);
  if (!strcmp(sec, "gpufake")) return sec_gpu(w, 1);
  if (!strcmp(sec, "gpucost")) return sec_gpucost(w);
  if (!strcmp(sec, "elastic")) return sec_elastic(w);
  fprintf(stderr,
          "usage: %s buckets | grads W | order | equiv W | identical | nosync W | hooks W | "
          "missing | mismatch | checkpoint | broadcast | cuda | args | gpu W | gpufake W | gpucost "
          "W | elastic W\n",
          argv[0]);
  return 2;
}
