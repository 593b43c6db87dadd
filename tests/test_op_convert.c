/* test_op: float16 / bfloat16 <-> float, every 16-bit pattern, every tie and 16 million
 * random floats against the reference conversions (and GCC's _Float16 where it has one). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "tests/test_op.h"

static int h_isnan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x03ff);
}
static int bf_isnan(uint16_t b) {
  return (b & 0x7f80) == 0x7f80 && (b & 0x007f);
}

/* ---------------------------------------------------------------------------------------------
 * convert: float16/bfloat16 <-> float.
 */

/* to_float of every bit pattern equals the decoded value (NaN: quiet, sign and payload
 * kept), and converting back gives the pattern again (NaN: its quiet form). */
static void exhaustive_roundtrip(const char *name, float (*to_f)(uint16_t),
                                 uint16_t (*from_f)(float), double (*dec)(uint16_t),
                                 int (*isnan16)(uint16_t), int mant, uint16_t quiet16) {
  for (uint32_t p = 0; p < 65536; p++) {
    uint16_t h = (uint16_t)p;
    float f = to_f(h);
    uint16_t back = from_f(f);
    if (isnan16(h)) {
      uint32_t fb = f32_bits(f);
      uint32_t want_f =
          (fb & 0x80000000u) == ((uint32_t)(h & 0x8000) << 16) &&
          (fb & 0x7fc00000u) == 0x7fc00000u &&
          ((fb >> (23 - mant)) & ((1u << mant) - 1)) == ((h | quiet16) & ((1u << mant) - 1));
      CHECK(isnan(f) && want_f, "%s %04x -> %08x: want a quiet NaN with sign and payload", name, h,
            fb);
      CHECK(back == (h | quiet16), "%s NaN %04x -> %08x -> %04x, want %04x", name, h, fb, back,
            h | quiet16);
    } else {
      double want = dec(h);
      CHECK((double)f == want && !signbit(f) == !signbit(want), "%s %04x -> %.9g, want %.9g", name,
            h, f, want);
      CHECK(back == h, "%s %04x -> %.9g -> %04x", name, h, f, back);
    }
  }
}

static void check_round(const char *name, uint16_t (*from_f)(float), uint16_t (*ref)(float),
                        int (*isnan16)(uint16_t), float f) {
  uint16_t got = from_f(f), want = ref(f);
  if (isnan(f)) {
    CHECK(isnan16(got) && (got & 0x8000) == (signbit(f) ? 0x8000 : 0), "%s(NaN %08x) = %04x", name,
          f32_bits(f), got);
  } else {
    CHECK(got == want, "%s(%a = %08x) = %04x, want %04x", name, f, f32_bits(f), got, want);
  }
}

/* Every tie point: for each adjacent pair of representable values, their midpoint and the
 * floats on either side of it. Covers even/odd ties, the subnormal range, the subnormal to
 * normal boundary and the overflow threshold. */
