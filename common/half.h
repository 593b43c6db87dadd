/* float16 (IEEE binary16) and bfloat16 <-> float32, written once for every compiler that
 * needs them: the host reductions (ring/op.c), the DDP wrapper's hooks (ddp/), the CUDA
 * kernels (cuda/reduce_elem.cuh, compiled by nvcc for the device) and the tests.
 *
 * Round to nearest even, NaN stays NaN (quieted, with the payload's top bits, as the F16C
 * instructions do, so the portable and the AVX2 paths of ring/op.c agree bit for bit).
 * Written without branches (every case computed, one selected by masks) so that loops
 * calling them vectorize; plain C11 that is also valid CUDA C++. Device code must be
 * compiled without --use_fast_math: the subnormal paths depend on IEEE arithmetic. */
#ifndef RR__COMMON_HALF_H_
#define RR__COMMON_HALF_H_

#include <stdint.h>
#include <string.h>

#ifndef RR__HD
#if defined(__CUDACC__)
#define RR__HD static __host__ __device__ __forceinline__
#else
#define RR__HD static inline
#endif
#endif

RR__HD uint32_t rr__f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

RR__HD float rr__f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/* c ? a : b for c in {0, 1}, as masks. GCC turns ternaries over computed values back into
 * branches, and a branch around a float op (which may trap) keeps the loop scalar. */
RR__HD uint32_t rr__sel(uint32_t c, uint32_t a, uint32_t b) {
  uint32_t m = 0u - c;
  return (a & m) | (b & ~m);
}

RR__HD float rr__half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu; /* exponent and mantissa */
  /* Rebias the exponent; the mantissa lines up after the shift. */
  uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  /* A NaN gets the quiet bit, as F16C's vcvtph2ps does, so both paths agree. */
  uint32_t special = (em << 13) | 0x7f800000u | ((uint32_t)(em > 0x7c00u) << 22);
  /* Subnormals are mantissa * 2^-24: exact in float, and no FTZ/DAZ can touch the result. */
  uint32_t sub = rr__f32_bits((float)(int32_t)em * 0x1p-24f);
  uint32_t mag = rr__sel(em >= 0x7c00u, special, rr__sel(em >= 0x0400u, normal, sub));
  return rr__f32_from_bits(mag | sign);
}

RR__HD uint16_t rr__float_to_half(float f) {
  uint32_t x = rr__f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  /* Normal results: adding 0xfff plus the lowest kept bit makes the carry round to nearest
   * even; a carry out of the top (from 65520 up) lands on the infinity pattern. */
  uint32_t normal = (ax - ((127u - 15u) << 23) + 0xfffu + ((ax >> 13) & 1u)) >> 13;
  /* Below 2^-14 the result is a multiple of 2^-24: adding 0.5 puts 2^-24 at float's last
   * mantissa bit, so the FPU's own round-to-nearest-even does the rounding. Float inputs
   * that DAZ would flush are far below 2^-25 and round to 0 either way. */
  uint32_t sub = rr__f32_bits(rr__f32_from_bits(ax) + 0.5f) - 0x3f000000u;
  /* NaN: quiet, with the payload's top bits, as F16C's vcvtps2ph. */
  uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  uint32_t mag =
      rr__sel(ax > 0x7f800000u, nan,
              rr__sel(ax >= 0x47800000u, 0x7c00u, rr__sel(ax >= 0x38800000u, normal, sub)));
  return (uint16_t)(mag | sign);
}

RR__HD float rr__bf16_to_float(uint16_t b) {
  /* Quiet a signalling NaN, as the float16 conversions do. */
  uint32_t quiet = (uint32_t)((b & 0x7fffu) > 0x7f80u) << 22;
  return rr__f32_from_bits(((uint32_t)b << 16) | quiet);
}

RR__HD uint16_t rr__float_to_bf16(float f) {
  uint32_t x = rr__f32_bits(f);
  /* bfloat16 is float's top half, so rounding is one add: its carry handles subnormals,
   * the mantissa overflowing into the exponent, and overflow to infinity. */
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x0040u;
  return (uint16_t)rr__sel((x & 0x7fffffffu) > 0x7f800000u, nan, rounded);
}

#endif /* RR__COMMON_HALF_H_ */
