/* test_cuda_grow: calls on device buffers of growing sizes free no CUDA memory (issue 24 item
 * 1.6, the group's and the ring's part). cudaFree and cudaFreeHost wait for the whole device,
 * so a call that freed the group's pinned staging buffer or the ring's device scratch to grow
 * it would stall behind every other stream's work (the user's training kernels). Counted on the
 * host fake of the CUDA table, wrapped by a copy whose entries count and pass the calls on (as
 * test_ddp_gpucost.c does), so nothing in the fake changes.
 *
 *   test_cuda_grow <world>
 *   test_cuda_grow lists      the retired list alone (rr__cuda_retire, rr__cuda_unretire)
 *
 * Each rank runs, for sizes growing by a quarter each round, an all_reduce (out of place), a
 * reduce_scatter out of place and one in place, int32 sum on device buffers, every result
 * checked exactly. The environment picks the path: RR_CUDA_PIPE=0 stages whole buffers
 * through the group's pinned buffer (group/staging.c); over TCP without CUDA IPC the ring
 * kinds are piped and a reduce_scatter of three or more ranks keeps its partial blocks in the
 * ring's device scratch (ring/reduce_scatter.c, rr__coll_scratch), small all_reduces staged.
 * RR_TEST_EXPECT_PIPED=1 / 0 checks the reduce_scatters were / were not piped.
 *
 * Counted around the library's calls: frees (cudaFree, cudaFreeHost) must be none; allocations
 * at most a logarithm of the growth (the buffers grow geometrically) plus the fixed ones; and
 * after the first round no CUDA event made or destroyed (the calls' events come from a pool,
 * issue 39 part 3). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/coll.h"
#include "tests/cuda_harness.h"

static rr__cuda_api g_counted; /* static: the library keeps the pointer */
static const rr__cuda_api *g_inner;
static atomic_long n_alloc, n_free, n_event_make, n_event_destroy;

static int c_malloc(void **p, size_t b) {
  atomic_fetch_add(&n_alloc, 1);
  return g_inner->malloc(p, b);
}
static int c_host_alloc(void **p, size_t b) {
  atomic_fetch_add(&n_alloc, 1);
  return g_inner->host_alloc(p, b);
}
static int c_free(void *p) {
  atomic_fetch_add(&n_free, 1);
  return g_inner->free(p);
}
static int c_host_free(void *p) {
  atomic_fetch_add(&n_free, 1);
  return g_inner->host_free(p);
}

static int c_event_create(void **e, unsigned flags) {
  atomic_fetch_add(&n_event_make, 1);
  return g_inner->event_create(e, flags);
}
static int c_event_destroy(void *e) {
  atomic_fetch_add(&n_event_destroy, 1);
  return g_inner->event_destroy(e);
}

enum { ROUNDS = 14, FIRST = 4096 }; /* elements per rank's block; x1.25 a round: ~18x in all */

static uint64_t g_seed;

static size_t block(int round) {
  return (size_t)((double)FIRST * pow(1.25, round));
}

static int expect_piped(void) {
  const char *e = getenv("RR_TEST_EXPECT_PIPED");
  return e && *e ? atoi(e) : -1;
}

/* Download n int32 from dev and check them against the sum over ranks of elements
 * first..first+n of the test data. */
static int check(const void *dev, size_t n, int nranks, size_t first, uint64_t seed,
                 const char *what) {
  int32_t *h = t_alloc(n * sizeof *h);
  int e = cu_copy(h, dev, n * sizeof *h);
  size_t wrong = e ? n : t_check_reduced(h, n, RR_INT32, RR_SUM, seed, nranks, first, what);
  free(h);
  T_CHECK(!e, "%s: download: %s", what, cu->error_string(e));
  T_CHECK(!wrong, "%s: %zu of %zu elements wrong", what, wrong, n);
  return 0;
}

