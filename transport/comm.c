/* A group's connections: every peer's data lanes and its control socket, made at setup and
 * closed at destroy; the one progress loop the collectives drive (isend and irecv queue a
 * request on the lane that carries its message number, progress moves every busy lane); the
 * one wait, poll() on the busy lanes, every control socket, the peers' pidfds and the abort
 * eventfd, which also peeks at peers' headers for the waiting call (rr__sniff.check) and reads
 * the control messages that arrive (an ABORT naming the first unfinished collective, a BYE
 * saying why the peer left), so that a dead or aborting peer is noticed and named at once.
 * The messages' wire form and the shrink's exchange are transport/ctl.c's. Forked children
 * let go of all of it (common/fork.h).
 *
 * (Over 800 lines: the progress loop, the wait with its dead-peer watch and the spin before
 * it share the peer state and are read together; the control messages are in ctl.c already.)
 */
#include "transport/comm.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "transport/ctl.h"
#include "transport/socket.h"

/* ---- the process exiting, and forked children ---- */

static atomic_int rr__exiting_now;

void rr__comm_exiting(void) {
  atomic_store(&rr__exiting_now, 1);
}

/* Exit handlers run in the reverse order of their registration: this one, registered when
 * the first group of the process is made, runs before the handlers registered earlier and
 * before the destructors of C++ objects built earlier, so a group those free says goodbye
 * as "exiting". A handler registered after it runs first, and its goodbye says "destroyed". */
static pthread_once_t rr__exit_once = PTHREAD_ONCE_INIT;
static void rr__exit_handler(void) {
  rr__comm_exiting();
}
static void rr__exit_install(void) {
  if (atexit(rr__exit_handler) != 0)
    RR__LOG_INFO(RR__SUB_INIT, "atexit failed: goodbyes at exit will not say so");
}

static rr__comm *rr__comm_of_hook(rr__fork_hook *h) {
  return (rr__comm *)(void *)((char *)h - offsetof(rr__comm, fork));
}

/* Hold the abort lock across fork(), so the child sees every control socket either open or
 * closed, never half way (rr__ctl_close changes them under it). */
static void rr__comm_fork_prepare(rr__fork_hook *h) {
  pthread_mutex_lock(&rr__comm_of_hook(h)->abort_mu);
}

static void rr__comm_fork_parent(rr__fork_hook *h) {
  pthread_mutex_unlock(&rr__comm_of_hook(h)->abort_mu);
}

/* In a child forked without exec: let go of every descriptor of the group, so that the
 * parent's death closes its connections as if the child did not exist, and fail every later
 * call here with the reason. Nothing is sent: the peers' connections are the parent's. */
static void rr__comm_fork_child(rr__fork_hook *h) {
  rr__comm *cm = rr__comm_of_hook(h);
  if (!cm->forked) {
    for (int i = 0; i < cm->size; i++) {
      rr__peer *p = &cm->peers[i];
      if (p->ctrl_fd >= 0) close(p->ctrl_fd);
      if (p->pid_fd >= 0) close(p->pid_fd);
      p->ctrl_fd = p->pid_fd = -1;
      for (int l = 0; l < p->nlanes; l++) {
        if (!p->lane[l]) continue;
        if (p->lane[l]->tp == &rr__tcp_transport)
          rr__tcp_forked(p->lane[l]);
        else if (p->lane[l]->tp == &rr__shm_transport)
          rr__shm_forked(p->lane[l]);
      }
    }
    if (cm->wake_fd >= 0) close(cm->wake_fd);
    cm->wake_fd = -1;
    cm->forked = 1;
    cm->no_bye = 1;
    cm->abort_status = RR_ESTATE;
    snprintf(cm->abort_reason, sizeof cm->abort_reason,
             "this process (pid %d) was forked without exec from rank %d's process (pid %d) "
             "after the group was made: a forked child cannot use its parent's groups (their "
             "connections stay with the parent); make groups in the child itself",
             (int)getpid(), cm->global_rank, (int)getppid());
    atomic_store(&cm->abort_from, 0);
    atomic_store(&cm->halt, 1);
    atomic_store(&cm->aborted, 1);
  }
  pthread_mutex_unlock(&cm->abort_mu);
}

