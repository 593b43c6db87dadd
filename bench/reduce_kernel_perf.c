/*
 * reduce_kernel_perf: the CUDA reduction kernels (cuda/reduce.cu) against the device's own
 * copy speed, measured in the same run on the same buffers.
 *
 *   reduce_kernel_perf [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-d dtype|all]
 *                      [-o op|all] [--fused]
 *
 * For each size S (bytes of one operand): dst = a op b moves 3 S bytes (two reads, one
 * write; --fused writes a second destination too: 4 S), a device-to-device cudaMemcpy of S
 * bytes moves 2 S. Both are timed with CUDA events over -n back-to-back launches after a
 * warm-up; the columns are the time per call, the memory traffic per second (GB/s, 1e9)
 * and the kernel's traffic rate as a percentage of the copy's. Without a GPU (or in a build
 * without CUDA) it prints "skipped: no CUDA device" and exits 77.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "ring/op.h"

#ifndef RR_HAVE_CUDA
int main(void) {
  printf("skipped: no CUDA device (this build has no CUDA: configure with -DRR_CUDA=ON)\n");
  return 77;
}
#else
#include <cuda_runtime_api.h>

static size_t parse_size(const char *a) {
  char *end;
  double v = strtod(a, &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
  }
  return (size_t)v;
}

#define C_OK(call)                                                                    \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "reduce_kernel_perf: %s: %s\n", #call, cudaGetErrorString(e_)); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

int main(int argc, char **argv) {
  size_t minb = 1u << 20, maxb = 256u << 20, factor = 2;
  int iters = 50, fused = 0, all_d = 0, all_o = 0;
  rr_dtype dtype = RR_FLOAT32;
  rr_op op = RR_SUM;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--fused")) {
      fused = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "reduce_kernel_perf: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "-b"))
      minb = parse_size(v);
    else if (!strcmp(a, "-e"))
      maxb = parse_size(v);
    else if (!strcmp(a, "-f"))
      factor = (size_t)atoi(v);
    else if (!strcmp(a, "-n"))
      iters = atoi(v);
    else if (!strcmp(a, "-d")) {
      if (!(all_d = !strcmp(v, "all")) && rr_dtype_from_name(v, &dtype)) {
        fprintf(stderr, "%s\n", rr_last_error());
        return 2;
      }
    } else if (!strcmp(a, "-o")) {
      if (!(all_o = !strcmp(v, "all")) && rr_op_from_name(v, &op)) {
        fprintf(stderr, "%s\n", rr_last_error());
        return 2;
      }
    } else {
      fprintf(stderr,
              "usage: reduce_kernel_perf [-b N] [-e N] [-f F] [-n ITERS] [-d dtype|all] [-o "
              "op|all] [--fused]\n");
      return 2;
    }
  }
  if (factor < 2) factor = 2;
  if (iters < 1) iters = 1;
  if (!rr__cuda_available()) {
    printf("skipped: no CUDA device (the CUDA runtime found no usable driver or GPU)\n");
    return 77;
  }
  int dev = 0;
  C_OK(cudaGetDevice(&dev));
  struct cudaDeviceProp prop;
  C_OK(cudaGetDeviceProperties(&prop, dev));
  printf("# device %d: %s, %d SMs\n", dev, prop.name, prop.multiProcessorCount);
  char *a, *b, *d, *d2;
  C_OK(cudaMalloc((void **)&a, maxb));
  C_OK(cudaMalloc((void **)&b, maxb));
  C_OK(cudaMalloc((void **)&d, maxb));
  C_OK(cudaMalloc((void **)&d2, maxb));
  C_OK(cudaMemset(a, 0x3c, maxb));
  C_OK(cudaMemset(b, 0x3c, maxb));
  cudaEvent_t e0, e1;
  C_OK(cudaEventCreate(&e0));
  C_OK(cudaEventCreate(&e1));
  printf("# %12s %9s %5s %11s %10s %11s %10s %7s\n", "bytes", "dtype", "op", "kernel_us",
         "kernel_GBs", "memcpy_us", "memcpy_GBs", "ratio%");
  for (int di = 0; di < RR_NUM_DTYPES; di++) {
    rr_dtype dt = all_d ? (rr_dtype)di : dtype;
    if (!all_d && di) break;
    for (int oi = 0; oi < RR_NUM_OPS; oi++) {
      rr_op o = all_o ? (rr_op)oi : op;
      if (!all_o && oi) break;
      if (!rr__op_applies(dt, o)) continue;
      /* AVG's divisor: > 1, or the launcher runs the sum kernel (cuda-review 10). */
      const int div = o == RR_AVG ? 4 : 0;
      for (size_t s = minb; s <= maxb && s > 0; s *= factor) {
        size_t n = s / rr_dtype_size(dt);
        if (rr__cuda_reduce(d, fused ? d2 : NULL, a, b, n, dt, o, div, NULL) != RR_OK) {
          fprintf(stderr, "reduce_kernel_perf: %s\n", rr_last_error());
          return 1;
        }
        C_OK(cudaMemcpy(d, a, s, cudaMemcpyDeviceToDevice));
        C_OK(cudaEventRecord(e0, NULL));
        for (int i = 0; i < iters; i++)
          if (rr__cuda_reduce(d, fused ? d2 : NULL, a, b, n, dt, o, div, NULL) != RR_OK) {
            fprintf(stderr, "reduce_kernel_perf: %s\n", rr_last_error());
            return 1;
          }
        C_OK(cudaEventRecord(e1, NULL));
        C_OK(cudaEventSynchronize(e1));
        float kms = 0, cms = 0;
        C_OK(cudaEventElapsedTime(&kms, e0, e1));
        C_OK(cudaEventRecord(e0, NULL));
        for (int i = 0; i < iters; i++)
          C_OK(cudaMemcpyAsync(d, a, s, cudaMemcpyDeviceToDevice, NULL));
        C_OK(cudaEventRecord(e1, NULL));
        C_OK(cudaEventSynchronize(e1));
        C_OK(cudaEventElapsedTime(&cms, e0, e1));
        double kus = kms * 1e3 / iters, cus = cms * 1e3 / iters;
        double kgbs = (double)(fused ? 4 : 3) * (double)s / (kus * 1e3);
        double cgbs = 2.0 * (double)s / (cus * 1e3);
        printf("  %12zu %9s %5s %11.2f %10.1f %11.2f %10.1f %7.1f\n", s, rr_dtype_name(dt),
               rr_op_name(o), kus, kgbs, cus, cgbs, 100.0 * kgbs / cgbs);
      }
    }
  }
  cudaFree(a), cudaFree(b), cudaFree(d), cudaFree(d2);
  return 0;
}
#endif