static int grow_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  const int n = rr_get_world_size(pg);
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  /* The test's own buffers, at the largest size, made before anything is counted. */
  const size_t maxb = block(ROUNDS - 1), es = sizeof(int32_t);
  int32_t *h = t_alloc((size_t)n * maxb * es);
  void *send, *recv, *inplace;
  C_OK(malloc(&send, (size_t)n * maxb * es));
  C_OK(malloc(&recv, (size_t)n * maxb * es));
  C_OK(malloc(&inplace, (size_t)n * maxb * es));
  const int piped = expect_piped();
  long allocs = 0, frees = 0, ev0 = 0;
  uint64_t piped_segs = 0;
  for (int round = 0; round < ROUNDS; round++) {
    /* After the first round every event a call needs comes from the pool (cuda/runtime.c):
     * none made, none destroyed (the piped path's slots keep theirs). */
    if (round == 1) ev0 = atomic_load(&n_event_make) + atomic_load(&n_event_destroy);
    const size_t b = block(round), total = (size_t)n * b;
    const uint64_t seed = g_seed + (uint64_t)round;
    t_fill(h, total, RR_INT32, RR_SUM, seed, rank, 0);
    T_CHECK(!cu_copy(send, h, total * es), "upload");
    T_CHECK(!cu_copy(inplace, h, total * es), "upload");
    char what[96];
    long a0 = atomic_load(&n_alloc), f0 = atomic_load(&n_free);
    T_OK(rr_all_reduce(pg, send, recv, total, RR_INT32, RR_SUM));
    uint64_t s0 = rr__piped_segments();
    T_OK(rr_reduce_scatter(pg, send, recv, b, RR_INT32, RR_SUM));
    snprintf(what, sizeof what, "round %d: reduce_scatter of %zu", round, b);
    /* recv's block 0 now holds this rank's block: checked before the next call writes it */
    if (check(recv, b, n, (size_t)rank * b, seed, what)) return 1;
    T_OK(rr_reduce_scatter(pg, inplace, (char *)inplace + (size_t)rank * b * es, b, RR_INT32,
                           RR_SUM));
    piped_segs += rr__piped_segments() - s0;
    allocs += atomic_load(&n_alloc) - a0, frees += atomic_load(&n_free) - f0;
    snprintf(what, sizeof what, "round %d: in-place reduce_scatter of %zu", round, b);
    if (check((char *)inplace + (size_t)rank * b * es, b, n, (size_t)rank * b, seed, what))
      return 1;
    a0 = atomic_load(&n_alloc), f0 = atomic_load(&n_free);
    T_OK(rr_all_reduce(pg, send, recv, total, RR_INT32, RR_SUM));
    allocs += atomic_load(&n_alloc) - a0, frees += atomic_load(&n_free) - f0;
    snprintf(what, sizeof what, "round %d: all_reduce of %zu", round, total);
    if (check(recv, total, n, 0, seed, what)) return 1;
  }
  /* Geometric growth: each growing buffer (the pinned staging buffer, the device scratch,
   * whose in-place requests are twice the first one) is allocated at most
   * log2(2 * growth) + 1 times; the piped path's two pinned slot buffers once. */
  const double growth = 2.0 * (double)block(ROUNDS - 1) / (double)block(0);
  const long bound = 2 * ((long)ceil(log2(growth)) + 1) + 2;
  if (rank == 0)
    printf(
        "world %d, %d rounds of blocks %zu..%zu: %ld CUDA allocations and %ld frees "
        "inside the calls, %llu segments piped\n",
        n, ROUNDS, block(0), block(ROUNDS - 1), allocs, frees, (unsigned long long)piped_segs);
  T_CHECK(frees == 0,
          "%ld cudaFree/cudaFreeHost inside calls that grew their buffers (want none: a free "
          "waits for the whole device)",
          frees);
  T_CHECK(allocs <= bound, "%ld CUDA allocations inside the calls (want at most %ld)", allocs,
          bound);
  const long ev = atomic_load(&n_event_make) + atomic_load(&n_event_destroy) - ev0;
  T_CHECK(ev == 0,
          "%ld CUDA events made or destroyed by the %d calls after the first round (want none: "
          "the calls' events come from a pool)",
          ev, 4 * (ROUNDS - 1));
  if (piped == 1) T_CHECK(piped_segs > 0, "no reduce_scatter was piped");
  if (piped == 0) T_CHECK(piped_segs == 0, "%llu segments piped", (unsigned long long)piped_segs);
  T_OK(rr_destroy_process_group(pg));
  C_OK(free(send));
  C_OK(free(recv));
  C_OK(free(inplace));
  free(h);
  return 0;
}

