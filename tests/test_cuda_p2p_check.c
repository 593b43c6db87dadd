/* CUDA IPC only between GPUs that can take it (group/direct.c, rr__pg_ipc_agreed;
 * docs/cuda.md, "When CUDA IPC cannot be used"). Ranks on one host with device buffers go
 * through CUDA IPC by default; where the GPUs cannot map each other's memory (no peer access)
 * or a device gives no IPC handles (MIG, WSL), the group agrees once to take the path
 * RR_CUDA_IPC=0 takes (piped or staged through pinned host memory) instead of failing.
 *
 *   test_cuda_p2p_check --fake coll <world>  ranks on the two fake devices (0, 1, 0, ...):
 *                                            all_reduce, reduce_scatter, all_gather,
 *                                            broadcast and reduce (every root), in and out of
 *                                            place, int32 sum (checked exactly) and float32
 *                                            sum (against a float64 reference within
 *                                            n * 2^-23 * sum |x|: tests/harness.c, t_eps),
 *                                            counts 1, 7, 4099, and a float32 all_reduce of
 *                                            65537 elements (above RR_SMALL_BYTES: piped when
 *                                            not through IPC); every rank checks its whole
 *                                            result. RR_TEST_EXPECT_DECLINED=1: every call
 *                                            was turned away from CUDA IPC
 *                                            (rr__pg_ipc_declined) and no segment went
 *                                            through it (rr__ipc_segments, rr__mop_segments),
 *                                            the large one piped; 0: none was turned away and
 *                                            every all_reduce, reduce_scatter and all_gather
 *                                            sent through CUDA IPC.
 *
 * The fake's knobs (tests/fake_cuda/fake_devices.c): RR_FAKE_CUDA_NO_P2P=1 (no peer access
 * between different devices; cudaIpcOpenMemHandle of another device's memory fails with
 * cudaErrorPeerAccessUnsupported) and RR_FAKE_CUDA_NO_IPC=1 (cudaIpcGetMemHandle fails with
 * cudaErrorNotSupported, as on a MIG instance). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group/pg.h"           /* rr__pg_ipc_declined */
#include "ring/mem.h"           /* rr__piped_segments */
#include "transport/cuda_ipc.h" /* rr__ipc_segments, rr__mop_segments */
#include "tests/cuda_harness.h"

#define SKIP 77

static char *dalloc(size_t bytes) {
  void *p = NULL;
  if (cu->malloc(&p, bytes ? bytes : 1) != 0) return NULL;
  return p;
}

static int g_expect = -1; /* RR_TEST_EXPECT_DECLINED */

typedef struct counts {
  uint64_t ipc, declined, piped;
} counts;

static counts now(void) {
  return (counts){rr__ipc_segments() + rr__mop_segments(), rr__pg_ipc_declined(),
                  rr__piped_segments()};
}

/* One call on this rank went the way RR_TEST_EXPECT_DECLINED says. sends: this rank sends
 * data in it (a broadcast's last rank in the chain and a reduce's root send none). */
static int check_path(counts before, int sends, const char *what) {
  const counts c = now();
  const uint64_t ipc = c.ipc - before.ipc, dec = c.declined - before.declined;
  if (g_expect == 1) {
    T_CHECK(dec == 1, "%s: %llu calls turned away from CUDA IPC, want 1", what,
            (unsigned long long)dec);
    T_CHECK(ipc == 0, "%s: %llu segments through CUDA IPC, want none", what,
            (unsigned long long)ipc);
  } else if (g_expect == 0) {
    T_CHECK(dec == 0, "%s: %llu calls turned away from CUDA IPC, want none", what,
            (unsigned long long)dec);
    if (sends) T_CHECK(ipc > 0, "%s: no segment through CUDA IPC", what);
  }
  return 0;
}

