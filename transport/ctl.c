/* The control messages on each pair's control socket (transport/comm.h): their wire form;
 * what the setup reads and sends on a control socket before a comm owns it (an ABORT where a
 * setup message was due); and rr_pg_shrink's exchange over a comm's control sockets, one
 * message at a time, never past one, so that what the transport's setup sends next stays in
 * the socket for it. The comm's wait reads the same sockets for ABORTs and goodbyes
 * (transport/comm.c); what the two files share is in transport/ctl.h. */
#include "transport/ctl.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "transport/socket.h"

#define RR__CTL_MAGIC 0x32435252u /* "RRC2": 2 adds the ABORT's collective number */

void rr__ctl_encode(const rr__ctl *c, uint8_t out[RR__CTL_FIXED]) {
  rr__put_u32(out, RR__CTL_MAGIC);
  rr__put_u32(out + 4, c->type);
  rr__put_u32(out + 8, (uint32_t)c->origin);
  rr__put_u32(out + 12, (uint32_t)c->status);
  rr__put_u32(out + 16, c->len);
  rr__put_u64(out + 20, c->seq);
}

int rr__ctl_decode(const uint8_t in[RR__CTL_FIXED], rr__ctl *c) {
  if (rr__get_u32(in) != RR__CTL_MAGIC)
    return rr__set_error(RR_EPROTO, "garbage on a control connection");
  c->type = rr__get_u32(in + 4);
  c->origin = (int32_t)rr__get_u32(in + 8);
  c->status = (int32_t)rr__get_u32(in + 12);
  c->len = rr__get_u32(in + 16);
  c->seq = rr__get_u64(in + 20);
  if (c->type < RR__CTL_ABORT || c->type > RR__CTL_SETUP || c->len > RR__CTL_TEXT_MAX ||
      c->status > 0 || c->status < -1000)
    return rr__set_error(RR_EPROTO, "malformed control message (type %u, length %u)", c->type,
                         c->len);
  return RR_OK;
}

