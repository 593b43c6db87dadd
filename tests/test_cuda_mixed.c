/* Ranks that mix threads of one process with other processes, on device buffers, on one host
 * (issue 39; docs/cuda.md "The CUDA IPC path", "Hand-offs on the GPUs' own streams", "One
 * kernel for ranks that share a GPU"). A lane between two threads of a process keeps the host
 * hand-off (two streams of one context must not wait on each other through memory:
 * transport/cuda_ipc.h), and so does every other lane of such a group: with lanes between
 * processes handing segments over by stream memory operations in the same call, the streams
 * waited on each other in a circle once a lane carried more segments than its slots
 * (group/ipc.c, rr__pg_ipc_form; the seg case below). The one-kernel form (group/direct.c)
 * must be declined by every rank alike, since two ranks share a process.
 *
 * A layout names which ranks each process holds, processes separated by '-': "01-23" is
 * world 4, ranks 0 and 1 threads of one process, 2 and 3 of another; "01-2" is world 3, ranks
 * 0 and 1 threads of one process and rank 2 a process of its own. Each process is forked by
 * t_run (tests/harness.c) and starts one thread per rank; the threads meet the other
 * processes' at a tcp:// rendezvous. Rank r takes device r mod RR_TEST_FAKE_DEVICES.
 *
 *   test_cuda_mixed [--fake] coll <layout> [N]
 *       all_reduce, reduce_scatter, all_gather, broadcast and reduce (every root), in and out
 *       of place, then all_to_all and sendrecv (to the right, from the left; out of place
 *       only: they have none in place), at counts 0, 1, 7 and N (default 2047: per block for
 *       reduce_scatter, all_gather and all_to_all; with RR_IPC_SEG_BYTES=4096, 2 segments a
 *       block, no lane more than 8 segments in a call), float32 sum and int32 sum. Every
 *       element of every rank is checked: int32 exactly (wrapping), float32 against a float64
 *       reference within |got - ref| <= n * 2^-23 * sum|x_i| (tests/harness.h, t_eps: n
 *       additions in some order, each rounding once). Around every call the threads of a
 *       process meet at a barrier and read the process's counters: no call may run as one
 *       kernel (rr__direct_calls); in a layout where a process holds two ranks, every ring or
 *       chain segment goes by the host hand-off (rr__ipc_segments), none by stream memory
 *       operations (rr__mop_segments); in one where every process holds one rank, a segment
 *       to another process goes by stream memory operations (unless RR_CUDA_MEMOPS=0); a
 *       counter may not move where the process has no such lane in the call; all_to_all and
 *       sendrecv take the host hand-off on every lane. RR_CUDA_MEMOPS_MIXED=1 (a knob for
 *       tests) lets lanes between processes take stream memory operations even then
 *   test_cuda_mixed [--fake] kill <layout> <p>
 *       every rank loops over 256 KiB float32 all_reduce, broadcast, reduce and all_to_all
 *       (the default segments: one per step); once all are looping, process p is SIGKILLed
 *       at a random moment (RR_TEST_SEED): every surviving rank must fail with RR_EPEER
 *       naming a rank of p, within 20 s of the kill, with nothing left queued on its
 *       process's fake streams, then destroy its group; its process exits 0
 *
 * RR_TEST_EXIT_WAIT=1: a rank whose check failed waits 2 s before its process exits, so the
 * process's other ranks can say where they were.
 *
 * Its own program: test_cuda.c is already its longest file, and the layouts need a harness of
 * their own (k threads in each of m processes). */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/param.h"       /* rr__params_get: RR_CUDA_MEMOPS */
#include "group/pg.h"           /* rr__direct_calls */
#include "transport/cuda_ipc.h" /* rr__ipc_segments, rr__mop_segments */
#include "tests/cuda_harness.h"

#define SKIP 77
#define MAXW 8

static int g_fake;
static size_t g_count = 2047; /* the largest count of the coll sweep */

