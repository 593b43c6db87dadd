/* rrun's workers: starting them, watching them, stopping them and restarting the group.
 *
 * Each worker is fork+execvp'd into its own process group (so a signal reaches whatever the
 * worker started, and a terminal's Ctrl-C reaches rrun only, which forwards it once) with
 * PR_SET_PDEATHSIG, so workers die with rrun. A close-on-exec pipe tells rrun whether exec
 * worked. The first failure (non-zero exit or a signal) stops the group: SIGTERM to every
 * live process group, SIGKILL after the grace period, reap everything, then restart
 * (--max-restarts) or exit with the failed worker's code. With --keep-going a failure is
 * only reported: the others run on (a program that survives a death shrinks its group,
 * docs/elastic.md), and the exit status follows job_status's rule.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

#include "rrun.h"

static const char *sig_name(int sig) {
  static const struct {
    int num;
    const char *name;
  } names[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
      {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (names[i].num == sig) return names[i].name;
  }
  return NULL;
}

void rr__describe_status(int status, char *buf, size_t size) {
  if (WIFEXITED(status)) {
    snprintf(buf, size, "exit code %d", WEXITSTATUS(status));
    return;
  }
  int sig = WTERMSIG(status);
  const char *name = sig_name(sig);
  snprintf(buf, size, "killed by signal %s%s%d%s%s", name ? name : "", name ? " (" : "", sig,
           name ? ")" : "", WCOREDUMP(status) ? " (core dumped)" : "");
}

/* The shell's convention: the exit code, or 128 + the signal that killed the process. */
static int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static double now_s(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
    rr__say("clock_gettime: %s", strerror(errno));
    abort(); /* CLOCK_MONOTONIC cannot fail on Linux; without a clock no timeout holds */
  }
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int count_alive(const launcher *L) {
  int n = 0;
  for (int i = 0; i < L->nw; i++) n += L->w[i].alive;
  return n;
}

/* ------------------------------------------------------------------------------------------
 * Starting workers.
 */
enum child_stage {
  STAGE_SETPGID,
  STAGE_PDEATHSIG,
  STAGE_DUP2,
  STAGE_SIGNALS,
  STAGE_AFFINITY,
  STAGE_EXEC
};
static const char *const kStageNames[] = {
    "setpgid",           "prctl(PR_SET_PDEATHSIG)",       "dup2",
    "restoring signals", "sched_setaffinity (--bind-to)", "exec"};

/* What a child that could not exec tells rrun through its close-on-exec pipe. */
struct child_report {
  int stage;
  int err;
};

static _Noreturn void child_fail(int report_fd, int stage) {
  struct child_report r = {stage, errno};
  /* If this write fails, rrun sees EOF (as after a good exec) and still gets exit code 127. */
  ssize_t n = write(report_fd, &r, sizeof r);
  (void)n;
  _exit(EXIT_EXEC);
}

/* rrun's CPUs (its own affinity: taskset or a cgroup around rrun chooses them; rrun only
 * spreads its workers over them), read again for each worker (a cpuset may change between
 * restarts) and sized for machines with more CPUs than a cpu_set_t holds. NULL with errno
 * on failure. */
static cpu_set_t *rrun_affinity(size_t *bytes, int *ncpu) {
  for (int n = CPU_SETSIZE; n <= (1 << 20); n *= 2) {
    cpu_set_t *set = CPU_ALLOC(n);
    if (!set) return NULL;
    *bytes = CPU_ALLOC_SIZE(n);
    if (sched_getaffinity(0, *bytes, set) == 0) {
      *ncpu = n;
      return set;
    }
    int e = errno;
    CPU_FREE(set);
    if (e != EINVAL) { /* EINVAL: the kernel's mask is larger than ours */
      errno = e;
      return NULL;
    }
  }
  errno = EINVAL;
  return NULL;
}

/* The first number in a sysfs topology file of one CPU: a value, or for a list of CPUs
 * ("0,4", "0-1") its lowest; -1 where the file is missing or unreadable. */
