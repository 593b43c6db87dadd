/* What a kind of call is, in one table: its names, whether it reduces, has a root or a
 * peer, how many elements it reads and writes on each rank, the aliasing it accepts as in
 * place, its default algorithm and the function that runs it, how it runs on device
 * buffers, how its calls are numbered, what a trace calls its steps, and how messages
 * describe it. The public calls' checks (group/api.c), the device paths (group/ipc.c,
 * group/staging.c), the call header (ring/hdr.c), the dispatch (ring/coll.c) and the trace
 * (ring/trace.c) all read it, so a new collective is one row here plus its algorithm file
 * (docs/layout.md shows one).
 *
 * Kept like the status codes (RR_STATUS_MAP in ringreduce.h, libuv's UV_ERRNO_MAP): one
 * X-macro list expanded into the enum and the table. */
#ifndef RR__RING_KIND_H_
#define RR__RING_KIND_H_

#include <stddef.h>
#include <stdint.h>

/* Algorithms, as the call header carries them: every rank must run the same one. Each row:
 *   the enum's suffix, the trace's short name (a JSON field the viewer reads: keep it
 *   stable; RR_ALGO names all_reduce's by it) and the name an error message uses;
 *   whole: each of its steps moves a whole buffer, not a chunk of one (a trace numbers the
 *   chunk 0); segs: its steps are cut into segments, so the call header carries the
 *   segment size, which every rank must share (recursive doubling sends whole messages). */
#define RR__ALGO_MAP(X)                             \
  X(RING, "ring", "ring", 0, 1)                     \
  X(RD, "rd", "recursive doubling", 1, 0)           \
  X(CHAIN, "chain", "chain", 1, 1)                  \
  X(DISSEM, "dissemination", "dissemination", 0, 1) \
  X(STAR, "star", "star", 1, 1)                     \
  X(LINEAR, "linear", "linear", 0, 1)               \
  X(PAIRWISE, "pairwise", "pairwise", 0, 1)         \
  X(DIRECT, "direct", "one kernel", 1, 0)

enum rr__algo {
  RR__ALGO_NONE = 0, /* point to point: no algorithm of the group's ("p2p" in a trace) */
#define RR__ALGO_ENUM(name, ...) RR__ALGO_##name,
  RR__ALGO_MAP(RR__ALGO_ENUM)
#undef RR__ALGO_ENUM
      RR__ALGO_END
};

typedef struct rr__algo_info {
  const char *short_name, *long_name;
  uint8_t whole, segs;
} rr__algo_info;
/* The table (ring/kind.c), indexed by algorithm. */
extern const rr__algo_info rr__algo_table[RR__ALGO_END];
/* The row of an algorithm; RR__ALGO_NONE's for a value that is none. */
static inline const rr__algo_info *rr__algo(int algo) {
  return &rr__algo_table[algo > 0 && algo < RR__ALGO_END ? algo : RR__ALGO_NONE];
}
/* The algorithm of a short name (RR_ALGO's value), RR__ALGO_NONE for any other ("auto"). */
int rr__algo_by_name(const char *short_name);

/* How many elements a call reads from its sendbuf (in) or writes to its recvbuf (out), in
 * terms of its arguments; n is the group's size. */
enum rr__io_shape {
  RR__IO_NONE,      /* no buffer on this side */
  RR__IO_COUNT,     /* count */
  RR__IO_COUNT_N,   /* count from or for each rank: count * n */
  RR__IO_RECVCOUNT, /* recvcount (sendrecv's receiving half) */
  RR__IO_DISPLS,    /* up to the end of the last non-empty block (all_to_allv's counts and
                     * displacements); the blocks need not tile the buffer */
};

/* When sendbuf and recvbuf may overlap: exactly NCCL's aliasing. Any other overlap fails
 * the call, since it would corrupt data. "rank" is this rank, blocks are `count` long. */
enum rr__inplace {
  RR__INPLACE_SAME,         /* sendbuf == recvbuf */
  RR__INPLACE_SEND_AT_RANK, /* sendbuf == recvbuf + rank*count (all_gather) */
  RR__INPLACE_RECV_AT_RANK, /* recvbuf == sendbuf + rank*count (reduce_scatter) */
  RR__INPLACE_SEND_AT_ROOT, /* sendbuf == recvbuf + root*count (gather, at the root) */
  RR__INPLACE_RECV_AT_ROOT, /* recvbuf == sendbuf + root*count (scatter, at the root) */
  RR__INPLACE_NEVER,        /* receiving over what is still to be sent */
};

