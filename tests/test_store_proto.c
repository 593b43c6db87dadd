/* White-box tests of the TCP store's server: raw sockets speaking the wire protocol of
 * rendezvous/store_proto.h, correctly (layout) and badly (garbage, lies in length fields,
 * half-written requests, clients that never send or never read). The server must close only the
 * offending client and keep serving everyone else. Also the job-token handshake hook, and
 * the goodbye a failing process leaves its clients (rr__store_goodbye: internal, so here
 * and not in test_store, which links only the public library).
 * (Just over 800 lines: one test program per wire-level behaviour of one server, each case
 * small and sharing the raw-socket helpers at the top; split, they would repeat them.)
 *   test_store_proto <name>   (no argument lists the tests) */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "rendezvous/store.h"
#include "rendezvous/store_proto.h"
#include "ringreduce/ringreduce.h"

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n    rr_last_error: %s\n", rr_last_error());           \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define OK(call)                                                             \
  do {                                                                       \
    int ok_rc_ = (call);                                                     \
    CHECK(ok_rc_ == RR_OK, "%s returned %s", #call, rr_status_name(ok_rc_)); \
  } while (0)

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static double cpu_seconds(void) {
  struct rusage ru;
  CHECK(getrusage(RUSAGE_SELF, &ru) == 0, "getrusage: %s", strerror(errno));
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static uint64_t g_seed;
static uint64_t rnd(void) {
  g_seed ^= g_seed >> 12;
  g_seed ^= g_seed << 25;
  g_seed ^= g_seed >> 27;
  return g_seed * 2685821657736338717ULL;
}
static void fill_rnd(void *buf, size_t n) {
  uint8_t *p = buf;
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
}

/* ---------------------------------------------------------------------------------------------
 * Raw client
 */
static int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0, "socket: %s", strerror(errno));
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* Send everything; the server may already have closed on us (then returns -1). */
static int raw_send(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void raw_recv(int fd, void *buf, size_t n) {
  uint8_t *p = buf;
  int64_t end = now_ms() + 5000;
  while (n > 0) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int64_t left = end - now_ms();
    CHECK(left > 0 && poll(&pf, 1, (int)left) == 1, "no reply from the server within 5 s");
    ssize_t r = recv(fd, p, n, 0);
    CHECK(r > 0, "recv: %s", r == 0 ? "the server closed the connection" : strerror(errno));
    p += r;
    n -= (size_t)r;
  }
}

/* Has the server closed this connection within ms? (reads and discards what it sent) */
static int raw_closed_within(int fd, int64_t ms) {
  int64_t end = now_ms() + ms;
  uint8_t buf[65536];
  for (;;) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int64_t left = end - now_ms();
    int rc = poll(&pf, 1, left > 0 ? (int)left : 0);
    if (rc == 0) return 0;
    ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) return 1;
    if (r < 0 && errno != EAGAIN && errno != EINTR) return 1;
  }
}

/* Append a header / an argument to a request being built. */
typedef struct msg {
  uint8_t *b;
  size_t n, cap;
} msg;

static void msg_put(msg *m, const void *p, size_t n) {
  if (m->n + n > m->cap) {
    m->cap = (m->n + n) * 2 + 64;
    m->b = realloc(m->b, m->cap);
    CHECK(m->b != NULL, "out of memory");
  }
  if (n) memcpy(m->b + m->n, p, n);
  m->n += n;
}

static void msg_hdr(msg *m, uint32_t magic, uint8_t op, uint8_t status, uint16_t reserved,
                    uint32_t nargs, uint32_t body_len, int64_t num) {
  rr__store_hdr h = {magic, op, status, reserved, nargs, body_len, num};
  uint8_t b[RR__STORE_HDR];
  rr__store_hdr_encode(&h, b);
  msg_put(m, b, sizeof b);
}

static void msg_arg(msg *m, const void *p, uint32_t len) {
  uint8_t l[4];
  rr__put_u32(l, len);
  msg_put(m, l, 4);
  msg_put(m, p, len);
}

/* A well-formed request with string arguments (NULL-terminated list). */
static void msg_req(msg *m, uint8_t op, int64_t num, const char *const *args, int nargs) {
  uint32_t body = 0;
  for (int i = 0; i < nargs; i++) body += 4 + (uint32_t)strlen(args[i]);
  msg_hdr(m, RR__STORE_REQ_MAGIC, op, 0, 0, (uint32_t)nargs, body, num);
  for (int i = 0; i < nargs; i++) msg_arg(m, args[i], (uint32_t)strlen(args[i]));
}

