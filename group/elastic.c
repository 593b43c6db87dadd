/* rr_pg_shrink (docs/elastic.md): the survivors of a failed group agree on who is left and
 * carry on in a group of those ranks, contiguous in the old order.
 *
 * The agreement runs over the old group's control sockets, not the store: the store's host
 * (rank 0) may be the rank that died. The coordinator is the lowest rank each rank still
 * believes alive; everyone votes to it, it decides (a strict majority of the old group, or
 * no group at all), collects acknowledgements and commits. A coordinator that is lost hands
 * the role to the next lowest rank (a new epoch). Every wait is bounded by the group's
 * timeout, and a rank silent past it is left out. The new group keeps the control sockets
 * and each pair's transport; data lanes are set up afresh over them, because the call the
 * revoke cut may have left half a message in the old ones. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "group/pg.h"
#include "transport/comm.h"
#include "transport/socket.h"

/* A view travels as one byte per old rank: the control message's text bounds the group. */
#define RR__SHRINK_MAX RR__CTL_TEXT_MAX

typedef struct rr__agree {
  rr__comm *cm;
  int n, me;
  uint8_t view[RR__SHRINK_MAX]; /* 1: believed alive (this rank included) */
  uint64_t epoch;
  int64_t step_ms; /* the bound on each wait: the group's timeout */
} rr__agree;

static int rr__count(const uint8_t *v, int n) {
  int k = 0;
  for (int i = 0; i < n; i++) k += v[i] != 0;
  return k;
}

static int rr__lowest(const uint8_t *v, int n) {
  for (int i = 0; i < n; i++)
    if (v[i]) return i;
  return -1;
}

static int rr__gr(const rr__agree *ag, int i) { return ag->cm->peers[i].info.global_rank; }

/* The rule against two groups: a group needs a strict majority of the old one. */
static int rr__no_majority(const rr__agree *ag, const uint8_t *v) {
  return rr__set_error(RR_EPEER,
                       "only %d of the group's %d ranks can agree, not a strict majority: no "
                       "smaller group is formed (the other side of a partition could form one)",
                       rr__count(v, ag->n), ag->n);
}

static void rr__send_set(rr__agree *ag, const uint8_t *to, uint32_t type, const uint8_t *set) {
  char text[RR__SHRINK_MAX], saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error()); /* a failed send must not hide the cause */
  for (int i = 0; i < ag->n; i++) text[i] = set && set[i] ? '1' : '0';
  for (int i = 0; i < ag->n; i++)
    if (to[i] && i != ag->me)
      (void)rr__comm_ctl_send(ag->cm, i, type, ag->epoch, text, set ? (size_t)ag->n : 0);
  /* A send that fails means the peer is gone: the next wait on it says so. */
  rr__copy_error(saved);
}

