/* rrun's notices: telling the rendezvous that a worker died (issue 38 item 6).
 *
 * Under --keep-going a worker that dies before every rank reached the rendezvous used to leave
 * the others waiting for it until RR_TIMEOUT, although rrun saw the death at once. So rrun,
 * which holds the job token, connects to the job's store (env://: the one its rank 0 serves
 * at MASTER_ADDR:MASTER_PORT) as an authenticated client, as the ranks do, and for the dead
 * worker's rank R and generation G:
 *
 *   1. adds RR__SEAT_DECLARED to rr/seat/R.G. The store's answer says whether the worker had
 *      taken its seat, i.e. got as far as publishing its record (rendezvous/notice.h): it is
 *      dead, so that can no longer change, and the one store orders its add and ours;
 *   2. sets rr/dead/R to "gen=G seat=S inplace=I how=<its death>" with a MAC keyed with the
 *      token. A rank waiting for R's record (rendezvous/bootstrap.c) then fails at once,
 *      naming R and how it died, or, when I is 1, keeps waiting for the replacement;
 *   3. with --replace, starts the replacement: in R's place, before the group is formed
 *      (RANK=R, RR_RANK_GENERATION=G+1, a plain init), when the worker had not taken its
 *      seat; else as a newcomer that joins the running group (RR_GROW_JOIN=1), as before.
 *
 * rrun does not link the library; it speaks the store's wire protocol itself
 * (rendezvous/store_proto.h, header only) with SipHash from common/siphash.c. Each exchange is
 * one short blocking connection with a deadline of RRUN_NOTICE_PATIENCE_MS: a store on this
 * host or the job's network answers in a millisecond, and workers' output meanwhile waits in
 * its pipes. A store that is not up yet (rank 0 still starting) is tried again every
 * RRUN_NOTICE_RETRY_MS from the poll loop, the death kept pending, for as long as a rendezvous
 * could still be waiting (RR_TIMEOUT). What answers at the address but is not this job's store
 * (another job's, which cannot prove the token; torch's TCPStore, which speaks another
 * protocol and closes the connection) ends the notices of this attempt: the others then learn
 * of the death as before, and a replacement joins the running group.
 *
 * Rank 0's death is never told: the store dies with it, and the ranks connected to it see that
 * at once. A rank not connected yet would retry to connect until its timeout, so rrun then
 * serves a stand-in at the store's address (a child process, blocking and simple, that dies
 * with rrun and is killed when the attempt ends): it proves the token like the store and
 * answers every client with the store's goodbye, "rank 0, which served it, died (...)". A
 * newcomer that joined a running group is never told about either: it has no seat here.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "rendezvous/notice.h"
#include "rendezvous/store_proto.h"
#include "rrun.h"

#define RRUN_NOTICE_PATIENCE_MS 1500 /* one exchange with the store, connection included */
#define RRUN_NOTICE_RETRY_MS 100     /* between tries while the store is not up */

static double mono_ms(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) abort(); /* cannot fail on Linux */
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void rr__notice_setup(launcher *L) {
  rr__notifier *n = &L->nt;
  const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  const char *token = getenv("RR_JOB_TOKEN"), *timeout = getenv("RR_TIMEOUT");
  size_t slots = (size_t)L->opt->nproc + (size_t)L->opt->replace;
  n->pending = calloc(slots, sizeof *n->pending);
  n->give_up_at = calloc(slots, sizeof *n->give_up_at);
  if (!n->pending || !n->give_up_at || !addr || !port) return; /* no notices: as before */
  snprintf(n->host, sizeof n->host, "%s", addr);
  snprintf(n->port, sizeof n->port, "%s", port);
  rr__token_key(token, n->key); /* all zeros without a token, as the library's */
  /* A rendezvous waits at most its timeout: past that, nobody reads a notice. The library's
   * default when RR_TIMEOUT is unset or unreadable (it then refuses to start anyway). */
  char *end = NULL;
  double t = timeout ? strtod(timeout, &end) : 0;
  n->patience_ms = timeout && end != timeout && *end == '\0' && t > 0 ? t * 1e3 : 1800e3;
  n->ready = true;
}

void rr__notice_attempt(launcher *L) {
  L->nt.npending = 0;
  L->nt.gone = false;
}

/* Gives up every pending death: each is replaced (if at all) as a newcomer. */
static void drop_pending(launcher *L) {
  rr__notifier *n = &L->nt;
  while (n->npending > 0) rr__replace_dead(L, &L->w[n->pending[--n->npending]], false);
}

