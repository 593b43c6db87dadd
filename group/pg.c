/* Process groups: creation (init_process_group, new_group), destruction, and the small
 * calls on a group (ranks, timeout, abort), and what a launcher's environment says
 * (rr_launch_info_get). The calls themselves: group/api.c (arguments), group/work.c (queue
 * and worker), group/run.c (its path, and running one), group/ipc.c, group/staging.c and
 * group/device.c (device buffers). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/siphash.h"
#include "common/status.h"
#include "common/util.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/init_method.h"
#include "group/pg.h"
#include "rendezvous/store.h"

void rr_pg_options_init(rr_pg_options *opt) {
  if (opt) *opt = (rr_pg_options)RR_PG_OPTIONS_INIT;
}

int rr_get_rank(const rr_pg *pg) {
  return pg ? pg->rank : -1;
}
int rr_get_world_size(const rr_pg *pg) {
  return pg ? pg->size : -1;
}

int rr_get_global_rank(const rr_pg *pg, int group_rank) {
  if (!pg || group_rank < 0 || group_rank >= pg->size) return -1;
  return pg->global_ranks[group_rank];
}

int rr_get_group_rank(const rr_pg *pg, int global_rank) {
  return pg ? rr__pg_group_rank(pg, global_rank) : -1;
}

int rr_pg_set_timeout(rr_pg *pg, int64_t timeout_ms) {
  if (!pg || timeout_ms <= 0)
    return rr__set_error(RR_EINVAL, "rr_pg_set_timeout: need a group and a timeout > 0 ms");
  atomic_store(&pg->timeout_override, timeout_ms);
  return RR_OK;
}

int rr_abort(rr_pg *pg) {
  if (!pg) return rr__set_error(RR_EINVAL, "rr_abort: NULL group");
  char reason[128];
  snprintf(reason, sizeof reason, "rank %d called rr_abort", pg->global_ranks[pg->rank]);
  rr__comm_abort(pg->comm, RR_EABORTED, reason, 1);
  return RR_OK;
}

/* The group's comm was revoked (here, or a peer's revoke was heard while a call on it read
 * the control sockets): revoke every subgroup made from it on this rank, which tells their
 * members, and so on down (each subgroup's comm calls back here in turn). */
static void rr__pg_on_revoke(void *ctx, const char *reason) {
  rr_pg *pg = ctx;
  pthread_mutex_lock(&pg->kids_mu);
  for (rr_pg *k = pg->kids; k; k = k->next_kid) {
    char mine[RR__ERRMSG_MAX];
    snprintf(mine, sizeof mine, "%.600s; group %s was revoked with its parent %s", reason, k->id,
             pg->id);
    rr__comm_abort(k->comm, RR_EREVOKED, mine, 1);
  }
  pthread_mutex_unlock(&pg->kids_mu);
}

void rr_process_exiting(void) {
  rr__comm_exiting();
}

int rr_pg_revoke(rr_pg *pg) {
  if (!pg) return rr__set_error(RR_EINVAL, "rr_pg_revoke: NULL group");
  char reason[128];
  snprintf(reason, sizeof reason, "rank %d revoked group %s", pg->global_ranks[pg->rank], pg->id);
  rr__comm_abort(pg->comm, RR_EREVOKED, reason, 1);
  return RR_OK;
}

/* In a child forked without exec: the growth's port stays the parent's (a child holding the
 * listener would keep it bound after the parent is gone). Only the forking thread exists
 * here, and a parent thread may have held the group's locks at the fork: nothing here waits. */
static void rr__pg_fork_child(rr__fork_hook *h) {
  rr_pg *pg = (rr_pg *)((char *)h - offsetof(rr_pg, fork));
  if (pg->grow_lfd >= 0) close(pg->grow_lfd);
  pg->grow_lfd = -1;
  pg->forked = 1;
}

