/* The one-kernel form for ranks that share a GPU (issue 39 part 2; group/direct.c,
 * docs/cuda.md "One kernel for ranks that share a GPU"). Every CUDA call goes through the
 * library's table, so each case runs on a GPU too (then every rank shares it).
 *
 *   test_cuda_direct [--fake] coll <world>   all_reduce (every dtype x op), reduce_scatter,
 *                                            all_gather, broadcast and reduce (every root), in
 *                                            and out of place, counts 0, 1, 7, 4099 (and
 *                                            100003 float32), random data; every element of
 *                                            every rank checked: integers exactly, floats
 *                                            against a float64 reference within
 *                                            tests/harness.h's t_eps bound (n ranks' rounding
 *                                            of the dtype: the kernel folds in rank order, the
 *                                            reference in double). RR_TEST_EXPECT_DIRECT=1: each
 *                                            call with elements ran as one kernel on this
 *                                            process (rr__direct_calls), 0: none did (ranks
 *                                            on different GPUs keep the ring)
 *   test_cuda_direct [--fake] cache <world>  the leader's mappings: a buffer used again is not
 *                                            opened again; freed and allocated again (on the
 *                                            fake at the same address, checked) with new data,
 *                                            it is opened anew and the result is the new
 *                                            data's; buffers that give no IPC handle (the fake
 *                                            only) go through the peers' scratch, in place too
 *   test_cuda_direct --fake wrongdev         world 2: after the form was chosen, rank 1's
 *                                            buffers move to device 1; every rank's call fails
 *                                            naming the cause, none hangs
 *   test_cuda_direct [--fake] kill <victim>  world 3 looping on one-kernel calls; the victim
 *                                            (0: the leader, 1: a peer) SIGKILLed at a random
 *                                            moment: the survivors fail naming it within a
 *                                            bound, destroy the group and exit */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "group/pg.h" /* rr__direct_calls, rr__direct_opens, rr__direct_copies */
#include "tests/cuda_harness.h"

#define SKIP 77

static int g_fake;

static char *dalloc(size_t bytes) {
  void *p = NULL;
  if (cu->malloc(&p, bytes ? bytes : 1) != 0) return NULL;
  return p;
}
static int put(void *d, const void *h, size_t bytes) {
  return bytes ? cu_copy(d, h, bytes) : 0;
}
static int get(void *h, const void *d, size_t bytes) {
  return bytes ? cu_copy(h, d, bytes) : 0;
}
static int expect_direct(void) {
  const char *e = getenv("RR_TEST_EXPECT_DIRECT");
  return e && *e ? atoi(e) : -1;
}
/* One call ran as one kernel here, or none did, as RR_TEST_EXPECT_DIRECT says. bytes: the
 * call's size as the forms are chosen by it (its largest buffer on a rank); with
 * RR_TEST_DIRECT_UPTO=B (the test sets RR_CUDA_DIRECT_BYTES alike), a call takes the form
 * exactly when bytes <= B. */
static int check_direct(uint64_t before, size_t count, size_t bytes, const char *what) {
  uint64_t got = rr__direct_calls() - before;
  int want = expect_direct();
  const char *upto = getenv("RR_TEST_DIRECT_UPTO");
  if (upto && *upto) want = bytes <= strtoull(upto, NULL, 10);
  if (want == 1 && count > 0)
    T_CHECK(got == 1, "%s (%zu bytes): %llu calls ran as one kernel, want 1", what, bytes,
            (unsigned long long)got);
  if (want == 0 || count == 0)
    T_CHECK(got == 0, "%s (%zu bytes): %llu calls ran as one kernel, want 0", what, bytes,
            (unsigned long long)got);
  return 0;
}