/* The first handshake message: a client nonce (any bytes will do for a raw client). */
static void msg_hello(msg *m, int64_t version) {
  uint8_t cn[RR__STORE_NONCE] = "raw-client-nonce";
  msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_HELLO, 0, 0, 1, 4 + RR__STORE_NONCE, version);
  msg_arg(m, cn, RR__STORE_NONCE);
}

static void read_reply(int fd, rr__store_hdr *h) {
  uint8_t b[RR__STORE_HDR];
  raw_recv(fd, b, sizeof b);
  rr__store_hdr_decode(b, h);
  CHECK(h->magic == RR__STORE_REP_MAGIC, "reply magic 0x%08x", (unsigned)h->magic);
}

/* A raw connection through the whole handshake of a store without a token (which checks
 * no MAC, so an all-zero one passes). */
static int raw_greeted(int port) {
  int fd = raw_connect(port);
  msg m = {0};
  msg_hello(&m, RR__STORE_VERSION);
  CHECK(raw_send(fd, m.b, m.n) == 0, "send HELLO");
  free(m.b);
  rr__store_hdr h;
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_HELLO && h.status == RR__SST_OK && h.num == RR__STORE_VERSION &&
            h.body_len == RR__STORE_NONCE + RR__STORE_MAC,
        "HELLO reply: op %u status %u num %" PRId64 " body %" PRIu32, h.op, h.status, h.num,
        h.body_len);
  uint8_t challenge[RR__STORE_NONCE + RR__STORE_MAC];
  raw_recv(fd, challenge, sizeof challenge);
  m = (msg){0};
  uint8_t mac[RR__STORE_MAC] = {0};
  msg_hdr(&m, RR__STORE_REQ_MAGIC, RR__SOP_AUTH, 0, 0, 1, 4 + RR__STORE_MAC, 0);
  msg_arg(&m, mac, sizeof mac);
  CHECK(raw_send(fd, m.b, m.n) == 0, "send AUTH");
  free(m.b);
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_AUTH && h.status == RR__SST_OK && h.body_len == 0,
        "AUTH reply: op %u status %u", h.op, h.status);
  return fd;
}

/* The store still answers a well-behaved client correctly. */
static void still_serving(rr_store *good, int round) {
  char key[32];
  uint8_t val[777], *got = NULL;
  size_t len = 0;
  snprintf(key, sizeof key, "good/%d", round);
  fill_rnd(val, sizeof val);
  OK(rr_store_set(good, key, val, sizeof val));
  OK(rr_store_get(good, key, (void **)&got, &len));
  CHECK(len == sizeof val && memcmp(got, val, len) == 0, "round %d: wrong value", round);
  free(got);
}

/* ---------------------------------------------------------------------------------------------
 * Tests
 */

