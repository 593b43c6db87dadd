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
 * Only the public collectives are used (rr_all_reduce_async, rr_broadcast, rr_all_gather),
 * with roots given as global ranks, so the wrapper works on any group, subgroups included.
 *
 * CUDA gradients (device >= 0, in a build with CUDA and a device present; docs/ddp.md).
 * Buckets of device tensors live in device memory on that device, and the four element
 * helpers (scale into the bucket, divide, compress, decompress) become kernels
 * (cuda/ddp.cu, bit-identical to the host loops below) queued on the group's CUDA stream
 * (rr_pg_set_cuda_stream; NULL: the legacy default stream). The all-reduce of a device
 * bucket is the library's own: cuda/staging.c copies it through pinned host memory on the
 * same stream, so it is ordered after the kernels that filled the bucket, and reduces on
 * the host with the same code as host buckets. Hence the device path gives the host path's
 * bits exactly (by design; tests/test_ddp_elem.c checks the kernels' element functions here,
 * tests/test_ddp.c "gpu" the whole path on a GPU). Chosen over host buckets fed by
 * device-to-host copies because the bucket, the scaling and the hooks then stay where torch
 * keeps them, and a device-side ring (CUDA IPC, docs/cuda.md) will speed it up without
 * touching this file. Broadcasts and checkpoints copy device tensors through host memory.
 * Without CUDA in the build, or with no device at run time, a device tensor is refused at
 * rr_ddp_init saying which.
 */
#include "ringreduce/ddp.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "common/half.h"
#include "group/pg.h" /* rr__cuda_pg_stream: the stream the group's calls are ordered on */
#include "ddp/ddp_host.h"

#define RR__MIB (1024.0 * 1024.0)
/* torch: dist._DEFAULT_FIRST_BUCKET_BYTES, the default bucket_cap_mb, and the broadcast
 * coalescing size of DDP's _sync_module_states / _sync_buffers. */
#define RR__DDP_FIRST_BUCKET_BYTES ((size_t)1024 * 1024)
#define RR__DDP_DEFAULT_CAP_MB 25.0
#define RR__DDP_DEFAULT_BCAST_MB 250.0

typedef struct rr__ddp_bucket {
  rr_dtype dtype;
  int device;
  int nparams;
  int *params; /* layout order */
  size_t count;
  size_t limit_bytes;
  void *buf;   /* count elements of dtype: the gradients, then their average */
  void *comp;  /* FP16 / BF16 hooks: count 16-bit words, what goes on the wire */
               /* (both in device memory on `device` when device >= 0) */
  int pending; /* gradients still to arrive in this backward */
  int launched;
  rr_work *work;
} rr__ddp_bucket;

struct rr_ddp {
  rr_pg *pg;
  int rank, world, root; /* root: the global rank of group rank 0 (collectives want globals) */
  int device;            /* the CUDA device of this rank's device tensors, -1: none */
  rr_ddp_options opt;
  int nparams, nbuffers, ntrainable;
  rr_ddp_tensor *params, *buffers; /* copies of the descriptions, shapes normalised */
  char **names;                    /* owned copies, params then buffers */
  int *pbucket;                    /* [nparams]: bucket of a trainable param, else -1 */
  size_t *poffset;                 /* [nparams]: element offset in its bucket */
  unsigned char *pready;           /* [nparams]: marked ready in this backward */
  int nbuckets;
  rr__ddp_bucket *buckets;
  int next_launch; /* buckets [0, next_launch) are launched in this backward */
  int nmarked;     /* gradients marked ready in this backward */
  int no_sync;
  int forward_param_sync; /* torch's require_forward_param_sync: buffers sync at forward */
  int *ready_order;       /* the first synchronised backward's ready order */
  int nrecorded;
  int recording, rebuild_pending, rebuilt;
  int broken; /* sticky status: the reduction state or the group is unusable */
  char broken_msg[RR__ERRMSG_MAX];
  rr_ddp_stats stats;
};

void rr_ddp_options_init(rr_ddp_options *opt) {
  if (opt) *opt = (rr_ddp_options)RR_DDP_OPTIONS_INIT;
}

/* ---------------------------------------------------------------------------------------------
 * Small helpers.
 */

static int rr__is_float(rr_dtype d) {
  return d == RR_FLOAT16 || d == RR_BFLOAT16 || d == RR_FLOAT32 || d == RR_FLOAT64;
}

static double rr__elapsed(int64_t t0_ns) {
  return (double)(rr__now_ns() - t0_ns) * 1e-9;
}

/* Remember the current error as the wrapper's state: every later call returns it. Used when
 * the group failed or a backward's reduction was left unfinished, since nothing after either
 * could be trusted. */
static int rr__ddp_break(rr_ddp *d, int st) {
  d->broken = st;
  snprintf(d->broken_msg, sizeof d->broken_msg, "%s", rr__error());
  return st;
}

static int rr__ddp_check(const rr_ddp *d, const char *fn) {
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
static int rr__ddp_enter(const rr_ddp *d, int *prev) {
  *prev = -1;
  return d->device >= 0 ? rr__cuda_set_device(d->device, prev) : RR_OK;
}

static void rr__ddp_leave(const rr_ddp *d, int prev) {
  int ignored = -1;
  if (d->device >= 0 && prev >= 0 && prev != d->device) (void)rr__cuda_set_device(prev, &ignored);
}

static void *rr__ddp_stream(const rr_ddp *d) {
  return rr__cuda_pg_stream(d->pg);
}

/* A local failure (a CUDA error, no memory for buckets) in the middle of a step, a broadcast
 * or construction: this rank can no longer take part in the collectives the other ranks are
 * in or about to start, so the group is aborted (they fail at once, naming this rank,
 * instead of at the timeout) and the wrapper is broken. */
static int rr__ddp_abort(rr_ddp *d, int st) {
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error());
  (void)rr_abort(d->pg);
  rr__copy_error(saved);
  return rr__ddp_break(d, st);
}

/* Copy n bytes between a tensor's memory and host memory (either direction): memcpy for a
 * host tensor, a copy on the group's stream, waited for, for a device tensor. */
