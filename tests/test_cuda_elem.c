/* The CUDA kernels' element functions (cuda/reduce_elem.cuh, the code cuda/reduce.cu runs on
 * the device) against the host reductions (ring/op.c), bit for bit, for every dtype x op,
 * AVG with several divisors, on random bit patterns (NaNs with payloads, infinities,
 * subnormals, signed zeros) and on values chosen to round to ties, through both of op.c's
 * paths (AVX2 and portable). Two sets of functions are checked: the reference ones the host
 * fake runs (op.c's own divisions), and the ones the kernels run (integer AVG by a magic
 * multiplier, float16/bfloat16 and int8 AVG a 32-bit word at a time, as on 16-byte vectors).
 * Then the magic divisions alone, exhaustively: every 8-bit sum for every divisor 2..4096
 * and many larger ones, 32/64-bit edges and random values.
 *
 * Runs on any machine: the header is plain C as well as CUDA. tests/test_cuda_elem_conv.cu
 * compiles this same file with nvcc for the host, where the header takes the CUDA
 * conversions (cuda_fp16.h / cuda_bf16.h) the device uses, so it is C++-clean too.
 *
 *   test_cuda_elem [elements per case, default 200000] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/reduce_elem.cuh"
#ifdef __cplusplus
extern "C" { /* ring/op.c is C */
#endif
#include "ring/op.h"
#ifdef __cplusplus
}
#endif
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
  static const uint64_t d_special[] = {0,
                                       0x8000000000000000ull,
                                       0x7ff0000000000000ull,
                                       0xfff0000000000000ull,
                                       0x7ff8000000000000ull,
                                       0x7ff0000000000001ull,
                                       0xfff8000000abcdefull,
                                       1,
                                       0x000fffffffffffffull,
                                       0x7fefffffffffffffull,
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
        if (kind < 8)
          v = (uint32_t)r;
        else if (kind < 10)
          v = f_special[(r >> 16) % (sizeof f_special / 4)];
        else {
          float f = (float)((int64_t)(r % 2000001) - 1000000) / 1024.0f;
          memcpy(&v, &f, 4);
        }
        memcpy(p, &v, 4);
        break;
      }
      case RR_FLOAT64: {
        uint64_t v;
        if (kind < 8)
          v = r;
        else if (kind < 10)
          v = d_special[(r >> 8) % (sizeof d_special / 8)];
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

/* dst = a op b through the element functions, run on the host. kern 0: the reference
 * functions (the host fake's); kern 1: what the kernels run, AVG by rre_*_avgm and, where
 * the kernel has them, the 32-bit word forms for all whole words (WORD: elements per word,
 * 0 for none), the rest one element at a time as the kernels' scalar tail. */
#define ELEMS(T, tag, D, WORD, WEXPR)                          \
  {                                                            \
    T *o = (T *)dst;                                           \
    const T *x = (const T *)a, *y = (const T *)b;              \
    size_t i = 0, w_ = (size_t)(WORD);                         \
    if (kern && w_ && (op != RR_AVG || div > 1))               \
      for (; i + w_ <= n; i += w_) {                           \
        uint32_t xw, yw, rw;                                   \
        memcpy(&xw, x + i, 4);                                 \
        memcpy(&yw, y + i, 4);                                 \
        rw = WEXPR;                                            \
        memcpy(o + i, &rw, 4);                                 \
      }                                                        \
    for (; i < n; i++) switch (op) {                           \
        case RR_SUM:                                           \
          o[i] = rre_##tag##_sum(x[i], y[i]);                  \
          break;                                               \
        case RR_PROD:                                          \
          o[i] = rre_##tag##_prod(x[i], y[i]);                 \
          break;                                               \
        case RR_MIN:                                           \
          o[i] = rre_##tag##_min(x[i], y[i]);                  \
          break;                                               \
        case RR_MAX:                                           \
          o[i] = rre_##tag##_max(x[i], y[i]);                  \
          break;                                               \
        case RR_AVG:                                           \
          o[i] = div <= 1 ? rre_##tag##_sum(x[i], y[i])        \
                 : kern   ? avg_kern_##tag(x[i], y[i], div)    \
                          : rre_##tag##_avg(x[i], y[i], (D)div); \
          break;                                               \
        default:                                               \
          o[i] = bitwise_##tag(x[i], y[i], op);                \
      }                                                        \
    return;                                                    \
  }

/* AVG as the kernels do it: the integers by the magic multiplier the launcher makes. */
static int8_t avg_kern_i8(int8_t x, int8_t y, int d) {
  return rre_i8_avgm(x, y, rre_div32_make((uint32_t)d));
}
static uint8_t avg_kern_u8(uint8_t x, uint8_t y, int d) {
  return rre_u8_avgm(x, y, rre_div32_make((uint32_t)d));
}
static int32_t avg_kern_i32(int32_t x, int32_t y, int d) {
  return rre_i32_avgm(x, y, rre_div32_make((uint32_t)d));
}
static int64_t avg_kern_i64(int64_t x, int64_t y, int d) {
  return rre_i64_avgm(x, y, rre_div64_make((uint32_t)d));
}
static uint16_t avg_kern_f16(uint16_t x, uint16_t y, int d) {
  return rre_f16_avg(x, y, (float)d);
}
static uint16_t avg_kern_bf16(uint16_t x, uint16_t y, int d) {
  return rre_bf16_avg(x, y, (float)d);
}
static float avg_kern_f32(float x, float y, int d) {
  return rre_f32_avg(x, y, (float)d);
}
static double avg_kern_f64(double x, double y, int d) {
  return rre_f64_avg(x, y, (double)d);
}

/* The word forms of the kernels' vector path. */
#define HALF_WORD(tag)                                                    \
  static uint32_t word_##tag(uint32_t x, uint32_t y, rr_op op, int div) { \
    switch (op) {                                                         \
      case RR_SUM:                                                        \
        return rre_##tag##x2_sum(x, y);                                   \
      case RR_PROD:                                                       \
        return rre_##tag##x2_prod(x, y);                                  \
      case RR_MIN:                                                        \
        return rre_##tag##x2_min(x, y);                                   \
      case RR_MAX:                                                        \
        return rre_##tag##x2_max(x, y);                                   \
      default:                                                            \
        return rre_##tag##x2_avg(x, y, (float)div);                       \
    }                                                                     \
  }
