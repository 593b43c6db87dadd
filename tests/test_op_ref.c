/* test_op: the independent references. float16 / bfloat16 decoded and encoded from the
 * formats' definition in double arithmetic, integers in wrapping uint64, float32 in double and
 * float64 in a wider type; and the expected result of one element of rr__reduce. None of this
 * calls the code under test. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tests/test_op.h"

/* ---------------------------------------------------------------------------------------------
 * Reference float16 / bfloat16, from the definition: (-1)^s * 2^(e - bias) * 1.m, or
 * 2^(1 - bias) * 0.m when e == 0. mant/ebits: 10/5 for float16, 7/8 for bfloat16.
 */

static double ref_decode(uint16_t bits, int mant, int ebits) {
  int bias = (1 << (ebits - 1)) - 1;
  int e = (bits >> mant) & ((1 << ebits) - 1);
  int m = bits & ((1 << mant) - 1);
  int neg = (bits >> (mant + ebits)) & 1;
  double v;
  if (e == (1 << ebits) - 1)
    v = m ? NAN : INFINITY;
  else if (e == 0)
    v = ldexp(m, 1 - bias - mant);
  else
    v = ldexp(m + (1 << mant), e - bias - mant);
  return neg ? -v : v;
}

/* Round to nearest, ties to even, with gradual underflow and overflow to infinity. */
static uint16_t ref_encode(double v, int mant, int ebits) {
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t inf = (uint32_t)((1 << ebits) - 1) << mant;
  uint32_t sign = signbit(v) ? 1u << (mant + ebits) : 0;
  if (isnan(v)) return (uint16_t)(sign | inf | (1u << (mant - 1)));
  double a = fabs(v);
  if (isinf(a)) return (uint16_t)(sign | inf);
  if (a == 0) return (uint16_t)sign;
  int e;
  frexp(a, &e);
  int E = e - 1; /* a in [2^E, 2^(E+1)) */
  if (E < 1 - bias) E = 1 - bias;
  uint32_t sig = (uint32_t)nearbyint(a / ldexp(1.0, E - mant)); /* exact scaling, RNE */
  if (sig >= (2u << mant)) {                                    /* rounded up to the next binade */
    sig >>= 1;
    E++;
  }
  if (E > bias) return (uint16_t)(sign | inf);
  if (sig < (1u << mant)) return (uint16_t)(sign | sig); /* subnormal */
  return (uint16_t)(sign | ((uint32_t)(E + bias) << mant) | (sig - (1u << mant)));
}

double ref_h2d(uint16_t h) {
  return ref_decode(h, 10, 5);
}
double ref_bf2d(uint16_t b) {
  return ref_decode(b, 7, 8);
}
uint16_t ref_f2h(float f) {
  return ref_encode(f, 10, 5);
}
uint16_t ref_f2bf(float f) {
  return ref_encode(f, 7, 8);
}

int64_t get_int(rr_dtype dt, const void *p) {
  switch (dt) {
    case RR_INT8:
      return *(const int8_t *)p;
    case RR_UINT8:
      return *(const uint8_t *)p;
    case RR_INT32:
      return *(const int32_t *)p;
    default:
      return *(const int64_t *)p;
  }
}

/* Keep the low bits, as a two's complement machine would. */
void put_int(rr_dtype dt, void *p, uint64_t v) {
  switch (dt) {
    case RR_INT8:
      *(int8_t *)p = (int8_t)(uint8_t)v;
      break;
    case RR_UINT8:
      *(uint8_t *)p = (uint8_t)v;
      break;
    case RR_INT32:
      *(int32_t *)p = (int32_t)(uint32_t)v;
      break;
    default:
      *(int64_t *)p = (int64_t)v;
      break;
  }
}

/* ---------------------------------------------------------------------------------------------
 * Expected results, one element at a time.
 */

/* op in the definition's arithmetic: x, y and the result in T, computed wider then rounded
 * once (which for + - * / is the correctly rounded T result). */
#define REF_FLOAT(name, T, W)                                 \
  static T name(rr_op op, int div, T x, T y) {                \
    switch (op) {                                             \
      case RR_SUM:                                            \
        return (T)((W)x + (W)y);                              \
      case RR_PROD:                                           \
        return (T)((W)x * (W)y);                              \
      case RR_MIN:                                            \
        return isnan(x) || isnan(y) ? (T)NAN : x < y ? x : y; \
      case RR_MAX:                                            \
        return isnan(x) || isnan(y) ? (T)NAN : x > y ? x : y; \
      default: {                                              \
        T s = (T)((W)x + (W)y);                               \
        return div > 0 ? (T)((W)s / (W)div) : s;              \
      }                                                       \
    }                                                         \
  }
REF_FLOAT(ref_f32, float, double)
REF_FLOAT(ref_f64, double, wide_t)

/* float16/bfloat16: the float32 computation as op.h defines it (float add, mul, divide by
 * (float)div), on operands decoded and a result encoded by the reference conversions. */
