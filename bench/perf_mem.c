/*
 * Where the *_perf buffers live (--mem host|cuda). Host memory is malloc; CUDA memory is
 * cudaMalloc on the device LOCAL_RANK modulo the device count. Built without CUDA
 * (RR_HAVE_CUDA undefined) there is no device and --mem cuda is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

#ifdef RR_HAVE_CUDA
#include <cuda_runtime_api.h>

int perf_mem_cuda_devices(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

int perf_mem_select(int local_rank, char *err, size_t cap) {
  int n = perf_mem_cuda_devices();
  if (n <= 0) return snprintf(err, cap, "no CUDA device"), -1;
  int dev = local_rank > 0 ? local_rank % n : 0;
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) return snprintf(err, cap, "cudaSetDevice: %s", cudaGetErrorString(e)), -1;
  return dev;
}

void *perf_mem_alloc(int cuda, size_t bytes) {
  if (!cuda) return malloc(bytes);
  void *p = NULL;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return p;
}

void perf_mem_free(int cuda, void *p) {
  if (!cuda)
    free(p);
  else if (p)
    cudaFree(p);
}

int perf_mem_copy(int cuda, void *dst, const void *src, size_t bytes) {
  if (!cuda) {
    memmove(dst, src, bytes);
    return 0;
  }
  if (bytes == 0) return 0;
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) == cudaSuccess ? 0 : -1;
}
#else
int perf_mem_cuda_devices(void) {
  return 0;
}
int perf_mem_select(int local_rank, char *err, size_t cap) {
  (void)local_rank;
  snprintf(err, cap, "this build has no CUDA support (configure with -DRR_CUDA=ON)");
  return -1;
}
void *perf_mem_alloc(int cuda, size_t bytes) {
  return cuda ? NULL : malloc(bytes);
}
void perf_mem_free(int cuda, void *p) {
  if (!cuda) free(p);
}
int perf_mem_copy(int cuda, void *dst, const void *src, size_t bytes) {
  if (cuda) return -1;
  memmove(dst, src, bytes);
  return 0;
}
#endif
