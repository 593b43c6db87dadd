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
 *
 * Each swap is a whole step (ring/pipe.c): the buffer goes as one message behind the call
 * header, and the partner's lands in the group's scratch before it is combined with ours.
 */

#include "ring/algo.h"

int rr__all_reduce_rd(rr__coll *c) {
  const int n = c->n, r = c->r;
  const size_t count = c->a->count, bytes = count * c->esize;
  char *buf = c->a->recvbuf;
  void *tmp;
  RR__CHECK(rr__coll_scratch(c, bytes, &tmp));
  RR__CHECK(rr__coll_copy(c, buf, c->a->sendbuf, bytes));

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;

  /* Fold the extra ranks in: even ranks below 2*rem give their data to the odd one above. */
  int newrank = r - rem;
  RR__WHERE(c, "recursive doubling: pairing up (n=%d)", n);
  if (r < 2 * rem) {
    rr__step st = r % 2 == 0 ? rr__step_whole_copy(r + 1, -1, buf, count)
                             : rr__step_whole_reduce(-1, r - 1, buf, tmp, count, 1, 0);
    st.phase = "pair-up";
    RR__CHECK(rr__pipe_step(c, &st));
    newrank = r % 2 == 0 ? -1 : r / 2;
  }

  if (newrank >= 0) {
    int round = 0;
    for (int mask = 1; mask < p; mask <<= 1, round++) {
      const int pn = newrank ^ mask;
      const int partner = pn < rem ? pn * 2 + 1 : pn + rem;
      RR__WHERE(c, "recursive doubling round %d with rank %d", round + 1, rr__grank(c, partner));
      /* AVG divides once, after the last round. */
      const int avg_div = mask << 1 >= p && c->a->op == RR_AVG ? n : 0;
      rr__step st = rr__step_whole_reduce(partner, partner, buf, tmp, count, pn < newrank, avg_div);
      st.phase = "rounds";
      RR__CHECK(rr__pipe_step(c, &st));
    }
  }

  /* Hand the result back to the ranks that sat out. */
  RR__WHERE(c, "recursive doubling: returning results");
  if (r < 2 * rem) {
    rr__step st = r % 2 == 1 ? rr__step_whole_copy(r - 1, -1, buf, count)
                             : rr__step_whole_copy(-1, r + 1, buf, count);
    st.phase = "return";
    RR__CHECK(rr__pipe_step(c, &st));
  }
  return RR_OK;
}
