/* CUDA tests. Every CUDA call goes through the library's CUDA table (tests/cuda_harness.h),
 * so each test runs on a GPU (the real runtime) and, with --fake first, on the host fake
 * (tests/fake_cuda/) that CI runs everywhere. Without a device (or a build without CUDA,
 * and no --fake) they print "skipped: no CUDA device" and exit 77, which CTest reports as
 * skipped.
 *
 *   test_cuda [--fake] ptr                 pointer detection: malloc, pinned, managed,
 *                                          device, interior, NULL
 *   test_cuda [--fake] kernel              every dtype x op through the reduce launcher
 *                                          (aligned, scalar tail, each pointer misaligned
 *                                          alone, dst == a, dst == b, fused second
 *                                          destination) against ring/op.c, bit for bit; on a
 *                                          GPU also (1<<24)+5 elements, past the grid cap
 *   test_cuda [--fake] coll <world>        every collective on device buffers, every dtype x
 *                                          op for all_reduce, in and out of place, counts 0,
 *                                          1, 7, 1000003 (fake: 100003), checked against the
 *                                          harness's float64 / exact reference (tolerance:
 *                                          harness.h, t_eps); ranks share devices (LOCAL_RANK
 *                                          modulo the device count)
 *                                          RR_TEST_EXPECT_IPC=1 / 0: each all_reduce (with
 *                                          >= 1 element per rank), reduce_scatter,
 *                                          all_gather, and each rank's data sent in broadcast,
 *                                          reduce, gather, scatter, all_to_all(v)
 *                                          (test_cuda_kinds.h) must / must not go through
 *                                          CUDA IPC (transport/cuda_ipc.c);
 *                                          RR_TEST_EXPECT_MEMOPS=1 / 0: the all_reduce,
 *                                          reduce_scatter and all_gather ones must / must not
 *                                          hand segments over by stream memory operations
 *   test_cuda [--fake] threads <world>     the same with the ranks as threads of one process
 *   test_cuda [--fake] ipcseg <world>      collectives through CUDA IPC cut at
 *                                          RR_IPC_SEG_BYTES, point to point and host calls
 *                                          at RR_SEG_BYTES (set smaller): an all_reduce of
 *                                          chunks of one IPC segment sends exactly 2(w-1)
 *                                          segments per rank; a device send/recv and a host
 *                                          all_reduce in between; results checked
 *   test_cuda [--fake] mixed <world>       rank 0's buffer in host memory, the others' on a
 *                                          device: all_reduce float32 sum and int32 max, exact
 *                                          (over host lanes: the piped path beside the host one)
 *   test_cuda [--fake] large <world>       64 MiB float32 sum all_reduce on device buffers
 *   test_cuda [--fake] stream <world>      async all_reduce ordered on a user stream: a slow
 *                                          chain of copies and then a memset write the buffer
 *                                          on the stream before the call; the result is read
 *                                          after rr_work_wait on the same stream, or (odd
 *                                          rounds) on the legacy stream once rr_work_test
 *                                          reported completion
 *   test_cuda [--fake] nosync <world>      an async call waits for its stream's earlier work
 *                                          with an event, not a stream synchronisation: the
 *                                          stream's later work (a wait for a slow gate) is
 *                                          still pending when rr_work_wait returns; the
 *                                          stream's work after the wait sees the result
 *   test_cuda [--fake] nosync_managed <world>  the same with a managed buffer (issue 24 1.5:
 *                                          the worker waits for an event, not the stream)
 *   test_cuda [--fake] managed <world>     the same with a managed buffer and a blocking call
 *                                          (cuda-review 3: managed memory is read by the
 *                                          host, after the stream's work)
 *   test_cuda [--fake] capture <world>     a call on a stream that is capturing a CUDA graph
 *                                          is refused on that rank (RR_EINVAL, named), before
 *                                          anything is queued: the user's capture still ends
 *                                          cleanly, and the other ranks' call fails naming it
 *   test_cuda --fake ptrfail <world>       pointer attributes fail (RR_FAKE_CUDA_PTR_FAIL=1,
 *                                          the fake only): a call on device buffers is refused
 *                                          (RR_ECUDA, naming the buffer), never run as if they
 *                                          were host memory
 *   test_cuda [--fake] perthread           rr_pg_set_cuda_stream refuses cudaStreamPerThread
 *                                          and takes cudaStreamLegacy and NULL (cuda-review 4)
 *   test_cuda [--fake] noctx               a CPU-only program creates no context: a forked
 *                                          child's world-1 all-reduce on malloc'd memory
 *                                          leaves every device's primary context inactive
 *                                          (cuda-review 8)
 *   test_cuda [--fake] workerctx           an async call on a buffer of device 1 creates no
 *                                          context on device 0 (cuda-review 1; needs 2
 *                                          devices, skipped with one)
 *   test_cuda [--fake] device1 <world> [v] every rank's buffers on device 1 (needs 2
 *                                          devices): async all_reduce waited for with
 *                                          rr_work_wait or polled with rr_work_test on a
 *                                          thread that never chose a device, on the NULL
 *                                          stream and a user stream, and a managed buffer;
 *                                          no context on device 0 (the fake names the call
 *                                          that made one), no wait on device 0's legacy
 *                                          stream, the call's stream sees the result
 *                                          (issue 24 item 1.1); v: that variant only
 *   test_cuda [--fake] pgdevice            rr_pg_options.device: one past the last device is
 *                                          refused (RR_EINVAL), the last one is made current
 *                                          (cuda-review 5)
 *   test_cuda [--fake] ipc                 the IPC contract the fake encodes, checked on the
 *                                          real runtime too: a memory handle opened in its
 *                                          own process fails, in another process maps the
 *                                          same memory, twice gives the same pointer
 *                                          (reference counted); interprocess events need
 *                                          cudaEventDisableTiming, and a stream in another
 *                                          process can wait for one
 *
 * CUDA must not be initialised before fork (rr_spawn), so the parent asks a child whether
 * there is a device.
 *
 * (Over 800 lines on purpose: one program per GPU run, a case per device-path rule, each
 * sharing the harness, the rank launcher and the buffer helpers; the list above is its table
 * of contents, the kinds' table is in test_cuda_kinds.h.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/param.h" /* rr__params_get: ipcseg reads the two segment sizes */
#include "ring/coll.h"    /* rr__piped_segments */
#include "ring/op.h"
#include "transport/cuda_ipc.h"
#include "tests/cuda_harness.h"

#define SKIP 77

static int g_fake;

static int skip(const char *why) {
  printf("skipped: no CUDA device (%s)\n", why);
  return SKIP;
}

/* ---- ptr ---- */
static int test_ptr(void) {
  void *h = malloc(64), *pinned = NULL, *dev = NULL, *man = NULL;
  C_OK(host_alloc(&pinned, 64));
  C_OK(malloc(&dev, 64));
  C_OK(malloc_managed(&man, 64));
  int d = -2;
  T_CHECK(!rr__cuda_ptr_device(NULL, NULL), "NULL");
  T_CHECK(!rr__cuda_ptr_device(h, NULL), "malloc'd memory taken for device memory");
  T_CHECK(!rr__cuda_ptr_device(pinned, NULL), "pinned host memory taken for device memory");
  T_CHECK(!rr__cuda_ptr_device(man, NULL), "managed memory must be used as host memory");
  T_CHECK(rr__cuda_ptr_type(man, NULL) == RR__CUDA_MEM_MANAGED, "managed memory not recognised");
  T_CHECK(rr__cuda_ptr_device(dev, &d) == 1 && d == 0, "cudaMalloc'd memory: got device %d", d);
  T_CHECK(rr__cuda_ptr_device((char *)dev + 17, &d) == 1, "an interior device pointer");
  free(h);
  C_OK(host_free(pinned));
  C_OK(free(dev));
  C_OK(free(man));
  printf("ptr: ok\n");
  return 0;
}

