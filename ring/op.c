/* Host reductions for every dtype x op (the names, sizes and which ops each dtype has are
 * common/dtype.c's).
 *
 * Every (dtype, op) pair is one plain loop `d[i] = STORE(ELEM(LOAD(x[i]), LOAD(y[i])))`
 * stamped out by a macro, so the vectorizer sees a simple element expression and the
 * switch on dtype and op happens once per call (a table lookup), never per element. The
 * loops take no restrict pointers: dst may be exactly a or b, and GCC's runtime alias check
 * accepts distance 0, so the in-place calls of the ring stay vectorized.
 *
 * Each loop exists twice: for the x86-64 baseline (SSE2) and for AVX2, chosen per call from
 * the CPU's features. On AVX2 machines float16 and bfloat16 use hand-written loops instead
 * (F16C conversions for float16); their scalar tails use the portable conversions, and tests
 * compare both paths bit for bit (rr__op_force_portable).
 */

/* -O2 in GCC 12 vectorizes only loops whose trip count is a known multiple of the vector
 * width; these loops are the CPU all-reduce's inner loop and need the full vectorizer.
 * (Clang vectorizes them at -O2 and has no such pragma.) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "ring/op.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/half.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define RR__X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define RR__X86 0
#endif

/* ---------------------------------------------------------------------------------------------
 * Element operations. Integers wrap by computing in the unsigned type (signed overflow is
 * undefined); converting back to the signed type is modular in GCC and Clang.
 */

#define RR__INT_ELEMS(tag, T, U)         \
  static inline T tag##_sum(T x, T y) {  \
    return (T)((U)x + (U)y);             \
  }                                      \
  static inline T tag##_prod(T x, T y) { \
    return (T)((U)x * (U)y);             \
  }                                      \
  static inline T tag##_min(T x, T y) {  \
    return x < y ? x : y;                \
  }                                      \
  static inline T tag##_max(T x, T y) {  \
    return x > y ? x : y;                \
  }                                      \
  static inline T tag##_band(T x, T y) { \
    return (T)(x & y);                   \
  }                                      \
  static inline T tag##_bor(T x, T y) {  \
    return (T)(x | y);                   \
  }                                      \
  static inline T tag##_bxor(T x, T y) { \
    return (T)(x ^ y);                   \
  }

RR__INT_ELEMS(i8, int8_t, uint8_t)
RR__INT_ELEMS(u8, uint8_t, uint8_t)
RR__INT_ELEMS(i32, int32_t, uint32_t)
RR__INT_ELEMS(i64, int64_t, uint64_t)

/* A NaN from arithmetic becomes the positive quiet NaN: when both operands are NaN, which
 * payload an add or multiply returns depends on the operand order the compiler picks for
 * the instruction, so without this two builds or two code paths could disagree.
 *
 * MIN/MAX return x if it is NaN, else y if that is (the comparison is false): x != x
 * catches the first case, and both comparisons are always evaluated because one guarded by
 * the other could trap (-ftrapping-math), which stops the vectorizer from flattening it. */
#define RR__FLT_ELEMS(tag, T)            \
  static inline T tag##_sum(T x, T y) {  \
    return tag##_canon(x + y);           \
  }                                      \
  static inline T tag##_prod(T x, T y) { \
    return tag##_canon(x * y);           \
  }                                      \
  static inline T tag##_min(T x, T y) {  \
    T m = x < y ? x : y;                 \
    return x != x ? x : m;               \
  }                                      \
  static inline T tag##_max(T x, T y) {  \
    T m = x > y ? x : y;                 \
    return x != x ? x : m;               \
  }

/* Selected by mask: a ternary becomes a branch around the NaN case, and a loop with a
 * branch stays scalar. */
static inline float f32_canon(float r) {
  return rr__f32_from_bits(rr__sel(r != r, 0x7fc00000u, rr__f32_bits(r)));
}

/* (The 64-bit mask form does not vectorize on SSE2; a select on the bits does.) */
static inline double f64_canon(double r) {
  uint64_t u;
  memcpy(&u, &r, sizeof u);
  u = r != r ? 0x7ff8000000000000u : u;
  memcpy(&r, &u, sizeof r);
  return r;
}

