/* DDP's coalesced broadcast from group rank 0 (torch's _broadcast_coalesced, under
 * _sync_module_states and _sync_buffers): parameters and buffers at construction, buffers at
 * a forward or on request, everything after a checkpoint load. Apart from ddp.c because
 * three files call it (ddp.c, checkpoint.c and the public rr_ddp_broadcast_buffers here) and
 * none of them needs to know how tensors of mixed dtypes and devices become one stream.
 *
 * Cost on device tensors (docs/ddp.md, "What a step costs on a device"). The bytes go through
 * one staging area in host memory, pinned (cudaHostAlloc) when the model has device tensors,
 * kept from rr_ddp_init to rr_ddp_destroy and sized there for the buffers' broadcast, so the
 * per-step broadcast at rr_ddp_forward never allocates or frees (cudaFreeHost would wait for
 * the whole device). Device tensors are copied into it and out of it with cudaMemcpyAsync on
 * the group's stream, one copy per tensor, no wait per tensor:
 *   - rank 0 queues its copies into the staging area, records an event after them and waits
 *     for that event, once per chunk: the host is about to send these bytes;
 *   - the other ranks queue their copies out of the staging area after the broadcast and
 *     record an event; nothing waits for it in this call (the caller's work on the stream is
 *     ordered after the copies), only the next write into the staging area does, which by
 *     then has usually long completed.
 * Construction and a checkpoint load (not steps: blocking collectives the caller waits for
 * anyway) may need more room than the buffers: they use a temporary area, freed when they end,
 * and return with every tensor written (rr__ddp_bcast_wait).
 */
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "ddp/ddp_internal.h"

/* torch: the broadcast coalescing size of DDP's _sync_module_states / _sync_buffers. */
#define RR__DDP_DEFAULT_BCAST_MB 250.0

/* The tensors' bytes seen as one stream, cut into chunks of at most broadcast_bucket_mb
 * (torch: _broadcast_coalesced, 250 MiB), each packed on rank 0, broadcast as bytes and
 * unpacked elsewhere. Bytes, not elements: a copy needs no dtype, so one call carries tensors
 * of every dtype. */

static size_t rr__bytes(const rr_ddp_tensor *t, int n) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += t[i].count * rr_dtype_size(t[i].dtype);
  return total;
}

static size_t rr__chunk(const rr_ddp *d, size_t total) {
  double mb =
      d->opt.broadcast_bucket_mb > 0 ? d->opt.broadcast_bucket_mb : RR__DDP_DEFAULT_BCAST_MB;
  size_t cap = (size_t)(mb * RR__MIB);
  if (cap == 0) cap = 1;
  return RR__MIN(cap, total);
}

/* Host memory for a staging area: pinned when the model has device tensors (asynchronous
 * copies need it: from pageable memory the runtime may copy synchronously, through its own
 * bounce buffer), else plain. */
static int rr__stage_alloc(const rr_ddp *d, void **p, size_t bytes) {
  *p = NULL;
  if (d->device < 0) {
    *p = malloc(bytes ? bytes : 1);
    return *p ? RR_OK
              : rr__set_error(RR_ENOMEM, "out of memory for a %zu-byte broadcast buffer", bytes);
  }
  int prev;
  RR__CHECK(rr__ddp_enter(d, &prev));
  int st = rr__cuda_host_alloc(p, bytes);
  rr__ddp_leave(d, prev);
  return st;
}

static void rr__stage_release(const rr_ddp *d, void *p) {
  if (d->device < 0) {
    free(p);
    return;
  }
  int prev;
  if (rr__ddp_enter(d, &prev) != RR_OK) return;
  rr__cuda_host_free(p);
  rr__ddp_leave(d, prev);
}

/* The host waits for the last copies out of a staging area (the other ranks' unpacking):
 * before it is written again or freed, and at the end of construction and load. */
int rr__ddp_bcast_wait(rr_ddp *d) {
  if (!d->stage_busy) return RR_OK;
  int prev;
  RR__CHECK(rr__ddp_enter(d, &prev));
  int st = rr__cuda_event_sync(d->stage_free);
  rr__ddp_leave(d, prev);
  if (st == RR_OK) d->stage_busy = 0;
  return st;
}

int rr__ddp_stage_init(rr_ddp *d) {
  if (d->device >= 0) {
    int prev;
    RR__CHECK(rr__ddp_enter(d, &prev));
    int st = rr__cuda_event_create(&d->stage_free);
    if (st == RR_OK) st = rr__cuda_event_create(&d->stage_packed);
    rr__ddp_leave(d, prev);
    RR__CHECK(st);
  }
  size_t total = rr__bytes(d->buffers, d->nbuffers);
  if (total == 0) return RR_OK;
  size_t bytes = rr__chunk(d, total);
  RR__CHECK(rr__stage_alloc(d, &d->stage, bytes));
  d->stage_cap = bytes;
  return RR_OK;
}

