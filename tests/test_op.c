/* Host reductions (ring/op.c) against independent references.
 *
 *   test_op names | check | convert | reduce | reduce_portable | paths | bench
 *
 * Random data comes from a fixed seed, printed; RR_TEST_SEED=<n> replays or varies it.
 * The references never call the code under test: integers are computed in wrapping uint64,
 * float32 in double (one double rounding then one float rounding is exact for + - * /
 * because 53 >= 2*24+2), float64 in __float128 (113 >= 2*53+2), and float16/bfloat16
 * through a decoder/encoder written from the format's definition in double arithmetic
 * (cross-checked against GCC's _Float16 where the compiler has it).
 *
 * `bench` (not run by ctest) prints throughput; nothing here asserts on time.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "ring/op.h"

#define GUARD 8 /* elements past each buffer's end that no call may touch */

/* ---------------------------------------------------------------------------------------------
 * Reporting and randomness.
 */

static long g_checks, g_failures;

#define CHECK(cond, ...)                            \
  do {                                              \
    g_checks++;                                     \
    if (!(cond)) {                                  \
      if (g_failures++ < 30) {                      \
        printf("FAIL %s:%d: ", __FILE__, __LINE__); \
        printf(__VA_ARGS__);                        \
        printf("\n");                               \
      }                                             \
    }                                               \
  } while (0)

static uint64_t g_seed = 0x5eed2024u;
static uint64_t g_rng;