RR__FLT_ELEMS(f32, float)
RR__FLT_ELEMS(f64, double)

/* AVG's division. Integer quotients of 8- and 32-bit values are computed in double, which
 * vectorizes where integer division does not, and is exact: for |s| < 2^31 a non-integer
 * s/d is at least 1/d from an integer while double's rounding error is below 2^-22/d, so
 * truncation gives C's s / d. int64 has no such room and divides as integers. */
static inline int8_t i8_div(int8_t s, double d) {
  return (int8_t)((double)s / d);
}
static inline uint8_t u8_div(uint8_t s, double d) {
  return (uint8_t)((double)s / d);
}
static inline int32_t i32_div(int32_t s, double d) {
  return (int32_t)((double)s / d);
}
static inline int64_t i64_div(int64_t s, int64_t d) {
  return s / d;
}
static inline float f32_div(float s, float d) {
  return s / d;
}
static inline double f64_div(double s, double d) {
  return s / d;
}

#define RR__ID(v) (v)

/* ---------------------------------------------------------------------------------------------
 * Loops. isa is gen (baseline) or avx2; its attribute comes from RR__ATTR_<isa>.
 */

typedef void (*rr__kernel)(void *dst, const void *a, const void *b, size_t n, int div);
typedef void (*rr__scale_kernel)(void *buf, size_t n, int div);

#define RR__ATTR_gen
#if RR__X86
#define RR__ATTR_avx2 __attribute__((target("avx2")))
#endif

#define RR__BINARY(isa, name, T, LOAD, STORE, ELEM)                                             \
  RR__ATTR_##isa static void name(void *dst, const void *a, const void *b, size_t n, int div) { \
    T *d = dst;                                                                                 \
    const T *x = a, *y = b;                                                                     \
    for (size_t i = 0; i < n; i++) d[i] = STORE(ELEM(LOAD(x[i]), LOAD(y[i])));                  \
  }

/* div <= 1 leaves the sum as it is (x / 1 == x for every type here, NaN included). */
#define RR__AVG(isa, name, sum_loop, T, LOAD, STORE, SUM, D, DIV)                               \
  RR__ATTR_##isa static void name(void *dst, const void *a, const void *b, size_t n, int div) { \
    if (div <= 1) {                                                                             \
      sum_loop(dst, a, b, n, 0);                                                                \
      return;                                                                                   \
    }                                                                                           \
    T *d = dst;                                                                                 \
    const T *x = a, *y = b;                                                                     \
    const D dv = (D)div;                                                                        \
    for (size_t i = 0; i < n; i++) d[i] = STORE(DIV(SUM(LOAD(x[i]), LOAD(y[i])), dv));          \
  }

#define RR__SCALE(isa, name, T, LOAD, STORE, D, DIV)                  \
  RR__ATTR_##isa static void name(void *buf, size_t n, int div) {     \
    if (div <= 1) return;                                             \
    T *p = buf;                                                       \
    const D dv = (D)div;                                              \
    for (size_t i = 0; i < n; i++) p[i] = STORE(DIV(LOAD(p[i]), dv)); \
  }

/* All loops of one dtype. ctag names the element operations (the compute type), D the
 * divisor's type. */