/* The layout documented in store.h, byte for byte, and the reply fields. */
static void test_proto_wire(void) {
  rr_store *m = NULL;
  OK(rr_store_tcp("127.0.0.1", 0, 1, 5000, &m));
  int port = rr_store_port(m);
  int fd = raw_greeted(port);
  rr__store_hdr h;
  /* SET by hand, with the bytes spelled out. */
  /* clang-format off */
  uint8_t set[] = {
      'R', 'R', 'S', 'q',          /* magic */
      RR__SOP_SET, 0, 0, 0,        /* op, status, reserved */
      2, 0, 0, 0,                  /* nargs */
      4 + 3 + 4 + 5, 0, 0, 0,      /* body_len */
      0, 0, 0, 0, 0, 0, 0, 0,      /* num */
      3, 0, 0, 0, 'a', '/', 'b',   /* key */
      5, 0, 0, 0, 'v', 0, 'l', 0, 'e'}; /* value, with NULs */
  /* clang-format on */
  CHECK(raw_send(fd, set, sizeof set) == 0, "send SET");
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_SET && h.status == RR__SST_OK && h.body_len == 0, "SET reply");
  void *v = NULL;
  size_t len = 0;
  OK(rr_store_get(m, "a/b", &v, &len));
  CHECK(len == 5 && memcmp(v, "v\0l\0e", 5) == 0, "the raw SET stored the wrong value");
  free(v);
  /* GET: the value is the reply body. */
  msg q = {0};
  const char *k[] = {"a/b", "absent"};
  msg_req(&q, RR__SOP_GET, 1000, k, 1);
  /* ADD / CHECK / DELETE answer in num; a WAIT that times out names its first missing key.
   * All pipelined in one write: the server takes them one at a time. */
  msg_req(&q, RR__SOP_ADD, -12, (const char *const[]){"n"}, 1);
  msg_req(&q, RR__SOP_CHECK, 0, k, 2);
  msg_req(&q, RR__SOP_CHECK, 0, k, 1);
  msg_req(&q, RR__SOP_WAIT, 100, k, 2);
  msg_req(&q, RR__SOP_DELETE, 0, k, 1);
  msg_req(&q, RR__SOP_DELETE, 0, k, 1);
  CHECK(raw_send(fd, q.b, q.n) == 0, "send");
  free(q.b);
  uint8_t body[5];
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_GET && h.status == RR__SST_OK && h.body_len == 5, "GET reply");
  raw_recv(fd, body, 5);
  CHECK(memcmp(body, "v\0l\0e", 5) == 0, "GET body");
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_ADD && h.status == RR__SST_OK && h.num == -12, "ADD reply num %" PRId64,
        h.num);
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_CHECK && h.num == 0, "CHECK of a missing key");
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_CHECK && h.num == 1, "CHECK of a present key");
  int64_t t0 = now_ms();
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_WAIT && h.status == RR__SST_TIMEOUT && h.num == 1,
        "WAIT reply: status %u num %" PRId64, h.status, h.num);
  CHECK(now_ms() - t0 >= 80, "WAIT answered before its 100 ms deadline");
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_DELETE && h.num == 1, "first DELETE");
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_DELETE && h.num == 0, "second DELETE");
  /* ADD to a non-integer. */
  q = (msg){0};
  msg_req(&q, RR__SOP_SET, 0, (const char *const[]){"t", "x1"}, 2);
  msg_req(&q, RR__SOP_ADD, 1, (const char *const[]){"t"}, 1);
  CHECK(raw_send(fd, q.b, q.n) == 0, "send");
  free(q.b);
  read_reply(fd, &h);
  read_reply(fd, &h);
  CHECK(h.op == RR__SOP_ADD && h.status == RR__SST_NOTINT, "ADD to text: status %u", h.status);
  close(fd);
  rr_store_free(m);
  /* A timeout <= 0 means torch's 300 s. */
  OK(rr_store_tcp("127.0.0.1", 0, 1, 0, &m));
  CHECK(m->timeout_ms == 300000, "default TCP store timeout %" PRId64, m->timeout_ms);
  rr_store_free(m);
  char path[64];
  snprintf(path, sizeof path, "/tmp/rr_store_proto.%d", (int)getpid());
  OK(rr_store_file(path, -5, &m));
  CHECK(m->timeout_ms == 300000, "default file store timeout %" PRId64, m->timeout_ms);
  rr_store_free(m);
}

/* Each malformed request closes that client only. */
typedef struct bad_case {
  const char *name;
  int hello_first;
} bad_case;

static void build_bad(int i, msg *m) {
  uint8_t junk[1000];
  fill_rnd(junk, sizeof junk);
  char big[RR__STORE_MAX_KEY + 2];
  memset(big, 'k', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  switch (i) {
    case 0: /* random bytes, no handshake */
    case 1: /* random bytes after the handshake */
      msg_put(m, junk, sizeof junk);
      break;
    case 2: /* huge body length */
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_SET, 0, 0, 2, 0xFFFFFFFFu, 0);
      break;
    case 3: /* body just over the limit */
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_SET, 0, 0, 2, RR__STORE_MAX_BODY + 1, 0);
      break;
    case 4: /* huge argument count */
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_WAIT, 0, 0, 0xFFFFFFFFu, 100, 1000);
      break;
    case 5: /* more arguments than the body can hold */
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_WAIT, 0, 0, 30, 100, 1000);
      break;
    case 6: /* unknown opcodes */
      msg_hdr(m, RR__STORE_REQ_MAGIC, 99, 0, 0, 1, 5, 0);
      msg_arg(m, "k", 1);
      break;
    case 7:
      msg_hdr(m, RR__STORE_REQ_MAGIC, 0, 0, 0, 1, 5, 0);
      msg_arg(m, "k", 1);
      break;
    case 8: /* reserved bytes set */
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_GET, 0, 7, 1, 5, 1000);
      msg_arg(m, "k", 1);
      break;
    case 9: /* a request before the handshake */
      msg_req(m, RR__SOP_SET, 0, (const char *const[]){"k", "v"}, 2);
      break;
    case 10: /* a second handshake */
      msg_hello(m, RR__STORE_VERSION);
      break;
    case 11: /* an argument length that overruns the body */
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_SET, 0, 0, 2, 20, 0);
      msg_arg(m, "key", 3);
      msg_put(m, (uint8_t[]){0xe8, 0x03, 0, 0}, 4); /* says 1000 bytes */
      msg_put(m, "value....", 9);
      break;
    case 12: /* bytes after the last argument */
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_GET, 0, 0, 1, 10, 1000);
      msg_arg(m, "k", 1);
      msg_put(m, "xxxxx", 5);
      break;
    case 13: /* empty key */
      msg_req(m, RR__SOP_GET, 1000, (const char *const[]){""}, 1);
      break;
    case 14: /* a key with a NUL */
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_DELETE, 0, 0, 1, 7, 0);
      msg_arg(m, "a\0b", 3);
      break;
    case 15: /* a key over 4096 bytes */
      msg_req(m, RR__SOP_GET, 1000, (const char *const[]){big}, 1);
      break;
    case 16: /* GET with no timeout, WAIT with a negative one */
      msg_req(m, RR__SOP_GET, 0, (const char *const[]){"k"}, 1);
      break;
    case 17:
      msg_req(m, RR__SOP_WAIT, -5, (const char *const[]){"k"}, 1);
      break;
    case 18: /* wrong argument counts */
      msg_req(m, RR__SOP_SET, 0, (const char *const[]){"k", "v", "w"}, 3);
      break;
    case 19:
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_WAIT, 0, 0, 0, 0, 1000);
      break;
    case 20: /* a reply sent as a request */
      msg_hdr(m, RR__STORE_REP_MAGIC, RR__SOP_SET, 0, 0, 0, 0, 0);
      break;
    case 21: /* a first argument whose length runs far past the body */
      msg_hdr(m, RR__STORE_REQ_MAGIC, RR__SOP_SET, 0, 0, 2, 13, 0);
      msg_put(m, (uint8_t[]){0x00, 0x00, 0x10, 0x00}, 4); /* says 1 MiB */
      msg_put(m, "k", 1);
      msg_arg(m, "v", 1);
      msg_put(m, "pad", 3);
      break;
    default:
      break;
  }
}
enum { NBAD = 22 };

