/* The TCP store's server, as in torch's TCPStore: the master runs it as a thread holding
 * the keys, and every process, the master included, reaches it through the client in
 * store_client.c, speaking the protocol of store_proto.h. Only the client starts and stops
 * it (store_server.h).
 *
 * One thread, one poll() over a wake-up eventfd, the listening socket and every
 * client. Clients are non-blocking and each has a small state machine: read a header, read
 * its body (buffer grown as bytes arrive, never to more than the header's checked length),
 * run the request, write the reply (queued; POLLOUT when the socket is full). A GET or WAIT
 * whose keys are missing parks the client with its own deadline: each SET/ADD re-checks the
 * parked clients, the poll timeout is the nearest deadline, and at that deadline the client
 * gets RR__SST_TIMEOUT. So no client ever blocks another. Anything malformed, a client that
 * leaves mid-request, or one that stalls mid-request (or does not read its reply) longer
 * than the store's timeout, closes that client only. rr_store_free on the master writes the
 * eventfd, joins the thread and closes every socket.
 * (Over 800 lines: one poll loop, its per-client state machine with the handshake that guards
 * it, and the parked waits that need both, read best in one file; the protocol's bytes are in
 * store_proto.h.)
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/fork.h"
#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "rendezvous/store.h"
#include "rendezvous/store_proto.h"
#include "rendezvous/store_server.h"
#include "transport/socket.h"

#define RR__SRV_BACKLOG 1024
#define RR__SRV_BODY_CHUNK (64u << 10) /* first body allocation; doubles as bytes arrive */
#define RR__SRV_ACCEPT_BURST 64
/* Clients run the handshake (HELLO, AUTH) as soon as they connect. A connection that has
 * not finished it this long after connecting, whatever it sent meanwhile, or beyond this
 * many such connections, is a stranger holding a descriptor and is dropped. Before the
 * handshake a connection may send only the two handshake messages, each of its exact size,
 * so it can never make the server buffer more than their few dozen bytes. */
#define RR__SRV_HELLO_MS 10000
#define RR__SRV_MAX_UNGREETED 128
/* How long accept may keep failing for lack of descriptors before the store gives up: long
 * enough for a passing shortage, short enough that a job started with a low `ulimit -n`
 * fails at once, naming the cause, rather than at its timeout blaming a rank that never
 * got in. */
#define RR__SRV_STARVE_MS 2000
/* After giving up, how long the server still answers (with the reason) before it closes. */
#define RR__SRV_WIND_DOWN_MS 1000

typedef struct rr__sarg {
  const uint8_t *p;
  uint32_t len;
} rr__sarg;

typedef struct rr__sconn {
  int fd;         /* -1 once closed; the slot is removed at the end of the loop */
  int challenged; /* HELLO answered with our nonce: AUTH must come next */
  int greeted;    /* AUTH accepted: ordinary requests from now on */
  uint8_t cnonce[RR__STORE_NONCE], snonce[RR__STORE_NONCE];
  int64_t connected_ms;
  char peer[RR__ADDRSTRLEN];
  /* The request being read. */
  uint8_t hdr[RR__STORE_HDR];
  size_t hdr_got;
  rr__store_hdr h;
  uint8_t *body;
  size_t body_cap, body_got;
  int64_t req_start_ms; /* when its first byte came */
  /* A GET / WAIT parked until its keys exist. */
  int waiting;
  rr__sarg *args;
  uint32_t nargs, next; /* keys [0, next) were seen */
  int64_t deadline_ms;
  /* The reply being written. */
  uint8_t *out;
  size_t out_len, out_off;
  int64_t out_start_ms;
  int close_after_write;
} rr__sconn;

struct rr__server {
  int lfd, wakefd;
  pthread_t thread;
  int64_t idle_ms; /* how long a request may take to arrive / a reply to be read */
  uint8_t key[16]; /* the job token's key (all zero without one) */
  int have_key;    /* 0: accept any client */
  int port;
  rr__kv *kv;
  rr__sconn **conns;
  size_t nconns, conns_cap;
  struct pollfd *pfds; /* conns_cap + 2 */
  int64_t accept_pause_until;
  int64_t starved_since; /* accepts failing for lack of descriptors since (0: they work) */
  char failure[256];     /* why the store gave up (rr__srv_failure), once `failed` is set */
  atomic_int failed;
  int64_t failed_at;  /* when the server began to wind down after failing (0: serving) */
  rr__fork_hook fork; /* rr__srv_forked */
};

/* In a child forked without exec (common/fork.h): the server thread stayed in the parent;
 * let go of its listener, its eventfd and every connection it accepted, so the child keeps
 * none of them open. The connections are found by their port, not in conns, which the
 * thread may have been changing at the fork. rr__srv_stop in the child then finds no
 * eventfd and leaves the server be (nothing to join). */
