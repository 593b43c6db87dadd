/*
 * Dissemination barrier: in round k every rank signals rank r + 2^k and waits for rank
 * r - 2^k. After ceil(log2 n) rounds each rank has heard, directly or through others,
 * from every rank, so none leaves before all have arrived.
 *
 *   5 ranks: round 0 distance 1, round 1 distance 2, round 2 distance 4.
 *
 * The signal is the call header itself, which also checks that everyone is in a barrier.
 */
#include <stdio.h>

#include "ring/algo.h"

int rr__barrier_dissem(rr__coll *c) {
  const int n = c->n, r = c->r;
  int round = 0;
  for (int d = 1; d < n; d <<= 1, round++) {
    RR__WHERE(c, "barrier round %d", round + 1);
    c->hdr.aux = (uint32_t)round;
    RR__CHECK(rr__coll_send_hdr(c, rr__mod(r + d, n)));
    RR__CHECK(rr__coll_recv_hdr(c, rr__mod(r - d, n)));
  }
  return RR_OK;
}