static void test_proto_garbage(void) {
  rr_store *m = NULL, *good = NULL;
  OK(rr_store_tcp("127.0.0.1", 0, 1, 5000, &m));
  int port = rr_store_port(m);
  OK(rr_store_tcp("127.0.0.1", port, 0, 5000, &good));
  for (int i = 0; i < NBAD; i++) {
    int fd = (i == 0 || i == 9) ? raw_connect(port) : raw_greeted(port);
    msg q = {0};
    build_bad(i, &q);
    raw_send(fd, q.b, q.n); /* may fail half-way: the server may hang up first */
    free(q.b);
    CHECK(raw_closed_within(fd, 3000), "case %d: the server kept a malformed client", i);
    close(fd);
    still_serving(good, i);
  }
  /* A HELLO of the wrong size (the version 1 one carried a token), and a client of another
   * protocol version: refused. */
  int fd = raw_connect(port);
  msg q = {0};
  msg_req(&q, RR__SOP_HELLO, RR__STORE_VERSION, (const char *const[]){"a v1 job-token proof"}, 1);
  raw_send(fd, q.b, q.n);
  free(q.b);
  CHECK(raw_closed_within(fd, 3000), "a HELLO of the wrong size was accepted");
  close(fd);
  fd = raw_connect(port);
  q = (msg){0};
  msg_hello(&q, RR__STORE_VERSION + 1);
  raw_send(fd, q.b, q.n);
  free(q.b);
  rr__store_hdr h;
  read_reply(fd, &h);
  CHECK(h.status == RR__SST_DENIED && h.num == RR__STORE_VERSION, "version mismatch: status %u",
        h.status);
  CHECK(raw_closed_within(fd, 3000), "a client of another version was kept");
  close(fd);
  /* Many random streams at once, some after a handshake. */
  int fds[32];
  for (int i = 0; i < 32; i++) {
    fds[i] = i % 2 ? raw_greeted(port) : raw_connect(port);
    uint8_t junk[4096];
    size_t n = 1 + rnd() % sizeof junk;
    fill_rnd(junk, n);
    if (i % 4 == 3) { /* a valid magic with random fields */
      rr__put_u32(junk, RR__STORE_REQ_MAGIC);
      if (n < RR__STORE_HDR) n = RR__STORE_HDR;
    }
    raw_send(fds[i], junk, n);
  }
  still_serving(good, 100);
  for (int i = 0; i < 32; i++) close(fds[i]);
  still_serving(good, 101);
  rr_store_free(good);
  rr_store_free(m);
}

/* Stalled clients: silent, half a header, half a body, a waiter that leaves, a client that
 * does not read its reply. Others are served meanwhile; the stalled ones are dropped after
 * the store's timeout (1.5 s here), except the silent one (no request in progress). */
