// The float16 / bfloat16 conversions the CUDA kernels use (cuda_fp16.h: __half2float,
// __float2half_rn, __half22float2, __floats2half2_rn; cuda_bf16.h: __bfloat162float,
// __float2bfloat16_rn and their pair forms) against common/half.h's, which ring/op.c uses,
// bit for bit for every input that is not a NaN. Compiled by nvcc for the host, so what runs
// are the headers' host versions: integer code that models the PTX instructions
// (cvt.f32.f16, cvt.rn.f16.f32, cvt.rn.bf16.f32). For bfloat16 below sm_80 the device runs
// that same source (the header's NV_IF_ELSE_TARGET(NV_PROVIDES_SM_80, cvt, this code)); on
// newer GPUs the instructions themselves are only checked on a GPU (test_cuda kernel).
//
//   - widening: all 65536 inputs of each type;
//   - narrowing, float16 and bfloat16: by default every rounding case: all floats whose bits
//     below the rounding position are 0, 1, a tie, a tie +- 1, all ones, with every pattern
//     above it (for float16 results below 2^-14 the rounding position moves up, and those
//     ties are among the patterns above bit 13), and 2^24 random floats; with --all, all
//     2^32 floats;
//   - the round trip narrow(widen(h)): h for a number, h with its quiet bit set for a NaN
//     (common/half.h), which is what cuda/reduce_elem.cuh's MIN/MAX rely on;
//   - NaNs: both sides give a NaN; which NaN the CUDA versions give is printed (the element
//     functions never let it reach a result).
//
//   test_cuda_conv [--all]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/half.h"

static long g_fail, g_checks;

