// Reduction kernels: dst[i] = a[i] op b[i] for every dtype x op of ring/op.c, optionally
// written to a second destination too (the ring's fused receive-reduce-copy).
//
// One kernel per (dtype, op), a template over the element type and an element functor from
// cuda/reduce_elem.cuh (the same functions the host tests compare with ring/op.c bit for
// bit). Each thread reduces 16-byte vectors (4 in flight per loop trip, grid-stride) when
// every pointer is 16-byte aligned, then the scalar tail; without alignment it is all scalar.
// A vector is reduced element by element, or 32 bits at a time where that is cheaper:
// float16 / bfloat16 convert two elements per instruction (sm_80+), int8 AVG adds four.
// Integer AVG divides by a multiply-high with a magic number the launcher makes on the host
// (no division, no double precision on the device).
// The grid: one 16-byte vector (or element) per thread when the data is small, so a 256 KiB
// segment already spreads over many SMs, and at most one full wave of resident blocks (the
// SM count times what the occupancy calculator says fits on one SM, registers included;
// ptxas gives these kernels 48-64 registers a thread on sm_90, so 2 blocks of 512, not 4)
// when it is large, the grid-stride loop covering the rest.
//
// Plain C entry point (extern "C", cuda/cuda.h): rr__cuda_reduce_launch, the real CUDA
// table's reduce entry (cuda/real.c). Error text is formatted by cuda/runtime.c.
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/dtype.h"
#include "cuda/cuda.h"
#include "cuda/reduce_elem.cuh"

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;

// The reduction of one element pair. `d` is AVG's divisor (unused otherwise): the float
// itself for the floating types, a magic multiplier for the integers (rre_div32/64, made in
// avg_divisor below, on the host, once per launch).
#define RR__FUNCTOR(name, T, D, expr)                         \
  struct name {                                               \
    D d;                                                      \
    static constexpr bool kWords = false;                     \
    __device__ __forceinline__ T operator()(T x, T y) const { \
      return expr;                                            \
    }                                                         \
  };

// Functors that also reduce a whole 32-bit word of elements at once (`word`), which the
// vector path then calls instead of the element function: float16 / bfloat16 (two elements,
// converted by the paired instructions) and int8 AVG (four sums in one add). The scalar tail
// takes one element at a time; the host test checks that both agree with ring/op.c.
#define RR__WORD_FUNCTOR(name, T, D, expr, wexpr)                            \
  struct name {                                                              \
    D d;                                                                     \
    static constexpr bool kWords = true;                                     \
    __device__ __forceinline__ T operator()(T x, T y) const {                \
      return expr;                                                           \
    }                                                                        \
    __device__ __forceinline__ uint32_t word(uint32_t x, uint32_t y) const { \
      return wexpr;                                                          \
    }                                                                        \
  };

