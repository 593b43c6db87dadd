/* The TCP store's client, and rr__store_tcp_open, which makes one for every process of the
 * job and, on the master, first starts the server thread (store_server.c) it talks to.
 *
 * A small pool of connections to the server, each made with connect + the handshake of
 * store_proto.h (both sides prove they hold the job token) and used by one request at a time, so
 * threads sharing a store never wait behind another thread's blocking get. Every call has a
 * deadline: the store's timeout, or a get/wait's own timeout plus RR__STORE_GRACE_MS (the server
 * answers at the timeout; the grace only matters when the master is gone). A connection the master
 * closed marks the whole store lost: later calls fail at once with RR_EPEER instead of retrying. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/fork.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "rendezvous/store.h"
#include "rendezvous/store_proto.h"
#include "rendezvous/store_server.h"
#include "transport/socket.h"

#define RR__POOL_MAX 32 /* concurrent requests one store object may have in flight */

typedef struct rr__tcp_store {
  rr_store base;
  rr__addr addr;
  char where[RR__ADDRSTRLEN + 300]; /* "127.0.0.1:29500" or "node1:29500 (10.0.0.1)" */
  int port;
  uint8_t key[16]; /* the job token's key */
  int have_key;    /* 0: no token, nothing to prove or check */
  rr__server *srv; /* the master's */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int fd[RR__POOL_MAX]; /* -1: no connection in this slot yet */
  unsigned char busy[RR__POOL_MAX];
  int lost; /* the master closed a connection: every later call fails at once */
  char lost_msg[RR__ERRMSG_MAX];
  char goodbye[1025]; /* rr__store_goodbye: what the server leaves its clients when freed */
  int goodbye_status;
  rr__fork_hook fork; /* rr__store_forked */
} rr__tcp_store;

/* fork() without exec (common/fork.h). The pool's lock is held across the fork, so the child
 * sees every slot as it was. The pool's connections are shared with the parent, and two
 * processes writing requests on one connection would garble each other's: the child closes
 * its copies and frees every slot (a request under way belonged to a thread of the parent),
 * so a store call in the child opens a connection of its own. The server, when this process
 * served the store, stays with the parent (store_server.c's hook closes the child's copies of
 * its descriptors): the child forgets it and never stops it. */
static rr__tcp_store *rr__tcp_of_hook(rr__fork_hook *h) {
  return (rr__tcp_store *)(void *)((char *)h - offsetof(rr__tcp_store, fork));
}
static void rr__tcp_fork_prepare(rr__fork_hook *h) {
  pthread_mutex_lock(&rr__tcp_of_hook(h)->lock);
}
static void rr__tcp_fork_parent(rr__fork_hook *h) {
  pthread_mutex_unlock(&rr__tcp_of_hook(h)->lock);
}
static void rr__store_forked(rr__fork_hook *h) {
  rr__tcp_store *s = rr__tcp_of_hook(h);
  for (int i = 0; i < RR__POOL_MAX; i++) {
    if (s->fd[i] >= 0) close(s->fd[i]);
    s->fd[i] = -1;
    s->busy[i] = 0;
  }
  s->srv = NULL;
  pthread_mutex_unlock(&s->lock);
}

