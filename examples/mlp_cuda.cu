// The MLP of examples/mlp.h on a CUDA device: cuBLAS sgemm for the matrix products and a few
// small kernels for the rest (bias rows, ReLU and its gradient, softmax cross-entropy, bias
// gradients, SGD), each the CPU code's loop (examples/mlp.c) written for the device, all on
// the model's own stream. Built only when CMake finds CUDA and cuBLAS (examples/
// CMakeLists.txt); the training example picks it with --device cuda.
//
// Row-major products through column-major cuBLAS: a row-major matrix is its transpose in
// column-major, so C = op(A) op(B) (row-major) is computed as C^T = op(B)^T op(A)^T, i.e.
// cublasSgemm with the operands swapped and the same transpose flags.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "examples/mlp.h"
}

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

int fail(mlp_cuda *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->err, sizeof g->err, fmt, ap);
  va_end(ap);
  return -1;
}

#define CU(call)                                                                    \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) return fail(g, "%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)
#define CB(call)                                                                                 \
  do {                                                                                           \
    cublasStatus_t s_ = (call);                                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) return fail(g, "%s: %s", #call, cublasGetStatusString(s_)); \
  } while (0)
// A kernel launch: its configuration error, if any, now; execution errors surface at the
// next synchronising call.
#define LAUNCHED(what) CU(cudaGetLastError())

cudaStream_t stream_of(const mlp_cuda *g) {
  return static_cast<cudaStream_t>(g->stream);
}
cublasHandle_t blas_of(const mlp_cuda *g) {
  return static_cast<cublasHandle_t>(g->blas);
}

// y[i][o] = b[o]: the bias rows the product is added to (mlp.c: memcpy per row).
__global__ void bias_rows(float *y, const float *b, size_t n, int out) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = b[i % (size_t)out];
}

__global__ void relu(float *y, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = y[i] > 0 ? y[i] : 0;
}

// The gradient through ReLU: x is the layer's output, as in mlp.c.
__global__ void relu_back(float *d, const float *x, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    if (!(x[i] > 0)) d[i] = 0;
}

// mlp_loss, one thread per sample: the loss in double, the output gradient
// (softmax - onehot) * scale.
__global__ void softmax_ce(const float *z, const int *labels, int batch, int c, float scale,
                           float *dz, double *loss) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch) return;
  const float *zi = z + (size_t)i * c;
  float mx = zi[0];
  for (int k = 1; k < c; k++) mx = zi[k] > mx ? zi[k] : mx;
  double sum = 0;
  for (int k = 0; k < c; k++) sum += exp((double)(zi[k] - mx));
  loss[i] = log(sum) - (double)(zi[labels[i]] - mx);
  for (int k = 0; k < c; k++) {
    double p = exp((double)(zi[k] - mx)) / sum;
    dz[(size_t)i * c + k] = (float)((p - (k == labels[i])) * scale);
  }
}

// Bias gradients: column sums of dy, one thread per output, rows in order (as mlp.c).
__global__ void bias_grad(const float *dy, int batch, int out, float *gb, int accumulate) {
  int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out) return;
  float s = 0;
  for (int i = 0; i < batch; i++) s += dy[(size_t)i * out + o];
  gb[o] = accumulate ? gb[o] + s : s;
}

__global__ void sgd(float *p, const float *gr, float lr, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] -= lr * gr[i];
}

// Row-major C[M x N] = op(A) op(B) + beta C; ta/tb: transpose A/B (mlp.c's sgemm).
int sgemm(mlp_cuda *g, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
          int ldb, float beta, float *C, int ldc) {
  const float one = 1.0f;
  CB(cublasSgemm(blas_of(g), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M,
                 K, &one, B, ldb, A, lda, &beta, C, ldc));
  return 0;
}

}  // namespace

extern "C" int mlp_cuda_built(void) {
  return 1;
}

extern "C" int mlp_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: the CPU path
    return 0;
  }
  return n;
}

extern "C" const char *mlp_cuda_error(const mlp_cuda *g) {
  return g->err;
}