void rr__pg_free(rr_pg *pg) {
  if (!pg) return;
  rr__fork_unwatch(&pg->fork);
  if (pg->comm) rr__comm_free(pg->comm);
  if (pg->grow_lfd >= 0) close(pg->grow_lfd);
  if (pg->forked) {
    /* The child's copy: CUDA cannot be used after a fork, and the locks may have been held
     * by a thread of the parent; they are left as they are (the memory is freed). */
    free(pg->global_ranks);
    free(pg->cs.p2p_sent);
    free(pg->cs.p2p_recvd);
    free(pg->cs.staging);
    free(pg->cs.scratch);
    free(pg);
    return;
  }
  rr__pg_direct_free(pg);
  rr__cuda_pg_free(pg);
  pthread_mutex_destroy(&pg->mu);
  pthread_cond_destroy(&pg->cv);
  pthread_mutex_destroy(&pg->kids_mu);
  free(pg->global_ranks);
  free(pg->cs.p2p_sent);
  free(pg->cs.p2p_recvd);
  free(pg->cs.staging);
  free(pg->cs.scratch);
  free(pg);
}

int rr__pg_new(int size, rr_pg **out) {
  rr_pg *pg = rr__calloc(1, sizeof *pg);
  if (!pg) return RR_ENOMEM;
  pthread_mutex_init(&pg->mu, NULL);
  pthread_cond_init(&pg->cv, NULL);
  pthread_mutex_init(&pg->kids_mu, NULL);
  pg->size = size;
  pg->device = -1;
  pg->grow_lfd = -1;
  pg->fork.child = rr__pg_fork_child;
  (void)rr__fork_watch(&pg->fork); /* without it, a forked child keeps the port: no worse */
  pg->global_ranks = rr__calloc((size_t)size, sizeof *pg->global_ranks);
  pg->cs.global_ranks = pg->global_ranks;
  pg->cs.p2p_sent = rr__calloc((size_t)size, sizeof *pg->cs.p2p_sent);
  pg->cs.p2p_recvd = rr__calloc((size_t)size, sizeof *pg->cs.p2p_recvd);
  rr__coll_state_setup(&pg->cs);
  /* Page-aligned staging: receive slots for reductions, reused by every call. */
  if (posix_memalign((void **)&pg->cs.staging, 4096, pg->cs.seg_bytes * (size_t)pg->cs.nslots) != 0)
    pg->cs.staging = NULL;
  if (!pg->global_ranks || !pg->cs.p2p_sent || !pg->cs.p2p_recvd || !pg->cs.staging) {
    rr__pg_free(pg);
    return rr__set_error(RR_ENOMEM, "out of memory creating a group of %d", size);
  }
  *out = pg;
  return RR_OK;
}

/* Whether rrun's notices (rendezvous/notice.h) can be in the world's store: rrun writes them
 * to the TCP store at MASTER_ADDR:MASTER_PORT, which is only ever a world's own (env://); a
 * caller's store (torch's) may hold several worlds whose rank numbers are not the job's, and
 * nobody writes them into a file store. */
static int rr__pg_notices(const rr_pg *world) {
  return world->own_store && rr_store_port(world->store) > 0;
}

/* Connect the group and start its worker. gen >= 0: the world's own setup, by this rank's
 * generation (rr__rank_gen), which takes its seat in the rendezvous; -1: a subgroup. */
static int rr__pg_start(rr_pg *pg, int64_t deadline_ms, int gen) {
  int notices = rr__pg_notices(pg->world);
  rr__boot b = {.store = pg->store,
                .group_id = pg->id,
                .rank = pg->rank,
                .size = pg->size,
                .global_ranks = pg->global_ranks,
                .hint = pg->have_hint ? &pg->hint : NULL,
                .deadline_ms = deadline_ms,
                .timeout_ms = pg->timeout_ms,
                .token_key = pg->have_token ? pg->token_key : NULL,
                .notices = notices,
                .seat = notices && gen >= 0,
                .gen = gen};
  RR__CHECK(rr__bootstrap(&b, &pg->comm));
  return rr__pg_run_worker(pg);
}

