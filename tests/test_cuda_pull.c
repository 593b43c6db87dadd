/* The all-gather's pull (issue 39 part 3; transport/cuda_ipc.h, "pull"; docs/cuda.md, "The
 * all-gather's single copy"): in the all-gather steps of all_gather and of all_reduce's second
 * half, with stream memory operations, the receiver's stream copies each segment straight out
 * of the sender's output (mapped through its allocation's IPC handle) instead of the sender
 * copying it into a slot first.
 *
 *   test_cuda_pull [--fake] coll      all_gather and all_reduce on device buffers, in and out
 *                                     of place, counts 0, 1, 7, 1000 and 20011 (per block for
 *                                     all_gather; with RR_IPC_SEG_BYTES=4096 a block of 20011
 *                                     is 20 segments, so each lane's slot ring wraps within
 *                                     one step), int32 sum (exact) and float32 sum (against a
 *                                     float64 reference within n * 2^-23 * sum|x_i|, tests/
 *                                     harness.h t_eps), every element of every rank checked.
 *                                     Around each call the process's counters: every
 *                                     all-gather segment this rank receives was pulled
 *                                     (rr__mop_pulled moves by exactly that many) and none of
 *                                     the all-gather bytes it sends went into a slot
 *                                     (rr__mop_slot_bytes moves by the reduce-scatter's sent
 *                                     bytes only: 0 for all_gather); count 0 moves neither
 *   test_cuda_pull [--fake] bound     RR_CUDA_PULL_BYTES=65536, world 2: all_gather of 8192
 *                                     int32 per rank (65536 bytes) and all_reduce of 16384
 *                                     pull; one element fewer keeps the slots (every sent
 *                                     byte through a slot, nothing pulled); results exact
 *   test_cuda_pull --fake stale       a rank's output freed and allocated again between calls
 *                                     (the fake gives the same address back: checked), with
 *                                     other data: the successor must map the new allocation
 *                                     (a cache keyed by address would read the old one, which
 *                                     the fake, as a GPU may, keeps alive for its importer)
 *   test_cuda_pull --fake noexport    rank 1's output gives no IPC handle (as cudaMallocAsync's
 *                                     pools): its description says so, its successor keeps the
 *                                     slots for its segments (rank 1's sent bytes all through
 *                                     slots, its successor pulls nothing), the others pull;
 *                                     results exact
 *   test_cuda_pull --fake vmm         as noexport, rank 1's output also answering BUFFER_ID 0
 *                                     (as VMM memory, cuMemCreate + cuMemMap): no handle
 *                                     either, not an error; the same counts, results exact
 *   test_cuda_pull --fake fence       rank 0's fake device slow (0 to 10 ms per operation),
 *                                     every rank overwriting its output the moment its call
 *                                     returns: rank 0's result must still be exact, so rank
 *                                     n - 1's call ended only after rank 0 read its output
 *   test_cuda_pull [--fake] mismatch  world 2, rank 1 with RR_CUDA_PULL_BYTES=1024G (never
 *                                     pulls), rank 0 with 0: the all_gather fails on both
 *                                     with RR_EMISMATCH naming RR_CUDA_PULL_BYTES (or the
 *                                     abort that carries it), within 20 s
 *   test_cuda_pull [--fake] kill      world 3 loops over all_gather and all_reduce of 1 MiB in
 *                                     the pull form; rank 1 is SIGKILLed at a random moment
 *                                     (RR_TEST_SEED); survivors fail with RR_EPEER naming
 *                                     rank 1 within 30 s, nothing queued on their fake
 *                                     streams, destroy and exit 0
 *
 * World from RR_TEST_WORLD (default 3; the ctest entries run 2, 3 and 4). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ring/ring.h" /* rr__chunk_len */
#include "transport/cuda_ipc.h"
#include "tests/cuda_harness.h"
#include "tests/fake_cuda/fake_state.h" /* F.delay_us: one rank's device slow */

#define SKIP 77

static int g_fake;

static int world(void) {
  const char *w = getenv("RR_TEST_WORLD");
  return w && atoi(w) >= 2 ? atoi(w) : 3;
}

static size_t seg_elems(size_t es) {
  const char *s = getenv("RR_IPC_SEG_BYTES");
  return (size_t)(s ? atol(s) : 4 << 20) / es;
}