static int rr__ddp_copy(const rr_ddp *d, const rr_ddp_tensor *t, void *dst, const void *src,
                        size_t n) {
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
static void rr__shape_str(const rr_ddp_tensor *t, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < t->ndim && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", t->shape[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

/* double -> float rounding to odd: truncate, then set the last bit when inexact. A second
 * rounding to a format with at least 2 fewer mantissa bits (half: 11, bfloat16: 8, float has
 * 24) then rounds exactly as a direct double -> half/bfloat16 conversion would (torch's
 * .to(float16) on a float64 tensor rounds once). */
static float rr__f64_to_f32_odd(double x) {
  float f = (float)x;
  if (isnan(x) || (double)f == x) return f;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (fabs((double)f) > fabs(x)) u--; /* rounded away from zero: step back toward it */
  u |= 1u;
  memcpy(&f, &u, 4);
  return f;
}

static double rr__load(const void *p, size_t i, rr_dtype d) {
  switch (d) {
    case RR_FLOAT16:
      return rr__half_to_float(((const uint16_t *)p)[i]);
    case RR_BFLOAT16:
      return rr__bf16_to_float(((const uint16_t *)p)[i]);
    case RR_FLOAT32:
      return ((const float *)p)[i];
    default:
      return ((const double *)p)[i];
  }
}

/* The 16-bit wire type of a compression hook, rounded once from any float type. */
static uint16_t rr__to16(double x, rr_dtype src, rr_dtype wire) {
  float f = src == RR_FLOAT64 ? rr__f64_to_f32_odd(x) : (float)x; /* exact unless float64 */
  return wire == RR_FLOAT16 ? rr__float_to_half(f) : rr__float_to_bf16(f);
}
static float rr__from16(uint16_t h, rr_dtype wire) {
  return wire == RR_FLOAT16 ? rr__half_to_float(h) : rr__bf16_to_float(h);
}

/* Gradient -> bucket. mul: torch's `at::mul_out(bucket_view, grad, 1/W)`, computed in the
 * type's op-math (float for half/bfloat16/float, double for double) with the scalar cast to
 * it; mul == 0: a plain copy (hooks do their own scaling). */
void rr__ddp_copy_in(void *dst, const void *src, size_t n, rr_dtype d, int mul, int world) {
  if (!mul) {
    memcpy(dst, src, n * rr_dtype_size(d));
    return;
  }
  double s64 = 1.0 / (double)world;
  float s = (float)s64;
  switch (d) {
    case RR_FLOAT32:
      for (size_t i = 0; i < n; i++) ((float *)dst)[i] = ((const float *)src)[i] * s;
      break;
    case RR_FLOAT64:
      for (size_t i = 0; i < n; i++) ((double *)dst)[i] = ((const double *)src)[i] * s64;
      break;
    case RR_FLOAT16:
      for (size_t i = 0; i < n; i++)
        ((uint16_t *)dst)[i] = rr__float_to_half(rr__half_to_float(((const uint16_t *)src)[i]) * s);
      break;
    default: /* bfloat16 */
      for (size_t i = 0; i < n; i++)
        ((uint16_t *)dst)[i] = rr__float_to_bf16(rr__bf16_to_float(((const uint16_t *)src)[i]) * s);
      break;
  }
}

/* torch's allreduce_hook: `tensor.div_(world_size)`, a true division in op-math. */
void rr__ddp_divide(void *buf, size_t n, rr_dtype d, int world) {
  float w = (float)world;
  switch (d) {
    case RR_FLOAT32:
      for (size_t i = 0; i < n; i++) ((float *)buf)[i] /= w;
      break;
    case RR_FLOAT64:
      for (size_t i = 0; i < n; i++) ((double *)buf)[i] /= (double)world;
      break;
    case RR_FLOAT16:
      for (size_t i = 0; i < n; i++)
        ((uint16_t *)buf)[i] = rr__float_to_half(rr__half_to_float(((uint16_t *)buf)[i]) / w);
      break;
    default:
      for (size_t i = 0; i < n; i++)
        ((uint16_t *)buf)[i] = rr__float_to_bf16(rr__bf16_to_float(((uint16_t *)buf)[i]) / w);
      break;
  }
}

/* fp16_compress_hook / bf16_compress_hook, first half: `buffer.to(wire).div_(world_size)`:
 * round to the wire type, then divide in float and round again. */
void rr__ddp_compress(uint16_t *dst, const void *src, size_t n, rr_dtype d, rr_dtype wire,
                      int world) {
  float w = (float)world;
  for (size_t i = 0; i < n; i++) {
    uint16_t h = rr__to16(rr__load(src, i, d), d, wire);
    dst[i] = rr__to16((double)(rr__from16(h, wire) / w), RR_FLOAT32, wire);
  }
}

/* Second half: `decompressed.copy_(result)`, the wire value cast to the gradient's type. */
void rr__ddp_decompress(void *dst, const uint16_t *src, size_t n, rr_dtype d, rr_dtype wire) {
  for (size_t i = 0; i < n; i++) {
    float f = rr__from16(src[i], wire);
    switch (d) {
      case RR_FLOAT32:
        ((float *)dst)[i] = f;
        break;
      case RR_FLOAT64:
        ((double *)dst)[i] = f;
        break;
      case RR_FLOAT16:
        ((uint16_t *)dst)[i] = rr__float_to_half(f);
        break;
      default:
        ((uint16_t *)dst)[i] = rr__float_to_bf16(f);
        break;
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * Bucket assignment: torch's compute_bucket_assignment_by_size.
 */

/* Also returns each bucket's size limit (for rr_ddp_get_bucket). */
static int rr__ddp_assign(const rr_ddp_tensor *p, int n, double cap_mb, const int *ready,
                          int *order, int *bucket_end, size_t *limits_out, int *nbuckets) {
  if (!(cap_mb >= 0) || cap_mb > 1e9)
    return rr__set_error(RR_EINVAL, "bucket_cap_mb must be >= 0 (0: the default), got %g", cap_mb);
  if (n < 0 || (n > 0 && (!p || !order || !bucket_end)) || !nbuckets)
    return rr__set_error(RR_EINVAL, "rr_ddp_assign_buckets: NULL or negative argument");
  /* Limits: [1 MiB, cap, cap, ...] when the cap is left at its default, else [cap, ...]. */
  size_t limits[2];
  int nlimits;
  if (cap_mb == 0) {
    limits[0] = RR__DDP_FIRST_BUCKET_BYTES;
    limits[1] = (size_t)(RR__DDP_DEFAULT_CAP_MB * RR__MIB);
    nlimits = 2;
  } else {
    limits[0] = (size_t)(cap_mb * RR__MIB); /* torch: int(bucket_cap_mb * 1024 * 1024) */
    nlimits = 1;
  }
  int ntrain = 0;
  for (int i = 0; i < n; i++) ntrain += p[i].grad != NULL;
  /* The walk: index order, or the given ready order (checked to be a permutation). */
  int *walk = malloc(((size_t)n + 1) * sizeof *walk);
  int *bucket_of = malloc(((size_t)n + 1) * sizeof *bucket_of);
  /* Per bucket (at most one per trainable parameter): its key, size, limit, smallest index,
   * the rank of its emission (closing order, then the open ones). Per key: open bucket and
   * position in the limit list. */
  size_t *bsize = calloc((size_t)n + 1, sizeof *bsize),
         *blimit = calloc((size_t)n + 1, sizeof *blimit);
  int *bkey = calloc((size_t)n + 1, sizeof *bkey), *bmin = calloc((size_t)n + 1, sizeof *bmin);
  int *bemit = calloc((size_t)n + 1, sizeof *bemit),
      *sorted = calloc((size_t)n + 1, sizeof *sorted);
  int *kopen = calloc((size_t)n + 1, sizeof *kopen), *klim = calloc((size_t)n + 1, sizeof *klim);
  rr_dtype *kdtype = calloc((size_t)n + 1, sizeof *kdtype);
  int *kdev = calloc((size_t)n + 1, sizeof *kdev);
  int st = RR_OK;
  if (!walk || !bucket_of || !bsize || !blimit || !bkey || !bmin || !bemit || !sorted || !kopen ||
      !klim || !kdtype || !kdev) {
    st = rr__set_error(RR_ENOMEM, "rr_ddp_assign_buckets: out of memory for %d parameters", n);
    goto out;
  }
  if (ready) {
    memset(bucket_of, 0, (size_t)n * sizeof *bucket_of); /* used as "seen" here */
    for (int k = 0; k < ntrain; k++) {
      int i = ready[k];
      if (i < 0 || i >= n || !p[i].grad || bucket_of[i]) {
        st = rr__set_error(
            RR_EINVAL, "ready order entry %d is %d: not a trainable parameter listed once", k, i);
        goto out;
      }
      bucket_of[i] = 1;
      walk[k] = i;
    }
  } else {
    int k = 0;
    for (int i = 0; i < n; i++)
      if (p[i].grad) walk[k++] = i;
  }
  int nkeys = 0, nb = 0, nemitted = 0;
  for (int k = 0; k < ntrain; k++) {
    int i = walk[k], key = -1;
    for (int j = 0; j < nkeys; j++)
      if (kdtype[j] == p[i].dtype && kdev[j] == p[i].device) key = j;
    if (key < 0) {
      key = nkeys++;
      kdtype[key] = p[i].dtype;
      kdev[key] = p[i].device;
      kopen[key] = -1;
      klim[key] = 0;
    }
    if (kopen[key] < 0) { /* open a bucket for this key at its current limit */
      kopen[key] = nb;
      bkey[nb] = key;
      bsize[nb] = 0;
      blimit[nb] = limits[klim[key]];
      bmin[nb] = i;
      bemit[nb] = -1;
      nb++;
    }
    int b = kopen[key];
    bucket_of[i] = b;
    bsize[b] += p[i].count * rr_dtype_size(p[i].dtype);
    if (i < bmin[b]) bmin[b] = i;
    if (bsize[b] >= blimit[b]) { /* full, the crossing tensor included: emit, next limit */
      bemit[b] = nemitted++;
      kopen[key] = -1;
      if (klim[key] + 1 < nlimits) klim[key]++;
    }
  }
  /* Remaining open buckets, key by key. torch iterates an unordered_map here; with one
   * dtype/device (the usual case) there is only one, and with several we pick the order the
   * keys first appeared in, which every rank agrees on. */
  for (int key = 0; key < nkeys; key++)
    if (kopen[key] >= 0) bemit[kopen[key]] = nemitted++;
  for (int b = 0; b < nb; b++) sorted[bemit[b]] = b;
  if (!ready) {
    /* Sort by smallest index, then reverse: bucket 0 holds the last parameters. Insertion
     * sort: the emission order is nearly sorted already. */
    for (int a = 1; a < nb; a++) {
      int v = sorted[a], j = a - 1;
      while (j >= 0 && bmin[sorted[j]] > bmin[v]) sorted[j + 1] = sorted[j], j--;
      sorted[j + 1] = v;
    }
    for (int a = 0; a < nb / 2; a++) {
      int t = sorted[a];
      sorted[a] = sorted[nb - 1 - a];
      sorted[nb - 1 - a] = t;
    }
  }
  /* Members of each bucket in walk order. */
  int o = 0;
  for (int a = 0; a < nb; a++) {
    int b = sorted[a];
    for (int k = 0; k < ntrain; k++)
      if (bucket_of[walk[k]] == b) order[o++] = walk[k];
    bucket_end[a] = o;
    if (limits_out) limits_out[a] = blimit[b];
  }
  *nbuckets = nb;
out:
  free(walk), free(bucket_of), free(bsize), free(blimit), free(bkey), free(bmin);
  free(bemit), free(sorted), free(kopen), free(klim), free(kdtype), free(kdev);
  return st;
}

int rr_ddp_assign_buckets(const rr_ddp_tensor *params, int nparams, double bucket_cap_mb,
                          const int *ready_order, int *order, int *bucket_end, int *nbuckets) {
  return rr__ddp_assign(params, nparams, bucket_cap_mb, ready_order, order, bucket_end, NULL,
                        nbuckets);
}

static void rr__ddp_free_buckets(rr_ddp *d) {
  for (int b = 0; b < d->nbuckets; b++) {
    rr__ddp_bucket *k = &d->buckets[b];
    if (k->work) { /* never leave a collective writing into freed memory */
      (void)rr_work_wait(k->work, 0);
      rr_work_free(k->work);
    }
    if (k->device >= 0) {
      int prev;
      (void)rr__ddp_enter(d, &prev);
      rr__cuda_free(k->buf); /* cudaFree waits for the device: no kernel still uses it */
      rr__cuda_free(k->comp);
      rr__ddp_leave(d, prev);
    } else {
      free(k->buf), free(k->comp);
    }
    free(k->params);
  }
  free(d->buckets);
  d->buckets = NULL;
  d->nbuckets = 0;
}

/* (Re)build the buckets from an assignment; ready == NULL: construction order. */
static int rr__ddp_make_buckets(rr_ddp *d, const int *ready) {
  int n = d->nparams, nb = 0, st;
  int *order = malloc(((size_t)n + 1) * sizeof *order);
  int *end = malloc(((size_t)n + 1) * sizeof *end);
  size_t *limits = malloc(((size_t)n + 1) * sizeof *limits);
  if (!order || !end || !limits) {
    st = rr__set_error(RR_ENOMEM, "out of memory assigning %d parameters to buckets", n);
    goto out;
  }
  st = rr__ddp_assign(d->params, n, d->opt.bucket_cap_mb, ready, order, end, limits, &nb);
  if (st != RR_OK) goto out;
  rr__ddp_free_buckets(d);
  d->buckets = rr__calloc((size_t)nb + 1, sizeof *d->buckets);
  if (!d->buckets) {
    st = RR_ENOMEM;
    goto out;
  }
  d->nbuckets = nb;
  for (int i = 0; i < n; i++) d->pbucket[i] = -1;
  for (int b = 0, start = 0; b < nb; start = end[b], b++) {
    rr__ddp_bucket *k = &d->buckets[b];
    k->nparams = end[b] - start;
    k->params = rr__calloc((size_t)k->nparams, sizeof *k->params);
    if (!k->params) {
      st = RR_ENOMEM;
      goto out;
    }
    memcpy(k->params, order + start, (size_t)k->nparams * sizeof *k->params);
    k->dtype = d->params[k->params[0]].dtype;
    k->device = d->params[k->params[0]].device;
    k->limit_bytes = limits[b];
    for (int j = 0; j < k->nparams; j++) {
      int i = k->params[j];
      d->pbucket[i] = b;
      d->poffset[i] = k->count;
      k->count += d->params[i].count;
    }
    k->pending = k->nparams;
    size_t es = rr_dtype_size(k->dtype), elems = k->count ? k->count : 1;
    int hooked = d->opt.hook == RR_DDP_HOOK_FP16 || d->opt.hook == RR_DDP_HOOK_BF16;
    if (k->device >= 0) { /* on the tensors' device: filled and emptied by kernels */
      int prev;
      st = rr__ddp_enter(d, &prev);
      if (st == RR_OK) st = rr__cuda_malloc(&k->buf, elems * es);
      if (st == RR_OK && hooked) st = rr__cuda_malloc(&k->comp, elems * sizeof(uint16_t));
      rr__ddp_leave(d, prev);
      if (st != RR_OK) {
        rr__prefix_error(st, "bucket %d (%zu x %s) on CUDA device %d", b, k->count,
                         rr_dtype_name(k->dtype), k->device);
        goto out;
      }
      continue;
    }
    k->buf = calloc(elems, es);
    if (hooked) k->comp = calloc(elems, sizeof(uint16_t));
    if (!k->buf || (hooked && !k->comp)) {
      st = rr__set_error(RR_ENOMEM, "out of memory for bucket %d (%zu x %s)", b, k->count,
                         rr_dtype_name(k->dtype));
      goto out;
    }
  }
out:
  free(order), free(end), free(limits);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Coalesced broadcast from group rank 0: the tensors' bytes seen as one stream, cut into
 * chunks of at most broadcast_bucket_mb (torch: _broadcast_coalesced, 250 MiB), each packed
 * on rank 0, broadcast as bytes and unpacked elsewhere. Bytes, not elements: a copy needs no
 * dtype, so one call carries tensors of every dtype.
 */

/* Copy bytes [start, start + len) of the stream between the tensors and buf (host memory;
 * device tensors are copied to or from it on the group's stream). */
static int rr__stream_copy(const rr_ddp *d, const rr_ddp_tensor *t, int n, size_t start,
                           size_t len, char *buf, int pack) {
  size_t pos = 0;
  for (int i = 0; i < n && len > 0; i++) {
    size_t bytes = t[i].count * rr_dtype_size(t[i].dtype);
    if (start < pos + bytes && bytes > 0) {
      size_t off = start - pos, take = RR__MIN(bytes - off, len);
      char *mem = (char *)t[i].data + off;
      int st = pack ? rr__ddp_copy(d, &t[i], buf, mem, take)
                    : rr__ddp_copy(d, &t[i], mem, buf, take);
      if (st != RR_OK)
        return rr__prefix_error(st, "copying '%s' %s CUDA device %d", t[i].name,
                                pack ? "from" : "to", t[i].device);
      buf += take, start += take, len -= take;
    }
    pos += bytes;
  }
  return RR_OK;
}

static int rr__ddp_bcast(rr_ddp *d, const rr_ddp_tensor *t, int n, const char *what) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += t[i].count * rr_dtype_size(t[i].dtype);
  if (total == 0) return RR_OK;
  double mb =
      d->opt.broadcast_bucket_mb > 0 ? d->opt.broadcast_bucket_mb : RR__DDP_DEFAULT_BCAST_MB;
  size_t cap = (size_t)(mb * RR__MIB);
  if (cap == 0) cap = 1;
  size_t chunk = RR__MIN(cap, total);
  char *stage = malloc(chunk);
  if (!stage)
    return rr__set_error(RR_ENOMEM, "rank %d: %s: out of memory for a %zu-byte broadcast buffer",
                         d->rank, what, chunk);
  int st = RR_OK;
  for (size_t start = 0; start < total; start += chunk) {
    size_t len = RR__MIN(chunk, total - start);
    if (d->rank == 0 && (st = rr__stream_copy(d, t, n, start, len, stage, 1)) != RR_OK) {
      rr__prefix_error(st, "rank %d: %s", d->rank, what);
      st = rr__ddp_abort(d, st);
      break;
    }
    st = rr_broadcast(d->pg, stage, stage, len, RR_UINT8, d->root);
    if (st != RR_OK) {
      rr__prefix_error(st, "rank %d: %s: broadcast of bytes %zu..%zu of %zu from rank 0", d->rank,
                       what, start, start + len, total);
      st = rr__ddp_break(d, st);
      break;
    }
    if (d->rank != 0 && (st = rr__stream_copy(d, t, n, start, len, stage, 0)) != RR_OK) {
      rr__prefix_error(st, "rank %d: %s", d->rank, what);
      st = rr__ddp_abort(d, st);
      break;
    }
  }
  free(stage);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Construction.
 */

/* Where a tensor's memory is, against its `device`. A device tensor needs a build with CUDA,
 * a visible device with that number, and data / grad in cudaMalloc memory on it; a host
 * tensor (-1) must not be device memory, which the host loops would fault on. (Only a
 * build with CUDA on a machine with a device can see device memory; elsewhere none exists.)
 * Managed and pinned memory are host memory here, as for the collectives. */
static int rr__check_placement(const rr_ddp_tensor *t, const char *kind, int i, const char *nm) {
  const void *mem[2] = {t->data, t->grad};
  const char *memname[2] = {"data", "grad"};
  if (t->device < 0) {
    for (int k = 0; k < 2; k++) {
      int dev = -1;
      if (t->count > 0 && mem[k] && rr__cuda_ptr_device(mem[k], &dev))
        return rr__set_error(RR_EINVAL,
                             "%s[%d] '%s': device is -1 (host memory) but its %s is CUDA device "
                             "memory on device %d (set device = %d)",
                             kind, i, nm, memname[k], dev, dev);
    }
    return RR_OK;
  }
  if (!rr__cuda_built())
    return rr__set_error(RR_ENOTSUP,
                         "%s[%d] '%s' is on CUDA device %d but this library was built without "
                         "CUDA (configure with -DRR_CUDA=ON and a CUDA toolkit, see docs/cuda.md; "
                         "or keep the tensor in host memory with device = -1)",
                         kind, i, nm, t->device);
  int ndev = rr__cuda_device_count();
  if (ndev == 0)
    return rr__set_error(RR_ENOTSUP,
                         "%s[%d] '%s' is on CUDA device %d but no CUDA device is visible (the "
                         "CUDA runtime found no usable driver or GPU: check the driver and "
                         "CUDA_VISIBLE_DEVICES)",
                         kind, i, nm, t->device);
  if (t->device >= ndev)
    return rr__set_error(RR_EINVAL,
                         "%s[%d] '%s' is on CUDA device %d but only %d CUDA device%s visible",
                         kind, i, nm, t->device, ndev, ndev == 1 ? " is" : "s are");
  for (int k = 0; k < 2; k++) {
    int dev = -1;
    if (t->count == 0 || !mem[k] || (rr__cuda_ptr_device(mem[k], &dev) && dev == t->device))
      continue;
    char where[64];
    if (dev >= 0)
      snprintf(where, sizeof where, "on CUDA device %d", dev);
    else
      snprintf(where, sizeof where, "host memory (malloc, pinned or managed)");
    return rr__set_error(RR_EINVAL,
                         "%s[%d] '%s': device is %d but its %s is %s; a device tensor's data and "
                         "grad must be cudaMalloc memory on that device (host memory of any kind "
                         "is described with device = -1)",
                         kind, i, nm, t->device, memname[k], where);
  }
  return RR_OK;
}

/* Check one description alone; normalises the shape ([count] when ndim == 0). */
static int rr__check_tensor(rr_ddp_tensor *t, const char *kind, int i) {
  const char *nm = t->name ? t->name : "";
  if ((int)t->dtype < 0 || t->dtype >= RR_NUM_DTYPES)
    return rr__set_error(RR_EINVAL, "%s[%d] '%s': invalid dtype %d", kind, i, nm, (int)t->dtype);
  if (t->device < -1)
    return rr__set_error(RR_EINVAL,
                         "%s[%d] '%s': device %d (want -1 for host memory or a CUDA "
                         "device >= 0)",
                         kind, i, nm, t->device);
  if (t->count > 0 && !t->data)
    return rr__set_error(RR_EINVAL, "%s[%d] '%s': data is NULL for %zu elements", kind, i, nm,
                         t->count);
  RR__CHECK(rr__check_placement(t, kind, i, nm));
  if (t->grad && !rr__is_float(t->dtype))
    return rr__set_error(RR_EINVAL,
                         "%s[%d] '%s': only floating point parameters can have gradients (dtype "
                         "is %s; set grad = NULL to freeze it)",
                         kind, i, nm, rr_dtype_name(t->dtype));
  if (t->ndim < 0 || t->ndim > RR_DDP_MAX_DIMS)
    return rr__set_error(RR_EINVAL, "%s[%d] '%s': ndim %d out of 0..%d", kind, i, nm, t->ndim,
                         RR_DDP_MAX_DIMS);
  if (t->ndim == 0) {
    t->ndim = 1;
    t->shape[0] = (int64_t)t->count;
  }
  uint64_t prod = 1;
  for (int k = 0; k < t->ndim; k++) {
    if (t->shape[k] < 0)
      return rr__set_error(RR_EINVAL, "%s[%d] '%s': negative size %" PRId64, kind, i, nm,
                           t->shape[k]);
    prod *= (uint64_t)t->shape[k];
  }
  if (prod != t->count) {
    char s[160];
    rr__shape_str(t, s, sizeof s);
    return rr__set_error(RR_EINVAL,
                         "%s[%d] '%s': shape %s holds %" PRIu64 " elements, count is %zu", kind, i,
                         nm, s, prod, t->count);
  }
  for (int k = t->ndim; k < RR_DDP_MAX_DIMS; k++) t->shape[k] = 0;
  return RR_OK;
}

/* What every rank sends first: sizes, and whether its own checks passed (with the reason),
 * so that a rank with a bad description fails every rank instead of leaving them waiting in
 * the next collective. */
typedef struct rr__ddp_hello {
  int64_t nparams, nbuffers, status, pad;
  char msg[224];
} rr__ddp_hello;

#define RR__META 14 /* per tensor: kind, dtype, trainable, count, ndim, shape[8], on CUDA */

static void rr__meta(const rr_ddp_tensor *t, int kind, int64_t *m) {
  m[0] = kind;
  m[1] = t->dtype;
  m[2] = t->grad != NULL;
  m[3] = (int64_t)t->count;
  m[4] = t->ndim;
  for (int k = 0; k < RR_DDP_MAX_DIMS; k++) m[5 + k] = t->shape[k];
  /* Host or CUDA must agree: buckets are per (dtype, device kind), and every rank must build
   * the same ones. The device number may differ (one GPU per rank). */
  m[13] = t->device >= 0;
}

static void rr__meta_str(const int64_t *m, char *buf, size_t n) {
  size_t o = (size_t)snprintf(buf, n, "shape [");
  for (int k = 0; k < m[4] && k < RR_DDP_MAX_DIMS && o < n; k++)
    o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, k ? ", " : "", m[5 + k]);
  if (o < n)
    snprintf(buf + o, n - o, "], dtype %s%s%s", rr_dtype_name((rr_dtype)m[1]),
             m[0] == 0 ? (m[2] ? ", trainable" : ", frozen") : "",
             m[13] ? ", on a CUDA device" : "");
}

/* Every rank gathers every rank's description and compares, so all of them fail together
 * with a message naming the rank that differs and how (torch's wording for the counts). */
static int rr__ddp_verify(rr_ddp *d, int local_st) {
  int w = d->world, st;
  rr__ddp_hello mine = {.nparams = d->nparams, .nbuffers = d->nbuffers, .status = local_st};
  if (local_st != RR_OK) snprintf(mine.msg, sizeof mine.msg, "%s", rr__error());
  rr__ddp_hello *all = rr__calloc((size_t)w, sizeof *all);
  if (!all) return RR_ENOMEM; /* the others then time out naming this rank: nothing better */
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error());
  st = rr_all_gather(d->pg, &mine, all, sizeof mine, RR_UINT8);
  if (st != RR_OK) {
    free(all);
    return rr__prefix_error(st, "rank %d: rr_ddp_init: exchanging model descriptions", d->rank);
  }
  if (local_st != RR_OK) {
    free(all);
    rr__copy_error(saved);
    return rr__prefix_error(local_st, "rank %d: rr_ddp_init", d->rank);
  }
  for (int k = 0; k < w; k++)
    if (all[k].status != RR_OK) {
      st = rr__set_error((int)all[k].status, "rank %d: rr_ddp_init: rank %d failed: %s", d->rank, k,
                         all[k].msg);
      free(all);
      return st;
    }
  for (int k = 0; k < w; k++) {
    if (all[k].nparams != d->nparams) {
      st = rr__set_error(RR_EMISMATCH,
                         "DDP expects same model across all ranks, but Rank %d has %d params, "
                         "while rank %d has inconsistent %" PRId64 " params.",
                         d->rank, d->nparams, k, all[k].nparams);
      free(all);
      return st;
    }
    if (all[k].nbuffers != d->nbuffers) {
      st = rr__set_error(RR_EMISMATCH,
                         "DDP expects same model across all ranks, but Rank %d has %d buffers, "
                         "while rank %d has inconsistent %" PRId64 " buffers.",
                         d->rank, d->nbuffers, k, all[k].nbuffers);
      free(all);
      return st;
    }
  }
  free(all);
  /* Same counts everywhere: now every tensor's shape, dtype and trainability. */
  int nt = d->nparams + d->nbuffers;
  if (nt == 0) return RR_OK;
  size_t per = (size_t)nt * RR__META;
  int64_t *meta = rr__calloc(per * (size_t)(w + 1), sizeof *meta);
  if (!meta) return RR_ENOMEM;
  int64_t *own = meta + per * (size_t)w;
  for (int i = 0; i < d->nparams; i++) rr__meta(&d->params[i], 0, own + (size_t)i * RR__META);
  for (int i = 0; i < d->nbuffers; i++)
    rr__meta(&d->buffers[i], 1, own + (size_t)(d->nparams + i) * RR__META);
  st = rr_all_gather(d->pg, own, meta, per, RR_INT64);
  if (st != RR_OK) {
    free(meta);
    return rr__prefix_error(st, "rank %d: rr_ddp_init: exchanging shapes", d->rank);
  }
  /* Rank 0 is authoritative (its values are broadcast next); report the lowest rank that
   * differs from it, the same sentence on every rank. */
  for (int k = 1; k < w; k++)
    for (int i = 0; i < nt; i++) {
      const int64_t *a = meta + (size_t)k * per + (size_t)i * RR__META,
                    *z = meta + (size_t)i * RR__META;
      if (memcmp(a, z, RR__META * sizeof *a) == 0) continue;
      int is_param = i < d->nparams, idx = is_param ? i : i - d->nparams;
      const char *nm = is_param ? d->params[idx].name : d->buffers[idx].name;
      char sa[200], sz[200];
      rr__meta_str(a, sa, sizeof sa);
      rr__meta_str(z, sz, sizeof sz);
      st = rr__set_error(RR_EMISMATCH,
                         "DDP expects same model across all ranks, but rank %d's %s[%d]%s%s%s has "
                         "%s, while rank 0's has %s (seen by rank %d)",
                         k, is_param ? "params" : "buffers", idx, nm[0] ? " '" : "", nm,
                         nm[0] ? "'" : "", sa, sz, d->rank);
      free(meta);
      return st;
    }
  free(meta);
  return RR_OK;
}

static int rr__ddp_copy_descs(rr_ddp *d, const rr_ddp_tensor *src, int n, rr_ddp_tensor **dst,
                              int name_base, const char *kind) {
  *dst = rr__calloc((size_t)n + 1, sizeof **dst);
  if (!*dst) return RR_ENOMEM;
  for (int i = 0; i < n; i++) {
    (*dst)[i] = src[i];
    d->names[name_base + i] = rr__strdup(src[i].name ? src[i].name : "");
    if (!d->names[name_base + i]) return RR_ENOMEM;
    (*dst)[i].name = d->names[name_base + i];
    if (strcmp(kind, "buffers") == 0 && src[i].grad)
      return rr__set_error(RR_EINVAL,
                           "buffers[%d] '%s': a buffer has no gradient (grad must be "
                           "NULL)",
                           i, (*dst)[i].name);
    RR__CHECK(rr__check_tensor(&(*dst)[i], kind, i));
  }
  return RR_OK;
}

/* The one CUDA device this rank's device tensors are on: one device per process, as torch's
 * DDP with device_ids=[d] (the group's stream, on which all device work is queued, belongs
 * to one device). */
static int rr__ddp_pick_device(rr_ddp *d) {
  const rr_ddp_tensor *first = NULL;
  const char *fkind = "";
  int fi = -1;
  for (int pass = 0; pass < 2; pass++) {
    const rr_ddp_tensor *t = pass ? d->buffers : d->params;
    const char *kind = pass ? "buffers" : "params";
    for (int i = 0; i < (pass ? d->nbuffers : d->nparams); i++) {
      if (t[i].device < 0) continue;
      if (!first) {
        first = &t[i], fkind = kind, fi = i;
      } else if (t[i].device != first->device) {
        return rr__set_error(RR_ENOTSUP,
                             "%s[%d] '%s' is on CUDA device %d but %s[%d] '%s' on CUDA device "
                             "%d: a rank's tensors must be on one CUDA device (one process per "
                             "GPU, as torch's DDP with device_ids=[device])",
                             fkind, fi, first->name, first->device, kind, i, t[i].name,
                             t[i].device);
      }
    }
  }
  d->device = first ? first->device : -1;
  return RR_OK;
}

static void rr__ddp_free(rr_ddp *d) {
  if (!d) return;
  rr__ddp_free_buckets(d);
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
  /* Local checks first; their verdict travels with the first exchange (see rr__ddp_hello). */
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
    if (st != RR_OK) {
      rr__prefix_error(st, "rank %d: rr_ddp_init: allocating buckets", d->rank);
      st = rr__ddp_abort(d, st); /* the others are about to wait in the broadcast */
    }
  }
  /* torch's _sync_module_states: parameters, then buffers, from rank 0. */
  if (st == RR_OK) {
    st = rr__ddp_bcast(d, d->params, d->nparams, "rr_ddp_init: parameters");
    if (st == RR_OK) st = rr__ddp_bcast(d, d->buffers, d->nbuffers, "rr_ddp_init: buffers");
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

static int rr__ddp_launch(rr_ddp *d, int b) {
  rr__ddp_bucket *k = &d->buckets[b];
  void *wire = k->buf;
  rr_dtype wdt = k->dtype;
  int64_t t0 = rr__now_ns();
  int compressed = d->opt.hook == RR_DDP_HOOK_FP16 || d->opt.hook == RR_DDP_HOOK_BF16;
  if (compressed) {
    wdt = d->opt.hook == RR_DDP_HOOK_FP16 ? RR_FLOAT16 : RR_BFLOAT16;
    wire = k->comp;
  }
  if (k->device >= 0 && d->opt.hook != RR_DDP_HOOK_NONE) {
    /* The same work as below as a kernel on the group's stream, which the all-reduce's copy
     * of the bucket to the host waits for. */
    int prev, st = rr__ddp_enter(d, &prev);
    if (st == RR_OK)
      st = d->opt.hook == RR_DDP_HOOK_ALLREDUCE
               ? rr__cuda_ddp(RR__CUDA_DDP_DIVIDE, k->buf, NULL, k->count, k->dtype, k->dtype,
                              d->world, rr__ddp_stream(d))
               : rr__cuda_ddp(RR__CUDA_DDP_COMPRESS, k->comp, k->buf, k->count, k->dtype, wdt,
                              d->world, rr__ddp_stream(d));
    rr__ddp_leave(d, prev);
    if (st != RR_OK) {
      rr__prefix_error(st, "rank %d: rr_ddp_grad_ready: comm hook on bucket %d (CUDA device %d)",
                       d->rank, b, k->device);
      return rr__ddp_abort(d, st);
    }
  } else if (d->opt.hook == RR_DDP_HOOK_ALLREDUCE) {
    rr__ddp_divide(k->buf, k->count, k->dtype, d->world);
  } else if (compressed) {
    rr__ddp_compress(k->comp, k->buf, k->count, k->dtype, wdt, d->world);
  } /* no hook: scaled while copied in */
  d->stats.copy_s += rr__elapsed(t0);
  int st = rr_all_reduce_async(d->pg, wire, wire, k->count, wdt, RR_SUM, &k->work);
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: rr_ddp_grad_ready: all-reduce of bucket %d (%zu x %s)", d->rank,
                     b, k->count, rr_dtype_name(wdt));
    return rr__ddp_break(d, st);
  }
  k->launched = 1;
  d->stats.buckets_reduced++;
  d->stats.bytes_reduced += (double)k->count * (double)rr_dtype_size(wdt);
  return RR_OK;
}

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
    /* Queued on the group's stream behind the caller's work that computed the gradient
     * (when the caller uses that stream; else it must have synchronised). */
    int prev, st = rr__ddp_enter(d, &prev);
    if (st == RR_OK)
      st = d->opt.hook == RR_DDP_HOOK_NONE
               ? rr__cuda_ddp(RR__CUDA_DDP_SCALE, slot, d->params[i].grad, d->params[i].count,
                              k->dtype, k->dtype, d->world, rr__ddp_stream(d))
               : rr__cuda_memcpy_async(slot, d->params[i].grad, d->params[i].count * es,
                                       rr__ddp_stream(d));
    rr__ddp_leave(d, prev);
    if (st != RR_OK) {
      rr__prefix_error(st, "rank %d: rr_ddp_grad_ready: copying params[%d] '%s' into bucket %d "
                       "(CUDA device %d)", d->rank, i, d->params[i].name, b, k->device);
      return rr__ddp_abort(d, st);
    }
  } else {
    rr__ddp_copy_in(slot, d->params[i].grad, d->params[i].count, k->dtype,
                d->opt.hook == RR_DDP_HOOK_NONE, d->world);
  }
  d->stats.copy_s += rr__elapsed(t0);
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
  d->stats.sync_wait_s += rr__elapsed(t0);
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
    for (int j = 0; j < k->nparams; j++) {
      const rr_ddp_tensor *p = &d->params[k->params[j]];
      size_t off = d->poffset[k->params[j]];
      if (k->device >= 0) {
        on_device = 1;
        if (st != RR_OK) break;
        st = compressed ? rr__cuda_ddp(RR__CUDA_DDP_DECOMPRESS, p->grad,
                                       (const uint16_t *)k->comp + off, p->count, k->dtype, wdt,
                                       d->world, rr__ddp_stream(d))
                        : rr__cuda_memcpy_async(p->grad, (const char *)k->buf + off * es,
                                                p->count * es, rr__ddp_stream(d));
      } else if (compressed) {
        rr__ddp_decompress(p->grad, (const uint16_t *)k->comp + off, p->count, k->dtype, wdt);
      } else {
        memcpy(p->grad, (const char *)k->buf + off * es, p->count * es);
      }
    }
    k->launched = 0;
    k->pending = k->nparams;
  }
  /* Device gradients: written when this returns, as host ones are, whatever stream the
   * caller reads them on next. */
  if (on_device && st == RR_OK) st = rr__cuda_stream_sync(rr__ddp_stream(d));
  rr__ddp_leave(d, prev);
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: rr_ddp_sync: copying averaged gradients out of the buckets "
                     "(CUDA device %d)", d->rank, d->device);
    return rr__ddp_abort(d, st);
  }
  d->stats.copy_s += rr__elapsed(t0);
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

