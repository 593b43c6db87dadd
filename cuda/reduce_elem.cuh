/* Per-element reductions shared by the CUDA kernels (cuda/reduce.cu, compiled by nvcc for
 * the device) and the host tests that check them against ring/op.c bit for bit
 * (tests/test_cuda_elem.c, compiled by the C compiler, so it runs on every machine, GPU or
 * not; tests/test_cuda_elem_conv.cu, the same test compiled by nvcc for the host with the
 * device's conversions). Plain C11 that is also valid CUDA C++: static inline functions, no
 * templates.
 *
 * The semantics are ring/op.c's, element by element:
 *   - integers: SUM/PROD wrap (computed in the unsigned type), MIN/MAX, BAND/BOR/BXOR;
 *     AVG divides the wrapped sum truncating toward zero (op.c: 8/32-bit in double, int64
 *     as integers; the kernels: a multiply-high by a magic number, rre_*_avgm).
 *   - float32/float64: a NaN produced by SUM/PROD becomes the positive quiet NaN; MIN/MAX
 *     return x when x is NaN, else (x < y ? x : y) / (x > y ? x : y).
 *   - float16/bfloat16: widen to float32 (NaN quieted), compute as float32, round once to
 *     nearest even (op.c's bit recipes on the host, the CUDA conversions on the device:
 *     the section below says why both give the same bits).
 *   - AVG: the canonical sum divided by the divisor. The quotient is canonicalised again:
 *     on the CPU that changes nothing (a quiet NaN divided stays that NaN), on the GPU it
 *     turns the GPU's canonical NaN (0x7fffffff) into op.c's (0x7fc00000).
 * Which functions run where: the kernels use the rre_*_avgm integer AVGs and, on 16-byte
 * vectors, the word forms (rre_*x2_* for float16/bfloat16, rre_i8x4_avgm); the host fake's
 * kernels (tests/fake_cuda) use the element functions with op.c's own divisions
 * (rre_*_avg). Device code must be compiled without --use_fast_math (no FTZ, IEEE
 * division): the subnormal paths of the conversions depend on it.
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
RR__HD float rre_f32_sum(float x, float y) {
  return rre_f32_canon(x + y);
}
RR__HD float rre_f32_prod(float x, float y) {
  return rre_f32_canon(x * y);
}
RR__HD float rre_f32_min(float x, float y) {
  float m = x < y ? x : y;
  return x != x ? x : m;
}
RR__HD float rre_f32_max(float x, float y) {
  float m = x > y ? x : y;
  return x != x ? x : m;
}
RR__HD float rre_f32_avg(float x, float y, float d) {
  return rre_f32_canon(rre_f32_sum(x, y) / d);
}

RR__HD double rre_f64_sum(double x, double y) {
  return rre_f64_canon(x + y);
}
RR__HD double rre_f64_prod(double x, double y) {
  return rre_f64_canon(x * y);
}
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

/* ---- float16 / bfloat16 ----
 * op.c widens both inputs to float32 (a NaN quieted), computes in float32 and rounds once to
 * nearest even. Here the same in terms of two conversions, widen and narrow, which are
 * op.c's bit recipes (common/half.h) in the host build, the CUDA library's in device code:
 * `__half2float` / `__float2half_rn` (cuda_fp16.h; the PTX `cvt.f32.f16` and `cvt.rn.f16.f32`,
 * one instruction each from sm_53) and `__bfloat162float` / `__float2bfloat16_rn`
 * (cuda_bf16.h; the bits moved to the top half, and `cvt.rn.bf16.f32` from sm_80, below that
 * the header's integer rounding, the same source as its host version). The CUDA Math API
 * documents both narrowings as round to nearest even ("_rn"); PTX's cvt flushes subnormals
 * only with `.ftz`, which nvcc adds only under -ftz=true (--use_fast_math, never used here).
 * tests/test_cuda_conv.cu proves them equal to common/half.h for every input but NaNs,
 * against the host versions of the same functions.
 *
 * NaNs are where the conversions differ: half.h keeps a NaN's sign and payload and sets its
 * quiet bit (as x86's F16C does); the CUDA host versions widen a float16 NaN to 0x7fffffff,
 * leave a bfloat16 NaN unquieted and narrow any NaN to 0x7fff. Whatever NaN the instructions
 * give on a GPU, no converted NaN reaches a result:
 *   - SUM/PROD/AVG: a NaN result is op.c's canonical 0x7fc00000 narrowed, 0x7e00 (float16)
 *     or 0x7fc0 (bfloat16), selected on the float32 result; numbers go through narrow.
 *   - MIN/MAX: op.c's result is one input widened and narrowed again, which for a number is
 *     its own bits (the round trip is exact) and for a NaN its bits with the quiet bit set.
 *     So the comparison picks an input's bits and quiets them: nothing is narrowed.
 * The pair forms (x2: two elements in a 32-bit word, the low one first, as in memory) are
 * what the kernels run on 16-byte vectors: `__half22float2` / `__floats2half2_rn` (one
 * `cvt.rn.f16x2.f32` from sm_80) and the bfloat16 equivalents, lane for lane the scalar
 * conversions. RR__ELEM_HOST_CUDA_CONV compiles the CUDA branch for the host (nvcc), so
 * tests/test_cuda_elem_conv.cu checks these very functions against ring/op.c. */
