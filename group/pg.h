/* A process group inside: its members, connections, call queue and the state the ring
 * keeps between calls; work handles. */
#ifndef RR__GROUP_PG_H_
#define RR__GROUP_PG_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/fork.h"
#include "rendezvous/bootstrap.h"
#include "ring/coll.h"
#include "ringreduce/ringreduce.h"
#include "transport/socket.h"

/* Devices a group keeps a staging copy stream for (more: the call's own stream is used). */
#define RR__CUDA_MAX_DEVICES 16

/* How the group runs a call, decided once at submission (group/run.c, rr__pg_path) from one
 * look at each buffer: host memory, read as it is (zero: the default); managed memory only
 * (read as it is once the call's stream is synchronised); a device buffer, staged through
 * pinned host memory; device buffers moved device to device over CUDA IPC, or piped through
 * pinned host slots with the reductions on the GPU. */
enum rr__path {
  RR__PATH_HOST = 0,
  RR__PATH_MANAGED,
  RR__PATH_STAGED,
  RR__PATH_IPC,
  RR__PATH_PIPED,
};

/* A call as the group handles it: what the ring runs (a, which is all the ring ever sees)
 * and what the group adds around it, from submission (group/api.c) through the queue
 * (group/work.c) to its run (group/run.c) and the device paths (group/ipc.c,
 * group/staging.c). */
typedef struct rr__pg_call {
  rr__args a;
  int path; /* enum rr__path */
  /* send_device / recv_device: the CUDA device of the range the call reads / writes, -1 when
   * that is not device memory (host or managed, or nothing); device: the call's (its events',
   * copies' and kernels'), the send buffer's if it has one, else the receive buffer's, -1 for
   * none; for managed buffers, the caller's current device at submission (its events').
   * Every CUDA call made for the call runs with this device current (group/device.c). */
  int device, send_device, recv_device;
  void *stream; /* cudaStream_t the call is ordered after (device and managed buffers) */
  /* Device buffers: events made at submission on the buffers' device. cuda_ready is
   * recorded on the call's stream then; cuda_done after the result's copy back. NULL for
   * host calls. */
  void *cuda_ready, *cuda_done;
  void *owned; /* a queued all_to_allv's copy of its counts and displacements (group/work.c) */
} rr__pg_call;

/* What rank 0 remembers between rr_pg_grow_pending's looks at the growth's port
 * (group/grow.c); all zero to start with. */
#define RR__GROW_SEEN 32
typedef struct rr__grow_watch {
  int64_t retry_ms;             /* listening failed: not tried again before then */
  int64_t listen_warned_ms;     /* when that was last said */
  int64_t stranger_warned_ms;   /* when connections that were not knocks were last reported */
  int strangers;                /* ... and how many came since */
  uint64_t seen[RR__GROW_SEEN]; /* the proofs of the last knocks taken: one played again
                                 * is refused */
  unsigned nseen;
} rr__grow_watch;

struct rr_work {
  rr_pg *pg;
  rr__pg_call call;
  int cuda_owned;       /* async: the call's CUDA events are freed with the work */
  int cuda_waited;      /* rr_work_wait made the call's stream wait for call.cuda_done */
  struct rr_work *next; /* queue link */
  atomic_int refs;      /* the caller's handle + the queue */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  int status;
  int source; /* a recv's sender (global rank), written by the ring through call.a.source */
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
  /* Rank 0's listener on the growth's port (group/grow.c): opened by the first
   * rr_pg_grow_pending or rr_pg_grow and held until the group is destroyed, or handed to the
   * grown or shrunk group whose rank 0 this process is, so that nobody else can bind the
   * port in between; the growth's store serves a duplicate of it. -1 when none. */
  int grow_lfd, grow_port;
  /* In a child forked without exec (common/fork.h): the growth's listener is closed there at
   * once, and destroying the group frees the child's copy without touching the threads and
   * locks that stayed in the parent. */
  rr__fork_hook fork;
  int forked;
  rr__grow_watch grow_watch;
  atomic_int nchildren;
  int next_child;
  /* The live subgroups made from this group (rr_new_group), linked through next_kid, so
   * that rr_pg_revoke reaches them. kids_mu guards the list; it is taken parent before
   * child, and never while holding `mu`. */
  pthread_mutex_t kids_mu;
  rr_pg *kids, *next_kid;

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