/* The coordinator: collect votes, decide, collect acknowledgements, commit. */
static int rr__coordinate(rr__agree *ag, uint8_t *d) {
  int n = ag->n, from = -1, st;
  uint8_t w[RR__SHRINK_MAX], data[RR__CTL_TEXT_MAX];
  rr__ctl c;
  memset(d, 0, (size_t)n);
  d[ag->me] = 1;
  int64_t dl = rr__deadline(ag->step_ms);
  for (;;) { /* votes: until every rank of the view voted, was lost or the step ran out */
    int waiting = 0;
    for (int i = 0; i < n; i++) waiting += w[i] = ag->view[i] && !d[i];
    if (!waiting) break;
    st = rr__comm_ctl_next(ag->cm, w, dl, &from, &c, data);
    if (st == RR_ETIMEDOUT) break; /* the silent are left out */
    if (st == RR_EPEER || (st == RR_OK && c.type == RR__CTL_OUT)) {
      ag->view[from] = 0;
      continue;
    }
    RR__CHECK(st);
    if (c.type == RR__CTL_VOTE) {
      d[from] = 1;
      if (c.seq > ag->epoch) ag->epoch = c.seq;
    }
  }
  /* Ranks of the view that did not vote in time hear that they are out at once. */
  uint8_t late[RR__SHRINK_MAX];
  for (int i = 0; i < n; i++) late[i] = ag->view[i] && !d[i];
  if (rr__count(late, n)) rr__send_set(ag, late, RR__CTL_DECIDE, d);
  for (;;) { /* decide; a member lost before it acknowledged means deciding again */
    if (rr__count(d, n) * 2 <= n) {
      rr__send_set(ag, d, RR__CTL_OUT, NULL);
      return rr__no_majority(ag, d);
    }
    ag->epoch++;
    rr__send_set(ag, d, RR__CTL_DECIDE, d);
    uint8_t acked[RR__SHRINK_MAX] = {0};
    acked[ag->me] = 1;
    dl = rr__deadline(ag->step_ms);
    int lost = -1;
    for (;;) {
      int waiting = 0;
      for (int i = 0; i < n; i++) waiting += w[i] = d[i] && !acked[i];
      if (!waiting) break;
      st = rr__comm_ctl_next(ag->cm, w, dl, &from, &c, data);
      if (st == RR_ETIMEDOUT) { /* the slowest unacknowledged member is left out */
        for (int i = 0; i < n && lost < 0; i++)
          if (w[i]) lost = i;
        break;
      }
      if (st == RR_EPEER || (st == RR_OK && c.type == RR__CTL_OUT)) {
        lost = from;
        break;
      }
      RR__CHECK(st);
      if (c.type == RR__CTL_ACK && c.seq == ag->epoch) acked[from] = 1;
    }
    if (lost < 0) break;
    RR__LOG_WARN(RR__SUB_INIT, "shrink: rank %d lost before it acknowledged; deciding again",
                 rr__gr(ag, lost));
    d[lost] = ag->view[lost] = 0;
  }
  rr__send_set(ag, d, RR__CTL_COMMIT, NULL);
  return RR_OK;
}

/* A member: vote to the coordinator and wait for its commit. *lost = 1 when the coordinator
 * was lost, or silent for two steps, before it committed (then the next lowest rank takes
 * over; a silent one that wakes later finds no majority left to agree with it). */
static int rr__follow(rr__agree *ag, int coord, uint8_t *d, int *lost) {
  uint8_t w[RR__SHRINK_MAX] = {0}, data[RR__CTL_TEXT_MAX];
  rr__ctl c;
  int from = -1, decided = 0;
  uint64_t decided_epoch = 0;
  *lost = 0;
  w[coord] = 1; /* also the address list of what this rank sends: only the coordinator */
  rr__send_set(ag, w, RR__CTL_VOTE, ag->view);
  /* The coordinator may wait one whole step for the slowest voter, then one for the
   * acknowledgements: two steps before giving up on it. */
  int64_t dl = rr__deadline(2 * ag->step_ms);
  for (;;) {
    int st = rr__comm_ctl_next(ag->cm, w, dl, &from, &c, data);
    if (st == RR_EPEER) {
      *lost = 1;
      return st;
    }
    if (st == RR_ETIMEDOUT) { /* too slow to coordinate: left out as a lost one would be */
      *lost = 1;
      return rr__set_error(st, "rank %d, coordinating the shrink, did not commit within %lld ms",
                           rr__gr(ag, coord), (long long)(2 * ag->step_ms));
    }
    RR__CHECK(st);
    if (c.type == RR__CTL_OUT)
      return rr__set_error(RR_EPEER, "rank %d, coordinating the shrink, found no majority",
                           rr__gr(ag, coord));
    if (c.type == RR__CTL_DECIDE && c.len == (uint32_t)ag->n) {
      for (int i = 0; i < ag->n; i++) d[i] = data[i] == '1';
      if (!d[ag->me])
        return rr__set_error(RR_EPEER, "rank %d, coordinating the shrink, left this rank out "
                             "(it was too slow to vote)", rr__gr(ag, coord));
      decided = 1;
      decided_epoch = ag->epoch = c.seq; /* the coordinator's epoch is the one in force */
      rr__send_set(ag, w, RR__CTL_ACK, NULL);
      dl = rr__deadline(2 * ag->step_ms);
    } else if (c.type == RR__CTL_COMMIT && decided && c.seq == decided_epoch) {
      return RR_OK;
    }
  }
}

