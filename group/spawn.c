/* rr_spawn: start the ranks of a job as forked processes of this one, as
 * torch.multiprocessing.spawn does, with the environment env:// expects.
 *
 * Only the workers' own pids are waited for (waitpid(pid, WNOHANG) on each), never
 * waitpid(-1): the caller's other children are the caller's to reap. Between checks the
 * parent sleeps in poll() on a pidfd per worker, which becomes readable when that worker
 * exits; where pidfd_open is missing (Linux < 5.3) the same poll() is a plain 10 ms sleep. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "transport/socket.h"

/* Longest sleep between checks with pidfds (a safety net: an exit wakes us at once), and
 * the polling interval without them. */
#define RR__SPAWN_WAKE_MS 1000
#define RR__SPAWN_POLL_MS 10

/* The job's store port on loopback, bound and listening here: rank 0 serves the store on
 * this very socket (RR_STORE_LISTEN_FD), so no other process can take the port between our
 * choice of it and rank 0's start, as it could when the port was only probed and released
 * (two rr_spawn jobs at once then met on one port). */
static int rr__store_listener(int *fd, int *port) {
  rr__addr a, bound;
  RR__CHECK(rr__addr_resolve("127.0.0.1", 0, &a));
  RR__CHECK(rr__sock_listen(&a, 1024, 1, fd, &bound));
  *port = rr__addr_port(&bound);
  return RR_OK;
}

/* The exit code of a worker whose fn returned rc: 1..255 as they are, anything else that is
 * not 0 (256, -1, ...) becomes 1, so that no failure can turn into exit code 0. */
static int rr__exit_code(int rc) {
  return rc == 0 ? 0 : rc >= 1 && rc <= 255 ? rc : 1;
}

static void rr__child(int rank, int nprocs, int port, int lfd, int (*fn)(int, void *), void *arg,
                      pid_t parent, const struct pollfd *pfd) {
  /* Die with the parent, even if it is killed before it can stop us. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(125);
  /* The pidfds of the workers started before this one are the parent's business. */
  for (int i = 0; i < rank; i++)
    if (pfd[i].fd >= 0 && close(pfd[i].fd) != 0) _exit(125);
  char v[32];
  snprintf(v, sizeof v, "%d", rank);
  setenv("RANK", v, 1);
  setenv("LOCAL_RANK", v, 1);
  snprintf(v, sizeof v, "%d", nprocs);
  setenv("WORLD_SIZE", v, 1);
  setenv("LOCAL_WORLD_SIZE", v, 1);
  snprintf(v, sizeof v, "%d", port);
  /* Rank 0 serves the store on the listener; nobody else keeps it open (a copy held by
   * another worker would keep the port answering after rank 0 died). */
  if (rank == 0) {
    char f[16];
    snprintf(f, sizeof f, "%d", lfd);
    setenv("RR_STORE_LISTEN_FD", f, 1);
  } else if (close(lfd) != 0) {
    _exit(125);
  }
  setenv("MASTER_PORT", v, 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  fflush(NULL);
  int rc = fn(rank, arg);
  fflush(NULL);
  _exit(rr__exit_code(rc));
}

/* A pidfd for pid, or -1 where the kernel has none (then the caller polls). */
static int rr__pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) return (int)fd;
  if (errno != ENOSYS && errno != EPERM)
    RR__LOG_WARN(RR__SUB_INIT, "rr_spawn: pidfd_open(%d): %s; polling instead", (int)pid,
                 strerror(errno));
#else
  (void)pid;
#endif
  return -1;
}

static void rr__signal(pid_t pid, int sig) {
  /* pid is an unreaped child of ours, so kill() cannot miss it (a zombie takes signals). */
  if (kill(pid, sig) != 0)
    RR__LOG_WARN(RR__SUB_INIT, "rr_spawn: kill(%d, %d): %s", (int)pid, sig, strerror(errno));
}