static int topo_value(int cpu, const char *what) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, what);
  FILE *f = fopen(path, "r");
  int v = -1;
  if (f) {
    if (fscanf(f, "%d", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

/* --bind-to for one worker, decided in rrun before the fork (rrun_bind.c says how): the set
 * to bind it to in *out (NULL: unbound; CPU_FREE it) and the CPUs the node's workers were
 * spread over in *host_cpus (0 when unbound). When rrun cannot read its CPUs, a binding the
 * user asked for fails the start (-1, said); the default one is given up with a warning. */
static int bind_plan(const launcher *L, int local_rank, cpu_set_t **out, size_t *bytes,
                     int *host_cpus) {
  static bool warned;
  *out = NULL;
  *host_cpus = 0;
  if (L->opt->bind == RRUN_BIND_NONE) return 0;
  int ncpu = 0, count = 0, got = 0;
  cpu_set_t *set = rrun_affinity(bytes, &ncpu);
  rr__cpu_place *places = NULL;
  int *mine = NULL;
  if (set) {
    count = CPU_COUNT_S(*bytes, set);
    places = malloc((size_t)(count > 0 ? count : 1) * sizeof *places);
    mine = malloc((size_t)(count > 0 ? count : 1) * sizeof *mine);
    if (!places || !mine) errno = ENOMEM;
  }
  if (!set || !places || !mine || count < 1) {
    int e = set && count < 1 ? EINVAL : errno;
    if (L->opt->bind_asked) {
      rr__say("--bind-to: cannot read the CPUs rrun may run on: %s", strerror(e));
    } else if (!warned) {
      warned = true;
      rr__say("warning: cannot read the CPUs rrun may run on (%s); workers run unbound",
              strerror(e));
    }
    if (set) CPU_FREE(set);
    free(places);
    free(mine);
    return L->opt->bind_asked ? -1 : 0;
  }
  for (int cpu = 0, i = 0; cpu < ncpu && i < count; cpu++) {
    if (CPU_ISSET_S(cpu, *bytes, set))
      places[i++] = (rr__cpu_place){cpu, topo_value(cpu, "physical_package_id"),
                                    topo_value(cpu, "thread_siblings_list")};
  }
  got = rr__bind_share(places, count, L->opt->bind, L->opt->nproc, local_rank, mine);
  free(places);
  if (got > 0) {
    CPU_ZERO_S(*bytes, set);
    for (int j = 0; j < got; j++) CPU_SET_S(mine[j], *bytes, set);
    *out = set;
    *host_cpus = count;
  } else {
    CPU_FREE(set);
  }
  free(mine);
  return 0;
}

/* In the child after fork: own process group, die with rrun, wire the pipes, bind when asked,
 * exec. */
static _Noreturn void child_main(const launcher *L, int pipes[2][2], int report_fd, pid_t parent,
                                 const cpu_set_t *bind, size_t bind_bytes) {
  if (setpgid(0, 0) != 0) child_fail(report_fd, STAGE_SETPGID);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) child_fail(report_fd, STAGE_PDEATHSIG);
  /* rrun may have died before the line above: then no death signal will come. */
  if (getppid() != parent) _exit(EXIT_FAILURE);
  for (int s = 0; s < 2; s++) {
    /* dup2 drops close-on-exec from the copy; the originals close at exec. */
    if (pipes[s][1] >= 0 && dup2(pipes[s][1], s == 0 ? STDOUT_FILENO : STDERR_FILENO) < 0) {
      child_fail(report_fd, STAGE_DUP2);
    }
  }
  /* Give the program the signal state rrun itself was started with. */
  if (sigaction(SIGPIPE, &L->orig_pipe, NULL) != 0 ||
      sigaction(SIGCHLD, &L->orig_chld, NULL) != 0 ||
      sigprocmask(SIG_SETMASK, &L->orig_mask, NULL) != 0) {
    child_fail(report_fd, STAGE_SIGNALS);
  }
  /* The default binding is only a hint: where the kernel refuses it (a cpuset changed since
   * rrun read it), the worker runs unbound. */
  if (bind && sched_setaffinity(0, bind_bytes, bind) != 0 && L->opt->bind_asked)
    child_fail(report_fd, STAGE_AFFINITY);
  execvp(L->opt->argv[0], L->opt->argv);
  child_fail(report_fd, STAGE_EXEC);
}

int rr__set_env(const char *name, const char *value) {
  if (setenv(name, value, 1) != 0) {
    rr__say("setenv %s: %s", name, strerror(errno));
    return -1;
  }
  return 0;
}

int rr__set_env_int(const char *name, long value) {
  char buf[32];
  snprintf(buf, sizeof buf, "%ld", value);
  return rr__set_env(name, buf);
}

static void close_fd(int *fd) {
  if (*fd >= 0 && close(*fd) != 0) rr__say("close: %s", strerror(errno));
  *fd = -1;
}

enum spawn_result { SPAWN_OK, SPAWN_EXEC_FAILED, SPAWN_ERROR };

/* Makes the pipe for one prefixed stream: rrun keeps the read end, non-blocking. */
static int make_stream_pipe(stream *s, int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) {
    rr__say("pipe: %s", strerror(errno));
    return -1;
  }
  s->fd = fds[0];
  s->buf = malloc(RRUN_LINE_MAX);
  if (!s->buf) {
    rr__say("out of memory");
    return -1;
  }
  int flags = fcntl(s->fd, F_GETFL);
  if (flags < 0 || fcntl(s->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    rr__say("fcntl: %s", strerror(errno));
    return -1;
  }
  return 0;
}

/* Starts one worker and waits until it has exec'd (or failed to). The per-worker environment
 * is set in rrun's own environment just before fork: rrun is single-threaded and reads none
 * of these variables, and the child then only has to exec. */
static enum spawn_result spawn_worker(launcher *L, worker *w) {
  int pipes[2][2] = {{-1, -1}, {-1, -1}};
  int report[2] = {-1, -1};
  cpu_set_t *bind = NULL;
  enum spawn_result result = SPAWN_ERROR;
  for (int s = 0; s < 2; s++) {
    if ((L->opt->tee & (1 << s)) && make_stream_pipe(&w->out[s], pipes[s]) != 0) goto out;
  }
  if (pipe2(report, O_CLOEXEC) != 0) {
    rr__say("pipe: %s", strerror(errno));
    goto out;
  }
  if (rr__set_env_int("RANK", w->rank) || rr__set_env_int("LOCAL_RANK", w->local_rank) ||
      rr__set_env_int("ROLE_RANK", w->rank)) {
    goto out;
  }
  /* RR_HOST_CPUS: a bound rank sees only its share and could not tell whether this node's
   * ranks outnumber its cores (the library's polling must know: rendezvous/bootstrap.c). */
  size_t bind_bytes = 0;
  int host_cpus = 0;
  if (bind_plan(L, w->local_rank, &bind, &bind_bytes, &host_cpus) != 0) goto out;
  if (bind && rr__set_env_int("RR_HOST_CPUS", host_cpus)) goto out;
  if (w->joiner ? rr__set_env("RR_GROW_JOIN", "1") : unsetenv("RR_GROW_JOIN") != 0) {
    if (!w->joiner) rr__say("unsetenv RR_GROW_JOIN: %s", strerror(errno));
    goto out;
  }
  /* A replacement in a dead rank's place says which process of the rank it is: the library
   * claims the rank anew with it, and only with rrun's notice in the store (rrun_notice.c). */
  if (w->gen > 0 ? rr__set_env_int("RR_RANK_GENERATION", w->gen)
                 : unsetenv("RR_RANK_GENERATION") != 0) {
    if (w->gen == 0) rr__say("unsetenv RR_RANK_GENERATION: %s", strerror(errno));
    goto out;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    rr__say("fork: %s", strerror(errno));
    goto out;
  }
  if (pid == 0) child_main(L, pipes, report[1], parent, bind, bind_bytes);
  /* The child makes its own group too; doing it here as well closes the window in which a
   * signal to the group would miss it. EACCES: it has already exec'd, and so has its group. */
  if (setpgid(pid, pid) != 0 && errno != EACCES && errno != ESRCH)
    rr__say("setpgid of rank %d: %s", w->rank, strerror(errno));
  rr__keeper_watch(L, pid);
  w->pid = pid;
  w->alive = true;
  L->live++;
  close_fd(&report[1]);
  struct child_report r;
  ssize_t n = RRUN_SYS(read(report[0], &r, sizeof r));
  if (n == (ssize_t)sizeof r) {
    const char *stage = r.stage >= 0 && r.stage <= STAGE_EXEC ? kStageNames[r.stage] : "?";
    if (r.stage == STAGE_EXEC) {
      rr__say("cannot run '%s': %s", L->opt->argv[0], strerror(r.err));
    } else {
      rr__say("cannot start rank %d: %s: %s", w->rank, stage, strerror(r.err));
    }
    result = SPAWN_EXEC_FAILED; /* the child exits 127: reaped as a failed worker */
  } else {
    if (n < 0) rr__say("reading the start report of rank %d: %s", w->rank, strerror(errno));
    result = SPAWN_OK;
  }
out:
  if (bind) CPU_FREE(bind);
  for (int s = 0; s < 2; s++) close_fd(&pipes[s][1]);
  close_fd(&report[0]);
  close_fd(&report[1]);
  if (result == SPAWN_ERROR) {
    for (int s = 0; s < 2; s++) rr__stream_close(&w->out[s]);
  }
  return result;
}

/* ------------------------------------------------------------------------------------------
 * Stopping workers.
 */

/* Signals the worker's process group, so processes it started get the signal too. A
 * stopped process (SIGSTOP, a debugger's stop) only acts on SIGTERM once continued, so
 * every signal but SIGKILL is followed by SIGCONT: stopping the job must not cost the
 * whole grace period because one worker was frozen. */
static void signal_worker(worker *w, int sig) {
  w->signalled = true;
  if (kill(-w->pid, sig) == 0) {
    if (sig != SIGKILL) (void)kill(-w->pid, SIGCONT);
    return;
  }
  /* ESRCH: the worker left its group (setsid, setpgid); fall back to the process itself. */
  if (errno == ESRCH && kill(w->pid, sig) == 0) {
    if (sig != SIGKILL) (void)kill(w->pid, SIGCONT);
    return;
  }
  if (errno != ESRCH) rr__say("kill rank %d (pid %d): %s", w->rank, (int)w->pid, strerror(errno));
}

static int signal_workers(launcher *L, int sig) {
  int n = 0;
  for (int i = 0; i < L->nw; i++) {
    if (L->w[i].alive) {
      signal_worker(&L->w[i], sig);
      n++;
    }
  }
  return n;
}

/* Sends sig to every live worker and starts the grace period (once per attempt). */
static void stop_group(launcher *L, int sig) {
  signal_workers(L, sig);
  if (!L->stopping) {
    L->stopping = true;
    L->stop_sig = sig;
    L->deadline = now_s() + L->opt->grace_s;
  }
}

static void check_deadline(launcher *L) {
  if (!L->stopping || L->killed || now_s() < L->deadline) return;
  L->killed = true;
  int n = count_alive(L);
  if (n == 0) return;
  rr__say("%d worker(s) still running %g s after %s; sending SIGKILL", n, L->opt->grace_s,
          sig_name(L->stop_sig));
  signal_workers(L, SIGKILL);
}

/* ------------------------------------------------------------------------------------------
 * Events.
 */
static worker *find_worker(launcher *L, pid_t pid) {
  for (int i = 0; i < L->nw; i++) {
    if (L->w[i].pid == pid && L->w[i].alive) return &L->w[i];
  }
  return NULL;
}

/* --replace: a new worker in the next slot, with the dead one's rank and local rank (for the
 * environment and the output prefix). inplace: the dead one never joined the rendezvous, and
 * the replacement takes its place there before the group is formed (a plain init, as the
 * next generation of its rank); else it joins the running group (RR_GROW_JOIN=1). A
 * replacement that cannot start is a failure of its own, reaped as one. */
static void start_replacement(launcher *L, const worker *dead, bool inplace) {
  worker *w = &L->w[L->nw++];
  *w = (worker){.local_rank = dead->local_rank,
                .rank = dead->rank,
                .joiner = !inplace,
                .gen = inplace ? dead->gen + 1 : 0};
  w->prefix_len = (size_t)snprintf(w->prefix, sizeof w->prefix, "[rank%d]: ", w->rank);
  for (int s = 0; s < 2; s++) w->out[s] = (stream){.fd = -1, .target = s + 1};
  L->replaced++;
  if (inplace)
    rr__say(
        "--replace: starting a replacement for rank %d in its place (it died before "
        "joining the rendezvous; RR_RANK_GENERATION=%d; %d of %d)",
        dead->rank, w->gen, L->replaced, L->opt->replace);
  else
    rr__say("--replace: starting a replacement for rank %d (RR_GROW_JOIN=1; %d of %d)", dead->rank,
            L->replaced, L->opt->replace);
  if (spawn_worker(L, w) == SPAWN_ERROR) rr__say("--replace: the replacement did not start");
}

void rr__replace_dead(launcher *L, const worker *w, bool inplace) {
  if (L->replaced < L->opt->replace && L->live > 0 && !L->stopping)
    start_replacement(L, w, inplace);
}

/* Newcomers started by --replace with nobody left to join: every other worker of this node
 * failed (a death before the group formed takes the others' setup with it), so no group will
 * ever grow to take them in, and each would wait for one until its own timeout. Only on a
 * single node: elsewhere the group may live on other nodes. A worker that exited 0 may have
 * left a running group behind (a newcomer may have joined it), so only failures count. */
static void stop_orphaned_newcomers(launcher *L) {
  if (L->opt->nnodes != 1 || L->stopping || L->live == 0) return;
  for (int i = 0; i < L->nw; i++) {
    const worker *w = &L->w[i];
    /* A member still running, or one that exited 0 (or was stopped by rrun). */
    if (!w->joiner && (w->alive || (w->pid > 0 && !w->failed))) return;
  }
  rr__say(
      "--replace: every other worker failed, so no group is left for the %d replacement(s) "
      "to join; stopping them",
      L->live);
  stop_group(L, SIGTERM);
}

/* Collects every exited worker. A worker that dies unasked fails the group. */
static void reap(launcher *L) {
  bool new_failure = false;
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0) break;
    if (pid < 0) {
      if (errno == EINTR) continue;
      if (errno != ECHILD) rr__say("waitpid: %s", strerror(errno));
      break;
    }
    if (pid == L->nt.tomb_pid) { /* rank 0's stand-in (rrun_notice.c) stopped by itself */
      L->nt.tomb_pid = 0;
      continue;
    }
    worker *w = find_worker(L, pid);
    if (!w) continue; /* rrun starts no other children */
    w->alive = false;
    w->status = status;
    L->live--;
    rr__keeper_forget(L, pid);
    /* Its last lines come out before any message about it. */
    for (int s = 0; s < 2; s++) rr__stream_read(L, w, &w->out[s], true);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    /* Rank 0 serves the job's store (env://): whatever its end, the store is gone. */
    bool store_host = L->opt->keep_going && w->rank == 0 && !w->joiner;
    if (ok || w->signalled) {
      if (store_host) rr__notice_rank0_gone(L, w, false);
      continue;
    }
    w->failed = true;
    new_failure = true;
    if (L->first_failed < 0) L->first_failed = (int)(w - L->w);
    char how[96];
    rr__describe_status(status, how, sizeof how);
    rr__say("rank %d (local rank %d, pid %d) failed: %s", w->rank, w->local_rank, (int)pid, how);
    if (L->opt->keep_going && L->live > 0 && !L->stopping) {
      rr__say("--keep-going: %d other worker(s) keep running", L->live);
      /* The others may still wait for it in the rendezvous: tell them (rrun_notice.c), then
       * replace it. Rank 0's store died with it; a newcomer has no seat in that store. */
      if (store_host) {
        rr__notice_rank0_gone(L, w, true);
        rr__replace_dead(L, w, false);
      } else if (w->joiner) {
        rr__replace_dead(L, w, false);
      } else {
        rr__notice_death(L, w);
      }
    } else if (store_host) {
      rr__notice_rank0_gone(L, w, false);
    }
  }
  if (L->opt->keep_going) stop_orphaned_newcomers(L);
  if (new_failure && !L->stopping && !L->opt->keep_going) {
    int n = count_alive(L);
    if (n > 0) {
      rr__say("stopping %d other worker(s) (SIGTERM, then SIGKILL after %g s)", n, L->opt->grace_s);
    }
    stop_group(L, SIGTERM);
  }
}

