/* A group's lanes, made in one place (rendezvous/lanes.h): init, subgroups and a growth come
 * through the bootstrap, a shrink from group/elastic.c; both have told every member where the
 * others listen, and each rank's nonce, before they come here.
 *
 * 1. For every pair the transport (the first in priority order that can_connect, or the one
 *    the comm has: a shrink keeps each pair's) and its sockets: 1 control socket (unless the
 *    comm has it) + what the transport asks for.
 * 2. The higher rank connects to the lower and greets on every socket (group, ranks, socket
 *    index, transport, proofs). All connects complete against the listen backlog, so no rank
 *    waits on another's accept loop and the order cannot deadlock.
 * 3. The lower rank reads every pending connection at once and answers each greeting of the
 *    pair with its own proof; strangers and garbage are closed and logged.
 * 4. The higher rank checks the answers, and each pair's sockets go to its transport, in one
 *    global order (by the lower, then the higher rank).
 */
#include "rendezvous/lanes.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "rendezvous/bootstrap.h"
#include "transport/socket.h"

#define RR__MAX_PENDING 64 /* half-open greetings kept at once; more push out the oldest */
/* With have_ctrl: how often a connect looks at the peer's control socket. */
#define RR__LOOK_MS 50

int rr__lanes_listen(const rr__addr *at, int *lfd, char *addr) {
  rr__addr bound;
  /* A large backlog: every higher member's sockets connect before this rank accepts any. */
  RR__CHECK(rr__sock_listen(at, 4096, 0, lfd, &bound));
  rr__addr_str(&bound, addr, RR__PEER_ADDR_MAX);
  return RR_OK;
}

int rr__lanes_nsockets(const rr__transport *tp, const rr__peer_info *a, const rr__peer_info *b) {
  int x = tp->setup_sockets(a, b), y = tp->setup_sockets(b, a);
  return 1 + (x > y ? x : y);
}

typedef struct rr__mesh {
  const rr__lanes *l;
  rr__comm *cm;
  int first;         /* the first socket index made here: 1 when the comm has the control socket */
  int refused_token; /* greetings refused for a wrong job token (for the timeout message) */
  const rr__transport **tp; /* [size] */
  int *nsock;               /* [size] sockets per pair, control included */
  int (*fds)[1 + RR__MAX_LANES];
  rr__hello (*sent)[1 + RR__MAX_LANES]; /* our greetings, to check the replies against */
} rr__mesh;

static int rr__gr(const rr__mesh *m, int p) {
  return m->l->global_ranks[p];
}

/* Both ends of every socket prove the key, each over nonces the other chose: the caller's
 * proof covers the acceptor's setup nonce (which the caller learnt from a channel it trusts),
 * its own and a nonce fresh for this socket; the acceptor's reply covers the same and its
 * verdict. A greeting or reply recorded from one connection is worth nothing on another or in
 * a later setup, and whoever answers at an address without the key cannot pass for the rank
 * (the reply proof is what catches a relay or an impostor there). */
static uint64_t rr__greeting_proof(const rr__mesh *m, const rr__hello *h) {
  const rr__peer_info *in = m->l->infos;
  return rr__proof(m->l->key,
                   "rr-hello-v3/%s/%d/%d/%d/%d/%s/%016" PRIx64 "/%016" PRIx64 "/%016" PRIx64,
                   h->group, h->from, h->to, h->index, h->nsockets, h->transport, in[h->to].nonce,
                   in[h->from].nonce, h->nonce);
}
static uint64_t rr__reply_proof(const rr__mesh *m, const rr__hello *h, int32_t verdict) {
  const rr__peer_info *in = m->l->infos;
  return rr__proof(
      m->l->key, "rr-reply-v1/%s/%d/%d/%d/%d/%016" PRIx64 "/%016" PRIx64 "/%016" PRIx64, h->group,
      h->from, h->to, h->index, (int)verdict, in[h->to].nonce, in[h->from].nonce, h->nonce);
}

/* Did the peer cause this failure of a setup step (it closed, reset or refused a
 * connection)? Only then can its reason be on the control socket; a local failure (out of
 * descriptors here) is the cause itself, and waiting would only hold back telling the
 * others. */
static int rr__failure_is_remote(int st) {
  const char *e = rr__error();
  return st == RR_EPEER || st == RR_EPROTO ||
         (st == RR_ESYS &&
          (strstr(e, "Connection refused") || strstr(e, "reset") || strstr(e, "Broken pipe")));
}

