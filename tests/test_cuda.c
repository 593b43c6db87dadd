/* CUDA tests: they need a GPU, and without one (or in a build without CUDA) print
 * "skipped: no CUDA device" and exit 77, which CTest reports as skipped.
 *
 *   test_cuda ptr                  pointer detection: malloc, pinned, managed, device, NULL
 *   test_cuda kernel               every dtype x op through cuda/reduce.cu (aligned, scalar
 *                                  tail, misaligned, in place, fused second destination)
 *                                  against ring/op.c, bit for bit
 *   test_cuda coll <world>         every collective on device buffers, every dtype x op for
 *                                  all_reduce, in and out of place, counts 0, 1, 7, 1000003,
 *                                  checked against the harness's float64 / exact reference
 *                                  (tolerance: harness.h, t_eps); all ranks share GPU 0
 *                                  when there is one GPU (LOCAL_RANK modulo device count)
 *   test_cuda large <world>        64 MiB float32 sum all_reduce on device buffers
 *   test_cuda stream <world>       async all_reduce ordered on a user stream: a slow chain
 *                                  of copies and then a memset write the buffer on the
 *                                  stream before the call; the result is read after wait
 *
 * CUDA must not be initialised before fork (rr_spawn), so the parent asks a child whether
 * there is a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "ring/op.h"
#include "tests/harness.h"

#define SKIP 77

static int skip(const char *why) {
  printf("skipped: no CUDA device (%s)\n", why);
  return SKIP;
}

#ifndef RR_HAVE_CUDA
int main(int argc, char **argv) {
  (void)argc, (void)argv;
  return skip("this build has no CUDA: configure with -DRR_CUDA=ON");
}
#else
#include "tests/cuda_harness.h"

/* ---- ptr ---- */
static int test_ptr(void) {
  void *h = malloc(64), *pinned = NULL, *dev = NULL, *man = NULL;
  C_OK(cudaMallocHost(&pinned, 64));
  C_OK(cudaMalloc(&dev, 64));
  C_OK(cudaMallocManaged(&man, 64, cudaMemAttachGlobal));
  int d = -2;
  T_CHECK(!rr__cuda_is_device_ptr(NULL), "NULL");
  T_CHECK(!rr__cuda_is_device_ptr(h), "malloc'd memory taken for device memory");
  T_CHECK(!rr__cuda_is_device_ptr(pinned), "pinned host memory taken for device memory");
  T_CHECK(!rr__cuda_is_device_ptr(man), "managed memory must be used as host memory");
  T_CHECK(rr__cuda_ptr_device(dev, &d) == 1 && d == 0, "cudaMalloc'd memory: got device %d", d);
  T_CHECK(rr__cuda_ptr_device((char *)dev + 17, &d) == 1, "an interior device pointer");
  T_CHECK(cudaGetLastError() == cudaSuccess, "detection left a CUDA error behind");
  free(h);
  cudaFreeHost(pinned);
  cudaFree(dev);
  cudaFree(man);
  printf("ptr: ok\n");
  return 0;
}

/* ---- kernel ---- */
static int kernel_case(rr_dtype d, rr_op op, int div, size_t n, size_t off, int inplace,
                       int fused, char *ha, char *hb, char *ref, char *got, char *da, char *db,
                       char *dd, char *dd2) {
  size_t es = rr_dtype_size(d), bytes = n * es;
  C_OK(cudaMemcpy(da + off * es, ha, bytes, cudaMemcpyHostToDevice));
  C_OK(cudaMemcpy(db + off * es, hb, bytes, cudaMemcpyHostToDevice));
  rr__reduce(ref, ha, hb, n, d, op, div);
  char *dst = inplace ? da + off * es : dd + off * es;
  char *dst2 = fused ? dd2 + off * es : NULL;
  T_OK(rr__cuda_reduce(dst, dst2, da + off * es, db + off * es, n, d, op, div, NULL));
  C_OK(cudaDeviceSynchronize());
  for (int k = 0; k < 1 + fused; k++) {
    C_OK(cudaMemcpy(got, k ? dst2 : dst, bytes, cudaMemcpyDeviceToHost));
    if (memcmp(got, ref, bytes) != 0) {
      size_t i = 0;
      while (memcmp(got + i * es, ref + i * es, es) == 0) i++;
      uint64_t g = 0, r = 0;
      memcpy(&g, got + i * es, es);
      memcpy(&r, ref + i * es, es);
      T_FAIL("%s %s div %d n %zu offset %zu%s%s: element %zu is 0x%llx on the GPU, 0x%llx in "
             "op.c",
             rr_dtype_name(d), rr_op_name(op), div, n, off, inplace ? " in place" : "",
             k ? " (second destination)" : "", i, (unsigned long long)g, (unsigned long long)r);
    }
  }
  return 0;
}