static void rr__srv_forked(rr__fork_hook *h) {
  rr__server *srv = (rr__server *)(void *)((char *)h - offsetof(rr__server, fork));
  if (srv->lfd >= 0) close(srv->lfd);
  if (srv->wakefd >= 0) close(srv->wakefd);
  srv->lfd = srv->wakefd = -1;
  (void)rr__sock_close_port_forked(srv->port); /* -1 without /proc: nothing more to do */
}

/* Close a client; `abort`: with a reset, dropping whatever the kernel still queues for it
 * (a client that broke the rules gets no more of the server's memory or time). */
static void rr__srv_close(rr__sconn *c, int abort) {
  if (c->fd >= 0 && abort) {
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg); /* else a normal close */
  }
  if (c->fd >= 0) close(c->fd); /* nothing useful to do about a failing close */
  c->fd = -1;
  free(c->body);
  free(c->args);
  free(c->out);
  c->body = NULL;
  c->args = NULL;
  c->out = NULL;
}

/* Close one client, saying why: WARN for misbehaviour (closed with a reset), INFO / TRACE
 * for an ordinary goodbye. */
static void rr__srv_drop(rr__server *srv, rr__sconn *c, int level, const char *fmt, ...)
    RR__PRINTF(4, 5);
static void rr__srv_drop(rr__server *srv, rr__sconn *c, int level, const char *fmt, ...) {
  if (c->fd < 0) return;
  if (rr__log_enabled(level, RR__SUB_STORE)) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    rr__log(level, RR__SUB_STORE, __FILE__, __LINE__,
            "rendezvous store on port %d: closing the connection of client %s: %s", srv->port,
            c->peer, why);
  }
  rr__srv_close(c, level == RR__LEVEL_WARN);
}

/* Forget the request just answered, ready for the next one. */
static void rr__srv_reset_request(rr__sconn *c) {
  free(c->body);
  free(c->args);
  c->body = NULL;
  c->args = NULL;
  c->body_cap = c->body_got = 0;
  c->hdr_got = 0;
  c->nargs = c->next = 0;
  c->waiting = 0;
  c->req_start_ms = 0;
}

/* Write what is queued; stop at EAGAIN (POLLOUT resumes it). */
static void rr__srv_flush(rr__server *srv, rr__sconn *c) {
  while (c->out && c->out_off < c->out_len) {
    ssize_t w =
        send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c->out_off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    rr__srv_drop(srv, c, errno == EPIPE || errno == ECONNRESET ? RR__LEVEL_TRACE : RR__LEVEL_WARN,
                 "send: %s", w < 0 ? strerror(errno) : "wrote nothing");
    return;
  }
  free(c->out);
  c->out = NULL;
  c->out_len = c->out_off = 0;
  /* A refused client was warned about already; close gently so it reads why. */
  if (c->close_after_write) rr__srv_drop(srv, c, RR__LEVEL_INFO, "refused its handshake");
}

/* Answer the current request (the request's buffers are freed: the reply is a copy). */
static void rr__srv_reply(rr__server *srv, rr__sconn *c, uint8_t status, int64_t num,
                          const void *body, size_t blen) {
  rr__store_hdr h = {.magic = RR__STORE_REP_MAGIC,
                     .op = c->h.op,
                     .status = status,
                     .body_len = (uint32_t)blen,
                     .num = num};
  rr__srv_reset_request(c);
  c->out = malloc(RR__STORE_HDR + blen);
  if (!c->out) {
    rr__srv_drop(srv, c, RR__LEVEL_WARN, "out of memory for a reply of %zu bytes", blen);
    return;
  }
  rr__store_hdr_encode(&h, c->out);
  if (blen) memcpy(c->out + RR__STORE_HDR, body, blen);
  c->out_len = RR__STORE_HDR + blen;
  c->out_off = 0;
  c->out_start_ms = rr__now_ms();
  rr__srv_flush(srv, c);
}

/* The goodbye (store_proto.h): FAILED with op 0, unasked, which waits in the client's socket
 * and answers whatever it asks next; num is 0 or RR_EMISMATCH. */
static void rr__srv_goodbye(rr__server *srv, rr__sconn *c, const char *why, int status) {
  c->h.op = 0;
  rr__srv_reply(srv, c, RR__SST_FAILED, status, why, RR__MIN(strlen(why), (size_t)1024));
}

/* Advance a parked request; answer it when every key exists. */
static void rr__srv_try_wake(rr__server *srv, rr__sconn *c) {
  while (c->next < c->nargs && rr__kv_get(srv->kv, c->args[c->next].p, c->args[c->next].len))
    c->next++;
  if (c->next < c->nargs) return;
  if (c->h.op == RR__SOP_GET) {
    const rr__kv_val *v = rr__kv_get(srv->kv, c->args[0].p, c->args[0].len);
    rr__srv_reply(srv, c, RR__SST_OK, 0, v->data, v->len);
  } else {
    rr__srv_reply(srv, c, RR__SST_OK, 0, NULL, 0);
  }
}

