/* Bootstrap: from a rendezvous store to a connected group.
 *
 * 1. Listen on the chosen interface (RR_SOCKET_IFNAME) and publish who we are under
 *    rr/<group>/peer/<rank>: address, host identity, pid, sockets wanted, the setup's nonce.
 * 2. Wait for every member's record; on timeout, name the ranks that never arrived. Under
 *    rrun, a member that died before it got here is named at once instead (its launcher's
 *    notice, rendezvous/notice.h), unless rrun started a replacement in its place.
 * 3. Tell the comm how many ranks share this host (its spin policy, transport/comm.c).
 * 4. Make the lanes from the records (rendezvous/lanes.c, where every group's are made):
 *    each pair's transport, sockets, greetings proved with the job token over the records'
 *    nonces, and the hand-over to the transport.
 */
#include "rendezvous/bootstrap.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "rendezvous/notice.h"

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

/* A record is its fields and, with a job token, a MAC over them bound to the group and the
 * rank: the store is shared with whoever can reach it (torch's TCPStore listens on every
 * interface and asks nobody), so an address, pid or host id read from it is believed only
 * when it was written by a holder of the token. */
static int rr__publish(const rr__boot *b, const rr__peer_info *me) {
  char key[96], val[512];
  snprintf(key, sizeof key, "rr/%s/peer/%d", b->group_id, b->rank);
  int len = snprintf(val, sizeof val,
                     "global=%d pid=%d nsocks=%d mode=%s nonce=%016" PRIx64
                     " ib=%d addr=%s host=%s"
                     " pidns=%s",
                     me->global_rank, me->pid, me->nsocks, me->mode, me->nonce, me->ib, me->addr,
                     me->hostid, me->pidns);
  uint64_t mac = rr__proof(b->token_key, "rr-record-v1/%s/%d/%s", b->group_id, b->rank, val);
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
  if (b->token_key &&
      mac != rr__proof(b->token_key, "rr-record-v1/%s/%d/%s", b->group_id, rank, buf))
    return rr__set_error(RR_EPROTO,
                         "the record of rank %d in the store does not carry this job's token "
                         "for group %s (written or changed by someone without RR_JOB_TOKEN, or "
                         "another group's record put in its place: can others reach the "
                         "store?); not connecting to what it names",
                         b->global_ranks[rank], b->group_id);
  int got =
      sscanf(buf,
             "global=%d pid=%d nsocks=%d mode=%7s nonce=%16" SCNx64
             " ib=%d addr=%63s "
             "host=%127s",
             &p->global_rank, &p->pid, &p->nsocks, p->mode, &p->nonce, &p->ib, p->addr, p->hostid);
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
    if (!keys[i])
      st = rr__set_error(RR_ENOMEM, "out of memory");
    else
      snprintf(keys[i], 96, "rr/%s/peer/%d", b->group_id, i);
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
        if (dead == RR_OK) dead = rr__member_dead(&watch, i, "before joining the rendezvous", 0);
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
  int lfd = -1, st, meshed = 0;
  int size = b->size;
  RR__CHECK(rr__comm_new(b->rank, size, b->global_ranks[b->rank], &cm));
  rr__peer_info *infos = rr__calloc((size_t)size, sizeof *infos);
  rr__member_watch watch = rr__boot_watch(b);
  /* The group's lanes, once everyone's record is in (rendezvous/lanes.c). */
  rr__lanes lanes = {.group_id = b->group_id,
                     .rank = b->rank,
                     .size = size,
                     .global_ranks = b->global_ranks,
                     .infos = infos,
                     .key = b->token_key,
                     .lfd = -1,
                     .deadline_ms = b->deadline_ms,
                     .watch = &watch};
  if (!infos) {
    st = RR_ENOMEM;
    goto done;
  }

  /* 1. Listen and publish. */
  rr__peer_info me = {
      .global_rank = b->global_ranks[b->rank], .pid = (int)getpid(), .nsocks = (int)prm->nsocks};
  rr__hostid(me.hostid, sizeof me.hostid);
  rr__pidns(me.pidns, sizeof me.pidns);
  snprintf(me.mode, sizeof me.mode, "%s", prm->transport);
  rr__transport_publish(&me);
  if (size == 1) {
    /* A group of one meets nobody: nothing to publish, read or connect. */
    infos[0] = me;
    cm->peers[0].info = me;
    rr__comm_spin_policy(cm, rr__local_ranks(infos, 0, 1));
    *out = cm;
    cm = NULL;
    st = RR_OK;
    goto done;
  }
  if (getrandom(&me.nonce, sizeof me.nonce, 0) != (ssize_t)sizeof me.nonce) {
    st = rr__set_error(RR_ESYS, "getrandom: %s", strerror(errno));
    goto done;
  }
  rr__addr local;
  char ifname[64] = "";
  RR__CHECK_GOTO(rr__if_select(prm->socket_ifname, b->hint, &local, ifname, sizeof ifname), st,
                 done);
  RR__CHECK_GOTO(rr__lanes_listen(&local, &lfd, me.addr), st, done);
  lanes.lfd = lfd;
  RR__LOG_INFO(RR__SUB_INIT, "group %s rank %d/%d listening on %s (%s), host %s", b->group_id,
               b->rank, size, me.addr, ifname, me.hostid);
  if (b->seat) RR__CHECK_GOTO(rr__take_seat(b), st, done);
  RR__CHECK_GOTO(rr__publish(b, &me), st, done);

  /* 2. Everyone's records. */
  infos[b->rank] = me;
  RR__CHECK_GOTO(rr__gather(b, infos), st, done);
  RR__CHECK_GOTO(rr__check_modes(b, infos), st, done);
  rr__comm_spin_policy(cm, rr__local_ranks(infos, b->rank, size));

  /* 3-4. The lanes: every pair's sockets, greetings and transport. */
  meshed = 1;
  st = rr__lanes_make(&lanes, cm);
  if (st == RR_OK) {
    *out = cm;
    cm = NULL;
  }
done:
  /* A failure before the lanes: the greetings already queued on the listener hear why (the
   * lanes answer those of their own failure themselves). */
  if (st != RR_OK && lfd >= 0 && infos && !meshed) rr__lanes_refuse(&lanes, st);
  if (lfd >= 0) close(lfd);
  free(infos);
  if (cm) {
    cm->no_bye = 1; /* no goodbyes from a group that never formed */
    rr__comm_free(cm);
  }
  return st;
}
