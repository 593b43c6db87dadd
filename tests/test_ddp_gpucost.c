/* test_ddp "gpucost": what one DDP step on device tensors asks of the CUDA runtime, counted
 * on the host fake of the CUDA table (issue 24 item 1.6). The fake's own table is wrapped by a
 * copy whose entries count the calls and pass them on, so nothing in the fake changes.
 *
 * Counted around the device wrapper's own calls (rr_ddp_forward, rr_ddp_grad_ready,
 * rr_ddp_sync) from the second step on, the rebuild of the buckets included:
 *   - synchronisations of the user's stream: none (a step is ordered on that stream with
 *     events; the caller synchronises where it reads on the host, as this test does);
 *   - launches of the scale kernel (no hook) and of the decompress kernel (fp16 hook): one
 *     per bucket, not one per parameter;
 *   - CUDA allocations and frees: none (cudaFree and cudaFreeHost wait for the whole device;
 *     the buckets' memory is kept across the rebuild, the broadcast staging across steps).
 * Every step's averaged gradients and broadcast buffers are also compared, bit for bit, with
 * the same model's host path (the device kernels compute the host loops' bits).
 *
 * The model: 16 float32 parameters of one size (so the rebuilt layout has the same bucket
 * sizes and the group's own staging never grows inside the counted window), a frozen one,
 * and buffers on the device and on the host. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuda_harness.h"
#include "tests/test_ddp.h"

/* ---- the counting table ---- */

static rr__cuda_api g_counted; /* static: the library keeps the pointer */
static const rr__cuda_api *g_inner;
static void *g_user; /* the stream whose synchronisations count */
static atomic_long n_user_sync, n_scale, n_decompress, n_alloc, n_free, n_event_sync;

static int c_stream_sync(void *s) {
  if (s == g_user) atomic_fetch_add(&n_user_sync, 1);
  return g_inner->stream_sync(s);
}
static int c_event_sync(void *e) {
  atomic_fetch_add(&n_event_sync, 1);
  return g_inner->event_sync(e);
}
static int c_ddp(int kind, void *dst, const void *src, size_t n, int dtype, int wire, int world,
                 void *stream, const char **what) {
  if (kind == RR__CUDA_DDP_SCALE) atomic_fetch_add(&n_scale, 1);
  if (kind == RR__CUDA_DDP_DECOMPRESS) atomic_fetch_add(&n_decompress, 1);
  return g_inner->ddp(kind, dst, src, n, dtype, wire, world, stream, what);
}
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

typedef struct counts {
  long user_sync, scale, decompress, alloc, free, event_sync;
} counts;

static counts now(void) {
  return (counts){atomic_load(&n_user_sync), atomic_load(&n_scale), atomic_load(&n_decompress),
                  atomic_load(&n_alloc),     atomic_load(&n_free),  atomic_load(&n_event_sync)};
}
/* acc += (b - a) */
static void add_since(counts *acc, counts a) {
  counts b = now();
  acc->user_sync += b.user_sync - a.user_sync, acc->scale += b.scale - a.scale;
  acc->decompress += b.decompress - a.decompress, acc->alloc += b.alloc - a.alloc;
  acc->free += b.free - a.free, acc->event_sync += b.event_sync - a.event_sync;
}

/* ---- the ranks ---- */

enum { NP = 17, FROZEN = 16, NELEM = 100, NBUF = 3, STEPS = 4 };

static int same_dev(const void *dev, const void *host, size_t bytes) {
  char *h = malloc(bytes);
  int same = h && cu->memcpy_async(h, dev, bytes, NULL) == 0 && cu->stream_sync(NULL) == 0 &&
             memcmp(h, host, bytes) == 0;
  free(h);
  return same;
}