#if defined(__CUDACC__) && (defined(__CUDA_ARCH__) || defined(RR__ELEM_HOST_CUDA_CONV))
#define RR__ELEM_CUDA_CONV 1
#include <cuda_bf16.h>
#include <cuda_fp16.h>

RR__HD float rre_f16_widen(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
RR__HD uint16_t rre_f16_narrow(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
RR__HD void rre_f16x2_widen(uint32_t h, float *lo, float *hi) {
  __half2_raw r;
  r.x = (unsigned short)h;
  r.y = (unsigned short)(h >> 16);
  float2 f = __half22float2(__half2(r));
  *lo = f.x;
  *hi = f.y;
}
RR__HD uint32_t rre_f16x2_narrow(float lo, float hi) {
  __half2_raw r = __floats2half2_rn(lo, hi);
  return (uint32_t)r.x | (uint32_t)r.y << 16;
}
RR__HD float rre_bf16_widen(uint16_t h) {
  return __bfloat162float(__ushort_as_bfloat16(h));
}
RR__HD uint16_t rre_bf16_narrow(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
RR__HD void rre_bf16x2_widen(uint32_t h, float *lo, float *hi) {
  __nv_bfloat162_raw r;
  r.x = (unsigned short)h;
  r.y = (unsigned short)(h >> 16);
  float2 f = __bfloat1622float2(__nv_bfloat162(r));
  *lo = f.x;
  *hi = f.y;
}
RR__HD uint32_t rre_bf16x2_narrow(float lo, float hi) {
  __nv_bfloat162_raw r = __floats2bfloat162_rn(lo, hi);
  return (uint32_t)r.x | (uint32_t)r.y << 16;
}
#else
#define RR__ELEM_CUDA_CONV 0
RR__HD float rre_f16_widen(uint16_t h) {
  return rr__half_to_float(h);
}
RR__HD uint16_t rre_f16_narrow(float f) {
  return rr__float_to_half(f);
}
RR__HD float rre_bf16_widen(uint16_t h) {
  return rr__bf16_to_float(h);
}
RR__HD uint16_t rre_bf16_narrow(float f) {
  return rr__float_to_bf16(f);
}
#define RR__E_PAIR_CONV(tag)                                                          \
  RR__HD void rre_##tag##x2_widen(uint32_t h, float *lo, float *hi) {                 \
    *lo = rre_##tag##_widen((uint16_t)h);                                             \
    *hi = rre_##tag##_widen((uint16_t)(h >> 16));                                     \
  }                                                                                   \
  RR__HD uint32_t rre_##tag##x2_narrow(float lo, float hi) {                          \
    return (uint32_t)rre_##tag##_narrow(lo) | (uint32_t)rre_##tag##_narrow(hi) << 16; \
  }
RR__E_PAIR_CONV(f16)
RR__E_PAIR_CONV(bf16)
#endif

/* CNAN: op.c's canonical float NaN narrowed; INF: the infinity pattern (above it, NaNs);
 * QUIET: the quiet bit. */
#define RR__E_HALF_OPS(tag, CNAN, INF, QUIET)                                           \
  RR__HD uint16_t rre_##tag##_result(float r) {                                         \
    return r != r ? (uint16_t)CNAN : rre_##tag##_narrow(r);                             \
  }                                                                                     \
  RR__HD uint32_t rre_##tag##x2_result(float lo, float hi) {                            \
    uint32_t h = rre_##tag##x2_narrow(lo, hi);                                          \
    h = lo != lo ? (h & 0xffff0000u) | CNAN : h;                                        \
    h = hi != hi ? (h & 0x0000ffffu) | (uint32_t)CNAN << 16 : h;                        \
    return h;                                                                           \
  }                                                                                     \
  RR__HD uint16_t rre_##tag##_quiet(uint16_t h) {                                       \
    return (h & 0x7fffu) > INF ? (uint16_t)(h | QUIET) : h;                             \
  }                                                                                     \
  RR__HD uint32_t rre_##tag##x2_quiet(uint32_t h) {                                     \
    uint32_t lo = (h & 0x7fffu) > INF ? QUIET : 0u;                                     \
    uint32_t hi = (h & 0x7fff0000u) > (uint32_t)INF << 16 ? (uint32_t)QUIET << 16 : 0u; \
    return h | lo | hi;                                                                 \
  }                                                                                     \
  RR__HD uint16_t rre_##tag##_sum(uint16_t x, uint16_t y) {                             \
    return rre_##tag##_result(rre_##tag##_widen(x) + rre_##tag##_widen(y));             \
  }                                                                                     \
  RR__HD uint16_t rre_##tag##_prod(uint16_t x, uint16_t y) {                            \
    return rre_##tag##_result(rre_##tag##_widen(x) * rre_##tag##_widen(y));             \
  }                                                                                     \
  /* x when x is NaN or the smaller (op.c: x != x ? x : x < y ? x : y), else y. */      \
  RR__HD uint16_t rre_##tag##_min(uint16_t x, uint16_t y) {                             \
    float fx = rre_##tag##_widen(x), fy = rre_##tag##_widen(y);                         \
    return rre_##tag##_quiet(fx != fx || fx < fy ? x : y);                              \
  }                                                                                     \
  RR__HD uint16_t rre_##tag##_max(uint16_t x, uint16_t y) {                             \
    float fx = rre_##tag##_widen(x), fy = rre_##tag##_widen(y);                         \
    return rre_##tag##_quiet(fx != fx || fx > fy ? x : y);                              \
  }                                                                                     \
  /* The sum's NaN stays a NaN through the division (d >= 2, finite). */                \
  RR__HD uint16_t rre_##tag##_avg(uint16_t x, uint16_t y, float d) {                    \
    return rre_##tag##_result((rre_##tag##_widen(x) + rre_##tag##_widen(y)) / d);       \
  }                                                                                     \
  RR__HD uint32_t rre_##tag##x2_sum(uint32_t x, uint32_t y) {                           \
    float x0, x1, y0, y1;                                                               \
    rre_##tag##x2_widen(x, &x0, &x1);                                                   \
    rre_##tag##x2_widen(y, &y0, &y1);                                                   \
    return rre_##tag##x2_result(x0 + y0, x1 + y1);                                      \
  }                                                                                     \
  RR__HD uint32_t rre_##tag##x2_prod(uint32_t x, uint32_t y) {                          \
    float x0, x1, y0, y1;                                                               \
    rre_##tag##x2_widen(x, &x0, &x1);                                                   \
    rre_##tag##x2_widen(y, &y0, &y1);                                                   \
    return rre_##tag##x2_result(x0 * y0, x1 * y1);                                      \
  }                                                                                     \
  RR__HD uint32_t rre_##tag##x2_min(uint32_t x, uint32_t y) {                           \
    float x0, x1, y0, y1;                                                               \
    rre_##tag##x2_widen(x, &x0, &x1);                                                   \
    rre_##tag##x2_widen(y, &y0, &y1);                                                   \
    uint32_t lo = x0 != x0 || x0 < y0 ? x : y, hi = x1 != x1 || x1 < y1 ? x : y;        \
    return rre_##tag##x2_quiet((lo & 0xffffu) | (hi & 0xffff0000u));                    \
  }                                                                                     \
  RR__HD uint32_t rre_##tag##x2_max(uint32_t x, uint32_t y) {                           \
    float x0, x1, y0, y1;                                                               \
    rre_##tag##x2_widen(x, &x0, &x1);                                                   \
    rre_##tag##x2_widen(y, &y0, &y1);                                                   \
    uint32_t lo = x0 != x0 || x0 > y0 ? x : y, hi = x1 != x1 || x1 > y1 ? x : y;        \
    return rre_##tag##x2_quiet((lo & 0xffffu) | (hi & 0xffff0000u));                    \
  }                                                                                     \
  RR__HD uint32_t rre_##tag##x2_avg(uint32_t x, uint32_t y, float d) {                  \
    float x0, x1, y0, y1;                                                               \
    rre_##tag##x2_widen(x, &x0, &x1);                                                   \
    rre_##tag##x2_widen(y, &y0, &y1);                                                   \
    return rre_##tag##x2_result((x0 + y0) / d, (x1 + y1) / d);                          \
  }
