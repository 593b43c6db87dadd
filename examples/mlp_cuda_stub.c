/* examples/mlp.h's CUDA calls in a build without CUDA or cuBLAS: no device is ever visible,
 * and each call fails saying why, so the training example (which only calls them with
 * --device cuda, and says so itself) builds and runs everywhere. */
#include <stdio.h>
#include <string.h>

#include "examples/mlp.h"

static int no_cuda(mlp_cuda *g) {
  snprintf(g->err, sizeof g->err,
           "this example was built without CUDA and cuBLAS (configure with a CUDA toolkit that "
           "has cuBLAS; see docs/cuda.md)");
  return -1;
}

int mlp_cuda_built(void) {
  return 0;
}
int mlp_cuda_device_count(void) {
  return 0;
}
int mlp_cuda_init(mlp_cuda *g, const mlp *m, int device) {
  memset(g, 0, sizeof *g);
  g->m = m;
  g->device = device;
  return no_cuda(g);
}
void mlp_cuda_free(mlp_cuda *g) {
  (void)g;
}
const char *mlp_cuda_error(const mlp_cuda *g) {
  return g->err;
}
void mlp_cuda_ddp_params(const mlp_cuda *g, rr_ddp_tensor *t) {
  (void)g, (void)t;
}
int mlp_cuda_forward(mlp_cuda *g, const float *x, int batch) {
  (void)x, (void)batch;
  return no_cuda(g);
}
int mlp_cuda_loss(mlp_cuda *g, const int *labels, int batch, float scale, double *loss) {
  (void)labels, (void)batch, (void)scale;
  *loss = 0;
  return no_cuda(g);
}
int mlp_cuda_backward(mlp_cuda *g, int batch, int accumulate, int (*ready)(int layer, void *ctx),
                      void *ctx) {
  (void)batch, (void)accumulate, (void)ready, (void)ctx;
  return no_cuda(g);
}
int mlp_cuda_sgd(mlp_cuda *g, float lr) {
  (void)lr;
  return no_cuda(g);
}
int mlp_cuda_correct(mlp_cuda *g, const float *x, const int *labels, int n, int *correct) {
  (void)x, (void)labels, (void)n;
  *correct = 0;
  return no_cuda(g);
}
int mlp_cuda_download(mlp_cuda *g, mlp *m) {
  (void)m;
  return no_cuda(g);
}
int mlp_cuda_sync(mlp_cuda *g) {
  return no_cuda(g);
}
