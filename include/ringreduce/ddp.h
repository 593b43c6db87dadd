/*
 * ringreduce DDP: torch.nn.parallel.DistributedDataParallel for a model written in C.
 *
 * To the wrapper a model is a list of parameters (data, gradient, count, dtype, device,
 * shape) plus optional buffers. It does what torch's DDP does around them:
 *
 *   rr_ddp *ddp;
 *   rr_ddp_tensor p[2] = {{.name = "w", .data = w, .grad = gw, .count = 640, .dtype = RR_FLOAT32,
 *                          .device = -1, .ndim = 2, .shape = {64, 10}},
 *                         {.name = "b", .data = b, .grad = gb, .count = 10, .dtype = RR_FLOAT32,
 *                          .device = -1}};
 *   rr_ddp_init(&ddp, pg, p, 2, NULL, 0, NULL);   // same model on every rank? then rank 0's
 *                                                  // parameters are broadcast to all
 *   for (each step) {
 *     rr_ddp_forward(ddp);                         // start of forward: buffers, bucket rebuild
 *     forward(...);
 *     backward_layer_2(...); rr_ddp_grad_ready(ddp, 1);   // bucket full -> all-reduce starts,
 *     backward_layer_1(...); rr_ddp_grad_ready(ddp, 0);   // overlapping the rest of backward
 *     rr_ddp_sync(ddp);                            // wait: grads now hold the average
 *     sgd_step(...);
 *   }
 *   rr_ddp_destroy(ddp);
 *
 * Behaviour, as torch's (torch/csrc/distributed/c10d/reducer.cpp):
 *  - Construction checks every rank has the same number of parameters and buffers, shapes,
 *    dtypes and which parameters are trainable (RR_EMISMATCH on every rank, naming the rank and
 *    the difference in torch's words), then broadcasts parameters and buffers from rank 0,
 *    coalesced (250 MiB at a time).
 *  - Buckets: trainable parameters walked in order, one bucket set per (dtype, device); a bucket
 *    closes when its size reaches the limit (the tensor that crosses it is included); limits
 *    are 1 MiB for the first bucket then bucket_cap_mb (default 25), the 1 MiB only when
 *    bucket_cap_mb is left at its default; the bucket list is then reversed, so bucket 0 holds
 *    the last parameters, whose gradients are ready first. After the first synchronised
 *    backward the buckets are rebuilt once in the order gradients became ready on rank 0.
 *  - rr_ddp_grad_ready copies the gradient into its bucket (times 1/world without a hook);
 *    a bucket whose last gradient arrives is all-reduced (SUM) asynchronously, buckets launched
 *    strictly in index order on every rank. rr_ddp_sync waits and writes the averages back.
 *  - Comm hooks: torch's allreduce_hook (divide, then sum) and fp16 / bf16 compression (cast,
 *    divide, all-reduce, cast back).
 *  - rr_ddp_no_sync(ddp, 1): backward passes only accumulate (the caller's backward adds into
 *    the gradients, as autograd does); the next synchronised backward averages the sum.
 *  - A trainable parameter whose gradient was never marked ready: rr_ddp_sync (and every later
 *    call) fails with RR_ESTATE and torch's "Expected to have finished reduction in the prior
 *    iteration before starting a new one" listing the parameter indices.
 *
 * Host or CUDA: every tensor carries a `device`, -1 for host memory (malloc, pinned or
 * managed) or the CUDA device its data and grad were cudaMalloc'd on. Device tensors need a
 * library built with CUDA (-DRR_CUDA=AUTO|ON) and that device visible at run time; otherwise
 * rr_ddp_init fails on every rank saying which (RR_ENOTSUP: "... is on CUDA device 0 but this
 * library was built without CUDA" / "... but no CUDA device is visible"). A rank's device
 * tensors must all be on one device. Their buckets are device memory; scaling, hooks and the
 * copies in and out run on the GPU, queued on the group's stream (rr_pg_set_cuda_stream;
 * NULL: the legacy default stream): a gradient must be final on that stream when it is
 * marked ready (compute it there, or synchronise first), and rr_ddp_sync returns with the
 * averages queued on that stream, not waited for (as torch's gradients are ready on the
 * current stream): work queued there next sees them; a read on the host or on another stream
 * synchronises with that stream first. Buffers broadcast by rr_ddp_forward are likewise
 * written in the stream's order; rr_ddp_init and rr_ddp_load return with tensors written.
 * Results are designed to be bit-identical to the same model in host memory
 * (tests/test_ddp.c "gpu" checks it; docs/ddp.md says what has run on a GPU).
 *
 * One thread drives an rr_ddp (the training loop's); different rr_ddp objects may share a
 * group, but their collectives then interleave in call order on every rank.
 */
