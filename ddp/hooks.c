/* DDP comm hooks: what a full bucket goes through on its way into and out of its all-reduce,
 * as torch's default_comm_hooks.cpp (allreduce_hook, fp16_compress_hook, bf16_compress_hook;
 * with no hook, the 1/W scaling as gradients are copied in). Apart from ddp.c because the
 * arithmetic here is a contract: the CUDA kernels (cuda/ddp_elem.cuh) must give these loops'
 * bits exactly, tests/test_ddp_elem.c holds them to it through ddp/ddp_host.h, and one file
 * is then all there is to read when either side changes. The copy back out of a bucket stays
 * in rr_ddp_sync, which walks every bucket whatever the hook.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/half.h"
#include "common/status.h"
#include "common/util.h"
#include "cuda/cuda.h"
#include "ddp/ddp_internal.h"

/* double -> float rounding to odd: truncate, then set the last bit when inexact. A second
 * rounding to a format with at least 2 fewer mantissa bits (half: 11, bfloat16: 8, float has
 * 24) then rounds exactly as a direct double -> half/bfloat16 conversion would (torch's
 * .to(float16) on a float64 tensor rounds once). */
static float rr__f64_to_f32_odd(double x) {
  float f = (float)x;
  if (isnan(x) || (double)f == x) return f;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (fabs((double)f) > fabs(x)) u--; /* rounded away from zero: step back toward it */
  u |= 1u;
  memcpy(&f, &u, 4);
  return f;
}

static double rr__load(const void *p, size_t i, rr_dtype d) {
  switch (d) {
    case RR_FLOAT16:
      return rr__half_to_float(((const uint16_t *)p)[i]);
    case RR_BFLOAT16:
      return rr__bf16_to_float(((const uint16_t *)p)[i]);
    case RR_FLOAT32:
      return ((const float *)p)[i];
    default:
      return ((const double *)p)[i];
  }
}

/* The 16-bit wire type of a compression hook, rounded once from any float type. */
static uint16_t rr__to16(double x, rr_dtype src, rr_dtype wire) {
  float f = src == RR_FLOAT64 ? rr__f64_to_f32_odd(x) : (float)x; /* exact unless float64 */
  return wire == RR_FLOAT16 ? rr__float_to_half(f) : rr__float_to_bf16(f);
}
static float rr__from16(uint16_t h, rr_dtype wire) {
  return wire == RR_FLOAT16 ? rr__half_to_float(h) : rr__bf16_to_float(h);
}

/* Gradient -> bucket. mul: torch's `at::mul_out(bucket_view, grad, 1/W)`, computed in the
 * type's op-math (float for half/bfloat16/float, double for double) with the scalar cast to
 * it; mul == 0: a plain copy (hooks do their own scaling). */
void rr__ddp_copy_in(void *dst, const void *src, size_t n, rr_dtype d, int mul, int world) {
  if (!mul) {
    memcpy(dst, src, n * rr_dtype_size(d));
    return;
  }
  double s64 = 1.0 / (double)world;
  float s = (float)s64;
  switch (d) {
    case RR_FLOAT32:
      for (size_t i = 0; i < n; i++) ((float *)dst)[i] = ((const float *)src)[i] * s;
      break;
    case RR_FLOAT64:
      for (size_t i = 0; i < n; i++) ((double *)dst)[i] = ((const double *)src)[i] * s64;
      break;
    case RR_FLOAT16:
      for (size_t i = 0; i < n; i++)
        ((uint16_t *)dst)[i] = rr__float_to_half(rr__half_to_float(((const uint16_t *)src)[i]) * s);
      break;
    default: /* bfloat16 */
      for (size_t i = 0; i < n; i++)
        ((uint16_t *)dst)[i] = rr__float_to_bf16(rr__bf16_to_float(((const uint16_t *)src)[i]) * s);
      break;
  }
}

/* torch's allreduce_hook: `tensor.div_(world_size)`, a true division in op-math. */
void rr__ddp_divide(void *buf, size_t n, rr_dtype d, int world) {
  float w = (float)world;
  switch (d) {
    case RR_FLOAT32:
      for (size_t i = 0; i < n; i++) ((float *)buf)[i] /= w;
      break;
    case RR_FLOAT64:
      for (size_t i = 0; i < n; i++) ((double *)buf)[i] /= (double)world;
      break;
    case RR_FLOAT16:
      for (size_t i = 0; i < n; i++)
        ((uint16_t *)buf)[i] = rr__float_to_half(rr__half_to_float(((uint16_t *)buf)[i]) / w);
      break;
    default:
      for (size_t i = 0; i < n; i++)
        ((uint16_t *)buf)[i] = rr__float_to_bf16(rr__bf16_to_float(((uint16_t *)buf)[i]) / w);
      break;
  }
}

