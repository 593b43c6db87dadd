/* libFuzzer harness: the rendezvous store's server (rendezvous/store_server.c), fed arbitrary bytes
 * over a real TCP connection. The request parser (header checks, body split, arity, keys,
 * the HELLO / AUTH handshake of store_proto.h, parked GET / WAIT) is static inside the server
 * thread, so the harness runs the real server in-process and plays a client:
 *
 *   byte 0, bit 0   the server holds a job token (what rr_init_process_group does when
 *                   RR_JOB_TOKEN is set): the input's own handshake cannot prove it, so
 *                   this fuzzes the handshake and the refusals
 *   byte 0, bit 1   send the rest in two writes with a pause between them, so the server
 *                   also sees a request cut at an arbitrary point (partial header/body)
 *   byte 0, bit 2   the harness first makes a real handshake (proving the token when the
 *                   server holds one), so the input reaches the requests behind it
 *   the rest        what the client sends, then it half-closes (SHUT_WR)
 *
 * For each input: connect, send, half-close, read every reply until the server closes the
 * connection. Invariants (abort() = a crash for libFuzzer):
 *   - the server finishes with the client within 10 s (a stalled parser would hang here);
 *   - every reply starts with the reply magic and has a status in range;
 *   - afterwards the server still serves a well-behaved client (set + get round trip).
 * The server is restarted every RESTART inputs so the key table stays small; a crash input
 * replays deterministically on a fresh server (the replay driver starts one per run). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rendezvous/store.h"
#include "rendezvous/store_proto.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_TOKEN "fuzz-job-token-0123456789abcdef"
#define RESTART 256

#define FZ_ASSERT(cond)                                                                            \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_store_server: %s:%d: invariant failed: %s (%s)\n", __FILE__, __LINE__, \
              #cond, rr_last_error());                                                             \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static rr_store *g_store[2]; /* [0] without a token, [1] with FZ_TOKEN */
static int g_uses[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setenv("RR_DEBUG", "NONE", 1); /* every refused client logs a WARN */
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

static rr_store *server(int with_token) {
  if (g_store[with_token] && g_uses[with_token]++ < RESTART) return g_store[with_token];
  if (g_store[with_token]) rr_store_free(g_store[with_token]);
  g_store[with_token] = NULL;
  g_uses[with_token] = 0;
  int rc = RR_OK;
  for (int attempt = 0; attempt < 50; attempt++) {
    rc = rr__store_tcp_open("127.0.0.1", 0, 1, 10000, with_token ? FZ_TOKEN : NULL,
                            &g_store[with_token]);
    if (rc == RR_OK) break;
    usleep(20000); /* out of ports for a moment: not the parser's fault */
  }
  FZ_ASSERT(rc == RR_OK);
  return g_store[with_token];
}

static int connect_to(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  /* Hundreds of connections a second for minutes, other harnesses beside: a connect can
   * fail for a moment for reasons that are the host's, not the parser's (ports momentarily
   * exhausted; a SYN that meets the server's TIME_WAIT of an earlier connection on the same
   * ports can be answered with a reset). Retry on a new socket for up to 2 s, saying so in
   * the log (errno); a server that refuses for 2 s straight (its listener gone) is a
   * finding. Seen once in 185k executions: 7259e97, store_server for 660 s. */
  static unsigned long retries;
  int fd = -1, err = 0;
  for (int attempt = 0; attempt < 100; attempt++) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FZ_ASSERT(fd >= 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) break;
    err = errno;
    close(fd);
    fd = -1;
    if (++retries <= 20)
      fprintf(stderr, "fuzz_store_server: connect to port %d: %s; retrying (%lu so far)\n", port,
              strerror(err), retries);
    usleep(20000);
  }
  if (fd < 0) {
    fprintf(stderr, "fuzz_store_server: connect to the store on port %d failed for 2 s: %s\n", port,
            strerror(err));
    abort();
  }
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  /* Close with a reset: no TIME_WAIT left behind by millions of connections. */
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  return fd;
}

/* Send what the server will take; it may close on us at any point (that is allowed). */
static void send_some(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    int rc = poll(&pf, 1, 10000);
    FZ_ASSERT(rc >= 0 || errno == EINTR);
    FZ_ASSERT(rc != 0); /* the server neither reads nor closes: stuck */
    if (rc < 0) continue;
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (w <= 0) return; /* EPIPE / ECONNRESET: closed by the server */
    p += w, n -= (size_t)w;
  }
}