/* torch's Reducer::rebuild_buckets: rank 0's ready order, broadcast so all ranks agree. */
static int rr__ddp_rebuild(rr_ddp *d) {
  int n = d->ntrainable, st;
  int32_t *ord = rr__calloc((size_t)n + 1, sizeof *ord);
  int *ready = rr__calloc((size_t)n + 1, sizeof *ready);
  if (!ord || !ready) {
    free(ord), free(ready);
    return RR_ENOMEM;
  }
  for (int k = 0; k < n; k++) ord[k] = d->ready_order[k];
  st = rr_broadcast(d->pg, ord, ord, (size_t)n, RR_INT32, d->root);
  if (st != RR_OK) {
    free(ord), free(ready);
    rr__prefix_error(st, "rank %d: rr_ddp_forward: broadcasting the bucket order", d->rank);
    return rr__ddp_break(d, st);
  }
  for (int k = 0; k < n; k++) ready[k] = ord[k];
  st = rr__ddp_make_buckets(d, ready);
  free(ord), free(ready);
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: rr_ddp_forward: rebuilding buckets from rank 0's order",
                     d->rank);
    return rr__ddp_abort(d, st);
  }
  d->rebuild_pending = 0;
  d->rebuilt = 1;
  d->stats.rebuilt = 1;
  return RR_OK;
}