  /* CUDA (group/device.c, group/staging.c): pinned host memory that device buffers are
   * staged through (grow-only, freed with the group), and the stream rr_pg_set_cuda_stream
   * gave. */
  void *cuda_host;
  size_t cuda_host_bytes;
  _Atomic(void *) cuda_stream;
  /* The device paths' own copy streams, one per device (made on first use), and the one
   * whose copy back from cuda_host may still be running. */
  void *cuda_copy[RR__CUDA_MAX_DEVICES];
  void *cuda_host_busy;
  /* The one-kernel form among ranks that share a GPU (group/direct.c): what the ranks told
   * each other, the leader's cache of mapped peer buffers, a rank's exported scratch. NULL
   * until the first call that could take it. */
  struct rr__direct *direct;
  /* Peer allocations mapped through their IPC handles and this rank's own handles, shared by
   * the one-kernel form's leader and the ring's pull (transport/transport.h, rr__ipc_cache;
   * group/ipc.c makes it, rr__pg_direct_free frees it); and a pulling call's state. NULL until
   * the first call that needs them. */
  rr__ipc_cache *ipc_cache;
  rr__ipc_pull *ipc_pull;
};

/* What a call reads and writes on this rank, in bytes from each buffer's start (ring/kind.c,
 * as rr__validate checks them); 0 on a side whose buffer is NULL. *gaps is set when the call
 * writes only parts of [recvbuf, recvbuf + out): an all_to_allv's blocks need not tile its
 * recvbuf. For the device paths (group/device.c, group/staging.c). */
static inline void rr__pg_call_io(const rr_pg *pg, const rr__args *a, size_t *in, size_t *out,
                                  int *reads, int *writes, int *gaps) {
  const size_t es = rr_dtype_size(a->dtype);
  const rr__call_io io = rr__kind_io(a, pg->size, pg->rank);
  *reads = io.reads;
  *writes = io.writes;
  *gaps = io.gaps;
  *in = a->sendbuf ? io.in * es : 0;
  *out = a->recvbuf ? io.out * es : 0;
}

/* The group rank of a global rank, -1 when it is not a member (rr_get_group_rank). */
static inline int rr__pg_group_rank(const rr_pg *pg, int global_rank) {
  for (int i = 0; i < pg->size; i++)
    if (pg->global_ranks[i] == global_rank) return i;
  return -1;
}

/* A group of `size` with nothing connected (group/pg.c), and its release; the worker
 * thread of a group whose comm is ready (it also hooks the comm's revoke to the
 * group's subgroups). Used by rr_pg_shrink (group/elastic.c). */
int rr__pg_new(int size, rr_pg **out);
void rr__pg_free(rr_pg *pg);
int rr__pg_run_worker(rr_pg *pg);

/* Queue a validated call (work != NULL: async, the handle goes to *work) or run it now,
 * in issue order either way (group/work.c). */
int rr__pg_submit(rr_pg *pg, const rr__pg_call *call, rr_work **work);
/* The group's worker thread: runs queued calls until the group stops. */
void *rr__pg_worker_main(void *arg);
/* How a validated call runs (group/run.c): look at its buffers once and record its path
 * (enum rr__path) and devices in its record. At submission, before rr__cuda_pg_prepare.
 * RR_ECUDA (error set) when CUDA cannot tell where a buffer is. */
int rr__pg_path(const rr_pg *pg, rr__pg_call *call);
/* Run a validated call on the current thread along its path (group/run.c); sets the last
 * error on failure, and aborts the group (telling every peer why) when the call fails. */
int rr__pg_run(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms);
/* The one-kernel form (group/direct.c; docs/cuda.md, "One kernel for ranks that share a
 * GPU"), asked by rr__pg_run of a call through CUDA IPC: 1 with *st its status when the call
 * ran (or failed) that way, 0 when it takes the ring. Every rank answers alike. free: at
 * the group's destroy (the peers' mappings closed, the scratch freed). */
