/*
 * Recursive-doubling all-reduce, for small messages where latency, not bandwidth, decides:
 * ceil(log2 n) rounds (two more when n is not a power of two) instead of the ring's
 * 2(n-1) steps. In round k every rank swaps its whole partial result with the rank whose
 * number differs in bit k and combines the two.
 *
 *   4 ranks:  round 0: 0<->1, 2<->3   (each now holds x0+x1 or x2+x3)
 *             round 1: 0<->2, 1<->3   (each now holds (x0+x1)+(x2+x3))
 *
 * When n is not a power of two, with p the largest power of two below n and rem = n - p,
 * ranks 0..2rem-1 first pair up: each even rank hands its data to the odd rank above it and
 * waits; the p remaining ranks run the rounds; the odd ranks then hand the result back.
 *
 * Cost: S bytes per round, so time ~ (log2 n) * (latency + S / bandwidth): better than the
 * ring below RR_SMALL_BYTES, worse above it.
 *
 * Same bits on every rank: each combination is computed as op(lower ranks' part, higher
 * ranks' part), so the two partners of a round evaluate the identical expression.
 */
#include <stdio.h>
#include <string.h>

#include "ring/op.h"
#include "ring/coll.h"

/* Send our whole buffer to `to` and/or receive `from`'s into `in`, each behind the call
 * header. Everything is posted at once, so a header and its data share one system call; the
 * received header is checked before the data is used. */
static int rr__rd_swap(rr__coll *c, int to, const void *out, int from, void *in,
                       size_t bytes) {
  rr__req sr = {.buf = (char *)out, .len = bytes}, hr, rq = {.buf = in, .len = bytes};
  uint8_t wire[RR__HDR_BYTES];
  if (from >= 0) {
    RR__CHECK(rr__coll_post_hdr(c, from, &hr, wire));
    RR__CHECK(rr__comm_irecv(c->cm, from, 0, &rq));
  }
  if (to >= 0) {
    RR__CHECK(rr__coll_send_hdr(c, to));
    RR__CHECK(rr__comm_isend(c->cm, to, 0, &sr));
  }
  if (from >= 0) {
    /* Both: an empty message completes at once, before its header has arrived. */
    RR__CHECK(rr__coll_wait(c, &hr, from));
    RR__CHECK(rr__coll_wait(c, &rq, from));
    RR__CHECK(rr__coll_check_hdr(c, from, wire));
  }
  /* The buffer we sent is overwritten next: the send must be finished first. */
  if (to >= 0) RR__CHECK(rr__coll_wait(c, &sr, to));
  return RR_OK;
}

/* buf = (lower rank's data) op (higher rank's data): the same operand order on both ranks of
 * a pair, so both end with the same bits. `mine`, when not NULL, receives buf's values
 * before the combination (for the trace; the call has at most RR__TRACE_CAPTURE elements). */
static void rr__rd_combine(rr__coll *c, char *buf, const char *theirs, int mine_is_lower,
                           unsigned char *mine) {
  const rr__args *a = c->a;
  if (mine) memcpy(mine, buf, a->count * c->esize);
  if (mine_is_lower)
    rr__reduce(buf, buf, theirs, a->count, a->dtype, a->op, 0);
  else
    rr__reduce(buf, theirs, buf, a->count, a->dtype, a->op, 0);
  if (mine && a->count <= RR__TRACE_VALUES)
    rr__trace_reduce(c, mine_is_lower ? (const void *)mine : theirs,
                     mine_is_lower ? (const void *)theirs : mine, buf, a->count);
}

/* RR_TRACE file: one step record for a swap with `to` and/or `from` (-1: none) and what
 * followed it: a combination (own: buf before it, got: what arrived) or, receiving only the
 * result, a copy. Values are given when the call is small (own NULL otherwise). */