HALF_WORD(f16)
HALF_WORD(bf16)

#define BITWISE(tag, T)                             \
  static T bitwise_##tag(T x, T y, rr_op op) {      \
    return op == RR_BAND  ? rre_##tag##_band(x, y)  \
           : op == RR_BOR ? rre_##tag##_bor(x, y)   \
                          : rre_##tag##_bxor(x, y); \
  }
BITWISE(i8, int8_t)
BITWISE(u8, uint8_t)
BITWISE(i32, int32_t)
BITWISE(i64, int64_t)
/* Never called for floating types (bitwise ops are rejected); present so the macro is one. */
#define FLT_BITWISE(tag, T)                    \
  static T bitwise_##tag(T x, T y, rr_op op) { \
    (void)y, (void)op;                         \
    return x;                                  \
  }
FLT_BITWISE(f16, uint16_t)
FLT_BITWISE(bf16, uint16_t)
FLT_BITWISE(f32, float)
FLT_BITWISE(f64, double)

static void elem_reduce(void *dst, const void *a, const void *b, size_t n, rr_dtype d, rr_op op,
                        int div, int kern) {
  switch (d) {
    /* int8 has a word form for AVG only (the other ops' element functions are vectorised
     * by nvcc as they are). */
    case RR_INT8:
      ELEMS(int8_t, i8, double, op == RR_AVG ? 4u : 0u,
            rre_i8x4_avgm(xw, yw, rre_div32_make((uint32_t)div)))
    case RR_UINT8:
      ELEMS(uint8_t, u8, double, 0, 0)
    case RR_INT32:
      ELEMS(int32_t, i32, double, 0, 0)
    case RR_INT64:
      ELEMS(int64_t, i64, int64_t, 0, 0)
    case RR_FLOAT16:
      ELEMS(uint16_t, f16, float, 2, word_f16(xw, yw, op, div))
    case RR_BFLOAT16:
      ELEMS(uint16_t, bf16, float, 2, word_bf16(xw, yw, op, div))
    case RR_FLOAT32:
      ELEMS(float, f32, float, 0, 0)
    case RR_FLOAT64:
      ELEMS(double, f64, double, 0, 0)
    default:
      abort();
  }
}

static void hex(char *out, size_t cap, const void *p, size_t es) {
  uint64_t v = 0;
  memcpy(&v, p, es);
  snprintf(out, cap, "0x%0*" PRIx64, (int)(es * 2), v);
}

/* ---- the magic divisions alone ----
 * Each check: n values v (with y = 0, so the wrapped sum is v) through op.c's AVG and through
 * rre_*_avgm with d's magic; int8 also through the word form. Returns the mismatches,
 * printing the first. */
static long g_div_checks;