/* Flags of a kind. */
#define RR__KF_REDUCES 0x01u     /* combines the ranks' data with an op (which is checked) */
#define RR__KF_ROOTED 0x02u      /* has a root */
#define RR__KF_P2P 0x04u         /* point to point: has a peer, numbered per pair */
#define RR__KF_ROOT_READS 0x08u  /* only the root reads its sendbuf */
#define RR__KF_ROOT_WRITES 0x10u /* only the root writes its recvbuf */
#define RR__KF_SOLO                                          \
  0x20u /* its algorithm runs in a group of one too (for the \
         * others, one rank copies sendbuf to recvbuf) */
#define RR__KF_VIEW                                               \
  0x40u /* tools/ringreduce-view replays it: the trace file keeps \
         * its input and output values */
#define RR__KF_CHOOSE                                               \
  0x80u /* its algorithm is chosen per call (ring/coll.c): RR_ALGO, \
         * else recursive doubling up to RR_SMALL_BYTES, else the   \
         * row's; the others it may run: RR__KIND_ALGO_MAP */

/* How a kind runs on device buffers (group/ipc.c). Any call may be staged through pinned
 * host memory (group/staging.c); the forms say what more it may do. */
enum rr__dev_form {
  RR__DEV_HOST,    /* staged only */
  RR__DEV_IPC,     /* device to device over CUDA IPC, cut at RR_SEG_BYTES like a host call:
                    * a rank may move nothing (all_to_allv) or face a host buffer (point to
                    * point), and both ends of a message must cut it alike */
  RR__DEV_IPC_SEG, /* over CUDA IPC at RR_IPC_SEG_BYTES: every rank moves the same bytes, so
                    * every rank takes CUDA IPC or the call fails */
  RR__DEV_PIPE,    /* as IPC_SEG; where the lanes carry host bytes only, piped through
                    * pinned slots with the reductions on the GPU (its algorithm's steps are
                    * plain pipelined ones: no forwarding, no whole messages) */
};

/* How a kind's calls are numbered (the header's seq, ring/coll.c): in the group's sequence
 * of collectives; per pair, as a send or as a receive (one from any rank once its sender is
 * known, ring/sendrecv.c); or per half, by its algorithm. */
enum rr__seq_form { RR__SEQ_GROUP, RR__SEQ_SENT, RR__SEQ_RECVD, RR__SEQ_HALVES };

/* X(NAME, name, wire_name, flags, in, out, inplace, algo, run, dev, seq, phase, desc, call)
 *   name:      the public call (rr_<name>), in argument errors
 *   wire_name: the call as its header describes it, in mismatch messages and traces
 *   in, out:   RR__IO_<in>, RR__IO_<out>;  inplace: RR__INPLACE_<inplace>
 *   algo:      RR__ALGO_<algo>, the one its header names (with RR__KF_CHOOSE, the default)
 *   run:       the algorithm (ring/<file>.c, declared in ring/algo.h); ring/coll.c runs it
 *   dev:       RR__DEV_<dev>;  seq: RR__SEQ_<seq>
 *   phase:     what a trace calls its steps (a step may name its own: rr__step.phase)
 *   desc:      its header in words, for mismatch messages and logs (ring/hdr.c): {kind},
 *              {seq}, {count}, {dtype}, {op}, {algo} and {root} are the header's fields
 *   call:      the call in words where its header says too little (ring/coll.c; NULL: the
 *              header's), with {peer}, {src} (global ranks) and {recvcount} besides
 *
 * The kinds a header carries, in their wire order: a row's place is its value on the
 * wire, so new rows go at the end. none and completion are not calls: completion is the
 * notice that ends a rooted collective (and all_to_allv). A send's header is what the
 * matching recv sees; an all_to_allv header's count is that of one pair (what its sender
 * sends to its receiver). */