/* The retired list alone (cuda/cuda.h): the smallest fitting buffer of the asked device comes
 * back, other devices' and pinned ones never; growth doubles; what is left is freed once. */
static int lists_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  C_OK(set_device(0));
  rr__cuda_retired *list = NULL;
  void *d0s, *d0b, *d1, *h;
  size_t got = 0;
  T_OK(rr__cuda_alloc_grown(&d0s, &got, 0, 1000, 0));
  T_CHECK(got == 1000, "a first buffer of %zu bytes, want 1000", got);
  T_OK(rr__cuda_alloc_grown(&d0b, &got, 1000, 1500, 0));
  T_CHECK(got == 2000, "grown from 1000 for 1500: %zu bytes, want 2000", got);
  T_OK(rr__cuda_alloc_grown(&h, &got, 1000, 5000, 1));
  T_CHECK(got == 5000, "grown from 1000 for 5000: %zu bytes, want 5000", got);
  C_OK(set_device(1));
  T_OK(rr__cuda_alloc_grown(&d1, &got, 0, 4000, 0));
  C_OK(set_device(0));
  rr__cuda_retire(&list, d0b, 2000, 0);
  rr__cuda_retire(&list, d1, 4000, 1);
  rr__cuda_retire(&list, h, 5000, -1);
  rr__cuda_retire(&list, d0s, 1000, 0);
  rr__cuda_retire(&list, NULL, 0, 0);
  T_CHECK(!rr__cuda_unretire(&list, 0, 2001, &got), "a device-0 buffer over 2000 bytes came back");
  T_CHECK(rr__cuda_unretire(&list, 0, 900, &got) == d0s && got == 1000, "not the smallest fit");
  T_CHECK(rr__cuda_unretire(&list, 1, 10, &got) == d1 && got == 4000, "device 1's buffer");
  T_CHECK(!rr__cuda_unretire(&list, 1, 10, &got), "device 1's buffer came back twice");
  rr__cuda_retire(&list, d0s, 1000, 0);
  rr__cuda_retire(&list, d1, 4000, 1);
  long f0 = atomic_load(&n_free);
  rr__cuda_free_retired(&list);
  T_CHECK(!list && atomic_load(&n_free) - f0 == 4, "%ld frees of 4 retired buffers",
          atomic_load(&n_free) - f0);
  return 0;
}

int main(int argc, char **argv) {
  g_seed = t_seed();
  const int lists = argc > 1 && !strcmp(argv[1], "lists");
  int w = argc > 1 ? atoi(argv[1]) : 2;
  if (!lists && w < 1) {
    fprintf(stderr, "usage: %s <world> | lists\n", argv[0]);
    return 2;
  }
  g_inner = rr_fake_cuda(CU_FAKE_DEVICES);
  g_counted = *g_inner;
  g_counted.malloc = c_malloc;
  g_counted.host_alloc = c_host_alloc;
  g_counted.free = c_free;
  g_counted.host_free = c_host_free;
  g_counted.event_create = c_event_create;
  g_counted.event_destroy = c_event_destroy;
  if (rr__cuda_use_api(&g_counted) != RR_OK) {
    fprintf(stderr, "%s\n", rr_last_error());
    return 1;
  }
  cu = &g_counted;
  if (lists) return t_run_all(1, lists_rank, NULL, 60, NULL);
  return t_run_all(w, grow_rank, NULL, 300, NULL);
}