/* ---- the layout: which ranks each process holds ---- */

typedef struct layout {
  int world, nproc;
  int proc_of[MAXW];       /* rank -> process */
  int nthr[MAXW];          /* process -> how many ranks */
  int ranks[MAXW][MAXW];   /* process -> its ranks */
  char text[2 * MAXW + 1]; /* as given */
} layout;

static int parse_layout(const char *s, layout *L) {
  memset(L, 0, sizeof *L);
  if (strlen(s) >= sizeof L->text) return -1;
  snprintf(L->text, sizeof L->text, "%s", s);
  int seen = 0;
  for (const char *c = s; *c; c++) {
    if (*c == '-') {
      if (!L->nthr[L->nproc]) return -1;
      if (++L->nproc >= MAXW) return -1;
      continue;
    }
    const int r = *c - '0';
    if (r < 0 || r >= MAXW || (seen & (1 << r))) return -1;
    seen |= 1 << r;
    L->proc_of[r] = L->nproc;
    L->ranks[L->nproc][L->nthr[L->nproc]++] = r;
    L->world++;
  }
  if (!L->nthr[L->nproc]) return -1;
  L->nproc++;
  /* The ranks must be 0..world-1. */
  return seen == (1 << L->world) - 1 && L->world >= 2 ? 0 : -1;
}

/* ---- a process: its ranks' threads and their barrier ---- */

typedef struct kcase {
  int victim; /* the process killed */
  double kill_after, killed_at;
  char ready_dir[64];
} kcase;

typedef struct proc {
  const layout *L;
  int p, port;
  pthread_barrier_t bar;
  kcase *kc;                 /* kill only */
  uint64_t ipc, mop, direct; /* the counters at the last snap */
} proc;

typedef struct thr {
  proc *P;
  int rank;
  t_thread th;
} thr;

static const layout *g_layout;
static int (*g_rank_fn)(thr *t);

/* A thread's check failed: the whole process goes, so that the other processes' ranks see a
 * dead peer and fail too, rather than this process's other threads waiting at a barrier. */
static int rank_thread(void *arg) {
  thr *t = arg;
  t_rank = t->rank;
  int rc = g_rank_fn(t);
  if (rc) {
    fprintf(stderr, "rank %d: failed: process %d exits\n", t->rank, t->P->p);
    if (getenv("RR_TEST_EXIT_WAIT")) sleep(2);
    fflush(NULL);
    _exit(1);
  }
  return 0;
}

static int proc_fn(int p, void *arg) {
  const char *mp = getenv("MASTER_PORT");
  proc P = {.L = g_layout, .p = p, .port = mp ? atoi(mp) : 0, .kc = arg};
  /* The ranks are the threads' (tcp:// names them), not t_run's one per process. */
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
  unsetenv("WORLD_SIZE");
  const int k = P.L->nthr[p];
  if (pthread_barrier_init(&P.bar, NULL, (unsigned)k)) return 1;
  thr t[MAXW];
  int rc = 0;
  for (int i = 0; i < k; i++) {
    t[i] = (thr){.P = &P, .rank = P.L->ranks[p][i]};
    if (t_thread_start(&t[i].th, rank_thread, &t[i])) return 1;
  }
  for (int i = 0; i < k; i++) rc |= t_thread_join(&t[i].th);
  pthread_barrier_destroy(&P.bar);
  return rc;
}

static int rank_setup(thr *t, rr_pg **pg) {
  char url[128];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d?rank=%d&world_size=%d", t->P->port, t->rank,
           t->P->L->world);
  rr_pg_options opt;
  rr_pg_options_init(&opt);
  opt.init_method = url;
  T_OK(rr_init_process_group(pg, &opt));
  T_CHECK(rr_get_rank(*pg) == t->rank, "group rank %d", rr_get_rank(*pg));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, t->rank, &dev));
  C_OK(set_device(dev));
  return 0;
}