RR__E_HALF_OPS(f16, 0x7e00u, 0x7c00u, 0x0200u)
RR__E_HALF_OPS(bf16, 0x7fc0u, 0x7f80u, 0x0040u)

/* ---- integers ---- */
#define RR__E_INT_OPS(tag, T, U)        \
  RR__HD T rre_##tag##_sum(T x, T y) {  \
    return (T)((U)x + (U)y);            \
  }                                     \
  RR__HD T rre_##tag##_prod(T x, T y) { \
    return (T)((U)x * (U)y);            \
  }                                     \
  RR__HD T rre_##tag##_min(T x, T y) {  \
    return x < y ? x : y;               \
  }                                     \
  RR__HD T rre_##tag##_max(T x, T y) {  \
    return x > y ? x : y;               \
  }                                     \
  RR__HD T rre_##tag##_band(T x, T y) { \
    return (T)(x & y);                  \
  }                                     \
  RR__HD T rre_##tag##_bor(T x, T y) {  \
    return (T)(x | y);                  \
  }                                     \
  RR__HD T rre_##tag##_bxor(T x, T y) { \
    return (T)(x ^ y);                  \
  }
/* uint8 products wrap in unsigned int: uint8 * uint8 promotes to int, and 255 * 255 fits. */
RR__E_INT_OPS(i8, int8_t, uint8_t)
RR__E_INT_OPS(u8, uint8_t, uint32_t)
RR__E_INT_OPS(i32, int32_t, uint32_t)
RR__E_INT_OPS(i64, int64_t, uint64_t)