#define RR__INT_AVG_FUNCTOR(tag, T, D) RR__FUNCTOR(tag##_avg, T, D, rre_##tag##_avgm(x, y, d))
#define RR__INT8_AVG_FUNCTOR(tag, T, D) \
  RR__WORD_FUNCTOR(tag##_avg, T, D, rre_##tag##_avgm(x, y, d), rre_##tag##x4_avgm(x, y, d))

#define RR__INT_FUNCTORS(tag, T, D, AVG)                \
  RR__FUNCTOR(tag##_sum, T, D, rre_##tag##_sum(x, y))   \
  RR__FUNCTOR(tag##_prod, T, D, rre_##tag##_prod(x, y)) \
  RR__FUNCTOR(tag##_min, T, D, rre_##tag##_min(x, y))   \
  RR__FUNCTOR(tag##_max, T, D, rre_##tag##_max(x, y))   \
  AVG(tag, T, D)                                        \
  RR__FUNCTOR(tag##_band, T, D, rre_##tag##_band(x, y)) \
  RR__FUNCTOR(tag##_bor, T, D, rre_##tag##_bor(x, y))   \
  RR__FUNCTOR(tag##_bxor, T, D, rre_##tag##_bxor(x, y))

#define RR__FLT_FUNCTORS(tag, T, D)                     \
  RR__FUNCTOR(tag##_sum, T, D, rre_##tag##_sum(x, y))   \
  RR__FUNCTOR(tag##_prod, T, D, rre_##tag##_prod(x, y)) \
  RR__FUNCTOR(tag##_min, T, D, rre_##tag##_min(x, y))   \
  RR__FUNCTOR(tag##_max, T, D, rre_##tag##_max(x, y))   \
  RR__FUNCTOR(tag##_avg, T, D, rre_##tag##_avg(x, y, d))

#define RR__HALF_FUNCTOR(tag, op, ...)                                              \
  RR__WORD_FUNCTOR(tag##_##op, uint16_t, float, rre_##tag##_##op(x, y __VA_ARGS__), \
                   rre_##tag##x2_##op(x, y __VA_ARGS__))
#define RR__HALF_FUNCTORS(tag) \
  RR__HALF_FUNCTOR(tag, sum)   \
  RR__HALF_FUNCTOR(tag, prod)  \
  RR__HALF_FUNCTOR(tag, min)   \
  RR__HALF_FUNCTOR(tag, max)   \
  RR__HALF_FUNCTOR(tag, avg, , d)

RR__INT_FUNCTORS(i8, int8_t, rre_div32, RR__INT8_AVG_FUNCTOR)
RR__INT_FUNCTORS(u8, uint8_t, rre_div32, RR__INT_AVG_FUNCTOR)
RR__INT_FUNCTORS(i32, int32_t, rre_div32, RR__INT_AVG_FUNCTOR)
RR__INT_FUNCTORS(i64, int64_t, rre_div64, RR__INT_AVG_FUNCTOR)
RR__HALF_FUNCTORS(f16)
RR__HALF_FUNCTORS(bf16)
RR__FLT_FUNCTORS(f32, float, float)
RR__FLT_FUNCTORS(f64, double, double)

// AVG's divisor as its functor holds it; d >= 2 (the launcher runs the sum for d <= 1).
template <typename D>
D avg_divisor(int d);
template <>
float avg_divisor<float>(int d) {
  return (float)d;
}
template <>
double avg_divisor<double>(int d) {
  return (double)d;
}
template <>
rre_div32 avg_divisor<rre_div32>(int d) {
  return rre_div32_make((uint32_t)d);
}
template <>
rre_div64 avg_divisor<rre_div64>(int d) {
  return rre_div64_make((uint32_t)d);
}

template <typename T>
union Vec {
  uint4 u;
  uint32_t w[4];
  T e[16 / sizeof(T)];
};

// One 16-byte vector: x = x op y, by element, or by 32-bit words where the functor has them.
template <typename T, typename Op>
__device__ __forceinline__ void apply(Vec<T> &x, const Vec<T> &y, const Op &op) {
  if constexpr (Op::kWords) {
#pragma unroll
    for (int w = 0; w < 4; w++) x.w[w] = op.word(x.w[w], y.w[w]);
  } else {
#pragma unroll
    for (int e = 0; e < (int)(16 / sizeof(T)); e++) x.e[e] = op(x.e[e], y.e[e]);
  }
}

template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    reduce_kernel(T *dst, T *dst2, const T *a, const T *b, size_t n, size_t nvec, Op op) {
  constexpr int E = 16 / sizeof(T);
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const uint4 *va = reinterpret_cast<const uint4 *>(a);
  const uint4 *vb = reinterpret_cast<const uint4 *>(b);
  uint4 *vd = reinterpret_cast<uint4 *>(dst);
  uint4 *vd2 = reinterpret_cast<uint4 *>(dst2);
  size_t i = tid;
  // Loads of a trip come before its stores, so dst == a or dst == b is safe.
  for (; i + (kUnroll - 1) * stride < nvec; i += kUnroll * stride) {
    Vec<T> x[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      x[u].u = va[i + u * stride];
      y[u].u = vb[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      apply(x[u], y[u], op);
      vd[i + u * stride] = x[u].u;
      if (vd2) vd2[i + u * stride] = x[u].u;
    }
  }
  for (; i < nvec; i += stride) {
    Vec<T> x, y;
    x.u = va[i];
    y.u = vb[i];
    apply(x, y, op);
    vd[i] = x.u;
    if (vd2) vd2[i] = x.u;
  }
  for (size_t j = nvec * E + tid; j < n; j += stride) {
    T r = op(a[j], b[j]);
    dst[j] = r;
    if (dst2) dst2[j] = r;
  }
}

// SM count per device, looked up once (racing threads store the same value).
int g_sms[128];

cudaError_t sm_count(int *sms, const char **what) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) {
    *what = "cudaGetDevice";
    return e;
  }
  int cached = dev >= 0 && dev < 128 ? __atomic_load_n(&g_sms[dev], __ATOMIC_RELAXED) : 0;
  if (cached > 0) {
    *sms = cached;
    return cudaSuccess;
  }
  int v = 0;
  e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) {
    *what = "cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)";
    return e;
  }
  if (v < 1) v = 1;
  if (dev >= 0 && dev < 128) __atomic_store_n(&g_sms[dev], v, __ATOMIC_RELAXED);
  *sms = v;
  return cudaSuccess;
}

// How many blocks of this kernel fit on one SM at once, asked once per kernel (racing threads
// store the same value; every GPU of one machine is taken to be of one architecture).
template <typename T, typename Op>
cudaError_t blocks_per_sm(int *out, const char **what) {
  static int cached = 0;
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 1) {
    cudaError_t e =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, reduce_kernel<T, Op>, kThreads, 0);
    if (e != cudaSuccess) {
      *what = "cudaOccupancyMaxActiveBlocksPerMultiprocessor";
      return e;
    }
    if (v < 1) v = 1;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  *out = v;
  return cudaSuccess;
}

template <typename T, typename Op>
cudaError_t launch(void *dst, void *dst2, const void *a, const void *b, size_t n, Op op,
                   cudaStream_t stream, const char **what) {
  if (n == 0) return cudaSuccess;
  constexpr size_t E = 16 / sizeof(T);
  uintptr_t bits = (uintptr_t)dst | (uintptr_t)dst2 | (uintptr_t)a | (uintptr_t)b;
  size_t nvec = (bits & 15u) == 0 ? n / E : 0;
  size_t work = nvec ? nvec + (n - nvec * E) : n;
  int sms = 1, per_sm = 1;
  cudaError_t e = sm_count(&sms, what);
  if (e == cudaSuccess) e = blocks_per_sm<T, Op>(&per_sm, what);
  if (e != cudaSuccess) return e;
  size_t want = (work + kThreads - 1) / kThreads;
  size_t cap = (size_t)sms * (size_t)per_sm;
  unsigned blocks = (unsigned)(want < 1 ? 1 : want > cap ? cap : want);
  reduce_kernel<T, Op><<<blocks, kThreads, 0, stream>>>(
      static_cast<T *>(dst), static_cast<T *>(dst2), static_cast<const T *>(a),
      static_cast<const T *>(b), n, nvec, op);
  e = cudaGetLastError();
  if (e != cudaSuccess) *what = "reduce kernel launch";
  return e;
}

template <typename T, typename Sum, typename Prod, typename Min, typename Max, typename Avg>
cudaError_t dispatch_common(int op, int avg_div, void *dst, void *dst2, const void *a,
                            const void *b, size_t n, cudaStream_t s, const char **what,
                            int *handled) {
  *handled = 1;
  switch (op) {
    case RR_SUM:
      return launch<T>(dst, dst2, a, b, n, Sum{}, s, what);
    case RR_PROD:
      return launch<T>(dst, dst2, a, b, n, Prod{}, s, what);
    case RR_MIN:
      return launch<T>(dst, dst2, a, b, n, Min{}, s, what);
    case RR_MAX:
      return launch<T>(dst, dst2, a, b, n, Max{}, s, what);
    case RR_AVG:
      // As op.c: a divisor of 0 or 1 leaves the sum as it is.
      if (avg_div <= 1) return launch<T>(dst, dst2, a, b, n, Sum{}, s, what);
      return launch<T>(dst, dst2, a, b, n, Avg{avg_divisor<decltype(Avg::d)>(avg_div)}, s, what);
  }
  *handled = 0;
  return cudaSuccess;
}

#define RR__DISPATCH_FLT(tag, T)                                              \
  dispatch_common<T, tag##_sum, tag##_prod, tag##_min, tag##_max, tag##_avg>( \
      op, avg_div, dst, dst2, a, b, n, s, what, &handled)

#define RR__DISPATCH_INT(tag, T)                                     \
  [&]() -> cudaError_t {                                             \
    cudaError_t r = RR__DISPATCH_FLT(tag, T);                        \
    if (handled) return r;                                           \
    handled = 1;                                                     \
    switch (op) {                                                    \
      case RR_BAND:                                                  \
        return launch<T>(dst, dst2, a, b, n, tag##_band{}, s, what); \
      case RR_BOR:                                                   \
        return launch<T>(dst, dst2, a, b, n, tag##_bor{}, s, what);  \
      case RR_BXOR:                                                  \
        return launch<T>(dst, dst2, a, b, n, tag##_bxor{}, s, what); \
    }                                                                \
    handled = 0;                                                     \
    return cudaSuccess;                                              \
  }()

// ---- the one-kernel form (cuda/api.h, rr__cuda_direct) ----
//
// Ranks that share a GPU: one kernel reads every rank's input and writes every rank's output
// (2nS bytes for n ranks of S bytes, the least any form can move). blockIdx.y is the task
// (reduce_scatter and all_gather have one per block, the others one); a thread folds one
// 16-byte vector of every input, in[0] op in[1] op ... in rank order, the last step with
// `last` (AVG's division; the op itself otherwise), and stores it to every output. Loads come
// before stores for each vector, so an output that is also an input (in place) is safe; the
// tasks' outputs never overlap (the caller's rule).

template <typename T, typename Op, typename Last>
__global__ void __launch_bounds__(kThreads)
    direct_kernel(const rr__cuda_direct d, size_t nvec, Op op, Last last) {
  constexpr int E = 16 / sizeof(T);
  const rr__cuda_direct_task &t = d.task[blockIdx.y];
  const int nin = t.nin, nout = t.nout;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = tid; i < nvec; i += stride) {
    Vec<T> x;
    x.u = reinterpret_cast<const uint4 *>(t.in[0])[i];
    for (int r = 1; r < nin; r++) {
      Vec<T> y;
      y.u = reinterpret_cast<const uint4 *>(t.in[r])[i];
      if (r == nin - 1)
        apply(x, y, last);
      else
        apply(x, y, op);
    }
    for (int o = 0; o < nout; o++) reinterpret_cast<uint4 *>(t.out[o])[i] = x.u;
  }
  for (size_t j = nvec * E + tid; j < d.n; j += stride) {
    T x = static_cast<const T *>(t.in[0])[j];
    for (int r = 1; r < nin; r++) {
      T y = static_cast<const T *>(t.in[r])[j];
      x = r == nin - 1 ? last(x, y) : op(x, y);
    }
    for (int o = 0; o < nout; o++) static_cast<T *>(t.out[o])[j] = x;
  }
}

template <typename T, typename Op, typename Last>
cudaError_t direct_blocks_per_sm(int *out, const char **what) {
  static int cached = 0;
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 1) {
    cudaError_t e =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, direct_kernel<T, Op, Last>, kThreads, 0);
    if (e != cudaSuccess) {
      *what = "cudaOccupancyMaxActiveBlocksPerMultiprocessor (one-kernel form)";
      return e;
    }
    if (v < 1) v = 1;
    __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  }
  *out = v;
  return cudaSuccess;
}

template <typename T, typename Op, typename Last>
cudaError_t direct_launch(const rr__cuda_direct *d, Op op, Last last, cudaStream_t stream,
                          const char **what) {
  constexpr size_t E = 16 / sizeof(T);
  uintptr_t bits = 0;
  for (int k = 0; k < d->ntasks; k++) {
    for (int r = 0; r < d->task[k].nin; r++) bits |= (uintptr_t)d->task[k].in[r];
    for (int o = 0; o < d->task[k].nout; o++) bits |= (uintptr_t)d->task[k].out[o];
  }
  size_t nvec = (bits & 15u) == 0 ? d->n / E : 0;
  size_t work = nvec ? nvec + (d->n - nvec * E) : d->n;
  int sms = 1, per_sm = 1;
  cudaError_t e = sm_count(&sms, what);
  if (e == cudaSuccess) e = direct_blocks_per_sm<T, Op, Last>(&per_sm, what);
  if (e != cudaSuccess) return e;
  // One full wave over all the tasks together.
  size_t cap = ((size_t)sms * (size_t)per_sm + (size_t)d->ntasks - 1) / (size_t)d->ntasks;
  size_t want = (work + kThreads - 1) / kThreads;
  unsigned bx = (unsigned)(want < 1 ? 1 : want > cap ? cap : want);
  dim3 grid(bx, (unsigned)d->ntasks);
  direct_kernel<T, Op, Last><<<grid, kThreads, 0, stream>>>(*d, nvec, op, last);
  e = cudaGetLastError();
  if (e != cudaSuccess) *what = "one-kernel collective launch";
  return e;
}

template <typename T, typename Sum, typename Prod, typename Min, typename Max, typename Avg>
cudaError_t direct_common(const rr__cuda_direct *d, cudaStream_t s, const char **what,
                          int *handled) {
  *handled = 1;
  switch (d->op) {
    case RR_SUM:
      return direct_launch<T>(d, Sum{}, Sum{}, s, what);
    case RR_PROD:
      return direct_launch<T>(d, Prod{}, Prod{}, s, what);
    case RR_MIN:
      return direct_launch<T>(d, Min{}, Min{}, s, what);
    case RR_MAX:
      return direct_launch<T>(d, Max{}, Max{}, s, what);
    case RR_AVG:
      if (d->avg_div <= 1) return direct_launch<T>(d, Sum{}, Sum{}, s, what);
      return direct_launch<T>(d, Sum{}, Avg{avg_divisor<decltype(Avg::d)>(d->avg_div)}, s, what);
  }
  *handled = 0;
  return cudaSuccess;
}

#define RR__DIRECT_FLT(tag, T) \
  direct_common<T, tag##_sum, tag##_prod, tag##_min, tag##_max, tag##_avg>(d, s, what, &handled)

#define RR__DIRECT_INT(tag, T)                                           \
  [&]() -> cudaError_t {                                                 \
    cudaError_t r = RR__DIRECT_FLT(tag, T);                              \
    if (handled) return r;                                               \
    handled = 1;                                                         \
    switch (d->op) {                                                     \
      case RR_BAND:                                                      \
        return direct_launch<T>(d, tag##_band{}, tag##_band{}, s, what); \
      case RR_BOR:                                                       \
        return direct_launch<T>(d, tag##_bor{}, tag##_bor{}, s, what);   \
      case RR_BXOR:                                                      \
        return direct_launch<T>(d, tag##_bxor{}, tag##_bxor{}, s, what); \
    }                                                                    \
    handled = 0;                                                         \
    return cudaSuccess;                                                  \
  }()

}  // namespace

extern "C" int rr__cuda_reduce_launch(void *dst, void *dst2, const void *a, const void *b, size_t n,
                                      int dtype, int op, int avg_div, void *stream,
                                      const char **what) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  int handled = 0;
  cudaError_t e = cudaSuccess;
  *what = "";
  if (!rr__op_applies((rr_dtype)dtype, (rr_op)op)) return (int)cudaErrorInvalidValue;
  switch (dtype) {
    case RR_INT8:
      e = RR__DISPATCH_INT(i8, int8_t);
      break;
    case RR_UINT8:
      e = RR__DISPATCH_INT(u8, uint8_t);
      break;
    case RR_INT32:
      e = RR__DISPATCH_INT(i32, int32_t);
      break;
    case RR_INT64:
      e = RR__DISPATCH_INT(i64, int64_t);
      break;
    case RR_FLOAT16:
      e = RR__DISPATCH_FLT(f16, uint16_t);
      break;
    case RR_BFLOAT16:
      e = RR__DISPATCH_FLT(bf16, uint16_t);
      break;
    case RR_FLOAT32:
      e = RR__DISPATCH_FLT(f32, float);
      break;
    case RR_FLOAT64:
      e = RR__DISPATCH_FLT(f64, double);
      break;
  }
  if (!handled) {
    *what = "reduce dispatch";
    return (int)cudaErrorInvalidValue;
  }
  return (int)e;
}

extern "C" int rr__cuda_direct_launch(const rr__cuda_direct *d, void *stream, const char **what) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  int handled = 0;
  cudaError_t e = cudaSuccess;
  *what = "";
  if (!rr__op_applies((rr_dtype)d->dtype, (rr_op)d->op) || d->ntasks < 1 ||
      d->ntasks > RR__CUDA_DIRECT_MAX)
    return (int)cudaErrorInvalidValue;
  for (int k = 0; k < d->ntasks; k++)
    if (d->task[k].nin < 1 || d->task[k].nin > RR__CUDA_DIRECT_MAX || d->task[k].nout < 0 ||
        d->task[k].nout > RR__CUDA_DIRECT_MAX)
      return (int)cudaErrorInvalidValue;
  if (d->n == 0) return (int)cudaSuccess;
  switch (d->dtype) {
    case RR_INT8:
      e = RR__DIRECT_INT(i8, int8_t);
      break;
    case RR_UINT8:
      e = RR__DIRECT_INT(u8, uint8_t);
      break;
    case RR_INT32:
      e = RR__DIRECT_INT(i32, int32_t);
      break;
    case RR_INT64:
      e = RR__DIRECT_INT(i64, int64_t);
      break;
    case RR_FLOAT16:
      e = RR__DIRECT_FLT(f16, uint16_t);
      break;
    case RR_BFLOAT16:
      e = RR__DIRECT_FLT(bf16, uint16_t);
      break;
    case RR_FLOAT32:
      e = RR__DIRECT_FLT(f32, float);
      break;
    case RR_FLOAT64:
      e = RR__DIRECT_FLT(f64, double);
      break;
  }
  if (!handled) {
    *what = "one-kernel collective dispatch";
    return (int)cudaErrorInvalidValue;
  }
  return (int)e;
}