static void test_proto_stalls(void) {
  const int64_t T = 1500;
  rr_store *m = NULL, *good = NULL;
  OK(rr_store_tcp("127.0.0.1", 0, 1, T, &m));
  int port = rr_store_port(m);
  OK(rr_store_tcp("127.0.0.1", port, 0, 5000, &good));
  size_t bign = 8u << 20;
  uint8_t *big = malloc(bign);
  CHECK(big != NULL, "malloc");
  fill_rnd(big, bign);
  OK(rr_store_set(good, "big", big, bign));

  int silent = raw_connect(port); /* never says HELLO: a stranger holding a descriptor */
  int idle = raw_greeted(port);   /* a real client between requests: must be kept */
  int half_hdr = raw_greeted(port);
  msg q = {0};
  msg_req(&q, RR__SOP_SET, 0, (const char *const[]){"k", "v"}, 2);
  CHECK(raw_send(half_hdr, q.b, 10) == 0, "send");
  free(q.b);
  int half_body = raw_greeted(port);
  q = (msg){0};
  msg_hdr(&q, RR__STORE_REQ_MAGIC, RR__SOP_SET, 0, 0, 2, 60000000, 0);
  uint8_t part[100] = {1, 0, 0, 0, 'k'};
  msg_put(&q, part, sizeof part);
  CHECK(raw_send(half_body, q.b, q.n) == 0, "send");
  free(q.b);
  int no_read = raw_greeted(port);
  int rcv = 4096;
  setsockopt(no_read, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  q = (msg){0};
  msg_req(&q, RR__SOP_GET, 1000, (const char *const[]){"big"}, 1);
  CHECK(raw_send(no_read, q.b, q.n) == 0, "send");
  free(q.b);
  /* A waiter that leaves before its key comes, and one that leaves mid-request. */
  int leaver = raw_greeted(port);
  q = (msg){0};
  msg_req(&q, RR__SOP_GET, 60000, (const char *const[]){"later"}, 1);
  CHECK(raw_send(leaver, q.b, q.n) == 0, "send");
  free(q.b);
  int half_leaver = raw_greeted(port);
  CHECK(raw_send(half_leaver, "RRSq\x02", 5) == 0, "send");
  sleep_ms(50);
  close(leaver);
  close(half_leaver);

  /* Everyone else is served at full speed meanwhile. */
  int64_t t0 = now_ms();
  for (int i = 0; i < 200; i++) still_serving(good, i);
  OK(rr_store_set(good, "later", "x", 1));
  int64_t el = now_ms() - t0;
  CHECK(el < 1000, "200 set/get round trips took %" PRId64 " ms beside stalled clients", el);
  CHECK(!raw_closed_within(silent, 0), "the silent client was closed too early");
  CHECK(!raw_closed_within(half_hdr, 0), "the half-header client was closed too early");

  /* After the store's timeout the stalled ones are gone, and so is the one that never said
   * HELLO; the greeted idle one is not. Waiting for that costs the server thread no CPU (it
   * sleeps in poll, no busy loop). */
  t0 = now_ms();
  double cpu0 = cpu_seconds();
  CHECK(raw_closed_within(half_hdr, 4 * T), "a half-written header was kept");
  CHECK(raw_closed_within(half_body, 4 * T), "a half-written body was kept");
  CHECK(raw_closed_within(no_read, 4 * T), "a client that never reads was kept");
  el = now_ms() - t0;
  double cpu = cpu_seconds() - cpu0;
  CHECK(el <= 3 * T, "stalled clients were dropped after %" PRId64 " ms", el);
  CHECK(cpu < 0.25 * (double)el / 1000 + 0.05,
        "the process used %.3f s of CPU in %.3f s of waiting (a busy loop?)", cpu,
        (double)el / 1000);
  CHECK(raw_closed_within(silent, 4 * T), "a client that never said HELLO was kept");
  CHECK(!raw_closed_within(idle, 0), "an idle greeted client was dropped");
  still_serving(good, 1000);
  close(silent);
  close(idle);
  close(half_hdr);
  close(half_body);
  close(no_read);
  /* A silent client does not hold up rr_store_free of the master. */
  silent = raw_connect(port);
  rr_store_free(good);
  t0 = now_ms();
  rr_store_free(m);
  CHECK(now_ms() - t0 < 1000, "freeing the master took %" PRId64 " ms", now_ms() - t0);
  CHECK(raw_closed_within(silent, 2000), "rr_store_free left a client connected");
  close(silent);
  free(big);
}

/* The job-token hook: a master with a token refuses clients with another. */
static void test_proto_token(void) {
  rr_store *m = NULL, *c = NULL;
  OK(rr__store_tcp_open("127.0.0.1", 0, 1, 3000, "job-42", &m));
  int port = rr_store_port(m);
  OK(rr__store_tcp_open("127.0.0.1", port, 0, 3000, "job-42", &c));
  OK(rr_store_set(c, "k", "v", 1));
  rr_store_free(c);
  c = (rr_store *)&c;
  int rc = rr__store_tcp_open("127.0.0.1", port, 0, 3000, "job-41", &c);
  CHECK(rc == RR_EPROTO && strstr(rr_last_error(), "token"), "wrong token: %s", rr_status_name(rc));
  CHECK(c == NULL, "store not reset");
  rc = rr_store_tcp("127.0.0.1", port, 0, 3000, &c); /* no token */
  CHECK(rc == RR_EPROTO, "no token: %s", rr_status_name(rc));
  rr_store_free(m);
  /* A master without a token admits clients without one; a client holding a token does
   * not trust a store that cannot prove it (someone else's store on that port). */
  OK(rr_store_tcp("127.0.0.1", 0, 1, 3000, &m));
  OK(rr_store_tcp("127.0.0.1", rr_store_port(m), 0, 3000, &c));
  rr_store_free(c);
  c = (rr_store *)&c;
  rc = rr__store_tcp_open("127.0.0.1", rr_store_port(m), 0, 3000, "anything", &c);
  CHECK(rc == RR_EPROTO && strstr(rr_last_error(), "cannot prove it holds this job's token"),
        "a client with a token accepted a store without one: %s: %s", rr_status_name(rc),
        rr_last_error());
  CHECK(c == NULL, "store not reset");
  rr_store_free(m);
}

/* ---- attacks before authentication (docs/reliability.md, "attacks tried") ---- */

static size_t resident_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  CHECK(f != NULL, "/proc/self/statm: %s", strerror(errno));
  unsigned long size = 0, res = 0;
  CHECK(fscanf(f, "%lu %lu", &size, &res) == 2, "parsing /proc/self/statm");
  fclose(f);
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* Sixteen strangers without the token each announce the largest body a request may have
 * and stream data at the store. Nothing they send may stay in the store's memory: the
 * handshake's size is checked on its header, before any body is read. */
static void test_proto_preauth_memory(void) {
  rr_store *m = NULL;
  OK(rr__store_tcp_open("127.0.0.1", 0, 1, 60000, "job-7", &m));
  int port = rr_store_port(m);
  enum { N = 16 };
  const size_t per = 63u << 20, chunk = 1u << 20;
  uint8_t *data = calloc(1, chunk);
  CHECK(data != NULL, "calloc");
  size_t base = resident_bytes(), peak = base;
  int fds[N];
  size_t sent[N] = {0};
  int open_fds = N;
  for (int i = 0; i < N; i++) {
    fds[i] = raw_connect(port);
    msg q = {0};
    msg_hdr(&q, RR__STORE_REQ_MAGIC, RR__SOP_HELLO, 0, 0, 1, RR__STORE_MAX_BODY, RR__STORE_VERSION);
    CHECK(raw_send(fds[i], q.b, q.n) == 0, "send header");
    free(q.b);
  }
  int64_t end = now_ms() + 5000;
  while (open_fds > 0 && now_ms() < end) {
    for (int i = 0; i < N; i++) {
      if (fds[i] < 0) continue;
      ssize_t w = send(fds[i], data, RR__MIN(chunk, per - sent[i]), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) sent[i] += (size_t)w;
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || sent[i] >= per) {
        close(fds[i]);
        fds[i] = -1;
        open_fds--;
      }
    }
    size_t r = resident_bytes();
    if (r > peak) peak = r;
    usleep(1000);
  }
  size_t total = 0;
  for (int i = 0; i < N; i++) {
    total += sent[i];
    if (fds[i] >= 0) close(fds[i]);
  }
  size_t r = resident_bytes();
  if (r > peak) peak = r;
  printf("preauth_memory: %zu MiB pushed by %d strangers; resident %zu -> peak %zu MiB\n",
         total >> 20, N, base >> 20, peak >> 20);
  CHECK(peak < base + (32u << 20), "the store's process grew by %zu MiB under the attack",
        (peak - base) >> 20);
  free(data);
  rr_store_free(m);
}