/* AVG of integers as op.c computes it: 8/32-bit quotients in double (exact, truncating),
 * int64 as integers. The host fake's kernels (tests/fake_cuda) run these. */
RR__HD int8_t rre_i8_avg(int8_t x, int8_t y, double d) {
  return (int8_t)((double)rre_i8_sum(x, y) / d);
}
RR__HD uint8_t rre_u8_avg(uint8_t x, uint8_t y, double d) {
  return (uint8_t)((double)rre_u8_sum(x, y) / d);
}
RR__HD int32_t rre_i32_avg(int32_t x, int32_t y, double d) {
  return (int32_t)((double)rre_i32_sum(x, y) / d);
}
RR__HD int64_t rre_i64_avg(int64_t x, int64_t y, int64_t d) {
  return rre_i64_sum(x, y) / d;
}

/* The same quotients on the device without a division: floor(n / d) as a multiply-high by
 * a magic number made once per launch on the host (Granlund and Montgomery, "Division by
 * invariant integers using multiplication", PLDI 1994, the round-up method), then the sign
 * of the sum put back, which truncates toward zero as C's division and op.c's (double)s / d
 * do. The magnitude n of a wrapped sum is at most 2^31 (32-bit: INT32_MIN; 8-bit: 255) or
 * 2^63 (int64).
 *
 * With l = ceil(log2 d), k = W - 1 + l (W = 32 or 64) and m = ceil(2^k / d) = (2^k + e) / d,
 * 0 <= e < d: n m / 2^k = n / d + n e / (d 2^k), and n e < 2^(W-1) 2^l = 2^k, so for
 * n = q d + r the fraction (r + n e / 2^k) / d stays below 1 and floor(n m / 2^k) = q. As
 * d > 2^(l-1), m < 2^(W-1+l) / 2^(l-1) = 2^W fits a word, and floor(n m / 2^k) is the high
 * word of n m shifted right by l - 1. Valid for 2 <= d <= 2^(W-1); d <= 1 never gets here
 * (AVG by 0 or 1 is the sum, as in op.c). tests/test_cuda_elem.c checks every 8-bit sum
 * against op.c for every d up to 4096 and many above, and 32/64-bit edges and random values. */