/* Read replies until EOF; check the shape of each complete reply header. */
static void drain(int fd) {
  uint8_t buf[65536];
  uint8_t hdr[RR__STORE_HDR];
  size_t hdr_have = 0;
  uint64_t body_left = 0;
  for (;;) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int rc = poll(&pf, 1, 10000);
    if (rc < 0 && errno == EINTR) continue;
    FZ_ASSERT(rc > 0); /* 10 s without a byte or a close: the server is stuck on us */
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return; /* EOF or reset: the server is done with us */
    for (size_t i = 0; i < (size_t)r;) {
      if (body_left) {
        size_t k = (size_t)r - i < body_left ? (size_t)r - i : (size_t)body_left;
        body_left -= k, i += k;
        continue;
      }
      hdr[hdr_have++] = buf[i++];
      if (hdr_have < RR__STORE_HDR) continue;
      hdr_have = 0;
      rr__store_hdr h;
      rr__store_hdr_decode(hdr, &h);
      FZ_ASSERT(h.magic == RR__STORE_REP_MAGIC);
      FZ_ASSERT(h.op >= RR__SOP_HELLO && h.op <= RR__SOP_MAX);
      FZ_ASSERT(h.status <= RR__SST_MAX && h.reserved == 0 && h.nargs == 0);
      FZ_ASSERT(h.body_len <= RR__STORE_MAX_VALUE);
      FZ_ASSERT(h.body_len == 0 || (h.op == RR__SOP_GET && h.status == RR__SST_OK) ||
                (h.op == RR__SOP_HELLO && h.status == RR__SST_OK &&
                 h.body_len == RR__STORE_NONCE + RR__STORE_MAC) ||
                h.status == RR__SST_FAILED);
      body_left = h.body_len;
    }
  }
}

/* A real client's handshake on fd, proving FZ_TOKEN (or nothing, to a server without one). */
static void handshake(int fd, int with_token) {
  uint8_t key[16], cn[RR__STORE_NONCE] = "fuzz-cli-nonce-", b[RR__STORE_HDR + 4 + RR__STORE_NONCE];
  uint8_t reply[RR__STORE_HDR + RR__STORE_NONCE + RR__STORE_MAC];
  rr__token_key(with_token ? FZ_TOKEN : "", key);
  rr__store_hdr h = {.magic = RR__STORE_REQ_MAGIC,
                     .op = RR__SOP_HELLO,
                     .nargs = 1,
                     .body_len = 4 + RR__STORE_NONCE,
                     .num = RR__STORE_VERSION};
  rr__store_hdr_encode(&h, b);
  rr__put_u32(b + RR__STORE_HDR, RR__STORE_NONCE);
  memcpy(b + RR__STORE_HDR + 4, cn, RR__STORE_NONCE);
  send_some(fd, b, sizeof b);
  size_t got = 0;
  while (got < sizeof reply) {
    ssize_t r = recv(fd, reply + got, sizeof reply - got, 0);
    FZ_ASSERT(r > 0); /* a correct HELLO is answered */
    got += (size_t)r;
  }
  h = (rr__store_hdr){
      .magic = RR__STORE_REQ_MAGIC, .op = RR__SOP_AUTH, .nargs = 1, .body_len = 4 + RR__STORE_MAC};
  rr__store_hdr_encode(&h, b);
  rr__put_u32(b + RR__STORE_HDR, RR__STORE_MAC);
  rr__store_mac(key, 2, cn, reply + RR__STORE_HDR, b + RR__STORE_HDR + 4);
  send_some(fd, b, RR__STORE_HDR + 4 + RR__STORE_MAC);
  got = 0;
  while (got < RR__STORE_HDR) {
    ssize_t r = recv(fd, reply + got, RR__STORE_HDR - got, 0);
    FZ_ASSERT(r > 0);
    got += (size_t)r;
  }
  rr__store_hdr_decode(reply, &h);
  FZ_ASSERT(h.op == RR__SOP_AUTH && h.status == RR__SST_OK); /* a correct proof is accepted */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int with_token = data[0] & 1, split = data[0] & 2, greet = data[0] & 4;
  data++, size--;
  rr_store *s = server(with_token);
  int fd = connect_to(rr_store_port(s));
  if (greet) handshake(fd, with_token);
  if (split && size > 1) {
    size_t cut = 1 + (size_t)data[0] % (size - 1);
    send_some(fd, data, cut);
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
    send_some(fd, data + cut, size - cut);
  } else {
    send_some(fd, data, size);
  }
  (void)shutdown(fd, SHUT_WR);
  drain(fd);
  close(fd);
  /* The server must still work for everyone else. */
  char val[32];
  int vl = snprintf(val, sizeof val, "v%zu", size);
  FZ_ASSERT(rr_store_set(s, "fuzz/probe", val, (size_t)vl) == RR_OK);
  void *got = NULL;
  size_t gl = 0;
  FZ_ASSERT(rr_store_get(s, "fuzz/probe", &got, &gl) == RR_OK);
  FZ_ASSERT(gl == (size_t)vl && memcmp(got, val, gl) == 0);
  free(got);
  return 0;
}
