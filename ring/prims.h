/* What every algorithm in ring/ is written against (NCCL's primitives, UCC's ring patterns):
 * the call it runs (rr__args), the context of one running call (rr__coll), and the few
 * primitives it may use — the call header exchange, the step in its named kinds (NCCL's
 * send / recv / recvReduceSend / recvCopySend, pipelined, and recursive doubling's
 * whole-buffer swap), waiting with a deadline, scratch memory. An algorithm sees group
 * ranks, buffers and the comm's message posting (transport/comm.h), never a transport, a
 * socket or the process group; nothing here calls an algorithm (the dispatcher above them
 * does: ring/coll.h). */
#ifndef RR__RING_PRIMS_H_
#define RR__RING_PRIMS_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"
#include "ring/hdr.h"
#include "ring/ring.h"
#include "ringreduce/ringreduce.h"
#include "transport/comm.h"

/* What a call asked for, validated at submission (group/api.c). Ranks are group ranks. The
 * group keeps what it alone needs around a call (how it runs, its CUDA stream and events) in
 * its own call record (group/pg.h, rr__pg_call). */
typedef struct rr__args {
  int kind; /* enum rr__kind; RR__K_SEND is a send, RR__K_RECV a recv */
  const void *sendbuf;
  void *recvbuf;
  /* elements: one rank's block for all_gather / reduce_scatter / gather / scatter /
   * all_to_all, the total sent for all_to_allv (messages only), else the buffer */
  size_t count;
  rr_dtype dtype;
  rr_op op;
  int root;         /* group rank, -1 if none */
  int peer;         /* group rank for send / recv (RR__PEER_ANY: recv from any); sendrecv's dst */
  int src;          /* the source of a sendrecv */
  size_t recvcount; /* of a sendrecv; all_to_allv: the total received (messages only) */
  /* all_to_allv: [size] each, in elements, indexed by group rank. A call that runs at once
   * reads the caller's arrays; a queued one may outlive them, so its work points these at
   * a copy of its own (group/work.c). */
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
  /* recv: where the global rank of the sender goes once the receive succeeded (NULL: nobody
   * asks). The caller's int for a blocking call, the work's for a queued one: the ring never
   * writes into the args themselves, which are const there. */
  int *source;
} rr__args;

/* rr__args.peer of a recv from any rank (RR_ANY_SOURCE): not -1, which means "no peer". */
#define RR__PEER_ANY (-2)

/* RR_TRACE (ring/trace.h): off, text lines on stderr, or JSON lines in a file. */
enum rr__trace_mode { RR__TRACE_OFF, RR__TRACE_TEXT, RR__TRACE_FILE };

/* What the ring keeps between the calls of one group; the group owns it and lends it to
 * each call. */
typedef struct rr__coll_state {
  const int *global_ranks; /* [size]: group rank -> global rank, for messages */
  uint64_t seq;            /* collectives run so far: the next one's number */
  uint64_t *p2p_sent;      /* [size] sends to each peer so far */
  uint64_t *p2p_recvd;     /* [size] receives from each peer so far */
  int any_last;            /* the group rank a recv from any rank took its message from last */
  uint64_t any_calls;      /* recvs from any rank so far (their peek stamps, sendrecv.c) */
  char *staging;           /* nslots * seg_bytes: receive slots for reductions */
  size_t seg_bytes;
  size_t ipc_seg_bytes; /* collectives through CUDA IPC (group/run.c) */
  int nslots;
  /* The tunables a call reads, taken once when the group is made (rr__coll_state_setup):
   * RR_ALGO (enum rr__algo, RR__ALGO_NONE: by size), RR_SMALL_BYTES, and RR_TRACE as
   * rr__trace_mode() gives it. */
  int algo;
  size_t small_bytes;
  int trace;
  void *scratch; /* grow-only, for partial chunks (reduce_scatter) and recursive doubling */
  size_t scratch_bytes;
  /* The same in device memory, for calls on device buffers (CUDA IPC; freed by the group,
   * group/device.c), on dev_scratch_device. */
  void *dev_scratch;
  size_t dev_scratch_bytes;
  int dev_scratch_device;
  /* CUDA memory the group's calls outgrew (the device scratch, the group's pinned staging
   * buffer): freeing it inside a call would wait for the whole device, so it is kept here
   * and freed with the group (cuda/cuda.h, rr__cuda_retire). */
  struct rr__cuda_retired *cuda_retired;
  /* The piped path's pinned slots and events (ring/pipe_dev.c; NULL until its first call). */
  struct rr__piped *piped;
} rr__coll_state;

