/* The CUDA kernels' element functions (cuda/reduce_elem.cuh, the code cuda/reduce.cu runs on
 * the device) against the host reductions (ring/op.c), bit for bit, for every dtype x op,
 * AVG with several divisors, on random bit patterns (NaNs with payloads, infinities,
 * subnormals, signed zeros) and on values chosen to round to ties, through both of op.c's
 * paths (AVX2 and portable). Runs on any machine: the header is plain C as well as CUDA.
 *
 *   test_cuda_elem [elements per case, default 200000] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/reduce_elem.cuh"
#include "ring/op.h"
#include "tests/elem_fill.h"

static uint64_t g_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Element i of a case: random bits most of the time, else a special or an ordinary value,
 * so that NaN-free arithmetic (and its rounding) is well covered too. */
static void fill(void *buf, size_t n, rr_dtype d) {
  size_t es = rr_dtype_size(d);
  static const uint32_t f_special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                       0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x00000001u,
                                       0x007fffffu, 0x00800000u, 0x7f7fffffu, 0x3f800000u};
  static const uint64_t d_special[] = {0, 0x8000000000000000ull, 0x7ff0000000000000ull,
                                       0xfff0000000000000ull, 0x7ff8000000000000ull,
                                       0x7ff0000000000001ull, 0xfff8000000abcdefull, 1,
                                       0x000fffffffffffffull, 0x7fefffffffffffffull,
                                       0x3ff0000000000000ull};
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    unsigned kind = (unsigned)(r >> 60); /* 0..15 */
    char *p = (char *)buf + i * es;
    switch (d) {
      case RR_FLOAT16: {
        uint16_t v = t_elem_f16(r);
        memcpy(p, &v, 2);
        break;
      }
      case RR_BFLOAT16: {
        uint16_t v = t_elem_bf16(r);
        memcpy(p, &v, 2);
        break;
      }
      case RR_FLOAT32: {
        uint32_t v;
        if (kind < 8) v = (uint32_t)r;
        else if (kind < 10) v = f_special[(r >> 16) % (sizeof f_special / 4)];
        else {
          float f = (float)((int64_t)(r % 2000001) - 1000000) / 1024.0f;
          memcpy(&v, &f, 4);
        }
        memcpy(p, &v, 4);
        break;
      }
      case RR_FLOAT64: {
        uint64_t v;
        if (kind < 8) v = r;
        else if (kind < 10) v = d_special[(r >> 8) % (sizeof d_special / 8)];
        else {
          double f = (double)((int64_t)(r % 2000001) - 1000000) / 3.0;
          memcpy(&v, &f, 8);
        }
        memcpy(p, &v, 8);
        break;
      }
      default: /* integers: every bit pattern, and small values for AVG */
        if (kind >= 12) r %= 7;
        memcpy(p, &r, es);
    }
  }
}

/* dst = a op b through the device element functions, run on the host. */
#define ELEMS(T, tag, D)                                                         \
  {                                                                              \
    T *o = dst;                                                                  \
    const T *x = a, *y = b;                                                      \
    for (size_t i = 0; i < n; i++) switch (op) {                                 \
        case RR_SUM: o[i] = rre_##tag##_sum(x[i], y[i]); break;                  \
        case RR_PROD: o[i] = rre_##tag##_prod(x[i], y[i]); break;                \
        case RR_MIN: o[i] = rre_##tag##_min(x[i], y[i]); break;                  \
        case RR_MAX: o[i] = rre_##tag##_max(x[i], y[i]); break;                  \
        case RR_AVG:                                                             \
          o[i] = div > 1 ? rre_##tag##_avg(x[i], y[i], (D)div)                   \
                         : rre_##tag##_sum(x[i], y[i]);                          \
          break;                                                                 \
        default: o[i] = bitwise_##tag(x[i], y[i], op);                           \
      }                                                                          \
    return;                                                                      \
  }

#define BITWISE(tag, T)                                                          \
  static T bitwise_##tag(T x, T y, rr_op op) {                                   \
    return op == RR_BAND ? rre_##tag##_band(x, y)                                \
           : op == RR_BOR ? rre_##tag##_bor(x, y) : rre_##tag##_bxor(x, y);      \
  }
