/*
 * Input data and result checks for the *_perf tools.
 *
 * Every value is a small integer, a function of (rank, element index) only, so each rank
 * computes any other rank's input and the exact reduced result of any element without
 * communication, in every dtype:
 *
 *   - reducing collectives, SUM/MIN/MAX/AVG and the bitwise ops: ((7 i + 3 r + 1) mod 15) - 7,
 *     in [-7, 7] ([0, 14] for uint8). Every partial sum of up to 36 ranks stays within
 *     +-252, exact in bfloat16 (8 significant bits), half and every wider type. Beyond 36
 *     ranks the values shrink to [-1, 1] (exact up to 256 ranks).
 *   - PROD: 1, except 2 where (i + r) mod 11 == 0 and -1 where (3 i + r) mod 5 == 0 (never
 *     -1 for uint8): products are +-2^k with k <= n / 11, exact in every float type.
 *   - copies (all_gather, broadcast, sendrecv): ((7 i + 29 r) mod 251) - 125: every rank's
 *     data differs from every other's (251 is prime), so a block from the wrong rank shows.
 *   - integer types wrap: the expected value is computed in int64 and truncated, which is
 *     the library's wrapping arithmetic for every order of reduction.
 *   - the poison written over a result buffer before the call (-128, 255, 0x5a5a..., NaN)
 *     is outside the data's range, so an element the call never wrote is wrong.
 *
 * Results must match bit for bit, except AVG in floating types: the library sums (exactly,
 * here) and divides once by n in the dtype's arithmetic (float for half and bfloat16,
 * rounded once), which the expected value copies; a difference of up to one unit in the
 * last place (|got - want| <= eps * |want|, eps = 2^-10 half, 2^-7 bfloat16, 2^-23 float,
 * 2^-52 double) is still accepted, so a library that rounds the quotient differently is not
 * reported as corrupt. Integer AVG truncates (C division), as the library documents.
 *
 * The patterns repeat (165 and 251 elements), so one table per call is computed and the
 * buffers are compared against it at memory speed.
 */
#include <math.h>
#include <string.h>

#include "perf.h"

#define PERIOD_REDUCE 165 /* lcm(15, 11, 5) */
#define PERIOD_COPY 251
#define PERIOD_MAX 251

/* ---------------------------------------------------------------------------------------
 * 16-bit floats, round to nearest even (the library's rounding). */

static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t mant = x & 0x7fffffu;
  int exp = (int)((x >> 23) & 0xffu);
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  int e = exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  uint32_t h, rem, halfway;
  if (e <= 0) { /* subnormal half: units of 2^-24 */
    if (e < -10) return sign;
    mant |= 0x800000u;
    int shift = 14 - e;
    h = mant >> shift;
    rem = mant & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  } else {
    h = ((uint32_t)e << 10) | (mant >> 13);
    rem = mant & 0x1fffu;
    halfway = 0x1000u;
  }
  if (rem > halfway || (rem == halfway && (h & 1))) h++; /* a carry rounds up to inf: right */
  return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    float v = ldexpf((float)mant, -24);
    return sign ? -v : v;
  }
  uint32_t x = sign | (exp == 31 ? 0x7f800000u | (mant << 13) : ((exp + 112) << 23) | (mant << 13));
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

/* ---------------------------------------------------------------------------------------
 * Values as raw element bits (little-endian low bytes of a uint64_t). */

static uint64_t f32_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static uint64_t f64_bits(double d) {
  uint64_t x;
  memcpy(&x, &d, sizeof x);
  return x;
}

/* An exact integer in dtype d; integers wrap (two's complement truncation). */
static uint64_t int_bits(rr_dtype d, int64_t v) {
  switch (d) {
    case RR_INT8:
    case RR_UINT8:
      return (uint8_t)v;
    case RR_INT32:
      return (uint32_t)v;
    case RR_INT64:
      return (uint64_t)v;
    case RR_FLOAT16:
      return f32_to_f16((float)v);
    case RR_BFLOAT16:
      return f32_to_bf16((float)v);
    case RR_FLOAT32:
      return f32_bits((float)v);
    case RR_FLOAT64:
      return f64_bits((double)v);
    default:
      return 0;
  }
}

/* AVG of a sum s over n ranks, by the library's rule: sum (wrapped, for integers), then one
 * division in the dtype's arithmetic. */