extern "C" void mlp_cuda_free(mlp_cuda *g) {
  if (g->m && g->device >= 0) (void)cudaSetDevice(g->device);
  cudaFree(g->params), cudaFree(g->grads), cudaFree(g->dact), cudaFree(g->dprev);
  cudaFree(g->labels), cudaFree(g->loss);
  for (int l = 0; l <= MLP_MAX_LAYERS; l++) cudaFree(g->act[l]);
  if (g->blas) cublasDestroy(blas_of(g));
  if (g->stream) cudaStreamDestroy(stream_of(g));
  free(g->loss_host), free(g->logits_host);
  (void)cudaGetLastError();
  char err[sizeof g->err];
  memcpy(err, g->err, sizeof err);
  memset(g, 0, sizeof *g);
  memcpy(g->err, err, sizeof err);  // a failed init keeps its reason
  g->device = -1;
}

extern "C" int mlp_cuda_init(mlp_cuda *g, const mlp *m, int device) {
  memset(g, 0, sizeof *g);
  g->m = m;
  g->device = device;
  CU(cudaSetDevice(device));
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, device));
  snprintf(g->name, sizeof g->name, "%.*s", (int)sizeof g->name - 1, prop.name);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  g->stream = s;
  cublasHandle_t h;
  CB(cublasCreate(&h));
  g->blas = h;
  CB(cublasSetStream(h, s));
  // float32 throughout: no TF32 tensor-core rounding of the inputs.
  CB(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  int widest = 0;
  for (int l = 0; l <= m->nlayers; l++) widest = m->dims[l] > widest ? m->dims[l] : widest;
  size_t mb = (size_t)m->max_batch, classes = (size_t)m->dims[m->nlayers];
  CU(cudaMalloc((void **)&g->params, m->nweights * sizeof(float)));
  CU(cudaMalloc((void **)&g->grads, m->nweights * sizeof(float)));
  for (int l = 0; l <= m->nlayers; l++)
    CU(cudaMalloc((void **)&g->act[l], mb * (size_t)m->dims[l] * sizeof(float)));
  CU(cudaMalloc((void **)&g->dact, mb * (size_t)widest * sizeof(float)));
  CU(cudaMalloc((void **)&g->dprev, mb * (size_t)widest * sizeof(float)));
  CU(cudaMalloc((void **)&g->labels, mb * sizeof(int)));
  CU(cudaMalloc((void **)&g->loss, mb * sizeof(double)));
  g->loss_host = (double *)malloc(mb * sizeof(double));
  g->logits_host = (float *)malloc(mb * classes * sizeof(float));
  if (!g->loss_host || !g->logits_host) return fail(g, "out of host memory");
  CU(cudaMemcpy(g->params, m->params, m->nweights * sizeof(float), cudaMemcpyHostToDevice));
  CU(cudaMemset(g->grads, 0, m->nweights * sizeof(float)));
  return 0;
}

extern "C" void mlp_cuda_ddp_params(const mlp_cuda *g, rr_ddp_tensor *t) {
  mlp_ddp_params(g->m, t);  // names, shapes, counts
  for (int l = 0; l < g->m->nlayers; l++) {
    t[2 * l].data = g->params + g->m->w_off[l];
    t[2 * l].grad = g->grads + g->m->w_off[l];
    t[2 * l + 1].data = g->params + g->m->b_off[l];
    t[2 * l + 1].grad = g->grads + g->m->b_off[l];
    t[2 * l].device = t[2 * l + 1].device = g->device;
  }
}

extern "C" int mlp_cuda_forward(mlp_cuda *g, const float *x, int batch) {
  const mlp *m = g->m;
  cudaStream_t s = stream_of(g);
  CU(cudaMemcpyAsync(g->act[0], x, (size_t)batch * m->dims[0] * sizeof(float),
                     cudaMemcpyHostToDevice, s));
  for (int l = 0; l < m->nlayers; l++) {
    int in = m->dims[l], out = m->dims[l + 1];
    size_t n = (size_t)batch * out;
    float *y = g->act[l + 1];
    bias_rows<<<blocks_for(n), kThreads, 0, s>>>(y, g->params + m->b_off[l], n, out);
    LAUNCHED("bias_rows");
    if (sgemm(g, 0, 1, batch, out, in, g->act[l], in, g->params + m->w_off[l], in, 1.0f, y, out))
      return -1;
    if (l + 1 < m->nlayers) {
      relu<<<blocks_for(n), kThreads, 0, s>>>(y, n);
      LAUNCHED("relu");
    }
  }
  return 0;
}

