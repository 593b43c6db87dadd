/* DistributedDataParallel: gradient buckets, overlapped all-reduce, construction checks,
 * broadcasts and checkpoints, following torch's Reducer (torch/csrc/distributed/c10d/
 * reducer.cpp) and DistributedDataParallel (torch/nn/parallel/distributed.py).
 *
 * Life of one synchronised iteration on every rank:
 *
 *   rr_ddp_forward     prior reduction finished? rebuild buckets once; broadcast buffers
 *   rr_ddp_grad_ready  grad -> its bucket (x 1/W); bucket b and all before it full ->
 *                      rr_all_reduce_async(bucket), in index order: overlaps the rest of the
 *                      caller's backward
 *   rr_ddp_sync        wait for the works in order, copy each bucket back to the grads
 *
 * The collectives are the public ones (rr_all_reduce_async, rr_broadcast, rr_all_gather),
 * with roots given as global ranks, so the wrapper works on any group, subgroups included;
 * from group/pg.h it takes only rr__cuda_pg_stream, to order device work on the stream the
 * group's calls are ordered on.
 *
 * CUDA gradients (device >= 0, in a build with CUDA and a device present; docs/ddp.md).
 * Buckets of device tensors live in device memory on that device, and the four element
 * helpers (scale into the bucket, divide, compress, decompress) become kernels
 * (cuda/ddp.cu, bit-identical to the host loops of ddp/hooks.c) queued on the group's CUDA
 * stream (rr_pg_set_cuda_stream; NULL: the legacy default stream). The all-reduce of a
 * device bucket is the library's own: group/staging.c copies it through pinned host memory
 * on the same stream, so it is ordered after the kernels that filled the bucket, and reduces
 * on the host with the same code as host buckets. Hence the device path gives the host
 * path's bits exactly (by design; tests/test_ddp_elem.c checks the kernels' element
 * functions against those loops, tests/test_ddp.c "gpu" the whole path on a GPU). Chosen
 * over host buckets fed by device-to-host copies because the bucket, the scaling and the
 * hooks then stay where torch keeps them, and a device-side ring (CUDA IPC, docs/cuda.md)
 * will speed it up without touching the wrapper. Broadcasts and checkpoints copy device
 * tensors through host memory.
 * Without CUDA in the build, or with no device at run time, a device tensor is refused at
 * rr_ddp_init saying which.
 *
 * This file is the wrapper's lifecycle and its iteration (init, forward, grad_ready, sync,
 * destroy) plus the helpers every part uses. The parts that answer one question each live
 * beside it, as torch keeps its comm hooks (default_comm_hooks.cpp) and broadcast_coalesced
 * out of reducer.cpp, so that reading the iteration does not mean reading all of them:
 *   ddp/bucket.c        which parameters share a bucket; the one rebuild after step one
 *   ddp/hooks.c         what a full bucket goes through before its all-reduce and after
 *   ddp/broadcast.c     rank 0's parameters and buffers to every rank, coalesced
 *   ddp/check.c         whether every rank describes the same model, before anything moves
 *   ddp/checkpoint.c    save and load
 *   ddp/ddp_internal.h  the state they share (struct rr_ddp) and their calls into each other
 */
#include "ringreduce/ddp.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "group/pg.h" /* rr__cuda_pg_stream: the stream the group's calls are ordered on */
#include "ddp/ddp_internal.h"

void rr_ddp_options_init(rr_ddp_options *opt) {
  if (opt) *opt = (rr_ddp_options)RR_DDP_OPTIONS_INIT;
}

/* ---------------------------------------------------------------------------------------------
 * Small helpers.
 */

double rr__ddp_elapsed(int64_t t0_ns) {
  return (double)(rr__now_ns() - t0_ns) * 1e-9;
}

/* Remember the current error as the wrapper's state: every later call returns it. Used when
 * the group failed or a backward's reduction was left unfinished, since nothing after either
 * could be trusted. */
int rr__ddp_break(rr_ddp *d, int st) {
  d->broken = st;
  snprintf(d->broken_msg, sizeof d->broken_msg, "%s", rr__error());
  return st;
}

