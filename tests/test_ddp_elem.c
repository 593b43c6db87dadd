/* The DDP wrapper's device element functions (cuda/ddp_elem.cuh, the code cuda/ddp.cu runs
 * on CUDA gradients) against its host loops (ddp/hooks.c), bit for bit: scaling by 1/world into
 * the bucket, the allreduce hook's division, the fp16 / bf16 hooks' compression and
 * decompression, for float16, bfloat16, float32 and float64 gradients, world sizes 1..128,
 * on random bit patterns (NaNs with payloads, infinities, subnormals, signed zeros), ordinary
 * values, and float64 values on and beside the rounding ties of half and bfloat16 (where
 * rounding twice instead of once would show). Runs on any machine: the header is plain C as
 * well as CUDA. What it cannot show is that nvcc's device code computes these functions as
 * the host does; tests/test_ddp.c's "gpu" section checks that on a GPU.
 *
 *   test_ddp_elem [elements per case, default 100000] */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ddp_elem.cuh"
#include "ddp/ddp_host.h"
#include "ring/op.h"
#include "tests/elem_fill.h"

static uint64_t g_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A float64 on (or one ulp beside) a tie between two adjacent values of the 16-bit type. */
static double tie64(uint64_t r, int wire16) {
  uint16_t h = (uint16_t)(r >> 8);
  double lo = wire16 ? rr__half_to_float(h) : rr__bf16_to_float(h);
  double hi = wire16 ? rr__half_to_float((uint16_t)(h + 1)) : rr__bf16_to_float((uint16_t)(h + 1));
  double mid = (lo + hi) / 2;
  if (!isfinite(mid)) return 1.0 / 3.0;
  int side = (int)(r % 3); /* on, just below, just above */
  return side == 0 ? mid : side == 1 ? nextafter(mid, -INFINITY) : nextafter(mid, INFINITY);
}

static void fill(void *buf, size_t n, rr_dtype d) {
  static const uint32_t f_special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                       0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x00000001u,
                                       0x007fffffu, 0x00800000u, 0x7f7fffffu, 0x3f800000u,
                                       0x33800000u, 0x33800001u, 0x387fe000u, 0x477ff000u};
  static const uint64_t d_special[] = {0,
                                       0x8000000000000000ull,
                                       0x7ff0000000000000ull,
                                       0xfff0000000000000ull,
                                       0x7ff8000000000000ull,
                                       0x7ff0000000000001ull,
                                       0xfff8000000abcdefull,
                                       0x7ff4000020000000ull,
                                       1,
                                       0x000fffffffffffffull,
                                       0x7fefffffffffffffull,
                                       0x47efffffe0000000ull,
                                       0x3ff0000000000000ull};
  size_t es = rr_dtype_size(d);
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    unsigned kind = (unsigned)(r >> 60); /* 0..15 */
    char *p = (char *)buf + i * es;
    switch (d) {
      case RR_FLOAT16: {
        uint16_t v = t_elem_f16(r);
        memcpy(p, &v, 2);
        break;
      }
      case RR_BFLOAT16: {
        uint16_t v = t_elem_bf16(r);
        memcpy(p, &v, 2);
        break;
      }
      case RR_FLOAT32: {
        uint32_t v;
        if (kind < 7) {
          v = (uint32_t)r;
        } else if (kind < 9) {
          v = f_special[(r >> 16) % (sizeof f_special / 4)];
        } else {
          float f = kind < 12 ? (float)((int64_t)(r % 2000001) - 1000000) / 1024.0f
                              : (float)tie64(r, kind & 1); /* exact: ties are floats */
          memcpy(&v, &f, 4);
        }
        memcpy(p, &v, 4);
        break;
      }
      default: { /* float64 */
        uint64_t v;
        if (kind < 6) {
          v = r;
        } else if (kind < 8) {
          v = d_special[(r >> 8) % (sizeof d_special / 8)];
        } else {
          double f =
              kind < 11 ? (double)((int64_t)(r % 2000001) - 1000000) / 3.0 : tie64(r, kind & 1);
          memcpy(&v, &f, 8);
        }
        memcpy(p, &v, 8);
      }
    }
  }
}

enum { SCALE, DIVIDE, COMPRESS, DECOMPRESS };
static const char *g_what[] = {"scale", "divide", "compress", "decompress"};