static void bar(thr *t) {
  pthread_barrier_wait(&t->P->bar);
}

/* ---- which hand-off each process's lanes took ---- */

/* Before a call: every thread of the process is past its previous call; the counters are read
 * before any starts this one. */
static void snap(thr *t) {
  bar(t);
  if (t->rank == t->P->L->ranks[t->P->p][0]) {
    t->P->ipc = rr__ipc_segments();
    t->P->mop = rr__mop_segments();
    t->P->direct = rr__direct_calls();
  }
  bar(t);
}

enum { K_AR, K_RS, K_AG, K_BC, K_RED, K_A2A, K_P2P };

/* Does rank r send segments to its right neighbour in this ring or chain call? The ring
 * kinds on every link; broadcast's chain root -> ... -> root - 1, reduce's root + 1 -> ... ->
 * root (ring/broadcast.c, ring/reduce.c). */
static int ring_link(int kind, int root, int n, int r) {
  if (kind == K_BC) return r != (root + n - 1) % n;
  if (kind == K_RED) return r != root;
  return 1;
}

/* After a call (every thread of the process returned from it): what this process sent. */
static int handoffs(thr *t, int kind, int root, size_t count, const char *what) {
  bar(t);
  const proc *P = t->P;
  const layout *L = P->L;
  const int n = L->world;
  const uint64_t ipc = rr__ipc_segments() - P->ipc, mop = rr__mop_segments() - P->mop;
  const uint64_t direct = rr__direct_calls() - P->direct;
  int rc = 0;
  if (direct) {
    fprintf(stderr, "rank %d: %s: %llu calls ran as one kernel in process %d, want 0\n", t->rank,
            what, (unsigned long long)direct, P->p);
    rc = 1;
  }
  if (kind == K_A2A || kind == K_P2P) {
    /* The host hand-off on every lane, which every lane's pair set up by now. */
    if (mop) {
      fprintf(stderr, "rank %d: %s: %llu segments by stream memory operations, want none\n",
              t->rank, what, (unsigned long long)mop);
      rc = 1;
    }
    if (count > 0 && !ipc) {
      fprintf(stderr, "rank %d: %s: nothing went through CUDA IPC\n", t->rank, what);
      rc = 1;
    }
  } else {
    /* RR_CUDA_MEMOPS=0 (or a device without them), or two ranks in one process anywhere in
     * the group: every lane takes the host hand-off. */
    int shared = 0;
    for (int p = 0; p < L->nproc; p++) shared |= L->nthr[p] > 1;
    if (rr__params_get()->cuda_memops_mixed) shared = 0; /* the tests' knob: mixed anyway */
    const int memops =
        rr__params_get()->cuda_memops && !getenv("RR_FAKE_CUDA_NO_MEMOPS") && !shared;
    int same = 0, cross = 0;
    for (int i = 0; i < L->nthr[P->p]; i++) {
      const int r = L->ranks[P->p][i];
      if (!ring_link(kind, root, n, r)) continue;
      if (L->proc_of[(r + 1) % n] == P->p || !memops)
        same = 1;
      else
        cross = 1;
    }
    /* Every link carries a segment when every block has an element (an all_reduce's n
     * blocks), or the call any element (the others). */
    const int sure = count >= (kind == K_AR ? (size_t)n : 1);
    if (!cross && mop) {
      fprintf(stderr,
              "rank %d: %s: process %d sends to no other process, yet %llu segments went by "
              "stream memory operations\n",
              t->rank, what, P->p, (unsigned long long)mop);
      rc = 1;
    }
    if (!same && ipc) {
      fprintf(stderr,
              "rank %d: %s: process %d sends to none of its own threads, yet %llu segments "
              "took the host hand-off\n",
              t->rank, what, P->p, (unsigned long long)ipc);
      rc = 1;
    }
    if (sure && cross && !mop) {
      fprintf(stderr,
              "rank %d: %s: process %d sends to another process, but no segment went by stream "
              "memory operations\n",
              t->rank, what, P->p);
      rc = 1;
    }
    if (sure && same && !ipc) {
      fprintf(stderr,
              "rank %d: %s: process %d sends to its own thread, but no segment took the host "
              "hand-off\n",
              t->rank, what, P->p);
      rc = 1;
    }
  }
  bar(t); /* every thread has read the counters before any moves on */
  return rc;
}