int rr__pg_run_worker(rr_pg *pg) {
  pg->comm->on_revoke = rr__pg_on_revoke;
  pg->comm->on_revoke_ctx = pg;
  int e = pthread_create(&pg->worker, NULL, rr__pg_worker_main, pg);
  if (e != 0) return rr__set_error(RR_ESYS, "pthread_create: %s", strerror(e));
  pg->worker_started = 1;
  return RR_OK;
}

/* The world's id: "w", or, for a group named by its members' key (groups that share a
 * store with others set up at the same time: torch's), "w-" and 16 hex digits of the key's
 * hash. The id is in every store key, record MAC and greeting proof of the setup
 * (rendezvous/bootstrap.c), so two groups with different keys never read each other's
 * records or accept each other's connections, token or not. The hash is keyed with a fixed
 * key: it separates names, it is not a secret (the MACs, keyed with the token, are). */
static void rr__pg_name_world(rr_pg *pg, const char *key) {
  static const uint8_t fixed[16] = "rr-group-key-v1";
  if (!key || !key[0]) {
    snprintf(pg->id, sizeof pg->id, "w");
    return;
  }
  snprintf(pg->id, sizeof pg->id, "w-%016llx",
           (unsigned long long)rr__siphash(fixed, key, strlen(key)));
}

/* Which process of its rank this one is: RR_RANK_GENERATION, set by rrun --replace on a
 * replacement that takes a dead rank's place before the group formed (1 for the first, ...);
 * 0 when unset. Only for a world on its own store, the one rrun writes its notices to. */
static int rr__rank_gen(int *gen) {
  const char *v = getenv("RR_RANK_GENERATION");
  *gen = 0;
  if (!v || !*v) return RR_OK;
  char *end;
  errno = 0;
  long g = strtol(v, &end, 10);
  if (*end || errno || g < 0 || g > 1000000)
    return rr__set_error(RR_EENV, "RR_RANK_GENERATION='%s' is not an integer in 0..1000000", v);
  *gen = (int)g;
  return RR_OK;
}

/* Catch launch mistakes that would otherwise look like hangs: two processes claiming one
 * rank, or ranks that disagree on the world size. A replacement (generation gen > 0) claims
 * the rank anew, under a key of its generation, and only with rrun's word in the store that
 * the process before it died before joining the rendezvous and that it takes its place (a
 * notice carrying the job token): so two live processes with one RANK are still refused,
 * whatever RR_RANK_GENERATION they were given. */
static int rr__check_world(rr_pg *pg, const rr__init_info *in, int gen) {
  char key[96], wkey[96];
  int64_t claims = 0;
  if (gen == 0)
    snprintf(key, sizeof key, "rr/%s/claim/%d", pg->id, in->rank);
  else
    snprintf(key, sizeof key, "rr/%s/claim/%d.%d", pg->id, in->rank, gen);
  snprintf(wkey, sizeof wkey, "rr/%s/world_size", pg->id);
  RR__CHECK(rr_store_add(pg->store, key, 1, &claims));
  if (claims > 1)
    return rr__set_error(RR_EINVAL,
                         "rank %d was claimed by %lld processes (two processes with the same "
                         "RANK%s, or a stale rendezvous file from an earlier run)",
                         in->rank, (long long)claims, gen ? " and RR_RANK_GENERATION" : "");
  if (gen > 0) {
    rr__dead_notice dn;
    int got = rr__dead_notice_read(pg->store, pg->have_token ? pg->token_key : NULL, in->rank, &dn);
    if (got < 0) return got;
    if (got != 1 || dn.gen != gen - 1 || !dn.inplace)
      return rr__set_error(RR_EINVAL,
                           "RR_RANK_GENERATION=%d, but the store holds no word from rrun (with "
                           "this job's token) that rank %d's generation %d died before joining "
                           "the rendezvous and that this process takes its place%s",
                           gen, in->rank, gen - 1,
                           got == 1 ? " (its latest notice is about another generation)" : "");
  }
  char ws[32];
  int len = snprintf(ws, sizeof ws, "%d", in->world_size);
  if (in->rank == 0) return rr_store_set(pg->store, wkey, ws, (size_t)len);
  void *v = NULL;
  size_t vl = 0;
  int st = rr_store_get(pg->store, wkey, &v, &vl);
  if (st == RR_ETIMEDOUT) return rr__set_error(RR_ETIMEDOUT, "rank 0 never reached the rendezvous");
  RR__CHECK(st);
  int same = vl == (size_t)len && memcmp(v, ws, vl) == 0;
  char theirs[32];
  snprintf(theirs, sizeof theirs, "%.*s", (int)RR__MIN(vl, 31), (const char *)v);
  free(v);
  if (!same)
    return rr__set_error(RR_EINVAL, "this rank has world size %d but rank 0 has %s", in->world_size,
                         theirs);
  return RR_OK;
}

