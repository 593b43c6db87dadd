/*
 * Pairwise all-to-all: block j of rank i's sendbuf becomes block i of rank j's recvbuf.
 *
 * In step s (1 <= s < n) rank r sends its block for rank r+s and receives rank r-s's block
 * for it. Each step pairs the ranks as a permutation, so every rank sends one block and
 * receives one per step and no rank is the target of two senders at once; the own block is
 * a local copy.
 *
 *   4 ranks, rank 0 (sendbuf [a0 a1 a2 a3], recvbuf [. . . .]):
 *     step 1: a1 -> rank 1, rank 3's block 0 -> recvbuf[3]
 *     step 2: a2 -> rank 2, rank 2's block 0 -> recvbuf[2]
 *     step 3: a3 -> rank 3, rank 1's block 0 -> recvbuf[1]      (a0 -> recvbuf[0] locally)
 *
 * Cost: n-1 steps of S/n bytes each way (S = one rank's sendbuf): (n-1)/n * S / bandwidth
 * plus n-1 latencies. Every byte is meant for one rank only, so no forwarding could save
 * any of it.
 *
 * The header to a peer goes at the start of the step that sends it its block, and each
 * peer's header is checked before its block lands, so every rank checks every other
 * rank's call: a call that differs fails on every rank without a completion notice.
 * (Sending all headers up front would not speed the data, which waits for its step
 * anyway; it would mainly widen the window in which a mismatch is found, and the group
 * aborted, while slower ranks are still finishing the call before, which then fails
 * there too.)
 *
 * all_to_allv is the same exchange with a count and a displacement per block. Its header
 * carries the count of one pair: sendcounts[j] in the header that goes to rank j, checked
 * there against recvcounts[i] for the sender i. Only the receiving end of a pair sees that
 * the two ends disagree, so the v form ends with a round of completion notices, as a
 * dissemination barrier (ceil(log2 n) latencies): no rank leaves it before every rank has
 * checked all of its pairs.
 */
#include <stdio.h>

#include "ring/algo.h"

/* The blocks of one side of the exchange: per-rank arrays (all_to_allv), or `count`
 * elements per rank back to back (all_to_all). */
typedef struct rr__blocks {
  const size_t *counts, *displs; /* NULL: uniform */
  size_t count;
} rr__blocks;

static size_t rr__blk_count(const rr__blocks *b, int j) {
  return b->counts ? b->counts[j] : b->count;
}
static size_t rr__blk_off(const rr__blocks *b, int j) {
  return b->displs ? b->displs[j] : (size_t)j * b->count;
}

static int rr__pairwise(rr__coll *c, const rr__blocks *sb, const rr__blocks *rb) {
  const int n = c->n, r = c->r, v = sb->counts != NULL;
  const size_t es = c->esize;
  const char *src = c->a->sendbuf;
  char *dst = c->a->recvbuf;

  /* The block to itself is a pair too: both ends are this rank's arrays. */
  const size_t own = rr__blk_count(sb, r);
  if (own != rr__blk_count(rb, r)) return rr__coll_pair_mismatch(c, r, own, rr__blk_count(rb, r));
  char *own_dst = dst + rr__blk_off(rb, r) * es;
  const char *own_src = src + rr__blk_off(sb, r) * es;
  RR__CHECK(rr__coll_copy(c, own_dst, own_src, own * es));

  for (int s = 1; s < n; s++) {
    const int to = rr__mod(r + s, n), from = rr__mod(r - s, n);
    RR__WHERE(c, "all-to-all step %d/%d (from rank %d)", s, n - 1, rr__grank(c, from));
    if (v) c->hdr.count = rr__blk_count(sb, to);
    RR__CHECK(rr__coll_send_hdr(c, to));
    if (v) c->hdr.count = rr__blk_count(rb, from);
    RR__CHECK(rr__coll_recv_hdr(c, from));
    rr__step st =
        rr__step_send_recv(to, src + rr__blk_off(sb, to) * es, rr__blk_count(sb, to), from,
                           dst + rr__blk_off(rb, from) * es, rr__blk_count(rb, from));
    st.schunk = to, st.rchunk = from;
    RR__CHECK(rr__pipe_step(c, &st));
  }
  return RR_OK;
}

int rr__all_to_all_pairwise(rr__coll *c) {
  const rr__blocks b = {.count = c->a->count};
  return rr__pairwise(c, &b, &b);
}

int rr__all_to_allv_pairwise(rr__coll *c) {
  const rr__args *a = c->a;
  const rr__blocks sb = {.counts = a->sendcounts, .displs = a->sdispls};
  const rr__blocks rb = {.counts = a->recvcounts, .displs = a->rdispls};
  RR__CHECK(rr__pairwise(c, &sb, &rb));
  /* The notices carry no pair's count: every rank sends and expects the same one. */
  c->hdr.count = 0;
  int round = 0;
  for (int d = 1; d < c->n; d <<= 1, round++) {
    RR__WHERE(c, "all_to_allv: completion round %d", round + 1);
    c->hdr.aux = (uint32_t)round;
    RR__CHECK(rr__coll_send_ack(c, rr__mod(c->r + d, c->n)));
    RR__CHECK(rr__coll_recv_ack(c, rr__mod(c->r - d, c->n)));
  }
  return RR_OK;
}
