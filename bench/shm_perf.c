/* shm_perf, the measurements behind docs/shm.md: float32 sum all-reduce busbw (nccl-tests
 * definition, 2(n-1)/n x bytes / time, out of place) and 8-byte latency over whatever transport the
 * environment selects (RR_TRANSPORT=auto: shm between ranks of this host; tcp: sockets),
 * plus the bandwidth of a plain memcpy of the same bytes in one process.
 *
 *   shm_perf <np> [bytes ...]     (default: 8 2097152 268435456)
 *   shm_perf lane                 the transport alone: two processes, one shm lane,
 *                                 8-byte ping-pong busy-polling and sleeping in poll()
 *
 * Every size runs warm-up calls, then 5 batches of calls; a batch's time is the slowest
 * rank's average per call. Printed: the median batch and the range. It forks its own ranks
 * (rr_spawn, no launcher) and reaches into the group and the shm transport, so it links the
 * internal library; the nccl-tests style *_perf tools are the user-facing ones. */
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "group/pg.h"
#include "transport/transport.h" /* rr__shm_transport */

#define BATCHES 5

/* A rank's call that must succeed: otherwise say which and why, and fail the rank. */
#define OK(call)                                                                                   \
  do {                                                                                             \
    int st_ = (call);                                                                              \
    if (st_ != RR_OK) {                                                                            \
      fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, rr_status_name(st_), rr_last_error()); \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct pargs {
  int nsizes;
  size_t sizes[16];
} pargs;

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int iters_for(size_t bytes) {
  if (bytes <= 4096) return 2000;
  if (bytes <= (4u << 20)) return 100;
  if (bytes <= (64u << 20)) return 10;
  return 3;
}

static int rank_main(int rank, void *arg) {
  const pargs *pa = arg;
  rr_pg *pg;
  OK(rr_init_process_group(&pg, NULL));
  int n = rr_get_world_size(pg);
  const char *tp = n > 1 ? pg->comm->peers[(rank + 1) % n].tp->name : "none";
  for (int s = 0; s < pa->nsizes; s++) {
    size_t bytes = pa->sizes[s], count = bytes / sizeof(float);
    float *src = malloc(bytes ? bytes : 4), *dst = malloc(bytes ? bytes : 4);
    if (!src || !dst) {
      fprintf(stderr, "rank %d: out of memory for %zu bytes\n", rank, bytes);
      return 1;
    }
    for (size_t i = 0; i < count; i++) src[i] = (float)(i % 7);
    memset(dst, 0, bytes);
    int it = iters_for(bytes);
    for (int w = 0; w < (it > 10 ? 10 : 2); w++)
      OK(rr_all_reduce(pg, src, dst, count, RR_FLOAT32, RR_SUM));
    double per[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
      OK(rr_barrier(pg));
      double t0 = now_s();
      for (int i = 0; i < it; i++) OK(rr_all_reduce(pg, src, dst, count, RR_FLOAT32, RR_SUM));
      double t = (now_s() - t0) / it;
      OK(rr_all_reduce(pg, &t, &per[b], 1, RR_FLOAT64, RR_MAX));
    }
    if (dst[count ? count - 1 : 0] != (count ? (float)(((count - 1) % 7) * n) : 0.0f)) {
      fprintf(stderr, "rank %d: wrong result at %zu bytes\n", rank, bytes);
      return 1;
    }
    qsort(per, BATCHES, sizeof per[0], cmp_dbl);
    if (rank == 0) {
      double f = 2.0 * (n - 1) / n;
      if (bytes <= 64)
        printf("%-4s np=%d %10zu B  time median %8.2f us  (min %.2f, max %.2f)\n", tp, n, bytes,
               per[BATCHES / 2] * 1e6, per[0] * 1e6, per[BATCHES - 1] * 1e6);
      else
        printf("%-4s np=%d %10zu B  busbw median %6.2f GB/s  (min %.2f, max %.2f)  time %.1f us\n",
               tp, n, bytes, f * bytes / per[BATCHES / 2] / 1e9, f * bytes / per[BATCHES - 1] / 1e9,
               f * bytes / per[0] / 1e9, per[BATCHES / 2] * 1e6);
      fflush(stdout);
    }
    free(src);
    free(dst);
  }
  OK(rr_destroy_process_group(pg));
  return 0;
}

static void memcpy_bw(size_t bytes) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) return;
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double per[BATCHES];
  int it = iters_for(bytes);
  for (int k = 0; k < BATCHES; k++) {
    double t0 = now_s();
    for (int i = 0; i < it; i++) {
      memcpy(b, a, bytes);
      __asm__ volatile("" ::"r"(b) : "memory");
    }
    per[k] = (now_s() - t0) / it;
  }
  qsort(per, BATCHES, sizeof per[0], cmp_dbl);
  printf("memcpy     %10zu B  %6.2f GB/s (median of %d)\n", bytes, bytes / per[BATCHES / 2] / 1e9,
         BATCHES);
  free(a);
  free(b);
}

