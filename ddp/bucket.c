/* DDP gradient buckets: which trainable parameters share a bucket (torch's
 * compute_bucket_assignment_by_size, public as rr_ddp_assign_buckets so tests and tools can
 * see a layout without a group), the buckets' memory on the host or on the tensors' CUDA
 * device, and the one rebuild from rank 0's gradient-ready order after the first
 * synchronised backward (torch's Reducer::rebuild_buckets). Apart from ddp.c because the
 * layout is decided here once (twice with the rebuild) and only read by the iteration:
 * pbucket, poffset and each bucket's members are all it looks at.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "ddp/ddp_internal.h"

/* torch: dist._DEFAULT_FIRST_BUCKET_BYTES and the default bucket_cap_mb. */
#define RR__DDP_FIRST_BUCKET_BYTES ((size_t)1024 * 1024)
#define RR__DDP_DEFAULT_CAP_MB 25.0

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

/* ---------------------------------------------------------------------------------------------
 * The buckets themselves: memory where the tensors are, made at construction and once more at
 * the rebuild, which replaces the layout whole rather than patching offsets. Host buckets are
 * allocated each time; device buckets are ranges of their key's arena, made once.
 */

/* Each device bucket starts on this boundary (cudaMalloc's own alignment), so the
 * all-reduce's kernels get the 16-byte-aligned pointers their vector loads want. */
#define RR__DDP_ARENA_ALIGN ((size_t)256)

static size_t rr__align(size_t x) {
  return (x + RR__DDP_ARENA_ALIGN - 1) & ~(RR__DDP_ARENA_ALIGN - 1);
}

void rr__ddp_free_buckets(rr_ddp *d) {
  for (int b = 0; b < d->nbuckets; b++) {
    rr__ddp_bucket *k = &d->buckets[b];
    if (k->work) { /* never leave a collective writing into freed or re-carved memory */
      (void)rr_work_wait(k->work, 0);
      rr_work_free(k->work);
    }
    if (k->device < 0) free(k->buf), free(k->comp); /* device: the arena's */
    free(k->params);
  }
  free(d->buckets);
  d->buckets = NULL;
  d->nbuckets = 0;
}

void rr__ddp_free_arenas(rr_ddp *d) {
  if (d->narenas > 0 || d->buckets_idle) {
    int prev;
    (void)rr__ddp_enter(d, &prev);
    for (int a = 0; a < d->narenas; a++) {
      rr__cuda_free(d->arenas[a].buf); /* cudaFree waits for the device: no kernel still uses it */
      rr__cuda_free(d->arenas[a].comp);
    }
    rr__cuda_event_destroy(d->buckets_idle);
    rr__ddp_leave(d, prev);
  }
  free(d->arenas);
  d->arenas = NULL;
  d->narenas = 0;
  d->buckets_idle = NULL;
}

/* At construction: one arena per (dtype, device) of trainable device parameters, sized as
 * the sum of the parameters' sizes each rounded up to the alignment, plus one alignment. Any
 * layout fits: a bucket's rounded size is at most the sum of its members' rounded sizes, and
 * the extra keeps even an empty bucket's pointer inside the allocation. */
static int rr__ddp_make_arenas(rr_ddp *d) {
  int hooked = d->opt.hook == RR_DDP_HOOK_FP16 || d->opt.hook == RR_DDP_HOOK_BF16;
  d->arenas = rr__calloc((size_t)d->nparams + 1, sizeof *d->arenas);
  size_t *bytes = rr__calloc((size_t)d->nparams + 1, sizeof *bytes);
  size_t *cbytes = rr__calloc((size_t)d->nparams + 1, sizeof *cbytes);
  int st = d->arenas && bytes && cbytes ? RR_OK : RR_ENOMEM;
  for (int i = 0; st == RR_OK && i < d->nparams; i++) {
    const rr_ddp_tensor *p = &d->params[i];
    if (!p->grad || p->device < 0) continue;
    int a = 0;
    while (a < d->narenas && (d->arenas[a].dtype != p->dtype || d->arenas[a].device != p->device))
      a++;
    if (a == d->narenas) {
      d->arenas[d->narenas++] = (rr__ddp_arena){.dtype = p->dtype, .device = p->device};
      bytes[a] = cbytes[a] = RR__DDP_ARENA_ALIGN;
    }
    bytes[a] += rr__align(p->count * rr_dtype_size(p->dtype));
    cbytes[a] += rr__align(p->count * sizeof(uint16_t));
  }
  if (st == RR_OK && d->narenas > 0) {
    int prev;
    st = rr__ddp_enter(d, &prev);
    if (st == RR_OK) st = rr__cuda_event_create(&d->buckets_idle);
    for (int a = 0; st == RR_OK && a < d->narenas; a++) {
      st = rr__cuda_malloc(&d->arenas[a].buf, bytes[a]);
      if (st == RR_OK && hooked) st = rr__cuda_malloc(&d->arenas[a].comp, cbytes[a]);
      if (st != RR_OK)
        rr__prefix_error(st, "buckets of %s gradients (%zu bytes) on CUDA device %d",
                         rr_dtype_name(d->arenas[a].dtype), bytes[a], d->arenas[a].device);
    }
    rr__ddp_leave(d, prev);
  }
  free(bytes), free(cbytes);
  return st;
}

/* (Re)build the buckets from an assignment; ready == NULL: construction order. */
int rr__ddp_make_buckets(rr_ddp *d, const int *ready) {
  int n = d->nparams, nb = 0, st;
  int *order = malloc(((size_t)n + 1) * sizeof *order);
  int *end = malloc(((size_t)n + 1) * sizeof *end);
  size_t *limits = malloc(((size_t)n + 1) * sizeof *limits);
  size_t *cursor = calloc(2 * (size_t)n + 2, sizeof *cursor); /* per arena: buf, comp carved */
  if (!order || !end || !limits || !cursor) {
    st = rr__set_error(RR_ENOMEM, "out of memory assigning %d parameters to buckets", n);
    goto out;
  }
  st = rr__ddp_assign(d->params, n, d->opt.bucket_cap_mb, ready, order, end, limits, &nb);
  if (st != RR_OK) goto out;
  rr__ddp_free_buckets(d);
  if (!d->arenas && (st = rr__ddp_make_arenas(d)) != RR_OK) goto out;
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
    if (k->device >= 0) { /* a range of its key's arena: filled and emptied by kernels */
      int a = 0;
      while (d->arenas[a].dtype != k->dtype || d->arenas[a].device != k->device) a++;
      k->buf = (char *)d->arenas[a].buf + cursor[2 * a];
      cursor[2 * a] += rr__align(k->count * es);
      if (hooked) {
        k->comp = (char *)d->arenas[a].comp + cursor[2 * a + 1];
        cursor[2 * a + 1] += rr__align(k->count * sizeof(uint16_t));
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
  free(order), free(end), free(limits), free(cursor);
  return st;
}

/* torch's Reducer::rebuild_buckets: rank 0's ready order, broadcast so all ranks agree. */
int rr__ddp_rebuild(rr_ddp *d) {
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
  /* Every rank keeps the order the layout was built from (rank 0's): rr_ddp_set_group sends
   * it from the new group's rank 0 when the old rank 0 is gone. */
  for (int k = 0; k < n; k++) ready[k] = d->ready_order[k] = ord[k];
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