/* Waits for fd to be ready for `events` until deadline (mono_ms); 0 or -1 with errno. */
static int wait_fd(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - mono_ms();
    if (left <= 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, (int)left + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r > 0) return 0;
  }
}

static int send_all(int fd, const uint8_t *buf, size_t len, double deadline) {
  while (len > 0) {
    ssize_t w = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (wait_fd(fd, POLLOUT, deadline) != 0) return -1;
      continue;
    }
    if (w < 0) return -1;
    buf += w;
    len -= (size_t)w;
  }
  return 0;
}

static int recv_all(int fd, uint8_t *buf, size_t len, double deadline) {
  while (len > 0) {
    ssize_t r = recv(fd, buf, len, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (wait_fd(fd, POLLIN, deadline) != 0) return -1;
      continue;
    }
    if (r == 0) errno = ECONNRESET; /* closed: by a server that does not speak this protocol */
    if (r <= 0) return -1;
    buf += r;
    len -= (size_t)r;
  }
  return 0;
}

/* Why an exchange with the store failed. `foreign`: what answers at the address is known not
 * to be this job's store (worth saying: the ranks will wait); else the connection ended or
 * failed, which is what a store going away with a failing job does, and also what torch's
 * TCPStore does with bytes it cannot read (nothing to say about either). */
typedef struct {
  const char *text;
  bool foreign;
} failure;

static int fail_with(failure *f, const char *text, bool foreign) {
  f->text = text;
  f->foreign = foreign;
  return -1;
}

/* One request with up to two arguments; its reply's header in *rep (a reply body is read only
 * for HELLO: `body`, exactly body_len bytes). 0, or -1 with *f set. */
static int request(int fd, uint8_t op, int64_t num, const void *a0, uint32_t l0, const void *a1,
                   uint32_t l1, rr__store_hdr *rep, uint8_t *body, uint32_t body_len,
                   double deadline, failure *f) {
  uint32_t nargs = a1 ? 2 : 1, blen = 4 + l0 + (a1 ? 4 + l1 : 0);
  uint8_t *msg = malloc(RR__STORE_HDR + blen);
  if (!msg) return fail_with(f, "out of memory", false);
  rr__store_hdr h = {
      .magic = RR__STORE_REQ_MAGIC, .op = op, .nargs = nargs, .body_len = blen, .num = num};
  rr__store_hdr_encode(&h, msg);
  uint8_t *p = msg + RR__STORE_HDR;
  rr__put_u32(p, l0);
  memcpy(p + 4, a0, l0);
  if (a1) {
    rr__put_u32(p + 4 + l0, l1);
    memcpy(p + 8 + l0, a1, l1);
  }
  int rc = send_all(fd, msg, RR__STORE_HDR + blen, deadline);
  free(msg);
  uint8_t hdr[RR__STORE_HDR];
  if (rc == 0) rc = recv_all(fd, hdr, sizeof hdr, deadline);
  if (rc != 0) return fail_with(f, strerror(errno), false);
  rr__store_hdr_decode(hdr, rep);
  if (rep->magic != RR__STORE_REP_MAGIC || (rep->op != op && rep->op != 0))
    return fail_with(f, "what answers there is not a ringreduce rendezvous store", true);
  if (rep->status == RR__SST_FAILED) return fail_with(f, "the store is giving up", false);
  if (rep->status == RR__SST_DENIED)
    return fail_with(f,
                     "the store refused this client (another job's store, another "
                     "RR_JOB_TOKEN, or another version of the library)",
                     true);
  if (rep->status != RR__SST_OK) return fail_with(f, "the store refused the request", true);
  if (body_len != rep->body_len || (body && recv_all(fd, body, body_len, deadline) != 0))
    return fail_with(f, "the store's reply has an unexpected size", true);
  return 0;
}

enum tell_result { TELL_DONE, TELL_LATER, TELL_GONE };

/* Connects to the store; -1 with errno when nothing accepts there (yet). */
static int connect_store(const rr__notifier *n, double deadline) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  int e = getaddrinfo(n->host, n->port, &hints, &ai);
  if (e != 0) {
    errno = e == EAI_SYSTEM ? errno : EHOSTUNREACH;
    return -1;
  }
  int fd = -1, err = ECONNREFUSED;
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) == 0) {
      socklen_t el = sizeof err;
      err = 0;
      rc = getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0 ? 0 : -1;
      if (rc != 0 && err == 0) err = errno;
    } else if (rc != 0) {
      err = errno;
    }
    if (rc != 0) {
      (void)close(fd); /* a socket that never connected: nothing to lose */
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) errno = err;
  return fd;
}