/* ---- coll ---- */

static char *dalloc(size_t bytes) {
  void *p = NULL;
  if (cu->malloc(&p, bytes ? bytes : 1) != 0) {
    fprintf(stderr, "rank %d: cudaMalloc(%zu) failed\n", t_rank, bytes);
    exit(3);
  }
  return p;
}
static int put(void *d, const void *h, size_t bytes) {
  return bytes ? cu_copy(d, h, bytes) : 0;
}
static int get(void *h, const void *d, size_t bytes) {
  return bytes ? cu_copy(h, d, bytes) : 0;
}

static const char *place(int inplace) {
  return inplace ? "in place" : "out of place";
}

/* The ring and chain kinds: all_reduce, reduce_scatter, all_gather, broadcast and reduce at
 * every root. */
static int ring_kinds(thr *t, rr_pg *pg, size_t count, rr_dtype d, rr_op op, int inplace,
                      uint64_t seed) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  const size_t es = rr_dtype_size(d), blk = count * es, all = blk * (size_t)n;
  char *h = t_alloc(all + 1), *big = dalloc(all), *small = dalloc(blk);
  char what[160];
  size_t wrong = 0;
  const char *dn = rr_dtype_name(d), *on = rr_op_name(op), *pl = place(inplace);

  /* all_reduce */
  t_fill(h, count, d, op, seed, r, 0);
  T_CHECK(!put(small, h, blk), "upload");
  char *dst = inplace ? small : big;
  if (!inplace) C_OK(memset_async(big, 0xa5, all ? all : 1, NULL));
  snprintf(what, sizeof what, "all_reduce %s %s %s count %zu", dn, on, pl, count);
  snap(t);
  T_OK(rr_all_reduce(pg, small, dst, count, d, op));
  if (handoffs(t, K_AR, -1, count, what)) return 1;
  T_CHECK(!get(h, dst, blk), "download");
  wrong += t_check_reduced(h, count, d, op, seed, n, 0, what);
  if (!inplace) {
    T_CHECK(!get(h, small, blk), "download");
    wrong += t_check_copied(h, count, d, op, seed, r, 0, "all_reduce input (unchanged)");
  }

  /* reduce_scatter: block r of the reduction of every rank's n blocks. */
  t_fill(h, count * (size_t)n, d, op, seed, r, 0);
  T_CHECK(!put(big, h, all), "upload");
  char *out = inplace ? big + (size_t)r * blk : small;
  snprintf(what, sizeof what, "reduce_scatter %s %s %s count %zu", dn, on, pl, count);
  snap(t);
  T_OK(rr_reduce_scatter(pg, big, out, count, d, op));
  if (handoffs(t, K_RS, -1, count, what)) return 1;
  T_CHECK(!get(h, out, blk), "download");
  wrong += t_check_reduced(h, count, d, op, seed, n, (size_t)r * count, what);

  /* all_gather: block k of the output is rank k's input. */
  t_fill(h, count, d, op, seed, r, 0);
  char *in = inplace ? big + (size_t)r * blk : small;
  T_CHECK(!put(in, h, blk), "upload");
  snprintf(what, sizeof what, "all_gather %s %s count %zu", dn, pl, count);
  snap(t);
  T_OK(rr_all_gather(pg, in, big, count, d));
  if (handoffs(t, K_AG, -1, count, what)) return 1;
  T_CHECK(!get(h, big, all), "download");
  for (int k = 0; k < n; k++)
    wrong += t_check_copied(h + (size_t)k * blk, count, d, op, seed, k, 0, what);

  for (int root = 0; root < n; root++) {
    /* broadcast: the root's data everywhere. */
    t_fill(h, count, d, op, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    dst = inplace ? small : big;
    if (!inplace) C_OK(memset_async(big, 0x5a, all ? all : 1, NULL));
    snprintf(what, sizeof what, "broadcast %s root %d %s count %zu", dn, root, pl, count);
    snap(t);
    T_OK(rr_broadcast(pg, small, dst, count, d, root));
    if (handoffs(t, K_BC, root, count, what)) return 1;
    T_CHECK(!get(h, dst, blk), "download");
    wrong += t_check_copied(h, count, d, op, seed, root, 0, what);

    /* reduce: the reduction at the root only; the others' input unchanged. */
    t_fill(h, count, d, op, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    dst = inplace ? small : big;
    snprintf(what, sizeof what, "reduce %s %s root %d %s count %zu", dn, on, root, pl, count);
    snap(t);
    T_OK(rr_reduce(pg, small, dst, count, d, op, root));
    if (handoffs(t, K_RED, root, count, what)) return 1;
    if (r == root) {
      T_CHECK(!get(h, dst, blk), "download");
      wrong += t_check_reduced(h, count, d, op, seed, n, 0, what);
    } else {
      T_CHECK(!get(h, small, blk), "download");
      wrong += t_check_copied(h, count, d, op, seed, r, 0, "reduce input (unchanged)");
    }
  }
  C_OK(free(big));
  C_OK(free(small));
  free(h);
  T_CHECK(!wrong, "%s %s %s count %zu: %zu wrong elements", dn, on, pl, count, wrong);
  return 0;
}

/* all_to_all and sendrecv (to the right, from the left): the host hand-off on every lane. */
static int hosted_kinds(thr *t, rr_pg *pg, size_t count, rr_dtype d, rr_op op, uint64_t seed) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  const size_t es = rr_dtype_size(d), blk = count * es, all = blk * (size_t)n;
  char *h = t_alloc(all + 1), *src = dalloc(all), *dst = dalloc(all);
  char what[128];
  size_t wrong = 0;

  /* all_to_all: block j of rank r's input is its data from j * count; block i of its output
   * is rank i's data from r * count. */
  t_fill(h, count * (size_t)n, d, op, seed, r, 0);
  T_CHECK(!put(src, h, all), "upload");
  C_OK(memset_async(dst, 0xa5, all ? all : 1, NULL));
  snprintf(what, sizeof what, "all_to_all %s count %zu", rr_dtype_name(d), count);
  snap(t);
  T_OK(rr_all_to_all(pg, src, dst, count, d));
  if (handoffs(t, K_A2A, -1, count, what)) return 1;
  T_CHECK(!get(h, dst, all), "download");
  for (int i = 0; i < n; i++)
    wrong += t_check_copied(h + (size_t)i * blk, count, d, op, seed, i, (size_t)r * count, what);

  /* sendrecv: this rank's data to the right, the left's from the left. */
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  t_fill(h, count, d, op, seed, r, 0);
  T_CHECK(!put(src, h, blk), "upload");
  C_OK(memset_async(dst, 0x5a, blk ? blk : 1, NULL));
  snprintf(what, sizeof what, "sendrecv %s count %zu", rr_dtype_name(d), count);
  snap(t);
  T_OK(rr_sendrecv(pg, src, count, right, dst, count, left, d));
  if (handoffs(t, K_P2P, -1, count, what)) return 1;
  T_CHECK(!get(h, dst, blk), "download");
  wrong += t_check_copied(h, count, d, op, seed, left, 0, what);

  C_OK(free(src));
  C_OK(free(dst));
  free(h);
  T_CHECK(!wrong, "all_to_all / sendrecv %s count %zu: %zu wrong elements", rr_dtype_name(d), count,
          wrong);
  return 0;
}