int rr_ddp_broadcast_buffers(rr_ddp *d) {
  RR__CHECK(rr__ddp_check(d, "rr_ddp_broadcast_buffers"));
  return rr__ddp_bcast(d, d->buffers, d->nbuffers, "rr_ddp_broadcast_buffers");
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
 * Checkpoints.
 *
 *   "RRDDPCK1" | u32 version 1 | u32 nparams | u32 nbuffers | u32 0
 *   per tensor: u32 dtype | u32 ndim | u64 count | i64 shape[ndim] | u32 namelen | name
 *   per tensor: count * dtype-size bytes
 *   u64 FNV-1a of everything before
 */

#define RR__CKPT_MAGIC "RRDDPCK1"

static uint64_t rr__fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

typedef struct rr__wfile {
  FILE *fp;
  uint64_t h;
  int err; /* errno of a failed write */
  int st;  /* a failure to read a device tensor (its text in the last error) */
} rr__wfile;

static void rr__w(rr__wfile *w, const void *p, size_t n) {
  if (w->err || n == 0) return;
  if (fwrite(p, 1, n, w->fp) != n) w->err = errno ? errno : EIO;
  w->h = rr__fnv(w->h, p, n);
}

static void rr__w_tensor_hdr(rr__wfile *w, const rr_ddp_tensor *t) {
  uint32_t dt = (uint32_t)t->dtype, nd = (uint32_t)t->ndim, nl = (uint32_t)strlen(t->name);
  uint64_t c = t->count;
  rr__w(w, &dt, 4), rr__w(w, &nd, 4), rr__w(w, &c, 8);
  rr__w(w, t->shape, (size_t)t->ndim * 8);
  rr__w(w, &nl, 4), rr__w(w, t->name, nl);
}

/* A tensor's data; a device tensor's through a host copy. */
static void rr__w_data(const rr_ddp *d, rr__wfile *w, const rr_ddp_tensor *t) {
  size_t n = t->count * rr_dtype_size(t->dtype);
  if (t->device < 0 || n == 0) {
    rr__w(w, t->data, n);
    return;
  }
  if (w->err || w->st) return;
  void *h = malloc(n);
  if (!h) {
    w->st = rr__set_error(RR_ENOMEM, "out of memory for a %zu-byte host copy of '%s'", n, t->name);
    return;
  }
  int st = rr__ddp_copy(d, t, h, t->data, n);
  if (st == RR_OK)
    rr__w(w, h, n);
  else
    w->st = rr__prefix_error(st, "copying '%s' from CUDA device %d", t->name, t->device);
  free(h);
}

/* Rank 0's half of a save: a temporary file, flushed to disk, renamed over path. */
static int rr__ddp_write(rr_ddp *d, const char *path) {
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp)
    return rr__set_error(RR_EINVAL, "checkpoint path too long");
  rr__wfile w = {.fp = fopen(tmp, "wb"), .h = 14695981039346656037ull};
  if (!w.fp) return rr__set_error(RR_ESYS, "cannot create %s: %s", tmp, strerror(errno));
  uint32_t head[4] = {1, (uint32_t)d->nparams, (uint32_t)d->nbuffers, 0};
  rr__w(&w, RR__CKPT_MAGIC, 8);
  rr__w(&w, head, sizeof head);
  for (int i = 0; i < d->nparams; i++) rr__w_tensor_hdr(&w, &d->params[i]);
  for (int i = 0; i < d->nbuffers; i++) rr__w_tensor_hdr(&w, &d->buffers[i]);
  for (int i = 0; i < d->nparams; i++) rr__w_data(d, &w, &d->params[i]);
  for (int i = 0; i < d->nbuffers; i++) rr__w_data(d, &w, &d->buffers[i]);
  uint64_t h = w.h;
  rr__w(&w, &h, 8);
  if (!w.err && fflush(w.fp) != 0) w.err = errno;
  if (!w.err && fsync(fileno(w.fp)) != 0) w.err = errno;
  if (fclose(w.fp) != 0 && !w.err) w.err = errno;
  if (w.st) {
    unlink(tmp);
    return rr__prefix_error(w.st, "writing %s", path);
  }
  if (!w.err && rename(tmp, path) != 0) w.err = errno;
  if (w.err) {
    unlink(tmp);
    return rr__set_error(RR_ESYS, "writing %s: %s", path, strerror(w.err));
  }
  return RR_OK;
}