static void rr__srv_wake_all(rr__server *srv) {
  for (size_t i = 0; i < srv->nconns; i++) {
    rr__sconn *c = srv->conns[i];
    if (c->fd >= 0 && c->waiting) rr__srv_try_wake(srv, c);
  }
}

static int rr__key_ok(const rr__sarg *a) {
  return a->len >= 1 && a->len <= RR__STORE_MAX_KEY && !memchr(a->p, 0, a->len);
}

/* Check a header as soon as it is complete: NULL if acceptable, else why not. */
static const char *rr__srv_bad_header(const rr__sconn *c, char *why, size_t n) {
  const rr__store_hdr *h = &c->h;
  if (h->magic != RR__STORE_REQ_MAGIC)
    snprintf(why, n, "bad magic 0x%08x (not a ringreduce store client?)", (unsigned)h->magic);
  else if (h->op < RR__SOP_HELLO || h->op > RR__SOP_MAX)
    snprintf(why, n, "unknown opcode %u", (unsigned)h->op);
  else if (h->status != 0 || h->reserved != 0)
    snprintf(why, n, "non-zero reserved header bytes");
  else if (h->body_len > RR__STORE_MAX_BODY)
    snprintf(why, n, "request body of %" PRIu32 " bytes is over the limit of %u", h->body_len,
             (unsigned)RR__STORE_MAX_BODY);
  else if (h->nargs > RR__STORE_MAX_KEYS || (uint64_t)h->nargs * 4 > h->body_len)
    snprintf(why, n, "%" PRIu32 " arguments do not fit a body of %" PRIu32 " bytes", h->nargs,
             h->body_len);
  else if (!c->greeted && h->op != (c->challenged ? RR__SOP_AUTH : RR__SOP_HELLO))
    snprintf(why, n, "request (opcode %u) before the handshake", (unsigned)h->op);
  else if (!c->greeted &&
           (h->nargs != 1 || h->body_len != 4u + (c->challenged ? RR__STORE_MAC : RR__STORE_NONCE)))
    /* Checked on the header, before any of the body is read or buffered. */
    snprintf(why, n, "a handshake message of %" PRIu32 " bytes in %" PRIu32 " argument(s)",
             h->body_len, h->nargs);
  else if (c->greeted && (h->op == RR__SOP_HELLO || h->op == RR__SOP_AUTH))
    snprintf(why, n, "a second handshake");
  else
    return NULL;
  return why;
}

/* Split the body into arguments and check them against the opcode. */
static const char *rr__srv_parse(rr__sconn *c, char *why, size_t n) {
  const rr__store_hdr *h = &c->h;
  uint32_t na = h->nargs;
  c->args = calloc(na ? na : 1, sizeof *c->args);
  if (!c->args) return snprintf(why, n, "out of memory for %" PRIu32 " arguments", na), why;
  size_t off = 0, len = h->body_len;
  for (uint32_t i = 0; i < na; i++) {
    if (len - off < 4) return snprintf(why, n, "argument %" PRIu32 " overruns the body", i), why;
    uint32_t al = rr__get_u32(c->body + off);
    off += 4;
    if (al > len - off)
      return snprintf(why, n, "argument %" PRIu32 " of %" PRIu32 " bytes overruns the body", i, al),
             why;
    c->args[i].p = c->body + off;
    c->args[i].len = al;
    off += al;
  }
  c->nargs = na;
  if (off != len) return snprintf(why, n, "%zu bytes after the last argument", len - off), why;
  int arity_ok = 1, keys_from = 0, keys_to = (int)na;
  switch (h->op) {
    case RR__SOP_HELLO:
    case RR__SOP_AUTH:
      arity_ok = na == 1;
      keys_to = 0;
      if (arity_ok && c->args[0].len != (h->op == RR__SOP_HELLO ? RR__STORE_NONCE : RR__STORE_MAC))
        return snprintf(why, n, "a handshake argument of %" PRIu32 " bytes", c->args[0].len), why;
      break;
    case RR__SOP_SET:
      arity_ok = na == 2;
      keys_to = 1;
      if (arity_ok && c->args[1].len > RR__STORE_MAX_VALUE)
        return snprintf(why, n, "a value of %" PRIu32 " bytes", c->args[1].len), why;
      break;
    case RR__SOP_GET:
    case RR__SOP_ADD:
    case RR__SOP_DELETE:
      arity_ok = na == 1;
      break;
    default: /* WAIT, CHECK */
      arity_ok = na >= 1;
      break;
  }
  if (!arity_ok)
    return snprintf(why, n, "opcode %u with %" PRIu32 " arguments", (unsigned)h->op, na), why;
  for (int i = keys_from; i < keys_to; i++)
    if (!rr__key_ok(&c->args[i]))
      return snprintf(why, n, "key %d is empty, longer than %d bytes or holds a NUL", i,
                      RR__STORE_MAX_KEY),
             why;
  if ((h->op == RR__SOP_GET || h->op == RR__SOP_WAIT) && h->num <= 0)
    return snprintf(why, n, "timeout of %" PRId64 " ms", h->num), why;
  return NULL;
}

