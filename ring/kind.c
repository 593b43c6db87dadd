/* The table of call kinds (ring/kind.h) and what follows from a row: the sizes a call
 * reads and writes, and its in-place rule. */
#include "ring/kind.h"

#include <stdio.h>

#include "common/util.h"
#include "ring/coll.h"

const rr__kind_info rr__kind_table[RR__K_END] = {
#define RR__KIND_ROW(K, nm, wnm, fl, i, o, ip, al, fn)                                       \
  [RR__K_##K] = {.name = (nm), .wire_name = (wnm), .flags = (fl), .in = RR__IO_##i,         \
                 .out = RR__IO_##o, .inplace = RR__INPLACE_##ip, .algo = RR__ALGO_##al,     \
                 .run = (fn)},
    RR__KIND_MAP(RR__KIND_ROW)
#undef RR__KIND_ROW
};

const char *rr__kind_name(int kind) {
  const rr__kind_info *k = rr__kind(kind);
  return k == &rr__kind_table[RR__K_NONE] && kind != RR__K_NONE ? "unknown" : k->wire_name;
}

/* The elements from a buffer's start to the end of its last non-empty block. */
static size_t rr__blocks_end(const size_t *counts, const size_t *displs, int size) {
  size_t end = 0;
  for (int j = 0; j < size; j++)
    if (counts[j]) end = RR__MAX(end, displs[j] + counts[j]);
  return end;
}

static size_t rr__shape_elems(int shape, const rr__args *a, int size, const size_t *counts,
                              const size_t *displs) {
  switch (shape) {
    case RR__IO_COUNT: return a->count;
    case RR__IO_COUNT_N: return a->count * (size_t)size;
    case RR__IO_RECVCOUNT: return a->recvcount;
    case RR__IO_DISPLS: return rr__blocks_end(counts, displs, size);
    default: return 0;
  }
}

rr__call_io rr__kind_io(const rr__args *a, int size, int rank) {
  const rr__kind_info *k = rr__kind(a->kind);
  const int is_root = a->root == rank;
  rr__call_io io = {0};
  io.reads = k->in != RR__IO_NONE && (is_root || !(k->flags & RR__KF_ROOT_READS));
  io.writes = k->out != RR__IO_NONE && (is_root || !(k->flags & RR__KF_ROOT_WRITES));
  io.gaps = k->out == RR__IO_DISPLS;
  if (io.reads) io.in = rr__shape_elems(k->in, a, size, a->sendcounts, a->sdispls);
  if (io.writes) io.out = rr__shape_elems(k->out, a, size, a->recvcounts, a->rdispls);
  return io;
}

int rr__kind_in_place(const rr__args *a, int rank, size_t in, size_t out) {
  const char *s = a->sendbuf, *r = a->recvbuf;
  switch (rr__kind(a->kind)->inplace) {
    case RR__INPLACE_SAME: return s == r;
    case RR__INPLACE_SEND_AT_RANK: return s == r + (size_t)rank * in;
    case RR__INPLACE_RECV_AT_RANK: return r == s + (size_t)rank * out;
    /* Both buffers are the root's here: its own block is the one that may alias. */
    case RR__INPLACE_SEND_AT_ROOT: return s == r + (size_t)a->root * in;
    case RR__INPLACE_RECV_AT_ROOT: return r == s + (size_t)a->root * out;
    default: return 0;
  }
}

const char *rr__kind_in_place_rule(int kind, char *buf, size_t n) {
  const rr__kind_info *k = rr__kind(kind);
  switch (k->inplace) {
    case RR__INPLACE_SAME: return "sendbuf == recvbuf";
    case RR__INPLACE_SEND_AT_RANK: return "sendbuf == recvbuf + rank*count";
    case RR__INPLACE_RECV_AT_RANK: return "recvbuf == sendbuf + rank*count";
    case RR__INPLACE_SEND_AT_ROOT: return "sendbuf == recvbuf + root*count";
    case RR__INPLACE_RECV_AT_ROOT: return "recvbuf == sendbuf + root*count";
    default: snprintf(buf, n, "not possible for %s", k->name); return buf;
  }
}

/* A header carries the kind's value: rows may only be added after the last wire kind. */
_Static_assert(RR__K_ALL_REDUCE == 1 && RR__K_SEND == 7 && RR__K_ACK == 8 &&
                   RR__K_ALL_TO_ALLV == 12 && RR__K_COUNT == 13,
               "a kind's value on the wire changed: add new kinds at the end of RR__KIND_WIRE_MAP");
