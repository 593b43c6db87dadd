/*
 * ringreduce — ring collectives for data-parallel training, in C.
 *
 * The whole public API. It mirrors torch.distributed: a process group made by
 * rr_init_process_group() (env://, tcp://, file://), collectives with NCCL-style buffers
 * (in-place when sendbuf == recvbuf), an async form of each that returns an rr_work handle,
 * and subgroups made by rr_new_group().
 *
 *   rr_pg *pg;
 *   if (rr_init_process_group(&pg, NULL) != RR_OK) {      // env://: RANK, WORLD_SIZE, ...
 *     fprintf(stderr, "%s\n", rr_last_error());
 *     return 1;
 *   }
 *   rr_all_reduce(pg, grad, grad, n, RR_FLOAT32, RR_SUM);  // in place, like dist.all_reduce
 *   rr_destroy_process_group(pg);
 *
 * Every function returns an rr_status (0 = RR_OK, negative = error). After an error,
 * rr_last_error() returns a sentence naming the rank, the peer, the call and the cause.
 *
 * Thread safety: calls on one group may come from several threads; they run in the order
 * they were issued. Different groups progress independently.
 */
#ifndef RINGREDUCE_RINGREDUCE_H_
#define RINGREDUCE_RINGREDUCE_H_

#include <stddef.h>
#include <stdint.h>

#include "ringreduce/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Only the declarations in this header are exported from libringreduce. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---------------------------------------------------------------------------------------------
 * Status codes. One list generates the enum, the names and the messages (as libuv's
 * UV_ERRNO_MAP): 0 is success, RR_INPROGRESS the one positive value, errors are negative.
 */
#define RR_STATUS_MAP(XX)                                                    \
  XX(OK, 0, "success")                                                       \
  XX(INPROGRESS, 1, "operation still in progress")                           \
  XX(EINVAL, -1, "invalid argument")                                         \
  XX(ENOMEM, -2, "out of memory")                                            \
  XX(ESYS, -3, "system call failed")                                         \
  XX(ETIMEDOUT, -4, "timed out")                                             \
  XX(EPEER, -5, "a peer failed or closed its connection")                    \
  XX(EMISMATCH, -6, "ranks made mismatched calls or use different settings") \
  XX(EPROTO, -7, "protocol error: unexpected data on a connection")          \
  XX(EABORTED, -8, "the group was aborted")                                  \
  XX(ENOTSUP, -9, "operation not supported")                                 \
  XX(ESTATE, -10, "call not valid in the current state")                     \
  XX(EENV, -11, "environment variable missing or malformed")                 \
  XX(EADDR, -12, "address unusable: in use, unreachable or unresolvable")    \
  XX(ECUDA, -13, "CUDA error")                                               \
  XX(ENOTMEMBER, -14, "this rank is not a member of the group")              \
  XX(EREVOKED, -15, "the group was revoked")

typedef enum rr_status {
#define RR__STATUS_ENUM(name, value, msg) RR_##name = (value),
  RR_STATUS_MAP(RR__STATUS_ENUM)
#undef RR__STATUS_ENUM
} rr_status;

/* "RR_ETIMEDOUT" for RR_ETIMEDOUT; "RR_UNKNOWN" for a value not in the list. */
const char *rr_status_name(int status);
/* The one-line meaning of a status ("timed out"). */
const char *rr_strerror(int status);
/* Detail of the last failed call made by this thread: who (rank, peer), which call, why.
 * Never NULL; "" when nothing failed yet. Valid until this thread's next failing call. */
const char *rr_last_error(void);

/* ---------------------------------------------------------------------------------------------
 * Data types and reduction operations.
 */
typedef enum rr_dtype {
  RR_INT8 = 0,
  RR_UINT8,
  RR_INT32,
  RR_INT64,
  RR_FLOAT16,  /* IEEE binary16; reduced in float32 and rounded once per step */
  RR_BFLOAT16, /* bfloat16; reduced in float32 and rounded once per step */
  RR_FLOAT32,
  RR_FLOAT64,
  RR_NUM_DTYPES
} rr_dtype;