/* Agree on the members: d[i] = 1 for each old rank in the new group. */
static int rr__agree_members(rr__agree *ag, uint8_t *d) {
  for (;;) {
    if (rr__count(ag->view, ag->n) * 2 <= ag->n) return rr__no_majority(ag, ag->view);
    int coord = rr__lowest(ag->view, ag->n);
    if (coord == ag->me) return rr__coordinate(ag, d);
    int lost = 0;
    int st = rr__follow(ag, coord, d, &lost);
    if (st == RR_OK || !lost) return st;
    RR__LOG_WARN(RR__SUB_INIT, "shrink: rank %d, coordinating, was lost or silent (%s); the "
                 "next takes over", rr__gr(ag, coord), rr__error());
    ag->view[coord] = 0;
    ag->epoch++;
  }
}

/* Wait for the peer's SETUP on the new group's control socket, passing over what the
 * agreement left there (a vote sent to this rank when it was not the coordinator). */
static int rr__setup_msg(rr__comm *nc, int j, int64_t dl, char *text) {
  uint8_t w[RR__SHRINK_MAX] = {0};
  w[j] = 1;
  for (;;) {
    rr__ctl c;
    int from;
    RR__CHECK(rr__comm_ctl_next(nc, w, dl, &from, &c, (uint8_t *)text));
    text[c.len] = '\0';
    if (c.type == RR__CTL_SETUP) return RR_OK;
  }
}

/* Pending connections on a pair's data port read at once, and how long each may take to
 * say its hello. The peer sends its hello right after connect() returns, so a second is
 * generous even on a loaded machine; it only bounds how long a silent stranger holds a
 * slot (never the pair: the others are read meanwhile). */
#define RR__LANE_PENDING 16
#define RR__LANE_HELLO_MS 1000
#define RR__LANE_HELLO 12 /* the SETUP's nonce (8 bytes) and the socket's index (u32) */

typedef struct rr__lane_conn {
  int fd;
  int64_t until; /* its hello is due by then */
  size_t have;
  uint8_t hello[RR__LANE_HELLO];
} rr__lane_conn;

/* Close a connection that is not one of the pair's (counted; the first few logged). */
static void rr__lane_drop(rr__lane_conn *c, int peer, const char *why, int *dropped) {
  if (++*dropped <= 3)
    RR__LOG_WARN(RR__SUB_INIT, "shrink: closed a connection on the data port for rank %d: %s", peer,
                 why);
  close(c->fd);
  c->fd = -1;
}

/* Accept the nd data sockets of a pair on lfd, the listener this rank opened for it: each
 * must say the pair's hello (the nonce of this rank's SETUP and its index) first. Anyone
 * who can reach the port can connect, and what comes first in the queue may be a stranger
 * that says nothing: so every pending connection is read at once (one poll over the
 * listener, the peer's control socket and all of them), each has RR__LANE_HELLO_MS to say
 * its whole hello, and one that says something else, repeats an index, closes or stays
 * silent is closed and logged. Strangers never decide the outcome: the pair fails only
 * when the peer's control socket shows that it gave up, or at dl. fds[k] gets socket k
 * (blocking, as the transport takes them). Self-contained: the listener, the hello and the
 * deadline are all it knows of the shrink. */
