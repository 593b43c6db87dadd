/*
 * The ceiling: a bare TCP socket ring all-reduce, no library. float32 sum, out of place.
 *
 * Each rank listens on 127.0.0.1:$SR_PORT+rank and connects to its right neighbour
 * (rank+1 mod n); it accepts one connection from its left. The buffer is cut into n chunks.
 * Reduce-scatter: n-1 steps; in step s a rank sends chunk (r-s) to the right and receives
 * chunk (r-s-1) from the left into a cache-sized segment, adding it to its own contribution
 * as it arrives (dst = src + incoming), while its own send is in flight (one thread,
 * non-blocking sockets, poll). All-gather: n-1 steps; chunk (r+1-s) goes right, chunk (r-s)
 * arrives from the left straight into its place in dst. No per-call allocation.
 *
 * SR_THREADS=1 (system "socket-ring-mt"): the same ring with a second thread per rank that
 * does each step's send with blocking calls while the main thread receives and reduces, so a
 * rank's send copy and receive copy can run on two cores at once. The faster of the two is
 * the ceiling bench/compare holds ringreduce's TCP transport to.
 *
 * SR_ONESOCK=1, at two ranks only: one connection carries both directions (as a TCP lane did
 * in ringreduce before 19cff2d), to measure what a two-way socket costs.
 *
 * Launch one process per rank with RANK and WORLD_SIZE set (rrun, torchrun, mpirun's
 * OMPI_COMM_WORLD_* also work) and SR_PORT a free base port. SR_SOCKBUF sets SO_SNDBUF and
 * SO_RCVBUF (default 4M, 0 = kernel autotuning), SR_SEG the receive segment (default 256K).
 * Prints the RESULT lines of common.h (system "socket-ring").
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

static int g_rank, g_np;
static int g_right = -1, g_left = -1; /* send to the right, receive from the left */
static size_t g_seg = 256u << 10;
static float *g_tmp;

static void die(const char *what) {
  fprintf(stderr, "socket_ring: rank %d: %s: %s\n", g_rank, what, strerror(errno));
  exit(1);
}

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const char *sb = getenv("SR_SOCKBUF");
  int buf = sb ? (int)cmp_parse_size(sb) : (4 << 20);
  if (buf > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  }
}

static void connect_ring(int port) {
  int one_sock = g_np == 2 && getenv("SR_ONESOCK") && atoi(getenv("SR_ONESOCK")) > 0;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) die("socket");
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  tune(ls); /* buffer sizes are inherited by the accepted socket (window scaling) */
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)(port + g_rank));
  if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
  if (listen(ls, 4) < 0) die("listen");

  if (one_sock && g_rank == 1) { /* rank 0 connects; its one connection is both ways */
    g_left = g_right = accept(ls, NULL, NULL);
    if (g_left < 0) die("accept");
    tune(g_left);
    close(ls);
    return;
  }
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) die("socket");
  tune(s);
  a.sin_port = htons((uint16_t)(port + (g_rank + 1) % g_np));
  for (int tries = 0;; tries++) {
    if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) break;
    if (tries > 3000) die("connect");
    usleep(10000);
    close(s);
    s = socket(AF_INET, SOCK_STREAM, 0);
    tune(s);
  }
  g_right = s;
  if (one_sock) { /* rank 0: nobody connects to it */
    g_left = s;
    close(ls);
    return;
  }
  g_left = accept(ls, NULL, NULL);
  if (g_left < 0) die("accept");
  tune(g_left);
  close(ls);
}

/* Blocking helpers for the control messages (barrier, the max over ranks). */
static void send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t r = send(fd, c, n, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      die("send");
    }
    c += r, n -= (size_t)r;
  }
}
static void recv_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n) {
    ssize_t r = recv(fd, c, n, 0);
    if (r == 0) {
      errno = ECONNRESET;
      die("recv");
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      die("recv");
    }
    c += r, n -= (size_t)r;
  }
}

/* One pass of a token around the ring: v[0] is maxed, v[1] is maxed; rank 0 ends with the
 * result. Two passes make a barrier. */