static void rr__rd_trace(rr__coll *c, const char *phase, int to, int from, const void *own,
                         const void *got, const void *buf, int64_t t0) {
  const size_t count = c->a->count;
  const int reduce = to >= 0 && from >= 0 ? 1 : from >= 0 && got != buf;
  rr__step st = reduce ? rr__step_send_recv_reduce(to, NULL, count, from, (void *)buf, own,
                                                   count, 0)
                       : rr__step_send_recv(to, NULL, count, from, (void *)buf, count);
  st.schunk = to >= 0 ? 0 : -1, st.rchunk = from >= 0 ? 0 : -1;
  st.phase = phase;
  rr__trace_cap cap = {.t0_ns = t0};
  if (own) {
    cap.sent = own; /* a swap sends what the buffer held before it */
    if (reduce) cap.own = own, cap.got = got, cap.res = buf;
    else cap.res = buf;
  }
  rr__trace_step(c, &st, &cap);
}

int rr__all_reduce_rd(rr__coll *c) {
  const int n = c->n, r = c->r;
  const size_t bytes = c->a->count * c->esize;
  char *buf = c->a->recvbuf;
  char *tmp;
  RR__CHECK(rr__coll_scratch(c, bytes, (void **)&tmp));
  if (bytes && buf != c->a->sendbuf) memcpy(buf, c->a->sendbuf, bytes);
  /* The trace keeps the buffer before each combination: the text lines of a call of up to
   * RR__TRACE_VALUES elements, file records of up to RR__TRACE_CAPTURE. */
  const int json = rr__trace_json();
  unsigned char mine_buf[RR__TRACE_CAPTURE * 8];
  unsigned char *mine = NULL;
  if (c->a->count <= (json ? RR__TRACE_CAPTURE : rr__trace_on() ? RR__TRACE_VALUES : 0))
    mine = mine_buf;
  int64_t t0 = json ? rr__trace_clock() : 0;

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;

  /* Fold the extra ranks in: even ranks below 2*rem give their data to the odd one above. */
  int newrank;
  RR__WHERE(c, "recursive doubling: pairing up (n=%d)", n);
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      if (mine) memcpy(mine, buf, bytes);
      RR__CHECK(rr__rd_swap(c, r + 1, buf, -1, NULL, bytes));
      if (json) rr__rd_trace(c, "pair-up", r + 1, -1, mine, NULL, buf, t0);
      newrank = -1;
    } else {
      RR__CHECK(rr__rd_swap(c, -1, NULL, r - 1, tmp, bytes));
      rr__rd_combine(c, buf, tmp, 0, mine);
      if (json) rr__rd_trace(c, "pair-up", -1, r - 1, mine, tmp, buf, t0);
      newrank = r / 2;
    }
  } else {
    newrank = r - rem;
  }

  if (newrank >= 0) {
    int round = 0;
    for (int mask = 1; mask < p; mask <<= 1, round++) {
      const int pn = newrank ^ mask;
      const int partner = pn < rem ? pn * 2 + 1 : pn + rem;
      RR__WHERE(c, "recursive doubling round %d with rank %d",
               round + 1, rr__grank(c, partner));
      if (json) t0 = rr__trace_clock();
      RR__CHECK(rr__rd_swap(c, partner, buf, partner, tmp, bytes));
      rr__rd_combine(c, buf, tmp, newrank < pn, mine);
      /* AVG divides once, after the last round (and the trace shows the quotient). */
      if (mask << 1 >= p && c->a->op == RR_AVG) rr__avg_scale(buf, c->a->count, c->a->dtype, n);
      if (json) rr__rd_trace(c, "rounds", partner, partner, mine, tmp, buf, t0);
    }
  }

  /* Hand the result back to the ranks that sat out. */
  RR__WHERE(c, "recursive doubling: returning results");
  if (json) t0 = rr__trace_clock();
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      RR__CHECK(rr__rd_swap(c, r - 1, buf, -1, NULL, bytes));
      if (json) rr__rd_trace(c, "return", r - 1, -1, mine ? buf : NULL, NULL, buf, t0);
    } else {
      RR__CHECK(rr__rd_swap(c, -1, NULL, r + 1, buf, bytes));
      if (json) rr__rd_trace(c, "return", -1, r + 1, mine ? buf : NULL, buf, buf, t0);
    }
  }
  return RR_OK;
}