int rr__ddp_check(const rr_ddp *d, const char *fn) {
  if (!d) return rr__set_error(RR_EINVAL, "%s: ddp is NULL", fn);
  if (d->broken) {
    rr__copy_error(d->broken_msg);
    return d->broken;
  }
  return RR_OK;
}

/* CUDA: the wrapper's device work runs with its device current (the caller's is restored
 * afterwards) and is queued on the group's stream, the one the all-reduces of device buckets
 * are ordered on, so a bucket's kernels always finish before its all-reduce reads it. */
int rr__ddp_enter(const rr_ddp *d, int *prev) {
  *prev = -1;
  return d->device >= 0 ? rr__cuda_set_device(d->device, prev) : RR_OK;
}

void rr__ddp_leave(const rr_ddp *d, int prev) {
  if (d->device >= 0) rr__cuda_restore_device(prev);
}

void *rr__ddp_stream(const rr_ddp *d) {
  return rr__cuda_pg_stream(d->pg);
}

/* A local failure (a CUDA error, no memory for buckets) in the middle of a step, a broadcast
 * or construction: this rank can no longer take part in the collectives the other ranks are
 * in or about to start, so the group is aborted (they fail at once, naming this rank,
 * instead of at the timeout) and the wrapper is broken. */
int rr__ddp_abort(rr_ddp *d, int st) {
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error());
  (void)rr_abort(d->pg);
  rr__copy_error(saved);
  return rr__ddp_break(d, st);
}

/* Copy n bytes between a tensor's memory and host memory (either direction): memcpy for a
 * host tensor, a copy on the group's stream, waited for, for a device tensor. */
int rr__ddp_copy(const rr_ddp *d, const rr_ddp_tensor *t, void *dst, const void *src, size_t n) {
  if (n == 0) return RR_OK;
  if (t->device < 0) {
    memcpy(dst, src, n);
    return RR_OK;
  }
  int prev;
  RR__CHECK(rr__ddp_enter(d, &prev));
  int st = rr__cuda_memcpy_sync(dst, src, n, rr__ddp_stream(d));
  rr__ddp_leave(d, prev);
  return st;
}

