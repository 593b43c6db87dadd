/* rr_pg_grow and rr_pg_join (docs/elastic.md, "Growing back"): the members of a running
 * group take in newcomers at a step boundary, and the result is a new group of all of them.
 *
 * The rendezvous cannot be the job's store: its host (the first rank 0) may be dead. So the
 * group's current rank 0 serves a fresh TCP store at an address every process is told
 * (RR_GROW_ADDR, or the caller's string) for the length of the growth only, and everyone,
 * members and newcomers, sets the new group up through it as init does. With a job token
 * the store admits only processes that prove it, and the greetings between ranks carry it,
 * so nobody without the token joins. The members decide whether the growth happened over
 * their old group (every member agrees before any of them keeps the new group), so a
 * newcomer that never comes leaves them where they were: the old group untouched and
 * usable. The new group is a new world: global rank = rank, members first in their old
 * order, newcomers after in the order they reached the store. Its store is gone when the
 * call returns (the port is free for the next growth), so rr_new_group on it is
 * RR_ENOTSUP, as on a shrunk group. Connections between members are made afresh: the old
 * group stays alive until the caller destroys it, so its sockets cannot move over. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/siphash.h"
#include "common/status.h"
#include "common/util.h"
#include "group/pg.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/store.h"

/* Keys of the growth's store. INFO: "members size id", written by the members' rank 0
 * before anyone reads it; NEXT: the newcomers' ticket counter. */
#define RR__GROW_INFO "rr/grow/info"
#define RR__GROW_NEXT "rr/grow/next"

/* "host:port" (or "[v6]:port") from the caller or RR_GROW_ADDR. */
static int rr__grow_addr(const char *addr, char *host, size_t hn, int *port) {
  const char *a = addr && *addr ? addr : getenv("RR_GROW_ADDR");
  if (!a || !*a)
    return rr__set_error(RR_EENV,
                         "no address to grow at: pass one or set RR_GROW_ADDR "
                         "(host:port, reachable by the group's rank 0 and every newcomer)");
  const char *colon = strrchr(a, ':');
  char *end = NULL;
  long p = colon ? strtol(colon + 1, &end, 10) : -1;
  size_t len = colon ? (size_t)(colon - a) : 0;
  if (!colon || !end || *end || colon[1] == '\0' || p < 1 || p > 65535 || len == 0 || len >= hn)
    return rr__set_error(RR_EENV, "growth address '%.100s' is not host:port with a port 1-65535",
                         a);
  if (a[0] == '[' && len >= 2 && a[len - 1] == ']') {
    a++;
    len -= 2;
  }
  memcpy(host, a, len);
  host[len] = '\0';
  *port = (int)p;
  return RR_OK;
}

/* A world group of `size` with this rank, connected through `store` and with its worker
 * running. Global rank = rank. */