/* The handshake of store_proto.h: both sides prove the job token over fresh nonces. */
static int handshake(const rr__notifier *n, int fd, double deadline, failure *f) {
  uint8_t cn[RR__STORE_NONCE], chal[RR__STORE_NONCE + RR__STORE_MAC], mac[RR__STORE_MAC];
  if (getrandom(cn, sizeof cn, 0) != (ssize_t)sizeof cn)
    return fail_with(f, strerror(errno), false);
  rr__store_hdr rep;
  if (request(fd, RR__SOP_HELLO, RR__STORE_VERSION, cn, sizeof cn, NULL, 0, &rep, chal, sizeof chal,
              deadline, f) != 0)
    return -1;
  /* A store that cannot prove the token is not this job's: a notice there would be believed
   * by nobody, and is nobody else's business. */
  rr__store_mac(n->key, 1, cn, chal, mac);
  if (!rr__store_mac_equal(mac, chal + RR__STORE_NONCE))
    return fail_with(f,
                     "the store there cannot prove it holds this job's RR_JOB_TOKEN (another "
                     "job's store?)",
                     true);
  rr__store_mac(n->key, 2, cn, chal, mac);
  return request(fd, RR__SOP_AUTH, 0, mac, sizeof mac, NULL, 0, &rep, NULL, 0, deadline, f);
}

/* Tells the store about the death of worker w (how: "killed by signal SIGKILL (9)"):
 * declares its seat, then writes the notice; *inplace says whether a replacement takes its
 * place (decided here, between the two, because the notice must say so). */
static enum tell_result tell(launcher *L, const worker *w, const char *how, bool *inplace,
                             failure *why) {
  rr__notifier *n = &L->nt;
  double deadline = mono_ms() + RRUN_NOTICE_PATIENCE_MS;
  int fd = connect_store(n, deadline);
  if (fd < 0) {
    fail_with(why, strerror(errno), false);
    return TELL_LATER;
  }
  enum tell_result res = TELL_GONE;
  char key[48], text[RR__NOTICE_MAX], value[RR__NOTICE_MAX + 32];
  rr__store_hdr rep;
  if (handshake(n, fd, deadline, why) != 0) goto out;
  snprintf(key, sizeof key, RR__NOTICE_SEAT_KEY, w->rank, w->gen);
  if (request(fd, RR__SOP_ADD, RR__SEAT_DECLARED, key, (uint32_t)strlen(key), NULL, 0, &rep, NULL,
              0, deadline, why) != 0)
    goto out;
  /* Exactly RR__SEAT_DECLARED: the worker never took its seat, so it never published a record
   * that a rank could have read: a replacement can publish in its name. */
  int64_t seat = rep.num - RR__SEAT_DECLARED;
  *inplace = seat == 0 && L->replaced < L->opt->replace && L->live > 0 && !L->stopping;
  int len = snprintf(text, sizeof text, "gen=%d seat=%lld inplace=%d how=%.*s", w->gen,
                     (long long)seat, *inplace, RR__NOTICE_HOW_MAX - 1, how);
  snprintf(value, sizeof value, "%s mac=%016llx", text,
           (unsigned long long)rr__notice_mac(n->key, w->rank, text));
  snprintf(key, sizeof key, RR__NOTICE_DEAD_KEY, w->rank);
  if (len < 0 || request(fd, RR__SOP_SET, 0, key, (uint32_t)strlen(key), value,
                         (uint32_t)strlen(value), &rep, NULL, 0, deadline, why) != 0) {
    *inplace = false;
    goto out;
  }
  res = TELL_DONE;
  if (seat == 0)
    rr__say("rank %d died before joining the rendezvous; told the other ranks (store at %s:%s)",
            w->rank, n->host, n->port);
out:
  if (close(fd) != 0) rr__say("close: %s", strerror(errno));
  return res;
}