/* On the caller's store without RR_JOB_TOKEN: rank 0 makes a token for this group and
 * shares it through the store, so the setup greetings still prove membership (as good as
 * the store's own protection, which is the framework's). */
static int rr__store_token(rr_pg *pg) {
  char hex[33], key[96];
  snprintf(key, sizeof key, "rr/%s/token", pg->id);
  if (pg->rank == 0) {
    uint8_t raw[16];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
      return rr__set_error(RR_ESYS, "getrandom: %s", strerror(errno));
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    RR__CHECK(rr_store_set(pg->store, key, hex, 32));
  } else {
    void *v = NULL;
    size_t len = 0;
    RR__CHECK(rr_store_get(pg->store, key, &v, &len));
    int ok = len == 32;
    if (ok) memcpy(hex, v, 32);
    free(v);
    if (!ok) return rr__set_error(RR_EPROTO, "the group's token in the store has %zu bytes", len);
  }
  hex[32] = '\0';
  rr__token_key(hex, pg->token_key);
  pg->have_token = 1;
  return RR_OK;
}

/* store: the caller's, for the rendezvous (rr_init_process_group_on_store), or NULL. */
static int rr__init(rr_pg **out, const rr_pg_options *opt, rr_store *store) {
  if (!out) return rr__set_error(RR_EINVAL, "init_process_group: pg is NULL");
  *out = NULL;
  RR__CHECK(rr__params_check());
  rr__init_info in;
  int st = rr__init_parse(opt, store != NULL, &in);
  if (st != RR_OK) return rr__prefix_error(st, "init_process_group");
  rr__log_set_rank(in.rank);
  int64_t timeout = opt && opt->timeout_ms > 0 ? opt->timeout_ms
                                               : (int64_t)(rr__params_get()->timeout_s * 1000.0);
  int64_t deadline = rr__deadline(timeout);

  rr_pg *pg = NULL;
  RR__CHECK_GOTO(rr__pg_new(in.world_size, &pg), st, fail);
  pg->world = pg;
  pg->rank = in.rank;
  pg->timeout_ms = timeout;
  pg->local_rank = in.local_rank;
  pg->local_size = in.local_world_size;
  pg->device = opt ? opt->device : -1;
  /* rr_pg_options.device >= 0: this rank's CUDA device, made current on the calling thread
   * (torch's device_id); -1 touches nothing, so a CPU-only program creates no context. */
  if (pg->device >= 0) RR__CHECK_GOTO(rr__cuda_pg_use_device(pg->device, in.rank), st, fail);
  rr__pg_name_world(pg, opt ? opt->group_key : NULL);
  for (int i = 0; i < in.world_size; i++) pg->global_ranks[i] = i;

  /* The interface is a local choice: check it before the rendezvous, so a bad
   * RR_SOCKET_IFNAME fails here with its own message instead of as store trouble elsewhere. */
  {
    rr__addr probe, hint;
    int have = in.kind != RR__INIT_FILE && in.host[0] &&
               rr__addr_resolve(in.host, in.port, &hint) == RR_OK;
    RR__CHECK_GOTO(
        rr__if_select(rr__params_get()->socket_ifname, have ? &hint : NULL, &probe, NULL, 0), st,
        fail);
  }
  /* The job token: it never crosses the wire, only MACs keyed with it (the store's
   * handshake, the bootstrap's greetings). */
  const char *token = rr__params_get()->job_token;
  if (token[0]) {
    rr__token_key(token, pg->token_key);
    pg->have_token = 1;
  }
  int alone = in.kind == RR__INIT_STORE && in.world_size == 1;
  if (in.kind == RR__INIT_STORE) {
    pg->store = store;
    if (in.host[0] && rr__addr_resolve(in.host, 0, &pg->hint) == RR_OK) pg->have_hint = 1;
    /* A one-rank group meets nobody: no token to share, no claim to make (torch names
     * one-rank groups alike on different ranks: new_subgroups(group_size=1)). */
    st = pg->have_token || alone ? RR_OK : rr__store_token(pg);
  } else if (in.kind == RR__INIT_FILE) {
    pg->own_store = 1;
    st = rr_store_file(in.path, timeout, &pg->store);
  } else {
    pg->own_store = 1;
    st = rr__addr_resolve(in.host, in.port, &pg->hint);
    if (st == RR_OK) {
      pg->have_hint = 1;
      st = rr__store_tcp_open(in.host, in.port, in.rank == 0, timeout, token[0] ? token : NULL,
                              &pg->store);
    }
  }
  if (st != RR_OK) {
    rr__prefix_error(st, "rendezvous store");
    goto fail;
  }
  int gen = 0;
  if (rr__pg_notices(pg)) RR__CHECK_GOTO(rr__rank_gen(&gen), st, fail);
  if (!alone) RR__CHECK_GOTO(rr__check_world(pg, &in, gen), st, fail);
  RR__CHECK_GOTO(rr__pg_start(pg, deadline, gen), st, fail);
  RR__LOG_INFO(RR__SUB_INIT, "rank %d of %d ready (rank and size from %s)", in.rank, in.world_size,
               in.source);
  *out = pg;
  return RR_OK;
fail:
  rr__prefix_error(st, "rank %d: init_process_group", in.rank);
  if (pg) {
    if (pg->own_store) {
      /* Serving the store: the ranks waiting on it hear why, not a reset (rrun_fd_exhaustion:
       * rank 0 out of descriptors, rank 1's "connection reset" printed first). */
      char why[RR__ERRMSG_MAX + 64];
      snprintf(why, sizeof why, RR__STORE_HOST_FAILED "%s", rr__error());
      rr__store_goodbye(pg->store, why, st);
      rr_store_free(pg->store);
    }
    rr__pg_free(pg);
  }
  return st;
}