#ifndef RINGREDUCE_DDP_H_
#define RINGREDUCE_DDP_H_

#include <stddef.h>
#include <stdint.h>

#include "ringreduce/ringreduce.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define RR_DDP_MAX_DIMS 8

/* A parameter or buffer. The wrapper copies this description; the memory stays the caller's
 * and must stay valid until rr_ddp_destroy. */
typedef struct rr_ddp_tensor {
  const char *name; /* optional: shown in messages and stored in checkpoints */
  void *data;       /* count elements */
  /* Parameters: the gradient (count elements of dtype, on the same device); the caller's
   * backward writes (or, under no_sync, adds) into it and rr_ddp_sync leaves the average
   * there. NULL: a frozen parameter (requires_grad=False): broadcast and checkpointed, never
   * reduced. Buffers: must be NULL. Trainable parameters need a floating dtype. */
  void *grad;
  size_t count;
  rr_dtype dtype;
  int device; /* -1: host memory; >= 0: the CUDA device data and grad are on (see above) */
  int ndim;   /* 0: the shape is [count]; else the product of shape[0..ndim) must be count */
  int64_t shape[RR_DDP_MAX_DIMS];
} rr_ddp_tensor;

typedef enum rr_ddp_hook {
  /* No hook: gradients multiplied by 1/world while copied into the bucket, then SUM. */
  RR_DDP_HOOK_NONE = 0,
  /* torch's default_hooks.allreduce_hook: the bucket divided by world, then SUM. */
  RR_DDP_HOOK_ALLREDUCE,
  /* fp16_compress_hook / bf16_compress_hook: the bucket cast to float16 / bfloat16, divided
   * by world, all-reduced in that type, cast back. Half the bytes on the wire. */
  RR_DDP_HOOK_FP16,
  RR_DDP_HOOK_BF16
} rr_ddp_hook;

typedef struct rr_ddp_options {
  /* Bucket size in MiB (torch's bucket_cap_mb). 0: the default, 25 MiB buckets after a first
   * bucket of 1 MiB; any other value (even 25) gives buckets of that size only. */
  double bucket_cap_mb;
  /* Broadcast buffers from rank 0 at the start of each forward (rr_ddp_forward), as torch's
   * broadcast_buffers=True. */
  int broadcast_buffers;
  rr_ddp_hook hook;
  /* 1: keep the construction buckets (torch always rebuilds once, in gradient-ready order). */
  int no_rebuild;
  /* Coalescing size of the broadcasts (construction, buffers, checkpoint load), MiB. 0: 250. */
  double broadcast_bucket_mb;
} rr_ddp_options;

#define RR_DDP_OPTIONS_INIT \
  { 0.0, 1, RR_DDP_HOOK_NONE, 0, 0.0 }
void rr_ddp_options_init(rr_ddp_options *opt);

typedef struct rr_ddp rr_ddp;

/* Wrap a model. Collective: every rank of pg calls it, with its own copy of the model.
 * opt == NULL means RR_DDP_OPTIONS_INIT. On success rank 0's parameters and buffers have been
 * copied to every rank. Errors: RR_EINVAL (bad description, this rank; the others fail too,
 * naming it), RR_EMISMATCH (models differ across ranks, on every rank), RR_ENOTSUP (a CUDA
 * tensor where this build or machine has no CUDA, or tensors on two devices), or the group's
 * error. */
int rr_ddp_init(rr_ddp **ddp, rr_pg *pg, const rr_ddp_tensor *params, int nparams,
                const rr_ddp_tensor *buffers, int nbuffers, const rr_ddp_options *opt);
/* Wait for communication still in flight and free the wrapper (not the model's memory).
 * Returns the first error seen, if any. NULL is a no-op. */
int rr_ddp_destroy(rr_ddp *ddp);

/* Move the wrapper to another group: after a failed step the survivors revoke and shrink the
 * old group (rr_pg_shrink) and hand the new group to their wrappers. Collective on newpg:
 * every member calls it, with the same model it gave rr_ddp_init. It
 *  - waits for and drops the all-reduces still in flight on the old group (they fail there,
 *    being revoked) and the backward that was under way: its gradients are never copied back
 *    (rr_ddp_sync copies averages into the gradients only when every bucket succeeded), so the
 *    failed step is dropped whole. The caller's gradient memory then holds this rank's own,
 *    un-averaged gradients (or a sum of them under no_sync): apply none of it;
 *  - takes rank, world size (the 1/world scaling and the hooks' divisor) and the root from
 *    newpg, and clears the wrapper's sticky error;
 *  - makes the bucket layout agree with newpg's rank 0 (a rank that failed inside the rebuild's
 *    broadcast may hold the old layout while others hold the new one) and broadcasts
 *    parameters and buffers from newpg's rank 0 (a survivor may have applied the failed step
 *    while another did not), so every member returns with identical parameters.
 * On CUDA tensors, set newpg's stream (rr_pg_set_cuda_stream) before calling. The old group
 * may be destroyed after it returns. On an error (another member died during it) the wrapper
 * is broken on newpg; shrink again and call it again with the next group. no_sync is kept. */
