/*
 * Linear gather: every rank sends its block straight to the root, which takes them one rank
 * after another (root+1, root+2, ...) and lets each land in place.
 *
 * All n-1 blocks cross the root's link whatever the algorithm, so a tree could only save
 * latency. Cost: n-1 steps of S/n bytes at the root (S = the gathered buffer), about
 * (n-1)/n * S / bandwidth; every other rank sends once. Senders do not wait for their turn:
 * their blocks queue in the transport while the root drains the ranks before them.
 *
 *   4 ranks, root 0, blocks x0 x1 x2 x3:   1 -> 0: x1    2 -> 0: x2    3 -> 0: x3
 *   root's recvbuf: [x0 x1 x2 x3], x0 copied locally (or already there, in place)
 *
 * The root reads every rank's header, so it alone knows that the whole call agreed. It
 * sends the completion notice last, and the other ranks wait for it: a call the root
 * rejected fails everywhere, not only at the root.
 *
 * The block moves and the root's loop are ring/linear.h's, shared with scatter.c.
 */
#include "ring/algo.h"
#include "ring/linear.h"

int rr__gather_linear(rr__coll *c) {
  const int n = c->n, r = c->r, root = c->a->root;

  if (r != root) {
    RR__WHERE(c, "gather: sending to rank %d", rr__grank(c, root));
    RR__CHECK(rr__coll_send_hdr(c, root));
    RR__CHECK(rr__linear_block(c, RR__TO_ROOT, r));
    RR__WHERE(c, "gather: completion notice from rank %d", rr__grank(c, root));
    return rr__coll_recv_ack(c, root);
  }

  RR__CHECK(rr__linear_root(c, RR__TO_ROOT));
  RR__WHERE(c, "gather: completion notice to every rank");
  for (int q = 0; q < n; q++)
    if (q != r) RR__CHECK(rr__coll_send_ack(c, q));
  return RR_OK;
}