void rr__ctl_send(int fd, uint32_t type, int origin, int status, uint64_t seq, const char *text) {
  uint8_t buf[RR__CTL_FIXED + RR__CTL_TEXT_MAX];
  size_t len = text ? strnlen(text, RR__CTL_TEXT_MAX) : 0;
  rr__ctl c = {.type = type, .origin = origin, .status = status, .len = (uint32_t)len, .seq = seq};
  rr__ctl_encode(&c, buf);
  if (len) memcpy(buf + RR__CTL_FIXED, text, len);
  /* Best effort and never blocking: control sockets carry a few small messages, so the
   * kernel buffer has room; a peer that is gone simply misses it. */
  ssize_t w = send(fd, buf, RR__CTL_FIXED + len, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (w != (ssize_t)(RR__CTL_FIXED + len))
    RR__LOG_INFO(RR__SUB_NET, "control message %u not fully sent on fd %d", type, fd);
}

void rr__ctl_send_abort(int fd, int origin, int status, uint64_t seq, const char *text) {
  rr__ctl_send(fd, RR__CTL_ABORT, origin, status, seq, text);
}

int rr__ctl_next_is_ctl(int fd, int64_t deadline_ms) {
  uint8_t b[4];
  for (;;) {
    ssize_t r = recv(fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
    if (r == (ssize_t)sizeof b) return rr__get_u32(b) == RR__CTL_MAGIC;
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return 0;
    if (rr__ms_left(deadline_ms) == 0) return 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    /* Fewer than 4 bytes so far: poll returns at once while they sit there; nap briefly. */
    if (r > 0)
      usleep(1000);
    else if (poll(&p, 1, (int)RR__MIN(rr__ms_left(deadline_ms), 1000)) < 0 && errno != EINTR)
      return 0;
  }
}

static int rr__ctl_read_abort_msg(int fd, int64_t deadline_ms, int *status, char *text, size_t n) {
  uint8_t hdr[RR__CTL_FIXED];
  RR__CHECK(rr__sock_recv_all(fd, hdr, sizeof hdr, deadline_ms));
  rr__ctl c;
  RR__CHECK(rr__ctl_decode(hdr, &c));
  char buf[RR__CTL_TEXT_MAX + 1];
  RR__CHECK(rr__sock_recv_all(fd, buf, c.len, deadline_ms));
  buf[c.len] = '\0';
  for (char *t = buf; *t; t++)
    if (!isprint((unsigned char)*t)) *t = '?';
  if (c.type != RR__CTL_ABORT) return rr__set_error(RR_EPROTO, "not an abort");
  *status = c.status ? c.status : RR_EABORTED;
  snprintf(text, n, "%s", buf);
  return RR_OK;
}

int rr__ctl_read_abort(int fd, int64_t deadline_ms, int *status, char *text, size_t n) {
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error());
  int st = rr__ctl_read_abort_msg(fd, deadline_ms, status, text, n);
  if (st != RR_OK) rr__copy_error(saved); /* no ABORT: the caller's own failure stands */
  return st;
}

/* Close a peer's control socket under the abort lock: an abort or revoke from another thread
 * sends on every open one while it holds the lock, and must not find the number of a closed
 * socket that was meanwhile reused (a lane set up during a shrink, say). */
void rr__ctl_close(rr__comm *cm, rr__peer *p) {
  pthread_mutex_lock(&cm->abort_mu);
  if (p->ctrl_fd >= 0) close(p->ctrl_fd);
  p->ctrl_fd = -1;
  pthread_mutex_unlock(&cm->abort_mu);
}

/* A goodbye: the peer leaves; its seq says why (any value this build does not know, from a
 * later one, reads as "does not say"). */
void rr__ctl_take_bye(rr__peer *p, const rr__ctl *c) {
  p->said_bye = 1;
  p->bye_why = c->seq <= RR__BYE_EXITING ? (uint32_t)c->seq : RR__BYE_UNKNOWN;
}

int rr__comm_ctl_send(rr__comm *cm, int peer, uint32_t type, uint64_t seq, const void *data,
                      size_t len) {
  rr__peer *p = &cm->peers[peer];
  if (p->ctrl_fd < 0 || len > RR__CTL_TEXT_MAX)
    return rr__set_error(RR_EPEER, "no control connection to rank %d", p->info.global_rank);
  uint8_t buf[RR__CTL_FIXED + RR__CTL_TEXT_MAX];
  rr__ctl c = {.type = type, .origin = cm->global_rank, .len = (uint32_t)len, .seq = seq};
  rr__ctl_encode(&c, buf);
  if (len) memcpy(buf + RR__CTL_FIXED, data, len);
  /* Small messages, a few per shrink: the socket's buffer has room, so this never waits. */
  ssize_t w;
  do w = send(p->ctrl_fd, buf, RR__CTL_FIXED + len, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w != (ssize_t)(RR__CTL_FIXED + len)) {
    /* Part of a message in the stream would make everything after it garbage to the peer:
     * end the connection instead, so that it sees this rank as lost, which is the truth. */
    if (w > 0 && shutdown(p->ctrl_fd, SHUT_RDWR) != 0)
      RR__LOG_WARN(RR__SUB_NET, "shutdown of the control socket to rank %d: %s",
                   p->info.global_rank, strerror(errno));
    return rr__set_error(RR_EPEER, "sending to rank %d: %s", p->info.global_rank,
                         w < 0 ? strerror(errno) : "short write (connection ended)");
  }
  return RR_OK;
}

/* Read what the peer's control socket holds, up to the end of its next message: 1 when a
 * whole message is buffered, 0 when more is to come, -1 when the socket closed, RR_EPROTO
 * (error set) for garbage. Never reads past a message, so raw setup bytes that follow it
 * stay in the socket for the transport. */
static int rr__ctl_fill(rr__peer *p) {
  for (;;) {
    size_t need = RR__CTL_FIXED;
    if (p->ctl_have >= RR__CTL_FIXED) {
      rr__ctl c;
      RR__CHECK(rr__ctl_decode(p->ctl_buf, &c));
      need += c.len;
    }
    if (p->ctl_have == need) return 1;
    ssize_t r = recv(p->ctrl_fd, p->ctl_buf + p->ctl_have, need - p->ctl_have, MSG_DONTWAIT);
    if (r > 0) {
      p->ctl_have += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return -1;
  }
}

int rr__comm_ctl_next(rr__comm *cm, const uint8_t *watch, int64_t deadline_ms, int *from,
                      rr__ctl *c, uint8_t *data) {
  if (cm->forked) return rr__comm_check(cm);
  rr__comm_watch_pids(cm);
  for (;;) {
    int n = 0, again = 0;
    for (int i = 0; i < cm->size; i++) {
      rr__peer *p = &cm->peers[i];
      if (!watch[i] || i == cm->rank) continue;
      *from = i;
      int f = p->ctrl_fd < 0 ? -1 : rr__ctl_fill(p);
      if (f == RR_EPROTO) return rr__prefix_error(f, "from rank %d", p->info.global_rank);
      if (f == 0 && p->exited && rr__exit_grace_left(cm, p) <= 0) {
        /* Its process exited and left nothing more: another process holds the socket. */
        rr__ctl_close(cm, p);
        return rr__set_error(RR_EPEER,
                             "lost rank %d: its process (pid %d) exited%s; its connections "
                             "are still held open by another process (one it forked without "
                             "exec?)",
                             p->info.global_rank, p->info.pid,
                             p->said_bye ? " after a goodbye" : ", without a goodbye");
      }
      if (f < 0) {
        rr__ctl_close(cm, p);
        if (p->said_bye)
          return rr__set_error(RR_EPEER, "lost rank %d: its connection closed after a goodbye (%s)",
                               p->info.global_rank,
                               p->bye_why == RR__BYE_DESTROYED ? "it destroyed the group"
                               : p->bye_why == RR__BYE_EXITING
                                   ? "its process exited without destroying the group first"
                                   : "it destroyed the group, or its process exited");
        return rr__set_error(RR_EPEER,
                             "lost rank %d: its connection closed without a goodbye "
                             "(the process exited, crashed or was killed)",
                             p->info.global_rank);
      }
      if (f == 1) {
        RR__CHECK(rr__ctl_decode(p->ctl_buf, c));
        p->ctl_have = 0;
        if (RR__CTL_IS_SHRINK(c->type)) {
          memcpy(data, p->ctl_buf + RR__CTL_FIXED, c->len);
          return RR_OK;
        }
        if (c->type == RR__CTL_BYE) rr__ctl_take_bye(p, c);
        again = 1; /* an ABORT or a goodbye: the group is revoked already; read on */
        continue;
      }
      cm->pfds[n].fd = p->ctrl_fd;
      cm->pfds[n].events = POLLIN;
      cm->pfds[n].revents = 0;
      n++;
    }
    if (again) continue;
    int first_pid = n;
    for (int i = 0; i < cm->size; i++) {
      if (!watch[i] || cm->peers[i].pid_fd < 0) continue;
      cm->pfds[n].fd = cm->peers[i].pid_fd;
      cm->pfds[n].events = POLLIN;
      cm->pfds[n].revents = 0;
      n++;
    }
    int64_t left = rr__ms_left(deadline_ms), wait = left;
    if (left == 0 || n == 0) return rr__set_error(RR_ETIMEDOUT, "timed out");
    /* An exited peer whose socket is still open: look again when its grace is over. */
    for (int i = 0; i < cm->size; i++) {
      int64_t g = watch[i] && i != cm->rank ? rr__exit_grace_left(cm, &cm->peers[i]) : -1;
      if (g >= 0) wait = RR__MIN(wait, g);
    }
    int rc;
    do rc = poll(cm->pfds, (nfds_t)n, (int)RR__MIN(wait, 1 << 30));
    while (rc < 0 && errno == EINTR);
    if (rc < 0) return rr__set_error(RR_ESYS, "poll: %s", strerror(errno));
    /* An exited process: the next round reads what it left, then reports it. */
    for (int k = first_pid, i = 0; i < cm->size; i++) {
      rr__peer *p = &cm->peers[i];
      if (!watch[i] || p->pid_fd < 0) continue;
      if (!cm->pfds[k++].revents) continue;
      rr__peer_exited(cm, p);
    }
  }
}