static uint64_t avg_bits(rr_dtype d, int64_t s, int n) {
  switch (d) {
    case RR_INT8:
      return (uint8_t)(int8_t)((int8_t)s / n);
    case RR_UINT8:
      return (uint8_t)((uint8_t)s / n);
    case RR_INT32:
      return (uint32_t)((int32_t)s / n);
    case RR_INT64:
      return (uint64_t)(s / n);
    case RR_FLOAT16:
      return f32_to_f16((float)s / (float)n);
    case RR_BFLOAT16:
      return f32_to_bf16((float)s / (float)n);
    case RR_FLOAT32:
      return f32_bits((float)s / (float)n);
    case RR_FLOAT64:
      return f64_bits((double)s / (double)n);
    default:
      return 0;
  }
}

static double float_value(rr_dtype d, uint64_t bits) {
  switch (d) {
    case RR_FLOAT16:
      return f16_to_f32((uint16_t)bits);
    case RR_BFLOAT16:
      return bf16_to_f32((uint16_t)bits);
    case RR_FLOAT32: {
      uint32_t x = (uint32_t)bits;
      float f;
      memcpy(&f, &x, sizeof f);
      return f;
    }
    default: {
      double v;
      memcpy(&v, &bits, sizeof v);
      return v;
    }
  }
}

static int is_float(rr_dtype d) {
  return d == RR_FLOAT16 || d == RR_BFLOAT16 || d == RR_FLOAT32 || d == RR_FLOAT64;
}

/* One unit in the last place, relative. */
static double avg_eps(rr_dtype d) {
  switch (d) {
    case RR_FLOAT16:
      return ldexp(1, -10);
    case RR_BFLOAT16:
      return ldexp(1, -7);
    case RR_FLOAT32:
      return ldexp(1, -23);
    default:
      return ldexp(1, -52);
  }
}

/* ---------------------------------------------------------------------------------------
 * The patterns. */

static int64_t input_value(const perf_ctx *c, int rank, size_t i) {
  const size_t r = (size_t)rank;
  if (!c->reduces) {
    int64_t v = (int64_t)((7 * i + 29 * r) % PERIOD_COPY) - 125;
    return c->dtype == RR_UINT8 ? v + 125 : v;
  }
  if (c->op == RR_PROD) {
    if ((i + r) % 11 == 0) return 2;
    if (c->dtype != RR_UINT8 && (3 * i + r) % 5 == 0) return -1;
    return 1;
  }
  const int64_t amp = c->nranks <= 36 ? 7 : 1;
  int64_t v = (int64_t)((7 * i + 3 * r + 1) % (size_t)(2 * amp + 1)) - amp;
  return c->dtype == RR_UINT8 ? v + amp : v;
}

static size_t period(const perf_ctx *c) {
  return c->reduces ? PERIOD_REDUCE : PERIOD_COPY;
}

static void input_table(const perf_ctx *c, int rank, uint64_t *tab) {
  for (size_t k = 0; k < period(c); k++) tab[k] = int_bits(c->dtype, input_value(c, rank, k));
}

static void reduced_table(const perf_ctx *c, uint64_t *tab) {
  for (size_t k = 0; k < PERIOD_REDUCE; k++) {
    int64_t acc = input_value(c, 0, k);
    for (int q = 1; q < c->nranks; q++) {
      int64_t v = input_value(c, q, k);
      switch (c->op) {
        case RR_PROD: /* in uint64_t: wrapping, never signed overflow, however many ranks */
          acc = (int64_t)((uint64_t)acc * (uint64_t)v);
          break;
        case RR_MIN:
          acc = v < acc ? v : acc;
          break;
        case RR_MAX:
          acc = v > acc ? v : acc;
          break;
        case RR_BAND:
          acc &= v;
          break;
        case RR_BOR:
          acc |= v;
          break;
        case RR_BXOR:
          acc ^= v;
          break;
        default: /* SUM, AVG */
          acc = (int64_t)((uint64_t)acc + (uint64_t)v);
          break;
      }
    }
    tab[k] = c->op == RR_AVG ? avg_bits(c->dtype, acc, c->nranks) : int_bits(c->dtype, acc);
  }
}