#define RR__KIND_WIRE_MAP(X)                                                                       \
  X(NONE, "none", "none", 0, NONE, NONE, NEVER, NONE, NULL, HOST, GROUP, "none", "{kind} #{seq}",  \
    NULL)                                                                                          \
  X(ALL_REDUCE, "all_reduce", "all_reduce", RR__KF_REDUCES | RR__KF_VIEW | RR__KF_CHOOSE, COUNT,   \
    COUNT, SAME, RING, rr__all_reduce_ring, PIPE, GROUP, "all-reduce",                             \
    "{kind} #{seq} ({count} x {dtype}, {op}, {algo})", NULL)                                       \
  X(REDUCE_SCATTER, "reduce_scatter", "reduce_scatter", RR__KF_REDUCES | RR__KF_VIEW, COUNT_N,     \
    COUNT, RECV_AT_RANK, RING, rr__reduce_scatter_ring, PIPE, GROUP, "reduce-scatter",             \
    "{kind} #{seq} ({count} x {dtype}, {op}, {algo})", NULL)                                       \
  X(ALL_GATHER, "all_gather", "all_gather", RR__KF_VIEW, COUNT, COUNT_N, SEND_AT_RANK, RING,       \
    rr__all_gather_ring, PIPE, GROUP, "all-gather", "{kind} #{seq} ({count} x {dtype})", NULL)     \
  X(BROADCAST, "broadcast", "broadcast", RR__KF_ROOTED | RR__KF_ROOT_READS | RR__KF_VIEW, COUNT,   \
    COUNT, SAME, CHAIN, rr__broadcast_chain, IPC_SEG, GROUP, "broadcast",                          \
    "{kind} #{seq} ({count} x {dtype}, root {root})", NULL)                                        \
  X(REDUCE, "reduce", "reduce", RR__KF_REDUCES | RR__KF_ROOTED | RR__KF_ROOT_WRITES | RR__KF_VIEW, \
    COUNT, COUNT, SAME, CHAIN, rr__reduce_chain, IPC_SEG, GROUP, "reduce",                         \
    "{kind} #{seq} ({count} x {dtype}, {op}, root {root})", NULL)                                  \
  X(BARRIER, "barrier", "barrier", 0, NONE, NONE, NEVER, DISSEM, rr__barrier_dissem, HOST, GROUP,  \
    "barrier", "{kind} #{seq}", NULL)                                                              \
  X(SEND, "send", "send/recv", RR__KF_P2P | RR__KF_SOLO, COUNT, NONE, NEVER, NONE, rr__send_p2p,   \
    IPC, SENT, "p2p", "{kind} #{seq} of this pair ({count} x {dtype})",                            \
    "send to rank {peer} (#{seq} of this pair, {count} x {dtype})")                                \
  X(ACK, "completion", "completion", 0, NONE, NONE, NEVER, NONE, NULL, HOST, GROUP, "completion",  \
    "the completion notice of call #{seq}", NULL)                                                  \
  X(GATHER, "gather", "gather", RR__KF_ROOTED | RR__KF_ROOT_WRITES, COUNT, COUNT_N, SEND_AT_ROOT,  \
    LINEAR, rr__gather_linear, IPC, GROUP, "gather",                                               \
    "{kind} #{seq} ({count} x {dtype} per rank, root {root})", NULL)                               \
  X(SCATTER, "scatter", "scatter", RR__KF_ROOTED | RR__KF_ROOT_READS, COUNT_N, COUNT,              \
    RECV_AT_ROOT, LINEAR, rr__scatter_linear, IPC, GROUP, "scatter",                               \
    "{kind} #{seq} ({count} x {dtype} per rank, root {root})", NULL)                               \
  X(ALL_TO_ALL, "all_to_all", "all_to_all", 0, COUNT_N, COUNT_N, NEVER, PAIRWISE,                  \
    rr__all_to_all_pairwise, IPC, GROUP, "exchange", "{kind} #{seq} ({count} x {dtype} per rank)", \
    NULL)                                                                                          \
  X(ALL_TO_ALLV, "all_to_allv", "all_to_allv", RR__KF_SOLO, DISPLS, DISPLS, NEVER, PAIRWISE,       \
    rr__all_to_allv_pairwise, IPC, GROUP, "exchange",                                              \
    "{kind} #{seq} ({dtype}, {count} on this pair)",                                               \
    "{kind} #{seq} ({dtype}, {count} sent and {recvcount} received in all)")

/* Kinds of call that never appear in a header: the other halves of point to point, whose
 * headers travel as a send (rr__kind_wire). */
#define RR__KIND_CALL_MAP(X)                                                                     \
  X(RECV, "recv", "send/recv", RR__KF_P2P | RR__KF_SOLO, NONE, COUNT, NEVER, NONE, rr__recv_p2p, \
    IPC, RECVD, "p2p", NULL, "recv from rank {peer} (#{seq} of this pair, {count} x {dtype})")   \
  X(SENDRECV, "sendrecv", "send/recv", RR__KF_P2P | RR__KF_SOLO, COUNT, RECVCOUNT, NEVER, NONE,  \
    rr__sendrecv_p2p, IPC, HALVES, "p2p", NULL,                                                  \
    "sendrecv ({count} x {dtype} to rank {peer}, {recvcount} from rank {src})")