/* The pre-authentication deadline covers the whole handshake: a stranger that sent one
 * byte, a whole header, or a HELLO but never its AUTH is dropped as one that said nothing
 * is (10 s here, where the store's own timeout is 60 s). */
static void test_proto_preauth_deadline(void) {
  rr_store *m = NULL, *good = NULL;
  OK(rr__store_tcp_open("127.0.0.1", 0, 1, 60000, "job-7", &m));
  int port = rr_store_port(m);
  OK(rr__store_tcp_open("127.0.0.1", port, 0, 5000, "job-7", &good));
  int64_t t0 = now_ms();
  int one_byte = raw_connect(port);
  CHECK(raw_send(one_byte, "R", 1) == 0, "send");
  int header = raw_connect(port);
  msg q = {0};
  msg_hello(&q, RR__STORE_VERSION);
  CHECK(raw_send(header, q.b, RR__STORE_HDR) == 0, "send");
  int no_auth = raw_connect(port);
  CHECK(raw_send(no_auth, q.b, q.n) == 0, "send");
  free(q.b);
  rr__store_hdr h;
  read_reply(no_auth, &h);
  CHECK(h.status == RR__SST_OK, "HELLO refused: status %u", h.status);
  still_serving(good, 0);
  CHECK(raw_closed_within(one_byte, 13000), "a stranger that sent one byte was kept");
  CHECK(raw_closed_within(header, 1000), "a stranger that sent a header was kept");
  CHECK(raw_closed_within(no_auth, 1000), "a stranger that never sent AUTH was kept");
  int64_t el = now_ms() - t0;
  printf("preauth_deadline: all three dropped after %.1f s\n", (double)el / 1000);
  CHECK(el >= 9000, "dropped after %" PRId64 " ms, before the 10 s deadline", el);
  still_serving(good, 1);
  rr_store_free(good);
  rr_store_free(m);
}