static int magic_ok(uint32_t d) {
  /* The proof's bounds (reduce_elem.cuh): the multiplier fits its word, the shift is l - 1. */
  rre_div32 m = rre_div32_make(d);
  uint32_t l = rre_ceil_log2(d);
  uint64_t m64 = ((((uint64_t)1 << (31 + l)) + d - 1) / d);
  if (m64 >> 32 || m.mul != (uint32_t)m64 || m.shift != l - 1) {
    printf("FAIL magic for d %u: multiplier 0x%llx does not fit 32 bits or was cut\n", d,
           (unsigned long long)m64);
    return 0;
  }
  return 1;
}

static long div_check(rr_dtype t, const void *v, size_t n, uint32_t d, void *ref, void *zero) {
  rr__reduce(ref, v, zero, n, t, RR_AVG, (int)d);
  rre_div32 m = rre_div32_make(d);
  rre_div64 m64 = rre_div64_make(d);
  for (size_t i = 0; i < n; i++) {
    int64_t want = 0, got = 0, got_w = 0;
    switch (t) {
      case RR_INT8: {
        int8_t x = ((const int8_t *)v)[i];
        want = ((int8_t *)ref)[i];
        got = rre_i8_avgm(x, 0, m);
        uint32_t w = rre_i8x4_avgm((uint32_t)(uint8_t)x << (8 * (i & 3)), 0, m);
        got_w = (int8_t)(uint8_t)(w >> (8 * (i & 3)));
        break;
      }
      case RR_UINT8:
        want = ((uint8_t *)ref)[i];
        got = got_w = rre_u8_avgm(((const uint8_t *)v)[i], 0, m);
        break;
      case RR_INT32:
        want = ((int32_t *)ref)[i];
        got = got_w = rre_i32_avgm(((const int32_t *)v)[i], 0, m);
        break;
      default:
        want = ((int64_t *)ref)[i];
        got = got_w = rre_i64_avgm(((const int64_t *)v)[i], 0, m64);
    }
    g_div_checks++;
    if (got != want || got_w != want) {
      int64_t x = t == RR_INT8    ? ((const int8_t *)v)[i]
                  : t == RR_UINT8 ? ((const uint8_t *)v)[i]
                  : t == RR_INT32 ? ((const int32_t *)v)[i]
                                  : ((const int64_t *)v)[i];
      printf(
          "FAIL %s AVG by %u: sum %lld gives %lld in op.c, %lld by the magic multiplier "
          "(%lld by the word form)\n",
          rr_dtype_name(t), d, (long long)x, (long long)want, (long long)got, (long long)got_w);
      return 1;
    }
  }
  return 0;
}

/* Values whose quotient by d is at an edge: 0, +-1, the multiples of d and their neighbours
 * near 0 and near the type's ends, the ends themselves. */
static size_t edges(int64_t *out, uint32_t d, int64_t lo, int64_t hi) {
  size_t k = 0;
  /* In 128 bits: the neighbours of int64's ends lie outside it (filtered out below). */
  __int128 dd = d, top = hi / d * dd, bot = lo / (int64_t)d * dd;
  __int128 base[] = {0,          1,       -1,      dd - 1,   dd,           dd + 1,
                     2 * dd - 1, 2 * dd,  -dd + 1, -dd,      -dd - 1,      -2 * dd + 1,
                     -2 * dd,    top,     top - 1, top + 1,  top - dd,     top - dd + 1,
                     bot,        bot + 1, bot - 1, bot + dd, bot + dd - 1, lo,
                     lo + 1,     hi,      hi - 1};
  for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
    if (base[i] >= lo && base[i] <= hi) out[k++] = (int64_t)base[i];
  return k;
}

