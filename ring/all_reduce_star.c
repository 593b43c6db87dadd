/*
 * Star (parameter-server) all-reduce, RR_ALGO=star: the pattern the ring replaces, kept as
 * the baseline the scaling benchmark (bench/scaling) compares the ring against.
 *
 *   gather:    every rank sends its whole buffer to rank 0 (the root), which reduces them
 *              in rank order: acc = x0; acc = acc (op) x1; ... acc = acc (op) x(n-1)
 *   broadcast: the root sends the result to every other rank, one after the other.
 *
 * Each transfer is a pipelined step (ring/pipe.c): the root reduces segment k of rank p's
 * buffer while the next segments are on the wire, and every message goes behind the call
 * header, as in the ring, so mismatched calls are caught the same way.
 *
 * Cost for S bytes on n ranks: the root's link carries (n-1)*S in, then (n-1)*S out (the
 * result exists only once everything arrived), so time ~ 2(n-1) * S / bandwidth and
 * busbw = algbw * 2(n-1)/n ~ 1/n of the link: half the ring at n = 2, falling like 1/n as
 * ranks are added, while the ring stays at the link rate. (Even a star that overlapped the
 * two halves segment by segment would only reach 2/n.)
 *
 * Same bits on every rank: the result is computed once, on the root, and copied.
 */
#include <stdio.h>

#include "ring/algo.h"

int rr__all_reduce_star(rr__coll *c) {
  const int n = c->n, r = c->r, root = 0;
  const size_t count = c->a->count;
  const char *src = c->a->sendbuf;
  char *dst = c->a->recvbuf;

  if (r == root) {
    /* Reduce in rank order; out of place the first reduction reads the input, so no copy. */
    for (int p = 1; p < n; p++) {
      RR__WHERE(c, "star: gathering from rank %d (%d/%d)", rr__grank(c, p), p, n - 1);
      RR__CHECK(rr__coll_recv_hdr(c, p));
      /* AVG divides once, in the reduction that completes the sum. */
      rr__step st = rr__step_recv_reduce(p, dst, p == 1 ? src : dst, count,
                                         (p == n - 1 && c->a->op == RR_AVG) ? n : 0);
      st.rchunk = p, st.phase = "gather";
      RR__CHECK(rr__pipe_step(c, &st));
    }
    for (int p = 1; p < n; p++) {
      RR__WHERE(c, "star: sending the result to rank %d (%d/%d)", rr__grank(c, p), p, n - 1);
      RR__CHECK(rr__coll_send_hdr(c, p));
      rr__step st = rr__step_send(p, dst, count);
      st.schunk = 0, st.phase = "broadcast";
      RR__CHECK(rr__pipe_step(c, &st));
    }
    return RR_OK;
  }

  RR__WHERE(c, "star: sending to rank %d", rr__grank(c, root));
  RR__CHECK(rr__coll_send_hdr(c, root));
  rr__step up = rr__step_send(root, src, count);
  up.schunk = r, up.phase = "gather";
  RR__CHECK(rr__pipe_step(c, &up));
  /* The send is complete (handed to the transport), so in place the result may land. */
  RR__WHERE(c, "star: receiving the result from rank %d", rr__grank(c, root));
  RR__CHECK(rr__coll_recv_hdr(c, root));
  rr__step down = rr__step_recv(root, dst, count);
  down.rchunk = 0, down.phase = "broadcast";
  return rr__pipe_step(c, &down);
}