BITWISE(i8, int8_t)
BITWISE(u8, uint8_t)
BITWISE(i32, int32_t)
BITWISE(i64, int64_t)
/* Never called for floating types (bitwise ops are rejected); present so the macro is one. */
#define FLT_BITWISE(tag, T) \
  static T bitwise_##tag(T x, T y, rr_op op) { (void)y, (void)op; return x; }
FLT_BITWISE(f16, uint16_t)
FLT_BITWISE(bf16, uint16_t)
FLT_BITWISE(f32, float)
FLT_BITWISE(f64, double)

static void elem_reduce(void *dst, const void *a, const void *b, size_t n, rr_dtype d, rr_op op,
                        int div) {
  switch (d) {
    case RR_INT8: ELEMS(int8_t, i8, double)
    case RR_UINT8: ELEMS(uint8_t, u8, double)
    case RR_INT32: ELEMS(int32_t, i32, double)
    case RR_INT64: ELEMS(int64_t, i64, int64_t)
    case RR_FLOAT16: ELEMS(uint16_t, f16, float)
    case RR_BFLOAT16: ELEMS(uint16_t, bf16, float)
    case RR_FLOAT32: ELEMS(float, f32, float)
    case RR_FLOAT64: ELEMS(double, f64, double)
    default: abort();
  }
}

static void hex(char *out, size_t cap, const void *p, size_t es) {
  uint64_t v = 0;
  memcpy(&v, p, es);
  snprintf(out, cap, "0x%0*" PRIx64, (int)(es * 2), v);
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 200000;
  int paths = rr__op_force_portable(0) ? 2 : 1; /* AVX2 and portable, or portable only */
  int divs[] = {0, 1, 2, 3, 4, 7, 128};
  void *a = malloc(n * 8), *b = malloc(n * 8), *ref = malloc(n * 8), *got = malloc(n * 8);
  if (!a || !b || !ref || !got) return 1;
  long cases = 0, failures = 0;
  for (int path = 0; path < paths; path++) {
    rr__op_force_portable(path == 1 || paths == 1);
    for (int d = 0; d < RR_NUM_DTYPES; d++) {
      size_t es = rr_dtype_size((rr_dtype)d);
      fill(a, n, (rr_dtype)d);
      fill(b, n, (rr_dtype)d);
      for (int op = 0; op < RR_NUM_OPS; op++) {
        if (rr__op_check((rr_dtype)d, (rr_op)op) != RR_OK) continue;
        for (size_t k = 0; k < sizeof divs / sizeof divs[0]; k++) {
          int div = divs[k];
          if (op != RR_AVG && div != 0) continue;
          rr__reduce(ref, a, b, n, (rr_dtype)d, (rr_op)op, div);
          elem_reduce(got, a, b, n, (rr_dtype)d, (rr_op)op, div);
          cases++;
          if (memcmp(ref, got, n * es) == 0) continue;
          failures++;
          size_t i = 0;
          while (memcmp((char *)ref + i * es, (char *)got + i * es, es) == 0) i++;
          char x[24], y[24], r[24], g[24];
          hex(x, sizeof x, (char *)a + i * es, es);
          hex(y, sizeof y, (char *)b + i * es, es);
          hex(r, sizeof r, (char *)ref + i * es, es);
          hex(g, sizeof g, (char *)got + i * es, es);
          printf("FAIL %s %s div %d (%s path): element %zu: %s op %s = %s in op.c, %s in "
                 "reduce_elem.cuh\n",
                 rr_dtype_name((rr_dtype)d), rr_op_name((rr_op)op), div,
                 path == 0 && paths == 2 ? "avx2" : "portable", i, x, y, r, g);
        }
      }
    }
  }
  rr__op_force_portable(0);
  printf("%ld cases x %zu elements, %d op.c path(s): %ld mismatch(es)\n", cases, n, paths,
         failures);
  free(a), free(b), free(ref), free(got);
  return failures ? 1 : 0;
}