static float ref_in_f32(rr_op op, int div, float x, float y) {
  switch (op) {
    case RR_SUM:
      return x + y;
    case RR_PROD:
      return x * y;
    case RR_MIN:
      return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
    case RR_MAX:
      return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
    default:
      return div > 0 ? (x + y) / (float)div : x + y;
  }
}

static uint64_t ref_int(rr_dtype dt, rr_op op, int div, int64_t x, int64_t y) {
  uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
  switch (op) {
    case RR_SUM:
      return ux + uy;
    case RR_PROD:
      return ux * uy;
    case RR_MIN:
      return (uint64_t)(x < y ? x : y);
    case RR_MAX:
      return (uint64_t)(x > y ? x : y);
    case RR_BAND:
      return ux & uy;
    case RR_BOR:
      return ux | uy;
    case RR_BXOR:
      return ux ^ uy;
    default: {
      uint8_t tmp[8];
      put_int(dt, tmp, ux + uy); /* the wrapped sum, then C's truncating division */
      int64_t s = get_int(dt, tmp);
      return (uint64_t)(div > 0 ? s / div : s);
    }
  }
}

/* The value of a float element as double (NaN stays NaN). */
double float_value(rr_dtype dt, const void *p) {
  switch (dt) {
    case RR_FLOAT16:
      return ref_h2d(*(const uint16_t *)p);
    case RR_BFLOAT16:
      return ref_bf2d(*(const uint16_t *)p);
    case RR_FLOAT32:
      return *(const float *)p;
    default:
      return *(const double *)p;
  }
}

/* Writes the expected element to want; returns 1 if any NaN is acceptable instead. */
int expect(rr_dtype dt, rr_op op, int div, const void *a, const void *b, void *want) {
  switch (dt) {
    case RR_FLOAT16:
    case RR_BFLOAT16: {
      float r = ref_in_f32(op, div, (float)float_value(dt, a), (float)float_value(dt, b));
      *(uint16_t *)want = dt == RR_FLOAT16 ? ref_f2h(r) : ref_f2bf(r);
      return isnan(r);
    }
    case RR_FLOAT32: {
      float r = ref_f32(op, div, *(const float *)a, *(const float *)b);
      memcpy(want, &r, sizeof r);
      return isnan(r);
    }
    case RR_FLOAT64: {
      double r = ref_f64(op, div, *(const double *)a, *(const double *)b);
      memcpy(want, &r, sizeof r);
      return isnan(r);
    }
    default:
      put_int(dt, want, ref_int(dt, op, div, get_int(dt, a), get_int(dt, b)));
      return 0;
  }
}

int elem_isnan(rr_dtype dt, const void *p) {
  return t_is_float(dt) && isnan(float_value(dt, p));
}

void hex_elem(char *out, size_t cap, rr_dtype dt, const void *p) {
  uint64_t v = 0;
  memcpy(&v, p, k_dtype_sizes[dt]);
  if (t_is_float(dt))
    snprintf(out, cap, "0x%0*" PRIx64 " (%.17g)", (int)k_dtype_sizes[dt] * 2, v,
             float_value(dt, p));
  else
    snprintf(out, cap, "%" PRId64, get_int(dt, p));
}

/* Which NaN: arithmetic gives the positive quiet NaN whatever the operands' payloads;
 * MIN/MAX give a if it is NaN, else b (quieted when converted through float). */
static int nan_ok(rr_dtype dt, rr_op op, const void *a, const void *b, const void *got) {
  size_t es = k_dtype_sizes[dt];
  uint64_t want = 0, g = 0;
  if (op == RR_MIN || op == RR_MAX) {
    memcpy(&want, elem_isnan(dt, a) ? a : b, es);
    if (dt == RR_FLOAT16) want |= 0x0200;
    if (dt == RR_BFLOAT16) want |= 0x0040;
  } else {
    static const uint64_t canon[RR_NUM_DTYPES] = {[RR_FLOAT16] = 0x7e00,
                                                  [RR_BFLOAT16] = 0x7fc0,
                                                  [RR_FLOAT32] = 0x7fc00000,
                                                  [RR_FLOAT64] = 0x7ff8000000000000u};
    want = canon[dt];
  }
  memcpy(&g, got, es);
  return g == want;
}

/* One element of rr__reduce's output. */
int check_elem(rr_dtype dt, rr_op op, int div, const void *a, const void *b, const void *got) {
  size_t es = k_dtype_sizes[dt];
  uint8_t want[8];
  if (expect(dt, op, div, a, b, want)) return nan_ok(dt, op, a, b, got);
  if (memcmp(got, want, es) == 0) return 1;
  /* MIN/MAX of equal values (+0 and -0) may return either operand; op.h allows it. */
  if ((op == RR_MIN || op == RR_MAX) && t_is_float(dt) && float_value(dt, a) == float_value(dt, b))
    return memcmp(got, a, es) == 0 || memcmp(got, b, es) == 0;
  return 0;
}