/* ---- kernel ---- */
typedef struct kbufs {
  char *ha, *hb, *ref, *got, *da, *db, *dd, *dd2;
} kbufs;

/* One launch: a at element offset oa, b at ob, dst at od; mode 0 out of place, 1 dst == a,
 * 2 dst == b, 3 out of place with the fused second destination. */
static int kernel_case(rr_dtype d, rr_op op, int div, size_t n, size_t oa, size_t ob, size_t od,
                       int mode, const kbufs *k) {
  size_t es = rr_dtype_size(d), bytes = n * es;
  char *a = k->da + oa * es, *b = k->db + ob * es;
  C_OK(memcpy_async(a, k->ha, bytes, NULL));
  C_OK(memcpy_async(b, k->hb, bytes, NULL));
  rr__reduce(k->ref, k->ha, k->hb, n, d, op, div);
  char *dst = mode == 1 ? a : mode == 2 ? b : k->dd + od * es;
  char *dst2 = mode == 3 ? k->dd2 + od * es : NULL;
  T_OK(rr__cuda_reduce(dst, dst2, a, b, n, d, op, div, NULL));
  C_OK(device_sync());
  for (int j = 0; j < 1 + (mode == 3); j++) {
    C_OK(memcpy_async(k->got, j ? dst2 : dst, bytes, NULL));
    C_OK(stream_sync(NULL));
    if (memcmp(k->got, k->ref, bytes) != 0) {
      size_t i = 0;
      while (memcmp(k->got + i * es, k->ref + i * es, es) == 0) i++;
      uint64_t g = 0, r = 0;
      memcpy(&g, k->got + i * es, es);
      memcpy(&r, k->ref + i * es, es);
      T_FAIL(
          "%s %s div %d n %zu offsets a %zu b %zu dst %zu mode %d%s: element %zu is "
          "0x%llx on the device, 0x%llx in op.c",
          rr_dtype_name(d), rr_op_name(op), div, n, oa, ob, od, mode,
          j ? " (second destination)" : "", i, (unsigned long long)g, (unsigned long long)r);
    }
  }
  return 0;
}

static int test_kernel(void) {
  /* Past the grid cap on a GPU (4 blocks x 512 threads x 132 SMs x 4 float32 per vector x 4
   * vectors per trip: the unrolled repeat trips run above ~4.3M); the fake has no grid. */
  const size_t big = (1u << 24) + 5;
  /* RR_TEST_SMALL (tests/gpu/run.sh's memcheck): the fake's sizes, for a slow tool. */
  const size_t max = g_fake || getenv("RR_TEST_SMALL") ? 100003 : big, cap = (max + 16) * 8;
  kbufs k = {.ha = malloc(cap), .hb = malloc(cap), .ref = malloc(cap), .got = malloc(cap)};
  T_CHECK(k.ha && k.hb && k.ref && k.got, "host memory");
  C_OK(malloc((void **)&k.da, cap));
  C_OK(malloc((void **)&k.db, cap));
  C_OK(malloc((void **)&k.dd, cap));
  C_OK(malloc((void **)&k.dd2, cap));
  const size_t counts[] = {0, 1, 7, 16, 33, 4096, 100003, (1u << 20) + 3, big};
  /* Element offsets (a, b, dst): all aligned, all shifted, and each one alone. */
  const size_t offs[][3] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  int cases = 0;
  for (int d = 0; d < RR_NUM_DTYPES; d++) {
    size_t es = rr_dtype_size((rr_dtype)d);
    /* Raw random bits: NaNs with payloads, infinities, subnormals, every integer. */
    for (size_t i = 0; i < max * es; i++) {
      k.ha[i] = (char)t_bits(1, 1, i);
      k.hb[i] = (char)t_bits(1, 2, i);
    }
    for (int op = 0; op < RR_NUM_OPS; op++) {
      if (rr__op_check((rr_dtype)d, (rr_op)op) != RR_OK) continue;
      /* AVG by 0 (the sum) and 3 at every count; then the world sizes 2..8, 12 and 1000003
       * (the integer kernels' magic multipliers, non-powers of two among them) at two counts,
       * each with its vector path and scalar tail. */
      int divs[] = {0, 3, 2, 4, 5, 6, 7, 8, 12, 1000003};
      int ndivs = op == RR_AVG ? (int)(sizeof divs / sizeof divs[0]) : 1;
      for (int v = 0; v < ndivs; v++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
          if (counts[c] > max) continue;
          if (v >= 2 && counts[c] != 33 && counts[c] != 100003 && counts[c] != big) continue;
          /* The largest count: a few pairs only (it is about the grid, not the ops; the
           * 32-bit-word forms of float16 / bfloat16 and int8 AVG in the unrolled trips). */
          if (counts[c] == big &&
              !((d == RR_FLOAT32 && op == RR_SUM) || (d == RR_BFLOAT16 && op == RR_AVG && v == 1) ||
                (d == RR_INT64 && op == RR_BXOR) || (d == RR_FLOAT16 && op == RR_MAX) ||
                (d == RR_INT8 && op == RR_AVG && divs[v] == 7)))
            continue;
          for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++)
            for (int mode = 0; mode < 4; mode++) {
              if ((counts[c] == big || v >= 2) && (o > 1 || mode == 2)) continue;
              if (kernel_case((rr_dtype)d, (rr_op)op, divs[v], counts[c], offs[o][0], offs[o][1],
                              offs[o][2], mode, &k))
                return 1;
              cases++;
            }
        }
    }
  }
  C_OK(free(k.da));
  C_OK(free(k.db));
  C_OK(free(k.dd));
  C_OK(free(k.dd2));
  free(k.ha), free(k.hb), free(k.ref), free(k.got);
  printf("kernel: %d cases bit-identical to ring/op.c\n", cases);
  return 0;
}

/* ---- collectives on device buffers ---- */
typedef struct cargs {
  int world;
  const char *what;
  const char *store; /* threads: the file:// store the ranks of this process meet at */
} cargs;

static void *dalloc(size_t bytes) {
  void *p = NULL;
  if (cu->malloc(&p, bytes ? bytes : 1) != 0) {
    fprintf(stderr, "rank %d: cudaMalloc(%zu) failed\n", t_rank, bytes);
    exit(3);
  }
  return p;
}

static int put(void *dev, const void *host, size_t bytes) {
  return cu_copy(dev, host, bytes);
}
static int get(void *host, const void *dev, size_t bytes) {
  return cu_copy(host, dev, bytes);
}

/* RR_TEST_EXPECT_IPC=1: every all_reduce of at least one element per rank must send through
 * CUDA IPC on this rank (transport/cuda_ipc.c counts the segments); 0: none may (staged). */