static int coll_rank(thr *t) {
  rr_pg *pg;
  if (rank_setup(t, &pg)) return 1;
  const uint64_t seed = t_seed();
  const size_t counts[] = {0, 1, 7, g_count};
  const struct {
    rr_dtype d;
    rr_op op;
  } types[] = {{RR_FLOAT32, RR_SUM}, {RR_INT32, RR_SUM}};
  const double t0 = t_now();
  for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
      const uint64_t s = seed + ci * 8 + ti;
      for (int inplace = 0; inplace < 2; inplace++)
        if (ring_kinds(t, pg, counts[ci], types[ti].d, types[ti].op, inplace, s)) return 1;
      if (hosted_kinds(t, pg, counts[ci], types[ti].d, types[ti].op, s)) return 1;
    }
  T_OK(rr_destroy_process_group(pg));
  printf("rank %d (process %d of layout %s): ok, %.2f s\n", t->rank, t->P->p, t->P->L->text,
         t_now() - t0);
  fflush(stdout);
  return 0;
}

/* ---- kill ---- */

#define KILL_COUNT ((size_t)1 << 16) /* float32: 256 KiB */

static int kill_rank(thr *t) {
  kcase *kc = t->P->kc;
  const layout *L = t->P->L;
  const int n = L->world;
  rr_pg *pg;
  if (rank_setup(t, &pg)) return 1;
  char *x = dalloc(KILL_COUNT * 4), *y = dalloc(KILL_COUNT * 4);
  C_OK(memset_async(x, 0, KILL_COUNT * 4, NULL));
  C_OK(stream_sync(NULL));
  /* Before the kill may come: an all_reduce, which took both hand-offs, and an all_to_all,
   * which opened every pair's slots (a first open of a dead peer's slots fails otherwise as
   * RR_ECUDA, "opening its device slots", not as a lost peer). */
  snap(t);
  T_OK(rr_all_reduce(pg, x, x, KILL_COUNT, RR_FLOAT32, RR_SUM));
  if (handoffs(t, K_AR, -1, KILL_COUNT, "the first all_reduce")) return 1;
  T_OK(rr_all_to_all(pg, x, y, KILL_COUNT / (size_t)n, RR_FLOAT32));
  T_CHECK(!t_ready_mark(kc->ready_dir, t->rank), "cannot mark rank %d ready in %s", t->rank,
          kc->ready_dir);
  int st;
  long calls = 0;
  do {
    const int root = (int)(calls / 4 % n);
    switch (calls % 4) {
      case 0:
        st = rr_all_reduce(pg, x, x, KILL_COUNT, RR_FLOAT32, RR_SUM);
        break;
      case 1:
        st = rr_broadcast(pg, x, x, KILL_COUNT, RR_FLOAT32, root);
        break;
      case 2:
        st = rr_reduce(pg, x, x, KILL_COUNT, RR_FLOAT32, RR_SUM, root);
        break;
      default:
        st = rr_all_to_all(pg, x, y, KILL_COUNT / (size_t)n, RR_FLOAT32);
        break;
    }
    calls++;
  } while (st == RR_OK);
  const char *e = rr_last_error();
  printf("rank %d: call %ld failed: %s: %s\n", t->rank, calls, rr_status_name(st), e);
  fflush(stdout);
  T_CHECK(st == RR_EPEER, "status %s: %s", rr_status_name(st), e);
  /* The message names a rank of the killed process (not only this rank's own prefix). */
  int named = 0;
  for (int i = 0; i < L->nthr[kc->victim]; i++) {
    char who[32];
    snprintf(who, sizeof who, "rank %d", L->ranks[kc->victim][i]);
    const char *m = strstr(e, who);
    named |= m && (m[strlen(who)] < '0' || m[strlen(who)] > '9');
  }
  T_CHECK(named, "the message names no rank of the killed process %d: %s", kc->victim, e);
  /* Once every rank of this process failed, nothing may be left queued on its streams. */
  bar(t);
  if (g_fake) {
    int q = rr_fake_cuda_pending();
    T_CHECK(q == 0, "%d operations were still queued after the failed calls returned", q);
  }
  bar(t);
  rr_destroy_process_group(pg);
  return 0;
}

