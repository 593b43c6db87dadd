/* test_op: rr__reduce and rr__avg_scale element by element against the references, on random
 * operands that reach wrap-around, overflow, subnormals, ties and NaN, and on every pair of a
 * list of special values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tests/test_op.h"

#define GUARD 8 /* elements past each buffer's end that no call may touch */

/* ---------------------------------------------------------------------------------------------
 * Random operands. Never zero (a result left at zero must not pass), with values chosen to
 * reach wrap-around, overflow, subnormals, ties and NaN.
 */

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
 * reduce: every dtype x op x length x (dst distinct, == a, == b) x (aligned, one element off).
 */

static const size_t k_lengths[] = {0,   1,   2,   3,   4,    5,    7,     8,      9,   15,
                                   16,  17,  31,  32,  33,   63,   64,    65,     127, 128,
                                   129, 255, 256, 257, 1000, 4099, 65537, 1000003};
#define MAXN 1000003
static const char *const k_alias_names[] = {"dst distinct", "dst == a", "dst == b"};

void bufs_init(bufs *b, rr_dtype dt, size_t maxn) {
  size_t bytes = (maxn + 1 + GUARD) * k_dtype_sizes[dt];
  b->A = t_alloc(bytes), b->B = t_alloc(bytes);
  b->wa = t_alloc(bytes), b->wb = t_alloc(bytes), b->wd = t_alloc(bytes);
  for (size_t i = 0; i < maxn + 1 + GUARD; i++) {
    gen_value(dt, b->A + i * k_dtype_sizes[dt]);
    gen_value(dt, b->B + i * k_dtype_sizes[dt]);
  }
}

void bufs_free(bufs *b) {
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
  uint8_t *a = t_alloc(n * es), *b = t_alloc(n * es), *d = t_alloc(n * es);
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
          } else if (!t_is_float(dt)) {
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

void test_reduce(void) {
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