int rr_launch_info_get(rr_launch_info *info) {
  if (!info) return rr__set_error(RR_EINVAL, "rr_launch_info_get: info is NULL");
  memset(info, 0, sizeof *info);
  rr__init_info in;
  RR__CHECK(rr__init_parse(NULL, 0, &in));
  info->rank = in.rank;
  info->world_size = in.world_size;
  info->local_rank = in.local_rank;
  info->local_world_size = in.local_world_size;
  snprintf(info->master_addr, sizeof info->master_addr, "%s", in.host);
  info->master_port = in.port;
  snprintf(info->source, sizeof info->source, "%s", in.source ? in.source : "");
  return RR_OK;
}

int rr_init_process_group(rr_pg **out, const rr_pg_options *opt) {
  return rr__init(out, opt, NULL);
}

int rr_init_process_group_on_store(rr_pg **out, const rr_pg_options *opt, rr_store *store) {
  if (!store) {
    if (out) *out = NULL;
    return rr__set_error(RR_EINVAL, "init_process_group_on_store: store is NULL");
  }
  return rr__init(out, opt, store);
}

static int rr__cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int rr_new_group(rr_pg *parent, const int *ranks, int nranks, int64_t timeout_ms, rr_pg **group) {
  if (group) *group = NULL;
  if (!parent || !group || !ranks || nranks < 1)
    return rr__set_error(RR_EINVAL, "new_group: need a parent group, a rank list and an output");
  if (!parent->world->store) /* the same verdict on every rank: no barrier needed */
    return rr__set_error(RR_ENOTSUP,
                         "rank %d: new_group: a group made by rr_pg_shrink or "
                         "rr_pg_grow has no rendezvous store to set a subgroup up through",
                         parent->global_ranks[parent->rank]);
  int me = parent->global_ranks[parent->rank];
  if (nranks > parent->size)
    return rr__set_error(RR_EINVAL, "rank %d: new_group: %d ranks listed, the parent has %d", me,
                         nranks, parent->size);
  int *sorted = rr__calloc((size_t)nranks, sizeof *sorted);
  if (!sorted) return RR_ENOMEM;
  memcpy(sorted, ranks, (size_t)nranks * sizeof *sorted);
  qsort(sorted, (size_t)nranks, sizeof *sorted, rr__cmp_int);
  int st = RR_OK, my_index = -1;
  for (int i = 0; i < nranks && st == RR_OK; i++) {
    if (i > 0 && sorted[i] == sorted[i - 1])
      st = rr__set_error(RR_EINVAL, "rank %d: new_group: rank %d is listed twice", me, sorted[i]);
    else if (rr_get_group_rank(parent, sorted[i]) < 0)
      st = rr__set_error(RR_EINVAL, "rank %d: new_group: rank %d is not in the parent group", me,
                         sorted[i]);
    if (sorted[i] == me) my_index = i;
  }
  /* Every rank of the parent takes the next child number, members or not, so that ids agree. */
  int child = parent->next_child++;
  if (st != RR_OK) { /* the same list gives the same verdict on every rank: no barrier */
    free(sorted);
    return st;
  }
  if (my_index < 0) {
    /* Like torch's new_group, a barrier over the parent: a non-member (rank 0 with the store
     * above all) must not leave and take the store with it while members still set up. */
    free(sorted);
    st = rr_barrier(parent);
    return st == RR_OK ? st : rr__prefix_error(st, "rank %d: new_group", me);
  }
  rr_pg *pg = NULL;
  st = rr__pg_new(nranks, &pg);
  if (st != RR_OK) {
    free(sorted);
    return st;
  }
  memcpy(pg->global_ranks, sorted, (size_t)nranks * sizeof *sorted);
  free(sorted);
  pg->world = parent->world;
  pg->parent = parent;
  pg->rank = my_index;
  pg->timeout_ms = timeout_ms > 0 ? timeout_ms : parent->timeout_ms;
  pg->store = parent->world->store;
  pg->hint = parent->world->hint;
  pg->have_hint = parent->world->have_hint;
  pg->local_rank = parent->local_rank;
  pg->local_size = parent->local_size;
  pg->device = parent->device;
  pg->have_token = parent->world->have_token;
  memcpy(pg->token_key, parent->world->token_key, sizeof pg->token_key);
  if (snprintf(pg->id, sizeof pg->id, "%s.%d", parent->id, child) >= (int)sizeof pg->id) {
    rr__pg_free(pg);
    return rr__set_error(RR_EINVAL, "rank %d: new_group: groups nested too deeply", me);
  }
  st = rr__pg_start(pg, rr__deadline(pg->timeout_ms), -1);
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: new_group %s", me, pg->id);
    rr__pg_free(pg);
    return st; /* the non-members' barrier then fails on the parent's deadline or abort */
  }
  atomic_fetch_add(&parent->nchildren, 1);
  pthread_mutex_lock(&parent->kids_mu);
  pg->next_kid = parent->kids;
  parent->kids = pg;
  pthread_mutex_unlock(&parent->kids_mu);
  st = rr_barrier(parent);
  if (st != RR_OK) {
    /* A failed new_group leaves nothing behind: the caller gets no group to destroy, and
     * the parent no child that would stop rr_destroy_process_group. */
    char saved[RR__ERRMSG_MAX];
    rr__prefix_error(st, "rank %d: new_group", me);
    snprintf(saved, sizeof saved, "%s", rr__error());
    /* Members that did get the group learn why it is gone on their next call with it. */
    rr__comm_abort(pg->comm, st, saved, 1);
    (void)rr_destroy_process_group(pg);
    rr__copy_error(saved);
    return st;
  }
  *group = pg;
  return RR_OK;
}