typedef struct rr__rfile {
  const unsigned char *p;
  size_t n, off;
} rr__rfile;

static int rr__r(rr__rfile *r, void *dst, size_t n) {
  if (r->n - r->off < n) return -1;
  memcpy(dst, r->p + r->off, n);
  r->off += n;
  return 0;
}

/* A tensor's data, the length already checked; to a device tensor by a copy. */
static int rr__r_data(const rr_ddp *d, rr__rfile *r, const rr_ddp_tensor *t) {
  size_t n = t->count * rr_dtype_size(t->dtype);
  int st = rr__ddp_copy(d, t, t->data, r->p + r->off, n);
  r->off += n;
  if (st != RR_OK)
    return rr__prefix_error(st, "copying '%s' to CUDA device %d", t->name, t->device);
  return RR_OK;
}

/* Check one stored tensor header against the model's tensor. */
static int rr__ddp_read_hdr(rr__rfile *r, const rr_ddp_tensor *t, const char *kind, int i,
                            const char *path) {
  uint32_t dt, nd, nl;
  uint64_t c;
  int64_t shape[RR_DDP_MAX_DIMS] = {0};
  char name[256];
  if (rr__r(r, &dt, 4) || rr__r(r, &nd, 4) || rr__r(r, &c, 8) || nd > RR_DDP_MAX_DIMS ||
      rr__r(r, shape, (size_t)nd * 8) || rr__r(r, &nl, 4))
    return rr__set_error(RR_EPROTO, "%s is truncated or corrupt (in the header of %s[%d])", path,
                         kind, i);
  size_t keep = RR__MIN((size_t)nl, sizeof name - 1);
  if (r->n - r->off < nl)
    return rr__set_error(RR_EPROTO, "%s is truncated (name of %s[%d])", path, kind, i);
  /* Names are compared in full; the copy is only for the message. */
  int same_name =
      !nl || !t->name[0] || (nl == strlen(t->name) && memcmp(r->p + r->off, t->name, nl) == 0);
  memcpy(name, r->p + r->off, keep);
  name[keep] = '\0';
  r->off += nl;
  rr_ddp_tensor f = {.name = name, .count = (size_t)c, .dtype = (rr_dtype)dt, .ndim = (int)nd};
  memcpy(f.shape, shape, sizeof shape);
  int same = dt == (uint32_t)t->dtype && c == t->count && nd == (uint32_t)t->ndim &&
             memcmp(shape, t->shape, (size_t)nd * 8) == 0;
  if (!same || !same_name) {
    char a[160], b[160];
    rr__shape_str(&f, a, sizeof a);
    rr__shape_str(t, b, sizeof b);
    return rr__set_error(RR_EMISMATCH,
                         "%s does not fit the model: its %s[%d] is '%s' %s %s, the model's is "
                         "'%s' %s %s",
                         path, kind, i, name, a,
                         dt < RR_NUM_DTYPES ? rr_dtype_name((rr_dtype)dt) : "invalid-dtype",
                         t->name, b, rr_dtype_name(t->dtype));
  }
  return RR_OK;
}