typedef enum rr_op {
  RR_SUM = 0,
  RR_PROD,
  RR_MIN,  /* NaN propagates */
  RR_MAX,  /* NaN propagates */
  RR_AVG,  /* sum, then divide by the group size once at the end (integers: truncating) */
  RR_BAND, /* bitwise ops: integer dtypes only */
  RR_BOR,
  RR_BXOR,
  RR_NUM_OPS
} rr_op;

size_t rr_dtype_size(rr_dtype dtype);      /* 0 for an invalid dtype */
const char *rr_dtype_name(rr_dtype dtype); /* nccl-tests names: "int8", "float", "half", ... */
const char *rr_op_name(rr_op op);          /* "sum", "prod", "min", "max", "avg", "band", ... */
/* Parse a name ("float", "float32", "half", "bf16", "sum", ...). RR_EINVAL if unknown. */
int rr_dtype_from_name(const char *name, rr_dtype *dtype);
int rr_op_from_name(const char *name, rr_op *op);

/* ---------------------------------------------------------------------------------------------
 * Process groups.
 */
typedef struct rr_pg rr_pg;     /* a process group: the world, or a subgroup of it */
typedef struct rr_work rr_work; /* a pending asynchronous call */

typedef struct rr_pg_options {
  /* "env://" (the default when NULL), "tcp://host:port?rank=R&world_size=N" or
   * "file:///path?rank=R&world_size=N". */
  const char *init_method;
  /* When world_size > 0 these override the init method and the environment. */
  int rank;
  int world_size;
  /* Deadline of every call on the group, in milliseconds. 0: $RR_TIMEOUT (seconds, may be
   * fractional), else 30 minutes as torch's gloo backend. */
  int64_t timeout_ms;
  /* CUDA device of this rank, >= 0: checked against the device count and made current on
   * the calling thread (as torch's device_id); an error without CUDA or without that
   * device. -1 (the default): nothing is touched, and a CPU-only program creates no CUDA
   * context; calls run on their buffers' device either way. */
  int device;
  /* What the group's members agree names this group, for groups set up through a store
   * other groups share (rr_init_process_group_on_store): any string, the same on every
   * member, different for every group that may set up through the same store at the same
   * time — torch's backend passes the restart attempt, torch's group name and the members'
   * global ranks. The store keys, every record's MAC and every greeting's proof are bound
   * to it, so a record of another group (moved there by whoever can write the store) fails
   * the setup naming the rank instead of pairing ranks across groups. NULL or "": the
   * group is "w", as for a job's world. */
  const char *group_key;
} rr_pg_options;

#define RR_PG_OPTIONS_INIT \
  { NULL, 0, 0, 0, -1, NULL }
void rr_pg_options_init(rr_pg_options *opt);

/* What env:// would read from this process's environment, without joining anything: rank and
 * world size (RANK / WORLD_SIZE, else Slurm's, else Open MPI's), the local rank and the ranks
 * on this node (-1 when unknown), the master's address and port (MASTER_ADDR / MASTER_PORT;
 * under srun, when unset, the step's first node and a port from the job and step ids), and
 * which variable the rank came from. For frameworks that want the launcher's view in their
 * own variables (the torch backend fills RANK, WORLD_SIZE, MASTER_ADDR, ... from it under
 * srun, so that torch's own env:// works there). RR_EENV naming what is missing. */
typedef struct rr_launch_info {
  int rank, world_size;
  int local_rank, local_world_size;
  char master_addr[256];
  int master_port;
  char source[32]; /* "RANK", "SLURM_PROCID" or "OMPI_COMM_WORLD_RANK" */
} rr_launch_info;
int rr_launch_info_get(rr_launch_info *info);

/* Join the job: rendezvous through the store named by the init method, then connect to
 * every peer. opt == NULL means env:// with defaults.
 *
 * env:// reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and LOCAL_RANK,
 * LOCAL_WORLD_SIZE when set). When RANK and WORLD_SIZE are unset it takes them from Slurm
 * (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) or Open MPI (OMPI_COMM_WORLD_RANK, _SIZE,
 * _LOCAL_RANK). A missing variable is RR_EENV with its name in rr_last_error(). */
int rr_init_process_group(rr_pg **pg, const rr_pg_options *opt);

