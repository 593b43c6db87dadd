/* The primitives every algorithm shares (ring/prims.h): the call header sent ahead of the
 * data and checked against our own call (a mismatch names both calls), the completion notice
 * of rooted collectives, the wait (the comm's, transport/comm.c: it may poll, then sleeps
 * until data, a peer's abort or the deadline), and the group's scratch memory. Nothing here knows
 * an algorithm: the dispatcher (ring/coll.c) runs them, and they call down into this file and the
 * step (ring/pipe.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "ring/mem.h"
#include "ring/prims.h"

/* What to add to a mismatch message. A hint names a setting only when the calls agree on
 * everything the user passed: different counts also pick different algorithms (recursive
 * doubling below RR_SMALL_BYTES, which sends no segment size), and then the counts, which
 * the message shows, are the cause. */
static const char *rr__mismatch_hint(const rr__hdr *mine, const rr__hdr *theirs) {
  int same_call = theirs->kind == mine->kind && theirs->count == mine->count &&
                  theirs->dtype == mine->dtype && theirs->op == mine->op &&
                  theirs->root == mine->root;
  if (!same_call) return "";
  if (theirs->algo != mine->algo) return " (RR_ALGO or RR_SMALL_BYTES differs between the ranks)";
  if (theirs->seg_bytes != mine->seg_bytes)
    return " (RR_SEG_BYTES differs between the ranks, or RR_IPC_SEG_BYTES on device buffers)";
  if (theirs->handoff != mine->handoff)
    return " (device segments handed over by the GPUs' streams on one rank, by the host on the "
           "other: RR_CUDA_MEMOPS differs between the ranks, or a device without stream memory "
           "operations)";
  if (theirs->aux != mine->aux &&
      (mine->kind == RR__K_ALL_GATHER || mine->kind == RR__K_ALL_REDUCE))
    return " (the all-gather steps pull on one rank, not on the other: RR_CUDA_PULL_BYTES "
           "differs between the ranks)";
  return "";
}

/* Do two headers describe the same call? (`from` and `aux` are compared where they matter,
 * by the caller.) */
static int rr__same_call(const rr__hdr *a, const rr__hdr *b) {
  return a->kind == b->kind && a->seq == b->seq && a->count == b->count && a->dtype == b->dtype &&
         a->op == b->op && a->algo == b->algo && a->root == b->root &&
         a->seg_bytes == b->seg_bytes && a->handoff == b->handoff;
}

int rr__coll_pair_mismatch(rr__coll *c, int from, uint64_t sent, uint64_t expected) {
  const char *dt = rr_dtype_name(c->a->dtype);
  int me = rr__grank(c, c->r), g = rr__grank(c, from);
  return rr__set_error(RR_EMISMATCH,
                       "mismatched calls: all_to_allv #%llu: rank %d sends %llu x %s to rank %d "
                       "(its sendcounts[%d]), but rank %d expects %llu x %s from rank %d (its "
                       "recvcounts[%d])",
                       (unsigned long long)c->hdr.seq, g, (unsigned long long)sent, dt, me, c->r,
                       me, (unsigned long long)expected, dt, g, from);
}

/* `theirs` came from `from` and differs from `mine`: when the two are calls whose headers
 * carry one pair's count (all_to_allv) and differ in it alone, the message names the pair;
 * otherwise both calls. */
static int rr__mismatch(rr__coll *c, int from, const rr__hdr *mine, const rr__hdr *theirs,
                        const char *own_desc) {
  /* A kind whose headers carry one pair's count (all_to_allv): only that count differs. */
  if (mine->kind == theirs->kind && rr__kind(mine->kind)->in == RR__IO_DISPLS) {
    rr__hdr same = *theirs;
    same.count = mine->count;
    if (rr__same_call(&same, mine))
      return rr__coll_pair_mismatch(c, from, theirs->count, mine->count);
  }
  char b[160];
  rr__hdr_describe(theirs, b, sizeof b);
  /* A completion notice is something a peer sent at the end of its call, not a call. */
  const char *verb = theirs->kind == RR__K_ACK ? "sent" : "called";
  return rr__set_error(RR_EMISMATCH, "mismatched calls: rank %d called %s, but rank %d %s %s%s",
                       rr__grank(c, c->r), own_desc, rr__grank(c, from), verb, b,
                       rr__mismatch_hint(mine, theirs));
}

/* A header from a peer this call does not read from: the same call number must mean the
 * same call. (Point-to-point sends and later calls pass: they are read in their turn.) */
