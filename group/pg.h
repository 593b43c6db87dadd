/* A process group inside: its members, connections, call queue and the state the ring
 * keeps between calls; work handles. */
#ifndef RR__GROUP_PG_H_
#define RR__GROUP_PG_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "rendezvous/bootstrap.h"
#include "ring/coll.h"
#include "ringreduce/ringreduce.h"
#include "transport/socket.h"

/* Devices a group keeps a staging copy stream for (more: the call's own stream is used). */
#define RR__CUDA_MAX_DEVICES 16

struct rr_work {
  rr_pg *pg;
  rr__args args;
  int cuda_owned;  /* async: args' CUDA events are freed with the work */
  int cuda_waited; /* rr_work_wait made the call's stream wait for args.cuda_done */
  struct rr_work *next; /* queue link */
  atomic_int refs;      /* the caller's handle + the queue */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  int status;
  int source; /* a recv's sender (global rank), written by the ring through args.source */
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
  int own_store;                 /* made by init (freed with the world), not the caller's */
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
  rr__coll_state cs;   /* what the ring keeps between calls (sequence numbers, slots) */
  int inline_call;     /* the running call's caller blocks on it (it may spin) */
  int64_t ctl_seen_ms; /* when the control sockets were last looked at before a call */

  /* CUDA (group/staging.c): pinned host memory that device buffers are staged through
   * (grow-only, freed with the group), and the stream rr_pg_set_cuda_stream gave. */
  void *cuda_host;
  size_t cuda_host_bytes;
  _Atomic(void *) cuda_stream;
  /* The staging copies' own streams, one per device (made on first use), and the one whose
   * copy back from cuda_host may still be running. */
  void *cuda_copy[RR__CUDA_MAX_DEVICES];
  void *cuda_host_busy;
};

/* Queue a validated call (work != NULL: async, the handle goes to *work) or run it now,
 * in issue order either way (group/work.c). */
int rr__pg_submit(rr_pg *pg, const rr__args *a, rr_work **work);
/* The group's worker thread: runs queued calls until the group stops. */
void *rr__pg_worker_main(void *arg);
/* Run a validated call on the current thread (group/run.c); sets the last error on failure,
 * and aborts the group (telling every peer why) when the call fails. */
int rr__pg_run(rr_pg *pg, const rr__args *a, int64_t timeout_ms);
/* The same for host buffers only. */
int rr__pg_run_host(rr_pg *pg, const rr__args *a, int64_t timeout_ms);
/* ... and for either: dev != NULL runs the algorithm on device buffers (CUDA IPC). */
int rr__pg_run_coll(rr_pg *pg, const rr__args *a, int64_t timeout_ms, const rr__req_dev *dev);
/* CUDA IPC (group/staging.c): can the call run on its device buffers through the lanes'
 * device messages (every peer on shared memory, RR_TRANSPORT=auto, all_reduce,
 * reduce_scatter or all_gather)?
 * Then rr__pg_run_ipc runs it, ordered on the call's stream as the staged path is. */
int rr__pg_ipc_call(const rr_pg *pg, const rr__args *a);
int rr__pg_run_ipc(rr_pg *pg, const rr__args *a, int64_t timeout_ms);
/* Device buffers (group/staging.c): does the call read or write CUDA device memory? Then
 * it runs through pinned host memory, ordered on the call's stream. */
int rr__pg_device_call(const rr_pg *pg, const rr__args *a);
int rr__pg_run_staged(rr_pg *pg, const rr__args *a, int64_t timeout_ms);
/* The group's CUDA stream (NULL: the legacy default stream), captured when a call is made. */
void *rr__cuda_pg_stream(rr_pg *pg);
/* rr_pg_options.device: check it and make it current on the calling thread. */
int rr__cuda_pg_use_device(int device, int rank);
/* Free the group's CUDA resources (pinned staging memory, copy streams). */
void rr__cuda_pg_free(rr_pg *pg);
/* At submission, on the caller's thread: for a call with device buffers, make its events and
 * record cuda_ready on the call's stream (so the call starts after the work queued before
 * it, without blocking anyone). A failure aborts the group, as one inside a call would. */
int rr__cuda_pg_prepare(rr_pg *pg, rr__args *a);
/* After the call completed: blocking, wait for cuda_done on the host (the result is in the
 * buffer); else make the call's stream wait for it (later work on it sees the result). */
int rr__cuda_pg_finish(const rr_pg *pg, const rr__args *a, int blocking);
/* Destroy the call's events (after the call ran, or when it was never queued). */
void rr__cuda_pg_release(rr__args *a);


#endif /* RR__GROUP_PG_H_ */
