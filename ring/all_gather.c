/*
 * Ring all-gather: rank r contributes block r; everyone ends with all n blocks.
 *
 * Step s (0 <= s < n-1): send block r-s, receive block r-s-1, straight into place. Each
 * block makes n-1 hops around the ring, one per step, and every link carries one block per
 * step. With 4 ranks, rank 0 sends blocks 0, 3, 2 and receives 3, 2, 1.
 *
 * Cost: n-1 steps of S/n bytes (S = the whole output): (n-1)/n * S / bandwidth.
 */
#include <stdio.h>

#include "ring/algo.h"

int rr__all_gather_ring(rr__coll *c) {
  const int n = c->n, r = c->r, left = rr__left(r, n), right = rr__right(r, n);
  const size_t count = c->a->count, blk = count * c->esize;
  char *dst = c->a->recvbuf;
  /* Our own block, unless it is there already (in place). */
  if (blk) RR__CHECK(rr__coll_copy(c, dst + (size_t)r * blk, c->a->sendbuf, blk));

  RR__CHECK(rr__coll_send_hdr(c, right));
  RR__CHECK(rr__coll_recv_hdr(c, left));
  /* Device buffers may pull every step: the left neighbour's output described. */
  RR__CHECK(rr__coll_pull_post(c, right, left));
  RR__CHECK(rr__coll_pull_wait(c, left));
  for (int s = 0; s < n - 1; s++) {
    const int send = rr__mod(r - s, n), recv = rr__mod(r - s - 1, n);
    RR__WHERE(c, "all-gather step %d/%d", s + 1, n - 1);
    rr__step st = rr__step_send_recv(right, dst + (size_t)send * blk, count, left,
                                     dst + (size_t)recv * blk, count);
    st.schunk = send, st.rchunk = recv, st.pull = 1;
    RR__CHECK(rr__pipe_step(c, &st));
  }
  return RR_OK;
}