static int cost_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  C_OK(stream_create(&g_user, 1));
  const size_t pbytes = NELEM * sizeof(float);
  float *hdata[NP], *hgrad[NP];
  void *ddata[NP], *dgrad[NP];
  rr_ddp_tensor hp[NP], dp[NP];
  for (int i = 0; i < NP; i++) {
    hdata[i] = calloc(NELEM, sizeof(float));
    hgrad[i] = i == FROZEN ? NULL : calloc(NELEM, sizeof(float));
    C_OK(malloc(&ddata[i], pbytes));
    dgrad[i] = NULL;
    if (i != FROZEN) C_OK(malloc(&dgrad[i], pbytes));
    hp[i] = (rr_ddp_tensor){
        .data = hdata[i], .grad = hgrad[i], .count = NELEM, .dtype = RR_FLOAT32, .device = -1};
    dp[i] = hp[i];
    dp[i].data = ddata[i], dp[i].grad = dgrad[i], dp[i].device = dev;
  }
  /* Buffers: two on the device (float32, int64), one on the host in both models. */
  float hstat[40], host_buf[8];
  int64_t hcnt[3];
  float dhost_buf[8];
  void *dstat, *dcnt;
  C_OK(malloc(&dstat, sizeof hstat));
  C_OK(malloc(&dcnt, sizeof hcnt));
  rr_ddp_tensor hb[NBUF] = {
      {.name = "stat", .data = hstat, .count = 40, .dtype = RR_FLOAT32, .device = -1},
      {.name = "host", .data = host_buf, .count = 8, .dtype = RR_FLOAT32, .device = -1},
      {.name = "cnt", .data = hcnt, .count = 3, .dtype = RR_INT64, .device = -1}};
  rr_ddp_tensor db[NBUF] = {hb[0], hb[1], hb[2]};
  db[0].data = dstat, db[0].device = dev;
  db[1].data = dhost_buf;
  db[2].data = dcnt, db[2].device = dev;
  T_OK(rr_pg_set_cuda_stream(pg, g_user));
  const rr_ddp_hook hooks[2] = {RR_DDP_HOOK_NONE, RR_DDP_HOOK_FP16};
  int bad = 0; /* each rule is reported on its own, so a failure shows every count that is off */
  for (int h = 0; h < 2; h++) {
    uint64_t seed = g_seed + (uint64_t)h * 104729;
    for (int i = 0; i < NP; i++) {
      t_fill(hdata[i], NELEM, RR_FLOAT32, RR_SUM, seed, rank, (size_t)i * 1000);
      T_CHECK(!cu_copy(ddata[i], hdata[i], pbytes), "upload");
    }
    rr_ddp_options opt = RR_DDP_OPTIONS_INIT;
    opt.bucket_cap_mb = 3.0 * (double)pbytes / MIB; /* three parameters a bucket */
    opt.hook = hooks[h];
    rr_ddp *hd, *dd;
    T_OK(rr_ddp_init(&hd, pg, hp, NP, hb, NBUF, &opt));
    T_OK(rr_ddp_init(&dd, pg, dp, NP, db, NBUF, &opt));
    int nb = rr_ddp_num_buckets(dd), ntrain = NP - 1;
    T_CHECK(nb == rr_ddp_num_buckets(hd) && nb > 1 && nb < ntrain, "%d buckets", nb);
    counts c = {0}, cf = {0}; /* the whole step; rr_ddp_forward alone (the broadcast) */
    for (int it = 0; it < STEPS; it++) {
      int counted = it > 0; /* the first step fills the group's own buffers */
      t_fill(hstat, 40, RR_FLOAT32, RR_SUM, seed + (uint64_t)it + 1, rank, 7);
      t_fill(host_buf, 8, RR_FLOAT32, RR_SUM, seed + (uint64_t)it + 1, rank, 70);
      memcpy(dhost_buf, host_buf, sizeof host_buf);
      hcnt[0] = hcnt[1] = hcnt[2] = 100 * it + rank;
      T_CHECK(!cu_copy(dstat, hstat, sizeof hstat), "upload");
      T_CHECK(!cu_copy(dcnt, hcnt, sizeof hcnt), "upload");
      T_OK(rr_ddp_forward(hd));
      counts a = now();
      T_OK(rr_ddp_forward(dd));
      if (counted) add_since(&c, a), add_since(&cf, a);
      /* The buffers are written on the user's stream: the caller orders its reads. */
      C_OK(stream_sync(g_user));
      T_CHECK(same_dev(dstat, hstat, sizeof hstat) && same_dev(dcnt, hcnt, sizeof hcnt) &&
                  !memcmp(dhost_buf, host_buf, sizeof host_buf) && hcnt[0] == 100 * it,
              "hook %d step %d: broadcast buffers differ from the host path's", h, it);
      uint64_t gs = seed + 1000 + (uint64_t)it;
      /* Every rank marks in reverse index order: the rebuilt buckets have the same sizes. */
      for (int i = NP - 1; i >= 0; i--) {
        if (!hgrad[i]) continue;
        t_fill(hgrad[i], NELEM, RR_FLOAT32, RR_SUM, gs, rank, (size_t)i * 1000);
        C_OK(memcpy_async(dgrad[i], hgrad[i], pbytes, g_user));
        C_OK(stream_sync(g_user)); /* hgrad is about to be overwritten by the host path */
        T_OK(rr_ddp_grad_ready(hd, i));
        a = now();
        T_OK(rr_ddp_grad_ready(dd, i));
        if (counted) add_since(&c, a);
      }
      T_OK(rr_ddp_sync(hd));
      a = now();
      T_OK(rr_ddp_sync(dd));
      if (counted) add_since(&c, a);
      C_OK(stream_sync(g_user));
      for (int i = 0; i < NP; i++)
        T_CHECK(!hgrad[i] || same_dev(dgrad[i], hgrad[i], pbytes),
                "hook %d step %d: averaged gradient %d differs from the host path's", h, it, i);
    }
    rr_ddp_stats ds;
    T_OK(rr_ddp_get_stats(dd, &ds));
    T_CHECK(ds.rebuilt, "the buckets were rebuilt inside the counted steps");
    const int steps = STEPS - 1;
    if (rank == 0)
      printf(
          "hook %d, %d buckets of %d parameters, per step: %.2f user-stream syncs, %.2f scale "
          "and %.2f decompress launches, %.2f event waits; %ld allocations and %ld frees in "
          "%d steps\n",
          h, nb, ntrain, (double)c.user_sync / steps, (double)c.scale / steps,
          (double)c.decompress / steps, (double)c.event_sync / steps, c.alloc, c.free, steps);
    if (c.user_sync != 0)
      bad = 1, fprintf(stderr,
                       "rank %d: hook %d: %ld synchronisations of the user's stream in %d "
                       "steps, %ld of them in rr_ddp_forward's buffer broadcast (want 0)\n",
                       rank, h, c.user_sync, steps, cf.user_sync);
    long want_scale = h == 0 ? (long)nb * steps : 0, want_dec = h == 1 ? (long)nb * steps : 0;
    if (c.scale != want_scale || c.decompress != want_dec)
      bad = 1, fprintf(stderr,
                       "rank %d: hook %d: %ld scale and %ld decompress kernel launches in "
                       "%d steps (want %ld and %ld: one per bucket, %d buckets)\n",
                       rank, h, c.scale, c.decompress, steps, want_scale, want_dec, nb);
    if (c.alloc != 0 || c.free != 0)
      bad = 1, fprintf(stderr,
                       "rank %d: hook %d: %ld CUDA allocations and %ld frees in %d steps "
                       "with a rebuild (want none: a free waits for the whole device)\n",
                       rank, h, c.alloc, c.free, steps);
    T_OK(rr_ddp_destroy(dd));
    T_OK(rr_ddp_destroy(hd));
  }
  T_CHECK(!bad, "a device step costs more than it should (above)");
  T_OK(rr_pg_set_cuda_stream(pg, NULL));
  for (int i = 0; i < NP; i++) {
    free(hdata[i]), free(hgrad[i]);
    C_OK(free(ddata[i]));
    if (dgrad[i]) C_OK(free(dgrad[i]));
  }
  C_OK(free(dstat));
  C_OK(free(dcnt));
  C_OK(stream_destroy(g_user));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

int sec_gpucost(int w) {
  g_inner = rr_fake_cuda(CU_FAKE_DEVICES);
  g_counted = *g_inner;
  g_counted.stream_sync = c_stream_sync;
  g_counted.event_sync = c_event_sync;
  g_counted.ddp = c_ddp;
  g_counted.malloc = c_malloc;
  g_counted.host_alloc = c_host_alloc;
  g_counted.free = c_free;
  g_counted.host_free = c_host_free;
  if (rr__cuda_use_api(&g_counted) != RR_OK) {
    fprintf(stderr, "%s\n", rr_last_error());
    return 1;
  }
  cu = &g_counted;
  return t_run_all(w, cost_rank, NULL, 300, NULL);
}