#define FAIL(...)                                   \
  do {                                              \
    if (g_fail++ < 10) printf("FAIL " __VA_ARGS__); \
  } while (0)

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float ffrom(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static bool nan16(uint16_t h) {
  return (h & 0x7fffu) > 0x7c00u;
}
static bool nanbf(uint16_t h) {
  return (h & 0x7fffu) > 0x7f80u;
}
static bool nan32(uint32_t u) {
  return (u & 0x7fffffffu) > 0x7f800000u;
}

static uint16_t cu_f2h(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
static uint16_t cu_f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// One float through both narrowings, both implementations.
static void narrow_one(uint32_t u) {
  float f = ffrom(u);
  uint16_t c = cu_f2h(f), r = rr__float_to_half(f);
  uint16_t cb = cu_f2bf(f), rb = rr__float_to_bf16(f);
  g_checks += 2;
  if (nan32(u)) {
    if (!nan16(c) || !nan16(r))
      FAIL("float16 of NaN 0x%08x: 0x%04x (CUDA), 0x%04x (half.h)\n", u, c, r);
    if (!nanbf(cb) || !nanbf(rb))
      FAIL("bfloat16 of NaN 0x%08x: 0x%04x (CUDA), 0x%04x (half.h)\n", u, cb, rb);
    return;
  }
  if (c != r) FAIL("float16 of 0x%08x (%.9g): 0x%04x (CUDA), 0x%04x (half.h)\n", u, f, c, r);
  if (cb != rb) FAIL("bfloat16 of 0x%08x (%.9g): 0x%04x (CUDA), 0x%04x (half.h)\n", u, f, cb, rb);
}

static uint64_t g_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd() {  // splitmix64
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int main(int argc, char **argv) {
  bool all = argc > 1 && !strcmp(argv[1], "--all");
  // How the CUDA widenings return NaNs: as 0x7fffffff, or as the input's bits moved up.
  int nan_f16_canon = 0, nan_f16_kept = 0, nan_bf_canon = 0, nan_bf_kept = 0;

  // Widening, all inputs; the round trips.
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    uint32_t c = fbits(__half2float(__ushort_as_half(h))), r = fbits(rr__half_to_float(h));
    uint32_t cb = fbits(__bfloat162float(__ushort_as_bfloat16(h))),
             rb = fbits(rr__bf16_to_float(h));
    g_checks += 4;
    if (nan16(h)) {
      if (!nan32(c) || !nan32(r))
        FAIL("widened float16 NaN 0x%04x: 0x%08x (CUDA), 0x%08x (half.h)\n", h, c, r);
      nan_f16_canon += c == 0x7fffffffu;
      nan_f16_kept +=
          c == ((uint32_t)(h & 0x8000u) << 16 | 0x7f800000u | (uint32_t)(h & 0x3ffu) << 13);
      if (rr__float_to_half(ffrom(r)) != (h | 0x0200u))
        FAIL("float16 NaN 0x%04x does not come back quieted from half.h\n", h);
    } else {
      if (c != r) FAIL("widened float16 0x%04x: 0x%08x (CUDA), 0x%08x (half.h)\n", h, c, r);
      if (rr__float_to_half(ffrom(r)) != h || cu_f2h(ffrom(c)) != h)
        FAIL("float16 0x%04x does not come back from its float32\n", h);
    }
    if (nanbf(h)) {
      if (!nan32(cb) || !nan32(rb))
        FAIL("widened bfloat16 NaN 0x%04x: 0x%08x (CUDA), 0x%08x (half.h)\n", h, cb, rb);
      nan_bf_canon += cb == 0x7fffffffu;
      nan_bf_kept += cb == (uint32_t)h << 16;
      if (rr__float_to_bf16(ffrom(rb)) != (h | 0x0040u))
        FAIL("bfloat16 NaN 0x%04x does not come back quieted from half.h\n", h);
    } else {
      if (cb != rb) FAIL("widened bfloat16 0x%04x: 0x%08x (CUDA), 0x%08x (half.h)\n", h, cb, rb);
      if (rr__float_to_bf16(ffrom(rb)) != h || cu_f2bf(ffrom(cb)) != h)
        FAIL("bfloat16 0x%04x does not come back from its float32\n", h);
    }
    // The pair forms, lane for lane the scalar ones (the kernels' vector path).
    uint16_t h2 = (uint16_t)(i * 40503u);
    __half2_raw p;
    p.x = h, p.y = h2;
    float2 w = __half22float2(__half2(p));
    __nv_bfloat162_raw pb;
    pb.x = h, pb.y = h2;
    float2 wb = __bfloat1622float2(__nv_bfloat162(pb));
    __half2_raw n2 = __floats2half2_rn(w.x, w.y);
    __nv_bfloat162_raw nb2 = __floats2bfloat162_rn(wb.x, wb.y);
    g_checks += 4;
    if (fbits(w.x) != c || fbits(w.y) != fbits(__half2float(__ushort_as_half(h2))) ||
        fbits(wb.x) != cb || fbits(wb.y) != fbits(__bfloat162float(__ushort_as_bfloat16(h2))) ||
        n2.x != cu_f2h(w.x) || n2.y != cu_f2h(w.y) || nb2.x != cu_f2bf(wb.x) ||
        nb2.y != cu_f2bf(wb.y))
      FAIL("pair conversions of 0x%04x, 0x%04x differ from the scalar ones\n", h, h2);
  }

  // Narrowing.
  if (all) {
    for (uint64_t u = 0; u <= 0xffffffffull; u++) narrow_one((uint32_t)u);
  } else {
    static const uint32_t low13[] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x1ffe, 0x1fff};
    static const uint32_t low16[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff};
    for (uint32_t hi = 0; hi < (1u << 19); hi++)
      for (int k = 0; k < 7; k++) narrow_one(hi << 13 | low13[k]);
    for (uint32_t hi = 0; hi < (1u << 16); hi++)
      for (int k = 0; k < 7; k++) narrow_one(hi << 16 | low16[k]);
    for (int i = 0; i < (1 << 24); i++) narrow_one((uint32_t)rnd());
  }

  printf("CUDA host conversions vs common/half.h: %ld checks (%s), %ld mismatch(es)\n", g_checks,
         all ? "all 2^32 floats narrowed" : "every rounding case of the narrowings", g_fail);
  printf(
      "NaNs (no element function lets a converted NaN reach a result): of 2046 float16 / "
      "254 bfloat16 NaNs the CUDA widenings return 0x7fffffff for %d / %d and the input's "
      "bits unchanged (not quieted) for %d / %d (half.h: sign and payload kept, quiet bit "
      "set); the narrowings give 0x%04x / 0x%04x for the float 0xffa00001 (half.h: 0x%04x / "
      "0x%04x, quieted, sign and payload's top bits kept)\n",
      nan_f16_canon, nan_bf_canon, nan_f16_kept, nan_bf_kept, cu_f2h(ffrom(0xffa00001u)),
      cu_f2bf(ffrom(0xffa00001u)), rr__float_to_half(ffrom(0xffa00001u)),
      rr__float_to_bf16(ffrom(0xffa00001u)));
  return g_fail ? 1 : 0;
}