int rr__pg_direct_run(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms, int *st);
/* Whether CUDA IPC works between every two ranks' GPUs (group/direct.c), asked of a call whose
 * path is RR__PATH_IPC where it runs: learned once per group, with the one-kernel form's
 * exchange, at the first ring or chain call; 0 (before that, for the other kinds, or when
 * not) sends the call the way RR_CUDA_IPC=0 would (group/run.c). *st: a failed exchange (the
 * group aborted). */
int rr__pg_ipc_agreed(rr_pg *pg, const rr__pg_call *call, int64_t timeout_ms, int *st);
/* Calls of this process that rr__pg_path sent through CUDA IPC and the group's agreement
 * sent staged or piped instead (group/ipc.c; the tests). */
uint64_t rr__pg_ipc_declined(void);
void rr__pg_ipc_declined_add(void);
/* Also frees the group's IPC caches (pg->ipc_cache, pg->ipc_pull). */
void rr__pg_direct_free(rr_pg *pg);
/* The group's cache of mapped peer allocations and own handles, made on first use (NULL: out
 * of memory, error set). group/ipc.c. */
rr__ipc_cache *rr__pg_ipc_cache(rr_pg *pg);
/* Calls this process ran in the one-kernel form, IPC handles of peer buffers it opened as
 * their leader, and calls whose buffers went through its scratch (tests). */
uint64_t rr__direct_calls(void);
uint64_t rr__direct_opens(void);
uint64_t rr__direct_copies(void);

/* Device buffers (group/device.c): where the buffers the call reads and writes are
 * (RR__PATH_HOST, RR__PATH_MANAGED or RR__PATH_STAGED, and the devices), for rr__pg_path;
 * RR_ECUDA naming the buffer when CUDA cannot tell. */
int rr__cuda_pg_buffers(const rr_pg *pg, rr__pg_call *call);
/* A staged call (group/staging.c), around the ring's run on the host copy: stage_in fills
 * *h (the arguments on host memory: pinned copies of the device buffers, managed memory as
 * it is, after the call's stream) and *sg; stage_out, given the ring's status, copies the
 * result back. Each fails as a failure inside the call does (the group aborts); on a failed
 * stage_in there is nothing to run and nothing to finish. */
typedef struct rr__stage {
  int staged;   /* device buffers were copied: stage_out has work */
  int prev;     /* the device to make current again */
  void *stream; /* the copies' */
  char *result; /* the receive buffer's host copy; NULL: none to copy back */
  size_t out;   /* its bytes */
} rr__stage;
int rr__pg_stage_in(rr_pg *pg, const rr__pg_call *call, rr__args *h, rr__stage *sg);
int rr__pg_stage_out(rr_pg *pg, const rr__pg_call *call, const rr__stage *sg, int st);
/* CUDA IPC (group/ipc.c): can a staged call run on its device buffers through the lanes'
 * device messages instead (every peer on shared memory, RR_TRANSPORT=auto, a kind whose dev
 * column allows it, ring/kind.h)? Then ipc_in makes the buffers' device current and gives the
 * stream the ring runs on (*dev), ordered after the call's stream as the staged path is, and
 * ipc_out, given the ring's status, marks the result's completion. */
int rr__pg_ipc_call(const rr_pg *pg, const rr__pg_call *call);
/* The form a ring or chain kind takes on device buffers of ranks on one host, by its size
 * (group/ipc.c's table; docs/cuda.md, "Which form, by size"). */
typedef enum rr__ipc_form {
  RR__FORM_STAGED, /* through the group's pinned host memory (group/staging.c) */
  RR__FORM_DIRECT, /* one kernel for ranks that share a GPU (group/direct.c decides it) */
  RR__FORM_HOSTED, /* the ring through CUDA IPC, the host handing each segment over */
  RR__FORM_MEMOPS, /* the ring through CUDA IPC, the GPUs' streams handing them over */
  RR__FORM_PULL,   /* as MEMOPS, the all-gather steps reading the sender's output */
} rr__ipc_form;
rr__ipc_form rr__pg_ipc_form(const rr_pg *pg, const rr__pg_call *call);
/* The size the forms are chosen by: the largest buffer the call reads or writes on a rank, in
 * bytes (the same on every rank). */
