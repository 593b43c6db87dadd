/* DDP construction checks: each rank's own descriptions first (dtype, shape, where the
 * memory is, one CUDA device per rank), then every rank's against rank 0's, so that a model
 * that differs anywhere fails every rank at rr_ddp_init with a message naming the rank and the
 * difference, instead of hanging or reducing mismatched buckets later. Apart from ddp.c
 * because it runs once per wrapper and is mostly the wording of errors (torch's, where torch
 * has one); rr_ddp_init only needs its verdict.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "ddp/ddp_internal.h"

static int rr__is_float(rr_dtype d) {
  return d == RR_FLOAT16 || d == RR_BFLOAT16 || d == RR_FLOAT32 || d == RR_FLOAT64;
}

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
      int dev = -1, is_dev = t->count > 0 && mem[k] ? rr__cuda_ptr_device(mem[k], &dev) : 0;
      if (is_dev < 0) return rr__prefix_error(RR_ECUDA, "%s[%d] '%s': %s", kind, i, nm, memname[k]);
      if (is_dev)
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
                         "%s[%d] '%s' is on CUDA device %d but only %d CUDA device%s visible", kind,
                         i, nm, t->device, ndev, ndev == 1 ? " is" : "s are");
  for (int k = 0; k < 2; k++) {
    int dev = -1, is_dev = t->count > 0 && mem[k] ? rr__cuda_ptr_device(mem[k], &dev) : 0;
    if (is_dev < 0) return rr__prefix_error(RR_ECUDA, "%s[%d] '%s': %s", kind, i, nm, memname[k]);
    if (t->count == 0 || !mem[k] || (is_dev && dev == t->device)) continue;
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
    rr__ddp_shape_str(t, s, sizeof s);
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
int rr__ddp_verify(rr_ddp *d, int local_st) {
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

int rr__ddp_copy_descs(rr_ddp *d, const rr_ddp_tensor *src, int n, rr_ddp_tensor **dst,
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
int rr__ddp_pick_device(rr_ddp *d) {
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
