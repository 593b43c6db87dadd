/* test_op: the AVX2/F16C loops against the portable ones bit for bit (the "paths" section),
 * and `bench`, which times them (not run by ctest). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tests/test_op.h"

/* ---------------------------------------------------------------------------------------------
 * paths: the AVX2/F16C loops against the portable ones, bit for bit (NaN payloads too).
 */

int test_paths(void) {
  if (!rr__op_force_portable(0)) {
    printf("SKIP: this CPU has no AVX2+F16C path; only the portable loops exist\n");
    return 77;
  }
  const size_t n = 65536 + 13; /* every 16-bit pattern, and a tail */
  for (int d = 0; d < RR_NUM_DTYPES; d++) {
    rr_dtype dt = (rr_dtype)d;
    size_t es = k_dtype_sizes[dt];
    bufs bf;
    bufs_init(&bf, dt, n);
    if (es == 2)
      for (size_t i = 0; i < 65536; i++) ((uint16_t *)bf.A)[i + 1] = (uint16_t)i;
    uint8_t *portable = t_alloc((n + 1) * es);
    for (int op = 0; op < RR_NUM_OPS; op++) {
      if (rr__op_check(dt, (rr_op)op) != RR_OK) continue;
      for (size_t di = 0; di < (op == RR_AVG ? RR__ARRAY_SIZE(k_divs) : 1); di++)
        for (int swap = 0; swap < 2; swap++) {
          int div = op == RR_AVG ? k_divs[di] : 0;
          const uint8_t *a = (swap ? bf.B : bf.A) + es, *b = (swap ? bf.A : bf.B) + es;
          rr__op_force_portable(1);
          rr__reduce(portable, a, b, n, dt, (rr_op)op, div);
          rr__op_force_portable(0);
          rr__reduce(bf.wd, a, b, n, dt, (rr_op)op, div);
          memcpy(bf.wa, a, n * es); /* and in place */
          rr__reduce(bf.wa, bf.wa, b, n, dt, (rr_op)op, div);
          for (size_t i = 0; i < n; i++) {
            g_checks++;
            if (memcmp(bf.wd + i * es, portable + i * es, es) != 0 ||
                memcmp(bf.wa + i * es, portable + i * es, es) != 0) {
              char sa[64], sb[64], sf[64], sp[64];
              hex_elem(sa, sizeof sa, dt, a + i * es), hex_elem(sb, sizeof sb, dt, b + i * es);
              hex_elem(sf, sizeof sf, dt, bf.wd + i * es);
              hex_elem(sp, sizeof sp, dt, portable + i * es);
              CHECK(0, "paths differ: %s %s div=%d [%zu]: a=%s b=%s fast %s portable %s",
                    k_dtype_names[dt], k_op_names[op], div, i, sa, sb, sf, sp);
              break;
            }
          }
        }
    }
    for (size_t di = 0; di < RR__ARRAY_SIZE(k_divs); di++) {
      memcpy(portable, bf.A, n * es);
      memcpy(bf.wa, bf.A, n * es);
      rr__op_force_portable(1);
      rr__avg_scale(portable, n, dt, k_divs[di]);
      rr__op_force_portable(0);
      rr__avg_scale(bf.wa, n, dt, k_divs[di]);
      CHECK(memcmp(portable, bf.wa, n * es) == 0, "avg_scale paths differ: %s div=%d",
            k_dtype_names[dt], k_divs[di]);
    }
    free(portable);
    bufs_free(&bf);
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * bench: GB/s of dst written, against memcpy of the same size. Not a test.
 */

/* GB/s of dst written by `inner` back-to-back calls, best of `rounds` after a warm-up.
 * dt == RR_NUM_DTYPES times memcpy instead. */
static double best_gbps(size_t bytes, rr_dtype dt, void *d, const void *a, const void *b, int inner,
                        int rounds) {
  int64_t best = INT64_MAX;
  for (int r = 0; r <= rounds; r++) {
    int64_t t0 = rr__now_ns();
    for (int k = 0; k < inner; k++) {
      if (dt == RR_NUM_DTYPES)
        memcpy(d, a, bytes);
      else
        rr__reduce(d, a, b, bytes / k_dtype_sizes[dt], dt, RR_SUM, 0);
    }
    int64_t t = rr__now_ns() - t0;
    if (r > 0 && t < best) best = t;
  }
  return (double)bytes * inner / (double)best;
}

/* Values as in training: normal numbers of assorted magnitudes, no NaN, no subnormals
 * (those take microcode assists on some CPUs, a different measurement). */
static void fill_like_gradients(rr_dtype dt, uint8_t *p, size_t bytes) {
  size_t n = bytes / k_dtype_sizes[dt];
  for (size_t i = 0; i < n; i++) {
    double v = ldexp((double)(rnd32() | 1u) / 4294967296.0, -(int)rnd_below(12));
    if (rnd() & 1) v = -v;
    switch (dt) {
      case RR_FLOAT16:
        ((uint16_t *)p)[i] = ref_f2h((float)v);
        break;
      case RR_BFLOAT16:
        ((uint16_t *)p)[i] = ref_f2bf((float)v);
        break;
      case RR_FLOAT32:
        ((float *)p)[i] = (float)v;
        break;
      case RR_FLOAT64:
        ((double *)p)[i] = v;
        break;
      default:
        put_int(dt, p + i * k_dtype_sizes[dt], rnd());
        break;
    }
  }
}

void bench(void) {
  const size_t big = 64u << 20, small = 256u << 10; /* small: a segment-sized block, in cache */
  uint8_t *a = t_alloc(big), *b = t_alloc(big), *d = t_alloc(big);
  memset(d, 1, big);
  int fast = rr__op_force_portable(0);
  printf("SUM, GB/s of dst written, best of 10 (fast path: %s)\n", fast ? "avx2+f16c" : "none");
  printf("                      64MiB new  64MiB dst==a  256KiB dst==a\n");
  printf("  memcpy              %8.2f  %12s  %13.2f\n",
         best_gbps(big, RR_NUM_DTYPES, d, a, b, 1, 10), "",
         best_gbps(small, RR_NUM_DTYPES, d, a, b, 256, 10));
  rr_dtype dts[] = {RR_FLOAT32, RR_FLOAT16, RR_BFLOAT16, RR_INT32, RR_FLOAT64, RR_INT8};
  for (int p = 0; p < (fast ? 2 : 1); p++) {
    rr__op_force_portable(p);
    for (size_t i = 0; i < RR__ARRAY_SIZE(dts); i++) {
      fill_like_gradients(dts[i], a, big);
      fill_like_gradients(dts[i], b, big);
      printf("  %-8s %-9s  %8.2f  %12.2f  %13.2f\n", k_dtype_names[dts[i]], p ? "portable" : "",
             best_gbps(big, dts[i], d, a, b, 1, 10), best_gbps(big, dts[i], a, a, b, 1, 10),
             best_gbps(small, dts[i], a, a, b, 256, 10));
    }
  }
  rr__op_force_portable(0);
  free(a), free(b), free(d);
}
