/* The MLP of mlp.h: forward, cross-entropy, backward with a per-layer "gradients ready"
 * callback (where DDP overlaps communication), SGD, and the digits loader. */
#include "examples/mlp.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef MLP_HAVE_CBLAS
#include <cblas.h>
#endif

int mlp_have_blas(void) {
#ifdef MLP_HAVE_CBLAS
  return 1;
#else
  return 0;
#endif
}

/* C = alpha * op(A) op(B) + beta * C, row-major; ta/tb: transpose A/B. */
static void sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                  int ldb, float beta, float *C, int ldc) {
#ifdef MLP_HAVE_CBLAS
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0f, A, lda, B, ldb, beta, C, ldc);
#else
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float acc = 0;
      for (int k = 0; k < K; k++)
        acc += (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
               (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
      float *c = &C[(size_t)i * ldc + j];
      *c = beta != 0 ? acc + beta * *c : acc; /* beta == 0 must not read C (BLAS rule) */
    }
#endif
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int mlp_init(mlp *m, int nlayers, const int *dims, int max_batch, uint64_t seed) {
  memset(m, 0, sizeof *m);
  if (nlayers < 1 || nlayers > MLP_MAX_LAYERS || max_batch < 1) return -1;
  m->nlayers = nlayers;
  m->max_batch = max_batch;
  int widest = 0;
  for (int l = 0; l <= nlayers; l++) {
    if (dims[l] < 1) return -1;
    m->dims[l] = dims[l];
    if (dims[l] > widest) widest = dims[l];
  }
  size_t off = 0;
  for (int l = 0; l < nlayers; l++) {
    m->w_off[l] = off;
    off += (size_t)dims[l + 1] * dims[l];
    m->b_off[l] = off;
    off += (size_t)dims[l + 1];
  }
  m->nweights = off;
  m->params = malloc(off * sizeof *m->params);
  m->grads = calloc(off, sizeof *m->grads);
  for (int l = 0; l <= nlayers; l++)
    m->act[l] = malloc((size_t)max_batch * dims[l] * sizeof(float));
  m->dact = malloc((size_t)max_batch * widest * sizeof(float));
  m->dprev = malloc((size_t)max_batch * widest * sizeof(float));
  int ok = m->params && m->grads && m->dact && m->dprev;
  for (int l = 0; l <= nlayers; l++) ok = ok && m->act[l];
  if (!ok) {
    mlp_free(m);
    return -1;
  }
  uint64_t s = seed;
  for (int l = 0; l < nlayers; l++) {
    float bound = 1.0f / sqrtf((float)dims[l]);
    size_t n = (size_t)dims[l + 1] * dims[l] + (size_t)dims[l + 1];
    for (size_t i = 0; i < n; i++) {
      double u = (double)(splitmix(&s) >> 11) / 9007199254740992.0; /* [0, 1) */
      m->params[m->w_off[l] + i] = (float)((2.0 * u - 1.0) * bound);
    }
  }
  return 0;
}

void mlp_free(mlp *m) {
  free(m->params), free(m->grads), free(m->dact), free(m->dprev);
  for (int l = 0; l <= MLP_MAX_LAYERS; l++) free(m->act[l]);
  memset(m, 0, sizeof *m);
}

void mlp_ddp_params(const mlp *m, rr_ddp_tensor *t) {
  static const char *wn[MLP_MAX_LAYERS] = {"0.weight", "1.weight", "2.weight", "3.weight",
                                           "4.weight", "5.weight", "6.weight", "7.weight"};
  static const char *bn[MLP_MAX_LAYERS] = {"0.bias", "1.bias", "2.bias", "3.bias",
                                           "4.bias", "5.bias", "6.bias", "7.bias"};
  for (int l = 0; l < m->nlayers; l++) {
    int in = m->dims[l], out = m->dims[l + 1];
    t[2 * l] = (rr_ddp_tensor){.name = wn[l],
                               .data = m->params + m->w_off[l],
                               .grad = m->grads + m->w_off[l],
                               .count = (size_t)out * in,
                               .dtype = RR_FLOAT32,
                               .device = -1,
                               .ndim = 2,
                               .shape = {out, in}};
    t[2 * l + 1] = (rr_ddp_tensor){.name = bn[l],
                                   .data = m->params + m->b_off[l],
                                   .grad = m->grads + m->b_off[l],
                                   .count = (size_t)out,
                                   .dtype = RR_FLOAT32,
                                   .device = -1,
                                   .ndim = 1,
                                   .shape = {out}};
  }
}

const float *mlp_forward(mlp *m, const float *x, int batch) {
  memcpy(m->act[0], x, (size_t)batch * m->dims[0] * sizeof(float));
  for (int l = 0; l < m->nlayers; l++) {
    int in = m->dims[l], out = m->dims[l + 1];
    const float *b = m->params + m->b_off[l];
    float *y = m->act[l + 1];
    for (int i = 0; i < batch; i++) memcpy(y + (size_t)i * out, b, (size_t)out * sizeof(float));
    sgemm(0, 1, batch, out, in, m->act[l], in, m->params + m->w_off[l], in, 1.0f, y, out);
    if (l + 1 < m->nlayers)
      for (size_t i = 0; i < (size_t)batch * out; i++) y[i] = y[i] > 0 ? y[i] : 0;
  }
  return m->act[m->nlayers];
}

double mlp_loss(mlp *m, const int *labels, int batch, float scale) {
  int c = m->dims[m->nlayers];
  const float *z = m->act[m->nlayers];
  double loss = 0;
  for (int i = 0; i < batch; i++) {
    const float *zi = z + (size_t)i * c;
    float mx = zi[0];
    for (int k = 1; k < c; k++) mx = zi[k] > mx ? zi[k] : mx;
    double sum = 0;
    for (int k = 0; k < c; k++) sum += exp((double)(zi[k] - mx));
    loss += log(sum) - (double)(zi[labels[i]] - mx);
    for (int k = 0; k < c; k++) {
      double p = exp((double)(zi[k] - mx)) / sum;
      m->dact[(size_t)i * c + k] = (float)((p - (k == labels[i])) * scale);
    }
  }
  return loss;
}

int mlp_backward(mlp *m, int batch, int accumulate, int (*ready)(int layer, void *ctx), void *ctx) {
  for (int l = m->nlayers - 1; l >= 0; l--) {
    int in = m->dims[l], out = m->dims[l + 1];
    const float *dy = m->dact, *x = m->act[l];
    float *gw = m->grads + m->w_off[l], *gb = m->grads + m->b_off[l];
    sgemm(1, 0, out, in, batch, dy, out, x, in, accumulate ? 1.0f : 0.0f, gw, in);
    for (int o = 0; o < out; o++) {
      float s = 0;
      for (int i = 0; i < batch; i++) s += dy[(size_t)i * out + o];
      gb[o] = accumulate ? gb[o] + s : s;
    }
    /* This layer's gradients are final: let DDP start on them before the layers below. */
    if (ready) {
      int rc = ready(l, ctx);
      if (rc) return rc;
    }
    if (l == 0) break;
    sgemm(0, 0, batch, in, out, dy, out, m->params + m->w_off[l], in, 0.0f, m->dprev, in);
    for (size_t i = 0; i < (size_t)batch * in; i++) /* ReLU: x is the previous layer's output */
      if (!(x[i] > 0)) m->dprev[i] = 0;
    float *t = m->dact;
    m->dact = m->dprev;
    m->dprev = t;
  }
  return 0;
}

void mlp_sgd(mlp *m, float lr) {
  for (size_t i = 0; i < m->nweights; i++) m->params[i] -= lr * m->grads[i];
}

int mlp_correct(mlp *m, const float *x, const int *labels, int n) {
  int correct = 0, c = m->dims[m->nlayers];
  for (int start = 0; start < n; start += m->max_batch) {
    int b = n - start < m->max_batch ? n - start : m->max_batch;
    const float *z = mlp_forward(m, x + (size_t)start * m->dims[0], b);
    for (int i = 0; i < b; i++) {
      int best = 0;
      for (int k = 1; k < c; k++)
        if (z[(size_t)i * c + k] > z[(size_t)i * c + best]) best = k;
      correct += best == labels[start + i];
    }
  }
  return correct;
}

const char *digits_default_path(void) {
  const char *env = getenv("RR_DIGITS");
  if (env && *env) return env;
#ifdef RR_SOURCE_DIR
  if (access(RR_SOURCE_DIR "/tests/data/digits.csv.gz", R_OK) == 0)
    return RR_SOURCE_DIR "/tests/data/digits.csv.gz";
#endif
  return "data/digits.csv.gz";
}

/* gzip -dc path, read through a pipe: no zlib needed, gzip is on every Debian system. */
int digits_load(const char *path, float **xs, int **labels, int *count) {
  *xs = NULL, *labels = NULL, *count = 0;
  if (access(path, R_OK) != 0) {
    fprintf(stderr, "digits: cannot read %s: %s (set RR_DIGITS, or run tools/fetch_digits.sh)\n",
            path, strerror(errno));
    return -1;
  }
  int fds[2];
  if (pipe(fds) != 0) {
    fprintf(stderr, "digits: pipe: %s\n", strerror(errno));
    return -1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "digits: fork: %s\n", strerror(errno));
    close(fds[0]), close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]), close(fds[1]);
    execlp("gzip", "gzip", "-dc", "--", path, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  FILE *fp = fdopen(fds[0], "r");
  int cap = 2048, n = 0, bad = 0;
  float *x = malloc((size_t)cap * 64 * sizeof *x);
  int *y = malloc((size_t)cap * sizeof *y);
  char line[1024];
  while (fp && x && y && !bad && fgets(line, sizeof line, fp)) {
    if (n == cap) {
      bad = 1;
      break;
    }
    char *p = line, *end;
    for (int k = 0; k <= 64; k++) {
      double v = strtod(p, &end);
      if (end == p) {
        bad = 1;
        break;
      }
      if (k < 64)
        x[(size_t)n * 64 + k] = (float)(v / 16.0);
      else
        y[n] = (int)v;
      p = end + (*end == ',');
    }
    if (!bad && (y[n] < 0 || y[n] > 9)) bad = 1;
    n++;
  }
  if (fp)
    fclose(fp);
  else
    close(fds[0]);
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  if (!x || !y || bad || n == 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
    fprintf(stderr, "digits: %s: %s (line %d)\n", path,
            !x || !y ? "out of memory"
            : bad    ? "malformed line"
                     : "gzip -dc failed or no data",
            n);
    free(x), free(y);
    return -1;
  }
  *xs = x, *labels = y, *count = n;
  return 0;
}