/* A step of the setup with peer p failed with st (the error set). If the peer gave up
 * first, it said why on the pair's control socket (an ABORT, rr__tell_peers or the comm's
 * abort): that is the cause, not the closed connection it led to. fd: the control socket,
 * once its greeting is done (-1: nothing to read). */
static int rr__peer_said_why(const rr__mesh *m, int fd, int p, int st, int remote) {
  if (fd < 0 || !remote) return st;
  char theirs[RR__CTL_TEXT_MAX + 1];
  int their_st = RR_OK;
  int64_t soon = RR__MIN(m->l->deadline_ms, rr__now_ms() + 1000);
  if (rr__ctl_read_abort(fd, soon, &their_st, theirs, sizeof theirs) == RR_OK)
    return rr__set_error(their_st, "rank %d gave up setting up the group: %s", rr__gr(m, p),
                         theirs);
  return st; /* the error text is still ours */
}

/* The pair's control socket in the comm (have_ctrl), -1 when it has none. */
static int rr__ctrl(const rr__mesh *m, int p) {
  return m->l->have_ctrl ? m->cm->peers[p].ctrl_fd : -1;
}

/* Member p's control socket (have_ctrl) became readable while its lanes were awaited: before
 * they are made a member sends nothing there but the reason it gave up, and then closes. */
static int rr__gave_up(const rr__mesh *m, int p) {
  int st = rr__set_error(RR_EPEER, "rank %d gave up setting up its data sockets", rr__gr(m, p));
  return rr__peer_said_why(m, rr__ctrl(m, p), p, st, 1);
}

/* Between slices of a wait for member p: has it given up (its control socket, have_ctrl), or
 * died with nobody in its place (rrun's notices)? RR_OK: wait on. */
static int rr__member_gone(const rr__mesh *m, int p) {
  int fd = rr__ctrl(m, p);
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  if (fd >= 0 && poll(&pf, 1, 0) > 0) return rr__gave_up(m, p);
  return rr__member_dead(m->l->watch, p, "during the group's set-up, after joining the rendezvous",
                         1);
}

/* How long a wait for a member goes before it looks whether the member is gone. */
static int64_t rr__look_ms(const rr__lanes *l) {
  if (l->have_ctrl) return RR__LOOK_MS;
  return l->watch && l->watch->store ? RR__NOTICE_POLL_MS : INT64_MAX;
}

/* This rank's setup failed: tell every peer whose control socket was made here (greeting
 * done) why it stops, so that whichever rank a launcher reports first, its message carries
 * the root cause (a rank out of descriptors, say) instead of "connection reset by the peer"
 * blaming the messenger. A peer reads it where a setup message was due (rr__peer_said_why,
 * rr__ctl_next_is_ctl). With have_ctrl the comm's owner tells them. */
static void rr__tell_peers(rr__mesh *m, int st) {
  const rr__lanes *l = m->l;
  if (l->have_ctrl) return;
  char why[RR__ERRMSG_MAX + 16];
  snprintf(why, sizeof why, "rank %d: %s", rr__gr(m, l->rank), rr__error());
  for (int q = 0; q < l->size; q++) {
    int fd = q == l->rank                   ? -1
             : m->cm->peers[q].ctrl_fd >= 0 ? m->cm->peers[q].ctrl_fd
                                            : m->fds[q][0];
    if (fd < 0) continue;
    rr__ctl_send_abort(fd, rr__gr(m, l->rank), st, 0, why);
    /* Closing a socket with unread bytes resets it, and a reset can cost the peer the
     * ABORT still queued for it: read what waits, and send our FIN now. */
    char sink[512];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    shutdown(fd, SHUT_WR);
  }
}

/* Connect to member p's address. A member listens from before it told anyone where, so a
 * refused connection means it is gone; rr__sock_connect retries it to the deadline all the
 * same (a general rule of connecting), so where something can say that the member is gone
 * (rr__member_gone) it is given the deadline in slices, looking between them. */