static uint64_t poison_bits(rr_dtype d) {
  switch (d) {
    case RR_INT8:
      return 0x80;
    case RR_UINT8:
      return 0xff;
    case RR_INT32:
      return 0x5a5a5a5au;
    case RR_INT64:
      return 0x5a5a5a5a5a5a5a5au;
    case RR_FLOAT16:
      return 0x7e00;
    case RR_BFLOAT16:
      return 0x7fc0;
    case RR_FLOAT32:
      return 0x7fc00000u;
    default:
      return 0x7ff8000000000000u;
  }
}

/* ---------------------------------------------------------------------------------------
 * Fill and compare, one loop per element size (no per-element switch). */

#define PERF_FILL_LOOP(T)            \
  do {                               \
    T *p = buf;                      \
    for (size_t j = 0; j < n; j++) { \
      p[j] = (T)tab[k];              \
      if (++k == per) k = 0;         \
    }                                \
  } while (0)

static void fill_from(const perf_ctx *c, void *buf, size_t first, size_t n, const uint64_t *tab,
                      size_t per) {
  size_t k = first % per;
  switch (c->esize) {
    case 1:
      PERF_FILL_LOOP(uint8_t);
      break;
    case 2:
      PERF_FILL_LOOP(uint16_t);
      break;
    case 4:
      PERF_FILL_LOOP(uint32_t);
      break;
    default:
      PERF_FILL_LOOP(uint64_t);
      break;
  }
}

/* Bit-exact comparison; a mismatch goes to the slow path only when AVG tolerance applies. */
#define PERF_CMP_LOOP(T)                                                                  \
  do {                                                                                    \
    const T *p = buf;                                                                     \
    for (size_t j = 0; j < n; j++) {                                                      \
      if (p[j] != (T)tab[k]) {                                                            \
        if (!tolerant) {                                                                  \
          wrong++;                                                                        \
        } else {                                                                          \
          double got = float_value(c->dtype, p[j]), want = float_value(c->dtype, tab[k]); \
          if (!(fabs(got - want) <= eps * fabs(want))) wrong++;                           \
        }                                                                                 \
      }                                                                                   \
      if (++k == per) k = 0;                                                              \
    }                                                                                     \
  } while (0)

static int64_t compare(const perf_ctx *c, const void *buf, size_t first, size_t n,
                       const uint64_t *tab, size_t per, int tolerant) {
  const double eps = avg_eps(c->dtype);
  size_t k = first % per;
  int64_t wrong = 0;
  switch (c->esize) {
    case 1:
      PERF_CMP_LOOP(uint8_t);
      break;
    case 2:
      PERF_CMP_LOOP(uint16_t);
      break;
    case 4:
      PERF_CMP_LOOP(uint32_t);
      break;
    default:
      PERF_CMP_LOOP(uint64_t);
      break;
  }
  return wrong;
}

void perf_fill_input(const perf_ctx *c, void *buf, size_t first, size_t n, int rank) {
  uint64_t tab[PERIOD_MAX];
  input_table(c, rank, tab);
  fill_from(c, buf, first, n, tab, period(c));
}

void perf_fill_poison(const perf_ctx *c, void *buf, size_t n) {
  const uint64_t tab[1] = {poison_bits(c->dtype)};
  fill_from(c, buf, 0, n, tab, 1);
}

int64_t perf_wrong_reduced(const perf_ctx *c, const void *buf, size_t first, size_t n) {
  uint64_t tab[PERIOD_MAX];
  reduced_table(c, tab);
  return compare(c, buf, first, n, tab, PERIOD_REDUCE, c->op == RR_AVG && is_float(c->dtype));
}

int64_t perf_wrong_input(const perf_ctx *c, const void *buf, size_t first, size_t n, int src) {
  uint64_t tab[PERIOD_MAX];
  input_table(c, src, tab);
  return compare(c, buf, first, n, tab, period(c), 0);
}

int64_t perf_wrong_poison(const perf_ctx *c, const void *buf, size_t n) {
  const uint64_t tab[1] = {poison_bits(c->dtype)};
  return compare(c, buf, 0, n, tab, 1, 0);
}

double perf_factor_one(int nranks) {
  (void)nranks;
  return 1.0;
}

double perf_factor_ring(int nranks) {
  return (double)(nranks - 1) / (double)nranks;
}