static int rr__sniff_check(void *ctx, int peer, const uint8_t wire[RR__SNIFF_BYTES]) {
  rr__coll *c = ctx;
  int g = rr__grank(c, peer);
  rr__hdr h;
  if (rr__hdr_decode(wire, &h) != RR_OK) return rr__prefix_error(RR_EPROTO, "from rank %d", g);
  if (rr__kind_has(h.kind, RR__KF_P2P) || h.seq != c->hdr.seq) return RR_OK;
  /* Compare with the call as this peer should see it: a completion notice passes for the
   * call it completes, and an all_to_allv header carries the count of its own pair (what
   * the peer sends here), which may rightly differ from every other pair's. */
  rr__hdr m = c->hdr;
  if (rr__kind(m.kind)->in == RR__IO_DISPLS)
    m.count = h.kind == RR__K_ACK ? h.count : c->a->recvcounts[peer];
  if (h.kind == RR__K_ACK) m.kind = RR__K_ACK;
  if (rr__same_call(&h, &m)) return RR_OK;
  rr__hdr own = m;
  own.kind = c->hdr.kind; /* this rank's call, not the notice it was compared as */
  char a[160];
  return rr__mismatch(c, peer, &m, &h, rr__hdr_describe(&own, a, sizeof a));
}

int rr__coll_block(rr__coll *c, int peer) {
  /* Point-to-point calls have no group-wide number to compare against. */
  int p2p = rr__coll_is_p2p(c);
  rr__sniff sn = {.seq = c->hdr.seq, .check = rr__sniff_check, .ctx = c};
  rr__comm *cm = c->cm;
  /* The comm decides how to wait (it owns the wait and its spin policy); the ring says only
   * whether the caller blocks on this call: background work (async calls) never spins. */
  int st = rr__comm_block(cm, c->may_spin, c->deadline_ms, p2p ? NULL : &sn);
  /* An abort may carry RR_ETIMEDOUT too (rr_work_wait gave up); keep its own words. */
  if (st != RR_ETIMEDOUT || rr__comm_abort_concerns(cm, !p2p, c->hdr.seq)) return st;
  int g = peer >= 0 ? rr__grank(c, peer) : -1;
  char seg[48] = "";
  if (c->seg_total) snprintf(seg, sizeof seg, " segment %zu/%zu from", c->seg_at, c->seg_total);
  return rr__set_error(RR_ETIMEDOUT,
                       "timed out after %.1f s waiting for%s rank %d (last byte from it %.1f s "
                       "ago; is it stuck, or in a different call?)",
                       (double)c->timeout_ms / 1000.0, seg, g,
                       (double)rr__comm_idle_ms(c->cm, peer) / 1000.0);
}

int rr__coll_wait(rr__coll *c, rr__req *r, int peer) {
  for (;;) {
    size_t moved = 0;
    RR__CHECK(rr__comm_progress(c->cm, &moved));
    if (r->complete) return RR_OK;
    if (!moved) RR__CHECK(rr__coll_block(c, peer));
  }
}

static int rr__send_hdr_kind(rr__coll *c, int to, int kind) {
  rr__hdr_sends *hs = c->sends;
  if (hs->n == RR__MAX_HDR_SENDS) {
    /* Recycle: wait for the oldest to leave. Only calls with many headers get here. */
    for (int i = 0; i < hs->n; i++) RR__CHECK(rr__coll_wait(c, &hs->req[i], hs->peer[i]));
    hs->n = 0;
  }
  int i = hs->n++;
  rr__hdr h = c->hdr;
  h.kind = (uint8_t)kind;
  rr__hdr_encode(&h, hs->wire[i]);
  memset(&hs->req[i], 0, sizeof hs->req[i]);
  hs->req[i].buf = (char *)hs->wire[i];
  hs->req[i].len = RR__HDR_BYTES;
  hs->peer[i] = to;
  /* Message 0: headers always travel on the first lane, ahead of the data. */
  return rr__comm_isend(c->cm, to, 0, &hs->req[i]);
}

int rr__coll_send_hdr(rr__coll *c, int to) {
  return rr__send_hdr_kind(c, to, c->hdr.kind);
}
int rr__coll_send_ack(rr__coll *c, int to) {
  return rr__send_hdr_kind(c, to, RR__K_ACK);
}

/* This rank's call for a mismatch message: its header's description, but for a point to
 * point that receives, whose header (the sender's, as expected) would read as a send. */