/* fp16_compress_hook / bf16_compress_hook, first half: `buffer.to(wire).div_(world_size)`:
 * round to the wire type, then divide in float and round again. */
void rr__ddp_compress(uint16_t *dst, const void *src, size_t n, rr_dtype d, rr_dtype wire,
                      int world) {
  float w = (float)world;
  for (size_t i = 0; i < n; i++) {
    uint16_t h = rr__to16(rr__load(src, i, d), d, wire);
    dst[i] = rr__to16((double)(rr__from16(h, wire) / w), RR_FLOAT32, wire);
  }
}

/* Second half: `decompressed.copy_(result)`, the wire value cast to the gradient's type. */
void rr__ddp_decompress(void *dst, const uint16_t *src, size_t n, rr_dtype d, rr_dtype wire) {
  for (size_t i = 0; i < n; i++) {
    float f = rr__from16(src[i], wire);
    switch (d) {
      case RR_FLOAT32:
        ((float *)dst)[i] = f;
        break;
      case RR_FLOAT64:
        ((double *)dst)[i] = f;
        break;
      case RR_FLOAT16:
        ((uint16_t *)dst)[i] = rr__float_to_half(f);
        break;
      default:
        ((uint16_t *)dst)[i] = rr__float_to_bf16(f);
        break;
    }
  }
}

/* Bucket b is complete: run the hook on it (on the host, or as a kernel for a device bucket)
 * and start its all-reduce without waiting, so it overlaps the rest of the backward. */
int rr__ddp_launch(rr_ddp *d, int b) {
  rr__ddp_bucket *k = &d->buckets[b];
  void *wire = k->buf;
  rr_dtype wdt = k->dtype;
  int64_t t0 = rr__now_ns();
  int compressed = d->opt.hook == RR_DDP_HOOK_FP16 || d->opt.hook == RR_DDP_HOOK_BF16;
  if (compressed) {
    wdt = d->opt.hook == RR_DDP_HOOK_FP16 ? RR_FLOAT16 : RR_BFLOAT16;
    wire = k->comp;
  }
  if (k->device >= 0) {
    /* The same work as below as one kernel over the whole bucket on the group's stream,
     * which the all-reduce waits for (an event recorded on that stream when it is submitted).
     * Without a hook it is the 1/W scaling, done here in place rather than as each gradient
     * was copied in (ddp.c, rr_ddp_grad_ready): one launch per bucket. */
    int prev, st = rr__ddp_enter(d, &prev);
    void *s = rr__ddp_stream(d);
    if (st == RR_OK && d->opt.hook == RR_DDP_HOOK_NONE)
      st = rr__cuda_ddp(RR__CUDA_DDP_SCALE, k->buf, k->buf, k->count, k->dtype, k->dtype, d->world,
                        s);
    else if (st == RR_OK && d->opt.hook == RR_DDP_HOOK_ALLREDUCE)
      st = rr__cuda_ddp(RR__CUDA_DDP_DIVIDE, k->buf, NULL, k->count, k->dtype, k->dtype, d->world,
                        s);
    else if (st == RR_OK)
      st = rr__cuda_ddp(RR__CUDA_DDP_COMPRESS, k->comp, k->buf, k->count, k->dtype, wdt, d->world,
                        s);
    rr__ddp_leave(d, prev);
    if (st != RR_OK) {
      rr__prefix_error(st,
                       "rank %d: rr_ddp_grad_ready: scaling or comm hook on bucket %d (CUDA "
                       "device %d)",
                       d->rank, b, k->device);
      return rr__ddp_abort(d, st);
    }
  } else if (d->opt.hook == RR_DDP_HOOK_ALLREDUCE) {
    rr__ddp_divide(k->buf, k->count, k->dtype, d->world);
  } else if (compressed) {
    rr__ddp_compress(k->comp, k->buf, k->count, k->dtype, wdt, d->world);
  } /* a host bucket without a hook: scaled while copied in */
  d->stats.copy_s += rr__ddp_elapsed(t0);
  int st = rr_all_reduce_async(d->pg, wire, wire, k->count, wdt, RR_SUM, &k->work);
  if (st != RR_OK) {
    rr__prefix_error(st, "rank %d: rr_ddp_grad_ready: all-reduce of bucket %d (%zu x %s)", d->rank,
                     b, k->count, rr_dtype_name(wdt));
    return rr__ddp_break(d, st);
  }
  k->launched = 1;
  d->stats.buckets_reduced++;
  d->stats.bytes_reduced += (double)k->count * (double)rr_dtype_size(wdt);
  return RR_OK;
}
