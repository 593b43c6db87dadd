/* The tables of call kinds and algorithms (ring/kind.h) and what follows from a row: the
 * sizes a call reads and writes, its in-place rule, its description in words. */
#include "ring/kind.h"

#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "ring/prims.h"

const rr__kind_info rr__kind_table[RR__K_END] = {
#define RR__KIND_ROW(K, nm, wnm, fl, i, o, ip, al, fn, dv, sq, ph, ds, cl) \
  [RR__K_##K] = {.name = (nm),                                             \
                 .wire_name = (wnm),                                       \
                 .flags = (fl),                                            \
                 .in = RR__IO_##i,                                         \
                 .out = RR__IO_##o,                                        \
                 .inplace = RR__INPLACE_##ip,                              \
                 .algo = RR__ALGO_##al,                                    \
                 .dev = RR__DEV_##dv,                                      \
                 .seq = RR__SEQ_##sq,                                      \
                 .phase = (ph),                                            \
                 .desc = (ds),                                             \
                 .call_desc = (cl)},
    RR__KIND_MAP(RR__KIND_ROW)
#undef RR__KIND_ROW
};

const rr__algo_info rr__algo_table[RR__ALGO_END] = {
    [RR__ALGO_NONE] = {.short_name = "p2p", .long_name = "-", .whole = 1, .segs = 1},
#define RR__ALGO_ROW(A, sn, ln, wh, sg) \
  [RR__ALGO_##A] = {.short_name = (sn), .long_name = (ln), .whole = (wh), .segs = (sg)},
    RR__ALGO_MAP(RR__ALGO_ROW)
#undef RR__ALGO_ROW
};

int rr__algo_by_name(const char *short_name) {
  for (int a = RR__ALGO_NONE + 1; a < RR__ALGO_END; a++)
    if (!strcmp(short_name, rr__algo_table[a].short_name)) return a;
  return RR__ALGO_NONE;
}

const char *rr__kind_name(int kind) {
  const rr__kind_info *k = rr__kind(kind);
  return k == &rr__kind_table[RR__K_NONE] && kind != RR__K_NONE ? "unknown" : k->wire_name;
}

/* The {field}s of a description: each names a value of rr__kind_vals, written as printf
 * would. An unknown field is written as it stands, so a typo in a row shows in the text. */
const char *rr__kind_format(char *buf, size_t n, const char *fmt, const rr__kind_vals *v) {
  size_t o = 0;
  if (n) buf[0] = '\0';
  for (const char *p = fmt; *p && o + 1 < n;) {
    const char *end = *p == '{' ? strchr(p, '}') : NULL;
    size_t len = end ? (size_t)(end - p - 1) : 0;
    int w;
#define RR__FIELD(name) (len == sizeof name - 1 && !strncmp(p + 1, name, len))
    if (!end)
      w = snprintf(buf + o, n - o, "%c", *p);
    else if (RR__FIELD("kind"))
      w = snprintf(buf + o, n - o, "%s", v->kind);
    else if (RR__FIELD("dtype"))
      w = snprintf(buf + o, n - o, "%s", v->dtype);
    else if (RR__FIELD("op"))
      w = snprintf(buf + o, n - o, "%s", v->op);
    else if (RR__FIELD("algo"))
      w = snprintf(buf + o, n - o, "%s", v->algo);
    else if (RR__FIELD("seq"))
      w = snprintf(buf + o, n - o, "%llu", v->seq);
    else if (RR__FIELD("count"))
      w = snprintf(buf + o, n - o, "%llu", v->count);
    else if (RR__FIELD("recvcount"))
      w = snprintf(buf + o, n - o, "%llu", v->recvcount);
    else if (RR__FIELD("root"))
      w = snprintf(buf + o, n - o, "%d", v->root);
    else if (RR__FIELD("peer"))
      w = snprintf(buf + o, n - o, "%d", v->peer);
    else if (RR__FIELD("src"))
      w = snprintf(buf + o, n - o, "%d", v->src);
    else
      w = snprintf(buf + o, n - o, "%.*s", (int)len + 2, p);
#undef RR__FIELD
    p = end ? end + 1 : p + 1;
    if (w < 0) break;
    o = RR__MIN(o + (size_t)w, n ? n - 1 : 0);
  }
  return buf;
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
    case RR__IO_COUNT:
      return a->count;
    case RR__IO_COUNT_N:
      return a->count * (size_t)size;
    case RR__IO_RECVCOUNT:
      return a->recvcount;
    case RR__IO_DISPLS:
      return rr__blocks_end(counts, displs, size);
    default:
      return 0;
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
    case RR__INPLACE_SAME:
      return s == r;
    case RR__INPLACE_SEND_AT_RANK:
      return s == r + (size_t)rank * in;
    case RR__INPLACE_RECV_AT_RANK:
      return r == s + (size_t)rank * out;
    /* Both buffers are the root's here: its own block is the one that may alias. */
    case RR__INPLACE_SEND_AT_ROOT:
      return s == r + (size_t)a->root * in;
    case RR__INPLACE_RECV_AT_ROOT:
      return r == s + (size_t)a->root * out;
    default:
      return 0;
  }
}

const char *rr__kind_in_place_rule(int kind, char *buf, size_t n) {
  const rr__kind_info *k = rr__kind(kind);
  switch (k->inplace) {
    case RR__INPLACE_SAME:
      return "sendbuf == recvbuf";
    case RR__INPLACE_SEND_AT_RANK:
      return "sendbuf == recvbuf + rank*count";
    case RR__INPLACE_RECV_AT_RANK:
      return "recvbuf == sendbuf + rank*count";
    case RR__INPLACE_SEND_AT_ROOT:
      return "sendbuf == recvbuf + root*count";
    case RR__INPLACE_RECV_AT_ROOT:
      return "recvbuf == sendbuf + root*count";
    default:
      snprintf(buf, n, "not possible for %s", k->name);
      return buf;
  }
}

/* A header carries the kind's value: rows may only be added after the last wire kind. */
_Static_assert(RR__K_ALL_REDUCE == 1 && RR__K_SEND == 7 && RR__K_ACK == 8 &&
                   RR__K_ALL_TO_ALLV == 12 && RR__K_COUNT == 13,
               "a kind's value on the wire changed: add new kinds at the end of RR__KIND_WIRE_MAP");