/* Run a complete request. */
static void rr__srv_request(rr__server *srv, rr__sconn *c) {
  char why[160];
  if (srv->failed_at) { /* winding down: whatever is asked, say why and close */
    c->close_after_write = 1;
    rr__srv_reply(srv, c, RR__SST_FAILED, 0, srv->failure, strlen(srv->failure));
    return;
  }
  if (rr__srv_parse(c, why, sizeof why)) {
    rr__srv_drop(srv, c, RR__LEVEL_WARN, "malformed request: %s", why);
    return;
  }
  const rr__sarg *a = c->args;
  RR__LOG_TRACE(RR__SUB_STORE,
                "rendezvous store on port %d: client %s: opcode %u, %" PRIu32
                " argument(s), %" PRIu32 " bytes",
                srv->port, c->peer, (unsigned)c->h.op, c->nargs, c->h.body_len);
  switch (c->h.op) {
    case RR__SOP_HELLO: {
      if (c->h.num != RR__STORE_VERSION) {
        RR__LOG_WARN(RR__SUB_STORE,
                     "rendezvous store on port %d: refusing client %s: it speaks protocol "
                     "version %" PRId64 ", this store %d",
                     srv->port, c->peer, c->h.num, RR__STORE_VERSION);
        c->close_after_write = 1;
        rr__srv_reply(srv, c, RR__SST_DENIED, RR__STORE_VERSION, NULL, 0);
        return;
      }
      uint8_t challenge[RR__STORE_NONCE + RR__STORE_MAC];
      memcpy(c->cnonce, a[0].p, RR__STORE_NONCE);
      if (getrandom(c->snonce, RR__STORE_NONCE, 0) != RR__STORE_NONCE) {
        rr__srv_drop(srv, c, RR__LEVEL_WARN, "getrandom: %s", strerror(errno));
        return;
      }
      memcpy(challenge, c->snonce, RR__STORE_NONCE);
      rr__store_mac(srv->key, 1, c->cnonce, c->snonce, challenge + RR__STORE_NONCE);
      c->challenged = 1;
      rr__srv_reply(srv, c, RR__SST_OK, RR__STORE_VERSION, challenge, sizeof challenge);
      return;
    }
    case RR__SOP_AUTH: {
      uint8_t want[RR__STORE_MAC];
      rr__store_mac(srv->key, 2, c->cnonce, c->snonce, want);
      if (srv->have_key && !rr__store_mac_equal(a[0].p, want)) {
        RR__LOG_WARN(RR__SUB_STORE,
                     "rendezvous store on port %d: refusing client %s: it does not prove "
                     "this job's token",
                     srv->port, c->peer);
        c->close_after_write = 1;
        rr__srv_reply(srv, c, RR__SST_DENIED, 0, NULL, 0);
        return;
      }
      c->greeted = 1;
      rr__srv_reply(srv, c, RR__SST_OK, 0, NULL, 0);
      return;
    }
    case RR__SOP_SET: {
      void *v = NULL;
      if (a[1].len) {
        v = malloc(a[1].len);
        if (!v) {
          rr__srv_drop(srv, c, RR__LEVEL_WARN, "out of memory for a value of %" PRIu32 " bytes",
                       a[1].len);
          return;
        }
        memcpy(v, a[1].p, a[1].len);
      }
      if (rr__kv_set(srv->kv, a[0].p, a[0].len, v, a[1].len) != RR_OK) {
        rr__srv_drop(srv, c, RR__LEVEL_WARN, "out of memory storing a key");
        return;
      }
      rr__srv_reply(srv, c, RR__SST_OK, 0, NULL, 0);
      rr__srv_wake_all(srv);
      return;
    }
    case RR__SOP_ADD: {
      int64_t result = 0;
      char text[24];
      int rc = rr__store_add_value(rr__kv_get(srv->kv, a[0].p, a[0].len), c->h.num, &result, text);
      if (rc != RR__ADD_OK) {
        rr__srv_reply(srv, c, rc == RR__ADD_NOTINT ? RR__SST_NOTINT : RR__SST_OVERFLOW, 0, NULL, 0);
        return;
      }
      size_t tl = strlen(text);
      char *v = malloc(tl);
      if (v) memcpy(v, text, tl);
      if (!v || rr__kv_set(srv->kv, a[0].p, a[0].len, v, tl) != RR_OK) {
        rr__srv_drop(srv, c, RR__LEVEL_WARN, "out of memory storing a key");
        return;
      }
      rr__srv_reply(srv, c, RR__SST_OK, result, NULL, 0);
      rr__srv_wake_all(srv);
      return;
    }
    case RR__SOP_CHECK: {
      int all = 1;
      for (uint32_t i = 0; i < c->nargs && all; i++)
        all = rr__kv_get(srv->kv, a[i].p, a[i].len) != NULL;
      rr__srv_reply(srv, c, RR__SST_OK, all, NULL, 0);
      return;
    }
    case RR__SOP_DELETE: {
      int deleted = rr__kv_del(srv->kv, a[0].p, a[0].len);
      rr__srv_reply(srv, c, RR__SST_OK, deleted, NULL, 0);
      return;
    }
    default: /* GET, WAIT: answer now or park until the keys exist or the deadline */
      c->waiting = 1;
      c->next = 0;
      c->deadline_ms = rr__deadline(c->h.num);
      rr__srv_try_wake(srv, c);
      return;
  }
}