/* The context of one running call. */
typedef struct rr__coll {
  rr__coll_state *cs;
  rr__comm *cm;
  const rr__args *a;
  int n, r;         /* group size and rank */
  size_t esize;     /* bytes per element */
  size_t seg;       /* elements per pipeline segment */
  size_t seg_bytes; /* the segment size it came from: cs->seg_bytes, or RR_IPC_SEG_BYTES */
  int may_spin;     /* the caller blocks on this call: a wait may poll before sleeping
                     (RR__COMM_SPIN_DEVICE for a device call's: transport/comm.h) */
  rr__hdr hdr;      /* this rank's call as it goes on the wire */
  int any_src;      /* recv from any rank: the group rank it takes its message from; -1 before */
  int64_t deadline_ms;
  int64_t timeout_ms;
  /* Where the call is ("reduce-scatter step 2/3"), for error messages and traces. Set with
   * RR__WHERE, which keeps the format and its numbers; rr__coll_where formats them only
   * when a message needs the text. */
  char where[96];
  const char *where_fmt;
  int where_arg[3];
  size_t seg_at, seg_total;    /* the segment a pipelined step waits for (0 total: none) */
  struct rr__hdr_sends *sends; /* header messages of this call still to be flushed */
  int trace_step;              /* RR_TRACE: steps of this call traced so far */
  int64_t trace_t0;            /* RR_TRACE file: the call's start on the wall clock */
  /* Where the call's bytes live (ring/mem.h): host memory unless the group said otherwise
   * (rr__coll_on_device), and for device buffers, their device and the CUDA stream every
   * copy and kernel of the call goes on. Only the memory's own code reads dev. */
  const struct rr__mem *mem;
  const rr__req_dev *dev;
} rr__coll;

/* The global rank of group rank r, for messages and traces. */
static inline int rr__grank(const rr__coll *c, int r) {
  return c->cs->global_ranks[r];
}

/* The message number of a pipelined step's segment k: k + 1, since message 0 is the call
 * header's, which goes both ways on the first lane (ring/pipe.c, rr__lane_for). Host and
 * device pipes must number alike: a rank on device buffers talks to one on host buffers. */
static inline int rr__seg_msg(size_t k) {
  return (int)(k + 1);
}
/* A point-to-point call (send, recv, sendrecv): numbered per pair, not in the group's
 * sequence of collectives. */
static inline int rr__coll_is_p2p(const rr__coll *c) {
  return rr__kind_has(c->a->kind, RR__KF_P2P);
}
/* The text of the latest RR__WHERE ("" if none). */
const char *rr__coll_where(rr__coll *c);

/* ---- the call's memory (ring/mem.h), whatever it is ---- */

/* The group's grow-only scratch buffer, at least `bytes`, in the call's memory. */
int rr__coll_scratch(rr__coll *c, size_t bytes, void **out);
/* Copy `bytes` (the regions may overlap), in order with the call's other work on its memory:
 * on the host at once, on a device queued on the call's stream. */
int rr__coll_copy(const rr__coll *c, void *dst, const void *src, size_t bytes);
/* dst[i] = a[i] (op) b[i] for i < n elements of the call's dtype and op (AVG divides by
 * avg_div when > 0), in order likewise (ring/op.c's loops, or cuda/'s kernel). */
int rr__coll_reduce(const rr__coll *c, void *dst, const void *a, const void *b, size_t n,
                    int avg_div);

/* Record where the call is: a format with up to three int arguments. Formatting it on every
 * step would cost more than a small call's whole bookkeeping, so only the format and the
 * numbers are kept. The dead snprintf lets the compiler check the format against its
 * arguments. */
#define RR__WHERE(c, ...)                                     \
  do {                                                        \
    if (0) snprintf(NULL, 0, __VA_ARGS__);                    \
    rr__where_set((c), RR__WHERE_ARGS(__VA_ARGS__, 0, 0, 0)); \
  } while (0)
#define RR__WHERE_ARGS(fmt, a, b, d, ...) (fmt), (a), (b), (d)
static inline void rr__where_set(rr__coll *c, const char *fmt, int a, int b, int d) {
  c->where_fmt = fmt;
  c->where_arg[0] = a;
  c->where_arg[1] = b;
  c->where_arg[2] = d;
}

/* ---- call headers and waiting (ring/prims.c) ---- */

/* Header sends still on the wire when a call ends would point into its stack frame, so
 * every header goes through this small table, which the dispatcher keeps in its frame for
 * the length of the call (rr__coll.sends), and the call waits for all of them at its end. */