static void ring_max(double v[2]) {
  double in[2];
  if (g_rank == 0) {
    send_all(g_right, v, sizeof in);
    recv_all(g_left, in, sizeof in);
  } else {
    recv_all(g_left, in, sizeof in);
    for (int i = 0; i < 2; i++) in[i] = in[i] > v[i] ? in[i] : v[i];
    send_all(g_right, in, sizeof in);
  }
  if (g_rank == 0)
    for (int i = 0; i < 2; i++) v[i] = in[i] > v[i] ? in[i] : v[i];
}
static void barrier(void) {
  double v[2] = {0, 0};
  ring_max(v);
  ring_max(v);
}

/* The sender thread of SR_THREADS=1: one job at a time, handed over under g_mu. */
static int g_threads;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static const char *g_job_p;
static size_t g_job_n;
static int g_job_busy; /* 1: a job is posted and not finished */

static void *sender_main(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&g_mu);
    while (!g_job_busy) pthread_cond_wait(&g_cv, &g_mu);
    const char *p = g_job_p;
    size_t n = g_job_n;
    pthread_mutex_unlock(&g_mu);
    send_all(g_right, p, n);
    pthread_mutex_lock(&g_mu);
    g_job_busy = 0;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
  }
  return NULL;
}

/* The threaded step: the sender thread sends while this thread receives (blocking) and
 * reduces each piece as it arrives. */
static void step_mt(const char *sp, size_t sn, char *dst, const float *red, size_t rn) {
  pthread_mutex_lock(&g_mu);
  g_job_p = sp, g_job_n = sn, g_job_busy = 1;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  for (size_t got = 0; got < rn;) {
    size_t want = rn - got;
    if (red != NULL && want > g_seg) want = g_seg;
    char *to = red != NULL ? (char *)g_tmp : dst + got;
    recv_all(g_left, to, want);
    if (red != NULL) {
      float *d = (float *)(dst + got);
      const float *s = (const float *)((const char *)red + got);
      for (size_t i = 0; i < want / sizeof(float); i++) d[i] = s[i] + g_tmp[i];
    }
    got += want;
  }
  pthread_mutex_lock(&g_mu);
  while (g_job_busy) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
}

/* One ring step: send [sp, sp+sn) to the right while receiving rn bytes from the left.
 * With red != NULL the incoming bytes land in g_tmp (a segment at a time) and
 * dst[i] = red[i] + incoming[i]; otherwise they land in dst directly. */