static int rr__connect_member(const rr__mesh *m, int p, const rr__addr *to, int *fd) {
  const rr__lanes *l = m->l;
  int64_t start = rr__now_ms(), look = rr__look_ms(l);
  for (int slices = 1;; slices++) {
    int64_t until =
        look == INT64_MAX ? l->deadline_ms : RR__MIN(l->deadline_ms, rr__now_ms() + look);
    int st = rr__sock_connect(to, until, fd);
    if (st != RR_ETIMEDOUT || until >= l->deadline_ms) {
      if (st != RR_OK && slices > 1)
        rr__prefix_error(st, "%.1f s in all, the last try", (double)(rr__now_ms() - start) / 1e3);
      return st;
    }
    RR__CHECK(rr__member_gone(m, p));
  }
}

/* Connect every socket to each lower rank and send its greeting. */
static int rr__connect_lower(rr__mesh *m) {
  const rr__lanes *l = m->l;
  for (int p = 0; p < l->rank; p++) {
    rr__addr to;
    RR__CHECK(rr__addr_parse(l->infos[p].addr, &to));
    for (int k = m->first; k < m->nsock[p]; k++) {
      int fd;
      int st = rr__connect_member(m, p, &to, &fd);
      if (st != RR_OK) return rr__prefix_error(st, "connecting to rank %d", rr__gr(m, p));
      m->fds[p][k] = fd;
      rr__hello h = {.from = l->rank, .to = p, .index = k, .nsockets = m->nsock[p]};
      snprintf(h.group, sizeof h.group, "%s", l->group_id);
      snprintf(h.transport, sizeof h.transport, "%s", m->tp[p]->name);
      if (getrandom(&h.nonce, sizeof h.nonce, 0) != (ssize_t)sizeof h.nonce)
        return rr__set_error(RR_ESYS, "getrandom: %s", strerror(errno));
      h.token_hash = rr__greeting_proof(m, &h);
      m->sent[p][k] = h;
      uint8_t wire[RR__HELLO_BYTES];
      rr__hello_encode(&h, wire);
      st = rr__sock_send_all(fd, wire, sizeof wire, l->deadline_ms);
      if (st != RR_OK) return rr__prefix_error(st, "greeting rank %d", rr__gr(m, p));
    }
  }
  return RR_OK;
}

typedef struct rr__pending {
  int fd;
  int64_t since; /* accepted then */
  size_t have;
  uint8_t buf[RR__HELLO_BYTES];
} rr__pending;

/* Is this an authentic greeting for this rank from a higher one of the group? RR_OK, or
 * RR_EPROTO with the reason set. */
static int rr__greeting_ok(rr__mesh *m, const rr__hello *h) {
  const rr__lanes *l = m->l;
  if (strcmp(h->group, l->group_id) != 0 || h->to != l->rank || h->from <= l->rank ||
      h->from >= l->size)
    return rr__set_error(RR_EPROTO, "greeting for group '%s' rank %d from rank %d", h->group, h->to,
                         h->from);
  if (h->token_hash != rr__greeting_proof(m, h)) {
    m->refused_token++;
    return rr__set_error(RR_EPROTO,
                         "a connection claiming to be rank %d does not hold this job's "
                         "token (another job, or RR_JOB_TOKEN differs between the ranks)",
                         rr__gr(m, h->from));
  }
  return RR_OK;
}

/* Check a complete greeting; file the socket or explain why not. Returns RR_OK when the
 * socket was filed, RR_EPROTO for a stranger (caller closes it), or a fatal error. */
static int rr__file_greeting(rr__mesh *m, rr__pending *pd) {
  const rr__lanes *l = m->l;
  rr__hello h;
  if (rr__hello_decode(pd->buf, &h) != RR_OK) return RR_EPROTO;
  if (rr__greeting_ok(m, &h) != RR_OK) return RR_EPROTO;
  int p = h.from;
  uint8_t reply[RR__REPLY_BYTES];
  rr__put_u32(reply, RR__HELLO_OK);
  int verdict = RR_OK;
  if (strcmp(h.transport, m->tp[p]->name) != 0 || h.nsockets != m->nsock[p])
    verdict = rr__set_error(RR_EMISMATCH,
                            "rank %d chose transport %s with %d sockets for this pair, rank %d "
                            "chose %s with %d (RR_TRANSPORT or RR_NSOCKS differ?)",
                            rr__gr(m, p), h.transport, h.nsockets, rr__gr(m, l->rank),
                            m->tp[p]->name, m->nsock[p]);
  else if (h.index < m->first || m->fds[p][h.index] >= 0)
    /* The socket is taken: this is a copy of a greeting already filed (a replay, or a
     * second process with the same rank, which the rank claims catch), or a control socket
     * that the comm has already. Refuse it alone: the connection that came first stays. */
    return rr__set_error(RR_EPROTO, "a second connection claims to be socket %d of rank %d",
                         h.index, rr__gr(m, p));
  rr__put_u32(reply + 4, (uint32_t)verdict);
  rr__put_u64(reply + 8, rr__reply_proof(m, &h, verdict));
  int st = rr__sock_send_all(pd->fd, reply, sizeof reply, l->deadline_ms);
  if (verdict != RR_OK) return verdict;
  if (st != RR_OK) return RR_EPROTO;
  m->fds[p][h.index] = pd->fd;
  return RR_OK;
}

