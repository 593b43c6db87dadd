/* What it costs two processes sharing one GPU to hand work to each other, without the
 * library: the question behind the CUDA IPC path's flat ~0.5 ms per small call in the first
 * GPU run (docs/gpu-runs/2026-11-27-h200.md). A hand-off is "my device work completed (a
 * spin on cudaEventQuery), now yours", signalled through a shared-memory word, as the shm
 * lane signals a published slot.
 *
 *   nvcc -O2 -arch=sm_90 -o handoff_probe tests/gpu/handoff_probe.cu -lcuda
 *   ./handoff_probe [iters]
 *
 * Rows (microseconds, median of the run). Alone:
 *   host         two processes pass the turn, no CUDA at all (the floor of the signalling)
 *   one-copy     one process: a 4-byte device copy, then a spin on its event, repeated
 *   one-kernel   the same with an empty kernel
 *   one+idle     one-copy while a second process holds an idle context on the same GPU
 * Taking turns (per hand-off: one side's operation and its signal):
 *   threads      two threads of one process (one context), a copy each turn
 *   two-copy     two processes (two contexts), a copy each turn
 *   two-kernel   the same with an empty kernel
 *   ipc          the library's pattern: A copies into B's buffer (opened through CUDA IPC),
 *                then B runs a kernel reading it, then A again...
 * At once:
 *   two-both     two processes start a copy at the same moment (a barrier), each spins on
 *                its own event: per round, the later of the two
 * On the GPU alone, the host out of the loop (issue 39: what the library's stream hand-off
 * and a design it refuses cost):
 *   memop        two processes' streams play ping-pong with stream memory operations
 *                (cuStreamWaitValue32 / cuStreamWriteValue32) on a shared page both register
 *                with the GPU: every round queued up front, timed by events around the lot
 *   spin         two processes' kernels play ping-pong by spinning on words in device memory
 *                (one allocation, opened by the other through CUDA IPC), each spin bounded
 *                by the GPU's clock: without MPS the two contexts never run at once, so a
 *                hand-off waits for a time slice, or the bound ends the game ("timed out")
 * If the two-process rows are far above threads and one-*, the GPU's switch between the two
 * contexts is the cost, and fewer, larger hand-offs are the remedy (RR_IPC_SEG_BYTES). Exit
 * status 1 if any row failed. */
#include <cuda.h> /* cuStreamWaitValue32, cuStreamWriteValue32 (link with -lcuda) */
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      _exit(1);                                                                          \
    }                                                                                    \
  } while (0)

__global__ void empty_kernel(int *p) {
  if (p[0] == 12345) p[1] = 1;
}

enum { M_HOST, M_COPY, M_KERNEL, M_IPC, M_BOTH };
#define MAXI (1 << 14)

struct shared {
  int turn;               /* whose turn: 0 or 1 (__atomic builtins) */
  int ready;              /* players with their device set up */
  int arrive;             /* M_BOTH: a counting barrier */
  cudaIpcMemHandle_t buf; /* M_IPC: player 1's buffer */
  int buf_ready;
  double us[2][MAXI];
};

