/* What a kind of call is, in one table: its names, whether it reduces, has a root or a
 * peer, how many elements it reads and writes on each rank, the aliasing it accepts as in
 * place, its default algorithm and the function that runs it. The public calls' checks
 * (group/api.c), device staging (group/staging.c), the call header (ring/hdr.c), the
 * dispatch (ring/coll.c) and the trace (ring/trace.c) all read it, so a new collective is
 * one row here plus its algorithm file (docs/layout.md shows one).
 *
 * Kept like the status codes (RR_STATUS_MAP in ringreduce.h, libuv's UV_ERRNO_MAP): one
 * X-macro list expanded into the enum and the table. */
#ifndef RR__RING_KIND_H_
#define RR__RING_KIND_H_

#include <stddef.h>
#include <stdint.h>

/* Algorithms, as the call header carries them: every rank must run the same one. Each row:
 * the enum's suffix, the trace's short name (a JSON field the viewer reads: keep it stable)
 * and the name an error message uses. */
#define RR__ALGO_MAP(X)                             \
  X(RING, "ring", "ring")                           \
  X(RD, "rd", "recursive doubling")                 \
  X(CHAIN, "chain", "chain")                        \
  X(DISSEM, "dissemination", "dissemination")       \
  X(STAR, "star", "star")                           \
  X(LINEAR, "linear", "linear")                     \
  X(PAIRWISE, "pairwise", "pairwise")

enum rr__algo {
  RR__ALGO_NONE = 0,
#define RR__ALGO_ENUM(name, short_name, long_name) RR__ALGO_##name,
  RR__ALGO_MAP(RR__ALGO_ENUM)
#undef RR__ALGO_ENUM
};

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
#define RR__KF_SOLO 0x20u        /* its algorithm runs in a group of one too (for the
                                  * others, one rank copies sendbuf to recvbuf) */
#define RR__KF_VIEW 0x40u        /* tools/ringreduce-view replays it: the trace file keeps
                                  * its input and output values */

/* X(NAME, name, wire_name, flags, in, out, inplace, algo, run)
 *   name:      the public call (rr_<name>), in argument errors
 *   wire_name: the call as its header describes it, in mismatch messages and traces
 *   in, out:   RR__IO_<in>, RR__IO_<out>;  inplace: RR__INPLACE_<inplace>
 *   algo:      RR__ALGO_<algo>, the one its header names (all_reduce picks its own:
 *              ring/coll.c); run: the algorithm (ring/<file>.c, declared in ring/coll.h)
 *
 * The kinds a header carries, in their wire order: a row's place is its value on the
 * wire, so new rows go at the end. none and completion are not calls: completion is the
 * notice that ends a rooted collective (and all_to_allv). A send's header is what the
 * matching recv sees; an all_to_allv header's count is that of one pair (what its sender
 * sends to its receiver). */
#define RR__KIND_WIRE_MAP(X)                                                                  \
  X(NONE, "none", "none", 0, NONE, NONE, NEVER, NONE, NULL)                                   \
  X(ALL_REDUCE, "all_reduce", "all_reduce", RR__KF_REDUCES | RR__KF_VIEW, COUNT, COUNT, SAME, \
    RING, rr__all_reduce_ring)                                                                \
  X(REDUCE_SCATTER, "reduce_scatter", "reduce_scatter", RR__KF_REDUCES | RR__KF_VIEW,         \
    COUNT_N, COUNT, RECV_AT_RANK, RING, rr__reduce_scatter_ring)                              \
  X(ALL_GATHER, "all_gather", "all_gather", RR__KF_VIEW, COUNT, COUNT_N, SEND_AT_RANK, RING,  \
    rr__all_gather_ring)                                                                      \
  X(BROADCAST, "broadcast", "broadcast", RR__KF_ROOTED | RR__KF_ROOT_READS | RR__KF_VIEW,     \
    COUNT, COUNT, SAME, CHAIN, rr__broadcast_chain)                                           \
  X(REDUCE, "reduce", "reduce",                                                               \
    RR__KF_REDUCES | RR__KF_ROOTED | RR__KF_ROOT_WRITES | RR__KF_VIEW, COUNT, COUNT, SAME,    \
    CHAIN, rr__reduce_chain)                                                                  \
  X(BARRIER, "barrier", "barrier", 0, NONE, NONE, NEVER, DISSEM, rr__barrier_dissem)          \
  X(SEND, "send", "send/recv", RR__KF_P2P | RR__KF_SOLO, COUNT, NONE, NEVER, NONE,            \
    rr__send_p2p)                                                                             \
  X(ACK, "completion", "completion", 0, NONE, NONE, NEVER, NONE, NULL)                        \
  X(GATHER, "gather", "gather", RR__KF_ROOTED | RR__KF_ROOT_WRITES, COUNT, COUNT_N,           \
    SEND_AT_ROOT, LINEAR, rr__gather_linear)                                                  \
  X(SCATTER, "scatter", "scatter", RR__KF_ROOTED | RR__KF_ROOT_READS, COUNT_N, COUNT,         \
    RECV_AT_ROOT, LINEAR, rr__scatter_linear)                                                 \
  X(ALL_TO_ALL, "all_to_all", "all_to_all", 0, COUNT_N, COUNT_N, NEVER, PAIRWISE,             \
    rr__all_to_all_pairwise)                                                                  \
  X(ALL_TO_ALLV, "all_to_allv", "all_to_allv", RR__KF_SOLO, DISPLS, DISPLS, NEVER, PAIRWISE,  \
    rr__all_to_allv_pairwise)

/* Kinds of call that never appear in a header: the other halves of point to point, whose
 * headers travel as a send (rr__kind_wire). */
#define RR__KIND_CALL_MAP(X)                                                                  \
  X(RECV, "recv", "send/recv", RR__KF_P2P | RR__KF_SOLO, NONE, COUNT, NEVER, NONE,            \
    rr__recv_p2p)                                                                             \
  X(SENDRECV, "sendrecv", "send/recv", RR__KF_P2P | RR__KF_SOLO, COUNT, RECVCOUNT, NEVER,     \
    NONE, rr__sendrecv_p2p)

#define RR__KIND_MAP(X) RR__KIND_WIRE_MAP(X) RR__KIND_CALL_MAP(X)

enum rr__kind {
#define RR__KIND_ENUM(K, ...) RR__K_##K,
  RR__KIND_WIRE_MAP(RR__KIND_ENUM)
  RR__K_COUNT, /* the wire kinds are below this (a header with another is malformed) */
  RR__KIND_CALL_MAP(RR__KIND_ENUM)
  RR__K_END
#undef RR__KIND_ENUM
};

/* One row of the table. */
struct rr__coll;
typedef struct rr__kind_info {
  const char *name, *wire_name;
  unsigned flags;     /* RR__KF_* */
  uint8_t in, out;    /* enum rr__io_shape */
  uint8_t inplace;    /* enum rr__inplace */
  uint8_t algo;       /* enum rr__algo */
  int (*run)(struct rr__coll *c); /* NULL: not a call */
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
static inline int rr__kind_wire(int kind) { return kind > RR__K_COUNT ? RR__K_SEND : kind; }
/* "all_reduce", "send/recv" ...: the wire name ("unknown" for a value that is no kind). */
const char *rr__kind_name(int kind);

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
