// The DDP wrapper's element work on CUDA gradients (ddp/ddp.c's device path): scaling a
// gradient by 1/world into its bucket, the allreduce hook's division, and the fp16 / bf16
// compression hooks' cast-divide and cast-back. Each thread handles elements i, i + stride,
// ... (grid-stride); the per-element functions are cuda/ddp_elem.cuh, the code the host test
// compares with ddp.c's host loops bit for bit, so the device and host paths give the same
// bits. These are small, memory-bound passes over one bucket (25 MiB at most by default):
// one element per thread per trip is enough.
//
// Plain C entry point (extern "C", cuda/cuda.h): rr__cuda_ddp_launch. Error text is
// formatted by cuda/runtime.c.
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/cuda.h"
#include "cuda/ddp_elem.cuh"

namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;  // enough to fill any current GPU; the rest is the stride

template <typename F>
__global__ void __launch_bounds__(kThreads) ddp_kernel(size_t n, F f) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

// One functor per (operation, dtype). dst and src may be the same array (divide).
struct ScaleF32 {
  float *dst;
  const float *src;
  float s;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_scale_f32(src[i], s);
  }
};
struct ScaleF64 {
  double *dst;
  const double *src;
  double s;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_scale_f64(src[i], s);
  }
};
struct ScaleF16 {
  uint16_t *dst;
  const uint16_t *src;
  float s;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_scale_f16(src[i], s);
  }
};
struct ScaleBF16 {
  uint16_t *dst;
  const uint16_t *src;
  float s;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_scale_bf16(src[i], s);
  }
};

struct DivideF32 {
  float *buf;
  float w;
  __device__ void operator()(size_t i) const {
    buf[i] = rrd_divide_f32(buf[i], w);
  }
};
struct DivideF64 {
  double *buf;
  double w;
  __device__ void operator()(size_t i) const {
    buf[i] = rrd_divide_f64(buf[i], w);
  }
};
struct DivideF16 {
  uint16_t *buf;
  float w;
  __device__ void operator()(size_t i) const {
    buf[i] = rrd_divide_f16(buf[i], w);
  }
};
struct DivideBF16 {
  uint16_t *buf;
  float w;
  __device__ void operator()(size_t i) const {
    buf[i] = rrd_divide_bf16(buf[i], w);
  }
};

struct CompressF32 {
  uint16_t *dst;
  const float *src;
  float w;
  int wire16;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_compress_f32(src[i], w, wire16);
  }
};
struct CompressF64 {
  uint16_t *dst;
  const double *src;
  float w;
  int wire16;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_compress_f64(src[i], w, wire16);
  }
};
struct CompressF16 {
  uint16_t *dst;
  const uint16_t *src;
  float w;
  int wire16;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_compress_f16(src[i], w, wire16);
  }
};
struct CompressBF16 {
  uint16_t *dst;
  const uint16_t *src;
  float w;
  int wire16;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_compress_bf16(src[i], w, wire16);
  }
};

struct DecompressF32 {
  float *dst;
  const uint16_t *src;
  int wire16;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_decompress_f32(src[i], wire16);
  }
};
struct DecompressF64 {
  double *dst;
  const uint16_t *src;
  int wire16;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_decompress_f64(src[i], wire16);
  }
};
struct DecompressF16 {
  uint16_t *dst;
  const uint16_t *src;
  int wire16;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_decompress_f16(src[i], wire16);
  }
};
struct DecompressBF16 {
  uint16_t *dst;
  const uint16_t *src;
  int wire16;
  __device__ void operator()(size_t i) const {
    dst[i] = rrd_decompress_bf16(src[i], wire16);
  }
};

template <typename F>
cudaError_t launch(size_t n, F f, cudaStream_t stream, const char **what) {
  if (n == 0) return cudaSuccess;
  size_t want = (n + kThreads - 1) / kThreads;
  unsigned blocks = (unsigned)(want > kMaxBlocks ? kMaxBlocks : want);
  ddp_kernel<F><<<blocks, kThreads, 0, stream>>>(n, f);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) *what = "DDP kernel launch";
  return e;
}

}  // namespace

extern "C" int rr__cuda_ddp_launch(int kind, void *dst, const void *src, size_t n, int dtype,
                                   int wire, int world, void *stream, const char **what) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  *what = "DDP kernel dispatch";
  if (world < 1) return (int)cudaErrorInvalidValue;
  // The scalars exactly as ddp.c makes them: 1/world in double, then cast to float.
  const double s64 = 1.0 / (double)world;
  const float s32 = (float)s64, w32 = (float)world;
  const int wire16 = wire == RR_FLOAT16;
  if ((kind == RR__CUDA_DDP_COMPRESS || kind == RR__CUDA_DDP_DECOMPRESS) && wire != RR_FLOAT16 &&
      wire != RR_BFLOAT16)
    return (int)cudaErrorInvalidValue;
  typedef uint16_t u16;
  switch (kind) {
    case RR__CUDA_DDP_SCALE:
      switch (dtype) {
        case RR_FLOAT32:
          return (int)launch(n, ScaleF32{(float *)dst, (const float *)src, s32}, s, what);
        case RR_FLOAT64:
          return (int)launch(n, ScaleF64{(double *)dst, (const double *)src, s64}, s, what);
        case RR_FLOAT16:
          return (int)launch(n, ScaleF16{(u16 *)dst, (const u16 *)src, s32}, s, what);
        case RR_BFLOAT16:
          return (int)launch(n, ScaleBF16{(u16 *)dst, (const u16 *)src, s32}, s, what);
      }
      break;
    case RR__CUDA_DDP_DIVIDE:
      switch (dtype) {
        case RR_FLOAT32:
          return (int)launch(n, DivideF32{(float *)dst, w32}, s, what);
        case RR_FLOAT64:
          return (int)launch(n, DivideF64{(double *)dst, (double)world}, s, what);
        case RR_FLOAT16:
          return (int)launch(n, DivideF16{(u16 *)dst, w32}, s, what);
        case RR_BFLOAT16:
          return (int)launch(n, DivideBF16{(u16 *)dst, w32}, s, what);
      }
      break;
    case RR__CUDA_DDP_COMPRESS:
      switch (dtype) {
        case RR_FLOAT32:
          return (int)launch(n, CompressF32{(u16 *)dst, (const float *)src, w32, wire16}, s, what);
        case RR_FLOAT64:
          return (int)launch(n, CompressF64{(u16 *)dst, (const double *)src, w32, wire16}, s, what);
        case RR_FLOAT16:
          return (int)launch(n, CompressF16{(u16 *)dst, (const u16 *)src, w32, wire16}, s, what);
        case RR_BFLOAT16:
          return (int)launch(n, CompressBF16{(u16 *)dst, (const u16 *)src, w32, wire16}, s, what);
      }
      break;
    case RR__CUDA_DDP_DECOMPRESS:
      switch (dtype) {
        case RR_FLOAT32:
          return (int)launch(n, DecompressF32{(float *)dst, (const u16 *)src, wire16}, s, what);
        case RR_FLOAT64:
          return (int)launch(n, DecompressF64{(double *)dst, (const u16 *)src, wire16}, s, what);
        case RR_FLOAT16:
          return (int)launch(n, DecompressF16{(u16 *)dst, (const u16 *)src, wire16}, s, what);
        case RR_BFLOAT16:
          return (int)launch(n, DecompressBF16{(u16 *)dst, (const u16 *)src, wire16}, s, what);
      }
      break;
  }
  return (int)cudaErrorInvalidValue;
}
