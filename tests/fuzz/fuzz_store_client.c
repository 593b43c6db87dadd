/* libFuzzer harness: the rendezvous store's client (rendezvous/store_client.c) against a hostile
 * server. Every rank is a client of the store; a wrong or malicious process listening on
 * MASTER_PORT must not crash it, make it read past a buffer, or hang it past its deadline.
 *
 * A fake server thread in the harness accepts the client's connection, reads nothing in
 * particular, writes the fuzz input (after its first byte) as its "replies" and
 * half-closes. Byte 0, bit 0: the client holds a job token, so it checks the server's MAC
 * in the handshake (which fuzz input cannot forge: this fuzzes that check); without one the
 * input can pass the handshake and reach the rest. The client runs the handshake and then
 * a fixed script of calls (get, add, check, wait, delete, set, get), each parsing whatever
 * bytes come next. Invariants: every call returns a status from the
 * rr_status list with a message, a successful get returns a buffer of exactly the length it
 * claims, and everything is over within the store timeout (2 s) plus slack. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rendezvous/store.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_ASSERT(cond)                                                                            \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_store_client: %s:%d: invariant failed: %s (%s)\n", __FILE__, __LINE__, \
              #cond, rr_last_error());                                                             \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static int g_lfd = -1, g_port;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setenv("RR_DEBUG", "NONE", 1);
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

static void listen_once(void) {
  if (g_lfd >= 0) return;
  g_lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FZ_ASSERT(g_lfd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  FZ_ASSERT(bind(g_lfd, (struct sockaddr *)&a, sizeof a) == 0);
  FZ_ASSERT(listen(g_lfd, 64) == 0);
  FZ_ASSERT(getsockname(g_lfd, (struct sockaddr *)&a, &len) == 0);
  g_port = ntohs(a.sin_port);
}

typedef struct fake {
  const uint8_t *data;
  size_t size;
  int stop_fd; /* readable once the client side is done */
} fake;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Serve every connection the client makes (a call that times out makes it reconnect): the
 * first gets the input, later ones get nothing and are closed at once. */
static void *fake_main(void *arg) {
  fake *f = arg;
  int served = 0;
  for (;;) {
    struct pollfd pf[2] = {{.fd = g_lfd, .events = POLLIN}, {.fd = f->stop_fd, .events = POLLIN}};
    if (poll(pf, 2, -1) <= 0) continue;
    if (pf[1].revents) break;
    int fd = accept(g_lfd, NULL, NULL);
    if (fd < 0) continue;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    if (!served++) {
      size_t off = 0;
      while (off < f->size) {
        ssize_t w = send(fd, f->data + off, f->size - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
      }
    }
    (void)shutdown(fd, SHUT_WR);
    /* Swallow what the client sends until it closes (or we are told to stop). */
    uint8_t sink[4096];
    for (;;) {
      struct pollfd q[2] = {{.fd = fd, .events = POLLIN}, {.fd = f->stop_fd, .events = POLLIN}};
      if (poll(q, 2, -1) <= 0) continue;
      if (q[0].revents && recv(fd, sink, sizeof sink, 0) <= 0) break;
      if (q[1].revents) break;
    }
    close(fd);
  }
  return NULL;
}

static void status_ok(int st) {
  FZ_ASSERT(st <= 0);
  FZ_ASSERT(strcmp(rr_status_name(st), "RR_UNKNOWN") != 0);
  if (st != RR_OK) FZ_ASSERT(rr_last_error()[0] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *token = data[0] & 1 ? "client-token" : NULL;
  data++, size--;
  listen_once();
  int stop[2];
  FZ_ASSERT(pipe2(stop, O_CLOEXEC) == 0);
  fake f = {.data = data, .size = size, .stop_fd = stop[0]};
  pthread_t th;
  FZ_ASSERT(pthread_create(&th, NULL, fake_main, &f) == 0);
  int64_t t0 = now_ms();
  rr_store *s = NULL;
  int st = rr__store_tcp_open("127.0.0.1", g_port, 0, 2000, token, &s);
  status_ok(st);
  if (st == RR_OK) {
    void *v = NULL;
    size_t vl = 12345;
    int64_t r = 0;
    int ex = 7, del = 7;
    const char *keys[2] = {"k1", "k2"};
    st = rr_store_get(s, "k1", &v, &vl);
    status_ok(st);
    if (st == RR_OK) {
      FZ_ASSERT(vl <= RR__STORE_MAX_VALUE);
      if (vl) FZ_ASSERT(v != NULL && ((volatile uint8_t *)v)[vl - 1] == ((uint8_t *)v)[vl - 1]);
      free(v);
    }
    status_ok(rr_store_add(s, "k2", 5, &r));
    status_ok(rr_store_check(s, keys, 2, &ex));
    status_ok(rr_store_wait(s, keys, 2, 50));
    status_ok(rr_store_delete(s, "k1", &del));
    status_ok(rr_store_set(s, "k3", "abc", 3));
    v = NULL;
    st = rr_store_get(s, "k3", &v, &vl);
    status_ok(st);
    if (st == RR_OK) free(v);
    rr_store_free(s);
  }
  /* Seven calls, each bounded by the 2 s timeout (+ 2 s grace for get/wait). */
  FZ_ASSERT(now_ms() - t0 < 30000);
  FZ_ASSERT(write(stop[1], "x", 1) == 1);
  FZ_ASSERT(pthread_join(th, NULL) == 0);
  close(stop[0]);
  close(stop[1]);
  return 0;
}