static int expect_ipc(void) {
  const char *e = getenv("RR_TEST_EXPECT_IPC");
  return e && *e ? atoi(e) : -1;
}

/* What this process moved device to device so far: segments through CUDA IPC handed over by
 * the host, or by stream memory operations (transport/cuda_ipc.c). The other paths' checks
 * (RR_TEST_EXPECT_IPC) count either. */
static uint64_t dev_moved(void) {
  return rr__ipc_segments() + rr__mop_segments();
}

/* RR_TEST_EXPECT_MEMOPS=1: every all_reduce of at least one element per rank,
 * reduce_scatter and all_gather through CUDA IPC must hand segments over by stream memory
 * operations on this rank; 0: none may (the host hand-off: RR_CUDA_MEMOPS=0, or a device
 * without them). */
static int expect_memops(void) {
  const char *e = getenv("RR_TEST_EXPECT_MEMOPS");
  return e && *e ? atoi(e) : -1;
}
static int check_memops(uint64_t before, int should, const char *what) {
  uint64_t got = rr__mop_segments() - before;
  if (expect_memops() == 1 && should)
    T_CHECK(got > 0, "%s: no segment went by stream memory operations", what);
  if (expect_memops() == 0)
    T_CHECK(got == 0, "%s: %llu segments went by stream memory operations", what,
            (unsigned long long)got);
  return 0;
}

/* RR_TEST_EXPECT_PIPED=1: every all_reduce above RR_SMALL_BYTES (its default, 64 KiB; smaller
 * ones take recursive doubling, staged) and every reduce_scatter / all_gather with elements
 * must hand segments to the device through the piped path (ring/pipe_dev.c counts them);
 * 0: none may. */
static int expect_piped(void) {
  const char *e = getenv("RR_TEST_EXPECT_PIPED");
  return e && *e ? atoi(e) : -1;
}
static int check_piped(uint64_t before, int should, const char *what) {
  uint64_t got = rr__piped_segments() - before;
  if (expect_piped() == 1 && should)
    T_CHECK(got > 0, "%s: nothing went through the piped path", what);
  if (expect_piped() == 0)
    T_CHECK(got == 0, "%s: %llu segments went through the piped path", what,
            (unsigned long long)got);
  return 0;
}

#include "tests/test_cuda_kinds.h" /* gather, scatter, all_to_all(v): uses the helpers above */