#define RR__COMMON_LOOPS(isa, tag, ctag, T, LOAD, STORE, D)                                     \
  RR__BINARY(isa, isa##_##tag##_sum, T, LOAD, STORE, ctag##_sum)                                \
  RR__BINARY(isa, isa##_##tag##_prod, T, LOAD, STORE, ctag##_prod)                              \
  RR__BINARY(isa, isa##_##tag##_min, T, LOAD, STORE, ctag##_min)                                \
  RR__BINARY(isa, isa##_##tag##_max, T, LOAD, STORE, ctag##_max)                                \
  RR__AVG(isa, isa##_##tag##_avg, isa##_##tag##_sum, T, LOAD, STORE, ctag##_sum, D, ctag##_div) \
  RR__SCALE(isa, isa##_##tag##_scale, T, LOAD, STORE, D, ctag##_div)

#define RR__INT_LOOPS(isa, tag, T, D)                                \
  RR__COMMON_LOOPS(isa, tag, tag, T, RR__ID, RR__ID, D)              \
  RR__BINARY(isa, isa##_##tag##_band, T, RR__ID, RR__ID, tag##_band) \
  RR__BINARY(isa, isa##_##tag##_bor, T, RR__ID, RR__ID, tag##_bor)   \
  RR__BINARY(isa, isa##_##tag##_bxor, T, RR__ID, RR__ID, tag##_bxor)

/* Integers and the types the hardware computes in directly. */
#define RR__NATIVE_LOOPS(isa)                                   \
  RR__INT_LOOPS(isa, i8, int8_t, double)                        \
  RR__INT_LOOPS(isa, u8, uint8_t, double)                       \
  RR__INT_LOOPS(isa, i32, int32_t, double)                      \
  RR__INT_LOOPS(isa, i64, int64_t, int64_t)                     \
  RR__COMMON_LOOPS(isa, f32, f32, float, RR__ID, RR__ID, float) \
  RR__COMMON_LOOPS(isa, f64, f64, double, RR__ID, RR__ID, double)

RR__NATIVE_LOOPS(gen)
RR__COMMON_LOOPS(gen, f16, f32, uint16_t, rr__half_to_float, rr__float_to_half, float)
RR__COMMON_LOOPS(gen, bf16, f32, uint16_t, rr__bf16_to_float, rr__float_to_bf16, float)
#if RR__X86
RR__NATIVE_LOOPS(avx2)
/* Reductions of the 16-bit floats have hand-written AVX2 loops (below); scaling, once per
 * AVG on one rank, stays portable. */
RR__SCALE(avx2, avx2_f16_scale, uint16_t, rr__half_to_float, rr__float_to_half, float, f32_div)
RR__SCALE(avx2, avx2_bf16_scale, uint16_t, rr__bf16_to_float, rr__float_to_bf16, float, f32_div)
#endif

/* ---------------------------------------------------------------------------------------------
 * float16 and bfloat16 on AVX2: eight elements widened to float32 per step. GCC vectorizes
 * the portable loops poorly (16/32-bit lane shuffling around every select), and float16
 * has F16C's one-instruction conversions. Every vector step is the element step's exact
 * counterpart (vminps returns its second operand unless the first is smaller, as
 * x < y ? x : y does; the NaN and rounding selects are the same), and the scalar tails use
 * the portable code, so the two paths agree bit for bit.
 */
#if RR__X86
#define RR__VEC __attribute__((target("avx2,f16c")))

RR__VEC static inline __m256 rr__v_canon(__m256 r) {
  __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  return _mm256_blendv_ps(r, qnan, _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
}
RR__VEC static inline __m256 rr__v_sum(__m256 x, __m256 y) {
  return rr__v_canon(_mm256_add_ps(x, y));
}
RR__VEC static inline __m256 rr__v_prod(__m256 x, __m256 y) {
  return rr__v_canon(_mm256_mul_ps(x, y));
}
RR__VEC static inline __m256 rr__v_min(__m256 x, __m256 y) {
  return _mm256_blendv_ps(_mm256_min_ps(x, y), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
RR__VEC static inline __m256 rr__v_max(__m256 x, __m256 y) {
  return _mm256_blendv_ps(_mm256_max_ps(x, y), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

RR__VEC static inline __m256 rr__v_load_h(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
RR__VEC static inline void rr__v_store_h(uint16_t *p, __m256 v) {
  _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* No quieting here, unlike rr__bf16_to_float: every result goes through rr__v_store_bf, which
 * quiets any NaN, so the result is the same. */
RR__VEC static inline __m256 rr__v_load_bf(const uint16_t *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
RR__VEC static inline void rr__v_store_bf(uint16_t *p, __m256 v) {
  __m256i x = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
  __m256i nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  __m256i r =
      _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  /* Every lane is below 0x10000, so the saturating pack just narrows. */
  __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128((__m128i *)p, packed);
}

/* Loads of a block come before its store, so dst == a or dst == b is safe. */
#define RR__VEC_BINARY(name, VLOAD, VSTORE, LOAD, STORE, VOP, ELEM)                      \
  RR__VEC static void name(void *dst, const void *a, const void *b, size_t n, int div) { \
    uint16_t *d = dst;                                                                   \
    const uint16_t *x = a, *y = b;                                                       \
    size_t i = 0;                                                                        \
    for (; i + 8 <= n; i += 8) VSTORE(d + i, VOP(VLOAD(x + i), VLOAD(y + i)));           \
    for (; i < n; i++) d[i] = STORE(ELEM(LOAD(x[i]), LOAD(y[i])));                       \
  }

#define RR__VEC_AVG(name, sum_loop, VLOAD, VSTORE, LOAD, STORE)                          \
  RR__VEC static void name(void *dst, const void *a, const void *b, size_t n, int div) { \
    if (div <= 1) {                                                                      \
      sum_loop(dst, a, b, n, 0);                                                         \
      return;                                                                            \
    }                                                                                    \
    uint16_t *d = dst;                                                                   \
    const uint16_t *x = a, *y = b;                                                       \
    const float dv = (float)div;                                                         \
    const __m256 vdv = _mm256_set1_ps(dv);                                               \
    size_t i = 0;                                                                        \
    for (; i + 8 <= n; i += 8)                                                           \
      VSTORE(d + i, _mm256_div_ps(rr__v_sum(VLOAD(x + i), VLOAD(y + i)), vdv));          \
    for (; i < n; i++) d[i] = STORE(f32_div(f32_sum(LOAD(x[i]), LOAD(y[i])), dv));       \
  }

#define RR__VEC_LOOPS(tag, VLOAD, VSTORE, LOAD, STORE)                                \
  RR__VEC_BINARY(avx2_##tag##_sum, VLOAD, VSTORE, LOAD, STORE, rr__v_sum, f32_sum)    \
  RR__VEC_BINARY(avx2_##tag##_prod, VLOAD, VSTORE, LOAD, STORE, rr__v_prod, f32_prod) \
  RR__VEC_BINARY(avx2_##tag##_min, VLOAD, VSTORE, LOAD, STORE, rr__v_min, f32_min)    \
  RR__VEC_BINARY(avx2_##tag##_max, VLOAD, VSTORE, LOAD, STORE, rr__v_max, f32_max)    \
  RR__VEC_AVG(avx2_##tag##_avg, avx2_##tag##_sum, VLOAD, VSTORE, LOAD, STORE)

RR__VEC_LOOPS(f16, rr__v_load_h, rr__v_store_h, rr__half_to_float, rr__float_to_half)
RR__VEC_LOOPS(bf16, rr__v_load_bf, rr__v_store_bf, rr__bf16_to_float, rr__float_to_bf16)
#endif

/* ---------------------------------------------------------------------------------------------
 * Dispatch tables, indexed [dtype][op]. NULL marks an op the dtype does not have.
 */

#define RR__ROW(isa, tag, band, bor, bxor)                                                        \
  {                                                                                               \
    [RR_SUM] = isa##_##tag##_sum, [RR_PROD] = isa##_##tag##_prod, [RR_MIN] = isa##_##tag##_min,   \
    [RR_MAX] = isa##_##tag##_max, [RR_AVG] = isa##_##tag##_avg, [RR_BAND] = band, [RR_BOR] = bor, \
    [RR_BXOR] = bxor                                                                              \
  }
#define RR__INT_ROW(isa, tag) \
  RR__ROW(isa, tag, isa##_##tag##_band, isa##_##tag##_bor, isa##_##tag##_bxor)
#define RR__FLT_ROW(isa, tag) RR__ROW(isa, tag, NULL, NULL, NULL)

#define RR__TABLE(isa)                                                            \
  {                                                                               \
    [RR_INT8] = RR__INT_ROW(isa, i8), [RR_UINT8] = RR__INT_ROW(isa, u8),          \
    [RR_INT32] = RR__INT_ROW(isa, i32), [RR_INT64] = RR__INT_ROW(isa, i64),       \
    [RR_FLOAT16] = RR__FLT_ROW(isa, f16), [RR_BFLOAT16] = RR__FLT_ROW(isa, bf16), \
    [RR_FLOAT32] = RR__FLT_ROW(isa, f32), [RR_FLOAT64] = RR__FLT_ROW(isa, f64)    \
  }

#define RR__SCALES(isa)                                                                    \
  {                                                                                        \
    [RR_INT8] = isa##_i8_scale, [RR_UINT8] = isa##_u8_scale, [RR_INT32] = isa##_i32_scale, \
    [RR_INT64] = isa##_i64_scale, [RR_FLOAT16] = isa##_f16_scale,                          \
    [RR_BFLOAT16] = isa##_bf16_scale, [RR_FLOAT32] = isa##_f32_scale,                      \
    [RR_FLOAT64] = isa##_f64_scale                                                         \
  }

static const rr__kernel rr__gen_kernels[RR_NUM_DTYPES][RR_NUM_OPS] = RR__TABLE(gen);
static const rr__scale_kernel rr__gen_scales[RR_NUM_DTYPES] = RR__SCALES(gen);

#if RR__X86
static const rr__kernel rr__avx2_kernels[RR_NUM_DTYPES][RR_NUM_OPS] = RR__TABLE(avx2);
static const rr__scale_kernel rr__avx2_scales[RR_NUM_DTYPES] = RR__SCALES(avx2);
#endif

/* Set only by tests, to compare the paths; atomic because a test may flip it while another
 * thread reduces. */
static atomic_int rr__portable_only;

/* Whether the AVX2 + F16C loops can run (the OS saving YMM state included), found once:
 * cpuid can cost microseconds under a hypervisor. Threads racing here store the same value.
 * F16C is asked of cpuid directly because older Clang's __builtin_cpu_supports lacks it. */
static atomic_int rr__cpu_avx2 = -1;

static int rr__cpu_has_avx2(void) {
#if RR__X86
  int ok = atomic_load_explicit(&rr__cpu_avx2, memory_order_relaxed);
  if (ok < 0) {
    unsigned eax, ebx, ecx, edx;
    ok = __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
         (ecx & bit_F16C) != 0;
    atomic_store_explicit(&rr__cpu_avx2, ok, memory_order_relaxed);
  }
  return ok;
#else
  return 0;
#endif
}

static int rr__use_avx2(void) {
  return !atomic_load_explicit(&rr__portable_only, memory_order_relaxed) && rr__cpu_has_avx2();
}

int rr__op_force_portable(int on) {
  atomic_store_explicit(&rr__portable_only, on != 0, memory_order_relaxed);
  return rr__cpu_has_avx2();
}

static rr__kernel rr__kernel_for(rr_dtype dtype, rr_op op) {
  if (!rr__dtype_valid(dtype) || !rr__op_valid(op)) return NULL;
#if RR__X86
  if (rr__use_avx2()) return rr__avx2_kernels[dtype][op];
#endif
  return rr__gen_kernels[dtype][op];
}

/* Reducing with an unchecked (dtype, op) is a bug in the caller, which must have called
 * rr__op_check; carrying on would hand back unreduced data as if it were a result. */
static void rr__op_bug(const char *fn, int dtype, int op) {
  fprintf(stderr, "ringreduce: internal error: %s called with dtype %d, op %d\n", fn, dtype, op);
  abort();
}

void rr__reduce(void *dst, const void *a, const void *b, size_t n, rr_dtype dtype, rr_op op,
                int avg_div) {
  rr__kernel k = rr__kernel_for(dtype, op);
  if (k == NULL) rr__op_bug("rr__reduce", (int)dtype, (int)op);
  if (n > 0) k(dst, a, b, n, avg_div);
}

void rr__avg_scale(void *buf, size_t n, rr_dtype dtype, int div) {
  if (!rr__dtype_valid(dtype)) rr__op_bug("rr__avg_scale", (int)dtype, (int)RR_AVG);
  if (n == 0) return;
#if RR__X86
  if (rr__use_avx2()) {
    rr__avx2_scales[dtype](buf, n, div);
    return;
  }
#endif
  rr__gen_scales[dtype](buf, n, div);
}