static const char *rr__describe_own(const rr__coll *c, const rr__hdr *h, char *buf, size_t n) {
  const rr__kind_info *k = rr__kind(c->a->kind);
  const int recv = (k->flags & RR__KF_P2P) && k->out != RR__IO_NONE;
  if (recv && c->a->peer == RR__PEER_ANY)
    snprintf(buf, n, "recv from any rank (%llu x %s; #%llu of its pair with rank %d)",
             (unsigned long long)h->count, rr_dtype_name((rr_dtype)h->dtype),
             (unsigned long long)h->seq, rr__grank(c, h->from));
  else if (recv)
    snprintf(buf, n, "recv #%llu of this pair (%llu x %s)", (unsigned long long)h->seq,
             (unsigned long long)h->count, rr_dtype_name((rr_dtype)h->dtype));
  else
    rr__hdr_describe(h, buf, n);
  return buf;
}

/* Compare a received header with this rank's call. */
static int rr__check_hdr_kind(rr__coll *c, int from, const uint8_t *wire, int kind) {
  int g = rr__grank(c, from);
  rr__hdr h;
  if (rr__hdr_decode(wire, &h) != RR_OK) return rr__prefix_error(RR_EPROTO, "from rank %d", g);
  rr__hdr mine = c->hdr;
  mine.kind = (uint8_t)kind;
  if (rr__same_call(&h, &mine) && h.aux == mine.aux && h.from == from) return RR_OK;
  /* Waiting for a completion notice, this rank is still in its own call, and a peer's call
   * header read in the notice's place differs from that call: name the call, never the
   * notice ("rank 0 called completion #0" was the message of a broadcast that met an
   * all_reduce). */
  rr__hdr own = mine;
  own.kind = c->hdr.kind;
  char a[160];
  return rr__mismatch(c, from, &mine, &h, rr__describe_own(c, &own, a, sizeof a));
}

int rr__coll_post_hdr(rr__coll *c, int from, rr__req *r, uint8_t *wire) {
  memset(r, 0, sizeof *r);
  r->buf = (char *)wire;
  r->len = RR__HDR_BYTES;
  if (!c->where_fmt && !c->where[0])
    RR__WHERE(c, "checking the call against rank %d", rr__grank(c, from));
  return rr__comm_irecv(c->cm, from, 0, r);
}

int rr__coll_check_hdr(rr__coll *c, int from, const uint8_t *wire) {
  return rr__check_hdr_kind(c, from, wire, c->hdr.kind);
}

static int rr__recv_hdr_kind(rr__coll *c, int from, int kind) {
  uint8_t wire[RR__HDR_BYTES];
  rr__req r;
  RR__CHECK(rr__coll_post_hdr(c, from, &r, wire));
  RR__CHECK(rr__coll_wait(c, &r, from));
  return rr__check_hdr_kind(c, from, wire, kind);
}

int rr__coll_recv_hdr(rr__coll *c, int from) {
  return rr__recv_hdr_kind(c, from, c->hdr.kind);
}
int rr__coll_recv_ack(rr__coll *c, int from) {
  return rr__recv_hdr_kind(c, from, RR__K_ACK);
}

int rr__coll_flush_hdrs(rr__coll *c) {
  rr__hdr_sends *hs = c->sends;
  for (int i = 0; i < hs->n; i++) RR__CHECK(rr__coll_wait(c, &hs->req[i], hs->peer[i]));
  return RR_OK;
}

const char *rr__coll_where(rr__coll *c) {
  if (c->where_fmt) {
    snprintf(c->where, sizeof c->where, c->where_fmt, c->where_arg[0], c->where_arg[1],
             c->where_arg[2]);
    c->where_fmt = NULL;
  }
  return c->where;
}

/* The call's memory does these (ring/mem.h): host memory and device buffers alike. */
int rr__coll_scratch(rr__coll *c, size_t bytes, void **out) {
  return c->mem->scratch(c, bytes, out);
}
int rr__coll_copy(const rr__coll *c, void *dst, const void *src, size_t bytes) {
  return bytes ? c->mem->copy(c, dst, src, bytes) : RR_OK;
}
int rr__coll_reduce(const rr__coll *c, void *dst, const void *a, const void *b, size_t n,
                    int avg_div) {
  return c->mem->reduce(c, dst, a, b, n, avg_div);
}

_Static_assert(RR__HDR_BYTES == RR__SNIFF_BYTES, "a waiting call peeks at exactly one header");
