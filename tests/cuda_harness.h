/* What the GPU tests share (built only with RR_HAVE_CUDA): a checked CUDA call, and asking
 * whether a device is usable without initialising CUDA in the test process itself (ranks
 * are forked afterwards, and a forked child cannot use its parent's CUDA context). */
#ifndef RR__TESTS_CUDA_HARNESS_H
#define RR__TESTS_CUDA_HARNESS_H

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "cuda/cuda.h"
#include "tests/harness.h"

#define C_OK(call)                                                                       \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) T_FAIL("%s: %s", #call, cudaGetErrorString(e_));              \
  } while (0)

/* 1 when a CUDA device can be used; the question is asked in a forked child. */
static inline int have_device_forked(void) {
  fflush(NULL);
  pid_t p = fork();
  if (p < 0) return 0;
  if (p == 0) _exit(rr__cuda_available() ? 0 : 1);
  int status = 0;
  if (waitpid(p, &status, 0) != p) return 0;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

#endif