/* The device path's result, computed on the host from the element functions. */
static void elem(int what, void *dst, const void *src, size_t n, rr_dtype d, rr_dtype wire,
                 int world) {
  const double s64 = 1.0 / (double)world;
  const float s = (float)s64, w = (float)world;
  const int w16 = wire == RR_FLOAT16;
  uint16_t *o16 = dst;
  const uint16_t *i16 = src;
  for (size_t i = 0; i < n; i++) {
    switch (what * 4 + (d == RR_FLOAT16 ? 0 : d == RR_BFLOAT16 ? 1 : d == RR_FLOAT32 ? 2 : 3)) {
      case SCALE * 4 + 0:
        o16[i] = rrd_scale_f16(i16[i], s);
        break;
      case SCALE * 4 + 1:
        o16[i] = rrd_scale_bf16(i16[i], s);
        break;
      case SCALE * 4 + 2:
        ((float *)dst)[i] = rrd_scale_f32(((const float *)src)[i], s);
        break;
      case SCALE * 4 + 3:
        ((double *)dst)[i] = rrd_scale_f64(((const double *)src)[i], s64);
        break;
      case DIVIDE * 4 + 0:
        o16[i] = rrd_divide_f16(i16[i], w);
        break;
      case DIVIDE * 4 + 1:
        o16[i] = rrd_divide_bf16(i16[i], w);
        break;
      case DIVIDE * 4 + 2:
        ((float *)dst)[i] = rrd_divide_f32(((const float *)src)[i], w);
        break;
      case DIVIDE * 4 + 3:
        ((double *)dst)[i] = rrd_divide_f64(((const double *)src)[i], (double)world);
        break;
      case COMPRESS * 4 + 0:
        o16[i] = rrd_compress_f16(i16[i], w, w16);
        break;
      case COMPRESS * 4 + 1:
        o16[i] = rrd_compress_bf16(i16[i], w, w16);
        break;
      case COMPRESS * 4 + 2:
        o16[i] = rrd_compress_f32(((const float *)src)[i], w, w16);
        break;
      case COMPRESS * 4 + 3:
        o16[i] = rrd_compress_f64(((const double *)src)[i], w, w16);
        break;
      case DECOMPRESS * 4 + 0:
        o16[i] = rrd_decompress_f16(i16[i], w16);
        break;
      case DECOMPRESS * 4 + 1:
        o16[i] = rrd_decompress_bf16(i16[i], w16);
        break;
      case DECOMPRESS * 4 + 2:
        ((float *)dst)[i] = rrd_decompress_f32(i16[i], w16);
        break;
      case DECOMPRESS * 4 + 3:
        ((double *)dst)[i] = rrd_decompress_f64(i16[i], w16);
        break;
    }
  }
}

/* ddp/hooks.c's host loop for the same operation. */
static void host(int what, void *dst, const void *src, size_t n, rr_dtype d, rr_dtype wire,
                 int world) {
  switch (what) {
    case SCALE:
      rr__ddp_copy_in(dst, src, n, d, 1, world);
      break;
    case DIVIDE:
      memcpy(dst, src, n * rr_dtype_size(d));
      rr__ddp_divide(dst, n, d, world);
      break;
    case COMPRESS:
      rr__ddp_compress(dst, src, n, d, wire, world);
      break;
    default:
      rr__ddp_decompress(dst, src, n, d, wire);
      break;
  }
}

static void hex(char *out, size_t cap, const void *p, size_t es) {
  uint64_t v = 0;
  memcpy(&v, p, es);
  snprintf(out, cap, "0x%0*" PRIx64, (int)(es * 2), v);
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 100000;
  static const rr_dtype dts[] = {RR_FLOAT16, RR_BFLOAT16, RR_FLOAT32, RR_FLOAT64};
  static const int worlds[] = {1, 2, 3, 4, 5, 7, 8, 13, 64, 128};
  void *src = malloc(n * 8), *ref = malloc(n * 8), *got = malloc(n * 8);
  if (!src || !ref || !got) return 1;
  long cases = 0, failures = 0;
  for (int what = SCALE; what <= DECOMPRESS; what++)
    for (int k = 0; k < 4; k++) {
      rr_dtype d = dts[k];
      for (int wi = 0; wi < 2; wi++) {
        rr_dtype wire = wi ? RR_BFLOAT16 : RR_FLOAT16;
        if (wi && (what == SCALE || what == DIVIDE)) continue; /* no wire type */
        /* Input: gradients (decompress: wire values). */
        rr_dtype in = what == DECOMPRESS ? wire : d;
        size_t ies = rr_dtype_size(in), oes = rr_dtype_size(what == COMPRESS ? wire : d);
        fill(src, n, in);
        for (size_t wj = 0; wj < sizeof worlds / sizeof worlds[0]; wj++) {
          int world = worlds[wj];
          if (what == DECOMPRESS && wj > 0) break; /* world plays no part */
          memset(ref, 0x5a, n * 8);
          memset(got, 0xa5, n * 8);
          host(what, ref, src, n, d, wire, world);
          elem(what, got, src, n, d, wire, world);
          cases++;
          if (memcmp(ref, got, n * oes) == 0) continue;
          failures++;
          size_t i = 0;
          while (memcmp((char *)ref + i * oes, (char *)got + i * oes, oes) == 0) i++;
          char x[24], r[24], g[24];
          hex(x, sizeof x, (char *)src + i * ies, ies);
          hex(r, sizeof r, (char *)ref + i * oes, oes);
          hex(g, sizeof g, (char *)got + i * oes, oes);
          printf(
              "FAIL %s %s gradients%s%s world %d: element %zu: input %s gives %s in ddp/hooks.c, "
              "%s "
              "in ddp_elem.cuh\n",
              g_what[what], rr_dtype_name(d), what >= COMPRESS ? ", wire " : "",
              what >= COMPRESS ? rr_dtype_name(wire) : "", world, i, x, r, g);
        }
      }
    }
  printf("%ld cases x %zu elements: %ld mismatch(es)\n", cases, n, failures);
  free(src), free(ref), free(got);
  return failures ? 1 : 0;
}
