/*
 * Linear scatter: the root sends block q straight to rank q, one rank after another
 * (root+1, root+2, ...); its own block is a local copy (or already in place).
 *
 * Every block but the root's own leaves through the root's link, so that link sets the
 * time whatever the algorithm. Cost: n-1 steps of S/n bytes from the root (S = the root's
 * sendbuf), about (n-1)/n * S / bandwidth; every other rank receives once.
 *
 *   4 ranks, root 0, sendbuf [b0 b1 b2 b3]:   0 -> 1: b1    0 -> 2: b2    0 -> 3: b3
 *   rank q's recvbuf: [bq]
 *
 * Each rank checks the root's header before its block lands, but those checks happen on
 * different ranks, and none of them sees the others. So each rank also sends its own header
 * to the root at the start; the root checks them all once its blocks are out, then sends
 * the completion notice, which every rank waits for. A call that any rank's header
 * contradicts thus fails on every rank. (The root could instead collect the headers before
 * sending anything; that costs the same round trip, but before the data rather than after.)
 *
 * The block moves and the root's loop are ring/linear.h's, shared with gather.c.
 */
#include "ring/algo.h"
#include "ring/linear.h"

int rr__scatter_linear(rr__coll *c) {
  const int n = c->n, r = c->r, root = c->a->root;

  if (r != root) {
    RR__WHERE(c, "scatter: receiving from rank %d", rr__grank(c, root));
    RR__CHECK(rr__coll_send_hdr(c, root));
    RR__CHECK(rr__coll_recv_hdr(c, root));
    RR__CHECK(rr__linear_block(c, RR__FROM_ROOT, r));
    RR__WHERE(c, "scatter: completion notice from rank %d", rr__grank(c, root));
    return rr__coll_recv_ack(c, root);
  }

  RR__CHECK(rr__linear_root(c, RR__FROM_ROOT));
  for (int k = 1; k < n; k++) {
    const int q = rr__mod(root + k, n);
    RR__WHERE(c, "scatter: checking the call of rank %d", rr__grank(c, q));
    RR__CHECK(rr__coll_recv_hdr(c, q));
  }
  RR__WHERE(c, "scatter: completion notice to every rank");
  for (int q = 0; q < n; q++)
    if (q != r) RR__CHECK(rr__coll_send_ack(c, q));
  return RR_OK;
}