int64_t rr__pg_call_bytes(const rr_pg *pg, const rr__pg_call *call);
/* Is the call within the one-kernel form's bound (RR_CUDA_DIRECT_BYTES)? */
int rr__pg_direct_size(const rr_pg *pg, const rr__pg_call *call);
/* The segment size of a call of this kind through CUDA IPC: RR_IPC_SEG_BYTES for the ring
 * and chain kinds (every rank moves the same bytes, so every rank takes CUDA IPC or the call
 * fails), the group's RR_SEG_BYTES for the others (a rank of an all_to_allv with nothing to
 * move stays on the host path, and a point to point's receiver may be a host buffer: they
 * must cut alike). */
size_t rr__pg_ipc_seg(const rr_pg *pg, int kind);
/* Not through CUDA IPC, but pipelined through pinned slots with the reductions on the GPU
 * (ring/pipe_dev.c)? Asked of a staged call that did not take IPC; run like IPC's. */
int rr__pg_piped_call(const rr_pg *pg, const rr__pg_call *call);
int rr__pg_ipc_in(rr_pg *pg, const rr__pg_call *call, rr__req_dev *dev, int *prev);
int rr__pg_ipc_out(rr_pg *pg, const rr__pg_call *call, const rr__req_dev *dev, int prev, int st);
/* A call through CUDA IPC whose segments the streams hand over (dev->memops): every segment
 * is queued when the ring returns, and the host waits here for the call's device work, while
 * it watches the group (an abort, a dead peer, the deadline end the wait with that error).
 * After any failure of such a call, release gives this rank's waits the values no peer will
 * write (rr__dev_release) until its stream drained: no wait outlives the call. */
int rr__pg_memop_wait(rr_pg *pg, const rr__pg_call *call, rr__coll *c, const rr__req_dev *dev);
void rr__pg_memop_release(const rr__pg_call *call, const rr__req_dev *dev);
/* Shared by the device paths (group/device.c): the stream their copies and kernels go on
 * (the group's own for the device, after cuda_ready; without events, the call's), and a
 * failure on a device path: its message names the rank, the call and `how` it ran, and the
 * group aborts. */
int rr__cuda_pg_copy_stream(rr_pg *pg, const rr__pg_call *call, int device, void **s);
int rr__cuda_pg_fail(rr_pg *pg, const rr__args *a, int st, const char *what, const char *how);
/* The group's CUDA stream (NULL: the legacy default stream), captured when a call is made. */
void *rr__cuda_pg_stream(rr_pg *pg);
/* rr_pg_options.device: check it and make it current on the calling thread. */
int rr__cuda_pg_use_device(int device, int rank);
/* Free the group's CUDA resources (pinned staging memory, copy streams). */
void rr__cuda_pg_free(rr_pg *pg);
/* At submission, on the caller's thread: for a call with device buffers, make its events and
 * record cuda_ready on the call's stream (so the call starts after the work queued before
 * it, without blocking anyone). A failure aborts the group, as one inside a call would. */
int rr__cuda_pg_prepare(rr_pg *pg, rr__pg_call *call);
/* After the call completed: blocking, wait for cuda_done on the host (the result is in the
 * buffer); else make the call's stream wait for it (later work on it sees the result). */
int rr__cuda_pg_finish(const rr_pg *pg, const rr__pg_call *call, int blocking);
/* rr_work_test's question: 1 when the result's copy to the device completed (or there is
 * none), 0 while it runs, < 0 on a CUDA error. */
int rr__cuda_pg_done(const rr__pg_call *call);
/* Destroy the call's events (after the call ran, or when it was never queued). Each of these
 * makes its CUDA calls on the call's device (call->device, recorded at submission), whatever
 * the calling thread's current device. */
void rr__cuda_pg_release(rr__pg_call *call);

#endif /* RR__GROUP_PG_H_ */