/* Wait for this group's pending calls, close its connections and free it. Destroying the
 * world group while subgroups of it are alive is RR_ESTATE. Returns the group's first error,
 * if an earlier call failed, so a failure is never lost. */
int rr_destroy_process_group(rr_pg *pg);

int rr_get_rank(const rr_pg *pg);       /* this process's rank in the group */
int rr_get_world_size(const rr_pg *pg); /* number of ranks in the group */
/* Translate between a group's ranks and global (world) ranks, as torch's
 * get_global_rank / get_group_rank. -1 when out of range / not a member. */
int rr_get_global_rank(const rr_pg *pg, int group_rank);
int rr_get_group_rank(const rr_pg *pg, int global_rank);

/* Make a subgroup of `parent` from global ranks `ranks` (any order; duplicates are an
 * error). Every rank of `parent` must call it, in the same order, with the same list, as
 * torch's new_group; it ends with a barrier over the parent. Members get a group (ranks
 * sorted: group rank = index in the sorted list); non-members get *group == NULL and RR_OK.
 * On any error *group is NULL and nothing stays attached to the parent (a rank that dies
 * before the final barrier fails the call on the others). timeout_ms == 0 inherits the
 * parent's. */
int rr_new_group(rr_pg *parent, const int *ranks, int nranks, int64_t timeout_ms, rr_pg **group);

/* Change the deadline of the group's later calls (milliseconds, > 0). */
int rr_pg_set_timeout(rr_pg *pg, int64_t timeout_ms);

/* CUDA device buffers: later calls on the group are ordered on `stream` (a cudaStream_t;
 * NULL, the default, means the legacy default stream), as torch's current stream: work
 * queued on it before a call is finished before the call reads its buffers (the call waits
 * for an event recorded on it at submission, not for the whole stream). The result is in
 * the buffers when a blocking call returns, and when rr_work_test reports an async call
 * complete; after rr_work_wait, work queued on the stream sees it (the stream waits for
 * the call's copy back: read it from the host after synchronising the stream, as with
 * torch's work.wait()). The stream is captured when each call is made.
 * cudaStreamPerThread is refused (RR_EINVAL: the call may run on another thread).
 * RR_ENOTSUP in a build without CUDA (docs/cuda.md). */
int rr_pg_set_cuda_stream(rr_pg *pg, void *stream);
/* 1 when this build of the library takes CUDA device buffers (configured with CUDA), 0 when
 * it does not; whether a GPU is present is another question, answered when a call sees a
 * device pointer. Language bindings use it to say which devices they serve. */
int rr_cuda_built(void);

/* Abort the group, from any thread: the running call and every pending and later call on it
 * return RR_EABORTED promptly, and the peers are told (their calls fail too, naming this
 * rank). rr_destroy_process_group afterwards does not block. */
int rr_abort(rr_pg *pg);

/* Say that this process is exiting: a group freed from here on (a framework's exit hooks
 * destroying what the program left) tells its peers that its process exited without
 * destroying it, instead of that it was destroyed, so that a peer still in a call with it
 * reads what happened. The library's own exit handler does the same, but frameworks whose
 * exit hooks run before it (Python's finalizers; the torch backend calls this from its
 * atexit hook) need to say it first. Harmless to call more than once. */
void rr_process_exiting(void);

/* Revoke the group after a failure (a dead peer, a timeout), from any thread, as ULFM's
 * MPIX_Comm_revoke and NCCL's ncclCommRevoke: the running call and every pending and later
 * call on it fail promptly with RR_EREVOKED, here and on every peer that can still be reached
 * (they are told, and pass it on, so a peer this rank cannot reach still hears it from
 * another; a peer still in a collective this rank had finished may complete that one).
 * rr_last_error() names the rank that revoked it and the failure that came before, if any. A revoke
 * replaces an earlier abort's status (calls then say RR_EREVOKED), keeping its reason in the text.
 * Every subgroup made from it by rr_new_group is revoked too (a subgroup's revoke leaves its parent
 * alone). Revoking twice is harmless. Destroying the group afterwards does not block. See
 * docs/elastic.md. */
int rr_pg_revoke(rr_pg *pg);

