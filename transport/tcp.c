/* TCP transport: each lane is one non-blocking socket (TCP_NODELAY, large buffers) set up
 * by the bootstrap. A lane keeps two FIFOs of caller-owned requests; progress hands as many
 * queued requests as fit to one sendmsg/recvmsg, so a header and its payload, or several
 * small segments, cost one system call.
 *
 * Several lanes per peer (RR_NSOCKS) let the ring spread segments over sockets when one TCP
 * stream cannot fill a link; the ring picks the lane of each message, so both sides agree.
 * With two or more, each lane carries one direction (one_way_lanes; rr__lane_for in
 * transport/comm.c says why). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "transport/comm.h"
#include "transport/queue.h"
#include "transport/socket.h"
#include "transport/transport.h"

/* Enough to batch a window of segments; well under IOV_MAX. */
#define RR__TCP_IOV 64

typedef struct rr__tcp_conn {
  rr__conn base; /* first: the ring sees only this */
  int fd;
  rr__reqq sq, rq;
} rr__tcp_conn;

/* Fill an iovec from the unfinished bytes of the queued requests. */
static int rr__tcp_iov(const rr__reqq *q, struct iovec *iov) {
  int n = 0;
  for (rr__req *r = q->head; r && n < RR__TCP_IOV; r = r->next) {
    iov[n].iov_base = r->buf + r->done;
    iov[n].iov_len = r->len - r->done;
    n++;
  }
  return n;
}

/* Credit `bytes` to the queue in order, completing and unlinking finished requests. */
static void rr__tcp_advance(rr__tcp_conn *c, rr__reqq *q, size_t bytes) {
  while (bytes > 0 && q->head) {
    rr__req *r = q->head;
    size_t take = RR__MIN(bytes, r->len - r->done);
    r->done += take;
    bytes -= take;
    if (r->done == r->len) rr__reqq_pop(&c->base, q, q == &c->rq);
  }
}

static int rr__tcp_isend(rr__conn *base, rr__req *r) {
  rr__reqq_post(base, &((rr__tcp_conn *)base)->sq, r, 0);
  return RR_OK;
}

static int rr__tcp_irecv(rr__conn *base, rr__req *r) {
  rr__reqq_post(base, &((rr__tcp_conn *)base)->rq, r, 1);
  return RR_OK;
}

static int rr__tcp_progress(rr__conn *base, size_t *moved) {
  rr__tcp_conn *c = (rr__tcp_conn *)base;
  struct iovec iov[RR__TCP_IOV];
  while (c->sq.head) {
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)rr__tcp_iov(&c->sq, iov)};
    ssize_t w = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      rr__tcp_advance(c, &c->sq, (size_t)w);
      *moved += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
      return rr__set_error(RR_EPEER, "sending to rank %d: connection closed by the peer (%s)",
                           c->base.peer_global, strerror(errno));
    return rr__set_error(RR_ESYS, "sending to rank %d: sendmsg: %s", c->base.peer_global,
                         strerror(errno));
  }
  while (c->rq.head) {
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)rr__tcp_iov(&c->rq, iov)};
    ssize_t r = recvmsg(c->fd, &mh, MSG_DONTWAIT);
    if (r > 0) {
      rr__tcp_advance(c, &c->rq, (size_t)r);
      *moved += (size_t)r;
      c->base.last_rx_ms = rr__now_ms_coarse();
      continue;
    }
    if (r == 0)
      return rr__set_error(RR_EPEER,
                           "receiving from rank %d: connection closed by the peer "
                           "with %zu bytes still expected (did rank %d exit or crash?)",
                           c->base.peer_global, c->rq.head->len - c->rq.head->done,
                           c->base.peer_global);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    if (errno == ECONNRESET)
      return rr__set_error(RR_EPEER, "receiving from rank %d: connection reset by the peer",
                           c->base.peer_global);
    return rr__set_error(RR_ESYS, "receiving from rank %d: recvmsg: %s", c->base.peer_global,
                         strerror(errno));
  }
  return RR_OK;
}

