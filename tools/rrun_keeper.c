/* The keeper: what takes the job down when rrun cannot.
 *
 * Workers die with rrun through PR_SET_PDEATHSIG, but what a worker started (a shell's
 * child, a data-loading process) does not: after `kill -9` of rrun it would run on with
 * parent 1. So rrun starts one small process before any worker, outside rrun's process
 * group and session, that holds the read end of a pipe. rrun writes each worker's process
 * group to it as the worker starts (+pgid), and withdraws a group once it is empty (-pgid).
 * When rrun ends, however it ends, the kernel closes the write end; the keeper reads EOF,
 * sends SIGKILL to every group still listed, and exits. A group still listed at a normal
 * exit holds processes a worker left behind, and they go too: a job leaves nothing running.
 *
 * The keeper is a grandchild of rrun (its parent exits at once), so rrun's children are its
 * workers alone, and it has no descriptor of rrun's but that pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "rrun.h"

static _Noreturn void keeper_main(int rfd) {
  /* Nothing of rrun's but the pipe: an inherited output pipe would keep a reader of
   * rrun's output waiting for an EOF that only the keeper's exit would give. */
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    for (int fd = 0; fd <= 2; fd++) (void)dup2(null, fd);
  }
  if (dup2(rfd, 3) != 3) _exit(1);
  closefrom(4);
  /* Signals stay blocked, as rrun blocks them for its signalfd: only SIGKILL ends the
   * keeper, and only EOF makes it act. */
  pid_t *groups = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    int32_t v;
    ssize_t r = read(3, &v, sizeof v);
    if (r < 0 && errno == EINTR) continue;
    if (r != (ssize_t)sizeof v) break; /* EOF: rrun is gone (or wrote garbage: act anyway) */
    if (v > 0) {
      if (n == cap) {
        size_t nc = cap ? 2 * cap : 16;
        pid_t *g = realloc(groups, nc * sizeof *g);
        if (!g) continue; /* cannot list it; rrun's own stop still reaches it */
        groups = g;
        cap = nc;
      }
      groups[n++] = v;
    } else if (v < 0) {
      for (size_t i = 0; i < n; i++)
        if (groups[i] == -v) groups[i] = groups[--n];
    }
  }
  for (size_t i = 0; i < n; i++) (void)kill(-groups[i], SIGKILL);
  _exit(0);
}

int rr__keeper_start(launcher *L) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    rr__say("keeper pipe: %s", strerror(errno));
    return -1;
  }
  pid_t a = fork();
  if (a < 0) {
    rr__say("fork: %s", strerror(errno));
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (a == 0) {
    /* Its own session: a signal to rrun's whole process group (a CI runner stopping a
     * job) must not take the keeper with it. */
    close(p[1]);
    if (setsid() < 0) _exit(1);
    pid_t k = fork();
    if (k < 0) _exit(1);
    if (k == 0) keeper_main(p[0]);
    _exit(0);
  }
  close(p[0]);
  int st = 0;
  if (RRUN_SYS(waitpid(a, &st, 0)) != a || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    rr__say("cannot start the keeper process (a job killed with SIGKILL could leave processes "
            "its workers started)");
    close(p[1]);
    return -1;
  }
  L->keeper_fd = p[1];
  return 0;
}

/* A lost message costs only the clean-up of that group after a SIGKILL of rrun; the pipe
 * never fills (a few bytes per worker start). */
static void keeper_send(launcher *L, int32_t v) {
  if (L->keeper_fd < 0) return;
  if (RRUN_SYS(write(L->keeper_fd, &v, sizeof v)) != (ssize_t)sizeof v)
    rr__say("telling the keeper about process group %d: %s", (int)(v < 0 ? -v : v),
            strerror(errno));
}

void rr__keeper_watch(launcher *L, pid_t pgid) { keeper_send(L, (int32_t)pgid); }

void rr__keeper_forget(launcher *L, pid_t pgid) {
  /* Only an empty group may be forgotten: while any member lives, its id cannot be reused
   * for an unrelated group, so killing it later is safe. */
  if (kill(-pgid, 0) != 0 && errno == ESRCH) keeper_send(L, -(int32_t)pgid);
}