extern "C" int mlp_cuda_loss(mlp_cuda *g, const int *labels, int batch, float scale, double *loss) {
  const mlp *m = g->m;
  cudaStream_t s = stream_of(g);
  int c = m->dims[m->nlayers];
  CU(cudaMemcpyAsync(g->labels, labels, (size_t)batch * sizeof(int), cudaMemcpyHostToDevice, s));
  softmax_ce<<<(batch + kThreads - 1) / kThreads, kThreads, 0, s>>>(
      g->act[m->nlayers], g->labels, batch, c, scale, g->dact, g->loss);
  LAUNCHED("softmax_ce");
  CU(cudaMemcpyAsync(g->loss_host, g->loss, (size_t)batch * sizeof(double), cudaMemcpyDeviceToHost,
                     s));
  CU(cudaStreamSynchronize(s));
  double sum = 0;
  for (int i = 0; i < batch; i++) sum += g->loss_host[i];
  *loss = sum;
  return 0;
}

extern "C" int mlp_cuda_backward(mlp_cuda *g, int batch, int accumulate,
                                 int (*ready)(int layer, void *ctx), void *ctx) {
  const mlp *m = g->m;
  cudaStream_t s = stream_of(g);
  for (int l = m->nlayers - 1; l >= 0; l--) {
    int in = m->dims[l], out = m->dims[l + 1];
    const float *dy = g->dact, *x = g->act[l];
    float *gw = g->grads + m->w_off[l], *gb = g->grads + m->b_off[l];
    if (sgemm(g, 1, 0, out, in, batch, dy, out, x, in, accumulate ? 1.0f : 0.0f, gw, in)) return -1;
    bias_grad<<<(out + kThreads - 1) / kThreads, kThreads, 0, s>>>(dy, batch, out, gb, accumulate);
    LAUNCHED("bias_grad");
    // Final on the stream: DDP's copy into its bucket is queued behind it on the same stream.
    if (ready) {
      int rc = ready(l, ctx);
      if (rc) return rc;
    }
    if (l == 0) break;
    if (sgemm(g, 0, 0, batch, in, out, dy, out, g->params + m->w_off[l], in, 0.0f, g->dprev, in))
      return -1;
    size_t n = (size_t)batch * in;
    relu_back<<<blocks_for(n), kThreads, 0, s>>>(g->dprev, x, n);
    LAUNCHED("relu_back");
    float *t = g->dact;
    g->dact = g->dprev;
    g->dprev = t;
  }
  return 0;
}

extern "C" int mlp_cuda_sgd(mlp_cuda *g, float lr) {
  size_t n = g->m->nweights;
  sgd<<<blocks_for(n), kThreads, 0, stream_of(g)>>>(g->params, g->grads, lr, n);
  LAUNCHED("sgd");
  return 0;
}

extern "C" int mlp_cuda_correct(mlp_cuda *g, const float *x, const int *labels, int n,
                                int *correct) {
  const mlp *m = g->m;
  int c = m->dims[m->nlayers], ok = 0;
  for (int start = 0; start < n; start += m->max_batch) {
    int b = n - start < m->max_batch ? n - start : m->max_batch;
    if (mlp_cuda_forward(g, x + (size_t)start * m->dims[0], b)) return -1;
    CU(cudaMemcpyAsync(g->logits_host, g->act[m->nlayers], (size_t)b * c * sizeof(float),
                       cudaMemcpyDeviceToHost, stream_of(g)));
    CU(cudaStreamSynchronize(stream_of(g)));
    const float *z = g->logits_host;
    for (int i = 0; i < b; i++) {
      int best = 0;
      for (int k = 1; k < c; k++)
        if (z[(size_t)i * c + k] > z[(size_t)i * c + best]) best = k;
      ok += best == labels[start + i];
    }
  }
  *correct = ok;
  return 0;
}

extern "C" int mlp_cuda_download(mlp_cuda *g, mlp *m) {
  CU(cudaMemcpyAsync(m->params, g->params, m->nweights * sizeof(float), cudaMemcpyDeviceToHost,
                     stream_of(g)));
  CU(cudaStreamSynchronize(stream_of(g)));
  return 0;
}

extern "C" int mlp_cuda_sync(mlp_cuda *g) {
  CU(cudaStreamSynchronize(stream_of(g)));
  return 0;
}