/* Rank 0's half of a load: read all, check all, and only then overwrite the model. */
static int rr__ddp_read(rr_ddp *d, const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return rr__set_error(RR_ESYS, "cannot open %s: %s", path, strerror(errno));
  unsigned char *buf = NULL;
  size_t n = 0, cap = 0;
  int st = RR_OK;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 1 << 16;
      unsigned char *nb = realloc(buf, cap);
      if (!nb) {
        st = rr__set_error(RR_ENOMEM, "out of memory reading %s", path);
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, fp);
    n += got;
    if (got == 0) {
      if (ferror(fp)) st = rr__set_error(RR_ESYS, "reading %s: %s", path, strerror(errno));
      break;
    }
  }
  fclose(fp);
  if (st != RR_OK) {
    free(buf);
    return st;
  }
  rr__rfile r = {.p = buf, .n = n};
  char magic[8];
  uint32_t head[4];
  uint64_t want;
  if (n < 8 + sizeof head + 8 || rr__r(&r, magic, 8) || memcmp(magic, RR__CKPT_MAGIC, 8) != 0) {
    free(buf);
    return rr__set_error(RR_EPROTO, "%s is not a ringreduce DDP checkpoint (no %s header)", path,
                         RR__CKPT_MAGIC);
  }
  memcpy(&want, buf + n - 8, 8);
  if (rr__fnv(14695981039346656037ull, buf, n - 8) != want) {
    free(buf);
    return rr__set_error(RR_EPROTO, "%s is corrupt: its checksum does not match its contents",
                         path);
  }
  r.n = n - 8;
  (void)rr__r(&r, head, sizeof head);
  if (head[0] != 1)
    st = rr__set_error(RR_EPROTO, "%s: checkpoint version %u (want 1)", path, head[0]);
  else if (head[1] != (uint32_t)d->nparams || head[2] != (uint32_t)d->nbuffers)
    st = rr__set_error(RR_EMISMATCH,
                       "%s does not fit the model: it holds %u parameters and %u buffers, the "
                       "model has %d and %d",
                       path, head[1], head[2], d->nparams, d->nbuffers);
  for (int i = 0; st == RR_OK && i < d->nparams; i++)
    st = rr__ddp_read_hdr(&r, &d->params[i], "params", i, path);
  for (int i = 0; st == RR_OK && i < d->nbuffers; i++)
    st = rr__ddp_read_hdr(&r, &d->buffers[i], "buffers", i, path);
  size_t data = 0;
  for (int i = 0; i < d->nparams; i++)
    data += d->params[i].count * rr_dtype_size(d->params[i].dtype);
  for (int i = 0; i < d->nbuffers; i++)
    data += d->buffers[i].count * rr_dtype_size(d->buffers[i].dtype);
  if (st == RR_OK && r.n - r.off != data)
    st = rr__set_error(RR_EPROTO, "%s: %zu bytes of data where the model needs %zu", path,
                       r.n - r.off, data);
  for (int i = 0; st == RR_OK && i < d->nparams; i++) st = rr__r_data(d, &r, &d->params[i]);
  for (int i = 0; st == RR_OK && i < d->nbuffers; i++) st = rr__r_data(d, &r, &d->buffers[i]);
  free(buf);
  return st;
}