/* Tries to tell every pending death, in order, as far as the store lets it now. */
static void tell_pending(launcher *L) {
  rr__notifier *n = &L->nt;
  while (n->npending > 0) {
    worker *w = &L->w[n->pending[0]];
    char how[RR__NOTICE_HOW_MAX];
    rr__describe_status(w->status, how, sizeof how);
    failure why = {"", false};
    bool inplace = false;
    enum tell_result r = tell(L, w, how, &inplace, &why);
    if (r == TELL_LATER && mono_ms() < n->give_up_at[0]) {
      n->retry_at = mono_ms() + RRUN_NOTICE_RETRY_MS;
      return;
    }
    memmove(n->pending, n->pending + 1, (size_t)(n->npending - 1) * sizeof *n->pending);
    memmove(n->give_up_at, n->give_up_at + 1, (size_t)(n->npending - 1) * sizeof *n->give_up_at);
    n->npending--;
    /* Nothing to say when the store went away: a job whose rank 0 gives up. */
    if (r == TELL_LATER || why.foreign)
      rr__say(
          "cannot tell the rendezvous at %s:%s that rank %d died: %s%s; a rank still "
          "waiting for it learns of it only at its timeout",
          n->host, n->port, w->rank, why.text,
          r == TELL_LATER ? " (for as long as a rendezvous waits)" : "");
    if (r == TELL_GONE) {
      n->gone = true;
      drop_pending(L);
    }
    rr__replace_dead(L, w, inplace);
  }
}

void rr__notice_death(launcher *L, worker *w) {
  rr__notifier *n = &L->nt;
  if (!n->ready || n->gone) {
    rr__replace_dead(L, w, false);
    return;
  }
  if (n->npending == 0) n->retry_at = 0;
  n->give_up_at[n->npending] = mono_ms() + n->patience_ms;
  n->pending[n->npending++] = (int)(w - L->w);
  if (n->npending == 1) tell_pending(L); /* else it waits behind the first, in order */
}

int rr__notice_timeout_ms(const launcher *L) {
  if (L->nt.npending == 0) return -1;
  double left = L->nt.retry_at - mono_ms();
  return left <= 0 ? 0 : (int)left + 1;
}

void rr__notice_retry(launcher *L) {
  if (L->nt.npending > 0 && mono_ms() >= L->nt.retry_at) tell_pending(L);
}

/* ------------------------------------------------------------------------------------------
 * Rank 0's stand-in: a store that only says why there is no store.
 */

/* The server's side of the handshake (store_proto.h), then the goodbye: FAILED with op 0,
 * sent unasked, which a client takes as the answer to its next request. The rank gets it only
 * after this side proved the job token, so a stranger's stand-in at the address (one that
 * took the port first) cannot pass off such words as the job's. */
static void stand_in_serve(const unsigned char key[16], int fd, const char *text) {
  double deadline = mono_ms() + RRUN_NOTICE_PATIENCE_MS;
  uint8_t hello[RR__STORE_HDR + 4 + RR__STORE_NONCE], auth[RR__STORE_HDR + 4 + RR__STORE_MAC];
  uint8_t out[RR__STORE_HDR + RR__STORE_NONCE + RR__STORE_MAC], mac[RR__STORE_MAC];
  rr__store_hdr h;
  if (recv_all(fd, hello, sizeof hello, deadline) != 0) return;
  rr__store_hdr_decode(hello, &h);
  if (h.magic != RR__STORE_REQ_MAGIC || h.op != RR__SOP_HELLO || h.nargs != 1 ||
      h.body_len != 4 + RR__STORE_NONCE || rr__get_u32(hello + RR__STORE_HDR) != RR__STORE_NONCE ||
      h.num != RR__STORE_VERSION)
    return; /* not a client of this store's version: nothing it could read */
  const uint8_t *cn = hello + RR__STORE_HDR + 4;
  uint8_t *sn = out + RR__STORE_HDR;
  if (getrandom(sn, RR__STORE_NONCE, 0) != RR__STORE_NONCE) return;
  rr__store_mac(key, 1, cn, sn, sn + RR__STORE_NONCE);
  h = (rr__store_hdr){.magic = RR__STORE_REP_MAGIC,
                      .op = RR__SOP_HELLO,
                      .status = RR__SST_OK,
                      .body_len = RR__STORE_NONCE + RR__STORE_MAC,
                      .num = RR__STORE_VERSION};
  rr__store_hdr_encode(&h, out);
  if (send_all(fd, out, sizeof out, deadline) != 0) return;
  if (recv_all(fd, auth, sizeof auth, deadline) != 0) return;
  rr__store_hdr_decode(auth, &h);
  rr__store_mac(key, 2, cn, sn, mac);
  int ok = h.magic == RR__STORE_REQ_MAGIC && h.op == RR__SOP_AUTH && h.nargs == 1 &&
           h.body_len == 4 + RR__STORE_MAC && rr__get_u32(auth + RR__STORE_HDR) == RR__STORE_MAC &&
           rr__store_mac_equal(mac, auth + RR__STORE_HDR + 4);
  h = (rr__store_hdr){
      .magic = RR__STORE_REP_MAGIC, .op = RR__SOP_AUTH, .status = ok ? RR__SST_OK : RR__SST_DENIED};
  rr__store_hdr_encode(&h, out);
  if (send_all(fd, out, RR__STORE_HDR, deadline) != 0 || !ok) return;
  size_t tl = strlen(text);
  h = (rr__store_hdr){
      .magic = RR__STORE_REP_MAGIC, .op = 0, .status = RR__SST_FAILED, .body_len = (uint32_t)tl};
  rr__store_hdr_encode(&h, out);
  if (send_all(fd, out, RR__STORE_HDR, deadline) != 0 ||
      send_all(fd, (const uint8_t *)text, tl, deadline) != 0)
    return;
  /* Closing with the client's request unread would reset the connection, which can cost it
   * the goodbye: let it read, and close once it has (it closes a store that gave up). */
  if (shutdown(fd, SHUT_WR) != 0) return;
  uint8_t sink[512];
  while (recv_all(fd, sink, sizeof sink, deadline) == 0) {
  }
}