/* Read what the client sent, up to the end of one request. */
static void rr__srv_readable(rr__server *srv, rr__sconn *c) {
  char why[160];
  while (c->fd >= 0 && !c->out && !c->waiting) {
    uint8_t *dst;
    size_t want;
    if (c->hdr_got < RR__STORE_HDR) {
      dst = c->hdr + c->hdr_got;
      want = RR__STORE_HDR - c->hdr_got;
    } else {
      if (c->body_got == c->body_cap) {
        size_t cap =
            RR__MIN((size_t)c->h.body_len, RR__MAX((size_t)RR__SRV_BODY_CHUNK, 2 * c->body_cap));
        uint8_t *nb = realloc(c->body, cap);
        if (!nb) {
          rr__srv_drop(srv, c, RR__LEVEL_WARN, "out of memory for a request of %" PRIu32 " bytes",
                       c->h.body_len);
          return;
        }
        c->body = nb;
        c->body_cap = cap;
      }
      dst = c->body + c->body_got;
      want = c->body_cap - c->body_got;
    }
    ssize_t r = recv(c->fd, dst, want, MSG_DONTWAIT);
    if (r == 0) {
      if (c->hdr_got > 0)
        rr__srv_drop(srv, c, RR__LEVEL_WARN,
                     "it disconnected in the middle of a request (%zu header and %zu body bytes "
                     "of %" PRIu32 " received)",
                     c->hdr_got, c->body_got, c->h.body_len);
      else
        rr__srv_drop(srv, c, RR__LEVEL_TRACE, "it disconnected");
      return;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      rr__srv_drop(srv, c, errno == ECONNRESET ? RR__LEVEL_TRACE : RR__LEVEL_WARN, "recv: %s",
                   strerror(errno));
      return;
    }
    if (c->hdr_got == 0) c->req_start_ms = rr__now_ms();
    if (c->hdr_got < RR__STORE_HDR) {
      c->hdr_got += (size_t)r;
      if (c->hdr_got < RR__STORE_HDR) continue;
      rr__store_hdr_decode(c->hdr, &c->h);
      if (rr__srv_bad_header(c, why, sizeof why)) {
        rr__srv_drop(srv, c, RR__LEVEL_WARN, "malformed request: %s", why);
        return;
      }
    } else {
      c->body_got += (size_t)r;
    }
    if (c->body_got == c->h.body_len) {
      rr__srv_request(srv, c);
      return; /* one request per wake-up: fair to the others */
    }
  }
}