static void forward_signal(launcher *L, int sig) {
  if (L->signal_in == 0) L->signal_in = sig;
  int n = count_alive(L);
  if (n == 0) {
    rr__say("received %s", sig_name(sig));
  } else if (L->stopping) {
    rr__say("received %s; forwarding it to %d worker(s)", sig_name(sig), n);
  } else {
    rr__say("received %s; forwarding it to %d worker(s) (SIGKILL after %g s)", sig_name(sig), n,
            L->opt->grace_s);
  }
  stop_group(L, sig);
}

static void handle_signals(launcher *L) {
  for (;;) {
    struct signalfd_siginfo si;
    ssize_t n = read(L->sigfd, &si, sizeof si);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n != (ssize_t)sizeof si) {
      rr__say("reading signals: %s", n < 0 ? strerror(errno) : "short read");
      break;
    }
    if (si.ssi_signo != SIGCHLD) forward_signal(L, (int)si.ssi_signo);
  }
  reap(L); /* SIGCHLDs merge: always look for every exited worker */
}

/* Waits for the signalfd, the output pipes or the SIGKILL deadline, and handles what came. */
static void poll_once(launcher *L) {
  nfds_t n = 0;
  L->pfd[n++] = (struct pollfd){.fd = L->sigfd, .events = POLLIN};
  for (int i = 0; i < L->nw; i++) {
    for (int s = 0; s < 2; s++) {
      stream *st = &L->w[i].out[s];
      if (st->fd < 0) continue;
      L->pwatch[n].w = &L->w[i];
      L->pwatch[n].s = st;
      L->pfd[n++] = (struct pollfd){.fd = st->fd, .events = POLLIN};
    }
  }
  int timeout = -1;
  if (L->stopping && !L->killed) {
    double left = L->deadline - now_s();
    timeout = left <= 0 ? 0 : (int)ceil(left * 1000);
  }
  int tell = rr__notice_timeout_ms(L);
  if (tell >= 0 && (timeout < 0 || tell < timeout)) timeout = tell;
  int ready = RRUN_SYS(poll(L->pfd, n, timeout));
  if (ready < 0) {
    rr__say("poll: %s", strerror(errno));
    abort(); /* only EFAULT/EINVAL/ENOMEM: a bug, and looping would spin */
  }
  for (nfds_t i = 1; i < n; i++) {
    if (L->pfd[i].revents != 0) rr__stream_read(L, L->pwatch[i].w, L->pwatch[i].s, false);
  }
  if (L->pfd[0].revents) handle_signals(L);
  check_deadline(L);
  rr__notice_retry(L);
}

