/* Soak: a long run of random collectives on 4 ranks, every result verified, and no resource
 * creeping up. Each call's kind (all_reduce, reduce_scatter, all_gather, broadcast, reduce,
 * barrier, sendrecv, send/recv), dtype (all 8), op (every op valid for the dtype), count
 * (0..65536, mostly small), root or shift, placement (in place or not) and form (blocking or
 * async + wait) come from one generator that every rank runs, so all ranks make the same
 * calls without talking. Every rank checks its whole result after each call against a
 * reference it computes alone (integers exact, floats in float64 with harness.h's stated
 * tolerance).
 *
 * Resources: after the warm-up (WARMUP calls plus every collective once at the largest
 * count, so buffers and scratch reached their final size) each rank records its open file
 * descriptors (/proc/self/fd), threads (/proc/self/task) and resident set
 * (RssAnon in /proc/self/status). At the end the descriptors and threads must be exactly equal, and
 * the resident set may not have grown by more than RSS_SLACK (malloc's arenas breathe a little; a
 * leak of one buffer per call would be 100s of MiB at 100,000 calls).
 *
 *   test_soak <calls>      (5000 in the default suite, 100000 with label soak)
 * Seed: $RR_TEST_SEED; a failing call prints its index and parameters. */
#include <dirent.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/harness.h"

#define W 4
#define MAXC 65536
#define WARMUP 500
#define RSS_SLACK (4 << 20) /* bytes the resident set may grow after the warm-up */

enum {
  K_ALL_REDUCE,
  K_REDUCE_SCATTER,
  K_ALL_GATHER,
  K_BROADCAST,
  K_REDUCE,
  K_BARRIER,
  K_SENDRECV,
  K_SENDRECV_PAIR,
  K_NKINDS
};
static const char *kind_names[K_NKINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                           "broadcast",  "reduce",         "barrier",
                                           "sendrecv",   "send/recv"};

typedef struct call {
  int kind, root, shift, in_place, async;
  rr_dtype dtype;
  rr_op op;
  size_t count;
  uint64_t seed;
} call;

typedef struct report {
  atomic_int done;
  long calls, wrong;
  double secs;
  long fd_warm, fd_end, thr_warm, thr_end;
  long rss_warm, rss_end;
  char msg[1024];
  char fd_list_warm[2048], fd_list_end[2048]; /* "3:socket:[123] 4:anon_inode:[eventfd] ..." */
} report;

static report *g_rep;
static long g_ncalls;

static void make_call(long i, call *c, int force_kind, size_t force_count) {
  uint64_t s = t_seed();
  memset(c, 0, sizeof *c);
  c->kind = force_kind >= 0 ? force_kind : (int)(t_bits(s, 1, (uint64_t)i) % K_NKINDS);
  c->dtype = (rr_dtype)(t_bits(s, 2, (uint64_t)i) % RR_NUM_DTYPES);
  static const rr_op float_ops[] = {RR_SUM, RR_PROD, RR_MIN, RR_MAX, RR_AVG};
  uint64_t ob = t_bits(s, 3, (uint64_t)i);
  c->op = t_is_float(c->dtype) ? float_ops[ob % 5] : (rr_op)(ob % RR_NUM_OPS);
  uint64_t cb = t_bits(s, 4, (uint64_t)i);
  switch (cb % 10) { /* mostly small: the soak is about many calls, not many bytes */
    case 0:
      c->count = 0;
      break;
    case 1:
    case 2:
    case 3:
      c->count = 1 + (cb >> 8) % 16;
      break;
    case 4:
    case 5:
    case 6:
    case 7:
      c->count = 17 + (cb >> 8) % 4080;
      break;
    default:
      c->count = 4097 + (cb >> 8) % (MAXC - 4096);
      break;
  }
  if (force_count) c->count = force_count;
  c->root = (int)(t_bits(s, 5, (uint64_t)i) % W);
  c->shift = 1 + (int)(t_bits(s, 6, (uint64_t)i) % (W - 1));
  c->in_place = (int)(t_bits(s, 7, (uint64_t)i) & 1);
  c->async = (t_bits(s, 8, (uint64_t)i) % 4) == 0;
  c->seed = t_bits(s, 9, (uint64_t)i);
}