static int rr__srv_add_conn(rr__server *srv, int fd, const rr__addr *from) {
  if (srv->nconns == srv->conns_cap) {
    size_t cap = srv->conns_cap * 2;
    rr__sconn **nc = realloc(srv->conns, cap * sizeof *nc);
    if (!nc) return -1;
    srv->conns = nc;
    struct pollfd *np = realloc(srv->pfds, (cap + 2) * sizeof *np);
    if (!np) return -1;
    srv->pfds = np;
    srv->conns_cap = cap;
  }
  rr__sconn *c = calloc(1, sizeof *c);
  if (!c) return -1;
  c->fd = fd;
  c->connected_ms = rr__now_ms();
  rr__addr_str(from, c->peer, sizeof c->peer);
  /* Too many connections without a finished handshake: one makes room (a flood must not
   * exhaust rank 0's descriptors while the job runs). The victim is the one that has shown
   * least: one that sent nothing before one that sent part of a HELLO, before one already
   * answered (a real client is in that state for one round trip); the oldest of its kind,
   * since a real client's handshake is younger than any stranger's wait. */
  size_t silent = 0, victim = SIZE_MAX;
  int victim_shown = 3;
  for (size_t i = 0; i < srv->nconns; i++) {
    rr__sconn *o = srv->conns[i];
    if (o->fd < 0 || o->greeted) continue;
    /* At the limit, first let go of peers already gone (a hangup or reset not read yet): a
     * burst of short-lived strangers must not push out a live client's handshake. */
    char b;
    int full = srv->nconns >= RR__SRV_MAX_UNGREETED;
    ssize_t r = full ? recv(o->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) : 1;
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      rr__srv_drop(srv, o, RR__LEVEL_TRACE, "it hung up before its handshake");
      continue;
    }
    silent++;
    int shown = o->challenged ? 2 : o->hdr_got > 0 ? 1 : 0;
    if (shown < victim_shown ||
        (shown == victim_shown && o->connected_ms < srv->conns[victim]->connected_ms))
      victim = i, victim_shown = shown;
  }
  if (silent >= RR__SRV_MAX_UNGREETED && victim != SIZE_MAX)
    rr__srv_drop(srv, srv->conns[victim], RR__LEVEL_WARN,
                 "%zu connections have not finished the handshake; dropping one that %s", silent,
                 victim_shown == 0 ? "sent nothing" : "stalled in the handshake");
  srv->conns[srv->nconns++] = c;
  RR__LOG_TRACE(RR__SUB_STORE, "rendezvous store on port %d: client %s connected", srv->port,
                c->peer);
  return 0;
}

static void rr__srv_accept(rr__server *srv) {
  for (int i = 0; i < RR__SRV_ACCEPT_BURST; i++) {
    rr__addr from;
    memset(&from, 0, sizeof from);
    from.len = sizeof from.ss;
    int fd =
        accept4(srv->lfd, (struct sockaddr *)&from.ss, &from.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      /* Out of descriptors or memory: the listener stays readable, so stop polling it for a
       * moment rather than spin; past RR__SRV_STARVE_MS give up (rr__srv_failure). */
      int e = errno;
      int64_t now = rr__now_ms();
      if (e == EMFILE || e == ENFILE) {
        if (!srv->starved_since) srv->starved_since = now;
        if (!srv->failed_at && now - srv->starved_since >= RR__SRV_STARVE_MS) {
          struct rlimit rl;
          char limit[64] = "";
          if (e == EMFILE && getrlimit(RLIMIT_NOFILE, &rl) == 0)
            snprintf(limit, sizeof limit, " (it may open %llu: ulimit -n)",
                     (unsigned long long)rl.rlim_cur);
          snprintf(srv->failure, sizeof srv->failure,
                   "the process serving the rendezvous store on port %d ran out of file "
                   "descriptors: accept: %s%s",
                   srv->port, strerror(e), limit);
          RR__LOG_WARN(RR__SUB_STORE, "%s; closing the store", srv->failure);
          atomic_store(&srv->failed, 1);
          return;
        }
      }
      RR__LOG_WARN(RR__SUB_STORE, "rendezvous store on port %d: accept: %s; pausing accepts 100 ms",
                   srv->port, strerror(e));
      srv->accept_pause_until = now + 100;
      return;
    }
    srv->starved_since = 0;
    if (rr__sock_tune(fd, 0) != RR_OK || rr__srv_add_conn(srv, fd, &from) != 0) {
      RR__LOG_WARN(RR__SUB_STORE, "rendezvous store on port %d: dropping a new client: %s",
                   srv->port, rr__error()[0] ? rr__error() : "out of memory");
      close(fd);
    }
  }
}

/* Answer parked requests whose deadline passed, drop stalled clients; returns the poll
 * timeout (ms, -1: none) until the next such deadline. */
static int rr__srv_timers(rr__server *srv) {
  int64_t now = rr__now_ms(), next = INT64_MAX;
  for (size_t i = 0; i < srv->nconns; i++) {
    rr__sconn *c = srv->conns[i];
    if (c->fd < 0) continue;
    int64_t due;
    if (c->waiting) {
      if (c->deadline_ms <= now) {
        rr__srv_reply(srv, c, RR__SST_TIMEOUT, c->next, NULL, 0);
        if (c->fd < 0 || !c->out) continue;
      } else {
        next = RR__MIN(next, c->deadline_ms);
        continue;
      }
    }
    if (!c->greeted) {
      /* One deadline for the whole handshake: sending a byte or a header does not buy a
       * stranger more time. */
      int64_t limit = RR__MIN(srv->idle_ms, RR__SRV_HELLO_MS);
      due = c->connected_ms + limit;
      if (due <= now) {
        rr__srv_drop(srv, c, RR__LEVEL_WARN,
                     "it did not complete the handshake within %.1f s of connecting",
                     (double)limit / 1000);
        continue;
      }
    } else if (c->out) {
      due = c->out_start_ms + srv->idle_ms;
      if (due <= now) {
        rr__srv_drop(srv, c, RR__LEVEL_WARN, "it has not read its reply for %.1f s",
                     (double)srv->idle_ms / 1000);
        continue;
      }
    } else if (c->hdr_got > 0) {
      due = c->req_start_ms + srv->idle_ms;
      if (due <= now) {
        rr__srv_drop(srv, c, RR__LEVEL_WARN,
                     "it sent only part of a request (%zu header and %zu body bytes) in %.1f s",
                     c->hdr_got, c->body_got, (double)srv->idle_ms / 1000);
        continue;
      }
    } else {
      continue;
    }
    next = RR__MIN(next, due);
  }
  if (srv->accept_pause_until > now) next = RR__MIN(next, srv->accept_pause_until);
  if (next == INT64_MAX) return -1;
  return (int)RR__MIN(next - now, 1 << 30);
}