static void kill_victim(const int *pids, int np, void *arg) {
  kcase *kc = arg;
  const int world = g_layout->world;
  t_ready_wait(kc->ready_dir, world, 60);
  usleep((useconds_t)(kc->kill_after * 1e6));
  if (kc->victim < np) kill(pids[kc->victim], SIGKILL);
  kc->killed_at = t_now();
}

static int kill_test(int victim) {
  const layout *L = g_layout;
  if (victim < 0 || victim >= L->nproc) return fprintf(stderr, "no process %d\n", victim), 2;
  kcase kc = {.victim = victim,
              .kill_after = 0.02 + (double)(t_bits(t_seed(), 39, (uint64_t)victim) % 300) / 1000.0};
  snprintf(kc.ready_dir, sizeof kc.ready_dir, "/tmp/rr-mixed-XXXXXX");
  if (!mkdtemp(kc.ready_dir)) return perror("mkdtemp"), 1;
  int codes[MAXW], sigs[MAXW];
  g_rank_fn = kill_rank;
  int rc = t_run(L->nproc, proc_fn, &kc, kill_victim, 60.0, codes, sigs);
  t_ready_remove(kc.ready_dir, L->world);
  if (rc) return fprintf(stderr, "kill: the survivors hung (process %d killed)\n", victim), 1;
  const double took = t_now() - kc.killed_at;
  printf("kill: process %d of %s killed %.2f s into the loop; survivors done %.2f s later\n",
         victim, L->text, kc.kill_after, took);
  int bad = took > 20.0;
  if (bad) fprintf(stderr, "the survivors took %.1f s (at most 20 s)\n", took);
  for (int p = 0; p < L->nproc; p++)
    if (p != victim && (codes[p] || sigs[p]))
      bad = 1, fprintf(stderr, "surviving process %d: exit %d signal %d\n", p, codes[p], sigs[p]);
  if (sigs[victim] != SIGKILL) bad = 1, fprintf(stderr, "process %d was not killed\n", victim);
  return bad;
}

