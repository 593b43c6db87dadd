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
 * call returns, so rr_new_group on it is RR_ENOTSUP, as on a shrunk group; the port is not:
 * rank 0 holds its listener from its first poll or growth on (and hands it to the next
 * group it is rank 0 of), so that nobody can take the address between growths. Between
 * growths that listener is rank 0's own, and it counts a newcomer as waiting only when the
 * newcomer knocks with the job token (the knock, below): a connection from anyone else
 * starts no growth and costs the group one accept. Connections between members are made
 * afresh: the old group stays alive until the caller destroys it, so its sockets cannot
 * move over. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/siphash.h"
#include "common/status.h"
#include "common/util.h"
#include "group/pg.h"
#include "rendezvous/bootstrap.h"
#include "rendezvous/store.h"
#include "rendezvous/store_proto.h"

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

/* The knock: how a newcomer tells rank 0 that it waits, proving the job token.
 *
 * Between growths rank 0's rr_pg_grow_pending reads its listener itself, at each step
 * boundary, and anyone who can reach the port can connect to it (the port is in
 * /proc/net/tcp for every local user to see). So a connection counts only when its first
 * bytes are a knock: the store's HELLO (store_proto.h, 44 bytes) whose 16-byte client nonce
 * is "RRgk", 2 random bytes, the sender's clock (u32 seconds) and 6 bytes of a SipHash MAC
 * keyed with the job token over those and the port (without a token the key is zero: the
 * knock then only tells a newcomer from a port scan, as init trusts anyone then). Rank 0
 * answers a knock it takes with a HELLO reply without a body, one it refuses (another
 * token, a clock more than RR__KNOCK_SKEW_S off) with DENIED and the reason as the body,
 * and anything else with nothing: it closes it, and reports such connections, a few at a
 * time. A knock played again (by someone who saw it on the wire: a local user cannot read
 * another's loopback traffic) is refused while rank 0 remembers it (the last RR__GROW_SEEN
 * it took) and, whatever rank 0 remembers, once it is more than RR__KNOCK_SKEW_S old.
 *
 * Shaped as a HELLO so that the growth's store, which serves the same port during a growth,
 * takes a knock for an ordinary client and answers it with its challenge (a HELLO reply
 * with a body): either answer sends the newcomer on to the store, and neither side takes
 * the other for a stranger. Rank 0 reads a knock without waiting: the listener defers
 * accepting a connection until its first bytes arrive (TCP_DEFER_ACCEPT), and one whose
 * knock is not all there is closed (the newcomer knocks again). */
#define RR__KNOCK_BYTES (RR__STORE_HDR + 4 + RR__STORE_NONCE)
#define RR__KNOCK_MACB 6           /* bytes of the MAC in the nonce */
#define RR__KNOCK_SKEW_S 300       /* how far the newcomer's clock may be from rank 0's */
#define RR__KNOCK_PER_POLL 64      /* connections one poll looks at, at most */
#define RR__GROW_RETRY_MS 1000     /* a failed listen is tried again this often ... */
#define RR__GROW_WARN_MS 60000     /* ... and said this often */
#define RR__STRANGER_WARN_MS 10000 /* connections that did not knock: reported this often */
static const uint8_t rr__knock_tag[4] = {'R', 'R', 'g', 'k'};

/* The MAC over the nonce's first 10 bytes (tag, random, clock) and the port. */
static uint64_t rr__knock_mac(const uint8_t key[16], int port, const uint8_t *nonce) {
  uint8_t ctx[32];
  memcpy(ctx, "rr-grow-knock-v1", 16);
  rr__put_u32(ctx + 16, (uint32_t)port);
  memcpy(ctx + 20, nonce, 10);
  return rr__siphash(key, ctx, 30) & ((UINT64_C(1) << (8 * RR__KNOCK_MACB)) - 1);
}

static int rr__clock_s(uint32_t *now) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
    return rr__set_error(RR_ESYS, "clock_gettime: %s", strerror(errno));
  *now = (uint32_t)ts.tv_sec;
  return RR_OK;
}