/* After a failure, called by the survivors only (every rank that is still alive and means
 * to go on), as ULFM's MPIX_Comm_shrink: revokes pg, agrees with the other survivors on who
 * is left, and gives *newpg, a group of those ranks with contiguous ranks in the old order
 * (global ranks unchanged: rr_get_global_rank maps them). The agreement needs no store (the
 * store's host may be the rank that died): it runs over the old group's control sockets,
 * the lowest live rank coordinating and the next one taking over if it dies. A rank that
 * dies or is silent for the group's timeout during the agreement is left out. A new group
 * needs a strict majority of the old one, so two sides of a partition never both form one;
 * otherwise, and when this rank was left out, the call fails (RR_EPEER, or RR_ETIMEDOUT
 * when the coordinator never answered) with *newpg NULL. The new group keeps the control
 * connections and each pair's transport, with fresh data lanes. It has no rendezvous
 * store: rr_new_group on it is RR_ENOTSUP. Destroy pg afterwards (it does not block).
 * flags: 0 (reserved). See docs/elastic.md. */
int rr_pg_shrink(rr_pg *pg, int flags, rr_pg **newpg);

/* Grow a working group by nnew newcomers (torchft's healing; docs/elastic.md, "Growing
 * back"). Collective on every member of pg, at a step boundary (no call of pg in flight);
 * each newcomer calls rr_pg_join at the same address. The group's current rank 0 serves a
 * rendezvous store at addr ("host:port"; NULL or "": $RR_GROW_ADDR) for the length of the
 * call; host must reach rank 0's machine from every newcomer. With RR_JOB_TOKEN set only
 * processes holding the same token get in. *newpg is a new world of pg's size + nnew ranks:
 * members first, in pg's order (rank r stays r), then the newcomers in the order they
 * reached the store; global rank = rank. It has no store afterwards (rr_new_group on it is
 * RR_ENOTSUP). Every member keeps it or none does: when a newcomer does not come within
 * wait_ms (0, or more than pg's timeout: that timeout; the grown group keeps pg's), or
 * anything fails, every member gets the error (RR_ETIMEDOUT naming the missing ranks,
 * ...), *newpg is NULL, pg is left as it was and stays usable, and the newcomers that did
 * come fail too. Otherwise destroy pg when done with it (its connections are not reused).
 * Not thread safe against other calls of rr_pg_grow / rr_pg_grow_pending on pg. flags: 0
 * (reserved). */
int rr_pg_grow(rr_pg *pg, const char *addr, int nnew, int64_t wait_ms, int flags, rr_pg **newpg);

/* Is a newcomer waiting to join at addr (NULL or "": $RR_GROW_ADDR)? Collective on every
 * member of pg, cheap (one broadcast of an int): the group's rank 0 keeps a listener on
 * addr's port from the first call until pg is destroyed (a grown or shrunk group whose rank
 * 0 is the same process takes it over), and *waiting is 1 on every member when a newcomer
 * has knocked there proving the job's token (RR_JOB_TOKEN), else 0: a stranger's connection
 * is closed and costs nothing. A port that cannot be had (taken by another process) is
 * never an error here: *waiting is 0 and a warning is logged (growing is optional). Meant
 * for a step boundary: when it says 1, every member calls rr_pg_grow(pg, addr, 1, ...) at
 * the same step. A newcomer's rr_pg_join knocks, then waits on its connection (within its
 * own timeout) until the growth serves it. docs/elastic.md, "The growth's port". */
int rr_pg_grow_pending(rr_pg *pg, const char *addr, int *waiting);

/* A newcomer's side of rr_pg_grow: connect to the growth's store at addr (NULL or "":
 * $RR_GROW_ADDR), retrying until the members open it, take the next newcomer's rank and
 * set the grown group up with them. opt: NULL, or its timeout_ms (0: $RR_TIMEOUT) and
 * device (init_method, rank and world_size are not used). Fails within the timeout with a
 * clear error when nobody grows at addr (or every growth it met had its newcomers
 * already: it tries the next one until then), when the job token differs (refused by the
 * store at once), or when the members give up. */
int rr_pg_join(const char *addr, const rr_pg_options *opt, rr_pg **newpg);