static int finish(int st, rr_work *w) {
  if (st != RR_OK || !w) return st;
  st = rr_work_wait(w, 0);
  rr_work_free(w);
  return st;
}

/* Run call c on this rank and check its result; returns the wrong-element count, or -1
 * when the call failed (message in rr_last_error()). */
static long run_call(rr_pg *pg, int rank, const call *c, char *a, char *b) {
  size_t n = c->count, es = rr_dtype_size(c->dtype);
  rr_dtype d = c->dtype;
  rr_op op = c->op;
  uint64_t sd = c->seed;
  rr_work *w = NULL;
  rr_work **wp = c->async ? &w : NULL;
  int st;
  long bad = 0;
  switch (c->kind) {
    case K_ALL_REDUCE: {
      t_fill(a, n, d, op, sd, rank, 0);
      char *out = c->in_place ? a : b;
      st = wp ? rr_all_reduce_async(pg, a, out, n, d, op, wp) : rr_all_reduce(pg, a, out, n, d, op);
      if ((st = finish(st, w)) != RR_OK) return -1;
      return (long)t_check_reduced(out, n, d, op, sd, W, 0, "all_reduce");
    }
    case K_REDUCE_SCATTER: {
      t_fill(a, n * W, d, op, sd, rank, 0);
      char *out = c->in_place ? a + (size_t)rank * n * es : b;
      st = wp ? rr_reduce_scatter_async(pg, a, out, n, d, op, wp)
              : rr_reduce_scatter(pg, a, out, n, d, op);
      if ((st = finish(st, w)) != RR_OK) return -1;
      return (long)t_check_reduced(out, n, d, op, sd, W, (size_t)rank * n, "reduce_scatter");
    }
    case K_ALL_GATHER: {
      char *in = c->in_place ? b + (size_t)rank * n * es : a;
      t_fill(in, n, d, RR_SUM, sd, rank, 0);
      st = wp ? rr_all_gather_async(pg, in, b, n, d, wp) : rr_all_gather(pg, in, b, n, d);
      if ((st = finish(st, w)) != RR_OK) return -1;
      for (int r = 0; r < W; r++)
        bad += (long)t_check_copied(b + (size_t)r * n * es, n, d, RR_SUM, sd, r, 0, "all_gather");
      return bad;
    }
    case K_BROADCAST: {
      if (rank == c->root)
        t_fill(a, n, d, RR_SUM, sd, rank, 0);
      else
        memset(a, 0x5a, n * es);
      char *out = c->in_place ? a : b;
      st = wp ? rr_broadcast_async(pg, a, out, n, d, c->root, wp)
              : rr_broadcast(pg, a, out, n, d, c->root);
      if ((st = finish(st, w)) != RR_OK) return -1;
      return (long)t_check_copied(out, n, d, RR_SUM, sd, c->root, 0, "broadcast");
    }
    case K_REDUCE: {
      t_fill(a, n, d, op, sd, rank, 0);
      char *out = c->in_place ? a : b;
      st = wp ? rr_reduce_async(pg, a, out, n, d, op, c->root, wp)
              : rr_reduce(pg, a, out, n, d, op, c->root);
      if ((st = finish(st, w)) != RR_OK) return -1;
      return rank == c->root ? (long)t_check_reduced(out, n, d, op, sd, W, 0, "reduce") : 0;
    }
    case K_BARRIER:
      st = wp ? rr_barrier_async(pg, wp) : rr_barrier(pg);
      return finish(st, w) == RR_OK ? 0 : -1;
    case K_SENDRECV: {
      int dst = (rank + c->shift) % W, src = (rank + W - c->shift) % W;
      t_fill(a, n, d, RR_SUM, sd, rank, 0);
      memset(b, 0x5a, n * es);
      st = wp ? rr_sendrecv_async(pg, a, n, dst, b, n, src, d, wp)
              : rr_sendrecv(pg, a, n, dst, b, n, src, d);
      if ((st = finish(st, w)) != RR_OK) return -1;
      return (long)t_check_copied(b, n, d, RR_SUM, sd, src, 0, "sendrecv");
    }
    default: { /* K_SENDRECV_PAIR: pairs (0,1) (2,3) by root's parity: one sends, one receives */
      int partner = rank ^ 1, sender = (rank & 1) == (c->root & 1);
      if (sender) {
        t_fill(a, n, d, RR_SUM, sd, rank, 0);
        st = wp ? rr_send_async(pg, a, n, d, partner, wp) : rr_send(pg, a, n, d, partner);
        return finish(st, w) == RR_OK ? 0 : -1;
      }
      memset(b, 0x5a, n * es);
      st = wp ? rr_recv_async(pg, b, n, d, partner, wp) : rr_recv(pg, b, n, d, partner);
      if ((st = finish(st, w)) != RR_OK) return -1;
      return (long)t_check_copied(b, n, d, RR_SUM, sd, partner, 0, "recv");
    }
  }
}