int main(int argc, char **argv) {
  g_fake = cu_setup(&argc, &argv);
  if (!rr__cuda_built() && !g_fake) {
    printf("skipped: no CUDA device (this build has no CUDA; run with --fake)\n");
    return SKIP;
  }
  if (!have_device_forked()) {
    printf("skipped: no CUDA device (the CUDA runtime found no usable driver or GPU)\n");
    return SKIP;
  }
  layout L;
  if (argc < 3 || parse_layout(argv[2], &L)) {
    fprintf(stderr,
            "usage: test_cuda_mixed [--fake] coll LAYOUT [COUNT] | kill LAYOUT PROCESS\n"
            "  LAYOUT: each process's ranks, processes separated by '-' (01-23)\n");
    return 2;
  }
  g_layout = &L;
  const char *what = argv[1];
  t_seed_announce(what);
  int rc = 1;
  if (!strcmp(what, "coll")) {
    if (argc > 3) g_count = strtoull(argv[3], NULL, 10);
    g_rank_fn = coll_rank;
    int codes[MAXW], sigs[MAXW];
    rc = t_run(L.nproc, proc_fn, NULL, NULL, 150.0, codes, sigs) ||
         t_exits_ok(L.nproc, codes, sigs, "process");
  } else if (!strcmp(what, "kill")) {
    rc = kill_test(argc > 3 ? atoi(argv[3]) : 0);
  } else {
    fprintf(stderr, "unknown case %s\n", what);
    return 2;
  }
  printf("%s %s: %s\n", what, L.text, rc ? "FAILED" : "ok");
  return rc;
}
