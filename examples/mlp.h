/* A small multi-layer perceptron in C for the examples and the DDP tests: Linear layers
 * (torch's nn.Linear layout: weight [out, in], y = x W^T + b) with ReLU between them,
 * softmax cross-entropy, plain SGD. Matrix products go through cblas_sgemm (OpenBLAS) when
 * the build found it, else a plain C loop nest with the same results up to rounding.
 *
 * The parameters live in one float array, layer by layer (W0, b0, W1, b1, ...), the order
 * torch's named_parameters() gives, so DDP sees them as params 0..2L-1. */
#ifndef RR__EXAMPLES_MLP_H_
#define RR__EXAMPLES_MLP_H_

#include <stddef.h>
#include <stdint.h>

#include "ringreduce/ddp.h"

#define MLP_MAX_LAYERS 8

typedef struct mlp {
  int nlayers;                  /* Linear layers */
  int dims[MLP_MAX_LAYERS + 1]; /* dims[0] inputs ... dims[nlayers] classes */
  int max_batch;
  size_t nweights; /* floats in params (and grads) */
  float *params, *grads;
  size_t w_off[MLP_MAX_LAYERS], b_off[MLP_MAX_LAYERS];
  float *act[MLP_MAX_LAYERS + 1]; /* act[0]: the input batch; act[l]: layer l-1's output */
  float *dact;                    /* gradient w.r.t. the current layer's output */
  float *dprev;                   /* gradient w.r.t. its input */
} mlp;

/* dims[0..nlayers]; weights drawn as torch's nn.Linear default, U(-1/sqrt(in), 1/sqrt(in)),
 * from a generator seeded with `seed` (deterministic). Returns 0, or -1 out of memory. */
int mlp_init(mlp *m, int nlayers, const int *dims, int max_batch, uint64_t seed);
void mlp_free(mlp *m);

/* Describe the parameters for rr_ddp_init: 2 * nlayers tensors (weights with their 2-D
 * shapes, biases), with gradients. `t` needs room for 2 * nlayers. */
void mlp_ddp_params(const mlp *m, rr_ddp_tensor *t);

/* Logits of x[b * dims[0] ...] for b < batch (batch <= max_batch); returns act[nlayers]. */
const float *mlp_forward(mlp *m, const float *x, int batch);
/* Mean-free cross-entropy: returns sum over the batch of -log softmax(logit)[label], and
 * sets the output gradient to (softmax - onehot) * scale, so scale = 1/B gives the mean
 * loss's gradient. Call after mlp_forward. */
double mlp_loss(mlp *m, const int *labels, int batch, float scale);
/* Backward through every layer, last first. accumulate = 0: grads are overwritten (a normal
 * step); 1: added to (gradient accumulation, as autograd). After layer l's weight and bias
 * gradients are final, ready(l, ctx) is called (may be NULL): the place a DDP backward marks
 * params 2l and 2l+1 ready, so their all-reduce overlaps the remaining layers. Returns the
 * first non-zero value ready() returned, else 0. */
int mlp_backward(mlp *m, int batch, int accumulate, int (*ready)(int layer, void *ctx), void *ctx);
/* params -= lr * grads */
void mlp_sgd(mlp *m, float lr);
/* Number of samples in x[0..n) whose arg-max logit equals the label (batched forward). */
int mlp_correct(mlp *m, const float *x, const int *labels, int n);

/* The 8x8 digits: reads a csv.gz of 1797 lines "p0,...,p63,label" through `gzip -dc`.
 * Pixels are scaled to [0, 1] (x / 16). Returns 0, or -1 with a message on stderr. */
int digits_load(const char *path, float **x, int **labels, int *n);
/* Where the data set is: $RR_DIGITS, else the copy committed in the source tree
 * (tests/data/digits.csv.gz), else data/digits.csv.gz (tools/fetch_digits.sh puts it there). */
const char *digits_default_path(void);

/* 1 when cblas_sgemm (OpenBLAS) is used, 0 for the portable loops. */
int mlp_have_blas(void);

/* ---- The same MLP on a CUDA device (examples/mlp_cuda.cu: cuBLAS sgemm and small kernels;
 * in a build without CUDA or cuBLAS, examples/mlp_cuda_stub.c, where every call fails).
 * Parameters, gradients and activations live on the device; the computation is the CPU
 * code's, layer for layer (same layouts, same callback order), in float32 without TF32, so
 * results agree with the CPU run up to float rounding (not bit for bit: cuBLAS sums in
 * another order). All work is queued on the model's own stream, which the training loop
 * gives the process group (rr_pg_set_cuda_stream) so that DDP's copies and kernels are
 * ordered with it. Calls return 0, or -1 with the reason in mlp_cuda_error(). */
typedef struct mlp_cuda {
  const mlp *m; /* shapes and offsets (its host arrays are not used) */
  int device;
  void *stream; /* cudaStream_t */
  void *blas;   /* cublasHandle_t */
  float *params, *grads;
  float *act[MLP_MAX_LAYERS + 1], *dact, *dprev;
  int *labels;
  double *loss;       /* per-sample loss of the last mlp_cuda_loss */
  double *loss_host;  /* max_batch */
  float *logits_host; /* max_batch * classes, for mlp_cuda_correct */
  char name[128];     /* the device's name */
  char err[512];
} mlp_cuda;

/* 1 when this example was built with CUDA and cuBLAS. */
int mlp_cuda_built(void);
/* CUDA devices visible (0 without a build with CUDA, a driver or a GPU). Initialises CUDA
 * in this process: a program that forks ranks asks in a child first. */
int mlp_cuda_device_count(void);
/* Allocate the model on `device` and copy m's parameters there (zero gradients). */
int mlp_cuda_init(mlp_cuda *g, const mlp *m, int device);
void mlp_cuda_free(mlp_cuda *g);
const char *mlp_cuda_error(const mlp_cuda *g);
/* As mlp_ddp_params, with the device's memory and device number. */
void mlp_cuda_ddp_params(const mlp_cuda *g, rr_ddp_tensor *t);
/* As mlp_forward, mlp_loss (*loss: the summed loss), mlp_backward, mlp_sgd. x and labels are
 * host arrays. mlp_cuda_backward returns -1 on a CUDA error, else as mlp_backward. */
int mlp_cuda_forward(mlp_cuda *g, const float *x, int batch);
int mlp_cuda_loss(mlp_cuda *g, const int *labels, int batch, float scale, double *loss);
int mlp_cuda_backward(mlp_cuda *g, int batch, int accumulate, int (*ready)(int layer, void *ctx),
                      void *ctx);
int mlp_cuda_sgd(mlp_cuda *g, float lr);
/* As mlp_correct. */
int mlp_cuda_correct(mlp_cuda *g, const float *x, const int *labels, int n, int *correct);
/* Copy the device parameters into m->params (for hashing and printing). */
int mlp_cuda_download(mlp_cuda *g, mlp *m);
/* Wait for the model's stream. */
int mlp_cuda_sync(mlp_cuda *g);

#endif /* RR__EXAMPLES_MLP_H_ */
