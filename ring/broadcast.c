/*
 * Pipelined chain broadcast: root -> root+1 -> ... -> root-1 around the ring.
 *
 * Every rank forwards segment k to its right as soon as it has arrived, so once the
 * pipeline is full all n-1 links carry data at once. For K segments the time is about
 * (n-2+K) segment times: ~ S / bandwidth for large S, whatever n is (busbw factor 1).
 *
 *   4 ranks, root 0, segments a b c:   t1: 0->1 a   t2: 0->1 b, 1->2 a
 *                                      t3: 0->1 c, 1->2 b, 2->3 a   ...
 *
 * Each rank checks the header of the rank before it, then passes its own on, so the last
 * rank knows the whole chain agreed; it then tells everyone, and only then does any rank
 * return, so a mismatched call fails on every rank, the root included.
 */
#include <stdio.h>

#include "ring/algo.h"

int rr__broadcast_chain(rr__coll *c) {
  const int n = c->n, r = c->r, root = c->a->root;
  const int left = rr__left(r, n), right = rr__right(r, n), tail = rr__left(root, n);
  const int pos = rr__mod(r - root, n); /* 0 = root, n-1 = tail */
  const size_t count = c->a->count;
  char *dst = c->a->recvbuf;

  RR__WHERE(c, "broadcast chain from rank %d, position %d/%d", rr__grank(c, root), pos, n - 1);
  if (pos == 0) {
    RR__CHECK(rr__coll_copy(c, dst, c->a->sendbuf, count * c->esize)); /* none in place */
    RR__CHECK(rr__coll_send_hdr(c, right));
    rr__step st = rr__step_send(right, dst, count);
    st.schunk = 0;
    RR__CHECK(rr__pipe_step(c, &st));
  } else {
    const int middle = pos < n - 1;
    RR__CHECK(rr__coll_recv_hdr(c, left));
    if (middle) RR__CHECK(rr__coll_send_hdr(c, right));
    rr__step st =
        middle ? rr__step_recv_copy_send(left, dst, count, right) : rr__step_recv(left, dst, count);
    st.schunk = middle ? 0 : -1, st.rchunk = 0;
    RR__CHECK(rr__pipe_step(c, &st));
  }

  RR__WHERE(c, "broadcast: completion notice from rank %d", rr__grank(c, tail));
  if (r == tail) {
    for (int q = 0; q < n; q++)
      if (q != r) RR__CHECK(rr__coll_send_ack(c, q));
  } else {
    RR__CHECK(rr__coll_recv_ack(c, tail));
  }
  return RR_OK;
}