int rr_ddp_set_group(rr_ddp *ddp, rr_pg *newpg);

/* Call at the start of every forward, on every rank (torch does this inside forward()):
 * fails if the previous backward's reduction was left unfinished; rebuilds the buckets once,
 * after the first synchronised backward (a broadcast from rank 0); broadcasts buffers when
 * broadcast_buffers is on and the previous forward was not under no_sync (torch's rule). */
int rr_ddp_forward(rr_ddp *ddp);
/* Copy the buffers from rank 0 to every rank now (coalesced). Collective. */
int rr_ddp_broadcast_buffers(rr_ddp *ddp);

/* The gradient of parameter `param` (index into the params given to rr_ddp_init) is final
 * for this backward. Copies it into its bucket; when that completes buckets 0..b, they are
 * all-reduced asynchronously, in index order. Does nothing under no_sync. Marking one
 * parameter twice in a backward, or a frozen one, is an error (RR_ESTATE / RR_EINVAL). */
int rr_ddp_grad_ready(rr_ddp *ddp, int param);
/* End of backward: wait for every bucket and write the averaged gradients back. Under
 * no_sync a no-op. RR_ESTATE (and the same error from every later call) when a gradient was
 * never marked ready: "Expected to have finished reduction in the prior iteration ...". */
int rr_ddp_sync(rr_ddp *ddp);
/* enable = 1: torch's `with ddp.no_sync():` until called again with 0. Only between
 * backward passes (RR_ESTATE while gradients of a backward are being marked). */
int rr_ddp_no_sync(rr_ddp *ddp, int enable);

/* Checkpoint helpers (collective). Save: rank 0 writes every parameter and buffer (with
 * names, dtypes, shapes and a checksum) to `path` atomically (a temporary file renamed);
 * the other ranks wait for it and get rank 0's status, so a failed write fails everywhere.
 * Load: rank 0 reads and checks the file against the model (RR_EMISMATCH with the first
 * difference; RR_EPROTO when corrupt), then its contents are broadcast to every rank. The
 * file is in host byte order (little-endian on x86-64 and arm64). */
int rr_ddp_save(rr_ddp *ddp, const char *path);
int rr_ddp_load(rr_ddp *ddp, const char *path);

/* Inspection, for tests and tools. */
typedef struct rr_ddp_bucket_info {
  int nparams;
  const int *params; /* parameter indices in bucket layout order (valid until the next
                        rr_ddp_forward, which may rebuild the buckets) */
  size_t count;      /* elements */
  rr_dtype dtype;
  int device;
  size_t limit_bytes; /* the size limit the bucket was filled against */
  int launched;       /* 1 once its all-reduce started in this backward; 0 after rr_ddp_sync */
} rr_ddp_bucket_info;
int rr_ddp_num_buckets(const rr_ddp *ddp);
int rr_ddp_get_bucket(const rr_ddp *ddp, int bucket, rr_ddp_bucket_info *info);

typedef struct rr_ddp_stats {
  int64_t syncs;           /* synchronised backward passes completed */
  int64_t buckets_reduced; /* all-reduces launched */
  double bytes_reduced;    /* their payload, bytes (after compression) */
  double sync_wait_s;      /* time rr_ddp_sync spent waiting for communication: the part of
                              it that compute did not hide (exposed communication) */
  double copy_s;           /* time copying gradients into and out of buckets */
  int rebuilt;             /* 1 once buckets were rebuilt in gradient-ready order */
} rr_ddp_stats;
int rr_ddp_get_stats(const rr_ddp *ddp, rr_ddp_stats *stats);

/* torch's bucket assignment (compute_bucket_assignment_by_size), without a group: the
 * trainable parameters (grad != NULL) of params[0..nparams) split into buckets.
 * ready_order == NULL: construction (walk in index order, buckets sorted by their smallest
 * index, then the list reversed). Otherwise the rebuild: ready_order lists every trainable
 * parameter once, in the order gradients became ready, walked in that order, not reversed.
 * Output: order[0..ntrainable) lists parameter indices bucket by bucket (layout order),
 * bucket_end[b] is the end of bucket b in order (exclusive), *nbuckets is set; both arrays
 * need room for nparams entries. bucket_cap_mb as in rr_ddp_options (0: default). */
int rr_ddp_assign_buckets(const rr_ddp_tensor *params, int nparams, double bucket_cap_mb,
                          const int *ready_order, int *order, int *bucket_end, int *nbuckets);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* RINGREDUCE_DDP_H_ */