/* A complete greeting to a rank whose setup failed: when it is an authentic one from a higher
 * rank of this group, answer it with the failure (the reply's status and proof, then an ABORT
 * with the reason), so that the caller learns why at once instead of at its deadline. */
static void rr__answer_failure(rr__mesh *m, rr__pending *pd, int st, const char *why,
                               int64_t until) {
  rr__hello h;
  if (rr__hello_decode(pd->buf, &h) != RR_OK || rr__greeting_ok(m, &h) != RR_OK) return;
  uint8_t reply[RR__REPLY_BYTES];
  rr__put_u32(reply, RR__HELLO_OK);
  rr__put_u32(reply + 4, (uint32_t)st);
  rr__put_u64(reply + 8, rr__reply_proof(m, &h, st));
  if (rr__sock_send_all(pd->fd, reply, sizeof reply, until) != RR_OK) return;
  rr__ctl_send_abort(pd->fd, rr__gr(m, m->l->rank), st, 0, why);
  shutdown(pd->fd, SHUT_WR);
}

/* This rank's setup failed (st, the error set): give the reason (rr__answer_failure) to
 * the npend connections half way through their greeting, and, lfd >= 0, to those still in
 * the listen backlog (called once this rank's other descriptors are closed and accept()
 * can work again). All of them at once, within one short deadline (200 ms): a stranger that
 * never completes its greeting costs that much in all, not that much each (64 silent
 * connections made a failing rank report 8 s late when they were read one after another).
 * Answering may fail; the error text stays this rank's failure. */