static int rr__tcp_pollfd(rr__conn *base, struct pollfd *pfd) {
  rr__tcp_conn *c = (rr__tcp_conn *)base;
  /* POLLIN only while a receive is posted: data for a later message must not wake us. */
  short ev = (short)((c->sq.head ? POLLOUT : 0) | (c->rq.head ? POLLIN : 0));
  if (!ev) return 0;
  pfd->fd = c->fd;
  pfd->events = ev;
  pfd->revents = 0;
  return 1;
}

static int rr__tcp_peek(rr__conn *base, void *buf, size_t len, size_t *got) {
  rr__tcp_conn *c = (rr__tcp_conn *)base;
  *got = 0;
  for (;;) {
    ssize_t r = recv(c->fd, buf, len, MSG_PEEK | MSG_DONTWAIT);
    if (r >= 0) {
      *got = (size_t)r;
      return RR_OK;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return RR_OK;
    return rr__set_error(RR_EPEER, "connection to rank %d: %s", c->base.peer_global,
                         strerror(errno));
  }
}

static void rr__tcp_peekfd(rr__conn *base, struct pollfd *pfd) {
  pfd->fd = ((rr__tcp_conn *)base)->fd;
  pfd->events = POLLIN;
  pfd->revents = 0;
}

static void rr__tcp_close(rr__conn *base) {
  rr__tcp_conn *c = (rr__tcp_conn *)base;
  if (c->fd >= 0) close(c->fd);
  free(c);
}

/* comm.h: a forked child lets go of the lane's socket (the parent keeps using its own). */
void rr__tcp_forked(rr__conn *base) {
  rr__tcp_conn *c = (rr__tcp_conn *)base;
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

static int rr__tcp_can_connect(const rr__peer_info *self, const rr__peer_info *peer) {
  (void)self;
  (void)peer;
  return 1; /* the fallback: every peer is reachable over sockets */
}

static int rr__tcp_setup_sockets(const rr__peer_info *self, const rr__peer_info *peer) {
  (void)peer;
  return self->nsocks;
}

static int rr__tcp_connect(const rr__peer_info *self, const rr__peer_info *peer, int peer_rank,
                           const int *fds, int nfds, int ctrl_fd, int64_t deadline_ms,
                           rr__conn **conns, int max_lanes, int *nlanes) {
  (void)self;
  (void)ctrl_fd;
  (void)deadline_ms;
  int st = RR_OK;
  int made = 0;
  if (nfds < 1 || nfds > max_lanes) {
    st = rr__set_error(RR_EINVAL, "tcp: %d sockets for rank %d (1..%d allowed)", nfds,
                       peer->global_rank, max_lanes);
    goto fail;
  }
  for (; made < nfds; made++) {
    rr__tcp_conn *c = rr__calloc(1, sizeof *c);
    if (!c) {
      st = RR_ENOMEM;
      goto fail;
    }
    c->base.tp = &rr__tcp_transport;
    c->base.peer = peer_rank;
    c->base.peer_global = peer->global_rank;
    c->base.lane = made;
    c->base.last_rx_ms = rr__now_ms_coarse();
    c->fd = fds[made];
    conns[made] = &c->base;
    RR__CHECK_GOTO(rr__sock_nonblock(c->fd, 1), st, fail_made);
    RR__CHECK_GOTO(rr__sock_tune(c->fd, rr__params_get()->sockbuf), st, fail_made);
  }
  *nlanes = nfds;
  return RR_OK;
fail_made:
  made++;
fail:
  for (int i = 0; i < made; i++) rr__tcp_close(conns[i]);
  for (int i = made; i < nfds; i++) close(fds[i]);
  return st;
}

const rr__transport rr__tcp_transport = {
    .name = "tcp",
    .one_way_lanes = 1,
    .can_connect = rr__tcp_can_connect,
    .setup_sockets = rr__tcp_setup_sockets,
    .connect = rr__tcp_connect,
    .isend = rr__tcp_isend,
    .irecv = rr__tcp_irecv,
    .progress = rr__tcp_progress,
    .pollfd = rr__tcp_pollfd,
    .peek = rr__tcp_peek,
    .peekfd = rr__tcp_peekfd,
    .close = rr__tcp_close,
};