static _Noreturn void stand_in_main(const unsigned char key[16], int lfd, pid_t parent,
                                    const char *text) {
  /* Dies with rrun; holds nothing of rrun's but the listener (an inherited pipe would keep a
   * reader of rrun's output waiting, the keeper's socket its EOF). */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != parent) _exit(1);
  if (lfd != 3 && dup2(lfd, 3) != 3) _exit(1);
  closefrom(4);
  for (;;) {
    int c = accept4(3, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0 && (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE))
      continue;
    if (c < 0) _exit(1);
    stand_in_serve(key, c, text);
    (void)close(c); /* a connection that is done either way */
  }
}

/* A listener on the store's port, on the wildcard address of its family, as the library's
 * store serves; -1 with errno. */
static int stand_in_listen(const rr__notifier *n) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  int e = getaddrinfo(n->host, n->port, &hints, &ai);
  if (e != 0) {
    errno = e == EAI_SYSTEM ? errno : EHOSTUNREACH;
    return -1;
  }
  struct sockaddr_storage any;
  socklen_t len;
  memset(&any, 0, sizeof any);
  int family = ai->ai_family;
  if (family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&any;
    *a = *(const struct sockaddr_in6 *)ai->ai_addr;
    a->sin6_addr = in6addr_any;
    len = sizeof *a;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&any;
    *a = *(const struct sockaddr_in *)ai->ai_addr;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof *a;
  }
  freeaddrinfo(ai);
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd < 0) return -1;
  /* The dead store's connections linger in TIME_WAIT on this port: bind past them. */
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, (struct sockaddr *)&any, len) != 0 || listen(fd, 128) != 0) {
    int err = errno;
    (void)close(fd); /* never served anything */
    errno = err;
    return -1;
  }
  return fd;
}

void rr__notice_rank0_gone(launcher *L, const worker *w, bool stand_in) {
  rr__notifier *n = &L->nt;
  bool was_gone = n->gone;
  n->gone = true; /* the store went with rank 0: no notice can be written any more */
  drop_pending(L);
  if (!stand_in || !n->ready || was_gone || n->tomb_pid > 0) return;
  char how[RR__NOTICE_HOW_MAX], text[256];
  rr__describe_status(w->status, how, sizeof how);
  snprintf(text, sizeof text, "rank 0, which served it, died (%s, rrun says)", how);
  int lfd = stand_in_listen(n);
  if (lfd < 0) {
    rr__say(
        "cannot answer at %s:%s in place of rank 0's store: %s; a rank that has not "
        "reached the store yet waits for it until its timeout",
        n->host, n->port, strerror(errno));
    return;
  }
  pid_t parent = getpid(), pid = fork();
  if (pid < 0) rr__say("fork: %s", strerror(errno));
  if (pid == 0) stand_in_main(n->key, lfd, parent, text);
  if (pid > 0) n->tomb_pid = pid;
  if (close(lfd) != 0) rr__say("close: %s", strerror(errno));
}

void rr__notice_attempt_end(launcher *L) {
  rr__notifier *n = &L->nt;
  n->npending = 0;
  if (n->tomb_pid <= 0) return;
  /* Still rrun's unreaped child (reap() clears tomb_pid when it collects it): the pid is
   * surely this process. The next attempt's rank 0 needs the port. */
  if (kill(n->tomb_pid, SIGKILL) != 0) rr__say("kill: %s", strerror(errno));
  if (RRUN_SYS(waitpid(n->tomb_pid, NULL, 0)) < 0) rr__say("waitpid: %s", strerror(errno));
  n->tomb_pid = 0;
}