/* ------------------------------------------------------------------------------------------
 * The job.
 */
static void print_summary(const launcher *L) {
  int failed = 0, stopped = 0;
  for (int i = 0; i < L->nw; i++) {
    failed += L->w[i].failed;
    stopped += L->w[i].signalled;
  }
  rr__say("summary: %d of %d worker(s) failed, %d stopped by rrun", failed, L->nw, stopped);
  for (int i = 0; i < L->nw; i++) {
    const worker *w = &L->w[i];
    if (!w->failed) continue;
    char how[96];
    rr__describe_status(w->status, how, sizeof how);
    rr__say("  rank %d (local rank %d, pid %d): %s%s", w->rank, w->local_rank, (int)w->pid, how,
            i == L->first_failed ? " (first failure)" : "");
  }
}

/* Runs one attempt of the group; returns once every started worker is reaped. */
static void run_group(launcher *L) {
  const options *o = L->opt;
  L->live = 0;
  L->stopping = L->killed = false;
  L->first_failed = -1;
  L->launch_error = false;
  L->nw = o->nproc;
  L->replaced = 0;
  for (int i = 0; i < o->nproc; i++) {
    worker *w = &L->w[i];
    *w = (worker){.local_rank = i, .rank = o->node_rank * o->nproc + i};
    w->prefix_len = (size_t)snprintf(w->prefix, sizeof w->prefix, "[rank%d]: ", w->rank);
    for (int s = 0; s < 2; s++) w->out[s] = (stream){.fd = -1, .target = s + 1};
  }
  rr__notice_attempt(L);
  if (rr__set_env_int("TORCHELASTIC_RESTART_COUNT", L->restart) != 0) {
    L->launch_error = true;
    return;
  }
  for (int i = 0; i < o->nproc; i++) {
    enum spawn_result r = spawn_worker(L, &L->w[i]);
    if (r == SPAWN_OK) continue;
    /* After an exec failure the program will not start for the others either, so the ranks
     * started so far would wait in the rendezvous until its timeout: a launch failure even
     * with --keep-going (which is about deaths of a running job). */
    if (r == SPAWN_ERROR || (r == SPAWN_EXEC_FAILED && o->keep_going)) {
      L->launch_error = r == SPAWN_ERROR;
      int n = count_alive(L);
      if (n > 0) {
        rr__say("stopping the %d worker(s) already started (SIGTERM, then SIGKILL after %g s)", n,
                o->grace_s);
      }
      stop_group(L, SIGTERM);
    }
    break;
  }
  while (L->live > 0) poll_once(L);
  rr__notice_attempt_end(L);
  /* Whatever is still in the pipes; a pipe still open now is held by a process the worker
   * left behind, which rrun does not wait for. */
  for (int i = 0; i < L->nw; i++) {
    for (int s = 0; s < 2; s++) {
      stream *st = &L->w[i].out[s];
      rr__stream_read(L, &L->w[i], st, true);
      if (st->fd >= 0) rr__emit_lines(L, &L->w[i], st, true);
      rr__stream_close(st);
    }
  }
}

