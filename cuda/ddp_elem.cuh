/* Per-element work of the DDP wrapper on CUDA gradients (cuda/ddp.cu runs these on the
 * device), written once for the device and for a host test (tests/test_ddp_elem.c) that
 * compares them with ddp/hooks.c's host loops bit for bit. Plain C11 that is also CUDA C++,
 * as cuda/reduce_elem.cuh, whose float16 / bfloat16 conversions (op.c's bit recipes) it
 * uses.
 *
 * What the host path computes, element by element (ddp/hooks.c):
 *   scale       grad -> bucket times 1/world, in the type's op-math (float for half,
 *               bfloat16 and float; double for double), scalar rounded to it first
 *   divide      the bucket divided by world in place (torch's allreduce_hook)
 *   compress    fp16/bf16 hooks: round to the 16-bit wire type (float64 through float by
 *               round-to-odd, so the two roundings equal one), divide in float, round again
 *   decompress  the 16-bit result widened or rounded to the gradient's type
 *
 * The device must give the same bits as the host, NaNs included. Arithmetic rounding is the
 * same by IEEE 754 (no --use_fast_math: IEEE division, no flush to zero; a lone multiply or
 * divide is never contracted into an FMA). NaNs are not: x86 (and arm64) return a NaN
 * operand quieted with its payload, and convert NaNs between float and double keeping the
 * payload's top bits, while a GPU returns its canonical NaN (0x7fffffff). So every operation
 * that can see a NaN checks for it and builds the x86 result from the bits. On the host that
 * branch runs too, in place of the hardware operation, so the host test
 * (tests/test_ddp_elem.c) proves the built bits are the hardware's.
 */
#ifndef RR__CUDA_DDP_ELEM_CUH_
#define RR__CUDA_DDP_ELEM_CUH_

#include <math.h>
#include <stdint.h>

#include "cuda/reduce_elem.cuh"

/* ---- NaN-propagating arithmetic and conversions, as x86 does them ---- */

RR__HD float rrd_f32_quiet(float x) {
  return rr__f32_from_bits(rr__f32_bits(x) | 0x00400000u);
}
RR__HD double rrd_f64_quiet(double x) {
  return rre_f64_from_bits(rre_f64_bits(x) | 0x0008000000000000ull);
}
/* x * s and x / s for a finite non-zero, non-NaN s (1/world, world): only x can be NaN. */
RR__HD float rrd_f32_mul(float x, float s) {
  return x != x ? rrd_f32_quiet(x) : x * s;
}
RR__HD float rrd_f32_div(float x, float s) {
  return x != x ? rrd_f32_quiet(x) : x / s;
}
RR__HD double rrd_f64_mul(double x, double s) {
  return x != x ? rrd_f64_quiet(x) : x * s;
}
RR__HD double rrd_f64_div(double x, double s) {
  return x != x ? rrd_f64_quiet(x) : x / s;
}

/* double -> float (cvtsd2ss): round to nearest even; a NaN keeps its sign and the top 22
 * payload bits, quieted. */
RR__HD float rrd_f64_to_f32(double x) {
  if (x != x) {
    uint64_t u = rre_f64_bits(x);
    return rr__f32_from_bits(((uint32_t)(u >> 32) & 0x80000000u) | 0x7fc00000u |
                             ((uint32_t)(u >> 29) & 0x003fffffu));
  }
  return (float)x;
}
/* float -> double (cvtss2sd): exact; a NaN keeps its sign and payload, quieted. */
RR__HD double rrd_f32_to_f64(float f) {
  if (f != f) {
    uint32_t u = rr__f32_bits(f);
    return rre_f64_from_bits(((uint64_t)(u & 0x80000000u) << 32) | 0x7ff8000000000000ull |
                             ((uint64_t)(u & 0x003fffffu) << 29));
  }
  return (double)f;
}

/* ddp/hooks.c's rr__f64_to_f32_odd: truncate toward zero, set the last bit when inexact, so that a
 * second rounding to half or bfloat16 equals one direct rounding from double. */