int rr__comm_new(int rank, int size, int global_rank, rr__comm **out) {
  rr__comm *cm = rr__calloc(1, sizeof *cm);
  if (!cm) return RR_ENOMEM;
  cm->rank = rank;
  cm->size = size;
  cm->global_rank = global_rank;
  cm->wake_fd = -1;
  pthread_mutex_init(&cm->abort_mu, NULL);
  cm->peers = rr__calloc((size_t)size, sizeof *cm->peers);
  cm->active = rr__calloc((size_t)size * RR__MAX_LANES, sizeof *cm->active);
  /* A wait polls every busy lane, and per peer a sniffed lane, a control socket and a
   * pidfd; then the eventfd. */
  cm->pfds = rr__calloc((size_t)size * (RR__MAX_LANES + 3) + 1, sizeof *cm->pfds);
  if (!cm->peers || !cm->active || !cm->pfds) {
    rr__comm_free(cm);
    return RR_ENOMEM;
  }
  for (int i = 0; i < size; i++) cm->peers[i].ctrl_fd = cm->peers[i].pid_fd = -1;
  cm->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (cm->wake_fd < 0) {
    int e = errno;
    rr__comm_free(cm);
    return rr__set_error(RR_ESYS, "eventfd: %s", strerror(e));
  }
  cm->fork.prepare = rr__comm_fork_prepare;
  cm->fork.parent = rr__comm_fork_parent;
  cm->fork.child = rr__comm_fork_child;
  int st = rr__fork_watch(&cm->fork);
  if (st != RR_OK) {
    char why[RR__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", rr__error());
    rr__comm_free(cm);
    return rr__set_error(st, "%s", why);
  }
  pthread_once(&rr__exit_once, rr__exit_install);
  *out = cm;
  return RR_OK;
}

void rr__comm_free(rr__comm *cm) {
  if (!cm) return;
  rr__fork_unwatch(&cm->fork);
  uint64_t why = atomic_load(&rr__exiting_now) ? RR__BYE_EXITING : RR__BYE_DESTROYED;
  for (int i = 0; cm->peers && i < cm->size; i++) {
    rr__peer *p = &cm->peers[i];
    if (p->pid_fd >= 0) close(p->pid_fd);
    if (p->ctrl_fd >= 0) {
      /* After an abort, repeat its cause first: a peer that has not heard it from its
       * origin yet must not take our leaving for the reason. Then a goodbye, so our closing
       * sockets are not taken for a crash. */
      if (!cm->no_bye && atomic_load(&cm->aborted)) {
        uint64_t from = atomic_load(&cm->abort_from);
        rr__ctl_send(p->ctrl_fd, RR__CTL_ABORT, cm->global_rank, cm->abort_status,
                     from ? from : atomic_load(&cm->unfinished), cm->abort_reason);
      }
      if (!cm->no_bye) rr__ctl_send(p->ctrl_fd, RR__CTL_BYE, cm->global_rank, 0, why, NULL);
      close(p->ctrl_fd);
    }
    for (int l = 0; l < p->nlanes; l++)
      if (p->lane[l]) p->lane[l]->tp->close(p->lane[l]);
  }
  if (cm->wake_fd >= 0) close(cm->wake_fd);
  pthread_mutex_destroy(&cm->abort_mu);
  free(cm->peers);
  free(cm->active);
  free(cm->pfds);
  free(cm);
}

/* from: the first collective the abort concerns (0: every call). A local abort (from 0)
 * also overrides a peer's that concerns only later calls: this rank stops now.
 * tell_peers: 0 no, 1 a local abort (stop transfers now, tell every peer), 2 pass a peer's
 * revoke on (tell every peer; the running call goes on if the revoke does not concern it). */
static int rr__abort_set(rr__comm *cm, int status, const char *reason, int tell_peers,
                         uint64_t from) {
  pthread_mutex_lock(&cm->abort_mu);
  if (cm->forked) { /* a forked child's copy: its reason stands, and nobody is to be told */
    pthread_mutex_unlock(&cm->abort_mu);
    return status;
  }
  int first = !atomic_load(&cm->aborted);
  /* A revoke (rr_pg_revoke) replaces any earlier abort, once: calls then fail as revoked,
   * and the failure that led to it stays in the text. Being once, the forwarding below
   * stops after one round. */
  int revoke = status == RR_EREVOKED && cm->abort_status != RR_EREVOKED;
  char revoked_why[RR__ERRMSG_MAX] = "";
  if (first || revoke || (from == 0 && atomic_load(&cm->abort_from) > 0)) {
    if (revoke && !first) {
      char before[RR__ERRMSG_MAX];
      snprintf(before, sizeof before, "%s", cm->abort_reason);
      snprintf(cm->abort_reason, sizeof cm->abort_reason, "%.600s (after: %.300s)", reason, before);
    } else {
      snprintf(cm->abort_reason, sizeof cm->abort_reason, "%s", reason);
    }
    cm->abort_status = status;
    /* A revoke over an earlier abort never frees calls that abort already concerned. */
    uint64_t was = atomic_load(&cm->abort_from);
    atomic_store(&cm->abort_from, revoke && !first && was < from ? was : from);
    atomic_store(&cm->aborted, 1);
    if (tell_peers == 1) atomic_store(&cm->halt, 1);
    RR__LOG_WARN(RR__SUB_COLL, "group aborted: %s", reason);
    uint64_t one = 1;
    if (cm->wake_fd >= 0 && write(cm->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
      RR__LOG_WARN(RR__SUB_COLL, "eventfd write: %s", strerror(errno));
    /* Peers fail from the first collective this rank did not finish on (a revoke passed
     * on keeps the number its origin gave). */
    uint64_t seq = tell_peers == 2 ? from : atomic_load(&cm->unfinished);
    if (tell_peers)
      for (int i = 0; i < cm->size; i++)
        if (i != cm->rank && cm->peers[i].ctrl_fd >= 0)
          rr__ctl_send(cm->peers[i].ctrl_fd, RR__CTL_ABORT, cm->global_rank, status, seq,
                       cm->abort_reason);
    if (revoke) snprintf(revoked_why, sizeof revoked_why, "%s", cm->abort_reason);
  } else if (from < atomic_load(&cm->abort_from)) {
    /* An abort that concerns an earlier call than the one recorded: peers' aborts can arrive
     * out of order (one passed on by a rank that was a call ahead, naming that later call,
     * before the origin's own), and the call running here, earlier, would otherwise wait for
     * data that never comes until its timeout. Its reason replaces the other's (it names the
     * call that failed first), except under a revoke, whose status stays. */
    if (cm->abort_status != RR_EREVOKED) {
      snprintf(cm->abort_reason, sizeof cm->abort_reason, "%s", reason);
      cm->abort_status = status;
    }
    atomic_store(&cm->abort_from, from);
    RR__LOG_WARN(RR__SUB_COLL, "group aborted from an earlier call: %s", reason);
    uint64_t one = 1;
    if (cm->wake_fd >= 0 && write(cm->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
      RR__LOG_WARN(RR__SUB_COLL, "eventfd write: %s", strerror(errno));
  }
  pthread_mutex_unlock(&cm->abort_mu);
  if (revoked_why[0] && cm->on_revoke) cm->on_revoke(cm->on_revoke_ctx, revoked_why);
  return status;
}

int rr__comm_abort(rr__comm *cm, int status, const char *reason, int tell_peers) {
  return rr__abort_set(cm, status, reason, tell_peers, 0);
}

int rr__comm_abort_concerns(rr__comm *cm, int coll, uint64_t seq) {
  return atomic_load(&cm->aborted) && (!coll || seq >= atomic_load(&cm->abort_from));
}

/* The abort concerns the call running now. */
static int rr__abort_now(rr__comm *cm) {
  return rr__comm_abort_concerns(cm, cm->cur_coll, cm->cur_seq);
}

int rr__comm_check(rr__comm *cm) {
  if (!atomic_load(&cm->aborted)) return RR_OK;
  pthread_mutex_lock(&cm->abort_mu);
  int st = cm->abort_status;
  rr__set_error(st, "%s", cm->abort_reason);
  pthread_mutex_unlock(&cm->abort_mu);
  return st;
}

/* The lane that carries message `msg` to (sending) or from the peer. Both sides compute the
 * same lane for a message: msg mod lanes, or, on a transport whose lanes should each carry
 * one direction (TCP) and with at least two of them, message 0 on lane 0 both ways and the
 * others one way: the even lanes carry the lower rank's messages to the higher, the odd ones
 * the way back. Why one way: on loopback, a TCP socket carrying data both ways made a 4 MiB
 * all-reduce at world 2 20% slower in a bare socket ring (SR_ONESOCK: 3.0 against 3.9 GB/s):
 * the peer's data lands in the socket's backlog while our sendmsg holds its lock, and is
 * processed inside our send. Why message 0 both ways: it is every call's header and the whole of a
 * small exchange (recursive doubling), where one socket each way cost 2 µs of the 5.6 of an
 * 8 B all-reduce at world 2 (each side's data no longer carries the ACK of the other's). */
static rr__conn *rr__lane_for(rr__comm *cm, int peer, int msg, int sending) {
  if (peer < 0 || peer >= cm->size || peer == cm->rank || cm->peers[peer].nlanes == 0) return NULL;
  rr__peer *p = &cm->peers[peer];
  unsigned n = (unsigned)p->nlanes;
  if (n < 2 || !p->lane[0]->tp->one_way_lanes || msg == 0) return p->lane[(unsigned)msg % n];
  int up = sending ? cm->rank < peer : peer < cm->rank; /* lower rank to higher */
  return p->lane[2 * ((unsigned)msg % (n / 2)) + (up ? 0u : 1u)];
}

/* List a lane among those with queued requests (once). */
static void rr__activate(rr__comm *cm, rr__conn *c) {
  uint8_t *listed = &cm->peers[c->peer].active[c->lane];
  if (c->pending > 0 && !*listed) {
    *listed = 1;
    cm->active[cm->nactive++] = c;
  }
}

int rr__comm_isend(rr__comm *cm, int peer, int msg, rr__req *r) {
  rr__conn *c = rr__lane_for(cm, peer, msg, 1);
  if (!c) return rr__set_error(RR_EINVAL, "internal: no connection to group rank %d", peer);
  RR__CHECK(c->tp->isend(c, r));
  rr__activate(cm, c);
  return RR_OK;
}

void rr__comm_new_call(rr__comm *cm, int coll, uint64_t seq) {
  for (int i = 0; i < cm->size; i++) cm->peers[i].rx_used = 0;
  cm->cur_coll = coll;
  cm->cur_seq = seq;
}

void rr__comm_call_done(rr__comm *cm, uint64_t seq) {
  atomic_store(&cm->unfinished, seq + 1);
}

int rr__comm_irecv(rr__comm *cm, int peer, int msg, rr__req *r) {
  rr__conn *c = rr__lane_for(cm, peer, msg, 0);
  if (!c) return rr__set_error(RR_EINVAL, "internal: no connection to group rank %d", peer);
  cm->peers[peer].rx_used = 1;
  RR__CHECK(c->tp->irecv(c, r));
  rr__activate(cm, c);
  return RR_OK;
}

/* What a peer's goodbye says it did, for messages: "rank 3 <this>". */
static const char *rr__bye_text(const rr__peer *p) {
  switch (p->bye_why) {
    case RR__BYE_DESTROYED:
      return "destroyed its process group";
    case RR__BYE_EXITING:
      return "exited without destroying its process group first (the group was freed as the "
             "process ended)";
    default:
      return "left its process group (it destroyed the group, or its process exited)";
  }
}

/* Read what is waiting on a peer's control socket; a complete ABORT becomes this group's
 * error. An unannounced close sets *lost (the caller decides, after reading every socket,
 * whether some peer's ABORT already explains it). */
static int rr__read_ctl_msgs(rr__comm *cm, int i, int *lost) {
  rr__peer *p = &cm->peers[i];
  for (;;) {
    rr__ctl c = {0};
    size_t need = RR__CTL_FIXED;
    if (p->ctl_have >= RR__CTL_FIXED) {
      if (rr__ctl_decode(p->ctl_buf, &c) != RR_OK) goto garbage;
      need += c.len;
    }
    if (p->ctl_have == need && need > 0 && p->ctl_have >= RR__CTL_FIXED) {
      /* A peer already in rr_pg_shrink: its message stays for the shrink on this rank to
       * read (the group is revoked, so the call reading here is about to fail). */
      if (RR__CTL_IS_SHRINK(c.type)) return RR_OK;
      p->ctl_have = 0;
      if (c.type == RR__CTL_BYE) {
        rr__ctl_take_bye(p, &c);
        continue;
      }
      char text[RR__CTL_TEXT_MAX + 1];
      memcpy(text, p->ctl_buf + RR__CTL_FIXED, c.len);
      text[c.len] = '\0';
      for (char *t = text; *t; t++)
        if (!isprint((unsigned char)*t)) *t = '?';
      char reason[RR__ERRMSG_MAX];
      int revoked = c.status == RR_EREVOKED;
      if (revoked) /* the text names the rank that revoked; this is who passed it on */
        snprintf(reason, sizeof reason, "%.900s (heard from rank %d)", text, p->info.global_rank);
      else
        snprintf(reason, sizeof reason, "rank %d aborted the group: %.900s", p->info.global_rank,
                 text);
      /* A revoke is passed on to every peer (ULFM's reliable revoke): a peer the revoking
       * rank could not reach, or reached only partly before dying, still hears it. Like an
       * ABORT it concerns the collectives from the first one its origin did not finish: a
       * rank still in an earlier one completes it if the data comes. */
      rr__abort_set(cm, c.status ? c.status : RR_EABORTED, reason, revoked ? 2 : 0, c.seq);
      if (!rr__abort_now(cm)) continue; /* for a later collective: this one goes on */
      return rr__comm_check(cm);
    }
    ssize_t r = recv(p->ctrl_fd, p->ctl_buf + p->ctl_have, need - p->ctl_have, MSG_DONTWAIT);
    if (r > 0) {
      p->ctl_have += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return RR_OK;
    /* Closed (or reset). After a goodbye that is an orderly leave; otherwise the process is
     * gone, and every call that needs it would wait forever. */
    rr__ctl_close(cm, p);
    if (!p->said_bye) *lost = 1;
    return RR_OK;
  }
garbage : {
  char reason[RR__ERRMSG_MAX];
  snprintf(reason, sizeof reason, "garbage on the control connection from rank %d",
           p->info.global_rank);
  rr__ctl_close(cm, p);
  rr__comm_abort(cm, RR_EPROTO, reason, 1);
  return rr__comm_check(cm);
}
}

/* A peer vanished without a word: abort, and tell everyone why we stop, so that when we
 * exit in turn nobody blames us. Its process may have exited while its control socket is
 * still open (its pidfd said so first): some other process holds the socket then, most
 * likely one it forked without exec, and the message says so. */
static int rr__lost(rr__comm *cm, int i) {
  const rr__peer *p = &cm->peers[i];
  char reason[RR__ERRMSG_MAX];
  if (p->exited && p->ctrl_fd >= 0)
    snprintf(reason, sizeof reason,
             "lost rank %d: its process (pid %d) exited, without a goodbye; its connections "
             "are still held open by another process (one it forked without exec?)",
             p->info.global_rank, p->info.pid);
  else
    snprintf(reason, sizeof reason,
             "lost rank %d: its connection closed without a goodbye (the process exited, "
             "crashed or was killed)",
             p->info.global_rank);
  rr__comm_abort(cm, RR_EPEER, reason, 1);
  return rr__comm_check(cm);
}

int rr__comm_shares_process(const rr__comm *cm) {
  for (int i = 0; i < cm->size; i++)
    for (int j = i + 1; j < cm->size; j++) {
      const rr__peer_info *a = &cm->peers[i].info, *b = &cm->peers[j].info;
      if (a->pid != b->pid || strcmp(a->hostid, b->hostid) != 0) continue;
      if (!strcmp(a->pidns, b->pidns) || !a->pidns[0] || !b->pidns[0] || !strcmp(a->pidns, "?") ||
          !strcmp(b->pidns, "?"))
        return 1;
    }
  return 0;
}

/* Ranks on this host are watched by their process too, not only by their sockets: a process
 * that forked a child without exec (and that child bypassed the C library's fork, so the
 * fork hook above never ran in it) leaves its sockets open when it dies, and its peers would
 * wait out RR_TIMEOUT. A pidfd (Linux 5.3) becomes readable when the process exits.
 *
 * Only where the recorded pid is surely the peer's in this process's pid namespace: over
 * shared memory, whose setup checked with SO_PEERCRED that the process on the other end is
 * that pid (the kernel reports it in the reader's namespace); and over any other transport
 * when its record (MAC'd with the job token, when there is one) names our pid namespace on
 * this boot. A peer in another pid namespace (a container sharing the network), where the
 * same number names some unrelated process here, or one whose record does not say (an older
 * build), is watched by its sockets alone. The pidfd is opened the first time the comm
 * waits, after the setup: had the peer
 * died in between and its pid been reused, the watch would follow a stranger, but the peer
 * is dead then and its sockets (or the stranger's exit) still report it.
 *
 * Where pidfd_open is missing (ENOSYS: Linux before 5.3) or refused (a seccomp filter), or
 * the process is already gone (ESRCH: its sockets will say so), nothing is watched. */
void rr__comm_watch_pids(rr__comm *cm) {
  if (cm->pids_watched || cm->forked) return;
  cm->pids_watched = 1;
#ifdef SYS_pidfd_open
  const int me = (int)getpid();
  for (int i = 0; i < cm->size; i++) {
    rr__peer *p = &cm->peers[i];
    const char *mine = cm->peers[cm->rank].info.pidns;
    int same_ns = mine[0] && strcmp(mine, "?") != 0 && !strcmp(p->info.pidns, mine);
    if (i == cm->rank || (p->tp != &rr__shm_transport && !same_ns) || p->info.pid <= 0 ||
        p->info.pid == me)
      continue;
    /* close-on-exec always (pidfd_open(2)) */
    int fd = (int)syscall(SYS_pidfd_open, (pid_t)p->info.pid, 0u);
    if (fd < 0) {
      RR__LOG_INFO(RR__SUB_NET, "not watching rank %d's process (pid %d): pidfd_open: %s",
                   p->info.global_rank, p->info.pid, strerror(errno));
      continue;
    }
    pthread_mutex_lock(&cm->abort_mu); /* the fork hook reads it under the lock */
    p->pid_fd = fd;
    pthread_mutex_unlock(&cm->abort_mu);
  }
#endif
}

/* An exited peer's stream sockets may still be delivering: its process closed them, but the
 * kernel sends what they held, then the close, at the link's pace (a slow or lossy link takes
 * seconds; the netns fault test's 4 Mbit/s link with 5% loss did, and a rank that finished
 * and exited was reported lost by peers still receiving its last step). So a peer over a
 * stream transport counts as lost, with its control socket still open, only once nothing has
 * come from it for RR__EXIT_GRACE_MS since it exited: its sockets held by a process it forked
 * (nothing comes, no close), not a send queue draining. Longer than TCP's first few
 * retransmission timeouts (200 ms doubling), short beside RR_TIMEOUT's default. */
#define RR__EXIT_GRACE_MS 2000

void rr__peer_exited(rr__comm *cm, rr__peer *p) {
  pthread_mutex_lock(&cm->abort_mu);
  if (p->pid_fd >= 0) close(p->pid_fd);
  p->pid_fd = -1;
  pthread_mutex_unlock(&cm->abort_mu);
  p->exited = 1;
  /* Shared memory: a process's descriptors are closed, and its stores to the mapping done,
   * before it counts as exited, so whatever it sent is here by now. */
  if (p->tp != &rr__shm_transport) p->exit_ms = rr__now_ms_coarse();
}

int64_t rr__exit_grace_left(const rr__comm *cm, const rr__peer *p) {
  (void)cm;
  if (!p->exited || !p->exit_ms || p->ctrl_fd < 0 || p->said_bye) return -1;
  int64_t last = p->exit_ms;
  for (int l = 0; l < p->nlanes; l++) last = RR__MAX(last, p->lane[l]->last_rx_ms);
  int64_t left = last + RR__EXIT_GRACE_MS - rr__now_ms_coarse();
  return left > 0 ? left : 0;
}

/* Peer i's pidfd is readable: its process exited. Read its control socket first (a goodbye
 * makes the exit an orderly leave, an ABORT is the cause). RR_OK with *lost set when it left
 * without a word (over a stream transport, only once its grace is over: above); the ABORT's
 * status when it sent one. Not when an abort already concerns the running call: its cause is
 * known, and what the peer sent after it (a revoke, say) is for a later call to hear, as it
 * would be without the pidfd. */
static int rr__pid_exited(rr__comm *cm, int i, int *lost) {
  rr__peer *p = &cm->peers[i];
  rr__peer_exited(cm, p);
  int closed = 0;
  if (p->ctrl_fd >= 0 && !rr__abort_now(cm)) RR__CHECK(rr__read_ctl_msgs(cm, i, &closed));
  *lost = !p->said_bye && (closed || rr__exit_grace_left(cm, p) <= 0);
  return RR_OK;
}

/* The first exited peer whose grace ran out (-1: none); *wait_ms lowered to the nearest end
 * of a grace still running. */
static int rr__exit_overdue(rr__comm *cm, int64_t *wait_ms) {
  int lost = -1;
  for (int i = 0; i < cm->size; i++) {
    int64_t left = rr__exit_grace_left(cm, &cm->peers[i]);
    if (left < 0) continue;
    if (left == 0 && lost < 0) lost = i;
    if (left > 0 && left < *wait_ms) *wait_ms = left;
  }
  return lost;
}

/* A link failed (its error set). Any peer may have said why the group is going down (an
 * ABORT queued on its control socket): that is the cause, not the closed or reset link it
 * led to. Reads the control sockets; 1: such an abort is in force (rr__comm_check reports
 * it); 0: none, and the link's error text is as it was. */
static int rr__abort_is_cause(rr__comm *cm) {
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error());
  rr__comm_poll_ctl(cm);
  if (rr__abort_now(cm)) return 1;
  rr__copy_error(saved);
  return 0;
}

/* A data lane failed. The peer's control socket says more: an ABORT it sent before going
 * (the real cause), a goodbye (it left on purpose), or nothing (it died). */
static int rr__lane_error(rr__comm *cm, rr__conn *c, int st) {
  rr__peer *p = &cm->peers[c->peer];
  if (st == RR_EPEER && rr__abort_is_cause(cm)) return rr__comm_check(cm);
  if (st == RR_EPEER && p->said_bye)
    rr__prefix_error(st, "rank %d %s while this call still needed it", p->info.global_rank,
                     rr__bye_text(p));
  char reason[RR__ERRMSG_MAX];
  snprintf(reason, sizeof reason, "%s", rr__error());
  /* Peers may be blocked on us; tell them why we stop. */
  rr__comm_abort(cm, st, reason, 1);
  return st;
}

int rr__comm_progress(rr__comm *cm, size_t *moved) {
  *moved = 0;
  if (atomic_load(&cm->halt)) return rr__comm_check(cm);
  for (int i = 0; i < cm->nactive;) {
    rr__conn *c = cm->active[i];
    int st = c->tp->progress(c, moved);
    if (st != RR_OK) return rr__lane_error(cm, c, st);
    if (c->pending == 0) {
      cm->peers[c->peer].active[c->lane] = 0;
      cm->active[i] = cm->active[--cm->nactive];
    } else {
      i++;
    }
  }
  return RR_OK;
}

/* Should a wait poll this peer's control socket? Not while a shrink message of the peer's
 * waits in ctl_buf for this rank's rr_pg_shrink (rr__read_ctl_msgs leaves it there): what
 * follows it on the socket is also for the shrink, so polling would report it again and
 * again without anything being read, a busy loop for the rest of the call. */
static int rr__ctl_watched(const rr__peer *p) {
  rr__ctl c;
  if (p->ctrl_fd < 0) return 0;
  if (p->ctl_have < RR__CTL_FIXED || rr__ctl_decode(p->ctl_buf, &c) != RR_OK) return 1;
  return !(RR__CTL_IS_SHRINK(c.type) && p->ctl_have == RR__CTL_FIXED + c.len);
}

/* Has the peer left (a goodbye), lost its control socket or exited? It sends nothing more. */
static int rr__peer_gone(const rr__peer *p) {
  return p->said_bye || p->ctrl_fd < 0 || p->exited;
}

/* Should a waiting call watch the lane of this peer's message 0 (where its headers come) for
 * a header nobody asked for? */
static rr__conn *rr__sniffable(rr__comm *cm, int i, const rr__sniff *sn) {
  rr__peer *p = &cm->peers[i];
  /* Only peers this call has not read from yet: their next bytes must be a header. */
  if (!sn || i == cm->rank || p->nlanes == 0 || p->sniffed == sn->seq + 1 || p->rx_used)
    return NULL;
  rr__conn *l0 = rr__lane_for(cm, i, 0, 0);
  return l0->tp->peek ? l0 : NULL;
}

/* Fill pfd with the pidfds of the peers watched by their process (rr__watch_pids); returns
 * how many. */
static int rr__pidfds(rr__comm *cm, struct pollfd *pfd) {
  int n = 0;
  for (int i = 0; i < cm->size; i++) {
    if (cm->peers[i].pid_fd < 0) continue;
    pfd[n].fd = cm->peers[i].pid_fd;
    pfd[n].events = POLLIN;
    pfd[n].revents = 0;
    n++;
  }
  return n;
}

int rr__comm_wait(rr__comm *cm, int64_t deadline_ms, const rr__sniff *sn) {
  /* A forked child's copy has nothing to wait on (its descriptors are closed). */
  if (cm->forked) return rr__comm_check(cm);
  rr__comm_watch_pids(cm);
  int n = 0;
  for (int i = 0; i < cm->nactive; i++) n += cm->active[i]->tp->pollfd(cm->active[i], &cm->pfds[n]);
  int first_sniff = n;
  for (int i = 0; i < cm->size; i++) {
    rr__conn *l0 = rr__sniffable(cm, i, sn);
    if (l0) l0->tp->peekfd(l0, &cm->pfds[n++]);
  }
  int first_ctl = n;
  for (int i = 0; i < cm->size; i++) {
    if (!rr__ctl_watched(&cm->peers[i])) continue;
    cm->pfds[n].fd = cm->peers[i].ctrl_fd;
    cm->pfds[n].events = POLLIN;
    cm->pfds[n].revents = 0;
    n++;
  }
  int first_pid = n;
  n += rr__pidfds(cm, &cm->pfds[n]);
  cm->pfds[n].fd = cm->wake_fd;
  cm->pfds[n].events = POLLIN;
  cm->pfds[n].revents = 0;
  n++;
  int64_t left = rr__ms_left(deadline_ms), grace = left;
  int overdue = rr__exit_overdue(cm, &grace);
  int rc;
  do rc = poll(cm->pfds, (nfds_t)n, overdue >= 0 ? 0 : (int)RR__MIN(grace, 1 << 30));
  while (rc < 0 && errno == EINTR);
  if (rc < 0) return rr__set_error(RR_ESYS, "poll: %s", strerror(errno));
  /* Data that is here wins: a call whose last bytes arrived completes even if a peer has
   * since given up on a later call. The abort is seen when we would otherwise sleep. A lane
   * that only asked to be looked at again at once (POLLOUT alone: a shm lane whose own
   * device work nobody will wake it for) wins only while nothing else has something to say:
   * its device work may be queued behind a wait for a peer that died, which only the
   * control sockets, the pidfds or the deadline can end (rr__dev_release on the loss). */
  int again = 0;
  for (int i = 0; i < first_sniff; i++) {
    if (!cm->pfds[i].revents || atomic_load(&cm->halt)) continue;
    if (cm->pfds[i].revents & ~POLLOUT) return RR_OK;
    again = 1;
  }
  if (again && left > 0 && overdue < 0) {
    int news = 0;
    for (int k = first_sniff; k < n && !news; k++) news = cm->pfds[k].revents != 0;
    if (!news) return RR_OK;
  }
  if (rr__abort_now(cm)) return rr__comm_check(cm);
  if (rc == 0 && overdue < 0 && grace == left) return rr__set_error(RR_ETIMEDOUT, "timed out");
  if (cm->pfds[n - 1].revents && atomic_load(&cm->aborted)) {
    /* A peer's abort for a later collective woke us: drain the wake-up and wait on for
     * this one's data (a local abort, if one comes, writes it again). */
    uint64_t v;
    if (read(cm->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN)
      return rr__set_error(RR_ESYS, "eventfd read: %s", strerror(errno));
  }
  for (int k = first_sniff, i = 0; i < cm->size; i++) {
    rr__conn *l0 = rr__sniffable(cm, i, sn);
    if (!l0 || !cm->pfds[k++].revents) continue;
    uint8_t hdr[RR__SNIFF_BYTES];
    size_t got = 0;
    int pst = l0->tp->peek(l0, hdr, sizeof hdr, &got);
    if (pst != RR_OK) return rr__abort_is_cause(cm) ? rr__comm_check(cm) : pst;
    if (got == sizeof hdr) {
      cm->peers[i].sniffed = sn->seq + 1;
      RR__CHECK(sn->check(sn->ctx, i, hdr));
    } else if (got == 0 && (!sn->watch_live || rr__peer_gone(&cm->peers[i]))) {
      cm->peers[i].sniffed = sn->seq + 1; /* closed: the control socket will say why */
    }
  }
  /* Read every control socket before judging a silent close: when several peers go at
   * once, the one that said why (an ABORT) names the cause, not the first to close. */
  /* The same peers as polled: only reading a peer's socket changes whether it is watched. */
  int lost = -1;
  for (int k = first_ctl, i = 0; i < cm->size; i++) {
    if (!rr__ctl_watched(&cm->peers[i])) continue;
    int gone = 0;
    if (cm->pfds[k++].revents) RR__CHECK(rr__read_ctl_msgs(cm, i, &gone));
    if (gone && lost < 0) lost = i;
  }
  /* Then the processes that exited (reading a control socket leaves the pidfds as polled). */
  for (int k = first_pid, i = 0; i < cm->size; i++) {
    if (cm->peers[i].pid_fd < 0) continue;
    int gone = 0;
    if (cm->pfds[k++].revents) RR__CHECK(rr__pid_exited(cm, i, &gone));
    if (gone && lost < 0) lost = i;
  }
  /* And those that exited a while ago, their sockets still open and silent. */
  int64_t unused = 0;
  if (lost < 0) lost = rr__exit_overdue(cm, &unused);
  /* A peer that vanished fails this call, unless an abort that concerns it explains why
   * (a peer's abort for a later call does not: this call may be waiting for the dead). */
  if (lost >= 0 && !rr__abort_now(cm)) return rr__lost(cm, lost);
  if (rr__abort_now(cm)) return rr__comm_check(cm);
  /* Woken only to look again, past the deadline: nothing else would end the wait. */
  if (again && overdue < 0 && left <= 0) return rr__set_error(RR_ETIMEDOUT, "timed out");
  return RR_OK;
}

/* ---- how a blocking call waits: the spin policy ---- */

/* Poll the lanes for a while before sleeping in poll(). Sleeping costs two context switches
 * and a wake-up system call, 10-20 us per message on this kind of VM, where a peer on a core
 * of its own answers a small message in 1-3 us. So while this host's ranks fit its cores a
 * blocking call polls for 50 us; when they outnumber the cores it polls for 100 us but yields
 * the core between polls (the peer it waits for may need that core). Figures:
 * docs/performance.md. RR_SPIN_US sets the time, RR_SPIN_YIELD the yield. */
void rr__comm_spin_policy(rr__comm *cm, int local) {
  /* A rank bound to a share of the host sees only its share here, so the launcher that
   * bound it says how many cores the host's ranks were spread over (rrun: RR_HOST_CPUS). */
  cpu_set_t set;
  int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  int64_t want = rr__params_get()->spin_us, yield = rr__params_get()->spin_yield;
  if (rr__params_get()->host_cpus > 0) cpus = (int)rr__params_get()->host_cpus;
  cm->spin.yield = yield >= 0 ? (int)yield : local > cpus;
  cm->spin.us = want >= 0 ? (int)want : cm->spin.yield ? 100 : 50;
  RR__LOG_INFO(RR__SUB_INIT,
               "%d rank(s) on this host, %d core(s) usable: blocking calls poll %d us "
               "before sleeping%s",
               local, cpus, cm->spin.us, cm->spin.yield ? ", yielding the core between polls" : "");
}

void rr__comm_spin_inherit(rr__comm *cm, const rr__comm *from) {
  cm->spin.us = from->spin.us;
  cm->spin.yield = from->spin.yield;
}

/* Adaptive spinning. A spin pays when the data comes within a few microseconds: sleeping
 * and being woken costs 10-20 us. A spin that finds nothing, or finds data only after
 * RR__SPIN_FAST_US (a slow link trickling packets in, a peer busy elsewhere, more ranks than
 * the cores we were told about), is a miss unless we yield the core meanwhile; after
 * RR__SPIN_MISSES misses in a row the next `backoff` waits sleep at once, and the backoff
 * doubles (up to RR__SPIN_SKIP_MAX) until a spin is a fast hit again. */
#define RR__SPIN_FAST_US 20
#define RR__SPIN_MISSES 4
#define RR__SPIN_SKIP_MIN 64
#define RR__SPIN_SKIP_MAX 4096

/* Poll the lanes for up to spin.us; RR_OK with *hit set if bytes moved. adapt: count the
 * spin's outcome in the back-off (not for a device call's waits). */
static int rr__comm_spin(rr__comm *cm, int adapt, int *hit) {
  /* The clock is first read at the 16th poll: a small call's data is usually there before
   * (an 8 B all_reduce at world 2 over shared memory takes about 0.3 us in all, and the
   * precise clock's reads were 23% of a rank's samples in one: docs/performance.md). The
   * spin's bounds then count from that poll, a few hundred ns late. */
  int64_t start = 0, until = 0;
  int slow = 0;
  for (unsigned i = 1;; i++) {
    size_t moved = 0;
    RR__CHECK(rr__comm_progress(cm, &moved));
    if (moved) break;
    /* Ranks outnumber cores: the peer we wait for may need this one. */
    if (cm->spin.yield) sched_yield();
    /* The clock is read every 16 polls: on a VM a read costs about as much as a poll of a
     * shared-memory lane. */
    if (i % 16 == 0) {
      int64_t now = rr__now_ns();
      if (i == 16) start = now, until = now + (int64_t)cm->spin.us * 1000;
      slow = !cm->spin.yield && now - start > RR__SPIN_FAST_US * 1000;
      if (now >= until) {
        *hit = 0;
        goto miss;
      }
    }
  }
  *hit = 1;
  if (!adapt) return RR_OK;
  if (!slow) {
    cm->spin.miss = 0;
    cm->spin.backoff = 0;
    return RR_OK;
  }
miss:
  if (!adapt) return RR_OK;
  if (++cm->spin.miss >= RR__SPIN_MISSES) {
    cm->spin.miss = 0;
    cm->spin.backoff = RR__MIN(RR__MAX(cm->spin.backoff * 2, RR__SPIN_SKIP_MIN), RR__SPIN_SKIP_MAX);
    cm->spin.skip = cm->spin.backoff;
  }
  return RR_OK;
}

int rr__comm_block(rr__comm *cm, int may_spin, int64_t deadline_ms, const rr__sniff *sn) {
  const int device = may_spin == RR__COMM_SPIN_DEVICE;
  if (cm->spin.us > 0 && may_spin) {
    if (cm->spin.skip > 0 && !device) {
      cm->spin.skip--;
    } else {
      int hit;
      RR__CHECK(rr__comm_spin(cm, !device, &hit));
      if (hit) return RR_OK;
    }
  }
  return rr__comm_wait(cm, deadline_ms, sn);
}

void rr__comm_poll_ctl(rr__comm *cm) {
  rr__comm_watch_pids(cm);
  int n = 0;
  for (int i = 0; i < cm->size; i++) {
    if (!rr__ctl_watched(&cm->peers[i])) continue;
    cm->pfds[n].fd = cm->peers[i].ctrl_fd;
    cm->pfds[n].events = POLLIN;
    cm->pfds[n].revents = 0;
    n++;
  }
  int first_pid = n;
  n += rr__pidfds(cm, &cm->pfds[n]);
  if (n == 0 || poll(cm->pfds, (nfds_t)n, 0) <= 0) return;
  int lost = -1;
  for (int k = 0, i = 0; i < cm->size; i++) {
    if (!rr__ctl_watched(&cm->peers[i])) continue;
    int gone = 0;
    if (cm->pfds[k++].revents) (void)rr__read_ctl_msgs(cm, i, &gone);
    if (gone && lost < 0) lost = i;
  }
  for (int k = first_pid, i = 0; i < cm->size; i++) {
    if (cm->peers[i].pid_fd < 0) continue;
    int gone = 0;
    if (cm->pfds[k++].revents && rr__pid_exited(cm, i, &gone) != RR_OK) gone = 0;
    if (gone && lost < 0) lost = i;
  }
  int64_t unused = 0;
  if (lost < 0) lost = rr__exit_overdue(cm, &unused);
  if (lost >= 0 && !rr__abort_now(cm)) (void)rr__lost(cm, lost);
}

int64_t rr__comm_idle_ms(const rr__comm *cm, int peer) {
  if (peer < 0 || peer >= cm->size) return 0;
  const rr__peer *p = &cm->peers[peer];
  int64_t last = 0;
  for (int l = 0; l < p->nlanes; l++) last = RR__MAX(last, p->lane[l]->last_rx_ms);
  return last ? rr__now_ms_coarse() - last : 0;
}

size_t rr__comm_device_msg_max(const rr__comm *cm) {
  size_t max = SIZE_MAX;
  for (int i = 0; i < cm->size; i++)
    if (i != cm->rank) max = RR__MIN(max, cm->peers[i].tp ? cm->peers[i].tp->device_msg_max : 0);
  return max;
}