static void tie_sweep(const char *name, uint16_t (*from_f)(float), uint16_t (*ref)(float),
                      double (*dec)(uint16_t), int (*isnan16)(uint16_t), uint16_t inf16) {
  for (uint32_t p = 0; p < inf16; p++) {
    double lo = dec((uint16_t)p), hi;
    if (p + 1 < inf16) {
      hi = dec((uint16_t)(p + 1));
    } else { /* past the largest finite value: where the next would be with more exponent */
      int e;
      frexp(lo, &e);
      hi = ldexp(1.0, e);
    }
    float mid = (float)((lo + hi) / 2);
    CHECK((double)mid == (lo + hi) / 2, "%s midpoint of %04x not a float", name, p);
    float cases[] = {(float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
    for (int c = 0; c < 4; c++) {
      check_round(name, from_f, ref, isnan16, cases[c]);
      check_round(name, from_f, ref, isnan16, -cases[c]);
    }
  }
}

/* Random floats: any bit pattern, and ones concentrated on the format's range with the
 * bits that get rounded away biased toward ties. */
static float random_float_near(int emin, int emax) {
  if (rnd_below(4) == 0) return f32_of(rnd32());
  uint32_t e = (uint32_t)(127 + emin - 3 + (int)rnd_below((uint32_t)(emax - emin + 6)));
  uint32_t m = rnd32() & 0x7fffffu;
  switch (rnd_below(4)) {
    case 0:
      m = (m & ~0xffffu) | 0x8000u;
      break; /* bfloat16 tie */
    case 1:
      m = (m & ~0x1fffu) | 0x1000u;
      break; /* float16 tie */
    default:
      break;
  }
  return f32_of((rnd32() & 0x80000000u) | (e << 23) | m);
}

void test_convert(void) {
  exhaustive_roundtrip("half", rr__half_to_float, rr__float_to_half, ref_h2d, h_isnan, 10, 0x0200);
  exhaustive_roundtrip("bf16", rr__bf16_to_float, rr__float_to_bf16, ref_bf2d, bf_isnan, 7, 0x0040);
  tie_sweep("half", rr__float_to_half, ref_f2h, ref_h2d, h_isnan, 0x7c00);
  tie_sweep("bf16", rr__float_to_bf16, ref_f2bf, ref_bf2d, bf_isnan, 0x7f80);

  /* Hand-computed cases, so the reference encoder is checked too. */
  static const struct {
    uint32_t f;
    uint16_t h, bf;
  } fixed[] = {
      {0x00000000, 0x0000, 0x0000}, {0x80000000, 0x8000, 0x8000}, /* +-0 */
      {0x3f800000, 0x3c00, 0x3f80},                               /* 1 */
      {0x477fe000, 0x7bff, 0x4780},                               /* 65504: half max */
      {0x477ff000, 0x7c00, 0x4780},                               /* 65520: half tie -> inf */
      {0x477fefff, 0x7bff, 0x4780},                               /* just below 65520 */
      {0x47800000, 0x7c00, 0x4780},                               /* 65536 */
      {0x7f7fffff, 0x7c00, 0x7f80},                               /* FLT_MAX -> inf */
      {0x7f7f7fff, 0x7c00, 0x7f7f},                               /* just below bf16 tie */
      {0x7f7f8000, 0x7c00, 0x7f80},                               /* bf16 max tie -> inf */
      {0x7f800000, 0x7c00, 0x7f80}, {0xff800000, 0xfc00, 0xff80}, /* +-inf */
      {0x33800000, 0x0001, 0x3380},                               /* 2^-24: half min subnormal */
      {0x33000000, 0x0000, 0x3300},                               /* 2^-25: tie -> 0 */
      {0x33000001, 0x0001, 0x3300},                               /* just above: -> 2^-24 */
      {0x33c00000, 0x0002, 0x33c0},                               /* 1.5 * 2^-24: tie -> even */
      {0x387fc000, 0x03ff, 0x3880},                               /* half max subnormal */
      {0x387fe000, 0x0400, 0x3880}, /* half max subnormal + half ulp: tie -> min normal */
      {0x38800000, 0x0400, 0x3880}, /* 2^-14 */
      {0x3f801000, 0x3c00, 0x3f80}, /* 1 + 2^-11: tie -> 1 */
      {0x3f803000, 0x3c02, 0x3f80}, /* 1 + 3 * 2^-11: tie -> odd up */
      {0x3f808000, 0x3c04, 0x3f80}, /* 1 + 2^-8: bf16 tie -> 1 */
      {0x3f818000, 0x3c0c, 0x3f82}, /* 1 + 3 * 2^-8: bf16 tie -> up */
      {0x00000001, 0x0000, 0x0000}, /* smallest float subnormal */
      {0x00400000, 0x0000, 0x0040}, /* float subnormal: exact bf16 subnormal */
      {0x00408000, 0x0000, 0x0040}, /* bf16 subnormal tie -> even */
      {0x00418000, 0x0000, 0x0042}, /* bf16 subnormal tie -> odd up */
      {0x007fffff, 0x0000, 0x0080}, /* max float subnormal -> FLT_MIN in bf16 */
      {0xc7800000, 0xfc00, 0xc780}, /* -65536 */
  };
  for (size_t i = 0; i < RR__ARRAY_SIZE(fixed); i++) {
    float f = f32_of(fixed[i].f);
    CHECK(rr__float_to_half(f) == fixed[i].h, "half(%08x) = %04x, want %04x", fixed[i].f,
          rr__float_to_half(f), fixed[i].h);
    CHECK(ref_f2h(f) == fixed[i].h, "reference half(%08x) = %04x", fixed[i].f, ref_f2h(f));
    CHECK(rr__float_to_bf16(f) == fixed[i].bf, "bf16(%08x) = %04x, want %04x", fixed[i].f,
          rr__float_to_bf16(f), fixed[i].bf);
    CHECK(ref_f2bf(f) == fixed[i].bf, "reference bf16(%08x) = %04x", fixed[i].f, ref_f2bf(f));
  }
  uint32_t nans[] = {0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fa00000, 0x7fffffff};
  for (size_t i = 0; i < RR__ARRAY_SIZE(nans); i++) {
    check_round("half", rr__float_to_half, ref_f2h, h_isnan, f32_of(nans[i]));
    check_round("bf16", rr__float_to_bf16, ref_f2bf, bf_isnan, f32_of(nans[i]));
  }

  const long n = 16 * 1000 * 1000;
  for (long i = 0; i < n; i++) {
    float fh = random_float_near(-25, 16), fb = random_float_near(-134, 128);
    check_round("half", rr__float_to_half, ref_f2h, h_isnan, fh);
    check_round("bf16", rr__float_to_bf16, ref_f2bf, bf_isnan, fb);
#ifdef __FLT16_MAX__
    /* GCC's own conversion (libgcc soft-fp): a second, unrelated reference. */
    _Float16 h16 = (_Float16)fh;
    uint16_t hb;
    memcpy(&hb, &h16, sizeof hb);
    if (!isnan(fh))
      CHECK(hb == rr__float_to_half(fh), "half(%a) = %04x, _Float16 says %04x", fh,
            rr__float_to_half(fh), hb);
#endif
  }
#ifndef __FLT16_MAX__
  printf("note: no _Float16 in this compiler; float16 checked against the reference only\n");
#endif
}
