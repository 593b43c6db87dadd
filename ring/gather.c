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
 */
#include <stdio.h>
#include <string.h>

#include "ring/coll.h"

int rr__gather_linear(rr__coll *c) {
  const int n = c->n, r = c->r, root = c->a->root;
  const size_t count = c->a->count, blk = count * c->esize;

  if (r != root) {
    RR__WHERE(c, "gather: sending to rank %d", rr__grank(c, root));
    RR__CHECK(rr__coll_send_hdr(c, root));
    rr__step st = rr__step_send(root, c->a->sendbuf, count);
    st.schunk = r;
    RR__CHECK(rr__pipe_step(c, &st));
    RR__WHERE(c, "gather: completion notice from rank %d", rr__grank(c, root));
    return rr__coll_recv_ack(c, root);
  }

  char *dst = c->a->recvbuf;
  if (blk && c->a->sendbuf != dst + (size_t)r * blk)
    memcpy(dst + (size_t)r * blk, c->a->sendbuf, blk);
  for (int k = 1; k < n; k++) {
    const int q = rr__mod(root + k, n);
    RR__WHERE(c, "gather: receiving from rank %d (%d/%d)", rr__grank(c, q), k, n - 1);
    RR__CHECK(rr__coll_recv_hdr(c, q));
    rr__step st = rr__step_recv(q, dst + (size_t)q * blk, count);
    st.rchunk = q;
    RR__CHECK(rr__pipe_step(c, &st));
  }
  RR__WHERE(c, "gather: completion notice to every rank");
  for (int q = 0; q < n; q++)
    if (q != r) RR__CHECK(rr__coll_send_ack(c, q));
  return RR_OK;
}