static long count_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  long n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the directory stream's own descriptor (for /proc/self/fd) */
}

/* For a socket inode, "tcp local_port>remote_port" from /proc/net/tcp{,6}. */
static void sock_ports(unsigned long inode, char *out, size_t cap) {
  const char *files[2] = {"/proc/net/tcp", "/proc/net/tcp6"};
  out[0] = '\0';
  for (int f = 0; f < 2 && !out[0]; f++) {
    FILE *fp = fopen(files[f], "r");
    if (!fp) continue;
    char line[512];
    while (fgets(line, sizeof line, fp)) {
      char loc[128], rem[128];
      unsigned st;
      unsigned long ino;
      if (sscanf(line, " %*s %127s %127s %x %*s %*s %*s %*s %*s %lu", loc, rem, &st, &ino) != 4 ||
          ino != inode)
        continue;
      char *lc = strrchr(loc, ':'), *rc = strrchr(rem, ':');
      snprintf(out, cap, "(%ld>%ld%s)", lc ? strtol(lc + 1, NULL, 16) : -1,
               rc ? strtol(rc + 1, NULL, 16) : -1, st == 0x0A ? " listen" : "");
      break;
    }
    fclose(fp);
  }
}

/* What each open descriptor is, to tell which one came or went. */
static void list_fds(char *out, size_t cap) {
  DIR *d = opendir("/proc/self/fd");
  size_t o = 0;
  out[0] = '\0';
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && o + 80 < cap) {
    if (e->d_name[0] == '.') continue;
    char path[300], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t l = readlink(path, target, sizeof target - 1);
    if (l <= 0) continue;
    target[l] = '\0';
    char ports[64] = "";
    unsigned long ino;
    if (sscanf(target, "socket:[%lu]", &ino) == 1) sock_ports(ino, ports, sizeof ports);
    o += (size_t)snprintf(out + o, cap - o, "%s:%s%s ", e->d_name, target, ports);
  }
  closedir(d);
}

/* Private (anonymous) resident memory: RssAnon, not the whole resident set, because the
 * shared-memory transport's rings are touched lazily (their pages join the resident set
 * as deeper slots are first used, up to the mapping's fixed size); a leak of heap or
 * scratch buffers shows here. Leaked mappings themselves are shm_leak's business. */
static long rss_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "RssAnon: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

static void describe(const call *c, char *buf, size_t n) {
  snprintf(buf, n, "%s %zu x %s, %s, root %d, shift %d, %s, %s", kind_names[c->kind], c->count,
           rr_dtype_name(c->dtype), rr_op_name(c->op), c->root, c->shift,
           c->in_place ? "in place" : "out of place", c->async ? "async" : "blocking");
}