void rr__ddp_stage_free(rr_ddp *d) {
  if (rr__ddp_bcast_wait(d) != RR_OK) d->stage_busy = 0; /* the free below waits anyway */
  if (d->stage) rr__stage_release(d, d->stage);
  d->stage = NULL;
  d->stage_cap = 0;
  if (d->stage_free || d->stage_packed) {
    int prev;
    if (rr__ddp_enter(d, &prev) == RR_OK) {
      rr__cuda_event_destroy(d->stage_free);
      rr__cuda_event_destroy(d->stage_packed);
      rr__ddp_leave(d, prev);
    }
  }
  d->stage_free = d->stage_packed = NULL;
}

/* Bytes [start, start + len) of the stream between the tensors and buf: memcpy for host
 * tensors, a copy queued on the group's stream for device tensors (*queued set). */
static int rr__stream_copy(const rr_ddp *d, const rr_ddp_tensor *t, int n, size_t start, size_t len,
                           char *buf, int pack, int *queued) {
  size_t pos = 0;
  for (int i = 0; i < n && len > 0; i++) {
    size_t bytes = t[i].count * rr_dtype_size(t[i].dtype);
    if (start < pos + bytes && bytes > 0) {
      size_t off = start - pos, take = RR__MIN(bytes - off, len);
      char *mem = (char *)t[i].data + off;
      if (t[i].device < 0) {
        memcpy(pack ? buf : mem, pack ? mem : buf, take);
      } else {
        int st = pack ? rr__cuda_memcpy_async(buf, mem, take, rr__ddp_stream(d))
                      : rr__cuda_memcpy_async(mem, buf, take, rr__ddp_stream(d));
        if (st != RR_OK)
          return rr__prefix_error(st, "copying '%s' %s CUDA device %d", t[i].name,
                                  pack ? "from" : "to", t[i].device);
        *queued = 1;
      }
      buf += take, start += take, len -= take;
    }
    pos += bytes;
  }
  return RR_OK;
}

/* Rank 0: the chunk into buf, on the host when this returns. */
static int rr__pack(rr_ddp *d, const rr_ddp_tensor *t, int n, size_t start, size_t len, char *buf) {
  int prev, queued = 0;
  RR__CHECK(rr__ddp_enter(d, &prev));
  int st = rr__stream_copy(d, t, n, start, len, buf, 1, &queued);
  if (st == RR_OK && queued) {
    st = rr__cuda_event_record(d->stage_packed, rr__ddp_stream(d));
    if (st == RR_OK) st = rr__cuda_event_sync(d->stage_packed);
  }
  rr__ddp_leave(d, prev);
  return st;
}

/* The other ranks: the chunk out of buf, queued; stage_free marks when buf is read. */
static int rr__unpack(rr_ddp *d, const rr_ddp_tensor *t, int n, size_t start, size_t len,
                      char *buf) {
  int prev, queued = 0;
  RR__CHECK(rr__ddp_enter(d, &prev));
  int st = rr__stream_copy(d, t, n, start, len, buf, 0, &queued);
  if (st == RR_OK && queued) {
    st = rr__cuda_event_record(d->stage_free, rr__ddp_stream(d));
    if (st == RR_OK) d->stage_busy = 1;
  }
  rr__ddp_leave(d, prev);
  return st;
}

int rr__ddp_bcast(rr_ddp *d, const rr_ddp_tensor *t, int n, const char *what) {
  size_t total = rr__bytes(t, n);
  if (total == 0) return RR_OK;
  size_t chunk = rr__chunk(d, total);
  char *stage = d->stage;
  void *temp = NULL;
  int st = RR_OK;
  if (chunk > d->stage_cap) { /* construction or load only: the buffers always fit */
    st = rr__stage_alloc(d, &temp, chunk);
    if (st != RR_OK) {
      rr__prefix_error(st, "rank %d: %s: a %zu-byte broadcast buffer", d->rank, what, chunk);
      return rr__ddp_abort(d, st);
    }
    stage = temp;
  }
  for (size_t start = 0; start < total; start += chunk) {
    size_t len = RR__MIN(chunk, total - start);
    /* The last chunk's copies out of the staging area must be done before it is written. */
    if ((st = rr__ddp_bcast_wait(d)) != RR_OK ||
        (d->rank == 0 && (st = rr__pack(d, t, n, start, len, stage)) != RR_OK)) {
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
    if (d->rank != 0 && (st = rr__unpack(d, t, n, start, len, stage)) != RR_OK) {
      rr__prefix_error(st, "rank %d: %s", d->rank, what);
      st = rr__ddp_abort(d, st);
      break;
    }
  }
  if (temp) {
    /* Its copies must have run before it goes (cudaFreeHost would wait for the whole device
     * anyway; this says what is waited for). */
    int w = rr__ddp_bcast_wait(d);
    if (w != RR_OK && st == RR_OK) {
      rr__prefix_error(w, "rank %d: %s", d->rank, what);
      st = rr__ddp_abort(d, w);
    }
    rr__stage_release(d, temp);
  }
  return st;
}

int rr_ddp_broadcast_buffers(rr_ddp *d) {
  RR__CHECK(rr__ddp_check(d, "rr_ddp_broadcast_buffers"));
  return rr__ddp_bcast(d, d->buffers, d->nbuffers, "rr_ddp_broadcast_buffers");
}
