/* DDP's coalesced broadcast from group rank 0 (torch's _broadcast_coalesced, under
 * _sync_module_states and _sync_buffers): parameters and buffers at construction, buffers at
 * a forward or on request, everything after a checkpoint load. Apart from ddp.c because
 * three files call it (ddp.c, checkpoint.c and the public rr_ddp_broadcast_buffers here) and
 * none of them needs to know how tensors of mixed dtypes and devices become one stream.
 */
#include <stdlib.h>

#include "common/status.h"
#include "common/util.h"
#include "ddp/ddp_internal.h"

/* torch: the broadcast coalescing size of DDP's _sync_module_states / _sync_buffers. */
#define RR__DDP_DEFAULT_BCAST_MB 250.0

/* The tensors' bytes seen as one stream, cut into chunks of at most broadcast_bucket_mb
 * (torch: _broadcast_coalesced, 250 MiB), each packed on rank 0, broadcast as bytes and
 * unpacked elsewhere. Bytes, not elements: a copy needs no dtype, so one call carries tensors
 * of every dtype. */

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

int rr__ddp_bcast(rr_ddp *d, const rr_ddp_tensor *t, int n, const char *what) {
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

int rr_ddp_broadcast_buffers(rr_ddp *d) {
  RR__CHECK(rr__ddp_check(d, "rr_ddp_broadcast_buffers"));
  return rr__ddp_bcast(d, d->buffers, d->nbuffers, "rr_ddp_broadcast_buffers");
}