#define RR__KIND_MAP(X) RR__KIND_WIRE_MAP(X) RR__KIND_CALL_MAP(X)

/* The other algorithms of a kind that chooses (RR__KF_CHOOSE), X(KIND, ALGO, run): a new
 * algorithm for an existing kind is a row here and its file. */
#define RR__KIND_ALGO_MAP(X)           \
  X(ALL_REDUCE, RD, rr__all_reduce_rd) \
  X(ALL_REDUCE, STAR, rr__all_reduce_star)

enum rr__kind {
#define RR__KIND_ENUM(K, ...) RR__K_##K,
  RR__KIND_WIRE_MAP(RR__KIND_ENUM)
      RR__K_COUNT, /* the wire kinds are below this (a header with another is malformed) */
  RR__KIND_CALL_MAP(RR__KIND_ENUM) RR__K_END
#undef RR__KIND_ENUM
};

/* One row of the table, but for its `run` column: the functions are the dispatcher's
 * (ring/coll.c), so that the table every file of ring/ reads points at no algorithm. */
typedef struct rr__kind_info {
  const char *name, *wire_name;
  unsigned flags;  /* RR__KF_* */
  uint8_t in, out; /* enum rr__io_shape */
  uint8_t inplace; /* enum rr__inplace */
  uint8_t algo;    /* enum rr__algo */
  uint8_t dev;     /* enum rr__dev_form */
  uint8_t seq;     /* enum rr__seq_form */
  const char *phase;
  const char *desc, *call_desc; /* call_desc NULL: the header's desc */
} rr__kind_info;

/* The table (ring/kind.c), indexed by kind; RR__K_COUNT is a gap (no name). */
extern const rr__kind_info rr__kind_table[RR__K_END];
/* The row of a kind; that of RR__K_NONE (no algorithm) for a value that is no kind. Inline:
 * every call reads it on its way through (header, dispatch, waits). */
static inline const rr__kind_info *rr__kind(int kind) {
  if (kind < 0 || kind >= RR__K_END || !rr__kind_table[kind].name)
    return &rr__kind_table[RR__K_NONE];
  return &rr__kind_table[kind];
}
static inline int rr__kind_has(int kind, unsigned flag) {
  return (rr__kind(kind)->flags & flag) != 0;
}
/* The kind a call's header carries: both halves of point to point travel as a send. */
static inline int rr__kind_wire(int kind) {
  return kind > RR__K_COUNT ? RR__K_SEND : kind;
}
/* "all_reduce", "send/recv" ...: the wire name ("unknown" for a value that is no kind). */
const char *rr__kind_name(int kind);

/* What a description's {field}s stand for (rr__kind_format). */
typedef struct rr__kind_vals {
  const char *kind, *dtype, *op, *algo;
  unsigned long long seq, count, recvcount;
  int root, peer, src;
} rr__kind_vals;
/* A desc or call column written into buf with its {field}s filled in. Returns buf. */
const char *rr__kind_format(char *buf, size_t n, const char *fmt, const rr__kind_vals *v);

/* What one rank's call reads and writes, in elements from each buffer's start. */
struct rr__args;
typedef struct rr__call_io {
  size_t in, out; /* 0 on a side this rank does not touch */
  int reads;      /* this rank reads its sendbuf (a non-root of a broadcast or scatter does not) */
  int writes;     /* this rank writes its recvbuf (a non-root of a reduce or gather does not) */
  int gaps;       /* it writes only parts of [recvbuf, recvbuf + out) (all_to_allv's blocks) */
} rr__call_io;

/* For a call of `size` ranks on group rank `rank` (a->root a group rank). An all_to_allv's
 * count and displacement arrays must be valid (group/api.c checks them first). */
rr__call_io rr__kind_io(const struct rr__args *a, int size, int rank);
/* Do sendbuf and recvbuf alias as the kind's in-place rule says (in, out: rr__kind_io's
 * sizes in bytes)? Always 0 for RR__INPLACE_NEVER. */
int rr__kind_in_place(const struct rr__args *a, int rank, size_t in, size_t out);
/* The in-place rule in words, for the error that refuses another overlap. */
const char *rr__kind_in_place_rule(int kind, char *buf, size_t n);

#endif /* RR__RING_KIND_H_ */
