/* The fake CUDA table's kernels (tests/fake_cuda/fake_cuda.c runs them on its stream
 * workers): the device kernels' own element functions, cuda/reduce_elem.cuh and
 * cuda/ddp_elem.cuh, which are plain C as well as CUDA C++, applied element by element with
 * the argument rules of cuda/reduce.cu and cuda/ddp.cu. They are the code the GPU runs per
 * element (checked bit for bit against ring/op.c and ddp/hooks.c by cuda_elem_vs_op and
 * ddp.elem_vs_host), not ring/op.c's host reduction, so a collective on the fake goes through
 * the kernels' arithmetic; what the fake cannot show is how nvcc compiles them (docs/cuda.md). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "cuda/cuda.h"
#include "cuda/ddp_elem.cuh"
#include "cuda/reduce_elem.cuh"
#include "tests/fake_cuda/fake_cuda.h"

typedef struct fk {
  void *dst, *dst2;
  const void *a, *b;
  size_t n;
  int dtype, op, div, ddp_kind, wire, world;
} fk;

#define F_LOOP2(T, EXPR)                  \
  do {                                    \
    T *d_ = o->dst, *d2_ = o->dst2;       \
    const T *x_ = o->a, *y_ = o->b;       \
    for (size_t i = 0; i < o->n; i++) {   \
      T x = x_[i], y = y_[i], r = (EXPR); \
      d_[i] = r;                          \
      if (d2_) d2_[i] = r;                \
    }                                     \
  } while (0)

/* dst = a op b, as cuda/reduce.cu's functors do it (AVG with a divisor <= 1: the sum). */
#define F_FLT(tag, T, D)                              \
  switch (o->op) {                                    \
    case RR_SUM:                                      \
      F_LOOP2(T, rre_##tag##_sum(x, y));              \
      return;                                         \
    case RR_PROD:                                     \
      F_LOOP2(T, rre_##tag##_prod(x, y));             \
      return;                                         \
    case RR_MIN:                                      \
      F_LOOP2(T, rre_##tag##_min(x, y));              \
      return;                                         \
    case RR_MAX:                                      \
      F_LOOP2(T, rre_##tag##_max(x, y));              \
      return;                                         \
    case RR_AVG:                                      \
      if (o->div <= 1)                                \
        F_LOOP2(T, rre_##tag##_sum(x, y));            \
      else                                            \
        F_LOOP2(T, rre_##tag##_avg(x, y, (D)o->div)); \
      return;                                         \
  }
#define F_INT(tag, T, D)                  \
  F_FLT(tag, T, D)                        \
  switch (o->op) {                        \
    case RR_BAND:                         \
      F_LOOP2(T, rre_##tag##_band(x, y)); \
      return;                             \
    case RR_BOR:                          \
      F_LOOP2(T, rre_##tag##_bor(x, y));  \
      return;                             \
    case RR_BXOR:                         \
      F_LOOP2(T, rre_##tag##_bxor(x, y)); \
      return;                             \
  }

static void f_reduce(const fk *o) {
  switch (o->dtype) {
    case RR_INT8:
      F_INT(i8, int8_t, double) break;
    case RR_UINT8:
      F_INT(u8, uint8_t, double) break;
    case RR_INT32:
      F_INT(i32, int32_t, double) break;
    case RR_INT64:
      F_INT(i64, int64_t, int64_t) break;
    case RR_FLOAT16:
      F_FLT(f16, uint16_t, float) break;
    case RR_BFLOAT16:
      F_FLT(bf16, uint16_t, float) break;
    case RR_FLOAT32:
      F_FLT(f32, float, float) break;
    case RR_FLOAT64:
      F_FLT(f64, double, double) break;
  }
}

#define F_MAP(D, S, CALL)               \
  do {                                  \
    D *d_ = o->dst;                     \
    const S *s_ = o->a;                 \
    for (size_t i = 0; i < o->n; i++) { \
      S x = s_[i];                      \
      d_[i] = (CALL);                   \
    }                                   \
  } while (0)

/* The DDP element work, with the scalars ddp.cu builds (1/world in double, then float). */
static void f_ddp(const fk *o) {
  const double s64 = 1.0 / (double)o->world;
  const float s32 = (float)s64, w32 = (float)o->world;
  const int w16 = o->wire == RR_FLOAT16;
  switch (o->ddp_kind * 16 + o->dtype) {
    case RR__CUDA_DDP_SCALE * 16 + RR_FLOAT32:
      F_MAP(float, float, rrd_scale_f32(x, s32));
      break;
    case RR__CUDA_DDP_SCALE * 16 + RR_FLOAT64:
      F_MAP(double, double, rrd_scale_f64(x, s64));
      break;
    case RR__CUDA_DDP_SCALE * 16 + RR_FLOAT16:
      F_MAP(uint16_t, uint16_t, rrd_scale_f16(x, s32));
      break;
    case RR__CUDA_DDP_SCALE * 16 + RR_BFLOAT16:
      F_MAP(uint16_t, uint16_t, rrd_scale_bf16(x, s32));
      break;
    case RR__CUDA_DDP_DIVIDE * 16 + RR_FLOAT32:
      F_MAP(float, float, rrd_divide_f32(x, w32));
      break;
    case RR__CUDA_DDP_DIVIDE * 16 + RR_FLOAT64:
      F_MAP(double, double, rrd_divide_f64(x, (double)o->world));
      break;
    case RR__CUDA_DDP_DIVIDE * 16 + RR_FLOAT16:
      F_MAP(uint16_t, uint16_t, rrd_divide_f16(x, w32));
      break;
    case RR__CUDA_DDP_DIVIDE * 16 + RR_BFLOAT16:
      F_MAP(uint16_t, uint16_t, rrd_divide_bf16(x, w32));
      break;
    case RR__CUDA_DDP_COMPRESS * 16 + RR_FLOAT32:
      F_MAP(uint16_t, float, rrd_compress_f32(x, w32, w16));
      break;
    case RR__CUDA_DDP_COMPRESS * 16 + RR_FLOAT64:
      F_MAP(uint16_t, double, rrd_compress_f64(x, w32, w16));
      break;
    case RR__CUDA_DDP_COMPRESS * 16 + RR_FLOAT16:
      F_MAP(uint16_t, uint16_t, rrd_compress_f16(x, w32, w16));
      break;
    case RR__CUDA_DDP_COMPRESS * 16 + RR_BFLOAT16:
      F_MAP(uint16_t, uint16_t, rrd_compress_bf16(x, w32, w16));
      break;
    case RR__CUDA_DDP_DECOMPRESS * 16 + RR_FLOAT32:
      F_MAP(float, uint16_t, rrd_decompress_f32(x, w16));
      break;
    case RR__CUDA_DDP_DECOMPRESS * 16 + RR_FLOAT64:
      F_MAP(double, uint16_t, rrd_decompress_f64(x, w16));
      break;
    case RR__CUDA_DDP_DECOMPRESS * 16 + RR_FLOAT16:
      F_MAP(uint16_t, uint16_t, rrd_decompress_f16(x, w16));
      break;
    case RR__CUDA_DDP_DECOMPRESS * 16 + RR_BFLOAT16:
      F_MAP(uint16_t, uint16_t, rrd_decompress_bf16(x, w16));
      break;
  }
}

void rr_fake_reduce_run(void *dst, void *dst2, const void *a, const void *b, size_t n, int dtype,
                        int op, int div) {
  fk o = {.dst = dst, .dst2 = dst2, .a = a, .b = b, .n = n, .dtype = dtype, .op = op, .div = div};
  f_reduce(&o);
}

void rr_fake_ddp_run(int kind, void *dst, const void *src, size_t n, int dtype, int wire,
                     int world) {
  fk o = {
      .dst = dst, .a = src, .n = n, .dtype = dtype, .ddp_kind = kind, .wire = wire, .world = world};
  f_ddp(&o);
}

/* The one-kernel form (cuda/reduce.cu's direct_kernel): each task's inputs folded left in
 * rank order with the element functions (AVG: the sum, divided in the last step), into a
 * scratch copy first, so an output that is also an input is read whole before it is
 * written, then stored to every output. */
void rr_fake_direct_run(const rr__cuda_direct *d) {
  const size_t bytes = d->n * rr_dtype_size((rr_dtype)d->dtype);
  char *acc = malloc(bytes ? bytes : 1);
  if (!acc) abort(); /* a test double: no way to report it on a stream worker */
  for (int k = 0; k < d->ntasks; k++) {
    const rr__cuda_direct_task *t = &d->task[k];
    memcpy(acc, t->in[0], bytes);
    for (int r = 1; r < t->nin; r++)
      rr_fake_reduce_run(acc, NULL, acc, t->in[r], d->n, d->dtype, d->op,
                         r == t->nin - 1 ? d->avg_div : 0);
    for (int o = 0; o < t->nout; o++) memcpy(t->out[o], acc, bytes);
  }
  free(acc);
}
