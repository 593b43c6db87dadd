/* Per-element reductions shared by the CUDA kernels (cuda/reduce.cu, compiled by nvcc for
 * the device) and the host test that checks them against ring/op.c bit for bit
 * (tests/test_cuda_elem.c, compiled by the C compiler, so it runs on every machine, GPU or
 * not). Plain C11 that is also valid CUDA C++: static inline functions, no templates.
 *
 * The semantics are ring/op.c's, element by element:
 *   - integers: SUM/PROD wrap (computed in the unsigned type), MIN/MAX, BAND/BOR/BXOR;
 *     AVG divides the wrapped sum truncating toward zero (8/32-bit: in double, exactly as
 *     op.c; int64: integer division).
 *   - float32/float64: a NaN produced by SUM/PROD becomes the positive quiet NaN; MIN/MAX
 *     return x when x is NaN, else (x < y ? x : y) / (x > y ? x : y).
 *   - float16/bfloat16: widen to float32 (NaN quieted), compute as float32, round once to
 *     nearest even with op.c's own bit-level conversions.
 *   - AVG: the canonical sum divided by the divisor. The quotient is canonicalised again:
 *     on the CPU that changes nothing (a quiet NaN divided stays that NaN), on the GPU it
 *     turns the GPU's canonical NaN (0x7fffffff) into op.c's (0x7fc00000).
 * Device code must be compiled without --use_fast_math (no FTZ, IEEE division): the
 * subnormal paths of the conversions depend on it.
 */
#ifndef RR__CUDA_REDUCE_ELEM_CUH_
#define RR__CUDA_REDUCE_ELEM_CUH_

#include <stdint.h>
#include <string.h>

#include "common/half.h" /* RR__HD, the bit casts and the float16 / bfloat16 conversions */

RR__HD uint64_t rre_f64_bits(double d) {
#if defined(__CUDA_ARCH__)
  return (uint64_t)__double_as_longlong(d);
#else
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
#endif
}
RR__HD double rre_f64_from_bits(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double((long long)u);
#else
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
#endif
}

/* ---- float32 / float64 element operations ---- */
RR__HD float rre_f32_canon(float r) {
  return r != r ? rr__f32_from_bits(0x7fc00000u) : r;
}
RR__HD double rre_f64_canon(double r) {
  return r != r ? rre_f64_from_bits(0x7ff8000000000000ull) : r;
}
RR__HD float rre_f32_sum(float x, float y) { return rre_f32_canon(x + y); }
RR__HD float rre_f32_prod(float x, float y) { return rre_f32_canon(x * y); }
RR__HD float rre_f32_min(float x, float y) {
  float m = x < y ? x : y;
  return x != x ? x : m;
}
RR__HD float rre_f32_max(float x, float y) {
  float m = x > y ? x : y;
  return x != x ? x : m;
}
RR__HD float rre_f32_avg(float x, float y, float d) { return rre_f32_canon(rre_f32_sum(x, y) / d); }

RR__HD double rre_f64_sum(double x, double y) { return rre_f64_canon(x + y); }
RR__HD double rre_f64_prod(double x, double y) { return rre_f64_canon(x * y); }
RR__HD double rre_f64_min(double x, double y) {
  double m = x < y ? x : y;
  return x != x ? x : m;
}
RR__HD double rre_f64_max(double x, double y) {
  double m = x > y ? x : y;
  return x != x ? x : m;
}
RR__HD double rre_f64_avg(double x, double y, double d) {
  return rre_f64_canon(rre_f64_sum(x, y) / d);
}

/* float16 / bfloat16: widen, compute in float32, round once. */
#define RR__E_HALF_OPS(tag, TOF, FROMF)                                                           \
  RR__HD uint16_t rre_##tag##_sum(uint16_t x, uint16_t y) {                                   \
    return FROMF(rre_f32_sum(TOF(x), TOF(y)));                                                \
  }                                                                                           \
  RR__HD uint16_t rre_##tag##_prod(uint16_t x, uint16_t y) {                                  \
    return FROMF(rre_f32_prod(TOF(x), TOF(y)));                                               \
  }                                                                                           \
  RR__HD uint16_t rre_##tag##_min(uint16_t x, uint16_t y) {                                   \
    return FROMF(rre_f32_min(TOF(x), TOF(y)));                                                \
  }                                                                                           \
  RR__HD uint16_t rre_##tag##_max(uint16_t x, uint16_t y) {                                   \
    return FROMF(rre_f32_max(TOF(x), TOF(y)));                                                \
  }                                                                                           \
  RR__HD uint16_t rre_##tag##_avg(uint16_t x, uint16_t y, float d) {                          \
    return FROMF(rre_f32_avg(TOF(x), TOF(y), d));                                             \
  }
RR__E_HALF_OPS(f16, rr__half_to_float, rr__float_to_half)
RR__E_HALF_OPS(bf16, rr__bf16_to_float, rr__float_to_bf16)

/* ---- integers ---- */
#define RR__E_INT_OPS(tag, T, U)                                                       \
  RR__HD T rre_##tag##_sum(T x, T y) { return (T)((U)x + (U)y); }                    \
  RR__HD T rre_##tag##_prod(T x, T y) { return (T)((U)x * (U)y); }                   \
  RR__HD T rre_##tag##_min(T x, T y) { return x < y ? x : y; }                       \
  RR__HD T rre_##tag##_max(T x, T y) { return x > y ? x : y; }                       \
  RR__HD T rre_##tag##_band(T x, T y) { return (T)(x & y); }                         \
  RR__HD T rre_##tag##_bor(T x, T y) { return (T)(x | y); }                          \
  RR__HD T rre_##tag##_bxor(T x, T y) { return (T)(x ^ y); }
/* uint8 products wrap in unsigned int: uint8 * uint8 promotes to int, and 255 * 255 fits. */
RR__E_INT_OPS(i8, int8_t, uint8_t)
RR__E_INT_OPS(u8, uint8_t, uint32_t)
RR__E_INT_OPS(i32, int32_t, uint32_t)
RR__E_INT_OPS(i64, int64_t, uint64_t)

/* AVG of integers: as op.c, 8/32-bit quotients in double (exact, truncating), int64 as
 * integers. */
RR__HD int8_t rre_i8_avg(int8_t x, int8_t y, double d) {
  return (int8_t)((double)rre_i8_sum(x, y) / d);
}
RR__HD uint8_t rre_u8_avg(uint8_t x, uint8_t y, double d) {
  return (uint8_t)((double)rre_u8_sum(x, y) / d);
}
RR__HD int32_t rre_i32_avg(int32_t x, int32_t y, double d) {
  return (int32_t)((double)rre_i32_sum(x, y) / d);
}
RR__HD int64_t rre_i64_avg(int64_t x, int64_t y, int64_t d) { return rre_i64_sum(x, y) / d; }

#endif /* RR__CUDA_REDUCE_ELEM_CUH_ */
