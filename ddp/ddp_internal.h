/* What the DDP wrapper's files share and nothing outside ddp/ sees: the wrapper's state and
 * the calls one part makes into another. The parts are split by the question each answers
 * (see ddp/ddp.c's top comment), but all of them read and write the same rr_ddp, so its
 * layout lives here rather than in any one of them. The host element loops that the CUDA
 * test compares with keep their own header, ddp/ddp_host.h, so the test sees only those.
 */
#ifndef RR__DDP_DDP_INTERNAL_H_
#define RR__DDP_DDP_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "common/status.h" /* RR__ERRMSG_MAX */
#include "ddp/ddp_host.h"
#include "ringreduce/ddp.h"

#define RR__MIB (1024.0 * 1024.0)

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

/* Device memory of the buckets of one (dtype, device): made at construction, big enough for
 * any layout of that key's parameters, carved into buckets, re-carved at the rebuild (no
 * cudaFree, which waits for the whole device, between construction and destroy). */
typedef struct rr__ddp_arena {
  rr_dtype dtype;
  int device;
  void *buf, *comp; /* comp: the compression hooks' 16-bit words, else NULL */
} rr__ddp_arena;

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
  int narenas;
  rr__ddp_arena *arenas;
  /* Recorded on the group's stream after rr_ddp_sync's copies out of device buckets; the
   * next backward's first copy in makes the stream wait for it (idle_pending), so the buckets
   * are not overwritten early even when the group's stream changed in between. */
  void *buckets_idle;
  int idle_pending;
  int next_launch; /* buckets [0, next_launch) are launched in this backward */
  int nmarked;     /* gradients marked ready in this backward */
  int no_sync;
  int forward_param_sync; /* torch's require_forward_param_sync: buffers sync at forward */
  int *ready_order;       /* the first synchronised backward's ready order */
  int nrecorded;
  int recording, rebuild_pending, rebuilt;
  /* The broadcast's staging area (ddp/broadcast.c): host memory, pinned when the model has
   * device tensors, kept from init to destroy; stage_free is recorded on the group's stream
   * after the last copies out of it (stage_busy: not yet waited for), stage_packed after
   * rank 0's copies into it. */
  void *stage;
  size_t stage_cap;
  void *stage_free, *stage_packed;
  int stage_busy;
  int broken; /* sticky status: the reduction state or the group is unusable */
  char broken_msg[RR__ERRMSG_MAX];
  rr_ddp_stats stats;
};

/* ddp/ddp.c: the wrapper's error state, and where and how its device work runs. */
int rr__ddp_break(rr_ddp *d, int st);
int rr__ddp_check(const rr_ddp *d, const char *fn);
int rr__ddp_abort(rr_ddp *d, int st);
int rr__ddp_enter(const rr_ddp *d, int *prev);
void rr__ddp_leave(const rr_ddp *d, int prev);
void *rr__ddp_stream(const rr_ddp *d);
int rr__ddp_copy(const rr_ddp *d, const rr_ddp_tensor *t, void *dst, const void *src, size_t n);
double rr__ddp_elapsed(int64_t t0_ns);
void rr__ddp_shape_str(const rr_ddp_tensor *t, char *buf, size_t n);

/* ddp/bucket.c: the layout, its memory, the rebuild at the first forward after step one. */
int rr__ddp_make_buckets(rr_ddp *d, const int *ready);
void rr__ddp_free_buckets(rr_ddp *d);
void rr__ddp_free_arenas(rr_ddp *d);
int rr__ddp_rebuild(rr_ddp *d);

/* ddp/hooks.c: a complete bucket through its comm hook and into its all-reduce. */
int rr__ddp_launch(rr_ddp *d, int b);

/* ddp/broadcast.c: tensors from group rank 0 to every rank; `what` prefixes any error. Device
 * tensors are written in the group's stream's order when it returns; rr__ddp_bcast_wait makes
 * the host wait for them (construction and load do). The staging area is made at init (after
 * the device is known) and freed with the wrapper. */
int rr__ddp_bcast(rr_ddp *d, const rr_ddp_tensor *t, int n, const char *what);
int rr__ddp_bcast_wait(rr_ddp *d);
int rr__ddp_stage_init(rr_ddp *d);
void rr__ddp_stage_free(rr_ddp *d);

/* ddp/check.c: rr_ddp_init's local checks (copying the descriptions as it goes) and the
 * exchange that fails every rank when any rank's model differs. */
int rr__ddp_copy_descs(rr_ddp *d, const rr_ddp_tensor *src, int n, rr_ddp_tensor **dst,
                       int name_base, const char *kind);
int rr__ddp_pick_device(rr_ddp *d);
int rr__ddp_verify(rr_ddp *d, int local_st);

#endif /* RR__DDP_DDP_INTERNAL_H_ */