/* A signal that says the worker's own code failed (the kernel dumps core for these), not
 * that something outside ended it (SIGKILL from the OOM killer or an admin, SIGTERM from a
 * scheduler's preemption): a crash is never a death the job survived. */
static bool crash_signal(int sig) {
  switch (sig) {
    case SIGSEGV:
    case SIGBUS:
    case SIGILL:
    case SIGFPE:
    case SIGABRT:
    case SIGSYS:
    case SIGTRAP:
    case SIGQUIT:
    case SIGXCPU:
    case SIGXFSZ:
      return true;
    default:
      return false;
  }
}

/* The attempt's exit status. Without --keep-going: 0, or the first failed worker's. With it
 * (a death is something the job may survive): 0 when some worker exited 0 and each other one
 * exited 0 or was killed by a signal rrun did not send; else the exit code of the lowest rank
 * that exited non-zero, then 128 + the signal of the lowest rank that crashed (crash_signal),
 * or, when none did either, 128 + the first killed worker's signal. A non-zero exit is a
 * worker reporting its own error (a survivor that could not go on), and a crash a bug, which
 * no survivor's success hides. */
static int job_status(const launcher *L) {
  if (L->first_failed < 0) return 0;
  if (!L->opt->keep_going) return exit_code_of(L->w[L->first_failed].status);
  int ok = 0, crashed = 0;
  for (int i = 0; i < L->nw; i++) {
    const worker *w = &L->w[i];
    if (w->failed && WIFEXITED(w->status)) return WEXITSTATUS(w->status);
    if (w->failed && WIFSIGNALED(w->status) && crash_signal(WTERMSIG(w->status)) && !crashed)
      crashed = 128 + WTERMSIG(w->status);
    ok += !w->failed && !w->signalled && w->pid > 0;
  }
  if (crashed) return crashed;
  return ok > 0 ? 0 : exit_code_of(L->w[L->first_failed].status);
}

/* Runs the group until it succeeds, is stopped by a signal, or has used its restarts. */
int rr__run_job(launcher *L) {
  L->keeper_fd = -1;
  /* Without a keeper the job still runs; only a SIGKILL of rrun could then leave strays. */
  (void)rr__keeper_start(L);
  for (;;) {
    run_group(L);
    if (L->first_failed >= 0) print_summary(L);
    /* A signal that came after the last worker exited must not let a restart begin. */
    handle_signals(L);
    if (L->signal_in) return 128 + L->signal_in;
    if (L->launch_error) return EXIT_FAILURE;
    int rc = job_status(L);
    if (rc == 0) {
      if (L->first_failed >= 0)
        rr__say("--keep-going: the job finished on the surviving worker(s); exit status 0");
      return 0;
    }
    if (L->restart >= L->opt->max_restarts) return rc;
    L->restart++;
    rr__say("restarting the worker group (restart %d of %d)", L->restart, L->opt->max_restarts);
  }
}