int rr_destroy_process_group(rr_pg *pg) {
  if (!pg) return rr__set_error(RR_EINVAL, "destroy_process_group: NULL group");
  int me = pg->global_ranks[pg->rank];
  if (pg->forked) {
    /* A forked child's copy (a DataLoader worker's finalizers run this as it exits): its
     * worker thread never existed here, so there is nothing to stop or join; free it and
     * leave the parent's group alone. Its subgroups are the child's copies too. */
    if (pg->parent) {
      for (rr_pg **k = &pg->parent->kids; *k; k = &(*k)->next_kid)
        if (*k == pg) {
          *k = pg->next_kid;
          break;
        }
      atomic_fetch_sub(&pg->parent->nchildren, 1);
    }
    if (pg->world == pg && pg->own_store) rr_store_free(pg->store);
    rr__pg_free(pg);
    return RR_OK;
  }
  int kids = atomic_load(&pg->nchildren);
  if (kids > 0)
    return rr__set_error(
        RR_ESTATE, "rank %d: destroy_process_group: destroy its %d subgroup(s) first", me, kids);
  pthread_mutex_lock(&pg->mu);
  pg->stop = 1;
  pthread_cond_broadcast(&pg->cv);
  pthread_mutex_unlock(&pg->mu);
  if (pg->worker_started) pthread_join(pg->worker, NULL);
  /* A call may still run on another thread: a blocking call, or a waiter running a queued
   * call itself (rr_work_wait). It holds `busy` and uses the group until it lets go, so
   * the group is freed only after that (torch's abort() destroys from a timer or watchdog
   * thread while the caller is still in the aborted call, which the abort ends at once). */
  pthread_mutex_lock(&pg->mu);
  while (pg->busy) pthread_cond_wait(&pg->cv, &pg->mu);
  pthread_mutex_unlock(&pg->mu);
  int st = RR_OK;
  if (pg->comm && atomic_load(&pg->comm->aborted)) {
    st = rr__comm_check(pg->comm);
    rr__prefix_error(st, "rank %d: the group had failed", me);
  }
  char saved[RR__ERRMSG_MAX];
  snprintf(saved, sizeof saved, "%s", rr__error());
  if (pg->parent) {
    pthread_mutex_lock(&pg->parent->kids_mu);
    for (rr_pg **k = &pg->parent->kids; *k; k = &(*k)->next_kid)
      if (*k == pg) {
        *k = pg->next_kid;
        break;
      }
    pthread_mutex_unlock(&pg->parent->kids_mu);
    atomic_fetch_sub(&pg->parent->nchildren, 1);
  }
  if (pg->world == pg && pg->own_store) rr_store_free(pg->store);
  rr__pg_free(pg);
  if (st != RR_OK) rr__copy_error(saved);
  return st;
}
