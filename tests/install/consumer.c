/*
 * consumer — a program that knows ringreduce only as an installed package. tests/test_install.sh
 * builds it out of the source tree against an install prefix (through find_package and through
 * pkg-config) and runs it under the installed rrun:
 *
 *   rrun --standalone --nproc-per-node 2 ./consumer
 *
 * Each rank checks that the library it loaded is the version of the header it was compiled
 * against, then all-reduces two buffers whose sums are exact: 1000 int64 values (small enough
 * for recursive doubling) and 40000 float32 values (160 KB, above RR_SMALL_BYTES: the ring).
 * Rank r contributes (r + 1) * (i % 1000 + 1) at element i. It prints
 *   "consumer rank R of W: version V, all_reduce ok"
 * and exits 0; any mismatch or error is reported on stderr with exit 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ringreduce/ringreduce.h>
#include <ringreduce/version.h>

enum { N_INT = 1000, N_FLOAT = 40000 };

static int check_version(void) {
  if (strcmp(rr_version(), RR_VERSION_STRING) != 0 || rr_version_num() != RR_VERSION_NUM) {
    fprintf(stderr, "consumer: header is %s (%d), library is %s (%d)\n", RR_VERSION_STRING,
            RR_VERSION_NUM, rr_version(), rr_version_num());
    return 1;
  }
  return 0;
}

int main(void) {
  if (check_version() != 0) return 1;
  rr_pg *pg;
  if (rr_init_process_group(&pg, NULL) != RR_OK) {
    fprintf(stderr, "consumer: rr_init_process_group: %s\n", rr_last_error());
    return 1;
  }
  int rank = rr_get_rank(pg), world = rr_get_world_size(pg);
  static int64_t iv[N_INT];
  static float fv[N_FLOAT];
  for (int i = 0; i < N_INT; i++) iv[i] = (int64_t)(rank + 1) * (i + 1);
  for (int i = 0; i < N_FLOAT; i++) fv[i] = (float)((rank + 1) * (i % 1000 + 1));
  if (rr_all_reduce(pg, iv, iv, N_INT, RR_INT64, RR_SUM) != RR_OK ||
      rr_all_reduce(pg, fv, fv, N_FLOAT, RR_FLOAT32, RR_SUM) != RR_OK) {
    fprintf(stderr, "consumer: rank %d: rr_all_reduce: %s\n", rank, rr_last_error());
    return 1;
  }
  /* Sum over ranks of (r + 1) is world * (world + 1) / 2: every value here is an integer far
   * below 2^24, so the float sums are exact in any order. */
  int64_t ranks = (int64_t)world * (world + 1) / 2;
  int wrong = 0;
  for (int i = 0; i < N_INT; i++) {
    if (iv[i] != ranks * (i + 1) && wrong++ < 5)
      fprintf(stderr, "consumer: rank %d: int64 element %d is %lld, expected %lld\n", rank, i,
              (long long)iv[i], (long long)(ranks * (i + 1)));
  }
  for (int i = 0; i < N_FLOAT; i++) {
    float want = (float)(ranks * (i % 1000 + 1));
    if (fv[i] != want && wrong++ < 10)
      fprintf(stderr, "consumer: rank %d: float element %d is %g, expected %g\n", rank, i,
              (double)fv[i], (double)want);
  }
  if (rr_destroy_process_group(pg) != RR_OK) {
    fprintf(stderr, "consumer: rank %d: rr_destroy_process_group: %s\n", rank, rr_last_error());
    return 1;
  }
  if (wrong) return 1;
  if (printf("consumer rank %d of %d: version %s, all_reduce ok\n", rank, world, rr_version()) <
          0 ||
      fflush(stdout) != 0)
    return 1;
  return 0;
}
