// The DDP wrapper's element work on CUDA gradients (the device path of ddp/): scaling a
// gradient by 1/world into its bucket, the allreduce hook's division, and the fp16 / bf16
// compression hooks' cast-divide and cast-back. Each thread handles elements i, i + stride,
// ... (grid-stride); the per-element functions are cuda/ddp_elem.cuh, the code the host test
// compares with ddp/hooks.c's host loops bit for bit, so the device and host paths give the
// same bits. These are small, memory-bound passes over one bucket (25 MiB at most by
// default): one element per thread per trip is enough. The DDP wrapper launches each once per
// bucket, over the bucket's contiguous range: the scaling in place (src == dst, after the
// gradients were copied in), the decompression into the bucket before the copies out. In
// place is safe because each element is read and written by the same thread, read first.
//
// Plain C entry point (extern "C", cuda/cuda.h): rr__cuda_ddp_launch. Error text is
// formatted by cuda/runtime.c.
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "cuda/cuda.h"
#include "cuda/ddp_elem.cuh"

namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;  // enough to fill any current GPU; the rest is the stride

// Every DDP element operation has one shape, dst[i] = F(src[i], scalars...), where F is one of
// cuda/ddp_elem.cuh's element functions (the divide hook works in place: src is dst). So one
// kernel serves every (operation, dtype) pair. F is a template argument, not a pointer passed
// at run time, so each instance is the loop a kernel written out for that pair would be, with
// F inlined.
template <auto F, typename D, typename S, typename... A>
__global__ void __launch_bounds__(kThreads) ddp_kernel(size_t n, D *dst, const S *src, A... a) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = F(src[i], a...);
}

// The array and scalar types are read off F's signature (its result, its first parameter, the
// rest), and the scalars passed must have exactly those types, so a case below can neither
// pair an element function with the wrong pointers nor convert a scalar on the way in: the
// bits stay those the host loops (ddp/hooks.c) compute with the same scalars.
template <auto F, typename D, typename S, typename... A, typename... T>
cudaError_t launch_as(D (*)(S, A...), size_t n, void *dst, const void *src, cudaStream_t stream,
                      const char **what, T... a) {
  static_assert(std::is_same_v<void (*)(A...), void (*)(T...)>,
                "a DDP kernel's scalars must have its element function's parameter types");
  if (n == 0) return cudaSuccess;
  size_t want = (n + kThreads - 1) / kThreads;
  unsigned blocks = (unsigned)(want > kMaxBlocks ? kMaxBlocks : want);
  ddp_kernel<F, D, S, A...><<<blocks, kThreads, 0, stream>>>(n, static_cast<D *>(dst),
                                                             static_cast<const S *>(src), a...);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) *what = "DDP kernel launch";
  return e;
}

// launch<F>(...) names F once; launch_as takes the types from it.
template <auto F, typename... T>
int launch(size_t n, void *dst, const void *src, cudaStream_t stream, const char **what, T... a) {
  return (int)launch_as<F>(F, n, dst, src, stream, what, a...);
}

}  // namespace

extern "C" int rr__cuda_ddp_launch(int kind, void *dst, const void *src, size_t n, int dtype,
                                   int wire, int world, void *stream, const char **what) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  *what = "DDP kernel dispatch";
  if (world < 1) return (int)cudaErrorInvalidValue;
  // The scalars exactly as ddp/hooks.c makes them: 1/world in double, then cast to float.
  const double s64 = 1.0 / (double)world;
  const float s32 = (float)s64, w32 = (float)world;
  const int wire16 = wire == RR_FLOAT16;
  if ((kind == RR__CUDA_DDP_COMPRESS || kind == RR__CUDA_DDP_DECOMPRESS) && wire != RR_FLOAT16 &&
      wire != RR_BFLOAT16)
    return (int)cudaErrorInvalidValue;
  switch (kind) {
    case RR__CUDA_DDP_SCALE:
      switch (dtype) {
        case RR_FLOAT32:
          return launch<rrd_scale_f32>(n, dst, src, s, what, s32);
        case RR_FLOAT64:
          return launch<rrd_scale_f64>(n, dst, src, s, what, s64);
        case RR_FLOAT16:
          return launch<rrd_scale_f16>(n, dst, src, s, what, s32);
        case RR_BFLOAT16:
          return launch<rrd_scale_bf16>(n, dst, src, s, what, s32);
      }
      break;
    case RR__CUDA_DDP_DIVIDE:  // in place
      switch (dtype) {
        case RR_FLOAT32:
          return launch<rrd_divide_f32>(n, dst, dst, s, what, w32);
        case RR_FLOAT64:
          return launch<rrd_divide_f64>(n, dst, dst, s, what, (double)world);
        case RR_FLOAT16:
          return launch<rrd_divide_f16>(n, dst, dst, s, what, w32);
        case RR_BFLOAT16:
          return launch<rrd_divide_bf16>(n, dst, dst, s, what, w32);
      }
      break;
    case RR__CUDA_DDP_COMPRESS:
      switch (dtype) {
        case RR_FLOAT32:
          return launch<rrd_compress_f32>(n, dst, src, s, what, w32, wire16);
        case RR_FLOAT64:
          return launch<rrd_compress_f64>(n, dst, src, s, what, w32, wire16);
        case RR_FLOAT16:
          return launch<rrd_compress_f16>(n, dst, src, s, what, w32, wire16);
        case RR_BFLOAT16:
          return launch<rrd_compress_bf16>(n, dst, src, s, what, w32, wire16);
      }
      break;
    case RR__CUDA_DDP_DECOMPRESS:
      switch (dtype) {
        case RR_FLOAT32:
          return launch<rrd_decompress_f32>(n, dst, src, s, what, wire16);
        case RR_FLOAT64:
          return launch<rrd_decompress_f64>(n, dst, src, s, what, wire16);
        case RR_FLOAT16:
          return launch<rrd_decompress_f16>(n, dst, src, s, what, wire16);
        case RR_BFLOAT16:
          return launch<rrd_decompress_bf16>(n, dst, src, s, what, wire16);
      }
      break;
  }
  return (int)cudaErrorInvalidValue;
}
