/* Bootstrap: from a rendezvous store to a connected group.
 *
 * 1. Listen on the chosen interface (RR_SOCKET_IFNAME) and publish who we are under
 *    rr/<group>/peer/<rank>: address, host identity, pid, sockets wanted.
 * 2. Wait for every member's record; on timeout, name the ranks that never arrived. Under
 *    rrun, a member that died before it got here is named at once instead (its launcher's
 *    notice, rendezvous/notice.h), unless rrun started a replacement in its place.
 * 3. For every pair pick the transport (first in priority order that can_connect) and
 *    open 1 control socket + what the transport asks for. The higher rank connects, the
 *    lower accepts: all connects complete against the listen backlog, so no rank waits on
 *    another's accept loop and the order cannot deadlock.
 * 4. Every socket starts with a greeting (group, ranks, socket index, transport) that the
 *    acceptor checks and answers; strangers and garbage are closed and logged.
 */
#include "rendezvous/bootstrap.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/log.h"
#include "common/param.h"
#include "common/siphash.h"
#include "common/status.h"
#include "common/util.h"
#include "rendezvous/notice.h"

#define RR__MAX_PENDING 64 /* half-open greetings kept at once; more are dropped */

/* Ranks on one host share a hostid: host name, boot id and network namespace (so that
 * namespaces used as test hosts count as different hosts), or RR_HOSTID. */
static void rr__hostid(char *out, size_t n) {
  const char *forced = rr__params_get()->hostid;
  if (forced[0]) {
    snprintf(out, n, "%s", forced);
  } else {
    char host[64] = "?", boot[64] = "?", ns[64] = "?";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
      if (!fgets(boot, sizeof boot, f)) snprintf(boot, sizeof boot, "?");
      fclose(f);
      boot[strcspn(boot, "\n")] = '\0';
    }
    ssize_t l = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
    ns[l > 0 ? l : 0] = '\0';
    snprintf(out, n, "%s/%s/%s", host, boot, ns);
  }
  for (char *p = out; *p; p++)
    if (*p == ' ') *p = '_';
}

/* This process's pid namespace, as rr__peer_info.pidns: the boot id (namespace inodes are
 * numbered per boot) and the namespace's link, e.g. "9a1e...:pid:[4026531836]"; "?" when
 * either cannot be read (then no peer's pid is trusted to name its process here). */
static void rr__pidns(char *out, size_t n) {
  char boot[64] = "", ns[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) boot[0] = '\0';
    fclose(f);
    boot[strcspn(boot, "\n")] = '\0';
  }
  ssize_t l = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  ns[l > 0 ? l : 0] = '\0';
  if (!boot[0] || !ns[0] || strchr(boot, ' ') || strchr(ns, ' '))
    snprintf(out, n, "?");
  else
    snprintf(out, n, "%s:%s", boot, ns);
}

/* A MAC keyed with the job token over a context string (what is proved, and in which
 * group, setup and socket), so that a proof is worth nothing anywhere else; 0 without a
 * token, never 0 with one. */