/* One handshake request (a single argument) and the header of its reply. */
static int rr__tcp_hs(rr__tcp_store *s, int fd, uint8_t op, int64_t num, const uint8_t *arg,
                      uint32_t len, int64_t deadline, rr__store_hdr *h) {
  uint8_t buf[RR__STORE_HDR + 4 + RR__STORE_NONCE];
  *h = (rr__store_hdr){
      .magic = RR__STORE_REQ_MAGIC, .op = op, .nargs = 1, .body_len = 4 + len, .num = num};
  rr__store_hdr_encode(h, buf);
  rr__put_u32(buf + RR__STORE_HDR, len);
  memcpy(buf + RR__STORE_HDR + 4, arg, len);
  int rc = rr__sock_send_all(fd, buf, RR__STORE_HDR + 4 + len, deadline);
  if (rc == RR_OK) rc = rr__sock_recv_all(fd, buf, RR__STORE_HDR, deadline);
  if (rc != RR_OK)
    return rr__prefix_error(rc, "handshake with the rendezvous store at %s", s->where);
  rr__store_hdr_decode(buf, h);
  if (h->magic != RR__STORE_REP_MAGIC || h->op != op)
    return rr__set_error(RR_EPROTO,
                         "the server at %s is not a ringreduce rendezvous store (its handshake "
                         "reply starts with 0x%08x)",
                         s->where, (unsigned)h->magic);
  if (h->status == RR__SST_FAILED && h->body_len <= 1024) {
    /* The store is giving up and says why (its words, never its bytes). */
    char why[1025];
    rc = rr__sock_recv_all(fd, why, h->body_len, deadline);
    why[rc == RR_OK ? h->body_len : 0] = '\0';
    for (uint32_t i = 0; i < h->body_len && rc == RR_OK; i++)
      if (why[i] < 0x20 || why[i] > 0x7e) why[i] = '?';
    return rr__set_error(RR_EPEER, "the rendezvous store at %s failed: %s", s->where, why);
  }
  return RR_OK;
}

/* The handshake on a fresh connection (store_proto.h): our nonce, the server's nonce and
 * proof, our proof. */
static int rr__tcp_hello(rr__tcp_store *s, int fd, int64_t deadline) {
  uint8_t cn[RR__STORE_NONCE], challenge[RR__STORE_NONCE + RR__STORE_MAC], mac[RR__STORE_MAC];
  if (getrandom(cn, sizeof cn, 0) != (ssize_t)sizeof cn)
    return rr__set_error(RR_ESYS, "getrandom: %s", strerror(errno));
  rr__store_hdr h;
  RR__CHECK(rr__tcp_hs(s, fd, RR__SOP_HELLO, RR__STORE_VERSION, cn, sizeof cn, deadline, &h));
  if (h.status == RR__SST_DENIED)
    return rr__set_error(RR_EPROTO,
                         "the rendezvous store at %s refused this client: it speaks protocol "
                         "version %" PRId64 ", this library %d",
                         s->where, h.num, RR__STORE_VERSION);
  if (h.status != RR__SST_OK || h.body_len != sizeof challenge)
    return rr__set_error(RR_EPROTO,
                         "the rendezvous store at %s answered the handshake with status %u and "
                         "%" PRIu32 " bytes",
                         s->where, (unsigned)h.status, h.body_len);
  int rc = rr__sock_recv_all(fd, challenge, sizeof challenge, deadline);
  if (rc != RR_OK)
    return rr__prefix_error(rc, "handshake with the rendezvous store at %s", s->where);
  rr__store_mac(s->key, 1, cn, challenge, mac);
  if (s->have_key && !rr__store_mac_equal(mac, challenge + RR__STORE_NONCE))
    return rr__set_error(RR_EPROTO,
                         "the rendezvous store at %s cannot prove it holds this job's token "
                         "(another job's store, or RR_JOB_TOKEN differs between the ranks)",
                         s->where);
  rr__store_mac(s->key, 2, cn, challenge, mac);
  RR__CHECK(rr__tcp_hs(s, fd, RR__SOP_AUTH, 0, mac, sizeof mac, deadline, &h));
  if (h.status == RR__SST_DENIED)
    return rr__set_error(RR_EPROTO,
                         "the rendezvous store at %s refused this client: the job token does "
                         "not match (RR_JOB_TOKEN differs between the ranks, or none is set here)",
                         s->where);
  if (h.status != RR__SST_OK || h.body_len != 0)
    return rr__set_error(RR_EPROTO,
                         "the rendezvous store at %s answered the handshake with status %u",
                         s->where, (unsigned)h.status);
  return RR_OK;
}