static int rank_setup(int rank, rr_pg **pg) {
  t_rank = rank;
  T_OK(rr_init_process_group(pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  return 0;
}

/* ---- coll ---- */

static int all_reduce_case(rr_pg *pg, size_t count, rr_dtype d, rr_op op, int inplace,
                           uint64_t seed) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  const size_t bytes = count * rr_dtype_size(d);
  char *h = malloc(bytes + 1), *src = dalloc(bytes), *dst = inplace ? src : dalloc(bytes);
  T_CHECK(h && src && dst, "memory");
  t_fill(h, count, d, op, seed, r, 0);
  T_CHECK(!put(src, h, bytes), "upload");
  if (!inplace) C_OK(memset_async(dst, 0xa5, bytes ? bytes : 1, NULL));
  char what[96];
  snprintf(what, sizeof what, "all_reduce %s %s %s count %zu", rr_dtype_name(d), rr_op_name(op),
           inplace ? "in place" : "out of place", count);
  uint64_t before = rr__direct_calls();
  T_OK(rr_all_reduce(pg, src, dst, count, d, op));
  if (check_direct(before, count, bytes, what)) return 1;
  T_CHECK(!get(h, dst, bytes), "download");
  size_t wrong = t_check_reduced(h, count, d, op, seed, n, 0, what);
  if (!inplace) {
    T_CHECK(!get(h, src, bytes), "download");
    wrong += t_check_copied(h, count, d, op, seed, r, 0, "all_reduce input (unchanged)");
    C_OK(free(dst));
  }
  C_OK(free(src));
  free(h);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

/* reduce_scatter, all_gather, broadcast and reduce (every root), float32 sum and int32 max. */
static int others_case(rr_pg *pg, size_t count, rr_dtype d, rr_op op, int inplace, uint64_t seed) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  const size_t es = rr_dtype_size(d), blk = count * es, all = blk * (size_t)n;
  char *h = malloc(all + 1), *big = dalloc(all), *small = dalloc(blk);
  T_CHECK(h && big && small, "memory");
  char what[128];
  size_t wrong = 0;
  uint64_t before;

  /* reduce_scatter: block r of the reduction of every rank's n blocks. */
  t_fill(h, count * (size_t)n, d, op, seed, r, 0);
  T_CHECK(!put(big, h, all), "upload");
  char *out = inplace ? big + (size_t)r * blk : small;
  snprintf(what, sizeof what, "reduce_scatter %s %s %s count %zu", rr_dtype_name(d), rr_op_name(op),
           inplace ? "in place" : "out of place", count);
  before = rr__direct_calls();
  T_OK(rr_reduce_scatter(pg, big, out, count, d, op));
  if (check_direct(before, count, all, what)) return 1;
  T_CHECK(!get(h, out, blk), "download");
  wrong += t_check_reduced(h, count, d, op, seed, n, (size_t)r * count, what);

  /* all_gather: block k of the output is rank k's input. */
  t_fill(h, count, d, op, seed, r, 0);
  char *in = inplace ? big + (size_t)r * blk : small;
  T_CHECK(!put(in, h, blk), "upload");
  snprintf(what, sizeof what, "all_gather %s %s count %zu", rr_dtype_name(d),
           inplace ? "in place" : "out of place", count);
  before = rr__direct_calls();
  T_OK(rr_all_gather(pg, in, big, count, d));
  if (check_direct(before, count, all, what)) return 1;
  T_CHECK(!get(h, big, all), "download");
  for (int k = 0; k < n; k++)
    wrong += t_check_copied(h + (size_t)k * blk, count, d, op, seed, k, 0, what);

  for (int root = 0; root < n; root++) {
    /* broadcast: the root's data everywhere. */
    t_fill(h, count, d, op, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    char *dst = inplace ? small : big;
    if (!inplace) C_OK(memset_async(big, 0x5a, all ? all : 1, NULL));
    snprintf(what, sizeof what, "broadcast %s root %d %s count %zu", rr_dtype_name(d), root,
             inplace ? "in place" : "out of place", count);
    before = rr__direct_calls();
    T_OK(rr_broadcast(pg, small, dst, count, d, root));
    if (check_direct(before, count, blk, what)) return 1;
    T_CHECK(!get(h, dst, blk), "download");
    wrong += t_check_copied(h, count, d, op, seed, root, 0, what);

    /* reduce: the reduction at the root only. */
    t_fill(h, count, d, op, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    dst = inplace ? small : big;
    snprintf(what, sizeof what, "reduce %s %s root %d %s count %zu", rr_dtype_name(d),
             rr_op_name(op), root, inplace ? "in place" : "out of place", count);
    before = rr__direct_calls();
    T_OK(rr_reduce(pg, small, dst, count, d, op, root));
    if (check_direct(before, count, blk, what)) return 1;
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
  T_CHECK(!wrong, "%zu wrong elements", wrong);
  return 0;
}

static int coll_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  if (rank_setup(rank, &pg)) return 1;
  const uint64_t seed = t_seed();
  const size_t counts[] = {0, 1, 7, 4099};
  const int lean = t_lean(); /* the sanitizer stages: harness.h says what stays */
  for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
    for (int d = 0; d < RR_NUM_DTYPES; d++) {
      if (lean && !t_lean_dtype((rr_dtype)d)) continue;
      rr_op ops[RR_NUM_OPS];
      const int nops = t_valid_ops((rr_dtype)d, ops);
      for (int k = 0; k < nops; k++) {
        /* Lean: sum and one more, rotating with the count. */
        if (lean && k != 0 && k != 1 + (int)((ci + (size_t)d) % (size_t)(nops - 1))) continue;
        if (all_reduce_case(pg, counts[ci], (rr_dtype)d, ops[k], (int)(ci % 2), seed + ci))
          return 1;
      }
    }
  if (all_reduce_case(pg, 100003, RR_FLOAT32, RR_SUM, 0, seed)) return 1;
  for (int inplace = 0; inplace < 2; inplace++)
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
      if (others_case(pg, counts[ci], RR_FLOAT32, RR_SUM, inplace, seed + 7)) return 1;
      if (others_case(pg, counts[ci], RR_INT32, RR_MAX, inplace, seed + 8)) return 1;
    }
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- cache ---- */

/* An int32 sum all_reduce in place of rank-specific data for `round`, checked exactly:
 * element i of rank r is (round + 1) * 1000003 + i * 7 + r * 131. */
static int round_case(rr_pg *pg, char *buf, size_t count, int round, const char *what) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  int32_t *h = malloc(count * 4);
  T_CHECK(h != NULL, "memory");
  for (size_t i = 0; i < count; i++) h[i] = (int32_t)((round + 1) * 1000003 + (int)i * 7 + r * 131);
  T_CHECK(!put(buf, h, count * 4), "upload");
  uint64_t before = rr__direct_calls();
  T_OK(rr_all_reduce(pg, buf, buf, count, RR_INT32, RR_SUM));
  T_CHECK(rr__direct_calls() - before == 1, "%s: the call did not run as one kernel", what);
  T_CHECK(!get(h, buf, count * 4), "download");
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    const int32_t want =
        (int32_t)(n * ((round + 1) * 1000003 + (int)i * 7) + 131 * n * (n - 1) / 2);
    if (h[i] != want && wrong++ < 3)
      fprintf(stderr, "rank %d: %s: [%zu] = %d, want %d\n", r, what, i, h[i], want);
  }
  free(h);
  T_CHECK(!wrong, "%s: %zu wrong elements (a stale mapping reads an earlier round's data)", what,
          wrong);
  return 0;
}

static int cache_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  if (rank_setup(rank, &pg)) return 1;
  const int n = rr_get_world_size(pg);
  const size_t count = 5000;
  uint64_t opens = rr__direct_opens();
  char *buf = dalloc(count * 4), *prev = buf;
  T_CHECK(buf != NULL, "memory");
  /* Round 0 opens each peer's allocation once; round 1 on the same buffer opens nothing. */
  if (round_case(pg, buf, count, 0, "round 0")) return 1;
  if (rank == 0)
    T_CHECK(rr__direct_opens() - opens == (uint64_t)(n - 1),
            "round 0: %llu handles opened, want %d",
            (unsigned long long)(rr__direct_opens() - opens), n - 1);
  opens = rr__direct_opens();
  if (round_case(pg, buf, count, 1, "round 1 (same buffers)")) return 1;
  if (rank == 0)
    T_CHECK(rr__direct_opens() == opens, "round 1: %llu handles opened again for the same buffers",
            (unsigned long long)(rr__direct_opens() - opens));
  /* Freed and allocated again: the fake hands the same address out (the case a cache keyed
   * by address gets wrong); the leader must open the new allocation. */
  for (int round = 2; round < 4; round++) {
    C_OK(free(buf));
    buf = dalloc(count * 4);
    T_CHECK(buf != NULL, "memory");
    if (g_fake)
      T_CHECK(buf == prev, "the fake gave %p, not the freed %p", (void *)buf, (void *)prev);
    opens = rr__direct_opens();
    char what[64];
    snprintf(what, sizeof what, "round %d (freed and allocated again)", round);
    if (round_case(pg, buf, count, round, what)) return 1;
    if (rank == 0)
      T_CHECK(rr__direct_opens() - opens == (uint64_t)(n - 1), "%s: %llu handles opened, want %d",
              what, (unsigned long long)(rr__direct_opens() - opens), n - 1);
  }
  C_OK(free(buf));
  if (g_fake) {
    /* Memory without an IPC handle: through the peers' scratch (copied in and out). */
    const uint64_t seed = t_seed();
    void *nx = NULL, *ny = NULL;
    T_CHECK(rr_fake_cuda_malloc_noexport(&nx, count * 4 * (size_t)n) == 0, "noexport memory");
    T_CHECK(rr_fake_cuda_malloc_noexport(&ny, count * 4 * (size_t)n) == 0, "noexport memory");
    uint64_t copies = rr__direct_copies();
    if (round_case(pg, nx, count, 4, "no IPC handle, in place")) return 1;
    /* Out of place, the input exportable and the output not. */
    char *ex = dalloc(count * 4);
    int32_t *h = malloc(count * 4 * (size_t)n);
    T_CHECK(ex && h, "memory");
    t_fill(h, count, RR_FLOAT32, RR_SUM, seed, rank, 0);
    T_CHECK(!put(ex, h, count * 4), "upload");
    uint64_t before = rr__direct_calls();
    T_OK(rr_all_reduce(pg, ex, ny, count, RR_FLOAT32, RR_SUM));
    T_CHECK(rr__direct_calls() - before == 1, "mixed export: not one kernel");
    T_CHECK(!get(h, ny, count * 4), "download");
    T_CHECK(!t_check_reduced(h, count, RR_FLOAT32, RR_SUM, seed, n, 0, "no IPC handle (out)"),
            "wrong elements");
    /* reduce_scatter and all_gather in place (send and receive overlap in one buffer). */
    t_fill(h, count * (size_t)n, RR_INT32, RR_SUM, seed, rank, 0);
    T_CHECK(!put(nx, h, count * 4 * (size_t)n), "upload");
    char *mine = (char *)nx + (size_t)rank * count * 4;
    T_OK(rr_reduce_scatter(pg, nx, mine, count, RR_INT32, RR_SUM));
    T_CHECK(!get(h, mine, count * 4), "download");
    T_CHECK(!t_check_reduced(h, count, RR_INT32, RR_SUM, seed, n, (size_t)rank * count,
                             "reduce_scatter in place, no IPC handle"),
            "wrong elements");
    t_fill(h, count, RR_INT32, RR_SUM, seed, rank, 0);
    T_CHECK(!put(mine, h, count * 4), "upload");
    T_OK(rr_all_gather(pg, mine, nx, count, RR_INT32));
    T_CHECK(!get(h, nx, count * 4 * (size_t)n), "download");
    for (int k = 0; k < n; k++)
      T_CHECK(!t_check_copied((char *)h + (size_t)k * count * 4, count, RR_INT32, RR_SUM, seed, k,
                              0, "all_gather in place, no IPC handle"),
              "wrong elements");
    if (rank != 0)
      T_CHECK(rr__direct_copies() - copies == 4, "%llu calls went through the scratch, want 4",
              (unsigned long long)(rr__direct_copies() - copies));
    free(h);
    C_OK(free(ex));
    C_OK(free(nx));
    C_OK(free(ny));
  }
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- wrongdev ---- */

static int wrongdev_rank(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  t_rank = rank;
  T_OK(rr_init_process_group(&pg, NULL));
  C_OK(set_device(0));
  char *buf = dalloc(4096);
  T_CHECK(buf != NULL, "memory");
  C_OK(memset_async(buf, 0, 4096, NULL));
  C_OK(stream_sync(NULL));
  uint64_t before = rr__direct_calls();
  T_OK(rr_all_reduce(pg, buf, buf, 1024, RR_FLOAT32, RR_SUM));
  T_CHECK(rr__direct_calls() - before == 1, "the first call did not run as one kernel");
  if (rank == 1) {
    C_OK(set_device(1));
    buf = dalloc(4096);
    T_CHECK(buf != NULL, "memory");
    C_OK(memset_async(buf, 0, 4096, NULL));
    C_OK(stream_sync(NULL));
  }
  int st = rr_all_reduce(pg, buf, buf, 1024, RR_FLOAT32, RR_SUM);
  const char *e = rr_last_error();
  printf("rank %d: %s: %s\n", rank, rr_status_name(st), e);
  fflush(stdout);
  T_CHECK(st != RR_OK, "a call with rank 1's buffer on another device succeeded");
  if (rank == 0) T_HAS(e, "rank 1's buffers are on another GPU");
  T_HAS(e, "rank ");
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- kill ---- */

#define KILL_WORLD 3
typedef struct kcase {
  int victim;
  double kill_after, killed_at;
  char ready_dir[64];
} kcase;

static int kill_rank(int rank, void *arg) {
  kcase *kc = arg;
  rr_pg *pg;
  if (rank_setup(rank, &pg)) return 1;
  const size_t count = (size_t)1 << 18;
  char *x = dalloc(count * 4), *y = dalloc(count * 4 * KILL_WORLD);
  T_CHECK(x && y, "memory");
  C_OK(memset_async(x, 0, count * 4, NULL));
  C_OK(stream_sync(NULL));
  uint64_t before = rr__direct_calls();
  T_OK(rr_all_reduce(pg, x, x, count, RR_FLOAT32, RR_SUM));
  T_CHECK(rr__direct_calls() - before == 1, "the first call did not run as one kernel");
  T_CHECK(!t_ready_mark(kc->ready_dir, rank), "cannot mark rank %d ready in %s", rank,
          kc->ready_dir);
  int st;
  long calls = 0;
  do {
    const int root = (int)(calls / 5 % KILL_WORLD);
    switch (calls % 5) {
      case 0:
        st = rr_all_reduce(pg, x, x, count, RR_FLOAT32, RR_SUM);
        break;
      case 1:
        st = rr_reduce_scatter(pg, y, x, count, RR_FLOAT32, RR_SUM);
        break;
      case 2:
        st = rr_all_gather(pg, x, y, count, RR_FLOAT32);
        break;
      case 3:
        st = rr_broadcast(pg, x, x, count, RR_FLOAT32, root);
        break;
      default:
        st = rr_reduce(pg, x, x, count, RR_FLOAT32, RR_SUM, root);
        break;
    }
    calls++;
  } while (st == RR_OK);
  const char *e = rr_last_error();
  printf("rank %d: call %ld failed: %s: %s\n", rank, calls, rr_status_name(st), e);
  fflush(stdout);
  T_CHECK(st == RR_EPEER, "status %s: %s", rr_status_name(st), e);
  char who[32];
  snprintf(who, sizeof who, "rank %d", kc->victim);
  T_HAS(e, who);
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
  kill(pids[kc->victim], SIGKILL);
  kc->killed_at = t_now();
}

static int kill_test(int victim) {
  kcase kc = {.victim = victim,
              .kill_after = 0.02 + (double)(t_bits(t_seed(), 39, (uint64_t)victim) % 300) / 1000.0};
  snprintf(kc.ready_dir, sizeof kc.ready_dir, "/tmp/rr-direct-XXXXXX");
  if (!mkdtemp(kc.ready_dir)) return perror("mkdtemp"), 1;
  int codes[KILL_WORLD], sigs[KILL_WORLD];
  int rc = t_run(KILL_WORLD, kill_rank, &kc, kill_victim, 60.0, codes, sigs);
  t_ready_remove(kc.ready_dir, KILL_WORLD);
  if (rc) return fprintf(stderr, "kill: the survivors hung (rank %d killed)\n", victim), 1;
  double took = t_now() - kc.killed_at;
  printf("kill: rank %d killed %.2f s into the loop; survivors done %.2f s later\n", victim,
         kc.kill_after, took);
  int bad = took > 20.0;
  for (int r = 0; r < KILL_WORLD; r++)
    if (r != victim && (codes[r] || sigs[r]))
      bad = 1, fprintf(stderr, "survivor rank %d: exit %d signal %d\n", r, codes[r], sigs[r]);
  if (sigs[victim] != SIGKILL) bad = 1, fprintf(stderr, "rank %d was not killed\n", victim);
  return bad;
}

static int spawn(int world, int (*fn)(int, void *)) {
  rr_spawn_status st;
  if (rr_spawn(world, fn, NULL, &st) != RR_OK) {
    fprintf(stderr, "%s\n", rr_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  g_fake = cu_setup(&argc, &argv);
  const char *what = argc > 1 ? argv[1] : "coll";
  if (!rr__cuda_built() && !g_fake) {
    printf("skipped: no CUDA device (this build has no CUDA; run with --fake)\n");
    return SKIP;
  }
  if (!have_device_forked()) {
    printf("skipped: no CUDA device (the CUDA runtime found no usable driver or GPU)\n");
    return SKIP;
  }
  t_seed_announce(what);
  int world = argc > 2 ? atoi(argv[2]) : 2, rc = 1;
  if (!strcmp(what, "coll"))
    rc = spawn(world, coll_rank);
  else if (!strcmp(what, "cache"))
    rc = spawn(world, cache_rank);
  else if (!strcmp(what, "wrongdev")) {
    if (!g_fake) {
      printf("skipped: wrongdev runs on the fake (two devices)\n");
      return SKIP;
    }
    rc = spawn(2, wrongdev_rank);
  } else if (!strcmp(what, "kill"))
    rc = kill_test(world);
  else
    fprintf(stderr, "unknown case %s\n", what);
  printf("%s %s\n", what, rc ? "FAILED" : "ok");
  return rc;
}
