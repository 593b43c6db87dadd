/* Process groups, work handles and the context a collective runs in. */
#ifndef RR__RING_PG_H_
#define RR__RING_PG_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "transport/comm.h"
#include "ring/wire.h"
#include "ringreduce/ringreduce.h"
#include "transport/socket.h"

/* What a call asked for, validated at submission. Ranks are group ranks. */
typedef struct rr__args {
  int kind; /* enum rr__kind; RR__K_SEND is a send, RR__K_COUNT+1 a recv (see pg.c) */
  const void *sendbuf;
  void *recvbuf;
  size_t count; /* elements: per rank for all_gather / reduce_scatter, else the buffer */
  rr_dtype dtype;
  rr_op op;
  int root; /* group rank, -1 if none */
  int peer; /* group rank for send / recv; the destination of a sendrecv */
  int src;  /* the source of a sendrecv */
  size_t recvcount; /* of a sendrecv */
  void *stream;     /* cudaStream_t set on the group when the call was made (device buffers) */
} rr__args;

/* Call kinds beyond the wire kinds: both halves of point to point. */
#define RR__K_RECV (RR__K_COUNT + 1)
#define RR__K_SENDRECV (RR__K_COUNT + 2)

struct rr_work {
  rr_pg *pg;
  rr__args args;
  struct rr_work *next; /* queue link */
  atomic_int refs;      /* the caller's handle + the queue */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  int status;
  char error[RR__ERRMSG_MAX];
};

struct rr_pg {
  rr_pg *world;  /* the root group (itself for the world) */
  rr_pg *parent; /* NULL for the world */
  int rank, size;
  int *global_ranks; /* [size]: group rank -> global rank */
  char id[RR__GROUP_ID_MAX];
  int64_t timeout_ms;
  atomic_llong timeout_override; /* rr_pg_set_timeout; 0 = none */
  rr_store *store;               /* the world's; subgroups borrow it */
  rr__addr hint;                 /* master address, to pick an interface */
  int have_hint;
  int local_rank, local_size, device;
  uint8_t token_key[16]; /* from RR_JOB_TOKEN; all zero without one */
  int have_token;
  rr__comm *comm;
  atomic_int nchildren;
  int next_child;

  /* Calls run one at a time, in issue order: inline on the caller's thread when the group
   * is idle, else on the group's worker thread. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  rr_work *qhead, *qtail;
  int busy, stop;
  pthread_t worker;
  int worker_started;

  /* State of the running call: only the thread holding `busy` touches these. */
  uint64_t seq;       /* collectives run so far */
  int inline_call;    /* the running call's caller blocks on it (may spin, ring/coll.c) */
  int64_t ctl_seen_ms; /* when the control sockets were last looked at before a call */
  uint64_t *p2p_sent; /* [size] sends to each peer so far */
  uint64_t *p2p_recvd;
  char *staging; /* slots * seg_bytes: receive slots for reductions */
  size_t seg_bytes;
  int nslots;
  void *scratch; /* grow-only, for reduce_scatter's partial chunks */
  size_t scratch_bytes;

  /* CUDA (cuda/staging.c): pinned host memory that device buffers are staged through
   * (grow-only, freed with the group), and the stream rr_pg_set_cuda_stream gave. */
  void *cuda_host;
  size_t cuda_host_bytes;
  _Atomic(void *) cuda_stream;
};

/* The context of one running collective. */
typedef struct rr__coll {
  rr_pg *pg;
  rr__comm *cm;
  const rr__args *a;
  int n, r;     /* group size and rank */
  size_t esize; /* bytes per element */
  size_t seg;   /* elements per pipeline segment */
  rr__hdr hdr;  /* this rank's call as it goes on the wire */
  int64_t deadline_ms;
  int64_t timeout_ms;
  /* Where the call is ("reduce-scatter step 2/3"), for error messages and traces. Set with
   * RR__WHERE (ring/ring.h), which keeps the format and its numbers; rr__coll_where formats
   * them only when a message needs the text. */
  char where[96];
  const char *where_fmt;
  int where_arg[3];
  size_t seg_at, seg_total; /* the segment a pipelined step waits for (0 total: none) */
  struct rr__hdr_sends *sends; /* header messages of this call still to be flushed */
} rr__coll;

/* Run a validated call on the current thread; sets the last error on failure. Buffers in
 * CUDA device memory are staged through pinned host memory (cuda/staging.c), which then
 * runs the host collective, rr__coll_run_host (ring/coll.c). */
int rr__coll_run(rr_pg *pg, const rr__args *a, int64_t timeout_ms);
int rr__coll_run_host(rr_pg *pg, const rr__args *a, int64_t timeout_ms);
/* The group's CUDA stream (NULL: the legacy default stream), captured when a call is made. */
void *rr__cuda_pg_stream(rr_pg *pg);
/* Free the group's CUDA resources (pinned staging memory). */
void rr__cuda_pg_free(rr_pg *pg);

/* Grow the group's scratch buffer to at least `bytes`. */
int rr__pg_scratch(rr_pg *pg, size_t bytes, void **out);

#endif /* RR__RING_PG_H_ */