static int rr__tcp_connect(rr__tcp_store *s, int64_t deadline, int *fd_out) {
  int64_t start = rr__now_ms();
  int fd;
  int rc = rr__sock_connect(&s->addr, deadline, &fd);
  if (rc != RR_OK) {
    /* socket.c says "cannot connect to <addr>: <cause>"; keep the cause only. */
    char cause[RR__ERRMSG_MAX];
    char as[RR__ADDRSTRLEN], pre[RR__ADDRSTRLEN + 32];
    snprintf(pre, sizeof pre, "cannot connect to %s: ", rr__addr_str(&s->addr, as, sizeof as));
    const char *e = rr__error();
    snprintf(cause, sizeof cause, "%s", strncmp(e, pre, strlen(pre)) ? e : e + strlen(pre));
    return rr__set_error(rc, "cannot reach the rendezvous store at %s within %.1f s: %s", s->where,
                         (double)RR__MAX(deadline - start, 0) / 1000, cause);
  }
  rc = rr__sock_tune(fd, 0);
  if (rc == RR_OK) rc = rr__tcp_hello(s, fd, deadline);
  if (rc != RR_OK) {
    close(fd);
    return rc;
  }
  *fd_out = fd;
  return RR_OK;
}

static int rr__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t left = rr__ms_left(deadline_ms);
  ts.tv_sec += left / 1000;
  ts.tv_nsec += (left % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  return pthread_cond_timedwait(cv, mu, &ts);
}

/* Take a connection for one request: an idle one, else a new one, else wait for one. */
static int rr__pool_take(rr__tcp_store *s, int64_t deadline, const char *what, int *slot) {
  pthread_mutex_lock(&s->lock);
  for (;;) {
    if (s->lost) {
      pthread_mutex_unlock(&s->lock);
      return rr__set_error(RR_EPEER, "%s: %s", what, s->lost_msg);
    }
    int idle = -1, empty = -1;
    for (int i = 0; i < RR__POOL_MAX && idle < 0; i++) {
      if (s->busy[i]) continue;
      if (s->fd[i] >= 0)
        idle = i;
      else if (empty < 0)
        empty = i;
    }
    if (idle >= 0) {
      s->busy[idle] = 1;
      pthread_mutex_unlock(&s->lock);
      *slot = idle;
      return RR_OK;
    }
    if (empty >= 0) {
      s->busy[empty] = 1; /* reserved while connecting, outside the lock */
      pthread_mutex_unlock(&s->lock);
      int fd = -1;
      int rc = rr__tcp_connect(s, deadline, &fd);
      pthread_mutex_lock(&s->lock);
      if (rc == RR_OK)
        s->fd[empty] = fd;
      else
        s->busy[empty] = 0;
      pthread_cond_broadcast(&s->cond);
      pthread_mutex_unlock(&s->lock);
      if (rc != RR_OK) return rr__prefix_error(rc, "%s", what);
      *slot = empty;
      return RR_OK;
    }
    if (rr__ms_left(deadline) == 0 ||
        rr__cond_wait_until(&s->cond, &s->lock, deadline) == ETIMEDOUT) {
      pthread_mutex_unlock(&s->lock);
      return rr__set_error(RR_ETIMEDOUT,
                           "%s: all %d connections to the rendezvous store at %s stayed busy", what,
                           RR__POOL_MAX, s->where);
    }
  }
}