static int rr__accept_lanes(int lfd, int ctrl_fd, uint64_t nonce, int nd, int peer, int64_t dl,
                            int *fds) {
  rr__lane_conn pend[RR__LANE_PENDING];
  struct pollfd pf[2 + RR__LANE_PENDING];
  int np = 0, got = 0, dropped = 0, st = RR_OK;
  while (got < nd) {
    int64_t now = rr__now_ms(), wake = dl;
    for (int i = np - 1; i >= 0; i--) /* silent past their time: out */
      if (pend[i].until <= now) {
        rr__lane_drop(&pend[i], peer, "it said no hello in time", &dropped);
        pend[i] = pend[--np];
      } else if (pend[i].until < wake) {
        wake = pend[i].until;
      }
    if (now >= dl) {
      st = rr__set_error(RR_ETIMEDOUT, "timed out waiting for its data sockets (%d of %d came%s)",
                         got, nd, dropped ? "; connections from others were closed" : "");
      break;
    }
    pf[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
    pf[1] = (struct pollfd){.fd = ctrl_fd, .events = POLLIN};
    for (int i = 0; i < np; i++) pf[2 + i] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
    int rc = poll(pf, (nfds_t)(2 + np), (int)RR__MIN(RR__MAX(wake - now, 1), 1 << 30));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) {
      st = rr__set_error(RR_ESYS, "poll: %s", strerror(errno));
      break;
    }
    if (pf[1].revents) { /* the peer closed it, or sent an ABORT before going */
      st = rr__set_error(RR_EPEER, "it gave up setting up its data sockets");
      break;
    }
    for (int i = np - 1; i >= 0; i--) {
      if (!pf[2 + i].revents) continue;
      rr__lane_conn *c = &pend[i];
      ssize_t r = recv(c->fd, c->hello + c->have, RR__LANE_HELLO - c->have, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (r <= 0) {
        rr__lane_drop(c, peer, r == 0 ? "it closed before its hello" : strerror(errno), &dropped);
      } else if ((c->have += (size_t)r) == RR__LANE_HELLO) {
        uint64_t theirs;
        uint32_t k;
        memcpy(&theirs, c->hello, 8);
        memcpy(&k, c->hello + 8, 4);
        if (theirs != nonce || k >= (uint32_t)nd || fds[k] >= 0) {
          rr__lane_drop(c, peer, "its hello is not the pair's", &dropped);
        } else {
          fds[k] = c->fd; /* ours from here (closed by the caller on any failure) */
          c->fd = -1;
          got++;
          st = rr__sock_nonblock(fds[k], 0);
        }
      }
      if (c->fd < 0) pend[i] = pend[--np];
      if (st != RR_OK) break;
    }
    if (st != RR_OK) break;
    if (!pf[0].revents) continue;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
        continue;
      st = rr__set_error(RR_ESYS, "accept: %s", strerror(errno));
      break;
    }
    if (np == RR__LANE_PENDING) { /* a flood: the one silent longest makes room */
      int old = 0;
      for (int i = 1; i < np; i++)
        if (pend[i].until < pend[old].until) old = i;
      rr__lane_drop(&pend[old], peer, "too many connections at once", &dropped);
      pend[old] = pend[--np];
    }
    pend[np++] = (rr__lane_conn){.fd = fd, .until = rr__now_ms() + RR__LANE_HELLO_MS};
  }
  /* Done (or failed): whoever still waits on the port is not the pair's. */
  for (int i = 0; i < np; i++) close(pend[i].fd);
  if (np > 0 || dropped > 3)
    RR__LOG_WARN(RR__SUB_INIT,
                 "shrink: %d connection(s) on the data port for rank %d were not the pair's "
                 "(someone else can reach it): closed",
                 np + dropped, peer);
  return st;
}

/* The data lanes of the pair (this rank, new rank j), over the pair's old transport. The
 * lower global rank listens; its SETUP says where, with a nonce the data sockets must
 * repeat (anyone on the network can connect). */