/* Complete r on lane c: busy-poll progress, or sleep in poll() when nothing moved. */
static int lane_wait(rr__conn *c, rr__req *r, int sleep) {
  while (!r->complete) {
    size_t moved = 0;
    if (c->tp->progress(c, &moved) != RR_OK) return -1;
    if (moved || r->complete || !sleep) continue;
    struct pollfd p;
    if (c->tp->pollfd(c, &p)) poll(&p, 1, 1000);
  }
  return 0;
}

static int lane_side(int me, int ctrl, pid_t peer_pid) {
  rr__peer_info self = {.global_rank = me, .pid = (int)getpid(), .nsocks = 1};
  rr__peer_info peer = {.global_rank = 1 - me, .pid = (int)peer_pid, .nsocks = 1};
  snprintf(self.hostid, sizeof self.hostid, "lane");
  snprintf(peer.hostid, sizeof peer.hostid, "lane");
  rr__conn *lanes[RR__MAX_LANES], *c;
  int n = 0;
  if (rr__shm_transport.connect(&self, &peer, 1 - me, NULL, 0, ctrl, rr__now_ms() + 10000, lanes,
                                RR__MAX_LANES, &n) != RR_OK) {
    fprintf(stderr, "connect: %s\n", rr_last_error());
    return 1;
  }
  c = lanes[0];
  for (int sleep = 0; sleep < 2; sleep++) {
    double per[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
      int rounds = sleep ? 2000 : 20000;
      double t0 = now_s();
      for (int i = 0; i < rounds; i++) {
        uint64_t v = (uint64_t)i, w = 0;
        rr__req s = {.buf = (char *)&v, .len = 8}, r = {.buf = (char *)&w, .len = 8};
        if (me == 0) {
          c->tp->isend(c, &s);
          c->tp->irecv(c, &r);
          if (lane_wait(c, &s, sleep) || lane_wait(c, &r, sleep)) return 1;
        } else {
          c->tp->irecv(c, &r);
          if (lane_wait(c, &r, sleep)) return 1;
          c->tp->isend(c, &s);
          if (lane_wait(c, &s, sleep)) return 1;
        }
      }
      per[b] = (now_s() - t0) / rounds / 2; /* one way */
    }
    qsort(per, BATCHES, sizeof per[0], cmp_dbl);
    if (me == 0)
      printf("lane 8 B one-way (half round trip), %s: median %.2f us (min %.2f, max %.2f)\n",
             sleep ? "sleeping in poll()" : "busy-polling", per[BATCHES / 2] * 1e6, per[0] * 1e6,
             per[BATCHES - 1] * 1e6);
  }
  c->tp->close(c);
  return 0;
}

static int lane_main(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 1;
  pid_t parent = getpid();
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    _exit(lane_side(1, sv[1], parent));
  }
  close(sv[1]);
  int rc = lane_side(0, sv[0], child);
  int ws = 0;
  waitpid(child, &ws, 0);
  return rc || !WIFEXITED(ws) || WEXITSTATUS(ws);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "lane")) return lane_main();
  if (argc < 2) {
    fprintf(stderr, "usage: %s <np> [bytes ...]\n", argv[0]);
    return 2;
  }
  int np = atoi(argv[1]);
  pargs pa = {0};
  for (int i = 2; i < argc && pa.nsizes < 16; i++)
    pa.sizes[pa.nsizes++] = strtoull(argv[i], NULL, 0);
  if (!pa.nsizes) {
    size_t d[] = {8, 2u << 20, 256u << 20};
    for (int i = 0; i < 3; i++) pa.sizes[pa.nsizes++] = d[i];
  }
  for (int s = 0; s < pa.nsizes; s++)
    if (pa.sizes[s] > 64) memcpy_bw(pa.sizes[s]);
  fflush(stdout);
  rr_spawn_status st;
  if (rr_spawn(np, rank_main, &pa, &st) != RR_OK) {
    fprintf(stderr, "failed: %s\n", rr_last_error());
    return 1;
  }
  return 0;
}