static int all_reduce_case(rr_pg *pg, size_t count, rr_dtype d, rr_op op, int inplace,
                           uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  uint64_t ipc_before = dev_moved(), piped_before = rr__piped_segments();
  uint64_t mop_before = rr__mop_segments();
  size_t bytes = count * rr_dtype_size(d);
  char *h = malloc(bytes + 1), *src = dalloc(bytes), *dst = inplace ? src : dalloc(bytes);
  t_fill(h, count, d, op, seed, r, 0);
  T_CHECK(!put(src, h, bytes), "upload");
  if (!inplace) C_OK(memset_async(dst, 0xa5, bytes ? bytes : 1, NULL));
  T_OK(rr_all_reduce(pg, src, dst, count, d, op));
  T_CHECK(!get(h, dst, bytes), "download");
  char what[96];
  snprintf(what, sizeof what, "device all_reduce %s %s %s count %zu", rr_dtype_name(d),
           rr_op_name(op), inplace ? "in place" : "out of place", count);
  uint64_t ipc_sent = dev_moved() - ipc_before;
  if (expect_ipc() == 1 && n > 1 && count >= (size_t)n)
    T_CHECK(ipc_sent > 0, "%s: nothing went through CUDA IPC", what);
  if (expect_ipc() == 0)
    T_CHECK(ipc_sent == 0, "%s: %llu segments went through CUDA IPC", what,
            (unsigned long long)ipc_sent);
  if (check_piped(piped_before, n > 1 && count >= (size_t)n && bytes > (64u << 10), what)) return 1;
  if (check_memops(mop_before, n > 1 && count >= (size_t)n, what)) return 1;
  size_t wrong = t_check_reduced(h, count, d, op, seed, n, 0, what);
  if (!inplace) {
    T_CHECK(!get(h, src, bytes), "download");
    wrong += t_check_copied(h, count, d, op, seed, r, 0, "device all_reduce input (unchanged)");
    C_OK(free(dst));
  }
  C_OK(free(src));
  free(h);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

/* Rank 0's buffer in host memory, the others' on a device, one all_reduce in place: over
 * host lanes the device ranks are piped and rank 0 runs the host path, the same ring steps
 * with the same bytes on the wire (group/ipc.c), so the call works and is exact. */
static int mixed_case(rr_pg *pg, int rank, uint64_t seed) {
  int n = rr_get_world_size(pg);
  const size_t count = g_fake ? 100003 : 1000003, bytes = count * 4;
  const rr_dtype dts[2] = {RR_FLOAT32, RR_INT32};
  const rr_op ops[2] = {RR_SUM, RR_MAX};
  for (int k = 0; k < 2; k++) {
    char *h = malloc(bytes), *buf = rank == 0 ? malloc(bytes) : dalloc(bytes);
    T_CHECK(h && buf, "host memory");
    t_fill(h, count, dts[k], ops[k], seed, rank, 0);
    if (rank == 0)
      memcpy(buf, h, bytes);
    else
      T_CHECK(!put(buf, h, bytes), "upload");
    uint64_t before = rr__piped_segments();
    T_OK(rr_all_reduce(pg, buf, buf, count, dts[k], ops[k]));
    if (check_piped(before, rank != 0 && n > 1, "mixed all_reduce")) return 1;
    if (rank == 0)
      memcpy(h, buf, bytes);
    else
      T_CHECK(!get(h, buf, bytes), "download");
    size_t wrong = t_check_reduced(h, count, dts[k], ops[k], seed, n, 0, "mixed all_reduce");
    if (rank == 0)
      free(buf);
    else
      C_OK(free(buf));
    free(h);
    T_CHECK(!wrong, "mixed all_reduce %s: %zu wrong elements", rr_dtype_name(dts[k]), wrong);
  }
  return 0;
}

/* The other collectives, float32 (and int32 for the reductions), one count. */
/* "ipcseg": the segment sizes of the two kinds of call on one group (group/run.c). */
static int ipcseg_case(rr_pg *pg, uint64_t seed) {
  const rr__params *p = rr__params_get();
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  T_CHECK(n > 1 && p->ipc_seg_bytes > p->seg_bytes && p->ipc_seg_bytes % 4 == 0,
          "ipcseg needs world > 1 and RR_IPC_SEG_BYTES > RR_SEG_BYTES (got %lld and %lld)",
          (long long)p->ipc_seg_bytes, (long long)p->seg_bytes);
  /* Each rank's chunk is one IPC segment and several host ones: a ring all_reduce sends
   * one segment per step, n - 1 steps of reduce-scatter and n - 1 of all-gather. */
  size_t chunk = (size_t)p->ipc_seg_bytes / 4;
  uint64_t before = dev_moved();
  if (all_reduce_case(pg, chunk * (size_t)n, RR_FLOAT32, RR_SUM, 0, seed)) return 1;
  uint64_t sent = dev_moved() - before;
  T_CHECK(sent == 2 * (uint64_t)(n - 1),
          "all_reduce of %d chunks of %zu bytes: %llu segments through CUDA IPC, want %d "
          "(one per step: RR_IPC_SEG_BYTES=%lld, RR_SEG_BYTES=%lld)",
          n, chunk * 4, (unsigned long long)sent, 2 * (n - 1), (long long)p->ipc_seg_bytes,
          (long long)p->seg_bytes);
  /* Host buffers on the same lanes, between device calls: host-sized slots. */
  int32_t hin[1000], hout[1000];
  for (int i = 0; i < 1000; i++) hin[i] = (int32_t)(i * 7 + r);
  T_OK(rr_all_reduce(pg, hin, hout, 1000, RR_INT32, RR_SUM));
  for (int i = 0; i < 1000; i++)
    T_CHECK(hout[i] == (int32_t)(n * i * 7 + n * (n - 1) / 2), "host all_reduce [%d]: %d", i,
            hout[i]);
  /* Point to point on device buffers keeps the group's segments (its receiver could be a
   * host buffer): several of them, one message. */
  if (kinds_p2p(pg, 3 * (size_t)p->seg_bytes / 4 + 5, seed)) return 1;
  if (all_reduce_case(pg, chunk * (size_t)n + 3, RR_INT32, RR_MAX, 1, seed)) return 1;
  return 0;
}

static int others(rr_pg *pg, size_t count, uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t es = 4, blk = count * es, all = blk * (size_t)n;
  char *h = malloc(all + 4);
  char *big = dalloc(all), *small = dalloc(blk);
  for (int inplace = 0; inplace < 2; inplace++) {
    /* reduce_scatter */
    t_fill(h, count * (size_t)n, RR_FLOAT32, RR_SUM, seed, r, 0);
    T_CHECK(!put(big, h, all), "upload");
    char *rs_out = inplace ? big + (size_t)r * blk : small;
    uint64_t rs_before = dev_moved(), rs_piped = rr__piped_segments();
    uint64_t rs_mop = rr__mop_segments();
    T_OK(rr_reduce_scatter(pg, big, rs_out, count, RR_FLOAT32, RR_SUM));
    if (check_memops(rs_mop, n > 1 && count > 0, "reduce_scatter")) return 1;
    if (check_piped(rs_piped, n > 1 && count > 0, "reduce_scatter")) return 1;
    uint64_t rs_sent = dev_moved() - rs_before;
    if (expect_ipc() == 1 && n > 1 && count > 0)
      T_CHECK(rs_sent > 0, "reduce_scatter: nothing went through CUDA IPC");
    if (expect_ipc() == 0) T_CHECK(rs_sent == 0, "reduce_scatter: sent through CUDA IPC");
    T_CHECK(!get(h, rs_out, blk), "download");
    T_CHECK(!t_check_reduced(h, count, RR_FLOAT32, RR_SUM, seed, n, (size_t)r * count,
                             "device reduce_scatter"),
            "reduce_scatter");
    /* all_gather */
    t_fill(h, count, RR_INT32, RR_SUM, seed, r, 0);
    char *ag_in = inplace ? big + (size_t)r * blk : small;
    T_CHECK(!put(ag_in, h, blk), "upload");
    uint64_t ipc_before = dev_moved(), ag_piped = rr__piped_segments();
    uint64_t ag_mop = rr__mop_segments();
    T_OK(rr_all_gather(pg, ag_in, big, count, RR_INT32));
    if (check_memops(ag_mop, n > 1 && count > 0, "all_gather")) return 1;
    if (check_piped(ag_piped, n > 1 && count > 0, "all_gather")) return 1;
    uint64_t ipc_sent = dev_moved() - ipc_before;
    if (expect_ipc() == 1 && n > 1 && count > 0)
      T_CHECK(ipc_sent > 0, "all_gather: nothing went through CUDA IPC");
    if (expect_ipc() == 0) T_CHECK(ipc_sent == 0, "all_gather: sent through CUDA IPC");
    T_CHECK(!get(h, big, all), "download");
    for (int q = 0; q < n; q++)
      T_CHECK(!t_check_copied(h + (size_t)q * blk, count, RR_INT32, RR_SUM, seed, q, 0,
                              "device all_gather"),
              "all_gather block %d", q);
    /* broadcast from the last rank, and reduce to it */
    int root = n - 1;
    t_fill(h, count, RR_FLOAT32, RR_SUM, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    uint64_t bc_before = dev_moved();
    T_OK(rr_broadcast(pg, small, inplace ? small : big, count, RR_FLOAT32, root));
    uint64_t bc_sent = dev_moved() - bc_before;
    /* Every rank of the chain but its tail (the root's left neighbour) sends. */
    if (expect_ipc() == 1 && n > 1 && count > 0 && r != (root + n - 1) % n)
      T_CHECK(bc_sent > 0, "broadcast: nothing went through CUDA IPC");
    if (expect_ipc() == 0) T_CHECK(bc_sent == 0, "broadcast: sent through CUDA IPC");
    T_CHECK(!get(h, inplace ? small : big, blk), "download");
    T_CHECK(!t_check_copied(h, count, RR_FLOAT32, RR_SUM, seed, root, 0, "device broadcast"),
            "broadcast");
    t_fill(h, count, RR_INT32, RR_MAX, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    uint64_t rd_before = dev_moved();
    T_OK(rr_reduce(pg, small, inplace ? small : big, count, RR_INT32, RR_MAX, root));
    /* Every rank of the chain but the root sends. */
    if (kinds_ipc(rd_before, n > 1 && count > 0 && r != root, "reduce")) return 1;
    if (r == root) {
      T_CHECK(!get(h, inplace ? small : big, blk), "download");
      T_CHECK(!t_check_reduced(h, count, RR_INT32, RR_MAX, seed, n, 0, "device reduce"), "reduce");
    }
  }
  /* sendrecv around the ring, host buffer one way and device buffer the other */
  if (n > 1) {
    t_fill(h, count, RR_FLOAT32, RR_SUM, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    char *hrecv = malloc(blk + 4);
    T_OK(rr_sendrecv(pg, small, count, (r + 1) % n, hrecv, count, (r + n - 1) % n, RR_FLOAT32));
    T_CHECK(!t_check_copied(hrecv, count, RR_FLOAT32, RR_SUM, seed, (r + n - 1) % n, 0,
                            "sendrecv device->host"),
            "sendrecv");
    free(hrecv);
  }
  T_OK(rr_barrier(pg));
  C_OK(free(big));
  C_OK(free(small));
  free(h);
  return 0;
}

/* Expected int32 element after every rank q memset its bytes to q + 1 + iter. */
static int32_t memset_sum(int world, int iter) {
  int32_t want = 0;
  for (int q = 0; q < world; q++) {
    uint8_t b = (uint8_t)(q + 1 + iter);
    want = (int32_t)((uint32_t)want + (uint32_t)b * 0x01010101u);
  }
  return want;
}

/* Async all-reduce ordered on a user stream (device buffer), or a blocking one on a managed
 * buffer: a slow chain of copies, then the write the call must see, all on the stream. */
static int stream_case(rr_pg *pg, int rank, int world, int managed) {
  void *s;
  C_OK(stream_create(&s, 1));
  T_OK(rr_pg_set_cuda_stream(pg, s));
  const size_t count = g_fake ? 1u << 18 : 1u << 22, bytes = count * 4;
  const size_t slow = g_fake ? 4u << 20 : 256u << 20;
  char *buf, *x = dalloc(slow), *y = dalloc(slow);
  if (managed)
    C_OK(malloc_managed((void **)&buf, bytes));
  else
    buf = dalloc(bytes);
  int32_t *h = malloc(bytes);
  /* More rounds on the fake: each is a draw of its random delays. */
  for (int iter = 0; iter < (g_fake ? 8 : 3); iter++) {
    C_OK(memset_async(buf, 0, bytes, s));
    /* Work that takes a while, then the write the call must see. */
    for (int k = 0; k < 8; k++) C_OK(memcpy_async(y, x, slow, s));
    C_OK(memset_async(buf, rank + 1 + iter, bytes, s));
    if (managed) {
      /* Blocking: returns with the result in the buffer; the host reads it directly. */
      T_OK(rr_all_reduce(pg, buf, buf, count, RR_INT32, RR_SUM));
      memcpy(h, buf, bytes);
    } else if (iter % 2 == 0) {
      rr_work *w;
      T_OK(rr_all_reduce_async(pg, buf, buf, count, RR_INT32, RR_SUM, &w));
      T_OK(rr_work_wait(w, 0));
      rr_work_free(w);
      /* Read after: on the same stream. */
      C_OK(memcpy_async(h, buf, bytes, s));
      C_OK(stream_sync(s));
    } else {
      /* Completion seen by rr_work_test, no rr_work_wait: the result is in the buffer, for
       * a read on any stream (here the legacy one, not ordered with the call's). */
      rr_work *w;
      T_OK(rr_all_reduce_async(pg, buf, buf, count, RR_INT32, RR_SUM, &w));
      int st;
      while ((st = rr_work_test(w)) == RR_INPROGRESS) usleep(100);
      T_OK(st);
      rr_work_free(w);
      T_CHECK(!cu_copy(h, buf, bytes), "download");
    }
    int32_t want = memset_sum(world, iter);
    for (size_t i = 0; i < count; i++)
      T_CHECK(h[i] == want,
              "%s iteration %d element %zu: %d, want %d (the call did not see "
              "the stream's write)",
              managed ? "managed" : "device", iter, i, h[i], want);
  }
  T_OK(rr_pg_set_cuda_stream(pg, NULL));
  C_OK(free(buf));
  C_OK(free(x));
  C_OK(free(y));
  C_OK(stream_destroy(s));
  free(h);
  return 0;
}

/* An async call waits for its stream's work queued before it, not after it (an event, not a
 * stream synchronisation), and the stream's work queued after rr_work_wait sees the result.
 * After the call the stream waits for a gate that a second stream records behind a long
 * chain (fake: 40 operations of RR_FAKE_CUDA_DELAY_US = 50 ms; GPU: 3000 copies of 512
 * MiB, about 1 s): when rr_work_wait returns the gate must still be pending (the call did
 * not synchronise the whole stream). */
static int nosync_case(rr_pg *pg, int rank, int world, int managed) {
  void *s, *s2, *gate;
  C_OK(stream_create(&s, 1));
  C_OK(stream_create(&s2, 1));
  C_OK(event_create(&gate, RR__CUDA_EVENT_DISABLE_TIMING));
  T_OK(rr_pg_set_cuda_stream(pg, s));
  const size_t count = 1u << 16, bytes = count * 4;
  const size_t slow = g_fake ? 4u << 20 : 512u << 20;
  const int chain = g_fake ? 40 : 3000;
  char *buf = NULL, *x = dalloc(slow), *y = dalloc(slow);
  if (managed)
    C_OK(malloc_managed((void **)&buf, bytes));
  else
    buf = dalloc(bytes);
  int32_t *h = malloc(bytes);
  for (int iter = 0; iter < 2; iter++) {
    C_OK(memset_async(buf, rank + 1 + iter, bytes, s));
    rr_work *w;
    T_OK(rr_all_reduce_async(pg, buf, buf, count, RR_INT32, RR_SUM, &w));
    for (int k = 0; k < chain; k++) C_OK(memcpy_async(y, x, slow, s2));
    C_OK(event_record(gate, s2));
    C_OK(stream_wait_event(s, gate)); /* work after the call that waits a long time */
    T_OK(rr_work_wait(w, 0));
    rr_work_free(w);
    int q = cu->event_query(gate);
    T_CHECK(q == RR__CUDA_ERR_NOT_READY,
            "iteration %d: the gate behind the call was already passed (query %d): the call "
            "synchronised its whole stream instead of waiting for an event",
            iter, q);
    C_OK(memcpy_async(h, buf, bytes, s));
    C_OK(stream_sync(s));
    int32_t want = memset_sum(world, iter);
    for (size_t i = 0; i < count; i++)
      T_CHECK(h[i] == want, "iteration %d element %zu: %d, want %d", iter, i, h[i], want);
    T_OK(rr_barrier(pg));
  }
  T_OK(rr_pg_set_cuda_stream(pg, NULL));
  C_OK(free(buf));
  C_OK(free(x));
  C_OK(free(y));
  C_OK(event_destroy(gate));
  C_OK(stream_destroy(s));
  C_OK(stream_destroy(s2));
  free(h);
  return 0;
}

/* Rank 0 calls on a stream that is capturing a graph (relaxed mode), the others on an
 * ordinary one. Rank 0's call must be refused before it queues anything (so its capture
 * ends without work of the library joined into it), and the others' must fail naming rank
 * 0, not complete on data that rank 0's captured copies never produced. */
static int capture_case(rr_pg *pg, int rank) {
  void *s;
  C_OK(stream_create(&s, 1));
  const size_t count = 4096, bytes = count * 4;
  char *buf = dalloc(bytes);
  C_OK(memset_async(buf, rank + 1, bytes, s));
  C_OK(stream_sync(s));
  T_OK(rr_pg_set_cuda_stream(pg, s));
  if (rank == 0) C_OK(stream_begin_capture(s));
  int st = rr_all_reduce(pg, buf, buf, count, RR_INT32, RR_SUM);
  if (rank == 0) {
    int e = cu->stream_end_capture(s);
    T_CHECK(st == RR_EINVAL, "a call on a capturing stream: %s: %s", rr_status_name(st),
            rr_last_error());
    T_HAS(rr_last_error(), "capturing a CUDA graph");
    T_HAS(rr_last_error(), "rank 0");
    T_CHECK(e == 0, "the user's capture was broken by the call: cudaStreamEndCapture: %s",
            cu->error_name(e));
  } else {
    T_CHECK(st != RR_OK, "rank %d's call completed although rank 0's was refused", rank);
    T_HAS(rr_last_error(), "rank 0");
  }
  T_OK(rr_pg_set_cuda_stream(pg, NULL));
  C_OK(free(buf));
  C_OK(stream_destroy(s));
  return 0;
}

static int coll_rank(int rank, void *arg) {
  const cargs *ca = arg;
  t_rank = rank;
  rr_pg *pg;
  if (ca->store) {
    char url[512];
    snprintf(url, sizeof url, "file://%s?rank=%d&world_size=%d", ca->store, rank, ca->world);
    rr_pg_options opt;
    rr_pg_options_init(&opt);
    opt.init_method = url;
    T_OK(rr_init_process_group(&pg, &opt));
  } else {
    T_OK(rr_init_process_group(&pg, NULL));
  }
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  uint64_t seed = t_seed();
  if (!strcmp(ca->what, "coll")) {
    if (kinds_p2p_first(pg, 196613, seed)) return 1;
    const size_t counts[] = {0, 1, 7, g_fake || getenv("RR_TEST_SMALL") ? 100003 : 1000003};
    /* Lean: the sanitizer stages and the transport variants (tests/cuda.cmake); harness.h
     * says what stays. */
    const int lean = t_lean();
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      for (int d = 0; d < RR_NUM_DTYPES; d++) {
        if (lean && !t_lean_dtype((rr_dtype)d)) continue;
        rr_op ops[RR_NUM_OPS];
        const int nops = t_valid_ops((rr_dtype)d, ops);
        for (int oi = 0; oi < nops; oi++) {
          const int big = counts[c] > 1000;
          /* The largest count: every dtype, two ops each (rotating), as test_coll. */
          if (big && (int)ops[oi] % 4 != d % 4) continue;
          /* Lean, the small counts: sum and one more, rotating with the count. */
          if (lean && !big && oi != 0 && oi != 1 + (int)((c + (size_t)d) % (size_t)(nops - 1)))
            continue;
          for (int inplace = 0; inplace < 2; inplace++)
            if (all_reduce_case(pg, counts[c], (rr_dtype)d, ops[oi], inplace, seed)) return 1;
        }
      }
    if (others(pg, 7, seed) || others(pg, 100003, seed)) return 1;
    if (kinds_linear(pg, 7, seed) || kinds_linear(pg, 100003, seed)) return 1;
    if (kinds_p2p(pg, 7, seed) || kinds_p2p(pg, 196613, seed)) return 1;
  } else if (!strcmp(ca->what, "mixed")) {
    if (mixed_case(pg, rank, seed)) return 1;
  } else if (!strcmp(ca->what, "ipcseg")) {
    if (ipcseg_case(pg, seed)) return 1;
  } else if (!strcmp(ca->what, "large")) {
    if (all_reduce_case(pg, (64u << 20) / 4, RR_FLOAT32, RR_SUM, 0, seed)) return 1;
    if (all_reduce_case(pg, (64u << 20) / 4, RR_INT32, RR_SUM, 1, seed)) return 1;
  } else if (!strcmp(ca->what, "stream")) {
    if (stream_case(pg, rank, ca->world, 0)) return 1;
  } else if (!strcmp(ca->what, "nosync")) {
    if (nosync_case(pg, rank, ca->world, 0)) return 1;
  } else if (!strcmp(ca->what, "nosync_managed")) {
    if (nosync_case(pg, rank, ca->world, 1)) return 1;
  } else if (!strcmp(ca->what, "managed")) {
    if (stream_case(pg, rank, ca->world, 1)) return 1;
  } else if (!strcmp(ca->what, "ptrfail")) {
    const size_t count = 4096;
    char *buf = dalloc(count * 4);
    int st = rr_all_reduce(pg, buf, buf, count, RR_INT32, RR_SUM);
    T_CHECK(st == RR_ECUDA, "pointer attributes failed, yet the call: %s: %s", rr_status_name(st),
            rr_last_error());
    T_HAS(rr_last_error(), "cannot tell whether");
    T_HAS(rr_last_error(), "sendbuf");
    C_OK(free(buf));
    (void)rr_destroy_process_group(pg); /* returns the group's failure, which is expected */
    return 0;
  } else if (!strcmp(ca->what, "capture")) {
    if (capture_case(pg, rank)) return 1;
    (void)rr_destroy_process_group(pg); /* returns the group's failure, which is expected */
    return 0;
  } else if (!strcmp(ca->what, "perthread")) {
    int st = rr_pg_set_cuda_stream(pg, RR__CUDA_STREAM_PER_THREAD);
    T_CHECK(st == RR_EINVAL, "cudaStreamPerThread: %s", rr_status_name(st));
    T_HAS(rr_last_error(), "cudaStreamPerThread");
    T_OK(rr_pg_set_cuda_stream(pg, RR__CUDA_STREAM_LEGACY));
    if (all_reduce_case(pg, 1000, RR_FLOAT32, RR_SUM, 0, seed)) return 1;
    T_OK(rr_pg_set_cuda_stream(pg, NULL));
  }
  /* RR_IPC_EPOCH0 near 2^32 (coll_wrap_w2): the flag words' epochs must have crossed the wrap,
   * i.e. more than RR_SLOTS x (2^32 - epoch0) segments sent on a lane (world 2: one lane). */
  const rr__params *pp = rr__params_get();
  if (pp->ipc_epoch0 > 0 && ca->world == 2) {
    const uint64_t need = (uint64_t)pp->slots * ((1ull << 32) - (uint64_t)pp->ipc_epoch0);
    T_CHECK(rr__mop_segments() > need,
            "%llu segments by stream memory operations: the epochs never wrapped (need > %llu)",
            (unsigned long long)rr__mop_segments(), (unsigned long long)need);
  }
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---- contexts ---- */

/* Every device's primary context is inactive (on a GPU whose driver cannot tell, -1, the
 * check is skipped; the fake always tells). */
static int no_context(const char *when) {
  for (int d = 0; d < rr__cuda_device_count(); d++) {
    int a = rr__cuda_primary_ctx_active(d);
    T_CHECK(a == 0 || (a == -1 && !g_fake), "%s: device %d: primary context state %d", when, d, a);
  }
  return 0;
}

static int noctx_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float x[64], y[64];
  for (int i = 0; i < 64; i++) x[i] = (float)i;
  T_OK(rr_all_reduce(pg, x, y, 64, RR_FLOAT32, RR_SUM));
  rr_work *w;
  T_OK(rr_all_reduce_async(pg, x, y, 64, RR_FLOAT32, RR_SUM, &w));
  T_OK(rr_work_wait(w, 0));
  rr_work_free(w);
  T_CHECK(rr__cuda_available(), "CUDA was not even looked at");
  if (no_context("after host-memory collectives")) return 1;
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

static int workerctx_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  C_OK(set_device(1));
  void *buf = dalloc(4096);
  C_OK(memset_async(buf, 1, 4096, NULL));
  for (int i = 0; i < 3; i++) {
    rr_work *w;
    T_OK(rr_all_reduce_async(pg, buf, buf, 1024, RR_INT32, RR_SUM, &w));
    T_OK(rr_work_wait(w, 0));
    rr_work_free(w);
  }
  int a0 = rr__cuda_primary_ctx_active(0);
  T_CHECK(a0 == 0 || (a0 == -1 && !g_fake),
          "an async call on a buffer of device 1 created a context on device 0");
  C_OK(free(buf));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---- device1: every CUDA call made for a call runs on the call's device ---- */

/* The calls' waits run on a thread that never chose a device (torch's futures thread). */
static const char *const d1_names[] = {
    "device buffer, NULL stream, rr_work_wait on another thread",
    "device buffer, user stream, rr_work_wait on another thread",
    "device buffer, NULL stream, rr_work_test on another thread",
    "managed buffer, NULL stream, rr_work_wait on another thread"};

typedef struct d1wait {
  rr_work *w;
  int test;
} d1wait;

static int d1_waiter(void *p) {
  const d1wait *x = p;
  int st;
  if (x->test)
    while ((st = rr_work_test(x->w)) == RR_INPROGRESS) usleep(200);
  else
    st = rr_work_wait(x->w, 120000); /* bounded: never runs the call on this thread */
  if (st != RR_OK) T_FAIL("%s: %s", x->test ? "rr_work_test" : "rr_work_wait", rr_last_error());
  rr_work_free(x->w); /* the call's events are destroyed here */
  return 0;
}

/* Destroy the group on a thread of its own, which never chose a device (as a garbage
 * collector or a watchdog might): the frees of the group's device memory, pinned memory,
 * streams and events must go to their devices, not create a context on device 0. */
static int d1_destroyer(void *p) {
  if (rr_destroy_process_group(p) != RR_OK) T_FAIL("rr_destroy_process_group: %s", rr_last_error());
  return 0;
}

/* Device 0 has no context and no legacy-stream wait crossed devices (the fake says which
 * call on which thread made a context; a GPU's driver does not). */
static int d1_no_device0(const char *what, int it) {
  char why[256] = "";
  if (g_fake) {
    int c = rr_fake_cuda_legacy_cross(why, sizeof why);
    T_CHECK(c == 0, "%s, round %d: %d stream waits on the wrong device's legacy stream: %s", what,
            it, c, why);
    rr_fake_cuda_ctx_origin(0, why, sizeof why);
  }
  int a0 = rr__cuda_primary_ctx_active(0);
  T_CHECK(a0 == 0 || (a0 == -1 && !g_fake),
          "%s, round %d: a call on buffers of device 1 created a context on device 0: %s", what, it,
          why);
  return 0;
}

static int device1_rank(int rank, void *arg) {
  const int v = *(const int *)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  const int world = rr_get_world_size(pg);
  C_OK(set_device(1));
  const size_t n = 1u << 16, bytes = n * sizeof(int32_t);
  void *s = NULL, *buf = NULL;
  if (v == 1) C_OK(stream_create(&s, 0)); /* a blocking stream of device 1 */
  T_OK(rr_pg_set_cuda_stream(pg, s));
  if (v == 3)
    C_OK(malloc_managed(&buf, bytes));
  else
    buf = dalloc(bytes);
  /* Two host buffers: the upload reads `up` when the stream gets to it, which on the CUDA IPC
   * path can be after the call completed on the host (the fake's copies are asynchronous
   * from any memory); `up` is written again only after the stream passed the read below. */
  int32_t *up = malloc(bytes), *h = malloc(bytes);
  T_CHECK(up && h, "host memory");
  for (int it = 0; it < 3; it++) {
    for (size_t i = 0; i < n; i++) up[i] = (int32_t)((size_t)rank + (size_t)it + i % 1000);
    C_OK(memcpy_async(buf, up, bytes, s)); /* the call is ordered after it */
    rr_work *w;
    const uint64_t ipc_before = dev_moved();
    T_OK(rr_all_reduce_async(pg, buf, buf, n, RR_INT32, RR_SUM, &w));
    d1wait x = {w, v == 2};
    t_thread th;
    T_CHECK(!t_thread_start(&th, d1_waiter, &x), "starting the waiting thread");
    T_CHECK(!t_thread_join(&th), "%s: the waiting thread failed", d1_names[v]);
    if (d1_no_device0(d1_names[v], it)) return 1;
    if (expect_ipc() == 1 && v != 3)
      T_CHECK(dev_moved() > ipc_before, "%s: nothing went through CUDA IPC", d1_names[v]);
    /* The call's stream (device 1's legacy stream for NULL) sees the result. */
    memset(h, 0, bytes);
    C_OK(memcpy_async(h, buf, bytes, s));
    C_OK(stream_sync(s));
    for (size_t i = 0; i < n; i++) {
      const int32_t want = (int32_t)((size_t)world * ((size_t)it + i % 1000) +
                                     (size_t)world * (size_t)(world - 1) / 2);
      T_CHECK(h[i] == want, "%s, round %d: element %zu is %d, not %d", d1_names[v], it, i,
              (int)h[i], (int)want);
    }
  }
  free(up);
  free(h);
  C_OK(free(buf));
  if (s) C_OK(stream_destroy(s));
  t_thread th;
  T_CHECK(!t_thread_start(&th, d1_destroyer, pg), "starting the destroying thread");
  T_CHECK(!t_thread_join(&th), "%s: destroying the group failed", d1_names[v]);
  return d1_no_device0(d1_names[v], 3);
}

/* ---- rr_pg_options.device ---- */

static int pgdevice_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  int n = rr__cuda_device_count(), want = n - 1, cur = -1;
  rr_pg *pg = NULL;
  rr_pg_options opt = RR_PG_OPTIONS_INIT;
  opt.device = n; /* one past the last */
  int st = rr_init_process_group(&pg, &opt);
  T_CHECK(st == RR_EINVAL, "device %d of %d: %s", n, n, rr_status_name(st));
  T_HAS(rr_last_error(), "rr_pg_options.device");
  opt.device = want;
  T_OK(rr_init_process_group(&pg, &opt));
  C_OK(get_device(&cur));
  T_CHECK(cur == want, "rr_pg_options.device = %d, but device %d is current", want, cur);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---- ipc ---- */

static int ipc_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  C_OK(set_device(0));
  const size_t n = 1u << 16;
  rr__cuda_ipc_handle hm, he;
  memset(&hm, 0, sizeof hm), memset(&he, 0, sizeof he);
  void *mem = NULL, *ev = NULL, *s = NULL;
  C_OK(stream_create(&s, 1));
  if (rank == 0) {
    mem = dalloc(n);
    C_OK(memset_async(mem, 0x11, n, NULL));
    C_OK(stream_sync(NULL));
    C_OK(ipc_get_mem_handle(&hm, mem));
    void *p = NULL;
    int e = cu->ipc_open_mem_handle(&p, &hm);
    T_CHECK(e != 0, "a memory handle opened in the process that exported it");
    cu->clear_error();
    /* Interprocess events need DisableTiming; only they give handles. */
    void *bad = NULL;
    e = cu->event_create(&bad, RR__CUDA_EVENT_INTERPROCESS);
    T_CHECK(e != 0, "an interprocess event with timing was created");
    cu->clear_error();
    C_OK(event_create(&bad, RR__CUDA_EVENT_DISABLE_TIMING));
    e = cu->ipc_get_event_handle(&he, bad);
    T_CHECK(e != 0, "an IPC handle for an event without cudaEventInterprocess");
    cu->clear_error();
    C_OK(event_destroy(bad));
    C_OK(event_create(&ev, RR__CUDA_EVENT_INTERPROCESS | RR__CUDA_EVENT_DISABLE_TIMING));
    C_OK(ipc_get_event_handle(&he, ev));
  }
  T_OK(rr_broadcast(pg, &hm, &hm, sizeof hm, RR_UINT8, 0));
  T_OK(rr_broadcast(pg, &he, &he, sizeof he, RR_UINT8, 0));
  char *h = malloc(n);
  if (rank == 1) {
    void *p1 = NULL, *p2 = NULL;
    C_OK(ipc_open_mem_handle(&p1, &hm));
    C_OK(ipc_open_mem_handle(&p2, &hm));
    T_CHECK(p1 == p2, "one handle opened twice: %p and %p", p1, p2);
    int d = -1;
    T_CHECK(rr__cuda_ptr_device(p1, &d) && d == 0, "an IPC-mapped pointer is device memory");
    C_OK(memcpy_async(h, p1, n, s));
    C_OK(stream_sync(s));
    for (size_t i = 0; i < n; i++) T_CHECK(h[i] == 0x11, "byte %zu through IPC: 0x%x", i, h[i]);
    C_OK(ipc_close_mem_handle(p1));
    /* Still mapped: one reference left. */
    C_OK(memset_async(p2, 0x22, n, s));
    C_OK(stream_sync(s));
    C_OK(ipc_close_mem_handle(p2));
    void *rev = NULL;
    C_OK(ipc_open_event_handle(&rev, &he));
    T_OK(rr_barrier(pg)); /* rank 0 records the event after this */
    T_OK(rr_barrier(pg)); /* ... and has recorded it */
    /* The stream waits for rank 0's memset behind a slow chain, then reads. */
    C_OK(stream_wait_event(s, rev));
    void *p3 = NULL;
    C_OK(ipc_open_mem_handle(&p3, &hm));
    C_OK(memcpy_async(h, p3, n, s));
    C_OK(stream_sync(s));
    for (size_t i = 0; i < n; i++)
      T_CHECK(h[i] == 0x33, "byte %zu after waiting for the other process's event: 0x%x", i, h[i]);
    C_OK(ipc_close_mem_handle(p3));
    C_OK(event_destroy(rev));
  } else if (rank == 0) {
    T_OK(rr_barrier(pg));
    void *x = dalloc(8u << 20), *y = dalloc(8u << 20);
    for (int k = 0; k < 4; k++) C_OK(memcpy_async(y, x, 8u << 20, s));
    C_OK(memset_async(mem, 0x33, n, s));
    C_OK(event_record(ev, s));
    T_OK(rr_barrier(pg));
    C_OK(stream_sync(s));
    C_OK(free(x));
    C_OK(free(y));
  }
  T_OK(rr_barrier(pg)); /* rank 1 is done with the memory */
  if (rank == 0) {
    C_OK(event_destroy(ev));
    C_OK(free(mem));
  }
  C_OK(stream_destroy(s));
  free(h);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* The device count, asked in a forked child (the parent stays free of CUDA). */
static int devices_forked(void) {
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) _exit(rr__cuda_device_count());
  int status = 0;
  waitpid(p, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

/* "threads W": the coll matrix with the W ranks as threads of one process (CUDA IPC then
 * uses the peers' pointers: a process cannot open its own handles). In a child, so that
 * the parent stays free of CUDA. */
typedef struct targ {
  int rank;
  cargs *ca;
} targ;
static int thread_rank(void *p) {
  const targ *t = p;
  return coll_rank(t->rank, t->ca);
}
static int threads(int world) {
  if (world < 1 || world > 8) return 2;
  char store[] = "/tmp/rr_cuda_threads_XXXXXX";
  int fd = mkstemp(store);
  if (fd < 0) return 1;
  close(fd);
  unlink(store);
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    cargs ca = {world, "coll", store};
    t_thread th[8];
    targ ta[8];
    int rc = 0;
    for (int r = 0; r < world; r++) {
      ta[r] = (targ){r, &ca};
      if (t_thread_start(&th[r], thread_rank, &ta[r])) _exit(1);
    }
    for (int r = 0; r < world; r++) rc |= t_thread_join(&th[r]);
    fflush(NULL);
    _exit(rc);
  }
  int status = 0;
  waitpid(p, &status, 0);
  unlink(store);
  int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  printf("threads w%d: %s\n", world, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

static int spawn(int world, int (*fn)(int, void *), void *arg) {
  rr_spawn_status st;
  if (rr_spawn(world, fn, arg, &st) != RR_OK) {
    fprintf(stderr, "%s\n", rr_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  g_fake = cu_setup(&argc, &argv);
  const char *what = argc > 1 ? argv[1] : "kernel";
  if (!rr__cuda_built() && !g_fake)
    return skip("this build has no CUDA: configure with -DRR_CUDA=ON, or run with --fake");
  if (!have_device_forked()) return skip("the CUDA runtime found no usable driver or GPU");
  if (g_fake) printf("CUDA table: %s\n", cu->name);
  if (!strcmp(what, "ptr") || !strcmp(what, "kernel")) {
    /* In a child: the parent stays free of CUDA. */
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
      int rc = !strcmp(what, "ptr") ? test_ptr() : test_kernel();
      fflush(NULL);
      _exit(rc);
    }
    int status = 0;
    waitpid(p, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  t_seed_announce(what);
  if (!strcmp(what, "noctx")) {
    if (spawn(1, noctx_rank, NULL)) return 1;
    printf("noctx: ok\n");
    return 0;
  }
  if (!strcmp(what, "workerctx")) {
    if (devices_forked() < 2) return skip("this test needs two CUDA devices");
    if (spawn(1, workerctx_rank, NULL)) return 1;
    printf("workerctx: ok\n");
    return 0;
  }
  if (!strcmp(what, "device1")) {
    if (devices_forked() < 2) return skip("this test needs two CUDA devices");
    int world = argc > 2 ? atoi(argv[2]) : 2, only = argc > 3 ? atoi(argv[3]) : -1;
    for (int v = 0; v < (int)(sizeof d1_names / sizeof d1_names[0]); v++) {
      if (only >= 0 && v != only) continue;
      if (spawn(world, device1_rank, &v)) return 1;
      printf("device1 w%d: %s: ok\n", world, d1_names[v]);
    }
    return 0;
  }
  if (!strcmp(what, "pgdevice")) {
    if (spawn(1, pgdevice_rank, NULL)) return 1;
    printf("pgdevice: ok\n");
    return 0;
  }
  if (!strcmp(what, "ipc")) {
    if (spawn(2, ipc_rank, NULL)) return 1;
    printf("ipc: ok\n");
    return 0;
  }
  cargs ca = {argc > 2 ? atoi(argv[2]) : 2, what, NULL};
  if (!strcmp(what, "threads")) return threads(ca.world);
  if (!strcmp(what, "ptrfail") && (!g_fake || !getenv("RR_FAKE_CUDA_PTR_FAIL")))
    return skip("ptrfail injects its failure through the fake (--fake, RR_FAKE_CUDA_PTR_FAIL=1)");
  if (!strcmp(what, "perthread")) ca.world = 1;
  if (ca.world < 1 ||
      (strcmp(what, "coll") && strcmp(what, "large") && strcmp(what, "stream") &&
       strcmp(what, "nosync") && strcmp(what, "managed") && strcmp(what, "perthread") &&
       strcmp(what, "capture") && strcmp(what, "ptrfail") && strcmp(what, "nosync_managed") &&
       strcmp(what, "mixed") && strcmp(what, "ipcseg"))) {
    fprintf(stderr,
            "usage: test_cuda [--fake] ptr|kernel|noctx|workerctx|pgdevice|ipc|perthread|"
            "device1 W|coll W|large W|stream W|nosync W|nosync_managed W|managed W|capture W|"
            "ptrfail W|mixed W|ipcseg W\n");
    return 2;
  }
  if (spawn(ca.world, coll_rank, &ca)) return 1;
  printf("%s w%d: ok\n", what, ca.world);
  return 0;
}