static int kinds_case(rr_pg *pg, size_t count, rr_dtype d, int inplace, uint64_t seed) {
  const rr_op op = RR_SUM;
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  const size_t es = rr_dtype_size(d), blk = count * es, all = blk * (size_t)n;
  char *h = t_alloc(all), *big = dalloc(all), *small = dalloc(blk);
  T_CHECK(big && small, "device memory");
  char what[128];
  size_t wrong = 0;
  counts before;

  /* all_reduce */
  t_fill(h, count, d, op, seed, r, 0);
  T_CHECK(!cu_copy(small, h, blk), "upload");
  char *out = inplace ? small : big;
  snprintf(what, sizeof what, "all_reduce %s %s count %zu", rr_dtype_name(d),
           inplace ? "in place" : "out of place", count);
  before = now();
  T_OK(rr_all_reduce(pg, small, out, count, d, op));
  if (check_path(before, 1, what)) return 1;
  T_CHECK(!cu_copy(h, out, blk), "download");
  wrong += t_check_reduced(h, count, d, op, seed, n, 0, what);

  /* reduce_scatter: block r of the reduction of every rank's n blocks. */
  t_fill(h, count * (size_t)n, d, op, seed + 1, r, 0);
  T_CHECK(!cu_copy(big, h, all), "upload");
  out = inplace ? big + (size_t)r * blk : small;
  snprintf(what, sizeof what, "reduce_scatter %s %s count %zu", rr_dtype_name(d),
           inplace ? "in place" : "out of place", count);
  before = now();
  T_OK(rr_reduce_scatter(pg, big, out, count, d, op));
  if (check_path(before, 1, what)) return 1;
  T_CHECK(!cu_copy(h, out, blk), "download");
  wrong += t_check_reduced(h, count, d, op, seed + 1, n, (size_t)r * count, what);

  /* all_gather: block k of the output is rank k's input. */
  t_fill(h, count, d, op, seed + 2, r, 0);
  char *in = inplace ? big + (size_t)r * blk : small;
  T_CHECK(!cu_copy(in, h, blk), "upload");
  snprintf(what, sizeof what, "all_gather %s %s count %zu", rr_dtype_name(d),
           inplace ? "in place" : "out of place", count);
  before = now();
  T_OK(rr_all_gather(pg, in, big, count, d));
  if (check_path(before, 1, what)) return 1;
  T_CHECK(!cu_copy(h, big, all), "download");
  for (int k = 0; k < n; k++)
    wrong += t_check_copied(h + (size_t)k * blk, count, d, op, seed + 2, k, 0, what);

  for (int root = 0; root < n; root++) {
    /* broadcast: the root's data everywhere. */
    t_fill(h, count, d, op, seed + 3, r, 0);
    T_CHECK(!cu_copy(small, h, blk), "upload");
    char *dst = inplace ? small : big;
    snprintf(what, sizeof what, "broadcast %s root %d %s count %zu", rr_dtype_name(d), root,
             inplace ? "in place" : "out of place", count);
    before = now();
    T_OK(rr_broadcast(pg, small, dst, count, d, root));
    if (check_path(before, 0, what)) return 1;
    T_CHECK(!cu_copy(h, dst, blk), "download");
    wrong += t_check_copied(h, count, d, op, seed + 3, root, 0, what);

    /* reduce: the reduction at the root; the others' inputs unchanged. */
    t_fill(h, count, d, op, seed + 4, r, 0);
    T_CHECK(!cu_copy(small, h, blk), "upload");
    dst = inplace ? small : big;
    snprintf(what, sizeof what, "reduce %s root %d %s count %zu", rr_dtype_name(d), root,
             inplace ? "in place" : "out of place", count);
    before = now();
    T_OK(rr_reduce(pg, small, dst, count, d, op, root));
    if (check_path(before, 0, what)) return 1;
    T_CHECK(!cu_copy(h, r == root ? dst : small, blk), "download");
    if (r == root)
      wrong += t_check_reduced(h, count, d, op, seed + 4, n, 0, what);
    else
      wrong += t_check_copied(h, count, d, op, seed + 4, r, 0, "reduce input (unchanged)");
  }
  C_OK(free(big));
  C_OK(free(small));
  free(h);
  T_CHECK(!wrong, "%s count %zu: %zu wrong elements", rr_dtype_name(d), count, wrong);
  return 0;
}

/* A float32 all_reduce above RR_SMALL_BYTES (64 KiB): the ring, piped when not through IPC. */
static int big_case(rr_pg *pg, uint64_t seed) {
  const size_t count = 65537, bytes = count * 4;
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  char *h = t_alloc(bytes), *buf = dalloc(bytes);
  T_CHECK(buf, "device memory");
  t_fill(h, count, RR_FLOAT32, RR_SUM, seed, r, 0);
  T_CHECK(!cu_copy(buf, h, bytes), "upload");
  const counts before = now();
  T_OK(rr_all_reduce(pg, buf, buf, count, RR_FLOAT32, RR_SUM));
  if (check_path(before, 1, "all_reduce float32 count 65537")) return 1;
  if (g_expect == 1)
    T_CHECK(rr__piped_segments() > before.piped, "the large all_reduce was not piped");
  T_CHECK(!cu_copy(h, buf, bytes), "download");
  size_t wrong =
      t_check_reduced(h, count, RR_FLOAT32, RR_SUM, seed, n, 0, "all_reduce float32 65537");
  C_OK(free(buf));
  free(h);
  T_CHECK(!wrong, "all_reduce float32 count 65537: %zu wrong elements", wrong);
  return 0;
}

static int coll_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  const uint64_t seed = t_seed();
  const size_t sizes[] = {1, 7, 4099};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (kinds_case(pg, sizes[i], RR_INT32, (int)(i % 2), seed + i)) return 1;
    if (kinds_case(pg, sizes[i], RR_FLOAT32, (int)((i + 1) % 2), seed + 10 + i)) return 1;
  }
  if (big_case(pg, seed + 20)) return 1;
  rr_destroy_process_group(pg);
  return 0;
}

int main(int argc, char **argv) {
  const int fake = cu_setup(&argc, &argv);
  const char *what = argc > 1 ? argv[1] : "coll";
  if (!fake) {
    printf("skipped: runs on the fake (--fake): its knobs make the GPUs without peer access\n");
    return SKIP;
  }
  const char *e = getenv("RR_TEST_EXPECT_DECLINED");
  g_expect = e && *e ? atoi(e) : -1;
  t_seed_announce(what);
  const int world = argc > 2 ? atoi(argv[2]) : 2;
  int rc = 1;
  if (!strcmp(what, "coll")) {
    rr_spawn_status st;
    rc = rr_spawn(world, coll_rank, NULL, &st) != RR_OK;
    if (rc) fprintf(stderr, "%s\n", rr_last_error());
  } else {
    fprintf(stderr, "unknown case %s\n", what);
  }
  printf("%s %s\n", what, rc ? "FAILED" : "ok");
  return rc;
}