static int rr__knock_encode(const uint8_t key[16], int port, uint8_t out[RR__KNOCK_BYTES]) {
  rr__store_hdr h = {.magic = RR__STORE_REQ_MAGIC,
                     .op = RR__SOP_HELLO,
                     .nargs = 1,
                     .body_len = 4 + RR__STORE_NONCE,
                     .num = RR__STORE_VERSION};
  rr__store_hdr_encode(&h, out);
  uint8_t *n = out + RR__STORE_HDR + 4;
  rr__put_u32(out + RR__STORE_HDR, RR__STORE_NONCE);
  memcpy(n, rr__knock_tag, 4);
  if (getrandom(n + 4, 2, 0) != 2) return rr__set_error(RR_ESYS, "getrandom: %s", strerror(errno));
  uint32_t now;
  RR__CHECK(rr__clock_s(&now));
  rr__put_u32(n + 6, now);
  uint64_t mac = rr__knock_mac(key, port, n);
  for (int i = 0; i < RR__KNOCK_MACB; i++) n[10 + i] = (uint8_t)(mac >> (8 * i));
  return RR_OK;
}

/* Rank 0's verdict on a connection's first n bytes: 1 a knock taken, 0 not a knock, -1 a
 * knock refused (`why` is the reason, for the knocker and the log). */
static int rr__knock_check(rr__grow_watch *gw, const uint8_t key[16], int port, const uint8_t *b,
                           ssize_t n, char *why, size_t wn) {
  rr__store_hdr h;
  if (n < RR__KNOCK_BYTES) {
    snprintf(why, wn, "it sent %zd byte(s), not a knock", n < 0 ? (ssize_t)0 : n);
    return 0;
  }
  rr__store_hdr_decode(b, &h);
  const uint8_t *nonce = b + RR__STORE_HDR + 4;
  if (h.magic != RR__STORE_REQ_MAGIC || h.op != RR__SOP_HELLO || h.nargs != 1 ||
      h.body_len != 4 + RR__STORE_NONCE || rr__get_u32(b + RR__STORE_HDR) != RR__STORE_NONCE ||
      memcmp(nonce, rr__knock_tag, 4) != 0) {
    snprintf(why, wn, "%s",
             h.magic == RR__STORE_REQ_MAGIC ? "a store client, not a knock" : "not a knock");
    return 0;
  }
  uint64_t mac = 0;
  for (int i = 0; i < RR__KNOCK_MACB; i++) mac |= (uint64_t)nonce[10 + i] << (8 * i);
  uint32_t now = 0;
  if (rr__clock_s(&now) != RR_OK) {
    snprintf(why, wn, "%s", rr__error());
    return -1;
  }
  int32_t skew = (int32_t)(now - rr__get_u32(nonce + 6));
  if (mac != rr__knock_mac(key, port, nonce)) {
    snprintf(why, wn, "its knock does not prove this job's token (RR_JOB_TOKEN differs)");
    return -1;
  }
  if (skew > RR__KNOCK_SKEW_S || skew < -RR__KNOCK_SKEW_S) {
    snprintf(why, wn,
             "its clock is %d s off rank 0's (more than %d s: a replay, or clocks "
             "to set)",
             (int)skew, RR__KNOCK_SKEW_S);
    return -1;
  }
  for (unsigned i = 0; i < RR__GROW_SEEN; i++)
    if (gw->nseen > i && gw->seen[i] == mac) {
      snprintf(why, wn, "a knock taken before, played again");
      return 0; /* not answered: whoever replays it learns nothing */
    }
  gw->seen[gw->nseen++ % RR__GROW_SEEN] = mac;
  return 1;
}

/* One connection that did not knock: counted, and reported at most every
 * RR__STRANGER_WARN_MS (a stranger connecting at every step must not flood the log). */