typedef struct rre_div32 {
  uint32_t mul, shift;
} rre_div32;
typedef struct rre_div64 {
  uint64_t mul;
  uint32_t shift;
} rre_div64;

/* ceil(log2 d) for d >= 2. */
RR__HD uint32_t rre_ceil_log2(uint64_t d) {
  uint32_t l = 0;
  while (l < 64 && ((uint64_t)1 << l) < d) l++;
  return l;
}
RR__HD rre_div32 rre_div32_make(uint32_t d) {
  uint32_t l = rre_ceil_log2(d);
  rre_div32 m;
  m.mul = (uint32_t)((((uint64_t)1 << (31 + l)) + d - 1) / d);
  m.shift = l - 1;
  return m;
}
/* ceil(2^(63+l) / d) in 64-bit words: 2^(63+l) = 2^32 * 2^(31+l), divided in two steps of
 * long division (the remainder r < d <= 2^31, so r * 2^32 < 2^63). */
RR__HD rre_div64 rre_div64_make(uint32_t d) {
  uint32_t l = rre_ceil_log2(d);
  uint64_t top = (uint64_t)1 << (31 + l);
  uint64_t q1 = top / d, r = top % d;
  uint64_t q0 = (r << 32) / d, r0 = (r << 32) % d;
  rre_div64 m;
  m.mul = (q1 << 32) + q0 + (r0 != 0);
  m.shift = l - 1;
  return m;
}
RR__HD uint32_t rre_div32_apply(uint32_t n, rre_div32 m) {
#if defined(__CUDA_ARCH__)
  return __umulhi(n, m.mul) >> m.shift;
#else
  return (uint32_t)(((uint64_t)n * m.mul) >> 32) >> m.shift;
#endif
}
RR__HD uint64_t rre_div64_apply(uint64_t n, rre_div64 m) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(n, m.mul) >> m.shift;
#else
  return (uint64_t)(((unsigned __int128)n * m.mul) >> 64) >> m.shift;
#endif
}

/* |s| as the unsigned type (INT_MIN's magnitude included), the quotient, its sign back. */
#define RR__E_INT_AVGM(tag, T, U, DIV, W)             \
  RR__HD T rre_##tag##_avgm(T x, T y, DIV m) {        \
    T s = rre_##tag##_sum(x, y);                      \
    W q = DIV##_apply(s < 0 ? (W)0 - (W)s : (W)s, m); \
    return (T)(U)(s < 0 ? (W)0 - q : q);              \
  }