/* Give a connection back; `broken`: close it; `lost`: the store is gone (keep the error). */
static void rr__pool_give(rr__tcp_store *s, int slot, int broken, int lost) {
  pthread_mutex_lock(&s->lock);
  if (broken) {
    close(s->fd[slot]);
    s->fd[slot] = -1;
  }
  if (lost && !s->lost) {
    s->lost = 1;
    snprintf(s->lost_msg, sizeof s->lost_msg,
             "the connection to the rendezvous store at %s was "
             "lost earlier: %s",
             s->where, rr__error());
  }
  s->busy[slot] = 0;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

/* One request and its reply. args: nargs (pointer, length); the last argument, when large,
 * is sent from the caller's memory without a copy. *body gets the reply body (GET). */
static int rr__tcp_call(rr__tcp_store *s, const char *what, uint8_t op, int64_t num, uint32_t nargs,
                        const void *const *argp, const size_t *argl, int64_t deadline,
                        rr__store_hdr *rep, void **body, size_t *blen) {
  int slot = -1;
  RR__CHECK(rr__pool_take(s, deadline, what, &slot));
  int fd = s->fd[slot];
  size_t total = 0;
  for (uint32_t i = 0; i < nargs; i++) total += 4 + argl[i];
  size_t tail = nargs && argl[nargs - 1] > 4096 ? argl[nargs - 1] : 0;
  size_t head = RR__STORE_HDR + total - tail;
  uint8_t *buf = malloc(head);
  if (!buf) {
    rr__pool_give(s, slot, 0, 0);
    return rr__set_error(RR_ENOMEM, "%s: out of memory for a request of %zu bytes", what, head);
  }
  rr__store_hdr h = {.magic = RR__STORE_REQ_MAGIC,
                     .op = op,
                     .nargs = nargs,
                     .body_len = (uint32_t)total,
                     .num = num};
  rr__store_hdr_encode(&h, buf);
  size_t o = RR__STORE_HDR;
  for (uint32_t i = 0; i < nargs; i++) {
    rr__put_u32(buf + o, (uint32_t)argl[i]);
    o += 4;
    if (i + 1 == nargs && tail) break;
    if (argl[i]) memcpy(buf + o, argp[i], argl[i]);
    o += argl[i];
  }
  int rc = rr__sock_send_all(fd, buf, head, deadline);
  free(buf);
  if (rc == RR_OK && tail) rc = rr__sock_send_all(fd, argp[nargs - 1], tail, deadline);
  uint8_t rh[RR__STORE_HDR];
  if (rc == RR_OK) rc = rr__sock_recv_all(fd, rh, sizeof rh, deadline);
  if (rc == RR_OK) {
    rr__store_hdr_decode(rh, rep);
    /* op 0 with FAILED: the server's goodbye, sent before our request came (store_proto.h). */
    int goodbye = rep->op == 0 && rep->status == RR__SST_FAILED;
    if (rep->magic != RR__STORE_REP_MAGIC || (rep->op != op && !goodbye) ||
        rep->status > RR__SST_MAX || rep->reserved != 0 || rep->nargs != 0 ||
        rep->body_len > RR__STORE_MAX_VALUE ||
        (rep->status == RR__SST_FAILED && rep->body_len > 1024) ||
        (rep->body_len > 0 && rep->status != RR__SST_FAILED &&
         (op != RR__SOP_GET || rep->status != RR__SST_OK)))
      rc = rr__set_error(RR_EPROTO,
                         "malformed reply (magic 0x%08x, opcode %u, status %u, "
                         "%" PRIu32 " bytes)",
                         (unsigned)rep->magic, (unsigned)rep->op, (unsigned)rep->status,
                         rep->body_len);
  }
  void *got = NULL;
  if (rc == RR_OK && rep->body_len > 0) {
    got = malloc(rep->body_len);
    if (!got) {
      rc =
          rr__set_error(RR_ENOMEM, "out of memory for a value of %" PRIu32 " bytes", rep->body_len);
    } else {
      rc = rr__sock_recv_all(fd, got, rep->body_len, deadline);
      if (rc != RR_OK) {
        free(got);
        got = NULL;
      }
    }
  }
  if (rc == RR_OK && rep->status == RR__SST_FAILED) {
    /* The server gives up and says why; print its words, never its bytes. */
    char why[1025];
    size_t n = rep->body_len;
    if (n) memcpy(why, got, n);
    why[n] = '\0';
    for (size_t i = 0; i < n; i++)
      if (why[i] < 0x20 || why[i] > 0x7e) why[i] = '?';
    free(got);
    rc = rr__set_error(RR_EPEER, "%s: the rendezvous store at %s failed: %s", what, s->where, why);
    rr__pool_give(s, slot, 1, 1);
    /* A goodbye may say the group's settings disagree: every rank reports that alike. */
    if (rep->num == RR_EMISMATCH) {
      char m[RR__ERRMSG_MAX];
      snprintf(m, sizeof m, "%s", rr__error());
      return rr__set_error(RR_EMISMATCH, "%s", m);
    }
    return rc;
  }
  if (rc == RR_OK && body)
    *body = got;
  else
    free(got); /* only a GET asks for a body; no other reply may carry one (checked) */
  if (rc == RR_OK) {
    if (blen) *blen = rep->body_len;
    rr__pool_give(s, slot, 0, 0);
    return RR_OK;
  }
  /* The connection is out of step now (a reply may still come): close it. */
  const char *failure = s->srv ? rr__srv_failure(s->srv) : NULL;
  if (failure && (rc == RR_EPEER || rc == RR_ETIMEDOUT)) {
    rc = rr__set_error(RR_ESYS, "%s: %s", what, failure);
  } else if (rc == RR_EPEER) {
    char cause[256];
    snprintf(cause, sizeof cause, "%s", rr__error());
    rr__set_error(RR_EPEER, "%s: the rendezvous store at %s closed the connection (%s)", what,
                  s->where, cause);
  } else if (rc == RR_ETIMEDOUT)
    rr__set_error(RR_ETIMEDOUT,
                  "%s: no reply from the rendezvous store at %s in time; the "
                  "connection was closed",
                  what, s->where);
  else
    rr__prefix_error(rc, "%s: talking to the rendezvous store at %s", what, s->where);
  rr__pool_give(s, slot, 1, rc == RR_EPEER || rc == RR_EPROTO || failure != NULL);
  return rc;
}

#define RR__TCP(s) ((rr__tcp_store *)(s))

static int rr__tcp_set(rr_store *st, const char *key, const void *value, size_t len) {
  rr__tcp_store *s = RR__TCP(st);
  char what[200], ks[160];
  snprintf(what, sizeof what, "set of key %s", rr__store_key_str(key, strlen(key), ks, sizeof ks));
  const void *argp[2] = {key, value};
  size_t argl[2] = {strlen(key), len};
  rr__store_hdr rep;
  return rr__tcp_call(s, what, RR__SOP_SET, 0, 2, argp, argl, rr__deadline(st->timeout_ms), &rep,
                      NULL, NULL);
}

static int rr__tcp_get(rr_store *st, const char *key, int64_t timeout_ms, void **value,
                       size_t *len) {
  rr__tcp_store *s = RR__TCP(st);
  char what[200], ks[160];
  snprintf(what, sizeof what, "get of key %s", rr__store_key_str(key, strlen(key), ks, sizeof ks));
  const void *argp[1] = {key};
  size_t argl[1] = {strlen(key)};
  rr__store_hdr rep;
  void *body = NULL;
  size_t blen = 0;
  RR__CHECK(rr__tcp_call(s, what, RR__SOP_GET, timeout_ms, 1, argp, argl,
                         rr__deadline(timeout_ms + RR__STORE_GRACE_MS), &rep, &body, &blen));
  if (rep.status == RR__SST_TIMEOUT)
    return rr__set_error(RR_ETIMEDOUT,
                         "%s from the rendezvous store at %s timed out after %.1f s: no process "
                         "set it",
                         what, s->where, (double)timeout_ms / 1000);
  if (rep.status != RR__SST_OK) {
    free(body);
    return rr__set_error(RR_EPROTO, "%s: the rendezvous store at %s answered status %u", what,
                         s->where, (unsigned)rep.status);
  }
  *value = body;
  *len = blen;
  return RR_OK;
}

static int rr__tcp_add(rr_store *st, const char *key, int64_t delta, int64_t *result) {
  rr__tcp_store *s = RR__TCP(st);
  char what[200], ks[160];
  snprintf(what, sizeof what, "add of %" PRId64 " to key %s", delta,
           rr__store_key_str(key, strlen(key), ks, sizeof ks));
  const void *argp[1] = {key};
  size_t argl[1] = {strlen(key)};
  rr__store_hdr rep;
  RR__CHECK(rr__tcp_call(s, what, RR__SOP_ADD, delta, 1, argp, argl, rr__deadline(st->timeout_ms),
                         &rep, NULL, NULL));
  if (rep.status == RR__SST_NOTINT)
    return rr__set_error(RR_EINVAL,
                         "%s at %s: the value stored is not an integer (add needs "
                         "ASCII decimal)",
                         what, s->where);
  if (rep.status == RR__SST_OVERFLOW)
    return rr__set_error(RR_EINVAL, "%s at %s: the sum overflows a 64-bit integer", what, s->where);
  if (rep.status != RR__SST_OK)
    return rr__set_error(RR_EPROTO, "%s: the rendezvous store at %s answered status %u", what,
                         s->where, (unsigned)rep.status);
  *result = rep.num;
  return RR_OK;
}

/* WAIT and CHECK send a list of keys. */
static int rr__tcp_keys(rr__tcp_store *s, uint8_t op, const char *what, const char *const *keys,
                        int nkeys, int64_t num, int64_t deadline, rr__store_hdr *rep) {
  const void **argp = malloc((size_t)nkeys * sizeof *argp);
  size_t *argl = malloc((size_t)nkeys * sizeof *argl);
  int rc;
  if (!argp || !argl) {
    rc = rr__set_error(RR_ENOMEM, "%s: out of memory", what);
  } else {
    for (int i = 0; i < nkeys; i++) {
      argp[i] = keys[i];
      argl[i] = strlen(keys[i]);
    }
    rc = rr__tcp_call(s, what, op, num, (uint32_t)nkeys, argp, argl, deadline, rep, NULL, NULL);
  }
  free(argp);
  free(argl);
  return rc;
}

static int rr__tcp_wait(rr_store *st, const char *const *keys, int nkeys, int64_t timeout_ms) {
  rr__tcp_store *s = RR__TCP(st);
  char what[240], ks[160];
  snprintf(what, sizeof what, "wait for %d key%s (%s%s)", nkeys, nkeys == 1 ? "" : "s",
           rr__store_key_str(keys[0], strlen(keys[0]), ks, sizeof ks), nkeys > 1 ? ", ..." : "");
  rr__store_hdr rep;
  RR__CHECK(rr__tcp_keys(s, RR__SOP_WAIT, what, keys, nkeys, timeout_ms,
                         rr__deadline(timeout_ms + RR__STORE_GRACE_MS), &rep));
  if (rep.status == RR__SST_TIMEOUT) {
    int miss = rep.num >= 0 && rep.num < nkeys ? (int)rep.num : 0;
    return rr__set_error(RR_ETIMEDOUT,
                         "%s on the rendezvous store at %s timed out after %.1f s: key %s "
                         "(number %d) was never set",
                         what, s->where, (double)timeout_ms / 1000,
                         rr__store_key_str(keys[miss], strlen(keys[miss]), ks, sizeof ks), miss);
  }
  if (rep.status != RR__SST_OK)
    return rr__set_error(RR_EPROTO, "%s: the rendezvous store at %s answered status %u", what,
                         s->where, (unsigned)rep.status);
  return RR_OK;
}

static int rr__tcp_check(rr_store *st, const char *const *keys, int nkeys, int *exists) {
  rr__tcp_store *s = RR__TCP(st);
  char what[240], ks[160];
  snprintf(what, sizeof what, "check of %d key%s (%s%s)", nkeys, nkeys == 1 ? "" : "s",
           rr__store_key_str(keys[0], strlen(keys[0]), ks, sizeof ks), nkeys > 1 ? ", ..." : "");
  rr__store_hdr rep;
  RR__CHECK(
      rr__tcp_keys(s, RR__SOP_CHECK, what, keys, nkeys, 0, rr__deadline(st->timeout_ms), &rep));
  *exists = rep.num != 0;
  return RR_OK;
}

static int rr__tcp_del(rr_store *st, const char *key, int *deleted) {
  rr__tcp_store *s = RR__TCP(st);
  char what[200], ks[160];
  snprintf(what, sizeof what, "delete of key %s",
           rr__store_key_str(key, strlen(key), ks, sizeof ks));
  const void *argp[1] = {key};
  size_t argl[1] = {strlen(key)};
  rr__store_hdr rep;
  RR__CHECK(rr__tcp_call(s, what, RR__SOP_DELETE, 0, 1, argp, argl, rr__deadline(st->timeout_ms),
                         &rep, NULL, NULL));
  *deleted = rep.num != 0;
  return RR_OK;
}

static int rr__tcp_port(const rr_store *st) {
  return ((const rr__tcp_store *)st)->port;
}

static void rr__tcp_free(rr_store *st) {
  rr__tcp_store *s = RR__TCP(st);
  rr__fork_unwatch(&s->fork);
  for (int i = 0; i < RR__POOL_MAX; i++)
    if (s->fd[i] >= 0) close(s->fd[i]);
  if (s->srv && s->goodbye[0])
    rr__srv_stop_because(s->srv, s->goodbye, s->goodbye_status);
  else if (s->srv)
    rr__srv_stop(s->srv);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static const rr__store_ops rr__tcp_ops = {
    .set = rr__tcp_set,
    .get = rr__tcp_get,
    .add = rr__tcp_add,
    .wait = rr__tcp_wait,
    .check = rr__tcp_check,
    .del = rr__tcp_del,
    .port = rr__tcp_port,
    .free = rr__tcp_free,
};

void rr__store_goodbye(rr_store *store, const char *why, int status) {
  if (!store || store->ops != &rr__tcp_ops) return;
  rr__tcp_store *s = RR__TCP(store);
  snprintf(s->goodbye, sizeof s->goodbye, "%s", why);
  s->goodbye_status = status;
}

/* A listening socket on `port` that a launcher bound before starting this process and
 * handed down (RR_STORE_LISTEN_FD, rr_spawn does): serving on it leaves no moment in which
 * another process could take the port between the launcher's choice and this bind. Taken
 * once per process, and only when it really is a listener on that port; -1 otherwise. */
static int rr__inherited_listener(int port) {
  static atomic_int taken;
  const char *v = getenv("RR_STORE_LISTEN_FD");
  if (!v || !*v || port <= 0 || atomic_exchange(&taken, 1)) return -1;
  char *end;
  long fd = strtol(v, &end, 10);
  int listening = 0;
  socklen_t ol = sizeof listening;
  rr__addr a;
  memset(&a, 0, sizeof a);
  a.len = sizeof a.ss;
  if (*end || fd < 3 || fd > 1 << 20 ||
      getsockopt((int)fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) != 0 || !listening ||
      getsockname((int)fd, (struct sockaddr *)&a.ss, &a.len) != 0 || rr__addr_port(&a) != port) {
    RR__LOG_INFO(RR__SUB_STORE, "RR_STORE_LISTEN_FD=%s is not a listener on port %d; binding it", v,
                 port);
    return -1;
  }
  if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0) return -1;
  return (int)fd;
}

/* lfd: for a master, a listener on the port to serve on (taken over, also on failure);
 * -2: the launcher's (rr__inherited_listener), if any. */
static int rr__store_tcp_make(const char *host, int port, int is_master, int lfd,
                              int64_t timeout_ms, const char *token, rr_store **store) {
  *store = NULL;
  int rc = RR_OK;
  if (token && strlen(token) > RR__STORE_MAX_TOKEN)
    rc = rr__set_error(RR_EINVAL,
                       "rr_store_tcp: a job token of %zu bytes is over the limit "
                       "of %d",
                       strlen(token), RR__STORE_MAX_TOKEN);
  rr__tcp_store *s = rc == RR_OK ? rr__calloc(1, sizeof *s) : NULL;
  if (!s) {
    if (lfd >= 0) close(lfd);
    return rc != RR_OK ? rc : RR_ENOMEM;
  }
  s->base.ops = &rr__tcp_ops;
  s->base.timeout_ms = timeout_ms;
  for (int i = 0; i < RR__POOL_MAX; i++) s->fd[i] = -1;
  pthread_condattr_t ca;
  int e = pthread_condattr_init(&ca);
  if (e == 0) e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (e == 0) e = pthread_cond_init(&s->cond, &ca);
  if (e == 0) pthread_condattr_destroy(&ca);
  if (e == 0 && (e = pthread_mutex_init(&s->lock, NULL)) != 0) pthread_cond_destroy(&s->cond);
  if (e != 0) {
    free(s);
    if (lfd >= 0) close(lfd);
    return rr__set_error(RR_ESYS, "rr_store_tcp: cannot make a mutex / condition: %s", strerror(e));
  }
  if (token && *token) {
    rr__token_key(token, s->key);
    s->have_key = 1;
  }
  s->fork.prepare = rr__tcp_fork_prepare;
  s->fork.parent = rr__tcp_fork_parent;
  s->fork.child = rr__store_forked;
  rc = rr__fork_watch(&s->fork);
  if (rc != RR_OK) goto fail;
  rc = rr__addr_resolve(host, port, &s->addr);
  if (rc != RR_OK) {
    rr__prefix_error(rc, "cannot reach the rendezvous store at %s:%d", host, port);
    goto fail;
  }
  if (is_master) {
    /* Serve on the wildcard address of the host's family, as torch's TCPStore. */
    rr__addr any;
    rr__addr_any(s->addr.ss.ss_family, port, &any);
    if (lfd == -2) lfd = rr__inherited_listener(port);
    int owned = lfd;
    lfd = -1; /* the server's from here, also when it fails */
    RR__CHECK_GOTO(rr__srv_start(&any, timeout_ms, token, owned, &s->srv), rc, fail);
    rr__addr_set_port(&s->addr, rr__srv_port(s->srv));
  }
  s->port = rr__addr_port(&s->addr);
  char as[RR__ADDRSTRLEN];
  rr__addr_str(&s->addr, as, sizeof as);
  /* Name the host as given, and the address it resolved to when that differs. */
  char ip[RR__ADDRSTRLEN];
  snprintf(ip, sizeof ip, "%s", as);
  char *colon = strrchr(ip, ':');
  if (colon) *colon = '\0';
  size_t il = strlen(ip);
  if (strcmp(host, ip) == 0 ||
      (ip[0] == '[' && strlen(host) == il - 2 && strncmp(host, ip + 1, il - 2) == 0))
    snprintf(s->where, sizeof s->where, "%s", as);
  else
    snprintf(s->where, sizeof s->where, "%.200s:%d (%s)", host, s->port, ip);
  int64_t deadline = rr__deadline(timeout_ms);
  RR__CHECK_GOTO(rr__tcp_connect(s, deadline, &s->fd[0]), rc, fail);
  RR__LOG_INFO(RR__SUB_STORE, "connected to the rendezvous store at %s%s", s->where,
               is_master ? " (served by this process)" : "");
  *store = &s->base;
  return RR_OK;
fail:
  if (lfd >= 0) close(lfd);
  rr__tcp_free(&s->base);
  return rc;
}

int rr__store_tcp_open(const char *host, int port, int is_master, int64_t timeout_ms,
                       const char *token, rr_store **store) {
  return rr__store_tcp_make(host, port, is_master, -2, timeout_ms, token, store);
}

int rr__store_tcp_serve_fd(const char *host, int port, int lfd, int64_t timeout_ms,
                           const char *token, rr_store **store) {
  return rr__store_tcp_make(host, port, 1, lfd, timeout_ms, token, store);
}
