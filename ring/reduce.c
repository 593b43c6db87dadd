/*
 * Pipelined chain reduce: root+1 -> root+2 -> ... -> root around the ring.
 *
 * The first rank sends its data; every later rank adds its own to each segment as it
 * arrives and passes the partial sum on; the root adds its own last, into recvbuf. As in
 * the broadcast chain all links work at once: time ~ S / bandwidth for large S.
 *
 *   4 ranks, root 0:   1 sends x1  ->  2 sends x1+x2  ->  3 sends x1+x2+x3  ->  0: all four
 *
 * Partial sums pass through staging slots (device buffers over CUDA IPC: landing slots in
 * the device scratch, ring/pipe_dev.c), so non-root ranks need no output buffer. The
 * root checks the last header of the chain and then tells every rank the call is complete.
 */
#include <stdio.h>

#include "ring/algo.h"

int rr__reduce_chain(rr__coll *c) {
  const int n = c->n, r = c->r, root = c->a->root;
  const int left = rr__left(r, n), right = rr__right(r, n);
  const int pos = rr__mod(r - root - 1, n); /* 0 = first, n-1 = root */
  const size_t count = c->a->count;
  const char *src = c->a->sendbuf;

  RR__WHERE(c, "reduce chain to rank %d, position %d/%d", rr__grank(c, root), pos, n - 1);
  if (pos == 0) {
    RR__CHECK(rr__coll_send_hdr(c, right));
    rr__step st = rr__step_send(right, src, count);
    st.schunk = 0;
    RR__CHECK(rr__pipe_step(c, &st));
  } else if (pos < n - 1) {
    RR__CHECK(rr__coll_recv_hdr(c, left));
    RR__CHECK(rr__coll_send_hdr(c, right));
    rr__step st = rr__step_recv_reduce_send(left, src, count, right);
    st.schunk = 0, st.rchunk = 0;
    RR__CHECK(rr__pipe_step(c, &st));
  } else {
    RR__CHECK(rr__coll_recv_hdr(c, left));
    rr__step st = rr__step_recv_reduce(left, c->a->recvbuf, src, count, c->a->op == RR_AVG ? n : 0);
    st.rchunk = 0;
    RR__CHECK(rr__pipe_step(c, &st));
  }

  RR__WHERE(c, "reduce: completion notice from rank %d", rr__grank(c, root));
  if (r == root) {
    for (int q = 0; q < n; q++)
      if (q != r) RR__CHECK(rr__coll_send_ack(c, q));
  } else {
    RR__CHECK(rr__coll_recv_ack(c, root));
  }
  return RR_OK;
}