static void rr__grow_stranger(rr_pg *pg, int port, const char *from, const char *why) {
  rr__grow_watch *gw = &pg->grow_watch;
  int64_t now = rr__now_ms();
  gw->strangers++;
  if (gw->stranger_warned_ms && now - gw->stranger_warned_ms < RR__STRANGER_WARN_MS) {
    RR__LOG_INFO(RR__SUB_INIT, "growth's port %d: closed a connection from %s: %s", port, from,
                 why);
    return;
  }
  RR__LOG_WARN(RR__SUB_INIT,
               "rank %d: closed %d connection(s) on the growth's port %d that did not knock "
               "with this job's token (the last from %s: %s); they start no growth",
               pg->global_ranks[pg->rank], gw->strangers, port, from, why);
  gw->strangers = 0;
  gw->stranger_warned_ms = now;
}

/* Rank 0, at a poll: read the connections queued on the growth's listener (a bounded number,
 * none waited for). 1 when one was a newcomer's knock (answered; the connections after it
 * stay queued for the growth's store, the newcomer's own among them), else 0. Never an
 * error: whatever strangers do, the group goes on. */
static int rr__grow_knocks(rr_pg *pg, int port, const uint8_t key[16]) {
  for (int i = 0; i < RR__KNOCK_PER_POLL; i++) {
    rr__addr from;
    memset(&from, 0, sizeof from);
    from.len = sizeof from.ss;
    int fd =
        accept4(pg->grow_lfd, (struct sockaddr *)&from.ss, &from.len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) /* out of descriptors: at the next poll */
        RR__LOG_WARN(RR__SUB_INIT, "rank %d: growth's port %d: accept: %s",
                     pg->global_ranks[pg->rank], port, strerror(errno));
      return 0;
    }
    uint8_t b[RR__KNOCK_BYTES];
    ssize_t n;
    do n = recv(fd, b, sizeof b, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    char why[160], who[RR__ADDRSTRLEN];
    int v = rr__knock_check(&pg->grow_watch, key, port, b, n, why, sizeof why);
    rr__addr_str(&from, who, sizeof who);
    uint8_t reply[RR__STORE_HDR + sizeof why];
    size_t len = 0;
    if (v != 0) { /* answered: the knocker learns where it stands */
      rr__store_hdr h = {.magic = RR__STORE_REP_MAGIC,
                         .op = RR__SOP_HELLO,
                         .status = v > 0 ? RR__SST_OK : RR__SST_DENIED};
      if (v < 0) h.body_len = (uint32_t)strlen(why);
      rr__store_hdr_encode(&h, reply);
      memcpy(reply + RR__STORE_HDR, why, h.body_len);
      len = RR__STORE_HDR + h.body_len;
    }
    /* A fresh socket's buffer takes a few dozen bytes at once; one that does not is gone. */
    ssize_t w = len ? send(fd, reply, len, MSG_DONTWAIT | MSG_NOSIGNAL) : 0;
    close(fd); /* the knock's connection; the newcomer comes back to the growth's store */
    if (w != (ssize_t)len) { /* a newcomer that cannot hear the answer will not come */
      RR__LOG_INFO(RR__SUB_INIT, "growth's port %d: the answer to %s was not sent (%s)", port, who,
                   w < 0 ? strerror(errno) : "short send");
      continue;
    }
    if (v > 0) {
      RR__LOG_INFO(RR__SUB_INIT, "growth's port %d: a newcomer knocked from %s", port, who);
      return 1;
    }
    if (v < 0)
      RR__LOG_WARN(RR__SUB_INIT, "rank %d: growth's port %d: refused the knock from %s: %s",
                   pg->global_ranks[pg->rank], port, who, why);
    else
      rr__grow_stranger(pg, port, who, why);
  }
  return 0;
}

/* Rank 0's listener on the growth's port, on the wildcard address of host's family (as the
 * store would bind): non-blocking (rr_pg_grow_pending never waits on it), and handing over
 * a connection only once its first bytes are in (TCP_DEFER_ACCEPT, here 2 s: a stranger
 * that connects and says nothing reaches the accept queue, to be closed, only then). */
