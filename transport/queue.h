/* The request FIFO every transport keeps per lane and direction, and the hand-over of a
 * received slot's bytes to the head receive, written once.
 *
 * Requests belong to the caller (no allocation per message): a transport links them in
 * through req->next while it moves their bytes, completes them strictly in order, and keeps
 * the lane's counts (pending, rx_pending) that the comm's progress loop and the wait use to
 * decide which lanes to visit and sleep on. */
#ifndef RR__TRANSPORT_QUEUE_H_
#define RR__TRANSPORT_QUEUE_H_

#include <string.h>

#include "common/util.h"
#include "transport/transport.h"

typedef struct rr__reqq {
  rr__req *head, *tail;
} rr__reqq;

/* Take r into q on lane c (rx: q holds receives). An empty message completes at once:
 * nothing crosses the wire for it, on either side, so both stay in step. */
static inline void rr__reqq_post(rr__conn *c, rr__reqq *q, rr__req *r, int rx) {
  r->done = 0;
  r->complete = 0;
  r->consumed = 0;
  if (r->len == 0) {
    r->complete = 1;
    return;
  }
  r->next = NULL;
  if (q->tail)
    q->tail->next = r;
  else
    q->head = r;
  q->tail = r;
  c->pending++;
  if (rx) c->rx_pending++;
}

/* The head of q has all its bytes: complete it and drop it from the lane's counts. */
static inline void rr__reqq_pop(rr__conn *c, rr__reqq *q, int rx) {
  rr__req *r = q->head;
  r->complete = 1;
  q->head = r->next;
  if (!q->head) q->tail = NULL;
  c->pending--;
  if (rx) c->rx_pending--;
}

/* Hand `avail` bytes of a received slot (at data) to the receive r; returns how many it
 * took. A message that sits whole in the slot goes to its consume hook, if it has one (the
 * ring reduces straight out of the transport's memory); anything else is copied to r->buf,
 * up to what r still needs. Used by the transports that receive into slots (shm, ib). */
static inline size_t rr__req_deliver(rr__req *r, const char *data, size_t avail) {
  size_t need = r->len - r->done, take;
  if (r->consume && r->done == 0 && avail >= need) {
    take = need;
    r->consume(r, data, take);
    r->consumed = 1;
  } else {
    take = RR__MIN(avail, need);
    memcpy(r->buf + r->done, data, take);
  }
  r->done += take;
  return take;
}

#endif /* RR__TRANSPORT_QUEUE_H_ */