#define RR__ANSWER_MAX (RR__MAX_PENDING + 256)
static void rr__answer_pending(rr__mesh *m, rr__pending *pend, int npend, int lfd, int st) {
  char saved[RR__ERRMSG_MAX], why[RR__ERRMSG_MAX + 16];
  snprintf(saved, sizeof saved, "%s", rr__error());
  snprintf(why, sizeof why, "rank %d: %s", rr__gr(m, m->l->rank), saved);
  rr__pending *all[RR__ANSWER_MAX], *accepted = NULL;
  int n = 0, nacc = 0;
  for (int i = 0; i < npend && n < RR__ANSWER_MAX; i++) all[n++] = &pend[i];
  /* accept() must not wait for a next one */
  if (lfd >= 0 && rr__sock_nonblock(lfd, 1) == RR_OK &&
      (accepted = rr__calloc(RR__ANSWER_MAX - (size_t)n, sizeof *accepted)) != NULL)
    while (n < RR__ANSWER_MAX) {
      int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      accepted[nacc] = (rr__pending){.fd = fd};
      all[n++] = &accepted[nacc++];
    }
  const int64_t until = RR__MIN(m->l->deadline_ms, rr__now_ms() + 200);
  struct pollfd pfd[RR__ANSWER_MAX];
  int left = n;
  for (int i = 0; i < n; i++) {
    pfd[i] = (struct pollfd){.fd = all[i]->fd, .events = POLLIN};
    if (all[i]->have >= RR__HELLO_BYTES) { /* complete already: answer it now */
      rr__answer_failure(m, all[i], st, why, until);
      pfd[i].fd = -1;
      left--;
    }
  }
  while (left > 0) {
    int64_t ms = until - rr__now_ms();
    if (ms <= 0) break;
    int rc = poll(pfd, (nfds_t)n, (int)ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) break;
    for (int i = 0; i < n; i++) {
      if (pfd[i].fd < 0 || !pfd[i].revents) continue;
      rr__pending *pd = all[i];
      ssize_t got = recv(pd->fd, pd->buf + pd->have, RR__HELLO_BYTES - pd->have, MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (got > 0) pd->have += (size_t)got;
      if (got > 0 && pd->have < RR__HELLO_BYTES) continue;
      if (got > 0) rr__answer_failure(m, pd, st, why, until);
      pfd[i].fd = -1; /* answered, closed or broken: done with it */
      left--;
    }
  }
  for (int i = 0; i < nacc; i++) close(accepted[i].fd);
  free(accepted);
  rr__copy_error(saved);
}

void rr__lanes_refuse(const rr__lanes *l, int st) {
  rr__mesh m = {.l = l};
  if (l->lfd >= 0) rr__answer_pending(&m, NULL, 0, l->lfd, st);
}

/* Has higher rank p sockets still to come? */
static int rr__missing(const rr__mesh *m, int p) {
  for (int k = m->first; k < m->nsock[p]; k++)
    if (m->fds[p][k] < 0) return 1;
  return 0;
}

/* Close a pending connection that is not one of the group's (or no longer welcome). */
static void rr__drop(rr__pending *pend, int *npend, int i, const char *why) {
  if (why) RR__LOG_WARN(RR__SUB_INIT, "closed a setup connection: %s", why);
  close(pend[i].fd);
  pend[i] = pend[--*npend];
}

/* Accept the sockets of every higher rank, tolerating strangers, slow writers and junk: every
 * pending connection is read at once (one poll over the listener, all of them and, have_ctrl,
 * the control sockets of the members still to come), so that a stranger first in the queue
 * holds nothing up; one that says something else, repeats a socket, closes or stays silent
 * past hello_ms is closed, and only a member (its control socket, rrun's notice) or the
 * deadline can fail the wait. */
static int rr__accept_higher(rr__mesh *m) {
  const rr__lanes *l = m->l;
  int expected = 0;
  for (int p = l->rank + 1; p < l->size; p++) expected += m->nsock[p] - m->first;
  if (expected == 0) return RR_OK;
  rr__pending pend[RR__MAX_PENDING];
  int npend = 0, st = RR_OK;
  /* The listener, the pending connections, and a control socket per higher member. */
  struct pollfd *pfd = rr__calloc(1 + RR__MAX_PENDING + (size_t)l->size, sizeof *pfd);
  int *who = rr__calloc((size_t)l->size, sizeof *who);
  if (!pfd || !who) {
    free(pfd);
    free(who);
    return RR_ENOMEM;
  }
  /* Control sockets are in the poll; rrun's notices are looked at between slices. */
  int64_t look = l->watch && l->watch->store ? RR__NOTICE_POLL_MS : 1 << 30;
  while (expected > 0) {
    int64_t now = rr__now_ms(), wake = l->deadline_ms;
    for (int i = npend - 1; l->hello_ms > 0 && i >= 0; i--) /* silent past their time: out */
      if (pend[i].since + l->hello_ms <= now)
        rr__drop(pend, &npend, i, "it said no greeting in time");
      else
        wake = RR__MIN(wake, pend[i].since + l->hello_ms);
    int n = 0, nctl = 0;
    pfd[n++] = (struct pollfd){.fd = l->lfd, .events = POLLIN};
    for (int i = 0; i < npend; i++) pfd[n++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
    for (int p = l->rank + 1; p < l->size; p++)
      if (rr__ctrl(m, p) >= 0 && rr__missing(m, p)) {
        pfd[n++] = (struct pollfd){.fd = rr__ctrl(m, p), .events = POLLIN};
        who[nctl++] = p;
      }
    /* Under rrun, look at its notices between slices: a higher rank that published its
     * record and then died would otherwise be waited for until the deadline. */
    int64_t ms = RR__MIN(RR__MAX(wake - now, 0), look);
    int rc = poll(pfd, (nfds_t)n, (int)ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) {
      st = rr__set_error(RR_ESYS, "poll: %s", strerror(errno));
      break;
    }
    if (rc == 0 && rr__ms_left(l->deadline_ms) > 0) {
      for (int p = l->rank + 1; p < l->size && st == RR_OK; p++)
        if (rr__missing(m, p)) st = rr__member_gone(m, p);
      if (st != RR_OK) break;
      continue;
    }
    if (rc == 0) {
      char missing[256] = "";
      size_t o = 0;
      for (int p = l->rank + 1; p < l->size && o < sizeof missing - 16; p++)
        if (rr__missing(m, p))
          o += (size_t)snprintf(missing + o, sizeof missing - o, "%s%d", o ? ", " : "",
                                rr__gr(m, p));
      st = rr__set_error(RR_ETIMEDOUT, "timed out waiting for connections from rank(s) %s%s",
                         missing,
                         m->refused_token ? " (connections with a wrong job token were refused: "
                                            "does RR_JOB_TOKEN differ between the ranks?)"
                                          : "");
      break;
    }
    for (int i = 0; i < nctl && st == RR_OK; i++)
      if (pfd[1 + npend + i].revents) st = rr__gave_up(m, who[i]);
    if (st != RR_OK) break;
    for (int i = npend - 1; i >= 0; i--) {
      if (!pfd[1 + i].revents) continue;
      ssize_t r = recv(pend[i].fd, pend[i].buf + pend[i].have, RR__HELLO_BYTES - pend[i].have,
                       MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (r <= 0) {
        RR__LOG_INFO(RR__SUB_INIT, "closed a setup connection: %s before its greeting",
                     r == 0 ? "it closed" : strerror(errno));
        rr__drop(pend, &npend, i, NULL);
        continue;
      }
      if ((pend[i].have += (size_t)r) < RR__HELLO_BYTES) continue;
      int v = rr__file_greeting(m, &pend[i]);
      if (v == RR_OK) {
        expected--;
        pend[i] = pend[--npend];
      } else if (v == RR_EPROTO) {
        rr__drop(pend, &npend, i, rr__error());
      } else {
        st = v;
        rr__drop(pend, &npend, i, NULL);
        break;
      }
    }
    if (st != RR_OK) break;
    if (!pfd[0].revents) continue;
    int fd = accept4(l->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
        continue;
      st = rr__set_error(RR_ESYS, "accept: %s", strerror(errno));
      break;
    }
    if (npend == RR__MAX_PENDING) { /* a flood: the oldest stranger makes room */
      int old = 0;
      for (int i = 1; i < npend; i++)
        if (pend[i].since < pend[old].since) old = i;
      rr__drop(pend, &npend, old, "too many half-open setup connections; dropped the oldest");
    }
    pend[npend++] = (rr__pending){.fd = fd, .since = rr__now_ms()};
  }
  /* Failing: the connections half way through their greeting still get the reason. */
  if (st != RR_OK) rr__answer_pending(m, pend, npend, -1, st);
  /* Whoever still waits on the listener now is not one of the group's. */
  if (st == RR_OK && npend > 0)
    RR__LOG_WARN(RR__SUB_INIT,
                 "group %s: closed %d connection(s) still without a greeting once every member's "
                 "were in (someone else can reach this rank's listener)",
                 l->group_id, npend);
  for (int i = 0; i < npend; i++) close(pend[i].fd);
  free(pfd);
  free(who);
  return st;
}

/* Read the acceptors' answers to our greetings. */
static int rr__read_replies(rr__mesh *m) {
  const rr__lanes *l = m->l;
  for (int p = 0; p < l->rank; p++)
    for (int k = m->first; k < m->nsock[p]; k++) {
      uint8_t reply[RR__REPLY_BYTES];
      int st = rr__sock_recv_all(m->fds[p][k], reply, sizeof reply, l->deadline_ms);
      if (st != RR_OK) {
        rr__prefix_error(st, "waiting for rank %d to accept our connection", rr__gr(m, p));
        /* The control socket's greeting was answered: the rest of it is the peer's. */
        int ctl = l->have_ctrl ? rr__ctrl(m, p) : k > 0 ? m->fds[p][0] : -1;
        return rr__peer_said_why(m, ctl, p, st, 1);
      }
      int32_t verdict = (int32_t)rr__get_u32(reply + 4);
      if (rr__get_u32(reply) != RR__HELLO_OK)
        return rr__set_error(RR_EPROTO, "rank %d answered our greeting with garbage", rr__gr(m, p));
      if (rr__get_u64(reply + 8) != rr__reply_proof(m, &m->sent[p][k], verdict))
        return rr__set_error(RR_EPROTO,
                             "whoever answered at rank %d's address %s does not hold this job's "
                             "token: not rank %d (a relay or an impostor between the ranks?); "
                             "refusing the connection",
                             rr__gr(m, p), l->infos[p].addr, rr__gr(m, p));
      if (verdict != RR_OK) {
        int vst = verdict < 0 && verdict > -100 ? verdict : RR_EPROTO;
        rr__set_error(vst, "rank %d refused our connection: %s (see its log)", rr__gr(m, p),
                      rr_strerror(verdict));
        /* A rank that failed its own setup sends the reason after its refusal. */
        return rr__peer_said_why(m, m->fds[p][k], p, vst, 1);
      }
    }
  return RR_OK;
}

/* Hand each pair's sockets to its transport, in one global order (every rank goes through
 * its peers from the lowest: the pairs by their lower, then their higher rank); the control
 * socket stays with the comm. */
static int rr__hand_over(rr__mesh *m) {
  const rr__lanes *l = m->l;
  for (int p = 0; p < l->size; p++) {
    rr__peer *pe = &m->cm->peers[p];
    if (!l->have_ctrl) pe->info = l->infos[p];
    if (p == l->rank) continue;
    if (!l->have_ctrl) {
      pe->tp = m->tp[p];
      pe->ctrl_fd = m->fds[p][0];
      m->fds[p][0] = -1;
      RR__CHECK(rr__sock_nonblock(pe->ctrl_fd, 1));
      RR__CHECK(rr__sock_tune(pe->ctrl_fd, 0));
    }
    int st = pe->tp->connect(&l->infos[l->rank], &l->infos[p], p, &m->fds[p][1], m->nsock[p] - 1,
                             pe->ctrl_fd, l->deadline_ms, pe->lane, RR__MAX_LANES, &pe->nlanes);
    for (int k = 1; k < m->nsock[p]; k++) m->fds[p][k] = -1; /* owned by the transport now */
    if (st != RR_OK) {
      rr__prefix_error(st, "setting up %s to rank %d", pe->tp->name, rr__gr(m, p));
      return rr__peer_said_why(m, pe->ctrl_fd, p, st, rr__failure_is_remote(st));
    }
    RR__LOG_INFO(RR__SUB_INIT, "group %s: rank %d <-> rank %d over %s, %d lane(s)", l->group_id,
                 rr__gr(m, l->rank), rr__gr(m, p), pe->tp->name, pe->nlanes);
  }
  return RR_OK;
}

int rr__lanes_make(const rr__lanes *l, rr__comm *cm) {
  int size = l->size, st = RR_OK, listening = 1;
  rr__mesh m = {.l = l, .cm = cm, .first = l->have_ctrl ? 1 : 0};
  m.tp = rr__calloc((size_t)size, sizeof *m.tp);
  m.nsock = rr__calloc((size_t)size, sizeof *m.nsock);
  m.fds = rr__calloc((size_t)size, sizeof *m.fds);
  m.sent = rr__calloc((size_t)size, sizeof *m.sent);
  if (!m.tp || !m.nsock || !m.fds || !m.sent) {
    st = RR_ENOMEM;
    goto done;
  }
  for (int p = 0; p < size; p++) {
    for (int k = 0; k <= RR__MAX_LANES; k++) m.fds[p][k] = -1;
    if (p == l->rank) continue;
    m.tp[p] =
        l->have_ctrl ? cm->peers[p].tp : rr__transport_choose(&l->infos[l->rank], &l->infos[p]);
    m.nsock[p] = rr__lanes_nsockets(m.tp[p], &l->infos[l->rank], &l->infos[p]);
    if (m.nsock[p] > 1 + RR__MAX_LANES) {
      st = rr__set_error(RR_EPROTO, "%d sockets asked for to rank %d", m.nsock[p], rr__gr(&m, p));
      goto done;
    }
  }
  RR__CHECK_GOTO(rr__connect_lower(&m), st, done);
  RR__CHECK_GOTO(rr__accept_higher(&m), st, done);
  RR__CHECK_GOTO(rr__read_replies(&m), st, done);
  listening = 0; /* every member's sockets are in: what the listener holds now is strangers' */
  st = rr__hand_over(&m);
done:
  if (st != RR_OK && m.fds) rr__tell_peers(&m, st);
  if (m.fds)
    for (int p = 0; p < size; p++)
      for (int k = 0; k <= RR__MAX_LANES; k++)
        if (m.fds[p][k] >= 0) close(m.fds[p][k]);
  /* Once this rank's other descriptors are closed (it may have run out): the greetings still
   * queued on its listener get the reason too. */
  if (st != RR_OK && m.fds && listening) rr__answer_pending(&m, NULL, 0, l->lfd, st);
  free(m.tp);
  free(m.nsock);
  free(m.fds);
  free(m.sent);
  return st;
}