static int rr__pair_lanes(rr__comm *nc, int j, int64_t dl) {
  rr__peer *p = &nc->peers[j];
  const rr__peer_info *me = &nc->peers[nc->rank].info, *pi = &p->info;
  int a = p->tp->setup_sockets(me, pi), b = p->tp->setup_sockets(pi, me);
  int nd = a > b ? a : b, lower = me->global_rank < pi->global_rank, lfd = -1, st = RR_OK;
  int fds[RR__MAX_LANES];
  for (int k = 0; k < RR__MAX_LANES; k++) fds[k] = -1;
  if (nd > RR__MAX_LANES) return rr__set_error(RR_EPROTO, "%d data sockets asked for", nd);
  char text[RR__CTL_TEXT_MAX + 1] = "";
  uint64_t nonce = 0;
  if (lower && nd > 0) {
    rr__addr la, bound;
    RR__CHECK(rr__addr_parse(me->addr, &la));
    rr__addr_set_port(&la, 0);
    RR__CHECK(rr__sock_listen(&la, 16, 0, &lfd, &bound));
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) {
      st = rr__set_error(RR_ESYS, "getrandom: %s", strerror(errno));
      goto done;
    }
    snprintf(text, sizeof text, "%d %016llx", rr__addr_port(&bound), (unsigned long long)nonce);
  }
  RR__CHECK_GOTO(rr__comm_ctl_send(nc, j, RR__CTL_SETUP, 0, text, strlen(text)), st, done);
  RR__CHECK_GOTO(rr__setup_msg(nc, j, dl, text), st, done);
  if (nd > 0 && lower) {
    RR__CHECK_GOTO(rr__accept_lanes(lfd, p->ctrl_fd, nonce, nd, pi->global_rank, dl, fds), st,
                   done);
  } else if (nd > 0) {
    int port = 0;
    unsigned long long nn = 0;
    if (sscanf(text, "%d %llx", &port, &nn) != 2) {
      st = rr__set_error(RR_EPROTO, "malformed SETUP '%.40s'", text);
      goto done;
    }
    nonce = nn;
    rr__addr ta;
    RR__CHECK_GOTO(rr__addr_parse(pi->addr, &ta), st, done);
    rr__addr_set_port(&ta, port);
    for (int k = 0; k < nd; k++) {
      RR__CHECK_GOTO(rr__sock_connect(&ta, dl, &fds[k]), st, done);
      uint8_t hello[RR__LANE_HELLO];
      uint32_t kk = (uint32_t)k;
      memcpy(hello, &nonce, 8);
      memcpy(hello + 8, &kk, 4);
      RR__CHECK_GOTO(rr__sock_send_all(fds[k], hello, sizeof hello, dl), st, done);
    }
  }
  st = p->tp->connect(me, pi, j, fds, nd, p->ctrl_fd, dl, p->lane, RR__MAX_LANES, &p->nlanes);
  for (int k = 0; k < nd; k++) fds[k] = -1; /* the transport's now, also on failure */
done:
  for (int k = 0; k < RR__MAX_LANES; k++)
    if (fds[k] >= 0) close(fds[k]);
  if (lfd >= 0) close(lfd);
  if (st != RR_OK) rr__prefix_error(st, "setting up %s to rank %d", p->tp->name, pi->global_rank);
  return st;
}

/* The new group of the members d[] of pg: control sockets and transports taken from the old
 * comm, data lanes made afresh, the worker started. */