#define RR__MAX_HDR_SENDS 64
typedef struct rr__hdr_sends {
  rr__req req[RR__MAX_HDR_SENDS];
  uint8_t wire[RR__MAX_HDR_SENDS][RR__HDR_BYTES];
  int peer[RR__MAX_HDR_SENDS];
  int n;
} rr__hdr_sends;
/* Wait until this call's header messages have left (the end of a call). */
int rr__coll_flush_hdrs(rr__coll *c);

/* Send this rank's header to `to` (before any data for it in this call). */
int rr__coll_send_hdr(rr__coll *c, int to);
/* Receive `from`'s header and compare it with ours; a difference fails every rank with
 * RR_EMISMATCH and both calls in the message. */
int rr__coll_recv_hdr(rr__coll *c, int from);
/* The same in two halves, so a header can share a system call with the data behind it:
 * post the receive into wire[RR__HDR_BYTES], then check it once it completed. */
int rr__coll_post_hdr(rr__coll *c, int from, rr__req *r, uint8_t *wire);
int rr__coll_check_hdr(rr__coll *c, int from, const uint8_t *wire);
/* Rooted collectives end with a completion notice from the rank that saw the whole chain
 * valid (`from`), so no rank returns success from a call another rank rejected. */
int rr__coll_send_ack(rr__coll *c, int to);
int rr__coll_recv_ack(rr__coll *c, int from);
/* all_to_allv: the pair from -> this rank disagrees on its size (`sent` elements on the
 * sender's side, `expected` on ours): RR_EMISMATCH naming the pair and both counts. */
int rr__coll_pair_mismatch(rr__coll *c, int from, uint64_t sent, uint64_t expected);
/* Block (progressing every lane) until r completes; `peer` is who we wait for. */
int rr__coll_wait(rr__coll *c, rr__req *r, int peer);
/* Sleep once in the comm's wait; a timeout becomes a message naming `peer`. */
int rr__coll_block(rr__coll *c, int peer);

/* ---- the step (ring/pipe.c) ----
 *
 * One step sends one buffer to one neighbour while receiving one from another. A pipelined
 * step cuts both into segments, so that a received segment is processed while the next ones
 * are on the wire; a whole step (recursive doubling) sends each as one message behind the
 * call header. What happens to received bytes is the step's kind; build steps with the
 * constructors below, never by filling the fields. */
enum rr__step_kind {
  RR__STEP_COPY,       /* received bytes land in rbuf (straight from the wire) */
  RR__STEP_REDUCE,     /* rbuf = own (op) received, through the group's staging slots */
  RR__STEP_FWD_COPY,   /* chain: each segment lands in rbuf, then is sent on to `to` */
  RR__STEP_FWD_REDUCE, /* chain: own (op) received into a slot, then the slot is sent on */
};

typedef struct rr__step {
  int kind; /* enum rr__step_kind */
  int to;   /* group rank, -1: nothing to send */
  const void *sbuf;
  size_t scount;
  int from;   /* group rank, -1: nothing to receive */
  void *rbuf; /* where received data ends (NULL for FWD_REDUCE: a slot) */
  size_t rcount;
  const void *own; /* the local operand of a reduction (may equal rbuf) */
  /* > 0: AVG divides by this; in the last reduction of a pipelined step, after the
   * combination of a whole one (so half types round as recursive doubling always did) */
  int avg_div;
  /* Whole: each side is one message behind the call header (both posted at once, so a header
   * and its data share a system call), and a reduction's received buffer lands in `land`
   * first. got_first: reduce as received (op) own (recursive doubling puts the lower rank's
   * operand first, so that both ranks of a pair compute the same bits). */
  int whole, got_first;
  void *land;
  /* Labels only, for RR_TRACE and messages: the chunk numbers sent and received (-1: none),
   * and the phase of the algorithm (NULL: the kind's phase column, ring/kind.h). */
  int schunk, rchunk;
  const char *phase;
  /* An all-gather step: what it sends lies in the sender's output at the offset where the
   * receiver writes it, and is final (never written again in the call), so a receiver on
   * device buffers may read it there (transport/cuda_ipc.h, "pull"; ring/pipe_dev.c). */
  int pull;
} rr__step;

