/* The keeper: what takes the job down when rrun cannot.
 *
 * Workers die with rrun through PR_SET_PDEATHSIG, but what a worker started (a shell's
 * child, a data-loading process) does not: after `kill -9` of rrun it would run on with
 * parent 1. So rrun starts one small process before any worker, outside rrun's process
 * group and session, that holds one end of a socket pair. rrun sends it each worker's
 * process group as the worker starts (+pgid, with a pidfd of the worker), and withdraws a
 * group once it is empty (-pgid). When rrun ends, however it ends, the kernel closes rrun's
 * end; the keeper reads EOF, sends SIGKILL to every group still listed, and exits. A group
 * still listed at a normal exit holds processes a worker left behind, and they go too: a job
 * leaves nothing running.
 *
 * A group id is only a number. If what a worker left behind exits after the worker, the
 * group is empty but still listed, and the kernel may hand the number to an unrelated
 * process that makes it its own group; kill(-pgid) would then kill that (issue 22, item 3).
 * So the keeper signals a group through the worker's pidfd (PIDFD_SIGNAL_PROCESS_GROUP,
 * Linux 6.9): the pidfd names the kernel's struct pid of the worker, which a reused number
 * does not share, so the signal reaches the job's group or, once that is empty, nobody
 * (ESRCH). On older kernels it falls back to kill(-pgid), and only while some member of the
 * group is in rrun's session (the workers' session, which a reused id created by setsid or
 * by another login cannot be in); a job of the same session could still be hit there.
 *
 * The keeper is a grandchild of rrun (its parent exits at once), so rrun's children are its
 * workers alone, and it has no descriptor of rrun's but its end of the socket pair.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "rrun.h"

#ifndef PIDFD_SIGNAL_PROCESS_GROUP
#define PIDFD_SIGNAL_PROCESS_GROUP (1U << 2) /* <linux/pidfd.h> of Linux 6.9 */
#endif

/* One listed group: its id and a pidfd of the worker that leads it (-1 if none came). */
typedef struct {
  pid_t pgid;
  int pidfd;
} group;

/* Whether some process in group pgid is in session sid (the fallback's proof that the
 * group is still the job's). Reads the fields after the command name in /proc/PID/stat. */
static bool group_in_session(pid_t pgid, pid_t sid) {
  DIR *d = opendir("/proc");
  if (!d) return false; /* no way to tell: leave the group alone */
  bool found = false;
  struct dirent *e;
  while (!found && (e = readdir(d)) != NULL) {
    char path[64], buf[512];
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/%.20s/stat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue; /* gone meanwhile */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    (void)close(fd); /* read-only: nothing to lose */
    if (n <= 0) continue;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
    int ppid, pg, s;
    char st;
    if (p && sscanf(p + 1, " %c %d %d %d", &st, &ppid, &pg, &s) == 4)
      found = pg == pgid && s == sid;
  }
  (void)closedir(d);
  return found;
}

static void kill_group(const group *g, pid_t sid) {
  if (g->pidfd >= 0) {
    if (syscall(SYS_pidfd_send_signal, g->pidfd, SIGKILL, NULL, PIDFD_SIGNAL_PROCESS_GROUP) == 0 ||
        errno != EINVAL)
      return; /* done, or ESRCH: the job's group is empty, whoever holds the number now */
  }
  if (group_in_session(g->pgid, sid)) (void)kill(-g->pgid, SIGKILL);
}

/* Receives one message: +pgid with a pidfd, or -pgid. Returns 0 at EOF or on garbage. */
static int32_t keeper_recv(int fd, int *pidfd) {
  int32_t v = 0;
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {.iov_base = &v, .iov_len = sizeof v};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  *pidfd = -1;
  ssize_t r = RRUN_SYS(recvmsg(fd, &m, MSG_CMSG_CLOEXEC));
  struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&m) : NULL;
  if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
    memcpy(pidfd, CMSG_DATA(c), sizeof *pidfd);
  return r == (ssize_t)sizeof v ? v : 0;
}