static int rr__shrunk_group(rr_pg *pg, const uint8_t *d, int64_t step_ms, rr_pg **out) {
  rr__comm *old = pg->comm;
  int k = rr__count(d, pg->size), me = 0, st;
  for (int i = 0; i < pg->rank; i++) me += d[i] != 0;
  rr_pg *np = NULL;
  RR__CHECK(rr__pg_new(k, &np));
  np->world = np;
  np->rank = me;
  np->timeout_ms = pg->timeout_ms;
  atomic_store(&np->timeout_override, atomic_load(&pg->timeout_override));
  np->hint = pg->world->hint;
  np->have_hint = pg->world->have_hint;
  np->local_rank = pg->local_rank;
  np->local_size = pg->local_size;
  np->device = pg->device;
  np->have_token = pg->world->have_token;
  memcpy(np->token_key, pg->world->token_key, sizeof np->token_key);
  snprintf(np->id, sizeof np->id, "%.40s~s", pg->id);
  for (int i = 0, j = 0; i < pg->size; i++)
    if (d[i]) np->global_ranks[j++] = pg->global_ranks[i];
  st = rr__comm_new(me, k, pg->global_ranks[pg->rank], &np->comm);
  if (st != RR_OK) {
    rr__pg_free(np);
    return st;
  }
  rr__comm *nc = np->comm;
  rr__comm_spin_inherit(nc, old); /* it waits as the old group decided */
  /* Under the old comm's abort lock: an abort or revoke from another thread sends on these
   * sockets while it holds it. */
  pthread_mutex_lock(&old->abort_mu);
  for (int i = 0, j = 0; i < pg->size; i++) {
    if (!d[i]) continue;
    rr__peer *o = &old->peers[i], *p = &nc->peers[j++];
    p->info = o->info;
    if (i == pg->rank) continue;
    p->tp = o->tp;
    p->ctrl_fd = o->ctrl_fd; /* the old group no longer says goodbye on it */
    o->ctrl_fd = -1;
    memcpy(p->ctl_buf, o->ctl_buf, o->ctl_have);
    p->ctl_have = o->ctl_have;
    o->ctl_have = 0;
  }
  pthread_mutex_unlock(&old->abort_mu);
  /* The same bound as each step of the agreement (rr_pg_set_timeout's, when set): a member
   * that acknowledged but never got the COMMIT sends no SETUP, and its peers wait this long. */
  int64_t dl = rr__deadline(step_ms);
  /* Pairs in one global order (by the lower, then the higher rank): no two ranks wait on
   * each other in opposite orders. */
  for (int j = 0; j < k && st == RR_OK; j++)
    if (j != me) st = rr__pair_lanes(nc, j, dl);
  if (st == RR_OK) st = rr__pg_run_worker(np);
  if (st != RR_OK) {
    char why[RR__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", rr__error());
    rr__comm_abort(nc, st, why, 1); /* peers still setting up hear why */
    rr__pg_free(np);
    rr__copy_error(why);
    return st;
  }
  if (pg->rank == 0) { /* rank 0 of both: it keeps holding the growth's port (group/grow.c) */
    np->grow_lfd = pg->grow_lfd;
    np->grow_port = pg->grow_port;
    np->grow_watch = pg->grow_watch;
    pg->grow_lfd = -1;
  }
  *out = np;
  return RR_OK;
}

int rr_pg_shrink(rr_pg *pg, int flags, rr_pg **newpg) {
  if (newpg) *newpg = NULL;
  if (!pg || !newpg || flags != 0)
    return rr__set_error(RR_EINVAL, "rr_pg_shrink: need a group and an output; flags must be 0");
  int me = pg->global_ranks[pg->rank];
  if (pg->size > RR__SHRINK_MAX)
    return rr__set_error(RR_ENOTSUP, "rank %d: rr_pg_shrink: groups of up to %d ranks", me,
                         RR__SHRINK_MAX);
  (void)rr_pg_revoke(pg); /* no rank may still wait in a call of the old group */
  /* The old group's call slot: its sockets are this thread's until the shrink is over. */
  pthread_mutex_lock(&pg->mu);
  while (pg->busy) pthread_cond_wait(&pg->cv, &pg->mu);
  pg->busy = 1;
  pthread_mutex_unlock(&pg->mu);

  rr__agree ag = {.cm = pg->comm, .n = pg->size, .me = pg->rank, .step_ms = pg->timeout_ms};
  int64_t ov = atomic_load(&pg->timeout_override);
  if (ov > 0) ag.step_ms = ov;
  /* A member waits two steps for its coordinator: keep 2 * step_ms representable for "no
   * timeout" values such as INT64_MAX (rr__deadline saturates the rest). */
  if (ag.step_ms > INT64_MAX / 4) ag.step_ms = INT64_MAX / 4;
  for (int i = 0; i < pg->size; i++) {
    const rr__peer *p = &pg->comm->peers[i];
    ag.view[i] = i == pg->rank || (p->ctrl_fd >= 0 && !p->said_bye);
  }
  uint8_t d[RR__SHRINK_MAX];
  int st = rr__agree_members(&ag, d);
  if (st == RR_OK) st = rr__shrunk_group(pg, d, ag.step_ms, newpg);
  if (st != RR_OK) {
    /* Let whoever still waits on this rank know it is out. */
    uint8_t all[RR__SHRINK_MAX];
    memcpy(all, ag.view, sizeof all);
    rr__send_set(&ag, all, RR__CTL_OUT, NULL);
    rr__prefix_error(st, "rank %d: rr_pg_shrink of group %s", me, pg->id);
  } else {
    RR__LOG_INFO(RR__SUB_INIT, "group %s shrunk to %d of %d ranks: this rank is %d of group %s",
                 pg->id, (*newpg)->size, pg->size, (*newpg)->rank, (*newpg)->id);
  }
  pthread_mutex_lock(&pg->mu);
  pg->busy = 0;
  pthread_cond_broadcast(&pg->cv);
  pthread_mutex_unlock(&pg->mu);
  return st;
}