/* "[64, 10]" */
void rr__ddp_shape_str(const rr_ddp_tensor *t, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < t->ndim && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", t->shape[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

/* ---------------------------------------------------------------------------------------------
 * Construction.
 */

static void rr__ddp_free(rr_ddp *d) {
  if (!d) return;
  rr__ddp_free_buckets(d);
  rr__ddp_free_arenas(d);
  rr__ddp_stage_free(d);
  if (d->names)
    for (int i = 0; i < d->nparams + d->nbuffers; i++) free(d->names[i]);
  free(d->names), free(d->params), free(d->buffers), free(d->pbucket), free(d->poffset);
  free(d->pready), free(d->ready_order);
  free(d);
}

int rr_ddp_init(rr_ddp **out, rr_pg *pg, const rr_ddp_tensor *params, int nparams,
                const rr_ddp_tensor *buffers, int nbuffers, const rr_ddp_options *opt) {
  if (out) *out = NULL;
  if (!out || !pg)
    return rr__set_error(RR_EINVAL, "rr_ddp_init: %s is NULL", out ? "the process group" : "ddp");
  rr_ddp *d = rr__calloc(1, sizeof *d);
  if (!d) return RR_ENOMEM;
  d->pg = pg;
  d->device = -1;
  d->rank = rr_get_rank(pg);
  d->world = rr_get_world_size(pg);
  d->root = rr_get_global_rank(pg, 0);
  d->opt = opt ? *opt : (rr_ddp_options)RR_DDP_OPTIONS_INIT;
  d->forward_param_sync = 1;
  d->recording = 1;
  /* Local checks first; their verdict travels with the first exchange (rr__ddp_hello, check.c). */
  int local = RR_OK;
  if (nparams < 0 || nbuffers < 0 || (nparams > 0 && !params) || (nbuffers > 0 && !buffers)) {
    local = rr__set_error(RR_EINVAL, "rr_ddp_init: %d params at %p, %d buffers at %p", nparams,
                          (const void *)params, nbuffers, (const void *)buffers);
    nparams = nparams < 0 || !params ? 0 : nparams;
    nbuffers = nbuffers < 0 || !buffers ? 0 : nbuffers;
  }
  if (local == RR_OK && ((int)d->opt.hook < 0 || (int)d->opt.hook > (int)RR_DDP_HOOK_BF16))
    local = rr__set_error(RR_EINVAL, "rr_ddp_init: unknown comm hook %d", (int)d->opt.hook);
  if (local == RR_OK && (!(d->opt.bucket_cap_mb >= 0) || !(d->opt.broadcast_bucket_mb >= 0)))
    local = rr__set_error(RR_EINVAL,
                          "rr_ddp_init: bucket_cap_mb (%g) and broadcast_bucket_mb "
                          "(%g) must be >= 0 (0: default)",
                          d->opt.bucket_cap_mb, d->opt.broadcast_bucket_mb);
  d->nparams = nparams;
  d->nbuffers = nbuffers;
  d->names = rr__calloc((size_t)nparams + (size_t)nbuffers + 1, sizeof *d->names);
  d->pbucket = rr__calloc((size_t)nparams + 1, sizeof *d->pbucket);
  d->poffset = rr__calloc((size_t)nparams + 1, sizeof *d->poffset);
  d->pready = rr__calloc((size_t)nparams + 1, 1);
  d->ready_order = rr__calloc((size_t)nparams + 1, sizeof *d->ready_order);
  if (!d->names || !d->pbucket || !d->poffset || !d->pready || !d->ready_order) {
    rr__ddp_free(d);
    return RR_ENOMEM;
  }
  if (local == RR_OK) local = rr__ddp_copy_descs(d, params, nparams, &d->params, 0, "params");
  if (local == RR_OK)
    local = rr__ddp_copy_descs(d, buffers, nbuffers, &d->buffers, nparams, "buffers");
  if (local == RR_OK) local = rr__ddp_pick_device(d);
  /* Descriptions that failed part-way still need arrays for the exchange's bookkeeping. */
  if (!d->params) d->params = calloc(1, sizeof *d->params);
  if (!d->buffers) d->buffers = calloc(1, sizeof *d->buffers);
  int st = rr__ddp_verify(d, local);
  if (st == RR_OK) {
    for (int i = 0; i < d->nparams; i++) d->ntrainable += d->params[i].grad != NULL;
    st = rr__ddp_make_buckets(d, NULL);
    if (st == RR_OK) st = rr__ddp_stage_init(d);
    if (st != RR_OK) {
      rr__prefix_error(st, "rank %d: rr_ddp_init: allocating buckets and the broadcast's staging",
                       d->rank);
      st = rr__ddp_abort(d, st); /* the others are about to wait in the broadcast */
    }
  }
  /* torch's _sync_module_states: parameters, then buffers, from rank 0; construction returns
   * with them written (it is not a step: one wait is nothing here). */
  if (st == RR_OK) {
    st = rr__ddp_bcast(d, d->params, d->nparams, "rr_ddp_init: parameters");
    if (st == RR_OK) st = rr__ddp_bcast(d, d->buffers, d->nbuffers, "rr_ddp_init: buffers");
    if (st == RR_OK && (st = rr__ddp_bcast_wait(d)) != RR_OK) {
      rr__prefix_error(st, "rank %d: rr_ddp_init: copying broadcast tensors to CUDA device %d",
                       d->rank, d->device);
      st = rr__ddp_abort(d, st);
    }
  }
  if (st != RR_OK) {
    char saved[RR__ERRMSG_MAX];
    snprintf(saved, sizeof saved, "%s", rr__error());
    rr__ddp_free(d);
    rr__copy_error(saved);
    return st;
  }
  *out = d;
  return RR_OK;
}

int rr_ddp_destroy(rr_ddp *d) {
  if (!d) return RR_OK;
  int st = d->broken;
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", d->broken_msg);
  for (int b = 0; b < d->nbuckets; b++) {
    rr__ddp_bucket *k = &d->buckets[b];
    if (!k->work) continue;
    int s = rr_work_wait(k->work, 0);
    if (s != RR_OK && st == RR_OK) {
      st = s;
      snprintf(saved, sizeof saved, "%s", rr__error());
    }
    rr_work_free(k->work);
    k->work = NULL;
  }
  rr__ddp_free(d);
  if (st != RR_OK) rr__copy_error(saved);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * The backward pass.
 */

int rr_ddp_grad_ready(rr_ddp *d, int i) {
  RR__CHECK(rr__ddp_check(d, "rr_ddp_grad_ready"));
  if (i < 0 || i >= d->nparams)
    return rr__set_error(RR_EINVAL, "rank %d: rr_ddp_grad_ready: parameter index %d out of 0..%d",
                         d->rank, i, d->nparams - 1);
  if (!d->params[i].grad)
    return rr__set_error(RR_EINVAL,
                         "rank %d: rr_ddp_grad_ready: params[%d] '%s' is frozen (grad == NULL): it "
                         "has no gradient to reduce",
                         d->rank, i, d->params[i].name);
  if (d->no_sync) return RR_OK; /* torch: no autograd hooks expected under no_sync */
  if (d->pready[i])
    return rr__set_error(RR_ESTATE,
                         "rank %d: Expected to mark a variable ready only once. Parameter at "
                         "index %d with name '%s' has been marked as ready twice. This means that "
                         "rr_ddp_grad_ready was called twice for it in this backward pass (call it "
                         "once, after its gradient is final).",
                         d->rank, i, d->params[i].name);
  int b = d->pbucket[i];
  rr__ddp_bucket *k = &d->buckets[b];
  int64_t t0 = rr__now_ns();
  size_t es = rr_dtype_size(k->dtype);
  char *slot = (char *)k->buf + d->poffset[i] * es;
  if (k->device >= 0) {
    /* A plain copy, queued on the group's stream behind the caller's work that computed the
     * gradient (when the caller uses that stream; else it must have synchronised). The 1/W
     * scaling is one kernel over the whole bucket when it is complete (rr__ddp_launch), not
     * one launch per parameter: an element's bits are the same either way. */
    int prev, st = rr__ddp_enter(d, &prev);
    /* The first copy in of a backward: after the last one's copies out of the buckets, on
     * whatever stream they ran (a wait on the device, not on the host). */
    if (st == RR_OK && d->idle_pending &&
        (st = rr__cuda_stream_wait_event(rr__ddp_stream(d), d->buckets_idle)) == RR_OK)
      d->idle_pending = 0;
    if (st == RR_OK)
      st = rr__cuda_memcpy_async(slot, d->params[i].grad, d->params[i].count * es,
                                 rr__ddp_stream(d));
    rr__ddp_leave(d, prev);
    if (st != RR_OK) {
      rr__prefix_error(st,
                       "rank %d: rr_ddp_grad_ready: copying params[%d] '%s' into bucket %d "
                       "(CUDA device %d)",
                       d->rank, i, d->params[i].name, b, k->device);
      return rr__ddp_abort(d, st);
    }
  } else {
    rr__ddp_copy_in(slot, d->params[i].grad, d->params[i].count, k->dtype,
                    d->opt.hook == RR_DDP_HOOK_NONE, d->world);
  }
  d->stats.copy_s += rr__ddp_elapsed(t0);
  d->pready[i] = 1;
  d->nmarked++;
  if (d->recording) d->ready_order[d->nrecorded++] = i;
  k->pending--;
  /* Launch in index order only: every rank issues the same all-reduces in the same order,
   * whatever order its gradients arrived in, so the collectives always match. */
  while (d->next_launch < d->nbuckets && d->buckets[d->next_launch].pending == 0) {
    RR__CHECK(rr__ddp_launch(d, d->next_launch));
    d->next_launch++;
  }
  return RR_OK;
}

/* Wait for every launched bucket; the first failure breaks the wrapper. */
static int rr__ddp_wait_launched(rr_ddp *d) {
  int st = RR_OK;
  char saved[RR__ERRMSG_MAX] = "";
  int64_t t0 = rr__now_ns();
  for (int b = 0; b < d->nbuckets; b++) {
    rr__ddp_bucket *k = &d->buckets[b];
    if (!k->work) continue;
    int s = rr_work_wait(k->work, 0);
    if (s != RR_OK && st == RR_OK) {
      st = s;
      snprintf(saved, sizeof saved, "rank %d: all-reduce of bucket %d: %s", d->rank, b,
               rr__error());
    }
    rr_work_free(k->work);
    k->work = NULL;
  }
  d->stats.sync_wait_s += rr__ddp_elapsed(t0);
  if (st != RR_OK) {
    rr__copy_error(saved);
    return rr__ddp_break(d, st);
  }
  return RR_OK;
}

/* torch's ensure_prior_reduction_finished() error, listing what never arrived. */
static int rr__ddp_unfinished(rr_ddp *d, const char *where) {
  char list[512] = "";
  size_t o = 0;
  int shown = 0, missing = 0;
  for (int i = 0; i < d->nparams; i++) {
    if (!d->params[i].grad || d->pready[i]) continue;
    missing++;
    if (o < sizeof list - 48) {
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", shown ? " " : "", i);
      if (d->params[i].name[0] && o < sizeof list - 48)
        o += (size_t)snprintf(list + o, sizeof list - o, " (%.24s)", d->params[i].name);
      shown++;
    }
  }
  if (shown < missing) snprintf(list + o, sizeof list - o, " ... (%d in all)", missing);
  if (missing == 0)
    rr__set_error(RR_ESTATE,
                  "rank %d: %s: Expected to have finished reduction in the prior iteration before "
                  "starting a new one: every gradient of the last backward was marked ready, but "
                  "rr_ddp_sync was not called to finish the reduction.",
                  d->rank, where);
  else
    rr__set_error(RR_ESTATE,
                  "rank %d: %s: Expected to have finished reduction in the prior iteration before "
                  "starting a new one. This error indicates that your module has parameters that "
                  "were not used in producing loss: rr_ddp_grad_ready was never called for them "
                  "in this backward. Mark every trainable parameter ready (with a zero gradient if "
                  "it was unused), or freeze it (grad = NULL). Parameter indices which did not "
                  "receive grad for rank %d: %s",
                  d->rank, where, d->rank, list);
  return rr__ddp_break(d, RR_ESTATE);
}

int rr_ddp_sync(rr_ddp *d) {
  RR__CHECK(rr__ddp_check(d, "rr_ddp_sync"));
  if (d->no_sync || d->ntrainable == 0) return RR_OK;
  if (d->nmarked == 0)
    return rr__set_error(RR_ESTATE,
                         "rank %d: rr_ddp_sync: no gradient was marked ready since the last "
                         "rr_ddp_sync (call rr_ddp_grad_ready for each parameter during backward)",
                         d->rank);
  RR__CHECK(rr__ddp_wait_launched(d));
  if (d->nmarked < d->ntrainable) return rr__ddp_unfinished(d, "rr_ddp_sync");
  int64_t t0 = rr__now_ns();
  int prev = -1, st = rr__ddp_enter(d, &prev), on_device = 0;
  for (int b = 0; b < d->nbuckets; b++) {
    rr__ddp_bucket *k = &d->buckets[b];
    size_t es = rr_dtype_size(k->dtype);
    int compressed = d->opt.hook == RR_DDP_HOOK_FP16 || d->opt.hook == RR_DDP_HOOK_BF16;
    rr_dtype wdt = d->opt.hook == RR_DDP_HOOK_FP16 ? RR_FLOAT16 : RR_BFLOAT16;
    /* A compressed device bucket is widened back into its own buffer (free since the
     * compression read it) by one kernel, then copied out like an uncompressed one: one launch
     * per bucket instead of one per parameter, the same bits per element. */
    if (k->device >= 0 && compressed && st == RR_OK)
      st = rr__cuda_ddp(RR__CUDA_DDP_DECOMPRESS, k->buf, k->comp, k->count, k->dtype, wdt, d->world,
                        rr__ddp_stream(d));
    for (int j = 0; j < k->nparams; j++) {
      const rr_ddp_tensor *p = &d->params[k->params[j]];
      size_t off = d->poffset[k->params[j]];
      if (k->device >= 0) {
        on_device = 1;
        if (st != RR_OK) break;
        st = rr__cuda_memcpy_async(p->grad, (const char *)k->buf + off * es, p->count * es,
                                   rr__ddp_stream(d));
      } else if (compressed) {
        rr__ddp_decompress(p->grad, (const uint16_t *)k->comp + off, p->count, k->dtype, wdt);
      } else {
        memcpy(p->grad, (const char *)k->buf + off * es, p->count * es);
      }
    }
    k->launched = 0;
    k->pending = k->nparams;
  }
  /* Device gradients are not waited for: the copies out are queued on the group's stream,
   * which rr_work_wait made wait for each bucket's all-reduce, so the caller's next work on
   * that stream (the optimizer) sees the averages, as torch's gradients are ready on the
   * current stream. A caller that reads them on the host or on another stream orders that
   * read itself (cudaStreamSynchronize, or an event). Synchronising here stalled the host
   * until the whole stream drained, every step. The event marks when the buckets may be
   * written again (rr_ddp_grad_ready). */
  if (on_device && st == RR_OK &&
      (st = rr__cuda_event_record(d->buckets_idle, rr__ddp_stream(d))) == RR_OK)
    d->idle_pending = 1;
  rr__ddp_leave(d, prev);
  if (st != RR_OK) {
    rr__prefix_error(st,
                     "rank %d: rr_ddp_sync: copying averaged gradients out of the buckets "
                     "(CUDA device %d)",
                     d->rank, d->device);
    return rr__ddp_abort(d, st);
  }
  d->stats.copy_s += rr__ddp_elapsed(t0);
  memset(d->pready, 0, (size_t)d->nparams);
  d->next_launch = 0;
  d->nmarked = 0;
  d->stats.syncs++;
  if (d->recording) { /* the first synchronised backward: its order drives the rebuild */
    d->recording = 0;
    d->rebuild_pending = !d->opt.no_rebuild && !d->rebuilt;
  }
  return RR_OK;
}

int rr_ddp_no_sync(rr_ddp *d, int enable) {
  RR__CHECK(rr__ddp_check(d, "rr_ddp_no_sync"));
  if (d->nmarked > 0)
    return rr__set_error(RR_ESTATE,
                         "rank %d: rr_ddp_no_sync: a backward pass is in progress (%d gradients "
                         "marked ready); switch between backward passes",
                         d->rank, d->nmarked);
  d->no_sync = !!enable;
  return RR_OK;
}

int rr_ddp_forward(rr_ddp *d) {
  RR__CHECK(rr__ddp_check(d, "rr_ddp_forward"));
  if (d->nmarked > 0) { /* a backward began and was never finished by rr_ddp_sync */
    RR__CHECK(rr__ddp_wait_launched(d));
    return rr__ddp_unfinished(d, "rr_ddp_forward");
  }
  if (d->rebuild_pending) RR__CHECK(rr__ddp_rebuild(d));
  if (d->opt.broadcast_buffers && d->nbuffers > 0 && d->forward_param_sync)
    RR__CHECK(rr__ddp_bcast(d, d->buffers, d->nbuffers, "rr_ddp_forward: buffers"));
  d->forward_param_sync = !d->no_sync;
  return RR_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Inspection.
 */

int rr_ddp_num_buckets(const rr_ddp *d) {
  return d ? d->nbuckets : -1;
}

int rr_ddp_get_bucket(const rr_ddp *d, int b, rr_ddp_bucket_info *info) {
  if (!d || !info) return rr__set_error(RR_EINVAL, "rr_ddp_get_bucket: NULL argument");
  if (b < 0 || b >= d->nbuckets)
    return rr__set_error(RR_EINVAL, "rr_ddp_get_bucket: bucket %d out of 0..%d", b,
                         d->nbuckets - 1);
  const rr__ddp_bucket *k = &d->buckets[b];
  *info = (rr_ddp_bucket_info){.nparams = k->nparams,
                               .params = k->params,
                               .count = k->count,
                               .dtype = k->dtype,
                               .device = k->device,
                               .limit_bytes = k->limit_bytes,
                               .launched = k->launched};
  return RR_OK;
}

int rr_ddp_get_stats(const rr_ddp *d, rr_ddp_stats *stats) {
  if (!d || !stats) return rr__set_error(RR_EINVAL, "rr_ddp_get_stats: NULL argument");
  *stats = d->stats;
  return RR_OK;
}