static int rr__grow_listen(const char *host, int port, int *lfd) {
  rr__addr a, any, bound;
  RR__CHECK(rr__addr_resolve(host, port, &a));
  rr__addr_any(a.ss.ss_family, port, &any);
  RR__CHECK(rr__sock_listen(&any, 64, 1, lfd, &bound));
  int defer = 2, st = rr__sock_nonblock(*lfd, 1);
  if (st == RR_OK && setsockopt(*lfd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof defer) != 0)
    st = rr__set_error(RR_ESYS, "setsockopt(TCP_DEFER_ACCEPT): %s", strerror(errno));
  if (st != RR_OK) {
    close(*lfd);
    *lfd = -1;
  }
  return st;
}

/* Rank 0 holds the listener on `port` (opening it when it has none, or one on another port).
 * A growth (poll = 0) tries at once and fails with the reason. A poll tries at most every
 * RR__GROW_RETRY_MS after a failure, and its failure is a warning, not an error: a port
 * taken by another process leaves a healthy group that cannot grow there, not a broken one. */
static int rr__grow_hold(rr_pg *pg, const char *host, int port, int poll_only) {
  if (pg->grow_lfd >= 0 && pg->grow_port == port) return RR_OK;
  if (pg->grow_lfd >= 0) { /* another address's: not this one's to keep */
    close(pg->grow_lfd);
    pg->grow_lfd = -1;
  }
  rr__grow_watch *gw = &pg->grow_watch;
  int64_t now = rr__now_ms();
  if (poll_only && gw->retry_ms > now)
    return rr__set_error(RR_EADDR, "listening at %s:%d failed a moment ago", host, port);
  int st = rr__grow_listen(host, port, &pg->grow_lfd);
  if (st == RR_OK) {
    pg->grow_port = port;
    gw->retry_ms = gw->listen_warned_ms = 0;
    return RR_OK;
  }
  gw->retry_ms = now + RR__GROW_RETRY_MS;
  if (poll_only && (!gw->listen_warned_ms || now - gw->listen_warned_ms >= RR__GROW_WARN_MS)) {
    RR__LOG_WARN(RR__SUB_INIT,
                 "rank %d: rr_pg_grow_pending: %s; no newcomer can join at %s:%d while it "
                 "lasts (the group goes on; listening is tried again every %d ms)",
                 pg->global_ranks[pg->rank], rr__error(), host, port, RR__GROW_RETRY_MS);
    gw->listen_warned_ms = now;
  }
  return st;
}

/* Knock at host:port (the newcomer). 1 when rank 0 took the knock, or a growth's store
 * answered it: go to the store. 0 when the connection closed unanswered: knock again.
 * Else an error: refused (final), or nothing reached by the deadline. */
