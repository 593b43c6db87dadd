/*
 * Point to point. A send is the call header followed by the data in pipeline segments; the
 * receive checks the header (this pair's sequence number, count and dtype) before any byte
 * lands in its buffer. Sends to one peer are received in the order they were sent.
 *
 * A send completes when its data is handed to the transport, as with Gloo, so two ranks may
 * both send before they receive (up to what the transport buffers).
 *
 * A receive from any rank (RR_ANY_SOURCE) first finds its sender, then runs as a receive
 * from that rank. Headers travel first on a pair's first lane and every call consumes all
 * it receives, so between calls the next bytes a peer sent there are a header: a send
 * header means the peer sends to this rank, and that send is the next of the pair (pairs
 * match in order). Any other header is a collective the peer is already in; it cannot send
 * here before this call ends, so it is no candidate. The comm's wait peeks at those headers
 * without consuming them (rr__sniff) and sleeps until one of them is a send.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"
#include "ring/algo.h"

int rr__send_p2p(rr__coll *c) {
  const int peer = c->a->peer;
  RR__WHERE(c, "sending");
  RR__CHECK(rr__coll_send_hdr(c, peer));
  rr__step st = rr__step_send(peer, c->a->sendbuf, c->a->count);
  return rr__pipe_step(c, &st);
}

/* ---- finding the sender of a receive from any rank ---- */

/* Peek stamps of these receives (rr__sniff.seq): a collective's number never has the top
 * bit, so its own looks at the peers are neither skipped nor repeated because of ours, and
 * each of ours looks at every peer afresh. */
#define RR__ANY_STAMP (1ull << 63)

/* What a peer's next message is, as far as this call has seen. */
enum { RR__NEXT_UNSEEN = 0, RR__NEXT_SEND, RR__NEXT_OTHER };

typedef struct rr__any_scan {
  rr__coll *c;
  int *next;    /* [n] RR__NEXT_* */
  rr__hdr *hdr; /* [n] the header seen (for the timeout message) */
  int nsends;   /* peers whose next message is a send to this rank */
} rr__any_scan;

static int rr__any_check(void *ctx, int peer, const uint8_t wire[RR__SNIFF_BYTES]) {
  rr__any_scan *sc = ctx;
  if (rr__hdr_decode(wire, &sc->hdr[peer]) != RR_OK)
    return rr__prefix_error(RR_EPROTO, "from rank %d", rr__grank(sc->c, peer));
  /* Any send header is a candidate, not only one with the pair's expected number: a wrong
   * number or count is then a mismatch the header check names, rather than a timeout. */
  int sends = sc->hdr[peer].kind == RR__K_SEND;
  sc->next[peer] = sends ? RR__NEXT_SEND : RR__NEXT_OTHER;
  sc->nsends += sends;
  return RR_OK;
}

/* Of the peers that send, the first after the one chosen last: a rank that always has a
 * message ready cannot starve the others. */
static int rr__any_pick(const rr__any_scan *sc) {
  const rr__coll *c = sc->c;
  for (int k = 1; k <= c->n; k++) {
    int q = (c->cs->any_last + k) % c->n;
    if (sc->next[q] == RR__NEXT_SEND) return q;
  }
  return -1;
}

/* Append to a message; once it is full, the rest is dropped. */
static RR__PRINTF(4, 5) void rr__say(char *buf, size_t size, size_t *at, const char *fmt, ...) {
  if (*at >= size) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *at, size - *at, fmt, ap);
  va_end(ap);
  *at = w < 0 ? size : *at + (size_t)w;
}

/* Nobody sent in time: say what each peer did instead ("ranks 1, 3 sent nothing; rank 2 is
 * in barrier #4"), so a receive that waits for a rank in another call shows it. */
static int rr__any_timeout(const rr__any_scan *sc) {
  const rr__coll *c = sc->c;
  char quiet[256] = "", busy[512] = "", d[160];
  size_t qa = 0, ba = 0;
  int nquiet = 0;
  for (int q = 0; q < c->n; q++) {
    if (q == c->r) continue;
    if (sc->next[q] == RR__NEXT_UNSEEN) {
      rr__say(quiet, sizeof quiet, &qa, "%s%d", nquiet++ ? ", " : "", rr__grank(c, q));
      continue;
    }
    rr__hdr_describe(&sc->hdr[q], d, sizeof d);
    rr__say(busy, sizeof busy, &ba, "; rank %d is in %s", rr__grank(c, q), d);
  }
  const char *who = nquiet > 1 ? "ranks " : nquiet ? "rank " : "";
  return rr__set_error(RR_ETIMEDOUT, "timed out after %.1f s: no rank sent to this one (%s%s%s%s)",
                       (double)c->timeout_ms / 1000.0, who, quiet, nquiet ? " sent nothing" : "",
                       nquiet || !ba ? busy : busy + 2);
}

/* Sleep in the comm's wait, peeking at every peer's next header, until one is a send to
 * this rank; *src gets the sender. Aborts and dead peers end the wait as in any call. */
static int rr__any_find(rr__coll *c, int *src) {
  rr__coll_state *cs = c->cs;
  rr__any_scan sc = {.c = c};
  sc.next = rr__calloc((size_t)c->n, sizeof *sc.next);
  sc.hdr = rr__calloc((size_t)c->n, sizeof *sc.hdr);
  int st = sc.next && sc.hdr ? RR_OK : RR_ENOMEM;
  rr__sniff sn = {
      .seq = RR__ANY_STAMP | cs->any_calls++, .check = rr__any_check, .ctx = &sc, .watch_live = 1};
  RR__WHERE(c, "waiting for a sender");
  while (st == RR_OK && !sc.nsends) {
    /* Partial headers wake the wait at once: the deadline is checked here as well. */
    if (rr__ms_left(c->deadline_ms) == 0) {
      st = rr__any_timeout(&sc);
      break;
    }
    st = rr__comm_wait(c->cm, c->deadline_ms, &sn);
    /* An abort may carry RR_ETIMEDOUT too (rr_work_wait gave up); keep its own words. */
    if (st == RR_ETIMEDOUT && !atomic_load(&c->cm->aborted)) st = rr__any_timeout(&sc);
  }
  if (st == RR_OK) *src = cs->any_last = rr__any_pick(&sc);
  free(sc.next);
  free(sc.hdr);
  return st;
}

int rr__recv_p2p(rr__coll *c) {
  const rr__args *a = c->a;
  int peer = a->peer;
  if (peer == RR__PEER_ANY) {
    RR__CHECK(rr__any_find(c, &peer));
    /* From here on a receive from `peer`: its number and sender, as rr__coll_begin sets
     * them for a named one. */
    c->any_src = peer;
    c->hdr.seq = c->cs->p2p_recvd[peer]++;
    c->hdr.from = peer;
  }
  RR__WHERE(c, "receiving");
  RR__CHECK(rr__coll_recv_hdr(c, peer));
  rr__step st = rr__step_recv(peer, a->recvbuf, a->count);
  RR__CHECK(rr__pipe_step(c, &st));
  if (a->source) *a->source = rr__grank(c, peer);
  return RR_OK;
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
  rr__step st = rr__step_send_recv(a->peer, a->sendbuf, a->count, a->src, a->recvbuf, a->recvcount);
  return rr__pipe_step(c, &st);
}