static void step(const char *sp, size_t sn, char *dst, const float *red, size_t rn) {
  if (g_threads) {
    step_mt(sp, sn, dst, red, rn);
    return;
  }
  size_t sent = 0, got = 0, fill = 0, done = 0; /* fill/done: bytes in g_tmp, reduced */
  while (sent < sn || got < rn) {
    struct pollfd p[2];
    int np = 0, is = -1, ir = -1;
    if (sent < sn) {
      p[np].fd = g_right;
      p[np].events = POLLOUT;
      is = np++;
    }
    if (got < rn) {
      p[np].fd = g_left;
      p[np].events = POLLIN;
      ir = np++;
    }
    if (poll(p, (nfds_t)np, -1) < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (is >= 0 && (p[is].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t r = send(g_right, sp + sent, sn - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r < 0 && errno != EAGAIN && errno != EINTR) die("send");
      if (r > 0) sent += (size_t)r;
    }
    if (ir >= 0 && (p[ir].revents & (POLLIN | POLLERR | POLLHUP))) {
      if (red == NULL) {
        ssize_t r = recv(g_left, dst + got, rn - got, MSG_DONTWAIT);
        if (r == 0) {
          errno = ECONNRESET;
          die("recv");
        }
        if (r < 0 && errno != EAGAIN && errno != EINTR) die("recv");
        if (r > 0) got += (size_t)r;
      } else {
        size_t want = g_seg - fill;
        if (want > rn - got) want = rn - got;
        ssize_t r = recv(g_left, (char *)g_tmp + fill, want, MSG_DONTWAIT);
        if (r == 0) {
          errno = ECONNRESET;
          die("recv");
        }
        if (r < 0 && errno != EAGAIN && errno != EINTR) die("recv");
        if (r > 0) {
          fill += (size_t)r;
          /* reduce the whole floats that arrived */
          size_t upto = fill / sizeof(float) * sizeof(float);
          size_t off = got - (fill - (size_t)r); /* chunk offset of g_tmp[0] */
          float *d = (float *)(dst + off);
          const float *s = (const float *)((const char *)red + off);
          const float *t = g_tmp;
          for (size_t i = done / sizeof(float); i < upto / sizeof(float); i++) d[i] = s[i] + t[i];
          done = upto;
          got += (size_t)r;
          if (fill == g_seg) fill = done = 0;
        }
      }
    }
  }
}

static void allreduce(const float *src, float *dst, size_t count) {
  int n = g_np, r = g_rank;
  if (n == 1) {
    memcpy(dst, src, count * sizeof(float));
    return;
  }
#define CB(c) (count * (size_t)(c) / (size_t)n) /* first element of chunk c */
  for (int s = 0; s < n - 1; s++) {
    int sc = ((r - s) % n + n) % n, rc = ((r - s - 1) % n + n) % n;
    const float *sb = s == 0 ? src : dst;
    step((const char *)(sb + CB(sc)), (CB(sc + 1) - CB(sc)) * sizeof(float), (char *)(dst + CB(rc)),
         src + CB(rc), (CB(rc + 1) - CB(rc)) * sizeof(float));
  }
  for (int s = 0; s < n - 1; s++) {
    int sc = ((r + 1 - s) % n + n) % n, rc = ((r - s) % n + n) % n;
    step((const char *)(dst + CB(sc)), (CB(sc + 1) - CB(sc)) * sizeof(float),
         (char *)(dst + CB(rc)), NULL, (CB(rc + 1) - CB(rc)) * sizeof(float));
  }
#undef CB
}

int main(int argc, char **argv) {
  cmp_opts o;
  g_threads = getenv("SR_THREADS") != NULL && atoi(getenv("SR_THREADS")) > 0;
  cmp_parse(argc, argv, &o, g_threads ? "socket-ring-mt" : "socket-ring");
  g_rank = cmp_env_int("RANK", "OMPI_COMM_WORLD_RANK", 0);
  g_np = cmp_env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", 1);
  int port = cmp_env_int("SR_PORT", "SR_PORT", 29650);
  if (getenv("SR_SEG")) g_seg = cmp_parse_size(getenv("SR_SEG")) / 4 * 4;
  if (g_seg < 4096) g_seg = 4096;
  if (g_np > 1) connect_ring(port);
  if (posix_memalign((void **)&g_tmp, 4096, g_seg)) die("alloc");
  pthread_t sender;
  if (g_threads && g_np > 1) {
    errno = pthread_create(&sender, NULL, sender_main, NULL);
    if (errno != 0) die("pthread_create");
  }

  size_t maxcount = o.maxbytes / sizeof(float);
  float *src, *dst;
  if (posix_memalign((void **)&src, 4096, maxcount * sizeof(float) + 4096) ||
      posix_memalign((void **)&dst, 4096, maxcount * sizeof(float) + 4096))
    die("alloc");
  cmp_fill(src, maxcount, g_rank);
  memset(dst, 0, maxcount * sizeof(float));

  for (size_t bytes = o.minbytes; bytes <= o.maxbytes; bytes *= o.factor) {
    size_t count = bytes / sizeof(float);
    int iters = cmp_iters(&o, bytes), warm = cmp_warmup(&o, bytes);
    for (int i = 0; i < warm; i++) allreduce(src, dst, count);
    barrier();
    double t0 = cmp_now_us();
    for (int i = 0; i < iters; i++) allreduce(src, dst, count);
    double t = (cmp_now_us() - t0) / iters;
    memset(dst, 0xff, count * sizeof(float));
    allreduce(src, dst, count);
    double v[2] = {t, (double)cmp_check(dst, count, g_np)};
    ring_max(v);
    if (g_rank == 0) cmp_report(o.system, g_np, bytes, v[0], (long)v[1]);
    if (bytes > o.maxbytes / o.factor) break;
  }
  barrier();
  return 0;
}