static uint64_t rnd(void) { /* splitmix64: good enough, and one line to reproduce */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
static uint32_t rnd32(void) {
  return (uint32_t)(rnd() >> 32);
}
static uint32_t rnd_below(uint32_t n) {
  return (uint32_t)(rnd() % n);
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static float f32_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static double f64_of(uint64_t u) {
  double f;
  memcpy(&f, &u, sizeof f);
  return f;
}

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

static double ref_h2d(uint16_t h) {
  return ref_decode(h, 10, 5);
}
static double ref_bf2d(uint16_t b) {
  return ref_decode(b, 7, 8);
}
static uint16_t ref_f2h(float f) {
  return ref_encode(f, 10, 5);
}
static uint16_t ref_f2bf(float f) {
  return ref_encode(f, 7, 8);
}

static int h_isnan(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x03ff);
}
static int bf_isnan(uint16_t b) {
  return (b & 0x7f80) == 0x7f80 && (b & 0x007f);
}

/* ---------------------------------------------------------------------------------------------
 * names: canonical names, aliases, case, unknown names.
 */

static const char *const k_dtype_names[RR_NUM_DTYPES] = {"int8", "uint8",    "int32", "int64",
                                                         "half", "bfloat16", "float", "double"};
static const size_t k_dtype_sizes[RR_NUM_DTYPES] = {1, 1, 4, 8, 2, 2, 4, 8};
static const char *const k_op_names[RR_NUM_OPS] = {"sum", "prod", "min", "max",
                                                   "avg", "band", "bor", "bxor"};

static const struct {
  const char *name;
  rr_dtype dtype;
} k_dtype_aliases[] = {
    {"float16", RR_FLOAT16}, {"fp16", RR_FLOAT16},      {"half", RR_FLOAT16},
    {"bf16", RR_BFLOAT16},   {"bfloat16", RR_BFLOAT16}, {"float32", RR_FLOAT32},
    {"fp32", RR_FLOAT32},    {"float", RR_FLOAT32},     {"float64", RR_FLOAT64},
    {"fp64", RR_FLOAT64},    {"double", RR_FLOAT64},    {"int", RR_INT32},
    {"int32", RR_INT32},     {"char", RR_INT8},         {"int8", RR_INT8},
    {"uint8", RR_UINT8},     {"u8", RR_UINT8},          {"long", RR_INT64},
    {"int64", RR_INT64},
};

static void case_variants(const char *name, char upper[32], char mixed[32]) {
  size_t i = 0;
  for (; name[i] && i < 31; i++) {
    upper[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 32 : name[i]);
    mixed[i] = (char)(i % 2 ? upper[i] : name[i]);
  }
  upper[i] = mixed[i] = '\0';
}

static void test_names(void) {
  for (int d = 0; d < RR_NUM_DTYPES; d++) {
    CHECK(strcmp(rr_dtype_name((rr_dtype)d), k_dtype_names[d]) == 0, "dtype %d name '%s'", d,
          rr_dtype_name((rr_dtype)d));
    CHECK(rr_dtype_size((rr_dtype)d) == k_dtype_sizes[d], "dtype %d size %zu", d,
          rr_dtype_size((rr_dtype)d));
    rr_dtype back = RR_NUM_DTYPES;
    CHECK(rr_dtype_from_name(rr_dtype_name((rr_dtype)d), &back) == RR_OK && back == (rr_dtype)d,
          "dtype %d does not round-trip", d);
  }
  for (int o = 0; o < RR_NUM_OPS; o++) {
    CHECK(strcmp(rr_op_name((rr_op)o), k_op_names[o]) == 0, "op %d name '%s'", o,
          rr_op_name((rr_op)o));
    rr_op back = RR_NUM_OPS;
    CHECK(rr_op_from_name(rr_op_name((rr_op)o), &back) == RR_OK && back == (rr_op)o,
          "op %d does not round-trip", o);
  }
  for (size_t i = 0; i < RR__ARRAY_SIZE(k_dtype_aliases); i++) {
    char upper[32], mixed[32];
    case_variants(k_dtype_aliases[i].name, upper, mixed);
    const char *spellings[3] = {k_dtype_aliases[i].name, upper, mixed};
    for (int s = 0; s < 3; s++) {
      rr_dtype d = RR_NUM_DTYPES;
      CHECK(rr_dtype_from_name(spellings[s], &d) == RR_OK && d == k_dtype_aliases[i].dtype,
            "dtype alias '%s' -> %d", spellings[s], (int)d);
    }
  }
  const char *prods[] = {"product", "PRODUCT", "Prod", "pRoD"};
  for (size_t i = 0; i < RR__ARRAY_SIZE(prods); i++) {
    rr_op o = RR_NUM_OPS;
    CHECK(rr_op_from_name(prods[i], &o) == RR_OK && o == RR_PROD, "op alias '%s'", prods[i]);
  }
  for (int o = 0; o < RR_NUM_OPS; o++) {
    char upper[32], mixed[32];
    case_variants(k_op_names[o], upper, mixed);
    rr_op a = RR_NUM_OPS, b = RR_NUM_OPS;
    CHECK(rr_op_from_name(upper, &a) == RR_OK && a == (rr_op)o, "op '%s'", upper);
    CHECK(rr_op_from_name(mixed, &b) == RR_OK && b == (rr_op)o, "op '%s'", mixed);
  }

  const char *bad_dtypes[] = {"",         "float8", "int16",  "fp",     "floa",
                              "float32 ", " float", "uint32", "bfloat", "halff"};
  for (size_t i = 0; i < RR__ARRAY_SIZE(bad_dtypes); i++) {
    rr_dtype d = (rr_dtype)77;
    rr__clear_error();
    CHECK(rr_dtype_from_name(bad_dtypes[i], &d) == RR_EINVAL && d == (rr_dtype)77,
          "dtype '%s' accepted", bad_dtypes[i]);
    CHECK(strstr(rr_last_error(), "bfloat16") && strstr(rr_last_error(), "double") &&
              strstr(rr_last_error(), "int8"),
          "error for '%s' does not list valid names: %s", bad_dtypes[i], rr_last_error());
    char quoted[64];
    snprintf(quoted, sizeof quoted, "'%s'", bad_dtypes[i]);
    CHECK(strstr(rr_last_error(), quoted) != NULL, "error does not name %s: %s", quoted,
          rr_last_error());
  }
  const char *bad_ops[] = {"", "add", "mean", "products", "xor", "sum2", "bandd"};
  for (size_t i = 0; i < RR__ARRAY_SIZE(bad_ops); i++) {
    rr_op o = (rr_op)77;
    rr__clear_error();
    CHECK(rr_op_from_name(bad_ops[i], &o) == RR_EINVAL && o == (rr_op)77, "op '%s' accepted",
          bad_ops[i]);
    CHECK(strstr(rr_last_error(), "bxor") && strstr(rr_last_error(), "avg"),
          "error for op '%s' does not list valid names: %s", bad_ops[i], rr_last_error());
  }
  rr_dtype d;
  rr_op o;
  CHECK(rr_dtype_from_name(NULL, &d) == RR_EINVAL, "NULL dtype name accepted");
  CHECK(rr_op_from_name(NULL, &o) == RR_EINVAL, "NULL op name accepted");
  CHECK(rr_dtype_from_name("float", NULL) == RR_EINVAL, "NULL dtype output accepted");
  CHECK(rr_op_from_name("sum", NULL) == RR_EINVAL, "NULL op output accepted");

  int bad[] = {-1, RR_NUM_DTYPES, RR_NUM_OPS, 1000};
  for (size_t i = 0; i < RR__ARRAY_SIZE(bad); i++) {
    if (bad[i] >= RR_NUM_DTYPES || bad[i] < 0)
      CHECK(rr_dtype_size((rr_dtype)bad[i]) == 0, "size of dtype %d", bad[i]);
    const char *dn = rr_dtype_name((rr_dtype)bad[i]), *on = rr_op_name((rr_op)bad[i]);
    if (bad[i] >= RR_NUM_DTYPES || bad[i] < 0)
      CHECK(dn != NULL && strcmp(dn, "invalid") == 0, "name of dtype %d", bad[i]);
    if (bad[i] >= RR_NUM_OPS || bad[i] < 0)
      CHECK(on != NULL && strcmp(on, "invalid") == 0, "name of op %d", bad[i]);
  }
}

/* ---------------------------------------------------------------------------------------------
 * check: which (dtype, op) pairs rr__op_check accepts.
 */

static int is_float(rr_dtype d) {
  return d >= RR_FLOAT16;
}

static void test_check(void) {
  for (int d = 0; d < RR_NUM_DTYPES; d++)
    for (int o = 0; o < RR_NUM_OPS; o++) {
      int bitwise = o >= RR_BAND;
      rr__clear_error();
      int st = rr__op_check((rr_dtype)d, (rr_op)o);
      if (bitwise && is_float((rr_dtype)d)) {
        char want[160];
        snprintf(want, sizeof want,
                 "op %s is not defined for dtype %s (bitwise ops need an integer type)",
                 k_op_names[o], k_dtype_names[d]);
        CHECK(st == RR_EINVAL, "%s on %s accepted", k_op_names[o], k_dtype_names[d]);
        CHECK(strstr(rr_last_error(), want) != NULL, "message '%s', want '%s'", rr_last_error(),
              want);
      } else {
        CHECK(st == RR_OK, "%s on %s rejected: %s", k_op_names[o], k_dtype_names[d],
              rr_last_error());
      }
    }
  int bad[] = {-1, -100, RR_NUM_DTYPES, RR_NUM_OPS, 1000};
  for (size_t i = 0; i < RR__ARRAY_SIZE(bad); i++) {
    if (bad[i] < 0 || bad[i] >= RR_NUM_DTYPES) {
      rr__clear_error();
      CHECK(rr__op_check((rr_dtype)bad[i], RR_SUM) == RR_EINVAL, "dtype %d accepted", bad[i]);
      CHECK(strstr(rr_last_error(), "dtype") != NULL, "message '%s'", rr_last_error());
    }
    if (bad[i] < 0 || bad[i] >= RR_NUM_OPS) {
      rr__clear_error();
      CHECK(rr__op_check(RR_INT32, (rr_op)bad[i]) == RR_EINVAL, "op %d accepted", bad[i]);
      CHECK(strstr(rr_last_error(), "op") != NULL, "message '%s'", rr_last_error());
    }
  }
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

static void test_convert(void) {
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

/* ---------------------------------------------------------------------------------------------
 * Random operands. Never zero (a result left at zero must not pass), with values chosen to
 * reach wrap-around, overflow, subnormals, ties and NaN.
 */

static int64_t get_int(rr_dtype dt, const void *p) {
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
static void put_int(rr_dtype dt, void *p, uint64_t v) {
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

static void gen_int(rr_dtype dt, void *p) {
  int bits = 8 * (int)k_dtype_sizes[dt];
  uint64_t smax = bits == 64 ? (uint64_t)INT64_MAX : (1ull << (bits - 1)) - 1;
  do {
    uint64_t k = rnd_below(4), v;
    switch (rnd_below(4)) {
      case 0:
        v = (uint64_t)((int64_t)rnd_below(2001) - 1000);
        break;
      case 1:
        v = (rnd() & 1) ? smax - k : smax + 1 + k;
        break; /* near the largest, smallest */
      default:
        v = rnd();
        break;
    }
    put_int(dt, p, v);
  } while (get_int(dt, p) == 0);
}

static float gen_f32(void) {
  for (;;) {
    float f;
    uint32_t sign = rnd32() & 0x80000000u, m = rnd32() & 0x7fffffu;
    switch (rnd_below(8)) {
      case 0:
        f = f32_of(rnd32());
        break; /* anything: NaN, inf, subnormal */
      case 1:
        f = f32_of(sign | (rnd_below(8) << 23) | m);
        break; /* tiny: subnormal results */
      case 2:
        f = f32_of(sign | ((247 + rnd_below(8)) << 23) | m);
        break; /* huge: overflow */
      case 3:
        f = (float)((int)rnd_below(64) - 32) * 0.25f;
        break; /* equal values, exact */
      case 4:
        f = (sign ? -1.0f : 1.0f) * (16777216.0f + 2.0f * (float)rnd_below(8));
        break;
      default:
        f = f32_of(sign | ((117 + rnd_below(21)) << 23) | m);
        break; /* 2^-10..2^10 */
    }
    if (f != 0) return f; /* NaN passes too */
  }
}

static double gen_f64(void) {
  for (;;) {
    double f;
    uint64_t sign = rnd() & 0x8000000000000000u, m = rnd() & 0xfffffffffffffu;
    switch (rnd_below(8)) {
      case 0:
        f = f64_of(rnd());
        break;
      case 1:
        f = f64_of(sign | ((uint64_t)rnd_below(8) << 52) | m);
        break;
      case 2:
        f = f64_of(sign | ((uint64_t)(2039 + rnd_below(8)) << 52) | m);
        break;
      case 3:
        f = (double)((int)rnd_below(64) - 32) * 0.25;
        break;
      case 4:
        f = (sign ? -1.0 : 1.0) * (9007199254740992.0 + 2.0 * (double)rnd_below(8));
        break;
      default:
        f = f64_of(sign | ((uint64_t)(1013 + rnd_below(21)) << 52) | m);
        break;
    }
    if (f != 0) return f;
  }
}

/* bias/ebits/mant of the 16-bit format; moderate values sit around 2^0. */
static uint16_t gen_16(int mant, int ebits) {
  int bias = (1 << (ebits - 1)) - 1, emax = (1 << ebits) - 1;
  for (;;) {
    uint32_t sign = rnd_below(2) << (mant + ebits), m = rnd32() & ((1u << mant) - 1), e;
    switch (rnd_below(6)) {
      case 0:
        e = rnd_below((uint32_t)emax + 1);
        break; /* anything */
      case 1:
        e = rnd_below(3);
        break; /* subnormal and tiny */
      case 2:
        e = (uint32_t)emax - 1 - rnd_below(3);
        break; /* near the top: overflow */
      default:
        e = (uint32_t)(bias - 4) + rnd_below(9);
        break;
    }
    uint16_t v = (uint16_t)(sign | (e << mant) | m);
    if (v & 0x7fff) return v;
  }
}

static void gen_value(rr_dtype dt, void *p) {
  switch (dt) {
    case RR_FLOAT16:
      *(uint16_t *)p = gen_16(10, 5);
      break;
    case RR_BFLOAT16:
      *(uint16_t *)p = gen_16(7, 8);
      break;
    case RR_FLOAT32:
      *(float *)p = gen_f32();
      break;
    case RR_FLOAT64:
      *(double *)p = gen_f64();
      break;
    default:
      gen_int(dt, p);
      break;
  }
}

/* ---------------------------------------------------------------------------------------------
 * Expected results, one element at a time.
 */

#ifdef __SIZEOF_FLOAT128__
typedef __float128 wide_t; /* 113-bit significand: exact enough for float64 */
#else
typedef long double wide_t; /* 64 bits: a double rounding could slip through, rarely */
#endif

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
static double float_value(rr_dtype dt, const void *p) {
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
static int expect(rr_dtype dt, rr_op op, int div, const void *a, const void *b, void *want) {
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

static int elem_isnan(rr_dtype dt, const void *p) {
  return is_float(dt) && isnan(float_value(dt, p));
}

static void hex_elem(char *out, size_t cap, rr_dtype dt, const void *p) {
  uint64_t v = 0;
  memcpy(&v, p, k_dtype_sizes[dt]);
  if (is_float(dt))
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
static int check_elem(rr_dtype dt, rr_op op, int div, const void *a, const void *b,
                      const void *got) {
  size_t es = k_dtype_sizes[dt];
  uint8_t want[8];
  if (expect(dt, op, div, a, b, want)) return nan_ok(dt, op, a, b, got);
  if (memcmp(got, want, es) == 0) return 1;
  /* MIN/MAX of equal values (+0 and -0) may return either operand; op.h allows it. */
  if ((op == RR_MIN || op == RR_MAX) && is_float(dt) && float_value(dt, a) == float_value(dt, b))
    return memcmp(got, a, es) == 0 || memcmp(got, b, es) == 0;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * reduce: every dtype x op x length x (dst distinct, == a, == b) x (aligned, one element off).
 */

static const size_t k_lengths[] = {0,   1,   2,   3,   4,    5,    7,     8,      9,   15,
                                   16,  17,  31,  32,  33,   63,   64,    65,     127, 128,
                                   129, 255, 256, 257, 1000, 4099, 65537, 1000003};
#define MAXN 1000003
static const int k_divs[] = {0, 1, 2, 3, 7, 8};
static const char *const k_alias_names[] = {"dst distinct", "dst == a", "dst == b"};

typedef struct bufs {
  uint8_t *A, *B;        /* operands, never written */
  uint8_t *wa, *wb, *wd; /* working copies */
} bufs;

static uint8_t *xmalloc(size_t n) {
  uint8_t *p = malloc(n ? n : 1);
  if (!p) {
    printf("out of memory\n");
    exit(2);
  }
  return p;
}

static void bufs_init(bufs *b, rr_dtype dt, size_t maxn) {
  size_t bytes = (maxn + 1 + GUARD) * k_dtype_sizes[dt];
  b->A = xmalloc(bytes), b->B = xmalloc(bytes);
  b->wa = xmalloc(bytes), b->wb = xmalloc(bytes), b->wd = xmalloc(bytes);
  for (size_t i = 0; i < maxn + 1 + GUARD; i++) {
    gen_value(dt, b->A + i * k_dtype_sizes[dt]);
    gen_value(dt, b->B + i * k_dtype_sizes[dt]);
  }
}

static void bufs_free(bufs *b) {
  free(b->A), free(b->B), free(b->wa), free(b->wb), free(b->wd);
}

static void report(const char *what, rr_dtype dt, rr_op op, int div, size_t n, int alias, int off,
                   size_t i, const void *a, const void *b, const void *got) {
  char sa[64], sb[64], sg[64], sw[64];
  uint8_t want[8];
  expect(dt, op, div, a, b, want);
  hex_elem(sa, sizeof sa, dt, a), hex_elem(sb, sizeof sb, dt, b);
  hex_elem(sg, sizeof sg, dt, got), hex_elem(sw, sizeof sw, dt, want);
  CHECK(0, "%s %s %s div=%d n=%zu %s offset=%d [%zu]: a=%s b=%s got %s want %s", what,
        k_dtype_names[dt], k_op_names[op], div, n, k_alias_names[alias], off, i, sa, sb, sg, sw);
}

static void run_case(const bufs *bf, rr_dtype dt, rr_op op, int div, size_t n, int alias, int off) {
  size_t es = k_dtype_sizes[dt], total = (n + 1 + GUARD) * es;
  memcpy(bf->wa, bf->A, total);
  memcpy(bf->wb, bf->B, total);
  memset(bf->wd, 0xa5, total);
  uint8_t *pa = bf->wa + off * es, *pb = bf->wb + off * es;
  uint8_t *pd = alias == 0 ? bf->wd + off * es : alias == 1 ? pa : pb;
  const uint8_t *A = bf->A + off * es, *B = bf->B + off * es;
  rr__reduce(pd, pa, pb, n, dt, op, div);
  long bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (!check_elem(dt, op, div, A + i * es, B + i * es, pd + i * es)) {
      if (bad++ < 3)
        report("reduce", dt, op, div, n, alias, off, i, A + i * es, B + i * es, pd + i * es);
      else
        g_failures++;
    }
  }
  g_checks += (long)n;
  /* Nothing outside dst[0..n) changes, and an operand that is not dst stays as it was. */
  const uint8_t *dst_base = alias == 0 ? bf->wd : alias == 1 ? bf->wa : bf->wb;
  const uint8_t *orig = alias == 1 ? bf->A : alias == 2 ? bf->B : NULL;
  for (size_t j = 0; j < total; j++) {
    if (j >= off * es && j < (off + n) * es) continue;
    uint8_t want = orig ? orig[j] : 0xa5;
    if (dst_base[j] != want) {
      CHECK(0, "%s %s n=%zu %s offset=%d: byte %zu outside dst changed", k_dtype_names[dt],
            k_op_names[op], n, k_alias_names[alias], off, j);
      break;
    }
  }
  if (alias != 1) CHECK(memcmp(bf->wa, bf->A, total) == 0, "operand a was written");
  if (alias != 2) CHECK(memcmp(bf->wb, bf->B, total) == 0, "operand b was written");
}

/* Every pair from a list of special values, run through the vector loops. */
static void special_pairs(rr_dtype dt) {
  static const double dv[] = {0.0, -0.0, INFINITY, -INFINITY, NAN,   -NAN,   1.0,    -1.0,
                              1.5, 3.0,  0.1,      -7.0e-3,   1e300, -1e300, 1e-310, 5e-324};
  size_t es = k_dtype_sizes[dt], nv = RR__ARRAY_SIZE(dv) + 6;
  uint8_t vals[32][8];
  for (size_t i = 0; i < RR__ARRAY_SIZE(dv); i++) {
    switch (dt) {
      case RR_FLOAT16:
        *(uint16_t *)vals[i] = ref_f2h((float)dv[i]);
        break;
      case RR_BFLOAT16:
        *(uint16_t *)vals[i] = ref_f2bf((float)dv[i]);
        break;
      case RR_FLOAT32:
        *(float *)vals[i] = (float)dv[i];
        break;
      case RR_FLOAT64:
        *(double *)vals[i] = dv[i];
        break;
      default: /* integers: small values of both signs, zero among them */
        put_int(dt, vals[i], (uint64_t)((int64_t)i * 40 - 320));
        break;
    }
  }
  /* Format-specific: signalling NaN, largest finite (both signs), smallest subnormal and
   * normal. */
  size_t k = RR__ARRAY_SIZE(dv);
  switch (dt) {
    case RR_FLOAT16: {
      uint16_t v[] = {0x7c01, 0x7bff, 0xfbff, 0x0001, 0x0400, 0x8001};
      for (int i = 0; i < 6; i++) memcpy(vals[k + i], &v[i], 2);
      break;
    }
    case RR_BFLOAT16: {
      uint16_t v[] = {0x7f81, 0x7f7f, 0xff7f, 0x0001, 0x0080, 0x8001};
      for (int i = 0; i < 6; i++) memcpy(vals[k + i], &v[i], 2);
      break;
    }
    case RR_FLOAT32: {
      uint32_t v[] = {0x7f800001, 0x7f7fffff, 0xff7fffff, 0x00000001, 0x00800000, 0x80000001};
      for (int i = 0; i < 6; i++) memcpy(vals[k + i], &v[i], 4);
      break;
    }
    case RR_FLOAT64: {
      uint64_t v[] = {0x7ff0000000000001u, 0x7fefffffffffffffu, 0xffefffffffffffffu, 1u,
                      0x0010000000000000u, 0x8000000000000001u};
      for (int i = 0; i < 6; i++) memcpy(vals[k + i], &v[i], 8);
      break;
    }
    default: {
      int bits = 8 * (int)es;
      uint64_t smax = bits == 64 ? (uint64_t)INT64_MAX : (1ull << (bits - 1)) - 1;
      uint64_t v[] = {smax, smax + 1, smax - 1, smax + 2, (uint64_t)-1, 2};
      for (int i = 0; i < 6; i++) put_int(dt, vals[k + i], v[i]);
      break;
    }
  }
  size_t n = nv * nv;
  uint8_t *a = xmalloc(n * es), *b = xmalloc(n * es), *d = xmalloc(n * es);
  for (size_t i = 0; i < nv; i++)
    for (size_t j = 0; j < nv; j++) {
      memcpy(a + (i * nv + j) * es, vals[i], es);
      memcpy(b + (i * nv + j) * es, vals[j], es);
    }
  for (int op = 0; op < RR_NUM_OPS; op++) {
    if (rr__op_check(dt, (rr_op)op) != RR_OK) continue;
    for (size_t di = 0; di < (op == RR_AVG ? RR__ARRAY_SIZE(k_divs) : 1); di++) {
      int div = op == RR_AVG ? k_divs[di] : 0;
      rr__reduce(d, a, b, n, dt, (rr_op)op, div);
      for (size_t i = 0; i < n; i++) {
        if (!check_elem(dt, (rr_op)op, div, a + i * es, b + i * es, d + i * es))
          report("special", dt, (rr_op)op, div, n, 0, 0, i, a + i * es, b + i * es, d + i * es);
        else
          g_checks++;
      }
    }
  }
  free(a), free(b), free(d);
}

/* rr__avg_scale against the same division the references use. */
static void scale_cases(const bufs *bf, rr_dtype dt) {
  static const size_t lens[] = {0, 1, 3, 17, 33, 1000, 65537};
  size_t es = k_dtype_sizes[dt];
  for (size_t di = 0; di < RR__ARRAY_SIZE(k_divs); di++)
    for (size_t li = 0; li < RR__ARRAY_SIZE(lens); li++)
      for (int off = 0; off < 2; off++) {
        int div = k_divs[di];
        size_t n = lens[li], total = (n + 1 + GUARD) * es;
        memcpy(bf->wa, bf->A, total);
        rr__avg_scale(bf->wa + off * es, n, dt, div);
        long bad = 0;
        for (size_t j = 0; j < n + 1 + GUARD; j++) {
          const uint8_t *x = bf->A + j * es, *got = bf->wa + j * es;
          int inside = j >= (size_t)off && j < off + n, ok;
          uint8_t want[8];
          if (!inside || div <= 1) {
            ok = memcmp(got, x, es) == 0;
            memcpy(want, x, es);
          } else if (!is_float(dt)) {
            put_int(dt, want, (uint64_t)(get_int(dt, x) / div));
            ok = memcmp(got, want, es) == 0;
          } else {
            double r;
            switch (dt) {
              case RR_FLOAT16:
                r = (float)ref_h2d(*(const uint16_t *)x) / (float)div;
                *(uint16_t *)want = ref_f2h((float)r);
                break;
              case RR_BFLOAT16:
                r = (float)ref_bf2d(*(const uint16_t *)x) / (float)div;
                *(uint16_t *)want = ref_f2bf((float)r);
                break;
              case RR_FLOAT32: {
                float f = (float)((double)*(const float *)x / div);
                r = f, memcpy(want, &f, 4);
                break;
              }
              default:
                r = (double)((wide_t) * (const double *)x / div), memcpy(want, &r, 8);
                break;
            }
            ok = isnan(r) ? elem_isnan(dt, got) : memcmp(got, want, es) == 0;
          }
          g_checks++;
          if (!ok && bad++ < 3) {
            char sx[64], sg[64], sw[64];
            hex_elem(sx, sizeof sx, dt, x), hex_elem(sg, sizeof sg, dt, got);
            hex_elem(sw, sizeof sw, dt, want);
            CHECK(0, "avg_scale %s div=%d n=%zu offset=%d [%zu]%s: x=%s got %s want %s",
                  k_dtype_names[dt], div, n, off, j, inside ? "" : " (outside)", sx, sg, sw);
          } else if (!ok) {
            g_failures++;
          }
        }
      }
}

static void test_reduce(void) {
  unsigned rot = 0;
  for (int d = 0; d < RR_NUM_DTYPES; d++) {
    rr_dtype dt = (rr_dtype)d;
    bufs bf;
    bufs_init(&bf, dt, MAXN);
    for (int op = 0; op < RR_NUM_OPS; op++) {
      if (rr__op_check(dt, (rr_op)op) != RR_OK) continue;
      for (size_t di = 0; di < (op == RR_AVG ? RR__ARRAY_SIZE(k_divs) : 1); di++)
        for (size_t li = 0; li < RR__ARRAY_SIZE(k_lengths); li++) {
          /* Long arrays take one aliasing/offset combination each, in rotation. */
          int only = k_lengths[li] > 1000 ? (int)(rot++ % 6) : -1;
          for (int combo = 0; combo < 6; combo++)
            if (only < 0 || combo == only)
              run_case(&bf, dt, (rr_op)op, op == RR_AVG ? k_divs[di] : 0, k_lengths[li], combo % 3,
                       combo / 3);
        }
    }
    special_pairs(dt);
    scale_cases(&bf, dt);
    bufs_free(&bf);
  }
}

/* ---------------------------------------------------------------------------------------------
 * paths: the AVX2/F16C loops against the portable ones, bit for bit (NaN payloads too).
 */

static int test_paths(void) {
  if (!rr__op_force_portable(0)) {
    printf("SKIP: this CPU has no AVX2+F16C path; only the portable loops exist\n");
    return 77;
  }
  const size_t n = 65536 + 13; /* every 16-bit pattern, and a tail */
  for (int d = 0; d < RR_NUM_DTYPES; d++) {
    rr_dtype dt = (rr_dtype)d;
    size_t es = k_dtype_sizes[dt];
    bufs bf;
    bufs_init(&bf, dt, n);
    if (es == 2)
      for (size_t i = 0; i < 65536; i++) ((uint16_t *)bf.A)[i + 1] = (uint16_t)i;
    uint8_t *portable = xmalloc((n + 1) * es);
    for (int op = 0; op < RR_NUM_OPS; op++) {
      if (rr__op_check(dt, (rr_op)op) != RR_OK) continue;
      for (size_t di = 0; di < (op == RR_AVG ? RR__ARRAY_SIZE(k_divs) : 1); di++)
        for (int swap = 0; swap < 2; swap++) {
          int div = op == RR_AVG ? k_divs[di] : 0;
          const uint8_t *a = (swap ? bf.B : bf.A) + es, *b = (swap ? bf.A : bf.B) + es;
          rr__op_force_portable(1);
          rr__reduce(portable, a, b, n, dt, (rr_op)op, div);
          rr__op_force_portable(0);
          rr__reduce(bf.wd, a, b, n, dt, (rr_op)op, div);
          memcpy(bf.wa, a, n * es); /* and in place */
          rr__reduce(bf.wa, bf.wa, b, n, dt, (rr_op)op, div);
          for (size_t i = 0; i < n; i++) {
            g_checks++;
            if (memcmp(bf.wd + i * es, portable + i * es, es) != 0 ||
                memcmp(bf.wa + i * es, portable + i * es, es) != 0) {
              char sa[64], sb[64], sf[64], sp[64];
              hex_elem(sa, sizeof sa, dt, a + i * es), hex_elem(sb, sizeof sb, dt, b + i * es);
              hex_elem(sf, sizeof sf, dt, bf.wd + i * es);
              hex_elem(sp, sizeof sp, dt, portable + i * es);
              CHECK(0, "paths differ: %s %s div=%d [%zu]: a=%s b=%s fast %s portable %s",
                    k_dtype_names[dt], k_op_names[op], div, i, sa, sb, sf, sp);
              break;
            }
          }
        }
    }
    for (size_t di = 0; di < RR__ARRAY_SIZE(k_divs); di++) {
      memcpy(portable, bf.A, n * es);
      memcpy(bf.wa, bf.A, n * es);
      rr__op_force_portable(1);
      rr__avg_scale(portable, n, dt, k_divs[di]);
      rr__op_force_portable(0);
      rr__avg_scale(bf.wa, n, dt, k_divs[di]);
      CHECK(memcmp(portable, bf.wa, n * es) == 0, "avg_scale paths differ: %s div=%d",
            k_dtype_names[dt], k_divs[di]);
    }
    free(portable);
    bufs_free(&bf);
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * bench: GB/s of dst written, against memcpy of the same size. Not a test.
 */

/* GB/s of dst written by `inner` back-to-back calls, best of `rounds` after a warm-up.
 * dt == RR_NUM_DTYPES times memcpy instead. */
static double best_gbps(size_t bytes, rr_dtype dt, void *d, const void *a, const void *b, int inner,
                        int rounds) {
  int64_t best = INT64_MAX;
  for (int r = 0; r <= rounds; r++) {
    int64_t t0 = rr__now_ns();
    for (int k = 0; k < inner; k++) {
      if (dt == RR_NUM_DTYPES)
        memcpy(d, a, bytes);
      else
        rr__reduce(d, a, b, bytes / k_dtype_sizes[dt], dt, RR_SUM, 0);
    }
    int64_t t = rr__now_ns() - t0;
    if (r > 0 && t < best) best = t;
  }
  return (double)bytes * inner / (double)best;
}

/* Values as in training: normal numbers of assorted magnitudes, no NaN, no subnormals
 * (those take microcode assists on some CPUs, a different measurement). */
static void fill_like_gradients(rr_dtype dt, uint8_t *p, size_t bytes) {
  size_t n = bytes / k_dtype_sizes[dt];
  for (size_t i = 0; i < n; i++) {
    double v = ldexp((double)(rnd32() | 1u) / 4294967296.0, -(int)rnd_below(12));
    if (rnd() & 1) v = -v;
    switch (dt) {
      case RR_FLOAT16:
        ((uint16_t *)p)[i] = ref_f2h((float)v);
        break;
      case RR_BFLOAT16:
        ((uint16_t *)p)[i] = ref_f2bf((float)v);
        break;
      case RR_FLOAT32:
        ((float *)p)[i] = (float)v;
        break;
      case RR_FLOAT64:
        ((double *)p)[i] = v;
        break;
      default:
        put_int(dt, p + i * k_dtype_sizes[dt], rnd());
        break;
    }
  }
}

static void bench(void) {
  const size_t big = 64u << 20, small = 256u << 10; /* small: RR_SEG_BYTES, stays in cache */
  uint8_t *a = xmalloc(big), *b = xmalloc(big), *d = xmalloc(big);
  memset(d, 1, big);
  int fast = rr__op_force_portable(0);
  printf("SUM, GB/s of dst written, best of 10 (fast path: %s)\n", fast ? "avx2+f16c" : "none");
  printf("                      64MiB new  64MiB dst==a  256KiB dst==a\n");
  printf("  memcpy              %8.2f  %12s  %13.2f\n",
         best_gbps(big, RR_NUM_DTYPES, d, a, b, 1, 10), "",
         best_gbps(small, RR_NUM_DTYPES, d, a, b, 256, 10));
  rr_dtype dts[] = {RR_FLOAT32, RR_FLOAT16, RR_BFLOAT16, RR_INT32, RR_FLOAT64, RR_INT8};
  for (int p = 0; p < (fast ? 2 : 1); p++) {
    rr__op_force_portable(p);
    for (size_t i = 0; i < RR__ARRAY_SIZE(dts); i++) {
      fill_like_gradients(dts[i], a, big);
      fill_like_gradients(dts[i], b, big);
      printf("  %-8s %-9s  %8.2f  %12.2f  %13.2f\n", k_dtype_names[dts[i]], p ? "portable" : "",
             best_gbps(big, dts[i], d, a, b, 1, 10), best_gbps(big, dts[i], a, a, b, 1, 10),
             best_gbps(small, dts[i], a, a, b, 256, 10));
    }
  }
  rr__op_force_portable(0);
  free(a), free(b), free(d);
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  const char *env = getenv("RR_TEST_SEED");
  if (env && *env) g_seed = strtoull(env, NULL, 0);
  printf("seed %" PRIu64 " (set RR_TEST_SEED to change)\n", g_seed);
  if (strcmp(which, "bench") == 0) {
    bench();
    return 0;
  }
  int all = strcmp(which, "all") == 0, ran = 0, rc = 0;
#define SECTION(name, call)                                          \
  if (all || strcmp(which, name) == 0) {                             \
    g_rng = g_seed;                                                  \
    int64_t t0 = rr__now_ns();                                       \
    call;                                                            \
    printf("%s: %.2f s\n", name, (double)(rr__now_ns() - t0) / 1e9); \
    ran = 1;                                                         \
  }
  SECTION("names", test_names());
  SECTION("check", test_check());
  SECTION("convert", test_convert());
  SECTION("reduce", test_reduce());
  SECTION("reduce_portable", (rr__op_force_portable(1), test_reduce(), rr__op_force_portable(0)));
  SECTION("paths", rc = test_paths());
#undef SECTION
  if (!ran) {
    printf("unknown section '%s'\n", which);
    return 2;
  }
  printf("%ld checks, %ld failures\n", g_checks, g_failures);
  if (g_failures) return 1;
  return rc == 77 && !all ? 77 : 0;
}