/* ---------------------------------------------------------------------------------------------
 * Collectives. Buffers follow NCCL: in-place when sendbuf == recvbuf (for all_gather when
 * sendbuf == recvbuf + rank * sendcount, for reduce_scatter when
 * sendbuf + rank * recvcount == recvbuf); otherwise they must not overlap. Counts are in
 * elements. Roots and peers are global ranks, as in torch.distributed.
 *
 * All ranks end with bit-identical results. A call whose arguments differ from the other
 * ranks' (collective, count, dtype, op, root) fails on every rank with RR_EMISMATCH, and
 * rr_last_error() shows both calls. Arguments that are invalid locally fail with RR_EINVAL
 * and send nothing; the group stays usable. One kind of invalid argument is the exception:
 * a check that only some ranks of a correct call make (the root's buffers of a broadcast,
 * reduce, gather or scatter, the in-place offset of an all_gather or reduce_scatter, which
 * depends on the rank). The other ranks may already wait in that call, so such a refusal
 * also aborts the group: every rank fails in that same call with the refusing rank's
 * reason. Any other failure (a dead peer, a timeout) aborts the group: that call and every
 * later call on it return an error naming the rank and the cause.
 */
int rr_all_reduce(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
                  rr_op op);
/* sendbuf holds world_size * recvcount elements; rank r receives block r, reduced. */
int rr_reduce_scatter(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t recvcount,
                      rr_dtype dtype, rr_op op);
/* recvbuf receives world_size * sendcount elements: block r from rank r. */
int rr_all_gather(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t sendcount, rr_dtype dtype);
/* sendbuf is read on the root only; every rank (the root too) gets the data in recvbuf. */
int rr_broadcast(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
                 int root);
/* The root gets the reduction in recvbuf; other ranks' recvbuf is not touched (may be NULL). */
int rr_reduce(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype, rr_op op,
              int root);
/* The root's recvbuf receives world_size * count elements, block r from (group) rank r;
 * other ranks' recvbuf is not touched (may be NULL). In place at the root when
 * sendbuf == recvbuf + root_group_rank * count. */
int rr_gather(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
              int root);
/* The root's sendbuf holds world_size * count elements; every rank (the root too) receives
 * block r in recvbuf. Other ranks' sendbuf is not read (may be NULL). In place at the root
 * when recvbuf == sendbuf + root_group_rank * count. */
int rr_scatter(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
               int root);
/* Block j (count elements) of sendbuf goes to rank j; recvbuf's block i comes from rank i.
 * Both hold world_size * count elements and must not overlap. */
int rr_all_to_all(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype);
/* MPI_Alltoallv: sendcounts[j] elements from sendbuf + sdispls[j] go to rank j, and
 * recvcounts[i] elements from rank i land at recvbuf + rdispls[i] (arrays of world_size,
 * in elements, indexed by group rank). sendcounts[j] on rank i must equal recvcounts[i] on
 * rank j: where a pair disagrees, every rank fails with RR_EMISMATCH naming the pair and
 * both counts. The arrays are copied when the call is made. Receive blocks must not overlap
 * each other, nor the send blocks. */
int rr_all_to_allv(rr_pg *pg, const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                   void *recvbuf, const size_t *recvcounts, const size_t *rdispls, rr_dtype dtype);
int rr_barrier(rr_pg *pg);
/* Point to point: matched in order between each pair of ranks. Calls on a group run in
 * issue order, so a send completes before a later recv starts: two ranks that both send a
 * large message before receiving would wait for each other (as with MPI). Use
 * rr_sendrecv for exchanges. */
int rr_send(rr_pg *pg, const void *buf, size_t count, rr_dtype dtype, int peer);
int rr_recv(rr_pg *pg, void *buf, size_t count, rr_dtype dtype, int peer);
/* As peer of rr_recv / rr_recv_async (MPI_ANY_SOURCE, torch's recv with src=None): take the
 * first message that any other rank of the group sends to this rank, the next one of that
 * pair (pairs still match in order). When several wait, the ranks after the last one chosen
 * come first, so one busy sender cannot starve the others. Count and dtype are checked
 * against that sender's send as for a named peer (RR_EMISMATCH naming both). Host buffers
 * only: a CUDA device or managed buffer is RR_EINVAL (name the source instead). Not for
 * rr_send or rr_sendrecv. */