static void *rr__srv_main(void *arg) {
  rr__server *srv = arg;
  for (;;) {
    int timeout = rr__srv_timers(srv);
    /* Remove closed clients. */
    size_t k = 0;
    for (size_t i = 0; i < srv->nconns; i++) {
      if (srv->conns[i]->fd >= 0)
        srv->conns[k++] = srv->conns[i];
      else
        free(srv->conns[i]);
    }
    srv->nconns = k;
    struct pollfd *p = srv->pfds;
    p[0] = (struct pollfd){.fd = srv->wakefd, .events = POLLIN};
    int paused = srv->accept_pause_until > rr__now_ms();
    p[1] = (struct pollfd){.fd = paused ? -1 : srv->lfd, .events = POLLIN};
    if (srv->failed_at) timeout = timeout < 0 ? 100 : RR__MIN(timeout, 100);
    for (size_t i = 0; i < srv->nconns; i++) {
      rr__sconn *c = srv->conns[i];
      short ev = c->out ? POLLOUT : c->waiting ? POLLRDHUP : POLLIN;
      p[i + 2] = (struct pollfd){.fd = c->fd, .events = ev};
    }
    size_t np = srv->nconns + 2;
    int rc = poll(p, np, timeout);
    if (rc < 0) {
      if (errno == EINTR) continue;
      RR__LOG_WARN(RR__SUB_STORE, "rendezvous store on port %d: poll: %s", srv->port,
                   strerror(errno));
      usleep(100 * 1000);
      continue;
    }
    if (p[0].revents) break; /* rr_store_free */
    for (size_t i = 0; i < np - 2; i++) {
      rr__sconn *c = srv->conns[i];
      short re = p[i + 2].revents;
      if (!re || c->fd < 0) continue;
      if (re & POLLNVAL) {
        rr__srv_drop(srv, c, RR__LEVEL_WARN, "invalid descriptor");
      } else if (c->out) {
        rr__srv_flush(srv, c);
      } else if (c->waiting) {
        if (re & (POLLRDHUP | POLLHUP | POLLERR))
          rr__srv_drop(srv, c, RR__LEVEL_TRACE, "it disconnected while waiting for keys");
      } else {
        rr__srv_readable(srv, c);
      }
    }
    if (p[1].revents & POLLIN) rr__srv_accept(srv);
    if (atomic_load(&srv->failed) && !srv->failed_at) {
      /* Wind down for a moment: every request that is waiting or comes now, a new client's
       * HELLO included, is answered with the reason and its connection closed, so each
       * rank's error names the cause rather than a closed connection. The descriptors so
       * freed let the clients still in the listen queue in, to hear it too. */
      srv->failed_at = rr__now_ms();
      for (size_t i = 0; i < srv->nconns; i++) {
        rr__sconn *c = srv->conns[i];
        if (c->fd >= 0 && c->waiting) {
          c->close_after_write = 1;
          rr__srv_reply(srv, c, RR__SST_FAILED, 0, srv->failure, strlen(srv->failure));
        } else if (c->fd >= 0 && c->greeted && !c->out && c->hdr_got == 0) {
          /* Idle: its client may ask next only after the wind-down (a loaded machine, a
           * poll's pause), and would then meet a reset. */
          c->close_after_write = 1;
          rr__srv_goodbye(srv, c, srv->failure, 0);
        }
      }
    }
    if (srv->failed_at && rr__now_ms() - srv->failed_at >= RR__SRV_WIND_DOWN_MS) break;
  }
  return NULL;
}

static void rr__srv_destroy(rr__server *srv) {
  if (!srv) return;
  rr__fork_unwatch(&srv->fork);
  for (size_t i = 0; i < srv->nconns; i++) {
    rr__srv_close(srv->conns[i], 0);
    free(srv->conns[i]);
  }
  free(srv->conns);
  free(srv->pfds);
  if (srv->lfd >= 0) close(srv->lfd);
  if (srv->wakefd >= 0) close(srv->wakefd);
  rr__kv_free(srv->kv);
  free(srv);
}