static int test_kernel(void) {
  const size_t max = (1u << 20) + 3, cap = (max + 16) * 8;
  char *ha = malloc(cap), *hb = malloc(cap), *ref = malloc(cap), *got = malloc(cap);
  char *da, *db, *dd, *dd2;
  C_OK(cudaMalloc((void **)&da, cap));
  C_OK(cudaMalloc((void **)&db, cap));
  C_OK(cudaMalloc((void **)&dd, cap));
  C_OK(cudaMalloc((void **)&dd2, cap));
  const size_t counts[] = {0, 1, 7, 16, 33, 4096, 100003, (1u << 20) + 3};
  int cases = 0;
  for (int d = 0; d < RR_NUM_DTYPES; d++) {
    size_t es = rr_dtype_size((rr_dtype)d);
    /* Raw random bits: NaNs with payloads, infinities, subnormals, every integer. */
    for (size_t i = 0; i < max * es; i++) {
      ha[i] = (char)t_bits(1, 1, i);
      hb[i] = (char)t_bits(1, 2, i);
    }
    for (int op = 0; op < RR_NUM_OPS; op++) {
      if (rr__op_check((rr_dtype)d, (rr_op)op) != RR_OK) continue;
      int divs[] = {0, 3};
      for (int k = 0; k < (op == RR_AVG ? 2 : 1); k++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
          for (size_t off = 0; off < 2; off++) /* offset 1: misaligned, all scalar */
            for (int v = 0; v < 3; v++) {      /* out of place, in place, fused */
              if (kernel_case((rr_dtype)d, (rr_op)op, divs[k], counts[c], off, v == 1, v == 2, ha,
                              hb, ref, got, da, db, dd, dd2))
                return 1;
              cases++;
            }
    }
  }
  cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(dd2);
  free(ha), free(hb), free(ref), free(got);
  printf("kernel: %d cases bit-identical to ring/op.c\n", cases);
  return 0;
}

/* ---- collectives on device buffers ---- */
typedef struct cargs {
  int world;
  const char *what;
} cargs;

static void *dalloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    fprintf(stderr, "rank %d: cudaMalloc(%zu) failed\n", t_rank, bytes);
    exit(3);
  }
  return p;
}

static int put(void *dev, const void *host, size_t bytes) {
  return cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : 1;
}
static int get(void *host, const void *dev, size_t bytes) {
  return cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : 1;
}

static int all_reduce_case(rr_pg *pg, size_t count, rr_dtype d, rr_op op, int inplace,
                           uint64_t seed) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t bytes = count * rr_dtype_size(d);
  char *h = malloc(bytes + 1), *src = dalloc(bytes), *dst = inplace ? src : dalloc(bytes);
  t_fill(h, count, d, op, seed, r, 0);
  T_CHECK(!put(src, h, bytes), "upload");
  if (!inplace) C_OK(cudaMemset(dst, 0xa5, bytes ? bytes : 1));
  T_OK(rr_all_reduce(pg, src, dst, count, d, op));
  T_CHECK(!get(h, dst, bytes), "download");
  char what[96];
  snprintf(what, sizeof what, "device all_reduce %s %s %s count %zu", rr_dtype_name(d),
           rr_op_name(op), inplace ? "in place" : "out of place", count);
  size_t wrong = t_check_reduced(h, count, d, op, seed, n, 0, what);
  if (!inplace) {
    T_CHECK(!get(h, src, bytes), "download");
    wrong += t_check_copied(h, count, d, op, seed, r, 0, "device all_reduce input (unchanged)");
    cudaFree(dst);
  }
  cudaFree(src);
  free(h);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

/* The other collectives, float32 (and int32 for the reductions), one count. */
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
    T_OK(rr_reduce_scatter(pg, big, rs_out, count, RR_FLOAT32, RR_SUM));
    T_CHECK(!get(h, rs_out, blk), "download");
    T_CHECK(!t_check_reduced(h, count, RR_FLOAT32, RR_SUM, seed, n, (size_t)r * count,
                             "device reduce_scatter"), "reduce_scatter");
    /* all_gather */
    t_fill(h, count, RR_INT32, RR_SUM, seed, r, 0);
    char *ag_in = inplace ? big + (size_t)r * blk : small;
    T_CHECK(!put(ag_in, h, blk), "upload");
    T_OK(rr_all_gather(pg, ag_in, big, count, RR_INT32));
    T_CHECK(!get(h, big, all), "download");
    for (int q = 0; q < n; q++)
      T_CHECK(!t_check_copied(h + (size_t)q * blk, count, RR_INT32, RR_SUM, seed, q, 0,
                              "device all_gather"), "all_gather block %d", q);
    /* broadcast from the last rank, and reduce to it */
    int root = n - 1;
    t_fill(h, count, RR_FLOAT32, RR_SUM, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    T_OK(rr_broadcast(pg, small, inplace ? small : big, count, RR_FLOAT32, root));
    T_CHECK(!get(h, inplace ? small : big, blk), "download");
    T_CHECK(!t_check_copied(h, count, RR_FLOAT32, RR_SUM, seed, root, 0, "device broadcast"),
            "broadcast");
    t_fill(h, count, RR_INT32, RR_MAX, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    T_OK(rr_reduce(pg, small, inplace ? small : big, count, RR_INT32, RR_MAX, root));
    if (r == root) {
      T_CHECK(!get(h, inplace ? small : big, blk), "download");
      T_CHECK(!t_check_reduced(h, count, RR_INT32, RR_MAX, seed, n, 0, "device reduce"),
              "reduce");
    }
  }
  /* sendrecv around the ring, host buffer one way and device buffer the other */
  if (n > 1) {
    t_fill(h, count, RR_FLOAT32, RR_SUM, seed, r, 0);
    T_CHECK(!put(small, h, blk), "upload");
    char *hrecv = malloc(blk + 4);
    T_OK(rr_sendrecv(pg, small, count, (r + 1) % n, hrecv, count, (r + n - 1) % n, RR_FLOAT32));
    T_CHECK(!t_check_copied(hrecv, count, RR_FLOAT32, RR_SUM, seed, (r + n - 1) % n, 0,
                            "sendrecv device->host"), "sendrecv");
    free(hrecv);
  }
  T_OK(rr_barrier(pg));
  cudaFree(big), cudaFree(small);
  free(h);
  return 0;
}