/* int8 in 32-bit ints: the sum sign-extended once, so the compiler finds |s| (IABS) and
 * the negation without repeating the extension at each use. */
RR__HD int8_t rre_i8_avgm(int8_t x, int8_t y, rre_div32 m) {
  int32_t s = rre_i8_sum(x, y);
  uint32_t q = rre_div32_apply((uint32_t)(s < 0 ? -s : s), m);
  return (int8_t)(s < 0 ? -(int32_t)q : (int32_t)q);
}
RR__E_INT_AVGM(i32, int32_t, uint32_t, rre_div32, uint32_t)
RR__E_INT_AVGM(i64, int64_t, uint64_t, rre_div64, uint64_t)
RR__HD uint8_t rre_u8_avgm(uint8_t x, uint8_t y, rre_div32 m) {
  return (uint8_t)rre_div32_apply(rre_u8_sum(x, y), m);
}

/* Four int8 elements in a 32-bit word (the low one first, as in memory), for the kernels'
 * 16-byte vectors: the four wrapped sums in one add (the low seven bits of each byte added,
 * the top bits put back by xor, so no carry crosses a byte), then each byte sign-extended
 * and later packed again by one byte permute each, and divided as above. Lane for lane
 * rre_i8_avgm. (uint8 keeps the element function: nvcc already adds its bytes in place.) */
RR__HD uint32_t rre_x4_sum(uint32_t x, uint32_t y) {
  return ((x & 0x7f7f7f7fu) + (y & 0x7f7f7f7fu)) ^ ((x ^ y) & 0x80808080u);
}
/* PTX's prmt.b32 in its default mode (PTX ISA, "prmt"): result byte n comes from byte
 * (s >> 4n) & 7 of the eight bytes b:a (a the low four), copied when bit 3 of that nibble is
 * clear, else that byte's sign bit replicated over the eight bits. On the host it follows
 * that definition, so the host tests check the selectors; on the device it is the
 * instruction itself (inline PTX: __byte_perm clears bit 3 of each nibble, so it cannot
 * sign-extend). */
RR__HD uint32_t rre_prmt(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
  return r;
#else
  uint64_t v = (uint64_t)b << 32 | a;
  uint32_t r = 0;
  for (int n = 0; n < 4; n++) {
    uint32_t sel = (s >> (4 * n)) & 0xfu, byte = (uint32_t)(v >> (8 * (sel & 7u))) & 0xffu;
    if (sel & 8u) byte = byte & 0x80u ? 0xffu : 0u;
    r |= byte << (8 * n);
  }
  return r;
#endif
}
/* Byte k sign-extended: the byte itself, then its sign three times. */
RR__HD int32_t rre_x4_sext(uint32_t w, uint32_t k) {
  uint32_t sk = 8u | k;
  return (int32_t)rre_prmt(w, 0, k | sk << 4 | sk << 8 | sk << 12);
}
/* The low bytes of a, b, c, d, in that order from the low end. */
RR__HD uint32_t rre_x4_pack(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return rre_prmt(rre_prmt(a, b, 0x0040), rre_prmt(c, d, 0x0040), 0x5410);
}
RR__HD uint32_t rre_i8x4_avgm_lane(uint32_t s4, int k, rre_div32 m) {
  int32_t s = rre_x4_sext(s4, (uint32_t)k);
  uint32_t q = rre_div32_apply((uint32_t)(s < 0 ? -s : s), m);
  return s < 0 ? 0u - q : q;
}
RR__HD uint32_t rre_i8x4_avgm(uint32_t x, uint32_t y, rre_div32 m) {
  uint32_t s4 = rre_x4_sum(x, y);
  return rre_x4_pack(rre_i8x4_avgm_lane(s4, 0, m), rre_i8x4_avgm_lane(s4, 1, m),
                     rre_i8x4_avgm_lane(s4, 2, m), rre_i8x4_avgm_lane(s4, 3, m));
}

#endif /* RR__CUDA_REDUCE_ELEM_CUH_ */