#define RR_ANY_SOURCE (-1)
/* rr_recv from RR_ANY_SOURCE, blocking; *src (may be NULL) gets the sender's global rank, or
 * -1 when the call failed. */
int rr_recv_any(rr_pg *pg, void *buf, size_t count, rr_dtype dtype, int *src);
/* Send to `dst` and receive from `src` at the same time (MPI_Sendrecv); each half matches
 * an rr_recv / rr_send, or the other half of an rr_sendrecv, on the peer. */
int rr_sendrecv(rr_pg *pg, const void *sendbuf, size_t sendcount, int dst, void *recvbuf,
                size_t recvcount, int src, rr_dtype dtype);

/* The same calls, asynchronous: they return at once with *work set, and the group's
 * background thread runs them in issue order while the caller computes. Buffers must stay
 * valid and untouched until the work completes. */
int rr_all_reduce_async(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
                        rr_op op, rr_work **work);
int rr_reduce_scatter_async(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t recvcount,
                            rr_dtype dtype, rr_op op, rr_work **work);
int rr_all_gather_async(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t sendcount,
                        rr_dtype dtype, rr_work **work);
int rr_broadcast_async(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
                       int root, rr_work **work);
int rr_reduce_async(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
                    rr_op op, int root, rr_work **work);
int rr_gather_async(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
                    int root, rr_work **work);
int rr_scatter_async(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
                     int root, rr_work **work);
int rr_all_to_all_async(rr_pg *pg, const void *sendbuf, void *recvbuf, size_t count, rr_dtype dtype,
                        rr_work **work);
int rr_all_to_allv_async(rr_pg *pg, const void *sendbuf, const size_t *sendcounts,
                         const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                         const size_t *rdispls, rr_dtype dtype, rr_work **work);
int rr_barrier_async(rr_pg *pg, rr_work **work);
int rr_send_async(rr_pg *pg, const void *buf, size_t count, rr_dtype dtype, int peer,
                  rr_work **work);
int rr_recv_async(rr_pg *pg, void *buf, size_t count, rr_dtype dtype, int peer, rr_work **work);
int rr_sendrecv_async(rr_pg *pg, const void *sendbuf, size_t sendcount, int dst, void *recvbuf,
                      size_t recvcount, int src, rr_dtype dtype, rr_work **work);

/* Wait for a work to finish. timeout_ms > 0 bounds this wait: when it passes first, the
 * group is aborted (the collective cannot be resumed half-way) and RR_ETIMEDOUT is returned.
 * timeout_ms == 0 waits as long as the group's own deadline allows; if the group's
 * background thread has not started the work yet (and it is next in line), the waiting
 * thread runs it itself, which saves two thread wake-ups. Returns the call's status; on
 * error rr_last_error() (and rr_work_error()) hold its detail. */
int rr_work_wait(rr_work *work, int64_t timeout_ms);
/* RR_OK when finished successfully, RR_INPROGRESS while running, the error otherwise. */
int rr_work_test(rr_work *work);
/* The global rank a completed rr_recv_async took its message from (the named peer, or the
 * sender found for RR_ANY_SOURCE); -1 for any other work, and while it runs or after it
 * failed. */
int rr_work_source(const rr_work *work);
/* The error text of a failed work, "" otherwise. It lives in the work: valid until
 * rr_work_free. */
const char *rr_work_error(const rr_work *work);
/* Release the handle. A work freed before it finished still runs to completion. */
void rr_work_free(rr_work *work);

/* ---------------------------------------------------------------------------------------------
 * The rendezvous store, as torch's TCPStore / FileStore. A process group's store is made by
 * rr_init_process_group; these let a program make its own.
 */
typedef struct rr_store rr_store;

/* is_master: this process serves the store on host:port (port 0 picks a free one; see
 * rr_store_port). Every process, the master too, is a client. */