static long test_divisions(void) {
  enum { N = 4096 };
  static int8_t v8[256], ref[N * 8];
  static uint8_t u8[256];
  static int32_t v32[N];
  static int64_t v64[N], e[64], zero[N];
  long fails = 0;
  for (int i = 0; i < 256; i++) v8[i] = (int8_t)(i - 128), u8[i] = (uint8_t)i;
  /* Divisors: every one up to 4096, then 2^k - 1, 2^k, 2^k + 1 up to INT_MAX, and random. */
  uint32_t ds[4096 + 3 * 32 + 2000];
  size_t nd = 0;
  for (uint32_t d = 2; d <= 4096; d++) ds[nd++] = d;
  for (int k = 12; k <= 31; k++)
    for (int j = -1; j <= 1; j++) {
      uint64_t d = ((uint64_t)1 << k) + (uint64_t)(int64_t)j;
      if (d <= 0x7fffffffu) ds[nd++] = (uint32_t)d;
    }
  for (int i = 0; i < 2000; i++) ds[nd++] = 4097 + (uint32_t)(rnd() % (0x7fffffffu - 4096));
  for (size_t k = 0; k < nd && fails < 5; k++) {
    uint32_t d = ds[k];
    if (!magic_ok(d)) {
      fails++;
      continue;
    }
    /* Every 8-bit sum. */
    fails += div_check(RR_INT8, v8, 256, d, ref, zero);
    fails += div_check(RR_UINT8, u8, 256, d, ref, zero);
    /* 32 and 64 bits: the edges and random values. */
    size_t ne = edges(e, d, INT32_MIN, INT32_MAX);
    for (size_t i = 0; i < ne; i++) v32[i] = (int32_t)e[i];
    for (size_t i = ne; i < 256; i++) v32[i] = (int32_t)(uint32_t)rnd();
    fails += div_check(RR_INT32, v32, 256, d, ref, zero);
    ne = edges(v64, d, INT64_MIN, INT64_MAX);
    for (size_t i = ne; i < 256; i++) v64[i] = (int64_t)rnd() >> (rnd() % 64);
    fails += div_check(RR_INT64, v64, 256, d, ref, zero);
  }
  /* Small divisors (world sizes): every int8/uint8 pair (x, y), wrapped sums included, and
   * 2^20 random 32/64-bit pairs, through the element functions as the kernels call them. */
  for (uint32_t d = 2; d <= 16 && !fails; d++) {
    rre_div32 m = rre_div32_make(d);
    rre_div64 m64 = rre_div64_make(d);
    for (int x = 0; x < 256; x++)
      for (int y = 0; y < 256; y++) {
        int8_t s8 = (int8_t)(uint8_t)(x + y);
        uint8_t su = (uint8_t)(x + y);
        int8_t want8 = (int8_t)(s8 / (int)d);
        uint8_t wantu = (uint8_t)(su / d);
        if (rre_i8_avgm((int8_t)x, (int8_t)y, m) != want8 ||
            rre_u8_avgm((uint8_t)x, (uint8_t)y, m) != wantu) {
          printf("FAIL 8-bit AVG by %u: %d + %d\n", d, x, y);
          fails++;
        }
      }
    for (int i = 0; i < (1 << 20); i++) {
      int32_t x = (int32_t)(uint32_t)rnd(), y = (int32_t)(uint32_t)rnd();
      int64_t p = (int64_t)rnd(), q = (int64_t)rnd();
      int32_t s32 = (int32_t)((uint32_t)x + (uint32_t)y);
      int64_t s64 = (int64_t)((uint64_t)p + (uint64_t)q);
      if (rre_i32_avgm(x, y, m) != s32 / (int32_t)d ||
          rre_i64_avgm(p, q, m64) != s64 / (int64_t)d) {
        printf("FAIL 32/64-bit AVG by %u: %d + %d or %lld + %lld\n", d, x, y, (long long)p,
               (long long)q);
        fails++;
        break;
      }
    }
    g_div_checks += 65536 * 2 + (2 << 20);
  }
  printf("magic divisions: %zu divisors, %ld checks: %ld mismatch(es)\n", nd, g_div_checks, fails);
  return fails;
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 200000;
  int paths = rr__op_force_portable(0) ? 2 : 1; /* AVX2 and portable, or portable only */
  /* AVG by 0 and 1 is the sum; world sizes 2..8 and a few others. */
  int divs[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 128, 1000003};
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
          for (int kern = 0; kern < 2; kern++) {
            elem_reduce(got, a, b, n, (rr_dtype)d, (rr_op)op, div, kern);
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
            printf(
                "FAIL %s %s div %d (%s path, %s functions): element %zu: %s op %s = %s in "
                "op.c, %s in reduce_elem.cuh\n",
                rr_dtype_name((rr_dtype)d), rr_op_name((rr_op)op), div,
                path == 0 && paths == 2 ? "avx2" : "portable", kern ? "kernel" : "reference", i, x,
                y, r, g);
          }
        }
      }
    }
  }
  rr__op_force_portable(0);
  printf("%ld cases x %zu elements, %d op.c path(s), conversions: %s: %ld mismatch(es)\n", cases, n,
         paths, RR__ELEM_CUDA_CONV ? "cuda_fp16.h / cuda_bf16.h" : "common/half.h", failures);
  failures += test_divisions();
  free(a), free(b), free(ref), free(got);
  return failures ? 1 : 0;
}
