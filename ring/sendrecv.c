/*
 * Point to point. A send is the call header followed by the data in pipeline segments; the
 * receive checks the header (this pair's sequence number, count and dtype) before any byte
 * lands in its buffer. Sends to one peer are received in the order they were sent.
 *
 * A send completes when its data is handed to the transport, as with Gloo, so two ranks may
 * both send before they receive (up to what the transport buffers).
 */
#include <stdio.h>

#include "ring/coll.h"

int rr__send_p2p(rr__coll *c) {
  const int peer = c->a->peer;
  RR__WHERE(c, "sending");
  RR__CHECK(rr__coll_send_hdr(c, peer));
  rr__step st = rr__step_send(peer, c->a->sendbuf, c->a->count);
  return rr__pipe_step(c, &st);
}

int rr__recv_p2p(rr__coll *c) {
  const int peer = c->a->peer;
  RR__WHERE(c, "receiving");
  RR__CHECK(rr__coll_recv_hdr(c, peer));
  rr__step st = rr__step_recv(peer, c->a->recvbuf, c->a->count);
  return rr__pipe_step(c, &st);
}

/* Both halves at once: the send half carries this pair's next send number, the receive
 * half checks the source's, so each half matches a plain send or recv on the peer. */
int rr__sendrecv_p2p(rr__coll *c) {
  const rr__args *a = c->a;
  RR__WHERE(c, "exchanging");
  rr__hdr both = c->hdr;
  c->hdr.seq = c->cs->p2p_sent[a->peer]++;
  c->hdr.count = a->count;
  c->hdr.from = c->r;
  RR__CHECK(rr__coll_send_hdr(c, a->peer));
  c->hdr.seq = c->cs->p2p_recvd[a->src]++;
  c->hdr.count = a->recvcount;
  c->hdr.from = a->src;
  RR__CHECK(rr__coll_recv_hdr(c, a->src));
  c->hdr = both;
  rr__step st = rr__step_send_recv(a->peer, a->sendbuf, a->count, a->src, a->recvbuf,
                                   a->recvcount);
  return rr__pipe_step(c, &st);
}
