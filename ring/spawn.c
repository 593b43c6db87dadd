/* rr_spawn: start the ranks of a job as forked processes of this one, as
 * torch.multiprocessing.spawn does, with the environment env:// expects. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/status.h"
#include "common/util.h"
#include "transport/socket.h"

/* A free port on loopback: bind port 0 and read what the kernel picked. */
static int rr__free_port(int *port) {
  rr__addr a, bound;
  int fd;
  RR_CHECK(rr__addr_resolve("127.0.0.1", 0, &a));
  RR_CHECK(rr__sock_listen(&a, 1, 1, &fd, &bound));
  *port = rr__addr_port(&bound);
  close(fd);
  return RR_OK;
}

static void rr__child(int rank, int nprocs, int port, int (*fn)(int, void *), void *arg,
                      pid_t parent) {
  /* Die with the parent, even if it is killed before it can stop us. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(125);
  char v[32];
  snprintf(v, sizeof v, "%d", rank);
  setenv("RANK", v, 1);
  setenv("LOCAL_RANK", v, 1);
  snprintf(v, sizeof v, "%d", nprocs);
  setenv("WORLD_SIZE", v, 1);
  setenv("LOCAL_WORLD_SIZE", v, 1);
  snprintf(v, sizeof v, "%d", port);
  setenv("MASTER_PORT", v, 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  fflush(NULL);
  int rc = fn(rank, arg);
  fflush(NULL);
  _exit(rc & 0xff);
}

static double rr__grace_s(void) {
  const char *g = getenv("RR_GRACE_PERIOD");
  char *end;
  double v = g ? strtod(g, &end) : 30.0;
  return g && (end == g || v < 0) ? 30.0 : v;
}

/* Reap a child, waiting at most until deadline_ms (0: just poll). */
static pid_t rr__reap(int *wstatus, int64_t deadline_ms) {
  for (;;) {
    pid_t p = waitpid(-1, wstatus, WNOHANG);
    if (p != 0 || rr__ms_left(deadline_ms) == 0) return p;
    usleep(5000);
  }
}

int rr_spawn(int nprocs, int (*fn)(int rank, void *arg), void *arg, rr_spawn_status *status) {
  if (status) *status = (rr_spawn_status){-1, 0, 0};
  if (nprocs < 1 || !fn) return rr__set_error(RR_EINVAL, "rr_spawn: need nprocs >= 1 and a function");
  int port;
  RR_CHECK(rr__free_port(&port));
  pid_t *pids = rr__calloc((size_t)nprocs, sizeof *pids);
  if (!pids) return RR_ENOMEM;
  pid_t parent = getpid();
  fflush(NULL);
  int started = 0, st = RR_OK;
  for (; started < nprocs; started++) {
    pid_t p = fork();
    if (p < 0) {
      st = rr__set_error(RR_ESYS, "rr_spawn: fork: %s", strerror(errno));
      break;
    }
    if (p == 0) rr__child(started, nprocs, port, fn, arg, parent);
    pids[started] = p;
  }
  int live = started, failed = st != RR_OK;
  if (failed) /* could not start them all: the ones started would wait for the rest */
    for (int i = 0; i < started; i++) kill(pids[i], SIGKILL);
  while (live > 0) {
    int ws;
    pid_t p = failed ? rr__reap(&ws, rr__now_ms() + 100) : waitpid(-1, &ws, 0);
    if (p < 0 && errno == EINTR) continue;
    if (p < 0) break;
    if (p == 0) continue;
    int rank = -1;
    for (int i = 0; i < started; i++)
      if (pids[i] == p) rank = i, pids[i] = 0;
    if (rank < 0) continue; /* not ours */
    live--;
    int bad = WIFSIGNALED(ws) || (WIFEXITED(ws) && WEXITSTATUS(ws) != 0);
    if (bad && !failed) {
      failed = 1;
      int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 0, sig = WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
      if (status) *status = (rr_spawn_status){rank, code, sig};
      st = sig ? rr__set_error(RR_EPEER, "rr_spawn: rank %d was killed by signal %d (%s)", rank,
                               sig, strsignal(sig))
               : rr__set_error(RR_EPEER, "rr_spawn: rank %d exited with code %d", rank, code);
      /* Stop the others: SIGTERM, a grace period, then SIGKILL. */
      for (int i = 0; i < started; i++)
        if (pids[i]) kill(pids[i], SIGTERM);
      int64_t kill_at = rr__now_ms() + (int64_t)(rr__grace_s() * 1000.0);
      while (live > 0 && rr__now_ms() < kill_at) {
        pid_t q = rr__reap(&ws, rr__now_ms() + 50);
        if (q <= 0) continue;
        for (int i = 0; i < started; i++)
          if (pids[i] == q) pids[i] = 0, live--;
      }
      for (int i = 0; i < started; i++)
        if (pids[i]) kill(pids[i], SIGKILL);
    }
  }
  free(pids);
  return st;
}