static int setup(int rank, rr_pg **pg) {
  t_rank = rank;
  T_OK(rr_init_process_group(pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  return 0;
}

static int mod(int a, int n) {
  return (a % n + n) % n;
}

/* What rank r of n moves in a call of count (all_gather: n - 1 steps of count; all_reduce:
 * reduce-scatter step s sends chunk r - s, all-gather step s sends chunk r + 1 - s and
 * receives chunk r - s, ring/all_reduce.c): the bytes it sends into slots in the
 * reduce-scatter (rs), the all-gather's sent bytes (ag) and received segments (pulled). */
static void expect(int gather, size_t count, int n, int r, size_t es, uint64_t *rs, uint64_t *ag,
                   uint64_t *pulled) {
  const size_t seg = seg_elems(es);
  *rs = *ag = *pulled = 0;
  for (int s = 0; count && s < n - 1; s++) {
    const size_t got = gather ? count : rr__chunk_len(count, n, mod(r - s, n));
    *pulled += (got + seg - 1) / seg;
    *ag += (gather ? count : rr__chunk_len(count, n, mod(r + 1 - s, n))) * es;
    if (!gather) *rs += rr__chunk_len(count, n, mod(r - s, n)) * es;
  }
}

/* One call; want: 1 pulled, 0 the slots, -1 not checked. buf: the output to use (NULL: one
 * of its own); first: the seed's offset (different data per call). */
static int one(rr_pg *pg, int gather, int inplace, rr_dtype d, size_t count, int want, void *outbuf,
               uint64_t seed) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  const size_t es = rr_dtype_size(d), total = gather ? count * (size_t)n : count;
  char what[128];
  snprintf(what, sizeof what, "%s %s of %zu x %s", gather ? "all_gather" : "all_reduce",
           inplace ? "in place" : "out of place", count, rr_dtype_name(d));
  char *h = t_alloc(total * es + 1);
  void *out = outbuf, *in = NULL;
  if (!out) C_OK(malloc(&out, total * es + 1));
  if (inplace)
    in = gather ? (char *)out + (size_t)r * count * es : out;
  else
    C_OK(malloc(&in, count * es + 1));
  memset(h, 0xa5, total * es + 1);
  T_CHECK(!cu_copy(out, h, total * es), "garbage where the result goes");
  t_fill(h, count, d, RR_SUM, seed, r, 0);
  T_CHECK(!cu_copy(in, h, count * es), "upload");
  const uint64_t p0 = rr__mop_pulled(), s0 = rr__mop_slot_bytes();
  if (gather)
    T_OK(rr_all_gather(pg, in, out, count, d));
  else
    T_OK(rr_all_reduce(pg, in, out, count, d, RR_SUM));
  const uint64_t dp = rr__mop_pulled() - p0, ds = rr__mop_slot_bytes() - s0;
  T_CHECK(!cu_copy(h, out, total * es), "download");
  size_t wrong = 0;
  if (gather)
    for (int j = 0; j < n; j++)
      wrong += t_check_copied(h + (size_t)j * count * es, count, d, RR_SUM, seed, j, 0, what);
  else
    wrong = t_check_reduced(h, count, d, RR_SUM, seed, n, 0, what);
  T_CHECK(!wrong, "rank %d: %s: %zu wrong elements", r, what, wrong);
  uint64_t rs = 0, ag = 0, pulled = 0;
  expect(gather, count, n, r, es, &rs, &ag, &pulled);
  /* Pulled: every all-gather segment received so, only the reduce-scatter through slots;
   * else every byte sent through slots, nothing pulled. */
  if (want >= 0) {
    const uint64_t wp = want ? pulled : 0, ws = want ? rs : rs + ag;
    T_CHECK(dp == wp && ds == ws,
            "rank %d: %s: pulled %llu segments (want %llu), %llu bytes into slots (want %llu)", r,
            what, (unsigned long long)dp, (unsigned long long)wp, (unsigned long long)ds,
            (unsigned long long)ws);
  }
  if (!inplace) C_OK(free(in));
  if (!outbuf) C_OK(free(out));
  free(h);
  return 0;
}

static int coll_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  if (setup(rank, &pg)) return 1;
  static const size_t counts[] = {0, 1, 7, 1000, 20011};
  static const rr_dtype dts[] = {RR_INT32, RR_FLOAT32};
  for (int g = 0; g < 2; g++)
    for (int ip = 0; ip < 2; ip++)
      for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        for (int t = 0; t < 2; t++)
          if (one(pg, g, ip, dts[t], counts[i], 1, NULL, t_seed() + i * 4 + (size_t)t)) return 1;
  printf("coll: rank %d: ok\n", rank);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

static int bound_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  if (setup(rank, &pg)) return 1;
  /* RR_CUDA_PULL_BYTES=65536, world 2: the size is the larger buffer on a rank. */
  if (one(pg, 1, 0, RR_INT32, 8192, 1, NULL, 1) || one(pg, 1, 0, RR_INT32, 8191, 0, NULL, 2) ||
      one(pg, 0, 0, RR_INT32, 16384, 1, NULL, 3) || one(pg, 0, 0, RR_INT32, 16383, 0, NULL, 4))
    return 1;
  printf("bound: rank %d: ok\n", rank);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

static int stale_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  if (setup(rank, &pg)) return 1;
  const int n = rr_get_world_size(pg);
  const size_t count = 5000, bytes = count * 4 * (size_t)n + 1;
  void *a = NULL, *b = NULL;
  C_OK(malloc(&a, bytes));
  if (one(pg, 1, 0, RR_INT32, count, 1, a, 11) || one(pg, 0, 0, RR_INT32, count, 1, a, 12))
    return 1;
  C_OK(free(a));
  C_OK(malloc(&b, bytes));
  if (g_fake) T_CHECK(a == b, "the fake gave another address (%p, was %p)", b, a);
  if (one(pg, 1, 0, RR_INT32, count, 1, b, 13) || one(pg, 0, 0, RR_INT32, count, 1, b, 14))
    return 1;
  C_OK(free(b));
  printf("stale: rank %d: ok (the output came back at %p)\n", rank, b);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

static int noexport_rank(int rank, void *arg) {
  const int vmm = arg != NULL; /* the vmm case: BUFFER_ID 0 as well */
  rr_pg *pg;
  if (setup(rank, &pg)) return 1;
  const int n = rr_get_world_size(pg);
  const size_t count = 3001, es = 4, bytes = count * es * (size_t)n;
  void *out = NULL;
  if (rank == 1)
    T_CHECK((vmm ? rr_fake_cuda_malloc_vmm(&out, bytes)
                 : rr_fake_cuda_malloc_noexport(&out, bytes)) == 0,
            "noexport memory");
  else
    C_OK(malloc(&out, bytes));
  for (int g = 1; g >= 0; g--) {
    const uint64_t p0 = rr__mop_pulled(), s0 = rr__mop_slot_bytes();
    if (one(pg, g, 0, RR_INT32, count, -1, out, 20 + (uint64_t)g)) return 1;
    const uint64_t dp = rr__mop_pulled() - p0, ds = rr__mop_slot_bytes() - s0;
    uint64_t rs = 0, ag = 0, pulled = 0;
    expect(g, count, n, rank, es, &rs, &ag, &pulled);
    /* Rank 1 sends its all-gather through slots; rank 2 (its successor) pulls nothing. */
    const uint64_t want_s = rs + (rank == 1 ? ag : 0), want_p = rank == 2 ? 0 : pulled;
    T_CHECK(dp == want_p && ds == want_s,
            "rank %d: %s: pulled %llu (want %llu), %llu bytes into slots (want %llu)", rank,
            g ? "all_gather" : "all_reduce", (unsigned long long)dp, (unsigned long long)want_p,
            (unsigned long long)ds, (unsigned long long)want_s);
  }
  C_OK(free(out));
  printf("%s: rank %d: ok\n", vmm ? "vmm" : "noexport", rank);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* The sender's call must not end before its successor read its output: rank 0's device work
 * is slow (each operation of its fake streams waits 0 to 10 ms), and every rank overwrites
 * its output the moment its call returns. Rank 0 pulls from rank n - 1, whose own work is
 * done long before: without the fence at the end of rank n - 1's call (rr__dev_fence), rank 0
 * reads the overwritten bytes. */
static int fence_rank(int rank, void *arg) {
  (void)arg;
  if (rank == 0 && g_fake) F.delay_us = 5000; /* before this process's first stream */
  rr_pg *pg;
  if (setup(rank, &pg)) return 1;
  const int n = rr_get_world_size(pg);
  const size_t count = 12000, es = 4, total = count * (size_t)n;
  int32_t *h = t_alloc(total * es);
  void *in = NULL, *out = NULL;
  C_OK(malloc(&in, count * es));
  C_OK(malloc(&out, total * es));
  for (int it = 0; it < 4; it++) {
    const int gather = it % 2 == 0;
    const size_t cnt = gather ? count : total;
    const uint64_t seed = 40 + (uint64_t)it;
    t_fill(h, cnt, RR_INT32, RR_SUM, seed, rank, 0);
    T_CHECK(!cu_copy(gather ? in : out, h, cnt * es), "upload");
    if (gather)
      T_OK(rr_all_gather(pg, in, out, count, RR_INT32));
    else
      T_OK(rr_all_reduce(pg, out, out, total, RR_INT32, RR_SUM));
    /* The user's next use of the buffer, at once (on the legacy stream, which the call's
     * completion orders after it). */
    T_CHECK(!cu_copy(h, out, total * es), "download");
    T_CHECK(!cu_set(out, 0xff, total * es), "overwrite");
    size_t wrong = 0;
    if (gather)
      for (int j = 0; j < n; j++)
        wrong += t_check_copied(h + (size_t)j * count, count, RR_INT32, RR_SUM, seed, j, 0,
                                "all_gather");
    else
      wrong = t_check_reduced(h, total, RR_INT32, RR_SUM, seed, n, 0, "all_reduce");
    T_CHECK(!wrong, "rank %d: %s %d: %zu wrong elements", rank,
            gather ? "all_gather" : "all_reduce", it, wrong);
  }
  C_OK(free(in));
  C_OK(free(out));
  free(h);
  printf("fence: rank %d: ok\n", rank);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* Ranks that differ on RR_CUDA_PULL_BYTES: rank 1 never pulls, rank 0 always. A rank waiting
 * for a description its peer never sends would hang or misread the next header; the call
 * header says whether the call pulls, so both fail with RR_EMISMATCH naming the cause. */
static int mismatch_rank(int rank, void *arg) {
  (void)arg;
  if (rank == 1) setenv("RR_CUDA_PULL_BYTES", "1024G", 1); /* read at this process's init */
  rr_pg *pg;
  if (setup(rank, &pg)) return 1;
  const size_t count = 4096;
  void *in = NULL, *out = NULL;
  C_OK(malloc(&in, count * 4));
  C_OK(malloc(&out, count * 8));
  C_OK(memset_async(in, 0, count * 4, NULL));
  C_OK(stream_sync(NULL));
  const double t0 = t_now();
  int st = rr_all_gather(pg, in, out, count, RR_INT32);
  const char *e = rr_last_error();
  printf("mismatch: rank %d: %s: %s\n", rank, rr_status_name(st), e);
  T_CHECK(st == RR_EMISMATCH || st == RR_EABORTED || st == RR_EPEER,
          "rank %d: the all_gather returned %s (%s)", rank, rr_status_name(st), e);
  T_CHECK(strstr(e, "RR_CUDA_PULL_BYTES differs") || strstr(e, "aborted"),
          "rank %d: the error does not say why: %s", rank, e);
  T_CHECK(t_now() - t0 < 20, "rank %d: the mismatch took %.1f s to find", rank, t_now() - t0);
  C_OK(free(in));
  C_OK(free(out));
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- a rank killed mid-call ---- */

#define VICTIM 1
#define KCOUNT ((size_t)1 << 18) /* floats: 1 MiB per rank */

typedef struct kcase {
  double kill_after, killed_at;
  char ready_dir[64];
} kcase;

static int kill_rank(int rank, void *arg) {
  kcase *kc = arg;
  rr_pg *pg;
  if (setup(rank, &pg)) return 1;
  const int n = rr_get_world_size(pg);
  void *x = NULL, *y = NULL;
  C_OK(malloc(&x, KCOUNT * 4));
  C_OK(malloc(&y, KCOUNT * 4 * (size_t)n));
  C_OK(memset_async(x, 0, KCOUNT * 4, NULL));
  C_OK(stream_sync(NULL));
  const uint64_t p0 = rr__mop_pulled();
  T_OK(rr_all_gather(pg, x, y, KCOUNT, RR_FLOAT32));
  T_CHECK(rr__mop_pulled() > p0, "the all_gather did not pull");
  T_CHECK(!t_ready_mark(kc->ready_dir, rank), "cannot mark rank %d ready in %s", rank,
          kc->ready_dir);
  int st;
  long calls = 0;
  do {
    st = calls % 2 ? rr_all_reduce(pg, x, x, KCOUNT, RR_FLOAT32, RR_SUM)
                   : rr_all_gather(pg, x, y, KCOUNT, RR_FLOAT32);
    calls++;
  } while (st == RR_OK);
  const char *e = rr_last_error();
  printf("rank %d: call %ld failed: %s: %s\n", rank, calls, rr_status_name(st), e);
  fflush(stdout);
  T_CHECK(st == RR_EPEER, "status %s: %s", rr_status_name(st), e);
  T_HAS(e, "rank 1");
  if (g_fake) {
    int q = rr_fake_cuda_pending();
    T_CHECK(q == 0, "%d operations were still queued after the failed call returned", q);
  }
  rr_destroy_process_group(pg);
  return 0;
}

static void kill_victim(const int *pids, int n, void *arg) {
  kcase *kc = arg;
  t_ready_wait(kc->ready_dir, n, 60);
  usleep((useconds_t)(kc->kill_after * 1e6));
  kill(pids[VICTIM], SIGKILL);
  kc->killed_at = t_now();
}

static int run_kill(void) {
  const int n = world();
  kcase kc = {.kill_after = 0.05 + (double)(t_bits(t_seed(), 24, 2) % 300) / 1000.0};
  snprintf(kc.ready_dir, sizeof kc.ready_dir, "/tmp/rr-pullkill-XXXXXX");
  if (!mkdtemp(kc.ready_dir)) return perror("mkdtemp"), 1;
  int codes[16], sigs[16];
  int rc = t_run(n, kill_rank, &kc, kill_victim, 90, codes, sigs);
  t_ready_remove(kc.ready_dir, n);
  if (rc) return fprintf(stderr, "kill: the survivors hung\n"), 1;
  const double took = t_now() - kc.killed_at;
  printf("kill: rank %d killed %.2f s into the loop; survivors done %.2f s later\n", VICTIM,
         kc.kill_after, took);
  int bad = took > 30;
  for (int r = 0; r < n; r++)
    if (r != VICTIM && (codes[r] != 0 || sigs[r] != 0))
      fprintf(stderr, "survivor rank %d: exit %d signal %d\n", r, codes[r], sigs[r]), bad = 1;
  return bad;
}

int main(int argc, char **argv) {
  g_fake = cu_setup(&argc, &argv);
  const char *what = argc > 1 ? argv[1] : "coll";
  if (!rr__cuda_built() && !g_fake)
    return printf("skipped: no CUDA device (this build has no CUDA; run with --fake)\n"), SKIP;
  if (!have_device_forked())
    return printf("skipped: no CUDA device (the CUDA runtime found no usable driver or GPU)\n"),
           SKIP;
  t_seed_announce("cuda_pull");
  if (!strcmp(what, "coll")) return t_run_all(world(), coll_rank, NULL, 120, "coll");
  if (!strcmp(what, "bound")) return t_run_all(2, bound_rank, NULL, 60, "bound");
  if (!strcmp(what, "stale")) {
    if (!g_fake) return printf("skipped: the stale case needs the fake's address reuse\n"), SKIP;
    return t_run_all(world(), stale_rank, NULL, 60, "stale");
  }
  if (!strcmp(what, "vmm")) {
    if (!g_fake) return printf("skipped: the vmm case needs the fake's memory\n"), SKIP;
    static int on = 1;
    return t_run_all(world(), noexport_rank, &on, 60, "vmm");
  }
  if (!strcmp(what, "noexport")) {
    if (!g_fake) return printf("skipped: the noexport case needs the fake's memory\n"), SKIP;
    return t_run_all(world(), noexport_rank, NULL, 60, "noexport");
  }
  if (!strcmp(what, "fence")) {
    if (!g_fake) return printf("skipped: the fence case slows one rank's fake device\n"), SKIP;
    return t_run_all(world(), fence_rank, NULL, 60, "fence");
  }
  if (!strcmp(what, "mismatch")) return t_run_all(2, mismatch_rank, NULL, 60, "mismatch");
  if (!strcmp(what, "kill")) return run_kill();
  fprintf(stderr,
          "usage: test_cuda_pull [--fake] coll|bound|stale|noexport|vmm|fence|mismatch|kill\n");
  return 2;
}