static int rr__grow_knock(const char *host, int port, const uint8_t key[16], int64_t deadline) {
  rr__addr a;
  int fd = -1;
  uint8_t knock[RR__KNOCK_BYTES], hdr[RR__STORE_HDR];
  RR__CHECK(rr__addr_resolve(host, port, &a));
  RR__CHECK(rr__knock_encode(key, port, knock));
  int st = rr__sock_connect(&a, deadline, &fd);
  if (st != RR_OK)
    return rr__prefix_error(st,
                            "cannot reach the rendezvous store at %s:%d (nobody grows "
                            "there?)",
                            host, port);
  st = rr__sock_send_all(fd, knock, sizeof knock, deadline);
  if (st == RR_OK) st = rr__sock_recv_all(fd, hdr, sizeof hdr, deadline);
  if (st == RR_ETIMEDOUT) {
    close(fd);
    return rr__set_error(st,
                         "knocked at %s:%d, but no growth took this process in within its "
                         "timeout (the members look with rr_pg_grow_pending at their step "
                         "boundaries)",
                         host, port);
  }
  rr__store_hdr h = {0};
  if (st == RR_OK) rr__store_hdr_decode(hdr, &h);
  int ok = st == RR_OK && h.magic == RR__STORE_REP_MAGIC && h.op == RR__SOP_HELLO;
  if (ok && h.status == RR__SST_DENIED) {
    char why[256] = "";
    size_t n = RR__MIN(h.body_len, sizeof why - 1);
    if (n && rr__sock_recv_all(fd, why, n, RR__MIN(deadline, rr__now_ms() + 1000)) != RR_OK) n = 0;
    why[n] = '\0';
    close(fd);
    if (!n) snprintf(why, sizeof why, "protocol version %lld", (long long)h.num);
    return rr__set_error(RR_EPROTO, "the group growing at %s:%d refused this process: %s", host,
                         port, why);
  }
  close(fd);
  return ok && h.status == RR__SST_OK;
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
    /* The store serves a duplicate of rank 0's listener (the newcomers queued on it are
     * served) and closes it when the growth ends; the listener itself stays, so the port is
     * never free for another process between growths. */
    opened = rr__grow_hold(pg, host, port, 0);
    int lfd = opened == RR_OK ? fcntl(pg->grow_lfd, F_DUPFD_CLOEXEC, 0) : -1;
    if (opened == RR_OK && lfd < 0)
      opened = rr__set_error(RR_ESYS, "duplicating the growth's listener: %s", strerror(errno));
    if (opened == RR_OK)
      opened = rr__store_tcp_serve_fd(host, port, lfd, timeout, token[0] ? token : NULL, &store);
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
  if (pg->rank == 0) { /* the grown group's rank 0 is this process: it holds the port now */
    np->grow_lfd = pg->grow_lfd;
    np->grow_port = pg->grow_port;
    np->grow_watch = pg->grow_watch;
    pg->grow_lfd = -1;
  }
  RR__LOG_INFO(RR__SUB_INIT, "group %s grew from %d to %d ranks: this rank is %d of group %s",
               pg->id, pg->size, size, np->rank, np->id);
  *newpg = np;
  return RR_OK;
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
  /* Rank 0's answer: 1 when a newcomer knocked with the job token, else 0, also when it
   * cannot listen (said in its log): growing is optional, the group goes on either way. */
  int32_t v = 0;
  if (pg->rank == 0 && rr__grow_hold(pg, host, port, 1) == RR_OK) {
    uint8_t key[16];
    rr__token_key(rr__params_get()->job_token, key);
    v = rr__grow_knocks(pg, port, key);
  }
  st = rr_broadcast(pg, &v, &v, 1, RR_INT32, pg->global_ranks[0]);
  if (st != RR_OK) return rr__prefix_error(st, "rank %d: rr_pg_grow_pending", me);
  *waiting = v > 0;
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
  /* First the knock (above), which waits for the members' next step boundary (a while,
   * perhaps); then the growth's store. Both are tried again until the deadline: a knock or
   * a store connection that closes before this newcomer has a ticket may have been queued
   * on the listener of a group destroyed since (a shrink after a death), or met a growth
   * that gave up; and a growth that has its newcomers already (two came for one place)
   * is followed by the next one, at a later step. Refusals (the token, the protocol:
   * RR_EPROTO) are final. */
  uint8_t key[16];
  rr__token_key(token, key);
  int64_t ticket = 0;
  for (;;) {
    int full = 0;
    st = rr__grow_knock(host, port, key, deadline);
    if (st == 0)
      st = rr__set_error(RR_EPEER, "the growth's port at %s:%d closed the knock unanswered", host,
                         port);
    else if (st == 1)
      st = rr__store_tcp_open(host, port, 0, RR__MAX(rr__ms_left(deadline), 1),
                              token[0] ? token : NULL, &store);
    if (st == RR_OK) st = rr_store_get(store, RR__GROW_INFO, &v, &vl);
    if (st == RR_OK) {
      snprintf(text, sizeof text, "%.*s", (int)RR__MIN(vl, sizeof text - 1), (const char *)v);
      if (sscanf(text, "%d %d %47s", &members, &size, id) != 3 || members < 1 || size <= members)
        st = rr__set_error(RR_EPROTO, "the growth's store holds '%.60s', not a growth", text);
    }
    if (st == RR_OK) st = rr_store_add(store, RR__GROW_NEXT, 1, &ticket);
    if (st == RR_OK && (ticket < 1 || ticket > size - members)) {
      full = 1;
      st = rr__set_error(RR_ETIMEDOUT,
                         "every growth it met already had its newcomers (the last "
                         "grew by %d)",
                         size - members);
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