static _Noreturn void keeper_main(int rfd, pid_t sid) {
  /* Nothing of rrun's but the socket: an inherited output pipe would keep a reader of
   * rrun's output waiting for an EOF that only the keeper's exit would give. */
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    for (int fd = 0; fd <= 2; fd++) (void)dup2(null, fd);
  }
  if (dup2(rfd, 3) != 3) _exit(1);
  closefrom(4);
  /* Signals stay blocked, as rrun blocks them for its signalfd: only SIGKILL ends the
   * keeper, and only EOF makes it act. */
  group *groups = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    int pidfd;
    int32_t v = keeper_recv(3, &pidfd);
    if (v == 0) break; /* EOF: rrun is gone (or wrote garbage: act anyway) */
    if (v > 0) {
      if (n == cap) {
        size_t nc = cap ? 2 * cap : 16;
        group *g = realloc(groups, nc * sizeof *g);
        if (!g) { /* cannot list it; rrun's own stop still reaches it */
          if (pidfd >= 0) (void)close(pidfd);
          continue;
        }
        groups = g;
        cap = nc;
      }
      groups[n++] = (group){.pgid = v, .pidfd = pidfd};
    } else {
      if (pidfd >= 0) (void)close(pidfd); /* none is sent with -pgid */
      for (size_t i = 0; i < n;) {
        if (groups[i].pgid != -v) {
          i++;
          continue;
        }
        if (groups[i].pidfd >= 0) (void)close(groups[i].pidfd);
        groups[i] = groups[--n];
      }
    }
  }
  for (size_t i = 0; i < n; i++) kill_group(&groups[i], sid);
  _exit(0);
}

int rr__keeper_start(launcher *L) {
  /* A socket, not a pipe, to pass pidfds along; SEQPACKET keeps each message whole. */
  int p[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p) != 0) {
    rr__say("keeper socket: %s", strerror(errno));
    return -1;
  }
  pid_t sid = getsid(0); /* the workers' session: they only change their process group */
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
    if (sid < 0 || setsid() < 0) _exit(1);
    pid_t k = fork();
    if (k < 0) _exit(1);
    if (k == 0) keeper_main(p[0], sid);
    _exit(0);
  }
  close(p[0]);
  int st = 0;
  if (RRUN_SYS(waitpid(a, &st, 0)) != a || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    rr__say(
        "cannot start the keeper process (a job killed with SIGKILL could leave processes "
        "its workers started)");
    close(p[1]);
    return -1;
  }
  L->keeper_fd = p[1];
  return 0;
}

/* A lost message costs only the clean-up of that group after a SIGKILL of rrun; the socket
 * never fills (a few bytes per worker start). pidfd, when >= 0, goes along. */
static void keeper_send(launcher *L, int32_t v, int pidfd) {
  if (L->keeper_fd < 0) return;
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {.iov_base = &v, .iov_len = sizeof v};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (pidfd >= 0) {
    memset(&ctl, 0, sizeof ctl);
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pidfd, sizeof pidfd);
  }
  if (RRUN_SYS(sendmsg(L->keeper_fd, &m, MSG_NOSIGNAL)) != (ssize_t)sizeof v)
    rr__say("telling the keeper about process group %d: %s", (int)(v < 0 ? -v : v),
            strerror(errno));
}

void rr__keeper_watch(launcher *L, pid_t pgid) {
  /* The worker is rrun's child and not yet reaped, so the pidfd is surely of this worker.
   * Without one (EMFILE, a kernel before 5.3) the keeper can still use the fallback. */
  int pidfd = L->keeper_fd < 0 ? -1 : (int)syscall(SYS_pidfd_open, pgid, 0);
  keeper_send(L, (int32_t)pgid, pidfd);
  if (pidfd >= 0 && close(pidfd) != 0) rr__say("close: %s", strerror(errno));
}

void rr__keeper_forget(launcher *L, pid_t pgid) {
  /* Only an empty group may be forgotten: while any member lives, its id cannot be reused
   * for an unrelated group, so killing it later is safe. */
  if (kill(-pgid, 0) != 0 && errno == ESRCH) keeper_send(L, -(int32_t)pgid, -1);
}
