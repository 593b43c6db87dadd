/*
 * Ring reduce-scatter: rank r ends with block r of the reduction of every rank's sendbuf.
 *
 * Step s (0 <= s < n-1): send block r-s-1, receive block r-s-2 and add our own copy of it.
 * A block's partial sum travels r+1 -> r+2 -> ... -> r, so the block received at the last
 * step is block r, finished straight into recvbuf. With 4 ranks, rank 0:
 *   step 0: send x0[3],            receive x2[2]          -> p = x2[2]+x0[2]
 *   step 1: send p (block 2),      receive x1[1]+x2[1]... -> and so on; step 2 yields block 0.
 *
 * Cost: n-1 steps of S/n bytes: (n-1)/n * S / bandwidth (nccl-tests' busbw factor).
 *
 * Partial blocks live in two buffers used alternately (one is sent while the other fills).
 * Out of place recvbuf serves as one of them; in place it cannot (it is our own input block,
 * read at the last step), so both come from the group's scratch buffer.
 */
#include <stdio.h>

#include "ring/algo.h"

int rr__reduce_scatter_ring(rr__coll *c) {
  const int n = c->n, r = c->r, left = rr__left(r, n), right = rr__right(r, n);
  const size_t count = c->a->count, blk = count * c->esize;
  const char *src = c->a->sendbuf;
  char *dst = c->a->recvbuf;
  const int in_place = blk > 0 && dst == src + (size_t)r * blk;
  char *part[2] = {NULL, NULL};
  if (n > 2) {
    char *scratch;
    RR__CHECK(rr__coll_scratch(c, (in_place ? 2 : 1) * blk, (void **)&scratch));
    /* The last step writes recvbuf while sending part[(n-3) % 2]: recvbuf may only stand in
     * for the other parity. */
    part[(n - 3) % 2] = scratch;
    part[(n - 2) % 2] = in_place ? scratch + blk : dst;
  }

  RR__CHECK(rr__coll_send_hdr(c, right));
  RR__CHECK(rr__coll_recv_hdr(c, left));
  for (int s = 0; s < n - 1; s++) {
    const int send = rr__mod(r - s - 1, n), recv = rr__mod(r - s - 2, n);
    const int last = s == n - 2;
    RR__WHERE(c, "reduce-scatter step %d/%d", s + 1, n - 1);
    rr__step st =
        rr__step_send_recv_reduce(right, s == 0 ? src + (size_t)send * blk : part[(s - 1) % 2],
                                  count, left, last ? dst : part[s % 2], src + (size_t)recv * blk,
                                  count, (last && c->a->op == RR_AVG) ? n : 0);
    st.schunk = send, st.rchunk = recv;
    RR__CHECK(rr__pipe_step(c, &st));
  }
  return RR_OK;
}