/* send: `count` elements of buf to `to`. */
static inline rr__step rr__step_send(int to, const void *buf, size_t count) {
  return (rr__step){.kind = RR__STEP_COPY,
                    .to = to,
                    .sbuf = buf,
                    .scount = count,
                    .from = -1,
                    .schunk = -1,
                    .rchunk = -1};
}
/* recv: `count` elements from `from` into buf. */
static inline rr__step rr__step_recv(int from, void *buf, size_t count) {
  return (rr__step){.kind = RR__STEP_COPY,
                    .to = -1,
                    .from = from,
                    .rbuf = buf,
                    .rcount = count,
                    .schunk = -1,
                    .rchunk = -1};
}
/* send + recv: both at once, received bytes landing in place (all-gather, sendrecv). */
static inline rr__step rr__step_send_recv(int to, const void *sbuf, size_t scount, int from,
                                          void *rbuf, size_t rcount) {
  return (rr__step){.kind = RR__STEP_COPY,
                    .to = to,
                    .sbuf = sbuf,
                    .scount = scount,
                    .from = from,
                    .rbuf = rbuf,
                    .rcount = rcount,
                    .schunk = -1,
                    .rchunk = -1};
}
/* send + recvReduce: send while dst = own (op) what arrives (a reduce-scatter step). */
static inline rr__step rr__step_send_recv_reduce(int to, const void *sbuf, size_t scount, int from,
                                                 void *dst, const void *own, size_t rcount,
                                                 int avg_div) {
  return (rr__step){.kind = RR__STEP_REDUCE,
                    .to = to,
                    .sbuf = sbuf,
                    .scount = scount,
                    .from = from,
                    .rbuf = dst,
                    .rcount = rcount,
                    .own = own,
                    .avg_div = avg_div,
                    .schunk = -1,
                    .rchunk = -1};
}
/* recvReduce: dst = own (op) what arrives from `from` (the end of a reduction). */
static inline rr__step rr__step_recv_reduce(int from, void *dst, const void *own, size_t count,
                                            int avg_div) {
  rr__step st = rr__step_send_recv_reduce(-1, NULL, 0, from, dst, own, count, avg_div);
  return st;
}
/* recvCopySend: a chain's middle link; each segment lands in buf and goes on to `to`. */
static inline rr__step rr__step_recv_copy_send(int from, void *buf, size_t count, int to) {
  return (rr__step){.kind = RR__STEP_FWD_COPY,
                    .to = to,
                    .scount = count,
                    .from = from,
                    .rbuf = buf,
                    .rcount = count,
                    .schunk = -1,
                    .rchunk = -1};
}
/* recvReduceSend: a chain's middle link; own (op) each arriving segment goes on to `to`
 * from the staging slot it was reduced in. */
static inline rr__step rr__step_recv_reduce_send(int from, const void *own, size_t count, int to) {
  return (rr__step){.kind = RR__STEP_FWD_REDUCE,
                    .to = to,
                    .scount = count,
                    .from = from,
                    .rcount = count,
                    .own = own,
                    .schunk = -1,
                    .rchunk = -1};
}
/* Whole buffers, as recursive doubling moves them (the buffer is chunk 0). A whole copy either
 * sends buf to `to` or receives `from`'s into it (the other -1). A whole reduce sends buf to
 * `to` (-1: none) while `from`'s arrives in `land`, then makes buf the two combined, the
 * received one first when got_first. */
static inline rr__step rr__step_whole_copy(int to, int from, void *buf, size_t count) {
  rr__step st = rr__step_send_recv(to, buf, count, from, buf, count);
  st.whole = 1, st.schunk = to >= 0 ? 0 : -1, st.rchunk = from >= 0 ? 0 : -1;
  return st;
}
static inline rr__step rr__step_whole_reduce(int to, int from, void *buf, void *land, size_t count,
                                             int got_first, int avg_div) {
  rr__step st = rr__step_send_recv_reduce(to, buf, count, from, buf, buf, count, avg_div);
  st.whole = 1, st.got_first = got_first, st.land = land;
  st.schunk = to >= 0 ? 0 : -1, st.rchunk = 0;
  return st;
}

/* The pull's descriptions (ring/pipe_dev.c; transport/cuda_ipc.h, "pull"): a call whose
 * all-gather steps pull sends a description of its output to `right` and receives `left`'s,
 * on message 0 behind the call header (post), and has it before its first pulling step
 * (wait). Nothing for any other call. */
int rr__coll_pull_post(rr__coll *c, int right, int left);
int rr__coll_pull_wait(rr__coll *c, int left);

/* Execute a step; returns when all its sends and receives completed, so the next step may
 * overwrite anything this one was sending. */
int rr__pipe_step(rr__coll *c, const rr__step *st);

#endif /* RR__RING_PRIMS_H_ */
