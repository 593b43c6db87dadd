/* The fake's GPUs as every process of a test shares them: a device runs the work of one
 * context (one process) at a time. Tests only; the rules and their documentation:
 *
 *   - Without MPS, processes that share a GPU do not run at once: "when processes share the
 *     GPU their scheduling resources must be swapped on and off the GPU", and it is MPS that
 *     "allows kernel and memcopy operations from different processes to overlap" (NVIDIA,
 *     Multi-Process Service, "When to Use MPS"). Streams of one process (one context) do run
 *     side by side (Programming Guide, "Asynchronous Concurrent Execution"). So a device here
 *     belongs to one process while any of its copies, memsets, kernels or stream writes run;
 *     another process's wait for it.
 *   - The device changes hands when its holder is idle (none of its operations running), or
 *     after a time slice (RR_FAKE_CUDA_SLICE_US, 2000 us) while another waits: the holder
 *     then starts nothing new until what runs has ended, and leaves the device to the waiter.
 *   - What a stream waits for (an event, a stream memory wait) holds no device: the GPU's
 *     front end waits for it, not the SMs, so the other context runs meanwhile. That is what
 *     lets two processes on one GPU hand data over with stream waits and writes.
 *   - A kernel is not preempted here. On a GPU a time slice ends a kernel's turn too, so one
 *     that spins on a word another process's work writes crawls (a slice per hand-off); here
 *     it hangs until the watchdog (RR_FAKE_CUDA_WATCHDOG_MS, 10 s) ends it with
 *     cudaErrorLaunchTimeout ("the launch timed out and was terminated"), which then sticks
 *     to the process's context as the runtime's launch errors do. Stricter than a GPU, on
 *     purpose: either way the design is wrong, and here it fails a test instead of a run.
 *
 * The shared state is an anonymous shared mapping made when the fake is installed, before
 * the test forks its ranks, so every rank of the test sees it (a process that execs makes its
 * own: it then shares its GPUs with nobody). A holder that died (SIGKILL mid-operation) is
 * seen as gone and its device taken over. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cuda/api.h"
#include "tests/fake_cuda/fake_cuda.h"
#include "tests/fake_cuda/fake_int.h"

#define FG_MAX_DEV 8

typedef struct fg_dev {
  _Atomic int owner;          /* the pid whose context has the device, 0: nobody */
  _Atomic int64_t since_us;   /* when it took it */
  _Atomic int waiting;        /* contexts with work ready, waiting for the device */
  _Atomic int yielded_by;     /* the pid that gave the device up when its slice ended */
  _Atomic int64_t yielded_us; /* ... and when */
  _Atomic uint64_t switches;  /* times the device went to another context */
} fg_dev;

static fg_dev *G; /* [FG_MAX_DEV], shared by the test's processes */
static long g_slice_us = 2000, g_watchdog_ms = 10000;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_running[FG_MAX_DEV];  /* this process's operations running on each device */
static int g_yielding[FG_MAX_DEV]; /* its slice is over: start nothing until it let go */
static atomic_int g_sticky;        /* the context's sticky error (a kernel that timed out) */

static int64_t fg_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void rr__fk_gpu_setup(void) {
  const char *s = getenv("RR_FAKE_CUDA_SLICE_US");
  if (s && atol(s) > 0) g_slice_us = atol(s);
  const char *w = getenv("RR_FAKE_CUDA_WATCHDOG_MS");
  if (w && atol(w) > 0) g_watchdog_ms = atol(w);
  if (G) return;
  void *m = mmap(NULL, sizeof(fg_dev) * FG_MAX_DEV, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    perror("fake CUDA: the shared GPU state");
    abort();
  }
  G = m; /* zero: every device free */
}

long rr__fk_watchdog_ms(void) {
  return g_watchdog_ms;
}

/* Is the holder still there? A killed rank stays a zombie until its parent reaps it: that
 * counts as gone. */
static int fg_alive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

void rr__fk_gpu_enter(int d) {
  if (!G || d < 0 || d >= FG_MAX_DEV) return;
  fg_dev *g = &G[d];
  const int me = (int)getpid();
  int counted = 0;
  int64_t looked = 0;
  pthread_mutex_lock(&g_mu);
  for (;;) {
    int own = atomic_load(&g->owner);
    int64_t now = fg_now_us();
    if (own == me) {
      int others = atomic_load(&g->waiting) - counted;
      if (!g_yielding[d] && (others <= 0 || now - atomic_load(&g->since_us) < g_slice_us)) {
        g_running[d]++;
        break;
      }
      /* The slice is over and another context waits: the last operation running lets go
       * (rr__fk_gpu_leave); if none runs, let go here. */
      g_yielding[d] = 1;
      if (g_running[d] == 0) {
        atomic_store(&g->yielded_by, me);
        atomic_store(&g->yielded_us, now);
        atomic_store(&g->owner, 0);
        g_yielding[d] = 0;
      }
    } else if (own == 0 || (now - looked > 10000 && !(looked = now, fg_alive(own)))) {
      /* Free (or its holder is dead). One that just yielded leaves it to a waiter first. */
      int others = atomic_load(&g->waiting) - counted;
      int fair = atomic_load(&g->yielded_by) != me || others <= 0 ||
                 now - atomic_load(&g->yielded_us) > g_slice_us;
      if (fair && atomic_compare_exchange_strong(&g->owner, &own, me)) {
        atomic_store(&g->since_us, now);
        atomic_fetch_add(&g->switches, 1);
        if (counted) atomic_fetch_sub(&g->waiting, 1);
        g_yielding[d] = 0;
        g_running[d]++;
        break;
      }
    }
    if (!counted) {
      atomic_fetch_add(&g->waiting, 1);
      counted = 1;
    }
    pthread_mutex_unlock(&g_mu);
    usleep(50);
    pthread_mutex_lock(&g_mu);
  }
  pthread_mutex_unlock(&g_mu);
}

void rr__fk_gpu_leave(int d) {
  if (!G || d < 0 || d >= FG_MAX_DEV) return;
  fg_dev *g = &G[d];
  const int me = (int)getpid();
  pthread_mutex_lock(&g_mu);
  if (--g_running[d] == 0 && atomic_load(&g->owner) == me) {
    /* Idle: the device goes back (a yield is remembered, so the waiter gets its turn). */
    if (g_yielding[d]) {
      atomic_store(&g->yielded_by, me);
      atomic_store(&g->yielded_us, fg_now_us());
    }
    g_yielding[d] = 0;
    atomic_store(&g->owner, 0);
  }
  pthread_mutex_unlock(&g_mu);
}

int rr__fk_sticky(void) {
  return atomic_load(&g_sticky);
}

void rr__fk_set_sticky(int e) {
  int none = 0;
  atomic_compare_exchange_strong(&g_sticky, &none, e);
}

uint64_t rr_fake_cuda_switches(int device) {
  return G && device >= 0 && device < FG_MAX_DEV ? atomic_load(&G[device].switches) : 0;
}