/* Rank 0's verdict, so every rank returns the same status and cause. */
typedef struct rr__ddp_verdict {
  int64_t status;
  char msg[504];
} rr__ddp_verdict;

static int rr__ddp_share_verdict(rr_ddp *d, int st, const char *what) {
  rr__ddp_verdict v = {.status = st};
  if (st != RR_OK) snprintf(v.msg, sizeof v.msg, "%s", rr__error());
  int s = rr_broadcast(d->pg, &v, &v, sizeof v, RR_UINT8, d->root);
  if (s != RR_OK) {
    rr__prefix_error(s, "rank %d: %s: waiting for rank 0", d->rank, what);
    return rr__ddp_break(d, s);
  }
  if (v.status != RR_OK)
    return rr__set_error((int)v.status, "rank %d: %s: rank 0 failed: %s", d->rank, what, v.msg);
  return RR_OK;
}

static int rr__ddp_idle(rr_ddp *d, const char *fn) {
  RR__CHECK(rr__ddp_check(d, fn));
  if (d->nmarked > 0)
    return rr__set_error(RR_ESTATE,
                         "rank %d: %s: a backward pass is in progress (call "
                         "rr_ddp_sync first)",
                         d->rank, fn);
  return RR_OK;
}

int rr_ddp_save(rr_ddp *d, const char *path) {
  RR__CHECK(rr__ddp_idle(d, "rr_ddp_save"));
  int st = RR_OK;
  if (d->rank == 0) st = path ? rr__ddp_write(d, path) : rr__set_error(RR_EINVAL, "path is NULL");
  return rr__ddp_share_verdict(d, st, "rr_ddp_save");
}

int rr_ddp_load(rr_ddp *d, const char *path) {
  RR__CHECK(rr__ddp_idle(d, "rr_ddp_load"));
  int st = RR_OK;
  if (d->rank == 0) st = path ? rr__ddp_read(d, path) : rr__set_error(RR_EINVAL, "path is NULL");
  RR__CHECK(rr__ddp_share_verdict(d, st, "rr_ddp_load"));
  RR__CHECK(rr__ddp_bcast(d, d->params, d->nparams, "rr_ddp_load: parameters"));
  return rr__ddp_bcast(d, d->buffers, d->nbuffers, "rr_ddp_load: buffers");
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