int rr__srv_start(const rr__addr *bind_addr, int64_t idle_ms, const char *token, int lfd,
                  rr__server **out) {
  rr__server *srv = rr__calloc(1, sizeof *srv);
  if (!srv) {
    if (lfd >= 0) close(lfd);
    return RR_ENOMEM;
  }
  srv->lfd = srv->wakefd = -1;
  srv->idle_ms = idle_ms;
  rr__addr bound;
  int rc = RR_OK;
  if (lfd >= 0) {
    srv->lfd = lfd;
    memset(&bound, 0, sizeof bound);
    bound.len = sizeof bound.ss;
    if (getsockname(lfd, (struct sockaddr *)&bound.ss, &bound.len) != 0)
      rc = rr__set_error(RR_ESYS, "getsockname of the inherited listener: %s", strerror(errno));
  } else {
    rc = rr__sock_listen(bind_addr, RR__SRV_BACKLOG, 1, &srv->lfd, &bound);
  }
  if (rc != RR_OK) {
    rr__srv_destroy(srv);
    return rr__prefix_error(rc, "cannot serve the rendezvous store on port %d",
                            rr__addr_port(bind_addr));
  }
  srv->port = rr__addr_port(&bound);
  RR__CHECK_GOTO(rr__sock_nonblock(srv->lfd, 1), rc, fail);
  srv->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (srv->wakefd < 0) {
    rc = rr__set_error(RR_ESYS, "eventfd: %s", strerror(errno));
    goto fail;
  }
  RR__CHECK_GOTO(rr__kv_new(&srv->kv), rc, fail);
  if (token && *token) {
    rr__token_key(token, srv->key);
    srv->have_key = 1;
  }
  srv->conns_cap = 16;
  srv->conns = rr__calloc(srv->conns_cap, sizeof *srv->conns);
  srv->pfds = rr__calloc(srv->conns_cap + 2, sizeof *srv->pfds);
  if (!srv->conns || !srv->pfds) {
    rc = RR_ENOMEM;
    goto fail;
  }
  srv->fork.child = rr__srv_forked;
  RR__CHECK_GOTO(rr__fork_watch(&srv->fork), rc, fail);
  /* Signals are for the application's threads, not this one. */
  sigset_t all, old;
  sigfillset(&all);
  int e = pthread_sigmask(SIG_SETMASK, &all, &old);
  if (e == 0) {
    e = pthread_create(&srv->thread, NULL, rr__srv_main, srv);
    int e2 = pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e == 0 && e2 != 0) RR__LOG_WARN(RR__SUB_STORE, "pthread_sigmask: %s", strerror(e2));
  }
  if (e != 0) {
    rc = rr__set_error(RR_ESYS, "cannot start the rendezvous store's server thread: %s",
                       strerror(e));
    goto fail;
  }
  RR__LOG_INFO(RR__SUB_STORE, "rendezvous store serving on port %d", srv->port);
  *out = srv;
  return RR_OK;
fail:
  rr__srv_destroy(srv);
  return rr__prefix_error(rc, "cannot start the rendezvous store server");
}

int rr__srv_port(const rr__server *srv) {
  return srv->port;
}

const char *rr__srv_failure(rr__server *srv) {
  return atomic_load(&srv->failed) ? srv->failure : NULL;
}

void rr__srv_stop(rr__server *srv) {
  rr__srv_stop_because(srv, NULL, 0);
}

void rr__srv_stop_because(rr__server *srv, const char *why, int status) {
  uint64_t one = 1;
  ssize_t w;
  do w = write(srv->wakefd, &one, sizeof one);
  while (w < 0 && errno == EINTR);
  if (w != (ssize_t)sizeof one) {
    /* Cannot happen with a fresh eventfd; leaking the thread beats hanging in join. */
    RR__LOG_WARN(RR__SUB_STORE,
                 "rendezvous store on port %d: cannot wake the server thread (%s); "
                 "leaving it running",
                 srv->port, w < 0 ? strerror(errno) : "short write");
    return;
  }
  int e = pthread_join(srv->thread, NULL);
  if (e != 0) RR__LOG_WARN(RR__SUB_STORE, "pthread_join: %s", strerror(e));
  RR__LOG_INFO(RR__SUB_STORE, "rendezvous store on port %d stopped", srv->port);
  /* The thread is gone: its connections are ours. A goodbye goes only where no reply is
   * half sent (it would land inside it); one send, never waited for. */
  for (size_t i = 0; why && e == 0 && i < srv->nconns; i++) {
    rr__sconn *c = srv->conns[i];
    if (c->fd < 0 || !c->greeted || c->out) continue;
    rr__srv_goodbye(srv, c, why, status == RR_EMISMATCH ? status : 0);
  }
  rr__srv_destroy(srv);
}
