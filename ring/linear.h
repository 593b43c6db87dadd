/* What linear gather (gather.c) and linear scatter (scatter.c) share: the root moves block q
 * with each other rank q in turn, root+1, root+2, ..., and its own block is a local copy.
 * The two differ only in the direction the blocks flow (`to_root`) and in how they make sure
 * every rank agreed on the call, which each algorithm file keeps and explains. */
#ifndef RR__RING_LINEAR_H_
#define RR__RING_LINEAR_H_

#include <stdio.h>

#include "ring/prims.h"

enum { RR__FROM_ROOT = 0 /* scatter */, RR__TO_ROOT = 1 /* gather */ };

/* The step that moves block q between the root and rank q, on either side. At the root the
 * block is the q-th of its n-block buffer (recvbuf for gather, sendbuf for scatter); at rank q
 * it is the rank's one block (the other buffer). */
static inline int rr__linear_block(rr__coll *c, int to_root, int q) {
  const int root = c->a->root;
  const size_t count = c->a->count, off = (size_t)q * count * c->esize;
  rr__step st;
  if (c->r != root)
    st = to_root ? rr__step_send(root, c->a->sendbuf, count)
                 : rr__step_recv(root, c->a->recvbuf, count);
  else
    st = to_root ? rr__step_recv(q, (char *)c->a->recvbuf + off, count)
                 : rr__step_send(q, (const char *)c->a->sendbuf + off, count);
  if (st.to >= 0) st.schunk = q; /* the trace numbers a block by its rank */
  if (st.from >= 0) st.rchunk = q;
  return rr__pipe_step(c, &st);
}

/* The root's part: its own block copied between its buffers (nothing to do in place), then
 * each other rank's block in turn, behind the header that goes with it: the rank's own for
 * gather (the root checks it before the block lands), the root's for scatter (the rank checks
 * it before its block lands). */
static inline int rr__linear_root(rr__coll *c, int to_root) {
  const int n = c->n, r = c->r;
  const size_t blk = c->a->count * c->esize;
  if (blk) {
    char *dst = (char *)c->a->recvbuf + (to_root ? (size_t)r * blk : 0);
    const char *src = (const char *)c->a->sendbuf + (to_root ? 0 : (size_t)r * blk);
    RR__CHECK(rr__coll_copy(c, dst, src, blk)); /* none in place */
  }
  for (int k = 1; k < n; k++) {
    const int q = rr__mod(r + k, n);
    RR__WHERE(
        c,
        to_root ? "gather: receiving from rank %d (%d/%d)" : "scatter: sending to rank %d (%d/%d)",
        rr__grank(c, q), k, n - 1);
    RR__CHECK(to_root ? rr__coll_recv_hdr(c, q) : rr__coll_send_hdr(c, q));
    RR__CHECK(rr__linear_block(c, to_root, q));
  }
  return RR_OK;
}

#endif /* RR__RING_LINEAR_H_ */
