/*
 * Ring all-reduce: a reduce-scatter, then an all-gather, around the ring 0 -> 1 -> ... -> 0.
 *
 * Each rank's buffer x_r is cut into n chunks. In the reduce-scatter every rank passes one
 * chunk to its right neighbour per step and adds the chunk arriving from its left into its
 * own copy; after n-1 steps each rank holds one chunk summed over all ranks. In the
 * all-gather the finished chunks go once more around the ring, n-1 steps, landing in place.
 *
 * Worked example, 4 ranks, chunks c0..c3; "c2 = x2+x3+x0" means rank holds chunk 2 summed
 * over ranks 2, 3 and 0.
 *
 *   Reduce-scatter, step s: send chunk r-s, receive chunk r-s-1 and add own x_r into it.
 *            rank 0             rank 1             rank 2             rank 3
 *   step 0   send c0            send c1            send c2            send c3
 *            c3 = x3+x0         c0 = x0+x1         c1 = x1+x2         c2 = x2+x3
 *   step 1   send c3            send c0            send c1            send c2
 *            c2 = x2+x3+x0      c3 = x3+x0+x1      c0 = x0+x1+x2      c1 = x1+x2+x3
 *   step 2   send c2            send c3            send c0            send c1
 *            c1 = all four      c2 = all four      c3 = all four      c0 = all four
 *
 *   All-gather, step s: send chunk r+1-s (final), receive chunk r-s (final) into place.
 *   step 0   send c1, get c0    send c2, get c1    send c3, get c2    send c0, get c3
 *   step 1   send c0, get c3    send c1, get c0    send c2, get c1    send c3, get c2
 *   step 2   send c3, get c2    send c0, get c3    send c1, get c0    send c2, get c1
 *   Now every rank holds c0..c3, each summed over all four ranks.
 *
 * Cost for S bytes on n ranks: 2(n-1) steps, each sending and receiving S/n bytes per
 * rank, so time ~ 2(n-1) * latency + 2(n-1)/n * S / bandwidth. The bandwidth term does not
 * grow with n: that is why nccl-tests reports busbw = algbw * 2(n-1)/n.
 *
 * Every chunk is reduced on exactly one rank and then copied, so all ranks end with the
 * same bits even for floating point. Each step is pipelined in segments (ring/pipe.c).
 * Out of place, step 0 sends straight from the input and each reduction reads the input
 * and writes the output, so no extra copy is made.
 */
#include <stdio.h>

#include "ring/algo.h"

int rr__all_reduce_ring(rr__coll *c) {
  const int n = c->n, r = c->r, left = rr__left(r, n), right = rr__right(r, n);
  const size_t count = c->a->count, es = c->esize;
  const char *src = c->a->sendbuf;
  char *dst = c->a->recvbuf;
#define OFF(chunk) (rr__chunk_off(count, n, (chunk)) * es)
#define LEN(chunk) rr__chunk_len(count, n, (chunk))

  /* Our call's fingerprint goes ahead of the data; the left neighbour's must equal ours. */
  RR__CHECK(rr__coll_send_hdr(c, right));
  RR__CHECK(rr__coll_recv_hdr(c, left));
  /* Device buffers may pull in the all-gather: the left neighbour's output described now,
   * needed only then. */
  RR__CHECK(rr__coll_pull_post(c, right, left));

  for (int s = 0; s < n - 1; s++) {
    const int send = rr__mod(r - s, n), recv = rr__mod(r - s - 1, n);
    RR__WHERE(c, "reduce-scatter step %d/%d", s + 1, n - 1);
    /* AVG divides once, in the reduction that completes the chunk. */
    const int avg_div = (s == n - 2 && c->a->op == RR_AVG) ? n : 0;
    rr__step st =
        rr__step_send_recv_reduce(right, (s == 0 ? src : dst) + OFF(send), LEN(send), left,
                                  dst + OFF(recv), src + OFF(recv), LEN(recv), avg_div);
    st.schunk = send, st.rchunk = recv, st.phase = "reduce-scatter";
    RR__CHECK(rr__pipe_step(c, &st));
  }
  RR__CHECK(rr__coll_pull_wait(c, left));
  for (int s = 0; s < n - 1; s++) {
    const int send = rr__mod(r + 1 - s, n), recv = rr__mod(r - s, n);
    RR__WHERE(c, "all-gather step %d/%d", s + 1, n - 1);
    rr__step st =
        rr__step_send_recv(right, dst + OFF(send), LEN(send), left, dst + OFF(recv), LEN(recv));
    st.schunk = send, st.rchunk = recv, st.phase = "all-gather", st.pull = 1;
    RR__CHECK(rr__pipe_step(c, &st));
  }
#undef OFF
#undef LEN
  return RR_OK;
}