int rr_store_tcp(const char *host, int port, int is_master, int64_t timeout_ms, rr_store **store);
int rr_store_file(const char *path, int64_t timeout_ms, rr_store **store);
int rr_store_port(const rr_store *store); /* the TCP port served or used */
int rr_store_set(rr_store *store, const char *key, const void *value, size_t len);
/* Blocks until the key exists or the store's timeout passes. *value is malloc'd: free() it. */
int rr_store_get(rr_store *store, const char *key, void **value, size_t *len);
/* Adds delta to the integer stored (as ASCII decimal) under key; absent keys start at 0. */
int rr_store_add(rr_store *store, const char *key, int64_t delta, int64_t *result);
/* Blocks until every key exists, or timeout_ms (0: the store's timeout) passes. */
int rr_store_wait(rr_store *store, const char *const *keys, int nkeys, int64_t timeout_ms);
/* *exists = 1 when every key exists now; never blocks. */
int rr_store_check(rr_store *store, const char *const *keys, int nkeys, int *exists);
int rr_store_delete(rr_store *store, const char *key, int *deleted);
void rr_store_free(rr_store *store);

/* A store whose operations are the caller's: a framework's own store (torch's TCPStore or
 * PrefixStore) can carry the rendezvous, so a job needs no second port. Each callback
 * returns RR_OK or a negative status (RR_ETIMEDOUT when a get or wait ran out of time),
 * after rr_store_fail() to say why. Arguments reach the callbacks checked (keys 1..4096
 * bytes without NUL). get and wait may block up to timeout_ms; get hands the value over with
 * rr_store_value_set. ctx is passed back untouched; free (may be NULL) is called once, by
 * rr_store_free. check may be NULL (then it is done as a wait with the shortest timeout). */
typedef struct rr_store_value rr_store_value;
typedef struct rr_store_callbacks {
  void *ctx;
  int (*set)(void *ctx, const char *key, const void *value, size_t len);
  int (*get)(void *ctx, const char *key, int64_t timeout_ms, rr_store_value *out);
  int (*add)(void *ctx, const char *key, int64_t delta, int64_t *result);
  int (*wait)(void *ctx, const char *const *keys, int nkeys, int64_t timeout_ms);
  int (*check)(void *ctx, const char *const *keys, int nkeys, int *exists);
  int (*del)(void *ctx, const char *key, int *deleted);
  void (*free)(void *ctx);
} rr_store_callbacks;
int rr_store_from_callbacks(const rr_store_callbacks *cb, int64_t timeout_ms, rr_store **store);
/* In a get callback: the value found (copied). */
int rr_store_value_set(rr_store_value *out, const void *data, size_t len);
/* In a callback: say why it fails; returns status, for `return rr_store_fail(st, "...")`. */
int rr_store_fail(int status, const char *message);

/* Join a job whose rendezvous runs through `store` (any of the above; e.g. one made with
 * rr_store_from_callbacks around a framework's store) instead of an init method's. opt must
 * give rank and world_size (its init_method is not used). The store stays the caller's and
 * must outlive the group. Otherwise as rr_init_process_group. */
int rr_init_process_group_on_store(rr_pg **pg, const rr_pg_options *opt, rr_store *store);

/* ---------------------------------------------------------------------------------------------
 * rr_spawn: torch.multiprocessing.spawn in C. Forks nprocs workers on this host; each gets
 * RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
 * MASTER_PORT in its environment (so rr_init_process_group(&pg, NULL) just works), then
 * calls fn(rank, arg) and exits with its return value (1..255 as they are; any other
 * non-zero value, such as 256 or -1, as 1). When a worker fails (non-zero exit or a signal)
 * the others get SIGTERM, then SIGKILL after $RR_GRACE_PERIOD seconds (default 30). Workers
 * die with the parent. Only the workers' own pids are waited for: other children of the
 * caller are left for the caller to reap. Call it before any threads are started.
 */
typedef struct rr_spawn_status {
  int failed_rank; /* -1 when every worker returned 0 */
  int exit_code;   /* the failed worker's exit code, or 0 */
  int signal;      /* the signal that killed it, or 0 */
} rr_spawn_status;

/* RR_OK when every worker returned 0; RR_EPEER with status (may be NULL) naming the first
 * worker that failed, and rr_last_error() saying how. */
int rr_spawn(int nprocs, int (*fn)(int rank, void *arg), void *arg, rr_spawn_status *status);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* RINGREDUCE_RINGREDUCE_H_ */