static int rr__grow_connect(rr_store *store, const char *id, int rank, int size, const char *host,
                            int64_t timeout_ms, int64_t wait_ms, int64_t deadline,
                            const rr_pg *like, rr_pg **out) {
  rr_pg *np = NULL;
  *out = NULL;
  RR__CHECK(rr__pg_new(size, &np));
  np->world = np;
  np->rank = rank;
  np->timeout_ms = timeout_ms;
  snprintf(np->id, sizeof np->id, "%s", id);
  for (int i = 0; i < size; i++) np->global_ranks[i] = i;
  const char *token = rr__params_get()->job_token;
  if (token[0]) {
    rr__token_key(token, np->token_key);
    np->have_token = 1;
  }
  if (rr__addr_resolve(host, 0, &np->hint) == RR_OK) np->have_hint = 1;
  if (like) {
    np->local_rank = like->local_rank;
    np->local_size = like->local_size;
    np->device = like->device;
  }
  rr__boot b = {.store = store,
                .group_id = np->id,
                .rank = rank,
                .size = size,
                .global_ranks = np->global_ranks,
                .hint = np->have_hint ? &np->hint : NULL,
                .deadline_ms = deadline,
                .timeout_ms = wait_ms,
                .token_key = np->have_token ? np->token_key : NULL};
  int st = rr__bootstrap(&b, &np->comm);
  if (st == RR_OK) st = rr__pg_run_worker(np);
  if (st != RR_OK) {
    char why[RR__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", rr__error());
    if (np->comm) rr__comm_abort(np->comm, st, why, 1); /* peers still connecting hear why */
    rr__pg_free(np);
    rr__copy_error(why);
    return st;
  }
  *out = np;
  return RR_OK;
}

/* The last step on every rank of the new group: an all_reduce of ones that must come to
 * the size. Members reach it only after all of them agreed to keep the group; a member
 * that gave up aborts the group instead, so the newcomers' call fails. It also means
 * nobody reads the store any more once it returns. */
static int rr__grow_commit(rr_pg *np) {
  int32_t one = 1, sum = 0;
  RR__CHECK(rr_all_reduce(np, &one, &sum, 1, RR_INT32, RR_SUM));
  if (sum != np->size)
    return rr__set_error(RR_EPROTO, "the commit of the growth counted %d of %d ranks", (int)sum,
                         np->size);
  return RR_OK;
}

int rr_pg_grow(rr_pg *pg, const char *addr, int nnew, int64_t wait_ms, int flags, rr_pg **newpg) {
  if (newpg) *newpg = NULL;
  if (!pg || !newpg || nnew < 1 || wait_ms < 0 || flags != 0)
    return rr__set_error(RR_EINVAL,
                         "rr_pg_grow: need a group, an output, at least one "
                         "newcomer and a wait >= 0; flags must be 0");
  int me = pg->global_ranks[pg->rank], root = pg->global_ranks[0];
  if ((int64_t)pg->size + nnew > 1 << 20)
    return rr__set_error(RR_EINVAL, "rank %d: rr_pg_grow: %d + %d ranks is too many", me, pg->size,
                         nnew);
  char host[256];
  int port = 0;
  /* Every member sees the same environment (or is passed the same string), so this
   * verdict is the same everywhere and needs no agreement. */
  int st = rr__grow_addr(addr, host, sizeof host, &port);
  if (st != RR_OK) return rr__prefix_error(st, "rank %d: rr_pg_grow", me);
  int64_t timeout = atomic_load(&pg->timeout_override);
  if (timeout <= 0) timeout = pg->timeout_ms;
  /* How long the members wait for the newcomers; the grown group keeps the old timeout.
   * Never longer than that timeout: a member that failed early waits for the others in the
   * old group's agreement below, which must not time out (and fail the old group) first. */
  int64_t wait = wait_ms > 0 && wait_ms < timeout ? wait_ms : timeout;
  int64_t deadline = rr__deadline(wait);
  int size = pg->size + nnew;
  char id[RR__GROUP_ID_MAX];
  snprintf(id, sizeof id, "%.40s~g", pg->id);
  const char *token = rr__params_get()->job_token;

  /* Rank 0 opens the store and says whether it could; the others connect only then, so a
   * port in use is one error everywhere at once, not a timeout on the others. */
  rr_store *store = NULL;
  int32_t opened = RR_OK;
  char why[RR__ERRMSG_MAX] = "";
  if (pg->rank == 0) {
    if (pg->grow_lfd >= 0 && pg->grow_port == port) {
      /* rr_pg_grow_pending's listener: the newcomers already queued on it are served. */
      int lfd = pg->grow_lfd;
      pg->grow_lfd = -1;
      opened = rr__store_tcp_serve_fd(host, port, lfd, timeout, token[0] ? token : NULL, &store);
    } else {
      if (pg->grow_lfd >= 0) close(pg->grow_lfd); /* another port's: not this growth's */
      pg->grow_lfd = -1;
      opened = rr__store_tcp_open(host, port, 1, timeout, token[0] ? token : NULL, &store);
    }
    if (opened == RR_OK) {
      char info[128];
      int n = snprintf(info, sizeof info, "%d %d %s", pg->size, size, id);
      opened = rr_store_set(store, RR__GROW_INFO, info, (size_t)n);
    }
    if (opened != RR_OK) snprintf(why, sizeof why, "%s", rr__error());
  }
  st = rr_broadcast(pg, &opened, &opened, 1, RR_INT32, root);
  if (st != RR_OK) {
    rr_store_free(store);
    return rr__prefix_error(st, "rank %d: rr_pg_grow: the old group failed before the growth", me);
  }
  if (opened != RR_OK) {
    rr_store_free(store);
    if (pg->rank == 0)
      rr__copy_error(why);
    else
      rr__set_error(opened, "rank %d could not serve the growth's store at %s:%d", root, host,
                    port);
    return rr__prefix_error(opened, "rank %d: rr_pg_grow", me);
  }
  if (pg->rank != 0) st = rr__store_tcp_open(host, port, 0, wait, token[0] ? token : NULL, &store);
  rr_pg *np = NULL;
  if (st == RR_OK)
    st = rr__grow_connect(store, id, pg->rank, size, host, timeout, wait, deadline, pg, &np);
  if (st != RR_OK) snprintf(why, sizeof why, "%s", rr__error());

  /* Every member keeps the new group or none does: the decision runs on the old group,
   * which the growth never touched. */
  int32_t ok = st == RR_OK, all = 0;
  int ast = rr_all_reduce(pg, &ok, &all, 1, RR_INT32, RR_MIN);
  if (ast != RR_OK) {
    snprintf(why, sizeof why, "%s", rr__error());
    st = ast;
  } else if (!all && st == RR_OK) {
    st = RR_EPEER;
    snprintf(why, sizeof why, "another member could not set the grown group up");
  }
  if (st == RR_OK) {
    st = rr__grow_commit(np);
    if (st != RR_OK) snprintf(why, sizeof why, "%s", rr__error());
  }
  if (st != RR_OK && np) {
    rr__comm_abort(np->comm, st, why, 1); /* the newcomers' commit fails with this */
    (void)rr_destroy_process_group(np);
    np = NULL;
  }
  /* The store is only the growth's: its port is free again for the next one. A newcomer
   * still connecting or waiting in it sees it close. */
  rr_store_free(store);
  if (st != RR_OK) {
    rr__set_error(st, "%s", why);
    return rr__prefix_error(st,
                            "rank %d: rr_pg_grow of group %s by %d at %s:%d (the old group "
                            "is still usable)",
                            me, pg->id, nnew, host, port);
  }
  RR__LOG_INFO(RR__SUB_INIT, "group %s grew from %d to %d ranks: this rank is %d of group %s",
               pg->id, pg->size, size, np->rank, np->id);
  *newpg = np;
  return RR_OK;
}

/* Rank 0's listener on the growth's port, on the wildcard address of host's family (as
 * the store would bind). */
static int rr__grow_listen(const char *host, int port, int *lfd) {
  rr__addr a, any;
  RR__CHECK(rr__addr_resolve(host, port, &a));
  rr__addr_any(a.ss.ss_family, port, &any);
  rr__addr bound;
  return rr__sock_listen(&any, 64, 1, lfd, &bound);
}

int rr_pg_grow_pending(rr_pg *pg, const char *addr, int *waiting) {
  if (waiting) *waiting = 0;
  if (!pg || !waiting)
    return rr__set_error(RR_EINVAL, "rr_pg_grow_pending: need a group and an output");
  int me = pg->global_ranks[pg->rank];
  char host[256];
  int port = 0;
  int st = rr__grow_addr(addr, host, sizeof host, &port);
  if (st != RR_OK) return rr__prefix_error(st, "rank %d: rr_pg_grow_pending", me);
  int32_t v = 0; /* rank 0's answer: 1 someone waits, 0 nobody, < 0 its error */
  char why[RR__ERRMSG_MAX] = "";
  if (pg->rank == 0) {
    if (pg->grow_lfd >= 0 && pg->grow_port != port) {
      close(pg->grow_lfd);
      pg->grow_lfd = -1;
    }
    if (pg->grow_lfd < 0) {
      v = rr__grow_listen(host, port, &pg->grow_lfd);
      if (v == RR_OK)
        pg->grow_port = port;
      else
        snprintf(why, sizeof why, "%s", rr__error());
    }
    if (v == RR_OK) {
      /* A connection in the listener's queue is a newcomer's store client, waiting for
       * the store's greeting (its own timeout bounds the wait). */
      struct pollfd pf = {.fd = pg->grow_lfd, .events = POLLIN};
      int rc = poll(&pf, 1, 0);
      if (rc < 0 && errno != EINTR) {
        v = rr__set_error(RR_ESYS, "poll: %s", strerror(errno));
        snprintf(why, sizeof why, "%s", rr__error());
      } else {
        v = rc > 0 && (pf.revents & POLLIN);
      }
    }
  }
  st = rr_broadcast(pg, &v, &v, 1, RR_INT32, pg->global_ranks[0]);
  if (st != RR_OK) return rr__prefix_error(st, "rank %d: rr_pg_grow_pending", me);
  if (v < 0) {
    if (pg->rank == 0)
      rr__copy_error(why);
    else
      rr__set_error(v, "rank %d could not listen for newcomers at %s:%d", pg->global_ranks[0], host,
                    port);
    return rr__prefix_error(v, "rank %d: rr_pg_grow_pending", me);
  }
  *waiting = v;
  return RR_OK;
}

int rr_pg_join(const char *addr, const rr_pg_options *opt, rr_pg **newpg) {
  if (newpg) *newpg = NULL;
  if (!newpg) return rr__set_error(RR_EINVAL, "rr_pg_join: need an output");
  RR__CHECK(rr__params_check());
  char host[256];
  int port = 0;
  int st = rr__grow_addr(addr, host, sizeof host, &port);
  if (st != RR_OK) return rr__prefix_error(st, "rr_pg_join");
  int64_t timeout = opt && opt->timeout_ms > 0 ? opt->timeout_ms
                                               : (int64_t)(rr__params_get()->timeout_s * 1000.0);
  int64_t deadline = rr__deadline(timeout);
  const char *token = rr__params_get()->job_token;
  rr_store *store = NULL;
  rr_pg *np = NULL;
  void *v = NULL;
  size_t vl = 0;
  int members = 0, size = 0, rank = -1;
  char id[RR__GROUP_ID_MAX] = "", text[128];
  /* Connecting retries until the deadline: the members open the store at their next
   * step boundary, which may be a while. A connection that closes before this newcomer
   * has a ticket is tried again too: it may have been queued on the listener of a group
   * that was destroyed since (a shrink after a death), or met a growth that gave up. So is
   * a growth that has its newcomers already (two came for one place): the next growth,
   * at a later step, takes this one. Refusals (the token, the protocol: RR_EPROTO) are
   * final. */
  int64_t ticket = 0;
  for (;;) {
    int64_t left = rr__ms_left(deadline);
    int full = 0;
    st = rr__store_tcp_open(host, port, 0, RR__MAX(left, 1), token[0] ? token : NULL, &store);
    if (st == RR_OK) st = rr_store_get(store, RR__GROW_INFO, &v, &vl);
    if (st == RR_OK) {
      snprintf(text, sizeof text, "%.*s", (int)RR__MIN(vl, sizeof text - 1), (const char *)v);
      if (sscanf(text, "%d %d %47s", &members, &size, id) != 3 || members < 1 || size <= members)
        st = rr__set_error(RR_EPROTO, "the growth's store holds '%.60s', not a growth", text);
    }
    if (st == RR_OK) st = rr_store_add(store, RR__GROW_NEXT, 1, &ticket);
    if (st == RR_OK && (ticket < 1 || ticket > size - members)) {
      full = 1;
      st = rr__set_error(RR_ETIMEDOUT, "every growth it met already had its newcomers (the last "
                         "grew by %d)", size - members);
    }
    free(v);
    v = NULL;
    if ((st == RR_OK && !full) || st == RR_EPROTO || st == RR_EINVAL || st == RR_ENOMEM ||
        rr__ms_left(deadline) < 100)
      break;
    RR__LOG_INFO(RR__SUB_INIT, "rr_pg_join: trying again after: %s", rr__error());
    rr_store_free(store);
    store = NULL;
    usleep(full ? 200 * 1000 : 50 * 1000); /* full: the growth under way has to end first */
  }
  if (st == RR_OK) {
    rank = members + (int)ticket - 1;
    rr__log_set_rank(rank);
    rr_pg like = {.local_rank = -1, .local_size = 0, .device = opt ? opt->device : -1};
    /* As init's rr_pg_options.device: made current here, on the calling thread. */
    if (like.device >= 0) st = rr__cuda_pg_use_device(like.device, rank);
    if (st == RR_OK)
      st = rr__grow_connect(store, id, rank, size, host, timeout, timeout, deadline, &like, &np);
  }
  if (st == RR_OK) {
    st = rr__grow_commit(np);
    if (st != RR_OK) {
      rr__prefix_error(st, "the members gave up on the growth");
      char why[RR__ERRMSG_MAX];
      snprintf(why, sizeof why, "%s", rr__error());
      (void)rr_destroy_process_group(np);
      rr__copy_error(why);
      np = NULL;
    }
  }
  rr_store_free(store);
  if (st != RR_OK) {
    if (rank >= 0) return rr__prefix_error(st, "rr_pg_join at %s:%d, as rank %d", host, port, rank);
    return rr__prefix_error(st, "rr_pg_join at %s:%d", host, port);
  }
  RR__LOG_INFO(RR__SUB_INIT, "joined group %s as rank %d of %d", np->id, rank, size);
  *newpg = np;
  return RR_OK;
}