static int soak_rank(int rank, void *arg) {
  (void)arg;
  report *me = &g_rep[rank];
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  size_t bytes = (size_t)MAXC * W * 8;
  char *a = malloc(bytes), *b = malloc(bytes);
  T_CHECK(a && b, "out of memory");
  memset(a, 0, bytes);
  memset(b, 0, bytes);
  double t0 = t_now();
  char desc[256];
  long total = g_ncalls + K_NKINDS * 2;
  for (long i = 0, j = 0; j < total; j++) {
    call c;
    /* After WARMUP calls: every kind once at the largest count, in place and not. */
    int warm_extra = j >= WARMUP && j < WARMUP + K_NKINDS * 2;
    if (warm_extra) {
      make_call(i, &c, (int)(j - WARMUP) / 2, MAXC);
      c.in_place = (int)(j - WARMUP) % 2;
      c.dtype = RR_FLOAT64;
      c.op = RR_SUM;
    } else {
      make_call(i++, &c, -1, 0);
    }
    long bad = run_call(pg, rank, &c, a, b);
    if (bad != 0) {
      describe(&c, desc, sizeof desc);
      if (bad < 0)
        snprintf(me->msg, sizeof me->msg, "call %ld (%s) failed: %s", j, desc, rr_last_error());
      else
        snprintf(me->msg, sizeof me->msg, "call %ld (%s): %ld wrong elements", j, desc, bad);
      me->wrong = bad;
      rr_abort(pg); /* the others would wait for us */
      rr_destroy_process_group(pg);
      atomic_store(&me->done, 1);
      return 1;
    }
    if (j == WARMUP + K_NKINDS * 2 - 1 || (g_ncalls + K_NKINDS * 2 <= WARMUP && j == 0)) {
      me->fd_warm = count_dir("/proc/self/fd");
      list_fds(me->fd_list_warm, sizeof me->fd_list_warm);
      me->thr_warm = count_dir("/proc/self/task") + 1;
      me->rss_warm = rss_bytes();
    }
    me->calls = j + 1;
  }
  me->fd_end = count_dir("/proc/self/fd");
  list_fds(me->fd_list_end, sizeof me->fd_list_end);
  me->thr_end = count_dir("/proc/self/task") + 1;
  me->rss_end = rss_bytes();
  me->secs = t_now() - t0;
  T_OK(rr_destroy_process_group(pg));
  free(a);
  free(b);
  atomic_store(&me->done, 1);
  return 0;
}

int main(int argc, char **argv) {
  g_ncalls = argc > 1 ? atol(argv[1]) : 5000;
  if (g_ncalls < 1) return fprintf(stderr, "usage: %s <calls>\n", argv[0]), 2;
  g_rep = mmap(NULL, W * sizeof *g_rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_rep == MAP_FAILED) return perror("mmap"), 1;
  memset(g_rep, 0, W * sizeof *g_rep);
  t_seed_announce("test_soak");
  int codes[W], sigs[W];
  double t0 = t_now();
  int rc = t_run(W, soak_rank, NULL, NULL, 7200, codes, sigs);
  double wall = t_now() - t0;
  int bad = rc != 0;
  for (int r = 0; r < W; r++) {
    report *p = &g_rep[r];
    printf(
        "rank %d: exit %d signal %d, %ld calls in %.1f s (%.0f calls/s); fds %ld -> %ld, "
        "threads %ld -> %ld, anon RSS %.2f -> %.2f MiB\n",
        r, codes[r], sigs[r], p->calls, p->secs, p->secs > 0 ? (double)p->calls / p->secs : 0,
        p->fd_warm, p->fd_end, p->thr_warm, p->thr_end, (double)p->rss_warm / 1048576,
        (double)p->rss_end / 1048576);
    if (p->msg[0]) printf("rank %d: %s\n", r, p->msg);
    if (codes[r] || sigs[r] || !atomic_load(&p->done)) bad = 1;
    if (p->wrong) bad = 1;
    if (p->fd_end != p->fd_warm) {
      bad = 1;
      printf("rank %d: OPEN DESCRIPTORS CHANGED\n  after warm-up: %s\n  at the end:    %s\n", r,
             p->fd_list_warm, p->fd_list_end);
    }
    if (p->thr_end != p->thr_warm) bad = 1, printf("rank %d: THREADS LEAKED\n", r);
    if (p->rss_end > p->rss_warm + RSS_SLACK)
      bad = 1, printf("rank %d: RSS grew by %.2f MiB (slack %d MiB)\n", r,
                      (double)(p->rss_end - p->rss_warm) / 1048576, RSS_SLACK >> 20);
  }
  printf(
      "test_soak: %ld random calls (+%d warm-up extras) on %d ranks, all verified: %s in "
      "%.1f s\n",
      g_ncalls, K_NKINDS * 2, W, bad ? "FAILED" : "passed", wall);
  return bad;
}