static uint64_t rr__mac(const rr__boot *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static uint64_t rr__mac(const rr__boot *b, const char *fmt, ...) {
  if (!b->token_key) return 0;
  char ctx[768];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  uint64_t h = rr__siphash(b->token_key, ctx, (size_t)RR__MIN(n, (int)sizeof ctx - 1));
  return h ? h : 1;
}

/* A record is its fields and, with a job token, a MAC over them bound to the group and the
 * rank: the store is shared with whoever can reach it (torch's TCPStore listens on every
 * interface and asks nobody), so an address, pid or host id read from it is believed only
 * when it was written by a holder of the token. */
static int rr__publish(const rr__boot *b, const rr__peer_info *me) {
  char key[96], val[512];
  snprintf(key, sizeof key, "rr/%s/peer/%d", b->group_id, b->rank);
  int len = snprintf(val, sizeof val,
                     "global=%d pid=%d nsocks=%d mode=%s nonce=%016" PRIx64 " ib=%d addr=%s host=%s"
                     " pidns=%s",
                     me->global_rank, me->pid, me->nsocks, me->mode, me->nonce, me->ib, me->addr,
                     me->hostid, me->pidns);
  uint64_t mac = rr__mac(b, "rr-record-v1/%s/%d/%s", b->group_id, b->rank, val);
  len += snprintf(val + len, sizeof val - (size_t)len, " mac=%016" PRIx64, mac);
  return rr_store_set(b->store, key, val, (size_t)len);
}

/* The world's setup, right before this rank publishes its record: its seat
 * (rendezvous/notice.h). Past this point rrun no longer lets a replacement take its place in
 * this rendezvous; before it, a sum other than 1 means that rrun already reported this
 * process dead (a launcher that watched another process than this one: a wrapper script it
 * started, say), or that a second process of the same rank and generation got here first. */
static int rr__take_seat(const rr__boot *b) {
  char key[48];
  int me = b->global_ranks[b->rank];
  snprintf(key, sizeof key, RR__NOTICE_SEAT_KEY, me, b->gen);
  int64_t sum = 0;
  RR__CHECK(rr_store_add(b->store, key, 1, &sum));
  if (sum == 1) return RR_OK;
  if (sum > RR__SEAT_DECLARED)
    return rr__set_error(RR_ESTATE,
                         "rrun has already reported the process of rank %d (generation %d) dead "
                         "before it joined the rendezvous (did rrun start a wrapper that started "
                         "this process?); not joining in its name",
                         me, b->gen);
  return rr__set_error(RR_EINVAL,
                       "rank %d (generation %d) reached the rendezvous in %lld processes (two "
                       "processes with the same RANK)",
                       me, b->gen, (long long)sum);
}

static int rr__parse_info(const rr__boot *b, int rank, const char *s, size_t len,
                          rr__peer_info *p) {
  char buf[512];
  if (len >= sizeof buf)
    return rr__set_error(RR_EPROTO, "the record of rank %d in the store is too long",
                         b->global_ranks[rank]);
  memcpy(buf, s, len);
  buf[len] = '\0';
  memset(p, 0, sizeof *p);
  char *m = strstr(buf, " mac=");
  uint64_t mac = 0;
  if (m) {
    *m = '\0';
    if (sscanf(m + 5, "%16" SCNx64, &mac) != 1) mac = 0;
  }
  if (b->token_key && mac != rr__mac(b, "rr-record-v1/%s/%d/%s", b->group_id, rank, buf))
    return rr__set_error(RR_EPROTO,
                         "the record of rank %d in the store does not carry this job's token "
                         "for group %s (written or changed by someone without RR_JOB_TOKEN, or "
                         "another group's record put in its place: can others reach the "
                         "store?); not connecting to what it names",
                         b->global_ranks[rank], b->group_id);
  int got = sscanf(buf,
                   "global=%d pid=%d nsocks=%d mode=%7s nonce=%16" SCNx64 " ib=%d addr=%63s "
                   "host=%127s",
                   &p->global_rank, &p->pid, &p->nsocks, p->mode, &p->nonce, &p->ib, p->addr,
                   p->hostid);
  /* The pid namespace came later: a record without it is an older build's (unknown). */
  const char *ns = strstr(buf, " pidns=");
  if (!ns || sscanf(ns, " pidns=%95s", p->pidns) != 1) snprintf(p->pidns, sizeof p->pidns, "?");
  if (got != 8 || p->nsocks < 1 || p->nsocks > RR__MAX_LANES || (p->ib != 0 && p->ib != 1) ||
      p->global_rank != b->global_ranks[rank])
    return rr__set_error(RR_EPROTO, "malformed record of rank %d in the store: '%s'",
                         b->global_ranks[rank], buf);
  return RR_OK;
}

/* Every rank picks each pair's transport from the published records by one rule; a rank
 * whose RR_TRANSPORT differs would pick another one, so say so before connecting. */
static int rr__check_modes(const rr__boot *b, const rr__peer_info *infos) {
  const rr__peer_info *me = &infos[b->rank];
  for (int p = 0; p < b->size; p++)
    if (strcmp(infos[p].mode, me->mode) != 0)
      return rr__set_error(RR_EMISMATCH,
                           "RR_TRANSPORT differs between the ranks: rank %d has '%s', this rank "
                           "(%d) '%s'",
                           infos[p].global_rank, infos[p].mode, me->global_rank, me->mode);
  /* RR_TRANSPORT=ib is a demand: a rank without a port fails the setup, naming it, rather
   * than quietly running over sockets. */
  if (!strcmp(me->mode, "ib"))
    for (int p = 0; p < b->size; p++)
      if (!infos[p].ib)
        return rr__set_error(RR_ENOTSUP,
                             "RR_TRANSPORT=ib but rank %d has no usable InfiniBand port%s%s "
                             "(RR_DEBUG=INFO on it says why)",
                             infos[p].global_rank, p == b->rank ? ": " : "",
                             p == b->rank ? rr__ib_not_used() : "");
  return RR_OK;
}

/* A wait for this group's members: it looks at rrun's notices where the store may hold them. */
static rr__member_watch rr__boot_watch(const rr__boot *b) {
  return (rr__member_watch){.store = b->notices ? b->store : NULL,
                            .token_key = b->token_key,
                            .group_id = b->group_id,
                            .global_ranks = b->global_ranks};
}

/* Wait for all records; on timeout say exactly who is missing. */
static int rr__gather(const rr__boot *b, rr__peer_info *infos) {
  char **keys = rr__calloc((size_t)b->size, sizeof *keys);
  if (!keys) return RR_ENOMEM;
  int st = RR_OK;
  for (int i = 0; i < b->size && st == RR_OK; i++) {
    keys[i] = malloc(96);
    if (!keys[i]) st = rr__set_error(RR_ENOMEM, "out of memory");
    else snprintf(keys[i], 96, "rr/%s/peer/%d", b->group_id, i);
  }
  /* Wait in slices and ask after each one who is still missing, while the store (on rank
   * 0, which gives up at the same moment we do) is surely still there to answer. */
  char missing[512] = "";
  int nmiss = b->size, checked = 0;
  rr__member_watch watch = rr__boot_watch(b);
  int64_t slice = b->notices ? RR__NOTICE_POLL_MS : 500;
  while (st == RR_OK) {
    int64_t left = rr__ms_left(b->deadline_ms);
    st = rr_store_wait(b->store, (const char *const *)keys, b->size,
                       RR__MAX(RR__MIN(left, slice), 1));
    if (st != RR_OK && st != RR_ETIMEDOUT && checked && nmiss > 0) {
      if (rr__ms_left(b->deadline_ms) < 2000)
        /* Rank 0, holding the store, gave up a moment before us: still say who was missing. */
        st = rr__prefix_error(RR_ETIMEDOUT,
                              "gave up waiting for rank%s %s to join the rendezvous (%d of %d "
                              "arrived; then the store closed)",
                              nmiss == 1 ? "" : "s", missing, b->size - nmiss, b->size);
      else
        /* Long before the deadline: the store itself failed, and that is the cause. */
        st = rr__prefix_error(st,
                              "the rendezvous failed while rank%s %s had not joined yet (%d of %d "
                              "arrived)",
                              nmiss == 1 ? "" : "s", missing, b->size - nmiss, b->size);
      break;
    }
    if (st != RR_ETIMEDOUT) break;
    size_t o = 0;
    int miss = 0, dead = RR_OK;
    for (int i = 0; i < b->size; i++) {
      int exists = 0;
      if (rr_store_check(b->store, (const char *const *)&keys[i], 1, &exists) != RR_OK) break;
      if (!exists) {
        if (o < sizeof missing - 16)
          o += (size_t)snprintf(missing + o, sizeof missing - o, "%s%d", miss ? ", " : "",
                                b->global_ranks[i]);
        miss++;
        /* A member that will never come: rrun saw it die (it cannot have published since,
         * dead), and said so in the store. */
        if (dead == RR_OK)
          dead = rr__member_dead(&watch, i, "before joining the rendezvous", 0);
      }
      if (i == b->size - 1) nmiss = miss, checked = 1;
    }
    if (dead != RR_OK) {
      st = dead;
      break;
    }
    if (rr__ms_left(b->deadline_ms) > 0) {
      st = RR_OK;
      continue;
    }
    st = rr__set_error(RR_ETIMEDOUT,
                       "timed out after %.1f s waiting for rank%s %s to join the rendezvous "
                       "(%d of %d arrived)",
                       (double)b->timeout_ms / 1000.0, nmiss == 1 ? "" : "s",
                       missing[0] ? missing : "?", b->size - nmiss, b->size);
  }
  for (int i = 0; i < b->size && st == RR_OK; i++) {
    if (i == b->rank) continue; /* our own is what we wrote, not what the store says now */
    void *v = NULL;
    size_t len = 0;
    st = rr_store_get(b->store, keys[i], &v, &len);
    if (st == RR_OK) st = rr__parse_info(b, i, v, len, &infos[i]);
    free(v);
  }
  for (int i = 0; i < b->size; i++) free(keys[i]);
  free(keys);
  return st;
}

/* Both sides must open the same number of sockets: take the larger wish. */
static int rr__nsockets(const rr__transport *tp, const rr__peer_info *me,
                        const rr__peer_info *peer) {
  int a = tp->setup_sockets(me, peer), b = tp->setup_sockets(peer, me);
  return 1 + (a > b ? a : b);
}


typedef struct rr__mesh {
  const rr__boot *b;
  int refused_token; /* greetings refused for a wrong job token (for the timeout message) */
  rr__peer_info *infos;
  const rr__transport **tp; /* [size] */
  int *nsock;               /* [size] sockets per pair, control included */
  int (*fds)[1 + RR__MAX_LANES];
  rr__hello (*sent)[1 + RR__MAX_LANES]; /* our greetings, to check the replies against */
} rr__mesh;

/* Both ends of every socket prove the job token, each over nonces the other chose:
 * the caller's proof covers the acceptor's setup nonce (from its authenticated record), its
 * own record's nonce and a nonce fresh for this socket; the acceptor's reply covers the same
 * and its verdict. A greeting or reply recorded from one connection is worth nothing on
 * another or in a later setup, and whoever answers at an address without the token cannot
 * pass for the rank (the reply proof is what catches a relay or an impostor there). */
static uint64_t rr__greeting_proof(const rr__mesh *m, const rr__hello *h) {
  return rr__mac(m->b, "rr-hello-v3/%s/%d/%d/%d/%d/%s/%016" PRIx64 "/%016" PRIx64 "/%016" PRIx64,
                 h->group, h->from, h->to, h->index, h->nsockets, h->transport,
                 m->infos[h->to].nonce, m->infos[h->from].nonce, h->nonce);
}
static uint64_t rr__reply_proof(const rr__mesh *m, const rr__hello *h, int32_t verdict) {
  return rr__mac(m->b, "rr-reply-v1/%s/%d/%d/%d/%d/%016" PRIx64 "/%016" PRIx64 "/%016" PRIx64,
                 h->group, h->from, h->to, h->index, (int)verdict, m->infos[h->to].nonce,
                 m->infos[h->from].nonce, h->nonce);
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
 * first, it said why on the pair's control socket (an ABORT, rr__tell_peers): that is the
 * cause, not the closed connection it led to. fd: the control socket, once its greeting is
 * done (-1: nothing to read). */
static int rr__peer_said_why(const rr__boot *b, int fd, int p, int st, int remote) {
  if (fd < 0 || !remote) return st;
  char theirs[RR__CTL_TEXT_MAX + 1];
  int their_st = RR_OK;
  int64_t soon = RR__MIN(b->deadline_ms, rr__now_ms() + 1000);
  if (rr__ctl_read_abort(fd, soon, &their_st, theirs, sizeof theirs) == RR_OK)
    return rr__set_error(their_st, "rank %d gave up setting up the group: %s",
                         b->global_ranks[p], theirs);
  return st; /* the error text is still ours */
}

/* This rank's setup failed after the records were in: tell every peer it has a control
 * socket with (greeting done) why it stops, so that whichever rank a launcher reports
 * first, its message carries the root cause (a rank out of descriptors, say) instead of
 * "connection reset by the peer" blaming the messenger. A peer reads it where a setup
 * message was due (rr__peer_said_why, rr__ctl_next_is_ctl). */
static void rr__tell_peers(const rr__boot *b, rr__mesh *m, rr__comm *cm, int st) {
  char why[RR__ERRMSG_MAX + 16];
  snprintf(why, sizeof why, "rank %d: %s", b->global_ranks[b->rank], rr__error());
  for (int q = 0; q < b->size; q++) {
    int fd = q == b->rank                       ? -1
             : cm && cm->peers[q].ctrl_fd >= 0 ? cm->peers[q].ctrl_fd
                                                : m->fds[q][0];
    if (fd < 0) continue;
    rr__ctl_send_abort(fd, b->global_ranks[b->rank], st, 0, why);
    /* Closing a socket with unread bytes resets it, and a reset can cost the peer the
     * ABORT still queued for it: read what waits, and send our FIN now. */
    char sink[512];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
    shutdown(fd, SHUT_WR);
  }
}

/* Connect to member p's published address. A member that published its record listens
 * from before that, so a refused connection means it is gone; rr__sock_connect retries it to
 * the deadline all the same (a general rule of connecting), so under rrun it is given the
 * deadline in slices, and between them rrun's notices say whether the member died. */
static int rr__connect_member(const rr__boot *b, int p, const rr__addr *to, int *fd,
                              rr__member_watch *watch) {
  int64_t start = rr__now_ms();
  for (int slices = 1;; slices++) {
    int64_t until = b->notices ? RR__MIN(b->deadline_ms, rr__now_ms() + RR__NOTICE_POLL_MS)
                               : b->deadline_ms;
    int st = rr__sock_connect(to, until, fd);
    if (st != RR_ETIMEDOUT || until >= b->deadline_ms) {
      if (st != RR_OK && slices > 1)
        rr__prefix_error(st, "%.1f s in all, the last try", (double)(rr__now_ms() - start) / 1e3);
      return st;
    }
    RR__CHECK(rr__member_dead(watch, p, "during the group's set-up, after joining the rendezvous",
                              1));
  }
}

/* Connect every socket to each lower rank and send its greeting. */
static int rr__connect_lower(rr__mesh *m) {
  const rr__boot *b = m->b;
  rr__member_watch watch = rr__boot_watch(b);
  for (int p = 0; p < b->rank; p++) {
    rr__addr to;
    RR__CHECK(rr__addr_parse(m->infos[p].addr, &to));
    for (int k = 0; k < m->nsock[p]; k++) {
      int fd;
      int st = rr__connect_member(b, p, &to, &fd, &watch);
      if (st != RR_OK)
        return rr__prefix_error(st, "connecting to rank %d", b->global_ranks[p]);
      m->fds[p][k] = fd;
      rr__hello h = {.from = b->rank, .to = p, .index = k, .nsockets = m->nsock[p]};
      snprintf(h.group, sizeof h.group, "%s", b->group_id);
      snprintf(h.transport, sizeof h.transport, "%s", m->tp[p]->name);
      if (getrandom(&h.nonce, sizeof h.nonce, 0) != (ssize_t)sizeof h.nonce)
        return rr__set_error(RR_ESYS, "getrandom: %s", strerror(errno));
      h.token_hash = rr__greeting_proof(m, &h);
      m->sent[p][k] = h;
      uint8_t wire[RR__HELLO_BYTES];
      rr__hello_encode(&h, wire);
      st = rr__sock_send_all(fd, wire, sizeof wire, b->deadline_ms);
      if (st != RR_OK) return rr__prefix_error(st, "greeting rank %d", b->global_ranks[p]);
    }
  }
  return RR_OK;
}

typedef struct rr__pending {
  int fd;
  size_t have;
  uint8_t buf[RR__HELLO_BYTES];
} rr__pending;

/* Check a complete greeting; file the socket or explain why not. Returns RR_OK when the
 * socket was filed, RR_EPROTO for a stranger (caller closes it), or a fatal error. */
static int rr__file_greeting(rr__mesh *m, rr__pending *pd) {
  const rr__boot *b = m->b;
  rr__hello h;
  if (rr__hello_decode(pd->buf, &h) != RR_OK) return RR_EPROTO;
  if (strcmp(h.group, b->group_id) != 0 || h.to != b->rank || h.from <= b->rank ||
      h.from >= b->size) {
    rr__set_error(RR_EPROTO, "greeting for group '%s' rank %d from rank %d", h.group, h.to,
                  h.from);
    return RR_EPROTO;
  }
  if (h.token_hash != rr__greeting_proof(m, &h)) {
    m->refused_token++;
    rr__set_error(RR_EPROTO, "a connection claiming to be rank %d does not hold this job's "
                  "token (another job, or RR_JOB_TOKEN differs between the ranks)",
                  b->global_ranks[h.from]);
    return RR_EPROTO;
  }
  int p = h.from;
  uint8_t reply[RR__REPLY_BYTES];
  rr__put_u32(reply, RR__HELLO_OK);
  int verdict = RR_OK;
  if (strcmp(h.transport, m->tp[p]->name) != 0 || h.nsockets != m->nsock[p])
    verdict = rr__set_error(RR_EMISMATCH,
                            "rank %d chose transport %s with %d sockets for this pair, rank %d "
                            "chose %s with %d (RR_TRANSPORT or RR_NSOCKS differ?)",
                            b->global_ranks[p], h.transport, h.nsockets,
                            b->global_ranks[b->rank], m->tp[p]->name, m->nsock[p]);
  else if (m->fds[p][h.index] >= 0) {
    /* The socket is taken: this is a copy of a greeting already filed (a replay, or a
     * second process with the same rank, which the rank claims catch). Refuse it alone:
     * the connection that came first stays. */
    rr__set_error(RR_EPROTO, "a second connection claims to be socket %d of rank %d", h.index,
                  b->global_ranks[p]);
    return RR_EPROTO;
  }
  rr__put_u32(reply + 4, (uint32_t)verdict);
  rr__put_u64(reply + 8, rr__reply_proof(m, &h, verdict));
  int st = rr__sock_send_all(pd->fd, reply, sizeof reply, b->deadline_ms);
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
  const rr__boot *b = m->b;
  rr__hello h;
  if (rr__hello_decode(pd->buf, &h) != RR_OK || strcmp(h.group, b->group_id) != 0 ||
      h.to != b->rank || h.from <= b->rank || h.from >= b->size ||
      h.token_hash != rr__greeting_proof(m, &h))
    return;
  uint8_t reply[RR__REPLY_BYTES];
  rr__put_u32(reply, RR__HELLO_OK);
  rr__put_u32(reply + 4, (uint32_t)st);
  rr__put_u64(reply + 8, rr__reply_proof(m, &h, st));
  if (rr__sock_send_all(pd->fd, reply, sizeof reply, until) != RR_OK) return;
  rr__ctl_send_abort(pd->fd, b->global_ranks[b->rank], st, 0, why);
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
  snprintf(why, sizeof why, "rank %d: %s", m->b->global_ranks[m->b->rank], saved);
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
  const int64_t until = RR__MIN(m->b->deadline_ms, rr__now_ms() + 200);
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

/* Accept the sockets of every higher rank, tolerating strangers, slow writers and junk. */
static int rr__accept_higher(rr__mesh *m, int lfd) {
  const rr__boot *b = m->b;
  int expected = 0;
  for (int p = b->rank + 1; p < b->size; p++) expected += m->nsock[p];
  rr__pending pend[RR__MAX_PENDING];
  int npend = 0, st = RR_OK;
  rr__member_watch watch = rr__boot_watch(b);
  struct pollfd pfd[RR__MAX_PENDING + 1];
  while (expected > 0) {
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (int i = 0; i < npend; i++) pfd[n++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
    int64_t left = rr__ms_left(b->deadline_ms);
    /* Under rrun, look at its notices between slices: a higher rank that published its
     * record and then died would otherwise be waited for until the deadline. */
    int rc = poll(pfd, (nfds_t)n, (int)RR__MIN(left, b->notices ? RR__NOTICE_POLL_MS : 1 << 30));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) {
      st = rr__set_error(RR_ESYS, "poll: %s", strerror(errno));
      break;
    }
    if (rc == 0 && rr__ms_left(b->deadline_ms) > 0) {
      for (int p = b->rank + 1; p < b->size && st == RR_OK; p++)
        for (int k = 0; k < m->nsock[p]; k++)
          if (m->fds[p][k] < 0) {
            st = rr__member_dead(&watch, p,
                                 "during the group's set-up, after joining the rendezvous", 1);
            break;
          }
      if (st != RR_OK) break;
      continue;
    }
    if (rc == 0) {
      char who[256] = "";
      size_t o = 0;
      for (int p = b->rank + 1; p < b->size && o < sizeof who - 16; p++)
        for (int k = 0; k < m->nsock[p]; k++)
          if (m->fds[p][k] < 0) {
            o += (size_t)snprintf(who + o, sizeof who - o, "%s%d", o ? ", " : "",
                                  b->global_ranks[p]);
            break;
          }
      st = rr__set_error(RR_ETIMEDOUT, "timed out waiting for connections from rank(s) %s%s",
                         who,
                         m->refused_token ? " (connections with a wrong job token were refused: "
                                            "does RR_JOB_TOKEN differ between the ranks?)"
                                          : "");
      break;
    }
    for (int i = npend - 1; i >= 0; i--) {
      if (!pfd[1 + i].revents) continue;
      ssize_t r = recv(pend[i].fd, pend[i].buf + pend[i].have, RR__HELLO_BYTES - pend[i].have,
                       MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      int drop = r <= 0;
      if (r > 0) {
        pend[i].have += (size_t)r;
        if (pend[i].have == RR__HELLO_BYTES) {
          int v = rr__file_greeting(m, &pend[i]);
          if (v == RR_OK) {
            expected--;
          } else if (v == RR_EPROTO) {
            RR__LOG_WARN(RR__SUB_INIT, "closed a setup connection: %s", rr__error());
            drop = 1;
          } else {
            st = v;
            close(pend[i].fd);
            pend[i] = pend[--npend];
            goto out;
          }
          if (!drop) pend[i] = pend[--npend];
        }
      }
      if (drop) {
        close(pend[i].fd);
        pend[i] = pend[--npend];
      }
    }
    if (pfd[0].revents) {
      int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        if (npend == RR__MAX_PENDING) { /* a flood: the oldest stranger makes room */
          RR__LOG_WARN(RR__SUB_INIT, "too many half-open setup connections; dropping one");
          close(pend[0].fd);
          pend[0] = pend[--npend];
        }
        pend[npend++] = (rr__pending){.fd = fd};
      } else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        st = rr__set_error(RR_ESYS, "accept: %s", strerror(errno));
        break;
      }
    }
  }
out:
  /* Failing: the connections half way through their greeting still get the reason. */
  if (st != RR_OK) rr__answer_pending(m, pend, npend, -1, st);
  for (int i = 0; i < npend; i++) close(pend[i].fd);
  return st;
}

/* Read the acceptors' answers to our greetings. */
static int rr__read_replies(rr__mesh *m) {
  const rr__boot *b = m->b;
  for (int p = 0; p < b->rank; p++)
    for (int k = 0; k < m->nsock[p]; k++) {
      uint8_t reply[RR__REPLY_BYTES];
      int st = rr__sock_recv_all(m->fds[p][k], reply, sizeof reply, b->deadline_ms);
      if (st != RR_OK) {
        rr__prefix_error(st, "waiting for rank %d to accept our connection", b->global_ranks[p]);
        /* The control socket's greeting was answered: the rest of it is the peer's. */
        return rr__peer_said_why(b, k > 0 ? m->fds[p][0] : -1, p, st, 1);
      }
      int32_t verdict = (int32_t)rr__get_u32(reply + 4);
      if (rr__get_u32(reply) != RR__HELLO_OK)
        return rr__set_error(RR_EPROTO, "rank %d answered our greeting with garbage",
                             b->global_ranks[p]);
      if (rr__get_u64(reply + 8) != rr__reply_proof(m, &m->sent[p][k], verdict))
        return rr__set_error(RR_EPROTO,
                             "whoever answered at rank %d's address %s does not hold this job's "
                             "token: not rank %d (a relay or an impostor between the ranks?); "
                             "refusing the connection",
                             b->global_ranks[p], m->infos[p].addr, b->global_ranks[p]);
      if (verdict != RR_OK) {
        int vst = verdict < 0 && verdict > -100 ? verdict : RR_EPROTO;
        rr__set_error(vst, "rank %d refused our connection: %s (see its log)",
                      b->global_ranks[p], rr_strerror(verdict));
        /* A rank that failed its own setup sends the reason after its refusal. */
        return rr__peer_said_why(b, m->fds[p][k], p, vst, 1);
      }
    }
  return RR_OK;
}

/* How many ranks run on this host, for the comm's spin policy (transport/comm.c): those whose
 * record names this host, or as many as the launcher says (LOCAL_WORLD_SIZE), if more. */
static int rr__local_ranks(const rr__peer_info *infos, int rank, int size) {
  int local = 0;
  for (int p = 0; p < size; p++) local += !strcmp(infos[p].hostid, infos[rank].hostid);
  const char *lws = getenv("LOCAL_WORLD_SIZE");
  if (lws && atoi(lws) > local) local = atoi(lws);
  return local;
}

int rr__bootstrap(const rr__boot *b, rr__comm **out) {
  const rr__params *prm = rr__params_get();
  rr__comm *cm = NULL;
  rr__mesh m = {.b = b};
  int lfd = -1, st;
  int size = b->size;
  RR__CHECK(rr__comm_new(b->rank, size, b->global_ranks[b->rank], &cm));
  m.infos = rr__calloc((size_t)size, sizeof *m.infos);
  m.tp = rr__calloc((size_t)size, sizeof *m.tp);
  m.nsock = rr__calloc((size_t)size, sizeof *m.nsock);
  m.fds = rr__calloc((size_t)size, sizeof *m.fds);
  m.sent = rr__calloc((size_t)size, sizeof *m.sent);
  if (!m.infos || !m.tp || !m.nsock || !m.fds || !m.sent) {
    st = RR_ENOMEM;
    goto done;
  }
  for (int p = 0; p < size; p++)
    for (int k = 0; k <= RR__MAX_LANES; k++) m.fds[p][k] = -1;

  /* 1. Listen and publish. */
  rr__peer_info me = {.global_rank = b->global_ranks[b->rank], .pid = (int)getpid(),
                      .nsocks = (int)prm->nsocks};
  rr__hostid(me.hostid, sizeof me.hostid);
  rr__pidns(me.pidns, sizeof me.pidns);
  snprintf(me.mode, sizeof me.mode, "%s", prm->transport);
  rr__transport_publish(&me);
  if (size == 1) {
    /* A group of one meets nobody: nothing to publish, read or connect. */
    m.infos[0] = me;
    cm->peers[0].info = me;
    rr__comm_spin_policy(cm, rr__local_ranks(m.infos, 0, 1));
    *out = cm;
    cm = NULL;
    st = RR_OK;
    goto done;
  }
  if (getrandom(&me.nonce, sizeof me.nonce, 0) != (ssize_t)sizeof me.nonce) {
    st = rr__set_error(RR_ESYS, "getrandom: %s", strerror(errno));
    goto done;
  }
  rr__addr local, bound;
  char ifname[64] = "";
  RR__CHECK_GOTO(rr__if_select(prm->socket_ifname, b->hint, &local, ifname, sizeof ifname), st,
                done);
  RR__CHECK_GOTO(rr__sock_listen(&local, 4096, 0, &lfd, &bound), st, done);
  rr__addr_str(&bound, me.addr, sizeof me.addr);
  RR__LOG_INFO(RR__SUB_INIT, "group %s rank %d/%d listening on %s (%s), host %s", b->group_id,
          b->rank, size, me.addr, ifname, me.hostid);
  if (b->seat) RR__CHECK_GOTO(rr__take_seat(b), st, done);
  RR__CHECK_GOTO(rr__publish(b, &me), st, done);

  /* 2. Everyone's records. */
  m.infos[b->rank] = me;
  RR__CHECK_GOTO(rr__gather(b, m.infos), st, done);
  RR__CHECK_GOTO(rr__check_modes(b, m.infos), st, done);
  for (int p = 0; p < size; p++) {
    if (p == b->rank) continue;
    m.tp[p] = rr__transport_choose(&m.infos[b->rank], &m.infos[p]);
    m.nsock[p] = rr__nsockets(m.tp[p], &m.infos[b->rank], &m.infos[p]);
  }

  rr__comm_spin_policy(cm, rr__local_ranks(m.infos, b->rank, size));

  /* 3-4. The mesh. */
  RR__CHECK_GOTO(rr__connect_lower(&m), st, done);
  RR__CHECK_GOTO(rr__accept_higher(&m, lfd), st, done);
  RR__CHECK_GOTO(rr__read_replies(&m), st, done);
  close(lfd);
  lfd = -1;

  /* Hand sockets to the peers' transports; the control socket stays with the comm. */
  for (int p = 0; p < size; p++) {
    rr__peer *pe = &cm->peers[p];
    pe->info = m.infos[p];
    if (p == b->rank) continue;
    pe->tp = m.tp[p];
    pe->ctrl_fd = m.fds[p][0];
    m.fds[p][0] = -1;
    RR__CHECK_GOTO(rr__sock_nonblock(pe->ctrl_fd, 1), st, done);
    RR__CHECK_GOTO(rr__sock_tune(pe->ctrl_fd, 0), st, done);
    st = pe->tp->connect(&m.infos[b->rank], &m.infos[p], p, &m.fds[p][1], m.nsock[p] - 1,
                         pe->ctrl_fd, b->deadline_ms, pe->lane, RR__MAX_LANES, &pe->nlanes);
    for (int k = 1; k < m.nsock[p]; k++) m.fds[p][k] = -1; /* owned by the transport now */
    if (st != RR_OK) {
      rr__prefix_error(st, "setting up %s to rank %d", pe->tp->name, b->global_ranks[p]);
      st = rr__peer_said_why(b, pe->ctrl_fd, p, st, rr__failure_is_remote(st));
      goto done;
    }
    RR__LOG_INFO(RR__SUB_INIT, "group %s: rank %d <-> rank %d over %s, %d lane(s)", b->group_id,
            b->global_ranks[b->rank], b->global_ranks[p], pe->tp->name, pe->nlanes);
  }
  *out = cm;
  cm = NULL;
  st = RR_OK;
done:
  if (st != RR_OK && m.fds) rr__tell_peers(b, &m, cm, st);
  if (m.fds)
    for (int p = 0; p < size; p++)
      for (int k = 0; k <= RR__MAX_LANES; k++)
        if (m.fds[p][k] >= 0) close(m.fds[p][k]);
  if (lfd >= 0) {
    if (st != RR_OK && m.infos && m.sent) rr__answer_pending(&m, NULL, 0, lfd, st);
    close(lfd);
  }
  free(m.infos);
  free(m.tp);
  free(m.nsock);
  free(m.fds);
  free(m.sent);
  if (cm) {
    cm->no_bye = 1; /* no goodbyes from a group that never formed */
    rr__comm_free(cm);
  }
  return st;
}