int rr_spawn(int nprocs, int (*fn)(int rank, void *arg), void *arg, rr_spawn_status *status) {
  if (status) *status = (rr_spawn_status){-1, 0, 0};
  if (nprocs < 1 || !fn)
    return rr__set_error(RR_EINVAL, "rr_spawn: need nprocs >= 1 and a function");
  /* A bad RR_GRACE_PERIOD (or any other tunable) fails here, before any worker exists,
   * rather than in every worker's rr_init_process_group. */
  int pst = rr__params_check();
  if (pst != RR_OK) return rr__prefix_error(pst, "rr_spawn");
  int port, lfd;
  RR__CHECK(rr__store_listener(&lfd, &port));
  pid_t *pids = rr__calloc((size_t)nprocs, sizeof *pids); /* 0 once reaped */
  struct pollfd *pfd = rr__calloc((size_t)nprocs, sizeof *pfd);
  if (!pids || !pfd) {
    free(pids);
    free(pfd);
    return RR_ENOMEM;
  }
  pid_t parent = getpid();
  fflush(NULL);
  int started = 0, st = RR_OK, have_pidfds = 1;
  for (; started < nprocs; started++) {
    pid_t p = fork();
    if (p < 0) {
      st = rr__set_error(RR_ESYS, "rr_spawn: fork: %s", strerror(errno));
      break;
    }
    if (p == 0) rr__child(started, nprocs, port, lfd, fn, arg, parent, pfd);
    pids[started] = p;
    pfd[started] = (struct pollfd){.fd = rr__pidfd(p), .events = POLLIN};
    if (pfd[started].fd < 0) have_pidfds = 0;
  }
  if (close(lfd) != 0) RR__LOG_WARN(RR__SUB_INIT, "rr_spawn: close: %s", strerror(errno));
  int live = started, failed = st != RR_OK, killed = 0;
  int64_t kill_at = 0;
  if (failed) { /* could not start them all: the ones started would wait for the rest */
    for (int i = 0; i < started; i++) rr__signal(pids[i], SIGKILL);
    killed = 1;
  }
  while (live > 0) {
    /* Reap every worker that has exited; only our own pids. */
    for (int i = 0; i < started; i++) {
      if (!pids[i]) continue;
      int ws = 0;
      pid_t p = waitpid(pids[i], &ws, WNOHANG);
      if (p == 0 || (p < 0 && errno == EINTR)) continue; /* running (EINTR: next round) */
      int lost = p < 0; /* ECHILD: reaped by someone else (SIGCHLD ignored, or a handler) */
      if (lost)
        RR__LOG_WARN(RR__SUB_INIT, "rr_spawn: waitpid(%d) for rank %d: %s", (int)pids[i], i,
                     strerror(errno));
      pids[i] = 0;
      live--;
      if (pfd[i].fd >= 0 && close(pfd[i].fd) != 0)
        RR__LOG_WARN(RR__SUB_INIT, "rr_spawn: close: %s", strerror(errno));
      pfd[i].fd = -1; /* poll() skips it */
      int bad = lost || WIFSIGNALED(ws) || (WIFEXITED(ws) && WEXITSTATUS(ws) != 0);
      if (!bad || failed) continue;
      failed = 1;
      int code = !lost && WIFEXITED(ws) ? WEXITSTATUS(ws) : 0;
      int sig = !lost && WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
      if (status) *status = (rr_spawn_status){i, code, sig};
      if (lost)
        st = rr__set_error(RR_ESYS,
                           "rr_spawn: rank %d: its exit status was lost (another waitpid reaped "
                           "it; is SIGCHLD ignored?)",
                           i);
      else if (sig)
        st = rr__set_error(RR_EPEER, "rr_spawn: rank %d was killed by signal %d (%s)", i, sig,
                           strsignal(sig));
      else
        st = rr__set_error(RR_EPEER, "rr_spawn: rank %d exited with code %d", i, code);
      /* Stop the others: SIGTERM, a grace period, then SIGKILL. */
      for (int j = 0; j < started; j++)
        if (pids[j]) rr__signal(pids[j], SIGTERM);
      kill_at = rr__now_ms() + (int64_t)(rr__params_get()->grace_s * 1000.0);
    }
    if (live == 0) break;
    if (failed && !killed && rr__ms_left(kill_at) == 0) {
      for (int i = 0; i < started; i++)
        if (pids[i]) rr__signal(pids[i], SIGKILL);
      killed = 1;
    }
    /* Sleep until a worker exits (its pidfd turns readable), the SIGKILL deadline, or the
     * next check; never longer than RR__SPAWN_WAKE_MS, so this is never a busy loop and
     * never an unbounded wait. */
    int64_t ms = have_pidfds ? RR__SPAWN_WAKE_MS : RR__SPAWN_POLL_MS;
    if (failed && !killed) ms = RR__MIN(ms, rr__ms_left(kill_at));
    if (poll(have_pidfds ? pfd : NULL, have_pidfds ? (nfds_t)started : 0, (int)ms) < 0 &&
        errno != EINTR) {
      /* Only EINVAL (more workers than RLIMIT_NOFILE) or ENOMEM: sleep without the fds. */
      RR__LOG_WARN(RR__SUB_INIT, "rr_spawn: poll: %s; checking every %d ms instead",
                   strerror(errno), RR__SPAWN_POLL_MS);
      have_pidfds = 0;
    }
  }
  for (int i = 0; i < started; i++)
    if (pfd[i].fd >= 0 && close(pfd[i].fd) != 0)
      RR__LOG_WARN(RR__SUB_INIT, "rr_spawn: close: %s", strerror(errno));
  free(pids);
  free(pfd);
  return st;
}