/* A recorded handshake is worthless: a proxy records everything a real client (holding the
 * token) sends through it, then a process without the token replays those bytes to the
 * store and asks for the value the client set. It must get nothing but a refusal. */
typedef struct proxy {
  int lfd, store_port;
  uint8_t rec[4096];
  size_t nrec;
} proxy;

static void *proxy_main(void *arg) {
  proxy *px = arg;
  int c = accept(px->lfd, NULL, NULL);
  CHECK(c >= 0, "accept: %s", strerror(errno));
  int s = raw_connect(px->store_port);
  uint8_t buf[4096];
  for (;;) {
    struct pollfd pf[2] = {{.fd = c, .events = POLLIN}, {.fd = s, .events = POLLIN}};
    if (poll(pf, 2, 5000) <= 0) break;
    if (pf[0].revents) {
      ssize_t r = recv(c, buf, sizeof buf, 0);
      if (r <= 0) break;
      CHECK(px->nrec + (size_t)r <= sizeof px->rec, "recording overflow");
      memcpy(px->rec + px->nrec, buf, (size_t)r);
      px->nrec += (size_t)r;
      if (raw_send(s, buf, (size_t)r) != 0) break;
    }
    if (pf[1].revents) {
      ssize_t r = recv(s, buf, sizeof buf, 0);
      if (r <= 0 || raw_send(c, buf, (size_t)r) != 0) break;
    }
  }
  close(c);
  close(s);
  return NULL;
}

static void test_proto_replay(void) {
  rr_store *m = NULL, *c = NULL;
  OK(rr__store_tcp_open("127.0.0.1", 0, 1, 5000, "job-7", &m));
  proxy px = {.store_port = rr_store_port(m)};
  px.lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  CHECK(bind(px.lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(px.lfd, 1) == 0 &&
            getsockname(px.lfd, (struct sockaddr *)&a, &al) == 0,
        "proxy listen: %s", strerror(errno));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, proxy_main, &px) == 0, "pthread_create");
  OK(rr__store_tcp_open("127.0.0.1", ntohs(a.sin_port), 0, 5000, "job-7", &c));
  OK(rr_store_set(c, "secret", "42", 2));
  rr_store_free(c);
  pthread_join(t, NULL);
  close(px.lfd);
  CHECK(px.nrec > 0, "nothing recorded");
  /* The replay, then a GET of the secret as if the handshake had worked. */
  int fd = raw_connect(px.store_port);
  raw_send(fd, px.rec, px.nrec);
  msg q = {0};
  msg_req(&q, RR__SOP_GET, 1000, (const char *const[]){"secret"}, 1);
  raw_send(fd, q.b, q.n);
  free(q.b);
  uint8_t got[8192];
  size_t n = 0;
  int64_t end = now_ms() + 3000;
  int closed = 0;
  while (!closed && now_ms() < end && n < sizeof got) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, 100) <= 0) continue;
    ssize_t r = recv(fd, got + n, sizeof got - n, 0);
    if (r <= 0)
      closed = 1;
    else
      n += (size_t)r;
  }
  close(fd);
  int leaked = 0, denied = 0;
  for (size_t o = 0; o + RR__STORE_HDR <= n;) {
    rr__store_hdr h;
    rr__store_hdr_decode(got + o, &h);
    if (h.op == RR__SOP_GET && h.status == RR__SST_OK) leaked = 1;
    if (h.status == RR__SST_DENIED) denied = 1;
    o += RR__STORE_HDR + h.body_len;
  }
  printf("replay: %zu bytes replayed, %zu bytes of replies, denied %d, secret leaked %d\n", px.nrec,
         n, denied, leaked);
  CHECK(!leaked, "the replayed handshake let a process without the token read a key");
  CHECK(denied && closed, "the replay was not refused and closed (denied %d closed %d)", denied,
        closed);
  rr_store_free(m);
}

