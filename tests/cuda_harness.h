/* What the CUDA tests share. They make their own CUDA calls (allocations, uploads, user
 * streams) through the library's CUDA table (cuda/api.h), so one test binary runs on the
 * real runtime (a GPU) and, given --fake as its first argument, on the host fake
 * (tests/fake_cuda/), which CI runs on every machine. A checked call, the choice of table,
 * and asking whether a device is usable without initialising CUDA in the test process
 * itself (ranks are forked afterwards, and a forked child cannot use its parent's CUDA). */
#ifndef RR__TESTS_CUDA_HARNESS_H
#define RR__TESTS_CUDA_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/api.h"
#include "cuda/cuda.h"
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/harness.h"

/* The table this test calls: the library's (real runtime or fake, the same one). */
static const rr__cuda_api *cu;

#define C_OK(call)                                                                       \
  do {                                                                                   \
    int e_ = cu->call;                                                                   \
    if (e_ != 0) T_FAIL("%s: %s (%s)", #call, cu->error_string(e_), cu->error_name(e_)); \
  } while (0)

/* Fake devices: 2, so that a buffer can live on a device other than 0. */
#define CU_FAKE_DEVICES 2

/* Pick the table: with "--fake" as argv[1] (removed from argv) the fake is installed, with
 * RR_TEST_FAKE_DEVICES devices (default CU_FAKE_DEVICES; 1 puts every rank on one GPU). */
static inline int cu_setup(int *argc, char ***argv) {
  if (*argc > 1 && !strcmp((*argv)[1], "--fake")) {
    const char *nd = getenv("RR_TEST_FAKE_DEVICES");
    int ndev = nd && atoi(nd) > 0 ? atoi(nd) : CU_FAKE_DEVICES;
    if (rr_fake_cuda_install(ndev) != RR_OK) {
      fprintf(stderr, "%s\n", rr_last_error());
      exit(1);
    }
    cu = rr_fake_cuda(ndev);
    (*argv)[1] = (*argv)[0];
    (*argv)++;
    (*argc)--;
    return 1;
  }
  cu = rr__cuda_real_api();
  return 0;
}

/* 1 when a CUDA device can be used; the question is asked in a forked child. */
static inline int have_device_forked(void) {
  if (!cu) return 0;
  fflush(NULL);
  pid_t p = fork();
  if (p < 0) return 0;
  if (p == 0) _exit(rr__cuda_available() ? 0 : 1);
  int status = 0;
  if (waitpid(p, &status, 0) != p) return 0;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Synchronous helpers: a copy on the legacy stream, waited for. */
static inline int cu_copy(void *dst, const void *src, size_t bytes) {
  int e = cu->memcpy_async(dst, src, bytes, NULL);
  return e ? e : cu->stream_sync(NULL);
}
static inline int cu_set(void *dst, int v, size_t bytes) {
  int e = cu->memset_async(dst, v, bytes, NULL);
  return e ? e : cu->stream_sync(NULL);
}

#endif