static int coll_rank(int rank, void *arg) {
  const cargs *ca = arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(cudaSetDevice(dev));
  uint64_t seed = t_seed();
  if (!strcmp(ca->what, "coll")) {
    const size_t counts[] = {0, 1, 7, 1000003};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      for (int d = 0; d < RR_NUM_DTYPES; d++)
        for (int op = 0; op < RR_NUM_OPS; op++) {
          if (t_is_float((rr_dtype)d) && op >= RR_BAND) continue;
          /* The million-element count: every dtype, two ops each (rotating), as test_coll. */
          if (counts[c] > 1000 && op % 4 != (d % 4)) continue;
          for (int inplace = 0; inplace < 2; inplace++)
            if (all_reduce_case(pg, counts[c], (rr_dtype)d, (rr_op)op, inplace, seed)) return 1;
        }
    if (others(pg, 7, seed) || others(pg, 100003, seed)) return 1;
  } else if (!strcmp(ca->what, "large")) {
    if (all_reduce_case(pg, (64u << 20) / 4, RR_FLOAT32, RR_SUM, 0, seed)) return 1;
    if (all_reduce_case(pg, (64u << 20) / 4, RR_INT32, RR_SUM, 1, seed)) return 1;
  } else { /* stream */
    cudaStream_t s;
    C_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    T_OK(rr_pg_set_cuda_stream(pg, s));
    const size_t count = 1u << 22, bytes = count * 4, slow = 256u << 20;
    char *buf = dalloc(bytes), *x = dalloc(slow), *y = dalloc(slow);
    int32_t *h = malloc(bytes);
    for (int iter = 0; iter < 3; iter++) {
      C_OK(cudaMemsetAsync(buf, 0, bytes, s));
      /* Work that takes a while, then the write the call must see. */
      for (int k = 0; k < 8; k++) C_OK(cudaMemcpyAsync(y, x, slow, cudaMemcpyDeviceToDevice, s));
      C_OK(cudaMemsetAsync(buf, rank + 1 + iter, bytes, s));
      rr_work *w;
      T_OK(rr_all_reduce_async(pg, buf, buf, count, RR_INT32, RR_SUM, &w));
      T_OK(rr_work_wait(w, 0));
      rr_work_free(w);
      /* Read after: on the same stream. */
      C_OK(cudaMemcpyAsync(h, buf, bytes, cudaMemcpyDeviceToHost, s));
      C_OK(cudaStreamSynchronize(s));
      int32_t want = 0;
      for (int q = 0; q < ca->world; q++) {
        uint8_t b = (uint8_t)(q + 1 + iter);
        want = (int32_t)((uint32_t)want + (uint32_t)b * 0x01010101u);
      }
      for (size_t i = 0; i < count; i++)
        T_CHECK(h[i] == want, "iteration %d element %zu: %d, want %d (the call did not see "
                "the stream's write)", iter, i, h[i], want);
    }
    cudaFree(buf), cudaFree(x), cudaFree(y);
    cudaStreamDestroy(s);
    free(h);
  }
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "kernel";
  if (!have_device_forked()) return skip("the CUDA runtime found no usable driver or GPU");
  if (!strcmp(what, "ptr")) return test_ptr();
  if (!strcmp(what, "kernel")) return test_kernel();
  cargs ca = {argc > 2 ? atoi(argv[2]) : 2, what};
  if (ca.world < 1 || (strcmp(what, "coll") && strcmp(what, "large") && strcmp(what, "stream"))) {
    fprintf(stderr, "usage: test_cuda ptr|kernel|coll W|large W|stream W\n");
    return 2;
  }
  t_seed_announce(what);
  rr_spawn_status st;
  int rc = rr_spawn(ca.world, coll_rank, &ca, &st);
  if (rc != RR_OK) {
    fprintf(stderr, "%s\n", rr_last_error());
    return 1;
  }
  printf("%s w%d: ok\n", what, ca.world);
  return 0;
}
#endif