RR__HD float rrd_f64_to_f32_odd(double x) {
  float f = rrd_f64_to_f32(x);
  if (x != x || (double)f == x) return f;
  uint32_t u = rr__f32_bits(f);
  if (fabs((double)f) > fabs(x)) u--; /* rounded away from zero: step back toward it */
  u |= 1u;
  return rr__f32_from_bits(u);
}

/* ---- the four operations; wire16: 1 for float16, 0 for bfloat16 ---- */

RR__HD uint16_t rrd_to16(float f, int wire16) {
  return wire16 ? rr__float_to_half(f) : rr__float_to_bf16(f);
}
RR__HD float rrd_from16(uint16_t h, int wire16) {
  return wire16 ? rr__half_to_float(h) : rr__bf16_to_float(h);
}

/* scale: x * (1/world) in op-math; s = (float)(1.0 / world), s64 = 1.0 / world. */
RR__HD float rrd_scale_f32(float x, float s) {
  return rrd_f32_mul(x, s);
}
RR__HD double rrd_scale_f64(double x, double s64) {
  return rrd_f64_mul(x, s64);
}
RR__HD uint16_t rrd_scale_f16(uint16_t x, float s) {
  return rr__float_to_half(rrd_f32_mul(rr__half_to_float(x), s));
}
RR__HD uint16_t rrd_scale_bf16(uint16_t x, float s) {
  return rr__float_to_bf16(rrd_f32_mul(rr__bf16_to_float(x), s));
}

/* divide: x / world; w = (float)world (half, bfloat16, float) or (double)world. */
RR__HD float rrd_divide_f32(float x, float w) {
  return rrd_f32_div(x, w);
}
RR__HD double rrd_divide_f64(double x, double w) {
  return rrd_f64_div(x, w);
}
RR__HD uint16_t rrd_divide_f16(uint16_t x, float w) {
  return rr__float_to_half(rrd_f32_div(rr__half_to_float(x), w));
}
RR__HD uint16_t rrd_divide_bf16(uint16_t x, float w) {
  return rr__float_to_bf16(rrd_f32_div(rr__bf16_to_float(x), w));
}

/* compress, second half (shared by every source type): the wire value h divided by world in
 * float, through double and back as ddp/hooks.c's rr__to16((double)(f / w), RR_FLOAT32, wire). */
RR__HD uint16_t rrd_compress_div(uint16_t h, float w, int wire16) {
  float q = rrd_f32_div(rrd_from16(h, wire16), w);
  return rrd_to16(rrd_f64_to_f32(rrd_f32_to_f64(q)), wire16);
}
/* compress from each gradient type: ddp/hooks.c loads the element as double (rr__load), rounds it
 * to float (by round-to-odd from double), then to the wire type. */
RR__HD uint16_t rrd_compress_f32(float x, float w, int wire16) {
  return rrd_compress_div(rrd_to16(rrd_f64_to_f32(rrd_f32_to_f64(x)), wire16), w, wire16);
}
RR__HD uint16_t rrd_compress_f64(double x, float w, int wire16) {
  return rrd_compress_div(rrd_to16(rrd_f64_to_f32_odd(x), wire16), w, wire16);
}
RR__HD uint16_t rrd_compress_f16(uint16_t x, float w, int wire16) {
  return rrd_compress_f32(rr__half_to_float(x), w, wire16);
}
RR__HD uint16_t rrd_compress_bf16(uint16_t x, float w, int wire16) {
  return rrd_compress_f32(rr__bf16_to_float(x), w, wire16);
}

/* decompress: the wire value as float, then stored in the gradient's type. */
RR__HD float rrd_decompress_f32(uint16_t h, int wire16) {
  return rrd_from16(h, wire16);
}
RR__HD double rrd_decompress_f64(uint16_t h, int wire16) {
  return rrd_f32_to_f64(rrd_from16(h, wire16));
}
RR__HD uint16_t rrd_decompress_f16(uint16_t h, int wire16) {
  return rr__float_to_half(rrd_from16(h, wire16));
}
RR__HD uint16_t rrd_decompress_bf16(uint16_t h, int wire16) {
  return rr__float_to_bf16(rrd_from16(h, wire16));
}

#endif /* RR__CUDA_DDP_ELEM_CUH_ */
