/* rr_pg_shrink (docs/elastic.md): the survivors of a failed group agree on who is left and
 * carry on in a group of those ranks, contiguous in the old order.
 *
 * The agreement runs over the old group's control sockets, not the store: the store's host
 * (rank 0) may be the rank that died. The coordinator is the lowest rank each rank still
 * believes alive; everyone votes to it, it decides (a strict majority of the old group, or
 * no group at all), collects acknowledgements and commits. A coordinator that is lost hands
 * the role to the next lowest rank (a new epoch). Every wait is bounded by the group's
 * timeout, and a rank silent past it is left out. The new group keeps the control sockets
 * and each pair's transport; data lanes are made afresh over them where every group's are
 * (rendezvous/lanes.c), because the call the revoke cut may have left half a message in the
 * old ones. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "group/pg.h"
#include "rendezvous/lanes.h"
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

static int rr__gr(const rr__agree *ag, int i) {
  return ag->cm->peers[i].info.global_rank;
}

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
        return rr__set_error(RR_EPEER,
                             "rank %d, coordinating the shrink, left this rank out "
                             "(it was too slow to vote)",
                             rr__gr(ag, coord));
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
    RR__LOG_WARN(RR__SUB_INIT,
                 "shrink: rank %d, coordinating, was lost or silent (%s); the "
                 "next takes over",
                 rr__gr(ag, coord), rr__error());
    ag->view[coord] = 0;
    ag->epoch++;
  }
}

/* How long an accepted data socket may take to say its greeting. The peer sends it right
 * after connect() returns, so a second is generous even on a loaded machine; it only bounds
 * how long a silent stranger holds one of the pending slots (never the pair: the others are
 * read meanwhile). */
#define RR__LANE_HELLO_MS 1000

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

/* The new group's lanes, made as every group's are (rendezvous/lanes.c), over the pairs' old
 * control sockets and transports. Each rank listens on an ephemeral port of its old address
 * (when a higher rank is to connect to it) and tells every member, in a SETUP on the control
 * socket, that port and a nonce fresh for this shrink; the greetings on the data sockets prove
 * the job token over the nonces of both ends. Without a token the nonces, which only the
 * members saw, are the proof: anyone who can reach the port can connect to it. */
static int rr__shrunk_lanes(rr_pg *np, const rr_pg *pg, int64_t dl) {
  static const uint8_t no_token[16]; /* the proofs' key without a job token */
  rr__comm *nc = np->comm;
  int me = np->rank, k = np->size, lfd = -1, listen = 0, st = RR_OK;
  rr__peer_info *infos = rr__calloc((size_t)k, sizeof *infos);
  if (!infos) return RR_ENOMEM;
  for (int j = 0; j < k; j++) {
    infos[j] = nc->peers[j].info;
    if (j > me) listen |= rr__lanes_nsockets(nc->peers[j].tp, &infos[me], &infos[j]) > 1;
  }
  char text[RR__CTL_TEXT_MAX + 1];
  rr__addr la;
  RR__CHECK_GOTO(rr__addr_parse(infos[me].addr, &la), st, done);
  rr__addr_set_port(&la, 0);
  if (listen) RR__CHECK_GOTO(rr__lanes_listen(&la, &lfd, infos[me].addr), st, done);
  if (getrandom(&infos[me].nonce, sizeof infos[me].nonce, 0) != (ssize_t)sizeof infos[me].nonce) {
    st = rr__set_error(RR_ESYS, "getrandom: %s", strerror(errno));
    goto done;
  }
  RR__CHECK_GOTO(rr__addr_parse(infos[me].addr, &la), st, done);
  snprintf(text, sizeof text, "%d %016llx", listen ? rr__addr_port(&la) : 0,
           (unsigned long long)infos[me].nonce);
  /* Every SETUP out before any is awaited: nobody waits on a rank that waits on it. */
  for (int j = 0; j < k && st == RR_OK; j++)
    if (j != me) st = rr__comm_ctl_send(nc, j, RR__CTL_SETUP, 0, text, strlen(text));
  for (int j = 0; j < k && st == RR_OK; j++) {
    if (j == me) continue;
    int port = 0;
    unsigned long long nn = 0;
    rr__addr ta;
    st = rr__setup_msg(nc, j, dl, text);
    if (st == RR_OK && sscanf(text, "%d %llx", &port, &nn) != 2)
      st = rr__set_error(RR_EPROTO, "malformed SETUP '%.40s'", text);
    if (st == RR_OK) st = rr__addr_parse(infos[j].addr, &ta);
    if (st == RR_OK) {
      rr__addr_set_port(&ta, port);
      rr__addr_str(&ta, infos[j].addr, sizeof infos[j].addr);
      infos[j].nonce = nn;
    }
    if (st != RR_OK)
      rr__prefix_error(st, "setting up %s to rank %d", nc->peers[j].tp->name, infos[j].global_rank);
  }
  if (st != RR_OK) goto done;
  rr__lanes lanes = {.group_id = np->id,
                     .rank = me,
                     .size = k,
                     .global_ranks = np->global_ranks,
                     .infos = infos,
                     .key = pg->world->have_token ? pg->world->token_key : no_token,
                     .lfd = lfd,
                     .deadline_ms = dl,
                     .hello_ms = RR__LANE_HELLO_MS,
                     .have_ctrl = 1};
  st = rr__lanes_make(&lanes, nc);
done:
  if (lfd >= 0) close(lfd);
  free(infos);
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
  st = rr__shrunk_lanes(np, pg, dl);
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
