/* What it costs two processes sharing one GPU to hand work to each other, without the
 * library: the question behind the CUDA IPC path's flat ~0.5 ms per small call in the first
 * GPU run (docs/gpu-runs/2026-11-27-h200.md). Each process has its own CUDA context (as two
 * ranks do); a hand-off is "my device work completed (cudaEventQuery), now yours", signalled
 * through a shared-memory word, as the shm lane signals a published slot.
 *
 *   nvcc -O2 -o handoff_probe tests/gpu/handoff_probe.cu && ./handoff_probe [iters]
 *
 * Rows (microseconds per hand-off, median of the run):
 *   host        two processes pass the turn, no CUDA at all (the floor of the signalling)
 *   one         one process: a 4-byte device copy, event, spin on cudaEventQuery, repeated
 *   one+idle    the same while a second process holds an idle context on the same GPU
 *   two-copy    two processes take turns: a 4-byte copy on my context, then yours
 *   two-kernel  the same with an empty kernel instead of the copy
 * If two-* is far above one, the GPU's switch between the two contexts is the cost, and
 * fewer, larger hand-offs are the remedy (what RR_SEG_BYTES does on the IPC path). */
#include <cuda_runtime.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      _exit(1);                                                                 \
    }                                                                           \
  } while (0)

__global__ void empty_kernel(int *p) {
  if (p[0] == 12345) p[1] = 1;
}

struct shared {
  int turn;  /* whose turn: 0 or 1 (read and written with __atomic builtins) */
  int ready; /* processes with a context */
  double us[2][1 << 14];
};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Every wait is bounded: a process that failed must not leave the other spinning. */
static void bounded(double t0) {
  if (now_us() - t0 > 20e6) {
    fprintf(stderr, "handoff_probe: no progress for 20 s (the other process failed?)\n");
    _exit(2);
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One device operation, waited for by spinning on its event. */
static void op(int kernel, int *d, cudaStream_t s, cudaEvent_t ev) {
  if (kernel)
    empty_kernel<<<1, 1, 0, s>>>(d);
  else
    CK(cudaMemcpyAsync(d + 2, d, 4, cudaMemcpyDeviceToDevice, s));
  CK(cudaGetLastError());
  CK(cudaEventRecord(ev, s));
  cudaError_t q;
  double t0 = now_us();
  while ((q = cudaEventQuery(ev)) == cudaErrorNotReady) bounded(t0);
  CK(q);
}

static int iters = 2000;

/* mode: 0 host, 1 copy, 2 kernel. Process `me` of two takes its turn, times it, passes. */
static void player(struct shared *sh, int me, int mode) {
  int *d = NULL;
  cudaStream_t s = NULL;
  cudaEvent_t ev = NULL;
  if (mode) {
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&d, 64));
    CK(cudaMemset(d, 0, 64));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CK(cudaDeviceSynchronize());
  }
  __atomic_fetch_add(&sh->ready, 1, __ATOMIC_SEQ_CST);
  double t0 = now_us();
  while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < 2) bounded(t0);
  for (int i = 0; i < iters + 100; i++) {
    double w0 = now_us();
    while (__atomic_load_n(&sh->turn, __ATOMIC_ACQUIRE) != me) bounded(w0);
    double t0 = now_us();
    if (mode) op(mode == 2, d, s, ev);
    __atomic_store_n(&sh->turn, 1 - me, __ATOMIC_RELEASE);
    if (i >= 100) sh->us[me][i - 100] = t0;
  }
  _exit(0);
}

static double median_gap(struct shared *sh) {
  /* A hand-off: from my turn's start to yours. */
  static double g[2 << 14];
  int n = 0;
  for (int i = 0; i < iters; i++) {
    g[n++] = sh->us[1][i] - sh->us[0][i];
    if (i + 1 < iters) g[n++] = sh->us[0][i + 1] - sh->us[1][i];
  }
  qsort(g, n, sizeof *g, cmp);
  return g[n / 2];
}

static void two(const char *name, int mode) {
  struct shared *sh = (struct shared *)mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE,
                                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) { perror("mmap"); exit(1); }
  memset(sh, 0, sizeof *sh);
  pid_t p[2];
  for (int k = 0; k < 2; k++)
    if ((p[k] = fork()) == 0) player(sh, k, mode);
  int ok = 1;
  for (int k = 0; k < 2; k++) {
    int st = 0;
    waitpid(p[k], &st, 0);
    ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  if (ok)
    printf("%-11s %9.1f us per hand-off (median of %d)\n", name, median_gap(sh), 2 * iters - 1);
  else
    printf("%-11s FAILED\n", name);
  munmap(sh, sizeof *sh);
}

/* One process alone, optionally beside an idle process holding a context. */
static void one(const char *name, int idle_peer) {
  int pipefd[2];
  if (pipe(pipefd)) { perror("pipe"); exit(1); }
  pid_t peer = -1;
  if (idle_peer && (peer = fork()) == 0) {
    CK(cudaSetDevice(0));
    CK(cudaFree(0)); /* a context, then nothing */
    char c = 0;
    if (write(pipefd[1], &c, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(pipefd[1]); /* the idle peer's failure is then EOF here */
  if (idle_peer) {
    char c;
    if (read(pipefd[0], &c, 1) != 1) {
      printf("%-11s FAILED (the idle process got no context)\n", name);
      waitpid(peer, NULL, 0);
      close(pipefd[0]);
      return;
    }
  }
  pid_t p = fork();
  if (p == 0) {
    int *d;
    cudaStream_t s;
    cudaEvent_t ev;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&d, 64));
    CK(cudaMemset(d, 0, 64));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    static double g[1 << 14];
    for (int i = 0; i < iters + 100; i++) {
      double t0 = now_us();
      op(0, d, s, ev);
      if (i >= 100) g[i - 100] = now_us() - t0;
    }
    qsort(g, iters, sizeof *g, cmp);
    printf("%-11s %9.1f us per copy+wait (median of %d)\n", name, g[iters / 2], iters);
    fflush(stdout);
    _exit(0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) printf("%-11s FAILED\n", name);
  if (idle_peer) {
    kill(peer, SIGKILL);
    waitpid(peer, &st, 0);
  }
  close(pipefd[0]);
}

int main(int argc, char **argv) {
  if (argc > 1) iters = atoi(argv[1]);
  if (iters < 10 || iters > (1 << 14) - 200) iters = 2000;
  setvbuf(stdout, NULL, _IONBF, 0);
  two("host", 0);
  one("one", 0);
  one("one+idle", 1);
  two("two-copy", 1);
  two("two-kernel", 2);
  return 0;
}