/* The process serving the store fails (rank 0's init, say) and frees it with a reason: a
 * client whose connection sat idle, and one parked in a WAIT, hear that reason, not a reset
 * (group/pg.c; rrun_fd_exhaustion). */
static void test_proto_goodbye_stop(void) {
  int up[2], go[2];
  CHECK(pipe(up) == 0 && pipe(go) == 0, "pipe: %s", strerror(errno));
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    close(up[0]);
    close(go[1]);
    rr_store *s = NULL;
    OK(rr_store_tcp("127.0.0.1", 0, 1, 20000, &s));
    int p = rr_store_port(s);
    CHECK(write(up[1], &p, sizeof p) == (ssize_t)sizeof p, "write: %s", strerror(errno));
    char ch;
    CHECK(read(go[0], &ch, 1) == 1, "read: %s", strerror(errno));
    rr__store_goodbye(s, "planted: rank 0 failed its setup", RR_ESYS); /* heard as RR_EPEER */
    rr_store_free(s);
    _exit(0);
  }
  close(up[1]);
  close(go[0]);
  int port = 0;
  CHECK(read(up[0], &port, sizeof port) == (ssize_t)sizeof port, "the master did not start");
  close(up[0]);
  rr_store *idle = NULL, *waits = NULL;
  OK(rr_store_tcp("127.0.0.1", port, 0, 20000, &idle));
  OK(rr_store_tcp("127.0.0.1", port, 0, 20000, &waits));
  OK(rr_store_set(idle, "k", "v", 1));
  /* The waiter parks a WAIT for a key nobody sets, in a child of its own. */
  fflush(stderr);
  pid_t w = fork();
  CHECK(w >= 0, "fork: %s", strerror(errno));
  if (w == 0) {
    const char *keys[1] = {"never"};
    int st = rr_store_wait(waits, keys, 1, 15000);
    _exit(st == RR_EPEER && strstr(rr_last_error(), "planted: rank 0 failed its setup") ? 0 : 1);
  }
  usleep(300 * 1000); /* the WAIT is parked */
  CHECK(write(go[1], "x", 1) == 1, "write: %s", strerror(errno));
  CHECK(waitpid(pid, NULL, 0) == pid, "waitpid: %s", strerror(errno));
  const char *keys[1] = {"k"};
  int exists = -1;
  int st = rr_store_check(idle, keys, 1, &exists);
  CHECK(st == RR_EPEER && strstr(rr_last_error(), "planted: rank 0 failed its setup"),
        "a check after the serving process failed: %s: %s", rr_status_name(st), rr_last_error());
  int wst = 0;
  CHECK(waitpid(w, &wst, 0) == w && WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
        "the waiting client did not hear the reason");
  rr_store_free(idle);
  rr_store_free(waits);
  close(go[1]);
}

static const struct {
  const char *name;
  void (*fn)(void);
} g_tests[] = {
    {"proto_wire", test_proto_wire},
    {"proto_garbage", test_proto_garbage},
    {"proto_stalls", test_proto_stalls},
    {"proto_preauth_memory", test_proto_preauth_memory},
    {"proto_preauth_deadline", test_proto_preauth_deadline},
    {"proto_replay", test_proto_replay},
    {"proto_token", test_proto_token},
    {"proto_goodbye_stop", test_proto_goodbye_stop},
};

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *env = getenv("RR_TEST_SEED");
  g_seed = env ? strtoull(env, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
  if (g_seed == 0) g_seed = 1;
  for (size_t i = 0; argc == 2 && i < sizeof g_tests / sizeof g_tests[0]; i++) {
    if (strcmp(argv[1], g_tests[i].name) == 0) {
      printf("%s (RR_TEST_SEED=0x%" PRIx64 ")\n", g_tests[i].name, g_seed);
      int64_t t0 = now_ms();
      g_tests[i].fn();
      printf("%s: ok (%.2f s)\n", g_tests[i].name, (double)(now_ms() - t0) / 1000);
      return 0;
    }
  }
  fprintf(stderr, "usage: %s TEST\ntests:", argv[0]);
  for (size_t i = 0; i < sizeof g_tests / sizeof g_tests[0]; i++)
    fprintf(stderr, " %s", g_tests[i].name);
  fprintf(stderr, "\n");
  return 2;
}