static int iters = 2000;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Every spin is bounded: a player that failed must not leave the other spinning. */
static void bounded(double t0) {
  if (now_us() - t0 > 20e6) {
    fprintf(stderr, "handoff_probe: no progress for 20 s (the other player failed?)\n");
    _exit(2);
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void wait_event(cudaEvent_t ev) {
  cudaError_t q;
  double t0 = now_us();
  while ((q = cudaEventQuery(ev)) == cudaErrorNotReady) bounded(t0);
  CK(q);
}

/* One device operation, waited for. */
static void op(int kernel, int *d, int *dst, cudaStream_t s, cudaEvent_t ev) {
  if (kernel)
    empty_kernel<<<1, 1, 0, s>>>(d);
  else
    CK(cudaMemcpyAsync(dst, d, 4, cudaMemcpyDeviceToDevice, s));
  CK(cudaGetLastError());
  CK(cudaEventRecord(ev, s));
  wait_event(ev);
}

static int load(int *p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Player `me` of two (a process, or a thread with threads = 1). Returns 0, or exits. */
static void *player(struct shared *sh, int me, int mode) {
  int *d = NULL, *dst = NULL;
  cudaStream_t s = NULL;
  cudaEvent_t ev = NULL;
  if (mode != M_HOST) {
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&d, 64));
    CK(cudaMemset(d, 0, 64));
    dst = d + 2;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    if (mode == M_IPC && me == 1) {
      CK(cudaIpcGetMemHandle(&sh->buf, d));
      __atomic_store_n(&sh->buf_ready, 1, __ATOMIC_RELEASE);
    }
    if (mode == M_IPC && me == 0) { /* copies into player 1's buffer */
      double t0 = now_us();
      while (!load(&sh->buf_ready)) bounded(t0);
      void *peer;
      CK(cudaIpcOpenMemHandle(&peer, sh->buf, cudaIpcMemLazyEnablePeerAccess));
      dst = (int *)peer + 2;
    }
    CK(cudaDeviceSynchronize());
  }
  __atomic_fetch_add(&sh->ready, 1, __ATOMIC_SEQ_CST);
  double t0 = now_us();
  while (load(&sh->ready) < 2) bounded(t0);
  for (int i = 0; i < iters + 100; i++) {
    double t1;
    if (mode == M_BOTH) { /* both at once: barrier, copy, wait; round i's end */
      __atomic_fetch_add(&sh->arrive, 1, __ATOMIC_SEQ_CST);
      double w0 = now_us();
      while (load(&sh->arrive) < 2 * (i + 1)) bounded(w0);
      double b = now_us();
      op(0, d, dst, s, ev);
      t1 = now_us() - b;
    } else {
      double w0 = now_us();
      while (load(&sh->turn) != me) bounded(w0);
      t1 = now_us();
      if (mode == M_COPY) op(0, d, dst, s, ev);
      if (mode == M_KERNEL) op(1, d, dst, s, ev);
      if (mode == M_IPC) op(me == 1, d, dst, s, ev); /* 0 copies into 1's buffer, 1 reads it */
      __atomic_store_n(&sh->turn, 1 - me, __ATOMIC_RELEASE);
    }
    if (i >= 100) sh->us[me][i - 100] = t1;
  }
  return NULL;
}

struct targ {
  struct shared *sh;
  int me, mode;
};
static void *thread_main(void *p) {
  struct targ *t = (struct targ *)p;
  return player(t->sh, t->me, t->mode);
}

static double median(double *g, int n) {
  qsort(g, n, sizeof *g, cmp);
  return g[n / 2];
}

static int two(const char *name, int mode, int threads) {
  struct shared *sh = (struct shared *)mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE,
                                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(sh, 0, sizeof *sh);
  int ok = 1;
  if (threads) { /* in a child, so that this process stays without a context */
    pid_t p = fork();
    if (p == 0) {
      pthread_t th[2];
      struct targ ta[2] = {{sh, 0, mode}, {sh, 1, mode}};
      for (int k = 0; k < 2; k++)
        if (pthread_create(&th[k], NULL, thread_main, &ta[k])) _exit(1);
      for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
      _exit(0);
    }
    int st = 0;
    ok = p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  } else {
    pid_t p[2] = {-1, -1};
    for (int k = 0; k < 2; k++)
      if ((p[k] = fork()) == 0) {
        player(sh, k, mode);
        _exit(0);
      }
    for (int k = 0; k < 2; k++) {
      int st = 0;
      ok &= p[k] > 0 && waitpid(p[k], &st, 0) == p[k] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
  }
  static double g[2 * MAXI];
  int n = 0;
  if (mode == M_BOTH) { /* a round lasts as long as its slower player */
    for (int i = 0; i < iters; i++)
      g[n++] = sh->us[0][i] > sh->us[1][i] ? sh->us[0][i] : sh->us[1][i];
  } else { /* a hand-off: from my turn's start to yours */
    for (int i = 0; i < iters; i++) {
      g[n++] = sh->us[1][i] - sh->us[0][i];
      if (i + 1 < iters) g[n++] = sh->us[0][i + 1] - sh->us[1][i];
    }
  }
  if (ok)
    printf("%-11s %9.1f us per %s (median of %d)\n", name, median(g, n),
           mode == M_BOTH ? "round" : "hand-off", n);
  else
    printf("%-11s FAILED\n", name);
  munmap(sh, sizeof *sh);
  return !ok;
}

/* One process alone, optionally beside an idle process holding a context. */
static int one(const char *name, int kernel, int idle_peer) {
  int pipefd[2];
  if (pipe(pipefd)) {
    perror("pipe");
    return 1;
  }
  pid_t peer = -1;
  if (idle_peer && (peer = fork()) == 0) {
    close(pipefd[0]);
    CK(cudaSetDevice(0));
    CK(cudaFree(0)); /* a context, then nothing */
    char c = 0;
    if (write(pipefd[1], &c, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(pipefd[1]); /* the idle peer's failure is then end of file here */
  if (idle_peer) {
    char c;
    if (peer < 0 || read(pipefd[0], &c, 1) != 1) {
      printf("%-11s FAILED (the idle process got no context)\n", name);
      if (peer > 0) waitpid(peer, NULL, 0);
      close(pipefd[0]);
      return 1;
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
    static double g[MAXI];
    for (int i = 0; i < iters + 100; i++) {
      double t0 = now_us();
      op(kernel, d, d + 2, s, ev);
      if (i >= 100) g[i - 100] = now_us() - t0;
    }
    printf("%-11s %9.1f us per operation and wait (median of %d)\n", name, median(g, iters), iters);
    fflush(stdout);
    _exit(0);
  }
  int st = 0;
  int ok = p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (!ok) printf("%-11s FAILED\n", name);
  if (idle_peer) {
    kill(peer, SIGKILL);
    waitpid(peer, &st, 0);
  }
  close(pipefd[0]);
  return !ok;
}

/* ---- memop and spin: the GPU alone ---- */

struct gshared {
  unsigned words[1024];     /* one page: memop's two words, registered by each player */
  cudaIpcMemHandle_t flags; /* spin: player 0's device words */
  int flags_ready, ready, go;
  float ms;   /* player 0's elapsed time for the whole game */
  int rounds; /* spin: rounds player 0 completed (all of them unless the bound hit) */
};

#define CU(x)                                                        \
  do {                                                               \
    CUresult r_ = (x);                                               \
    if (r_ != CUDA_SUCCESS) {                                        \
      const char *s_ = "?";                                          \
      cuGetErrorString(r_, &s_);                                     \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
      _exit(1);                                                      \
    }                                                                \
  } while (0)

static __device__ unsigned long long gtime(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Player me's whole game in one thread: player 0 serves round i (writes w[0] = i), player 1
 * answers (w[1] = i). Every spin ends after bound_ns of the GPU's clock; *done gets the
 * rounds completed. */
__global__ void spin_game(volatile unsigned *w, int me, int rounds, unsigned long long bound_ns,
                          int *done) {
  int i = 1;
  for (; i <= rounds; i++) {
    if (me == 0) {
      w[0] = (unsigned)i;
      __threadfence_system();
    }
    const unsigned long long t0 = gtime();
    while ((int)(w[1 - me] - (unsigned)i) < 0)
      if (gtime() - t0 > bound_ns) {
        *done = i - 1;
        return;
      }
    if (me == 1) {
      w[1] = (unsigned)i;
      __threadfence_system();
    }
  }
  *done = rounds;
}

static void gwait(volatile int *p, int v) {
  double t0 = now_us();
  while (__atomic_load_n(p, __ATOMIC_ACQUIRE) < v) bounded(t0);
}

static void gplayer(struct gshared *sh, int me, int spin, int rounds) {
  CK(cudaSetDevice(0));
  cudaStream_t s;
  cudaEvent_t e0, e1;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  unsigned *dw = NULL; /* the words as the GPU sees them */
  int *done = NULL;
  if (spin) {
    CK(cudaMalloc(&done, sizeof(int)));
    if (me == 0) {
      CK(cudaMalloc(&dw, 64));
      CK(cudaMemset(dw, 0, 64));
      CK(cudaIpcGetMemHandle(&sh->flags, dw));
      __atomic_store_n(&sh->flags_ready, 1, __ATOMIC_RELEASE);
    } else {
      gwait(&sh->flags_ready, 1);
      CK(cudaIpcOpenMemHandle((void **)&dw, sh->flags, cudaIpcMemLazyEnablePeerAccess));
    }
  } else {
    CK(cudaHostRegister(sh->words, sizeof sh->words,
                        cudaHostRegisterMapped | cudaHostRegisterPortable));
    CK(cudaHostGetDevicePointer((void **)&dw, sh->words, 0));
  }
  CK(cudaDeviceSynchronize());
  __atomic_fetch_add(&sh->ready, 1, __ATOMIC_SEQ_CST);
  gwait(&sh->ready, 2);
  CK(cudaEventRecord(e0, s));
  if (spin) {
    spin_game<<<1, 1, 0, s>>>(dw, me, rounds, 2000000000ull, done);
    CK(cudaGetLastError());
  } else {
    CUstream cs = (CUstream)s;
    for (int i = 1; i <= rounds; i++) {
      CUdeviceptr mine = (CUdeviceptr)(uintptr_t)(dw + me),
                  theirs = (CUdeviceptr)(uintptr_t)(dw + 1 - me);
      if (me == 0) CU(cuStreamWriteValue32(cs, mine, (cuuint32_t)i, CU_STREAM_WRITE_VALUE_DEFAULT));
      CU(cuStreamWaitValue32(cs, theirs, (cuuint32_t)i, CU_STREAM_WAIT_VALUE_GEQ));
      if (me == 1) CU(cuStreamWriteValue32(cs, mine, (cuuint32_t)i, CU_STREAM_WRITE_VALUE_DEFAULT));
    }
  }
  CK(cudaEventRecord(e1, s));
  /* A spin game that cannot progress ends by its bound; a stream game always completes. */
  CK(cudaEventSynchronize(e1));
  if (me == 0) {
    CK(cudaEventElapsedTime(&sh->ms, e0, e1));
    int got = rounds;
    if (spin) CK(cudaMemcpy(&got, done, sizeof got, cudaMemcpyDeviceToHost));
    sh->rounds = got;
  }
  if (!spin) CK(cudaHostUnregister(sh->words));
}

static int game(const char *name, int spin) {
  struct gshared *sh = (struct gshared *)mmap(NULL, sizeof(struct gshared), PROT_READ | PROT_WRITE,
                                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(sh, 0, sizeof *sh);
  const int rounds = spin ? 200 : iters;
  pid_t p[2] = {-1, -1};
  for (int k = 0; k < 2; k++)
    if ((p[k] = fork()) == 0) {
      gplayer(sh, k, spin, rounds);
      _exit(0);
    }
  int ok = 1;
  for (int k = 0; k < 2; k++) {
    int st = 0;
    ok &= p[k] > 0 && waitpid(p[k], &st, 0) == p[k] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  if (!ok)
    printf("%-11s FAILED\n", name);
  else if (sh->rounds < rounds)
    printf(
        "%-11s timed out: %d of %d rounds, then a spin passed its 2 s bound (the other "
        "context never ran meanwhile)\n",
        name, sh->rounds, rounds);
  else
    printf("%-11s %9.1f us per hand-off (%d rounds, %.1f ms in all)\n", name,
           1000.0 * sh->ms / (2.0 * rounds), rounds, sh->ms);
  munmap(sh, sizeof *sh);
  return !ok;
}

int main(int argc, char **argv) {
  if (argc > 1) iters = atoi(argv[1]);
  if (iters < 10 || iters > MAXI - 200) iters = 2000;
  setvbuf(stdout, NULL, _IONBF, 0);
  int bad = 0;
  bad |= two("host", M_HOST, 0);
  bad |= one("one-copy", 0, 0);
  bad |= one("one-kernel", 1, 0);
  bad |= one("one+idle", 0, 1);
  bad |= two("threads", M_COPY, 1);
  bad |= two("two-copy", M_COPY, 0);
  bad |= two("two-kernel", M_KERNEL, 0);
  bad |= two("ipc", M_IPC, 0);
  bad |= two("two-both", M_BOTH, 0);
  bad |= game("memop", 0);
  bad |= game("spin", 1); /* a bound hit is a figure, not a failure */
  return bad ? 1 : 0;
}
