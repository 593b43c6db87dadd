/*
 * rrun — the job launcher, torchrun's equivalent: start --nproc-per-node copies of a program
 * with the torch.distributed environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), watch them, and
 * tear the whole group down as soon as one of them fails.
 *
 * Design. One thread and one poll() loop. The signals rrun cares about (SIGCHLD and the four it
 * forwards) stay blocked and are read from a signalfd, so nothing runs in a signal handler and
 * no SIGCHLD can slip between a check and a wait. Each worker is fork+execvp'd into its own
 * process group (so a signal reaches whatever the worker started, and a terminal's Ctrl-C
 * reaches rrun only, which forwards it once) with PR_SET_PDEATHSIG, so workers die with rrun.
 * A close-on-exec pipe tells rrun whether exec worked. Worker output goes through pipes only
 * for the streams --tee prefixes; otherwise workers write straight to rrun's stdout/stderr.
 * The first failure (non-zero exit or a signal) stops the group: SIGTERM to every live process
 * group, SIGKILL after the grace period, reap everything, then restart (--max-restarts) or
 * exit with the failed worker's code. rrun does not link libringreduce: it only manages
 * processes, so it keeps working whatever state the library is in.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#ifndef RRUN_VERSION
#define RRUN_VERSION "unknown"
#endif

enum { EXIT_USAGE = 2, EXIT_EXEC = 127 };

/* Longest line that --tee keeps in one piece; a longer one comes out in prefixed pieces. */
#define RRUN_LINE_MAX 65536
/* Room for "[rankN]: " with any int N, and the newline. */
#define RRUN_PREFIX_MAX 32
/* Bounds that keep the arithmetic (ranks, poll timeouts in ms) far from overflow. */
#define RRUN_MAX_PROCS (1 << 20)
#define RRUN_MAX_GRACE_S 1e6

/* Retries a system call interrupted by a signal (possible only while a signal is unblocked,
 * which in rrun is never, but the retry costs nothing and keeps each call site honest). */
#define SYS(call)                            \
  ({                                         \
    __typeof__(call) sys_rc_;                \
    do sys_rc_ = (call);                     \
    while (sys_rc_ == -1 && errno == EINTR); \
    sys_rc_;                                 \
  })

/* ------------------------------------------------------------------------------------------
 * Messages. Each goes out in one write() so it does not mix with worker output mid-line.
 */

/* Writes all of buf, waiting when fd is non-blocking and full. Returns 0 or -1 with errno. */
static int write_all(int fd, const char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n >= 0) {
      buf += n;
      len -= (size_t)n;
    } else if (errno == EAGAIN) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      if (SYS(poll(&p, 1, -1)) < 0) return -1;
    } else if (errno != EINTR) {
      return -1;
    }
  }
  return 0;
}

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...) {
  char line[1024];
  size_t len = (size_t)snprintf(line, sizeof line, "rrun: ");
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line + len, sizeof line - len, fmt, ap);
  va_end(ap);
  if (n > 0) len += (size_t)n;
  if (len > sizeof line - 2) len = sizeof line - 2; /* truncated: keep room for the newline */
  line[len++] = '\n';
  /* If stderr is gone there is nowhere left to report that, so the result is not used. */
  (void)write_all(STDERR_FILENO, line, len);
}

__attribute__((format(printf, 1, 2), noreturn)) static void usage_error(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  say("%s (see 'rrun --help')", msg);
  exit(EXIT_USAGE);
}

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

/* "exit code 3" or "killed by signal SIGKILL (9)", for a wait status. */
static void describe_status(int status, char *buf, size_t size) {
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
    say("clock_gettime: %s", strerror(errno));
    abort(); /* CLOCK_MONOTONIC cannot fail on Linux; without a clock no timeout holds */
  }
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------------------------
 * Command line, spelled as torchrun's.
 */
typedef struct {
  int nproc;
  int nnodes;
  int node_rank;
  const char *master_addr;
  int master_port;
  bool standalone;
  bool nnodes_set, node_rank_set, addr_set, port_set;
  int max_restarts;
  int tee; /* bit 0: prefix stdout, bit 1: prefix stderr */
  double grace_s;
  const char *run_id; /* --rdzv-id; NULL: "none" */
  char **argv;        /* the program and its arguments */
} options;

enum flag_id {
  F_NPROC,
  F_NNODES,
  F_NODE_RANK,
  F_MASTER_ADDR,
  F_MASTER_PORT,
  F_STANDALONE,
  F_MAX_RESTARTS,
  F_TEE,
  F_PREFIX,
  F_GRACE,
  F_RDZV_ID,
  F_RDZV_OTHER,
  F_NO_PYTHON,
  F_HELP,
  F_VERSION,
};

static const struct flag {
  const char *name; /* with '-' between words; '_' is accepted in its place */
  enum flag_id id;
  bool takes_value;
} kFlags[] = {
    {"--nproc-per-node", F_NPROC, true},
    {"--nnodes", F_NNODES, true},
    {"--node-rank", F_NODE_RANK, true},
    {"--master-addr", F_MASTER_ADDR, true},
    {"--master-port", F_MASTER_PORT, true},
    {"--standalone", F_STANDALONE, false},
    {"--max-restarts", F_MAX_RESTARTS, true},
    {"--tee", F_TEE, true},
    {"-t", F_TEE, true},
    {"--prefix", F_PREFIX, false},
    {"--grace-period", F_GRACE, true},
    {"--rdzv-id", F_RDZV_ID, true},
    {"--no-python", F_NO_PYTHON, false},
    {"-h", F_HELP, false},
    {"--help", F_HELP, false},
    {"--version", F_VERSION, false},
};

static void print_help(void) {
  static const char text[] =
      "usage: rrun [options] [--] program [args...]\n"
      "\n"
      "Starts --nproc-per-node copies of program on this node as one distributed job, as\n"
      "torchrun does (program is run directly, as with torchrun --no-python).\n"
      "\n"
      "Options (also spelt with '_' for '-'; '--flag value' or '--flag=value'):\n"
      "  --nproc-per-node N   workers on this node (default 1)\n"
      "  --nnodes N           nodes in the job (default 1); MIN:MAX only with MIN == MAX\n"
      "  --node-rank K        rank of this node, 0 <= K < nnodes (default 0)\n"
      "  --master-addr A      address of the node running rank 0 (default 127.0.0.1)\n"
      "  --master-port P      port on the master node (default 29500)\n"
      "  --standalone         one-node job: nnodes 1, node rank 0, master 127.0.0.1 on a free\n"
      "                       port, and a random TORCHELASTIC_RUN_ID (as torchrun)\n"
      "  --max-restarts N     after a failure, restart the whole group up to N times (default 0)\n"
      "  --tee N, -t N        prefix worker lines with \"[rankR]: \": 0 none (default),\n"
      "                       1 stdout, 2 stderr, 3 both\n"
      "  --prefix             same as --tee 3\n"
      "  --grace-period S     seconds between SIGTERM and SIGKILL when stopping workers\n"
      "                       (default 30, or $RR_GRACE_PERIOD; fractions allowed)\n"
      "  --rdzv-id ID         exported as TORCHELASTIC_RUN_ID (default \"none\")\n"
      "  --rdzv-*             other rendezvous flags are accepted and ignored\n"
      "  --no-python          accepted for torchrun compatibility; has no effect\n"
      "  -h, --help           show this help and exit\n"
      "  --version            show the version and exit\n"
      "\n"
      "Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
      "GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,\n"
      "TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,\n"
      "OMP_NUM_THREADS=1 (when unset and N > 1) and RR_JOB_TOKEN (see below).\n"
      "\n"
      "RR_JOB_TOKEN is the job's shared secret: the rendezvous store and the data connections\n"
      "refuse peers without it. Unless it is already set, a one-node job (--nnodes 1) gets a\n"
      "random one. The rrun of each node cannot invent a common one, so with --nnodes > 1 and\n"
      "RR_JOB_TOKEN unset the job runs without a token (unauthenticated: any process that\n"
      "reaches the master port can join) and rrun prints a warning saying so. To authenticate\n"
      "a multi-node job, export the same value on every node before starting rrun, e.g.\n"
      "  export RR_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n')\n"
      "\n"
      "When a worker exits non-zero or is killed by a signal, rrun sends SIGTERM to the other\n"
      "workers, SIGKILL to those still running after the grace period, and exits with that\n"
      "worker's exit code (128 + signal number if it was killed). SIGINT, SIGTERM, SIGHUP and\n"
      "SIGQUIT sent to rrun are forwarded to the workers; rrun then exits 128 + signal number.\n";
  if (write_all(STDOUT_FILENO, text, sizeof text - 1) != 0) exit(1);
}

/* Parses a decimal integer in [lo, hi]; false if s is not exactly that. */
static bool parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static int int_value(const char *flag, const char *value, long lo, long hi) {
  long v;
  if (!parse_long(value, lo, hi, &v)) {
    usage_error("%s: expected an integer from %ld to %ld, got '%s'", flag, lo, hi, value);
  }
  return (int)v;
}

/* Seconds, fractions allowed: "30", "0.5". */
static bool parse_seconds(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0 || v > RRUN_MAX_GRACE_S) {
    return false;
  }
  *out = v;
  return true;
}

/* --nnodes N or MIN:MAX; only a fixed size is supported (no elastic membership). */
static int nnodes_value(const char *flag, const char *value) {
  const char *colon = strchr(value, ':');
  if (!colon) return int_value(flag, value, 1, INT_MAX);
  char min[32];
  size_t n = (size_t)(colon - value);
  if (n >= sizeof min) usage_error("%s: malformed value '%s'", flag, value);
  memcpy(min, value, n);
  min[n] = '\0';
  long lo, hi;
  if (!parse_long(min, 1, INT_MAX, &lo) || !parse_long(colon + 1, 1, INT_MAX, &hi)) {
    usage_error("%s: expected N or MIN:MAX with positive integers, got '%s'", flag, value);
  }
  if (lo != hi) {
    usage_error("%s %s: elastic ranges are not supported; give a fixed number of nodes", flag,
                value);
  }
  return (int)lo;
}

static void apply_flag(options *o, const struct flag *f, const char *spelled, const char *value) {
  switch (f->id) {
    case F_NPROC: {
      long v;
      if (!parse_long(value, 1, RRUN_MAX_PROCS, &v)) {
        usage_error("%s: expected a positive integer, got '%s' (rrun does not count devices)",
                    spelled, value);
      }
      o->nproc = (int)v;
      break;
    }
    case F_NNODES:
      o->nnodes = nnodes_value(spelled, value);
      o->nnodes_set = true;
      break;
    case F_NODE_RANK:
      o->node_rank = int_value(spelled, value, 0, INT_MAX);
      o->node_rank_set = true;
      break;
    case F_MASTER_ADDR:
      if (value[0] == '\0') usage_error("%s: empty address", spelled);
      o->master_addr = value;
      o->addr_set = true;
      break;
    case F_MASTER_PORT:
      o->master_port = int_value(spelled, value, 1, 65535);
      o->port_set = true;
      break;
    case F_STANDALONE:
      o->standalone = true;
      break;
    case F_MAX_RESTARTS:
      o->max_restarts = int_value(spelled, value, 0, 1000000);
      break;
    case F_TEE:
      o->tee = int_value(spelled, value, 0, 3);
      break;
    case F_PREFIX:
      o->tee = 3;
      break;
    case F_GRACE:
      if (!parse_seconds(value, &o->grace_s)) {
        usage_error("%s: expected seconds (0 to %g), got '%s'", spelled, RRUN_MAX_GRACE_S, value);
      }
      break;
    case F_RDZV_ID:
      o->run_id = value;
      break;
    case F_RDZV_OTHER:
      say("warning: ignoring %s=%s: rrun uses a static rendezvous (--master-addr, "
          "--master-port)",
          spelled, value);
      break;
    case F_NO_PYTHON:
      break;
    case F_HELP:
      print_help();
      exit(0);
    case F_VERSION: {
      static const char text[] = "rrun (ringreduce) " RRUN_VERSION "\n";
      exit(write_all(STDOUT_FILENO, text, sizeof text - 1) == 0 ? 0 : 1);
    }
  }
}

/* Looks arg up; fills spelled (as typed, without "=value") and the '-' spelling in name. */
static const struct flag *find_flag(const char *arg, char *spelled, size_t size) {
  static const struct flag rdzv_other = {"--rdzv-*", F_RDZV_OTHER, true};
  size_t n = strcspn(arg, "=");
  if (n >= size) return NULL;
  memcpy(spelled, arg, n);
  spelled[n] = '\0';
  char name[64];
  memcpy(name, spelled, n + 1);
  /* torch accepts both spellings of every long flag (older torch only '_'). */
  if (strncmp(name, "--", 2) == 0) {
    for (char *p = name + 2; *p; p++) {
      if (*p == '_') *p = '-';
    }
  }
  for (size_t i = 0; i < sizeof kFlags / sizeof kFlags[0]; i++) {
    if (strcmp(kFlags[i].name, name) == 0) return &kFlags[i];
  }
  if (strncmp(name, "--rdzv-", 7) == 0 && name[7] != '\0') return &rdzv_other;
  return NULL;
}

static void parse_args(int argc, char **argv, options *o) {
  *o = (options){
      .nproc = 1, .nnodes = 1, .master_addr = "127.0.0.1", .master_port = 29500, .grace_s = 30};
  const char *env_grace = getenv("RR_GRACE_PERIOD");
  if (env_grace && env_grace[0] != '\0' && !parse_seconds(env_grace, &o->grace_s)) {
    usage_error("RR_GRACE_PERIOD: expected seconds (0 to %g), got '%s'", RRUN_MAX_GRACE_S,
                env_grace);
  }
  int i = 1;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) {
      i++;
      break;
    }
    if (arg[0] != '-' || arg[1] == '\0') break; /* the program */
    char spelled[64];
    const struct flag *f = find_flag(arg, spelled, sizeof spelled);
    if (!f) usage_error("unknown option '%s'", arg);
    const char *eq = strchr(arg, '=');
    const char *value = NULL;
    if (f->takes_value) {
      if (eq) {
        value = eq + 1;
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        usage_error("option '%s' needs a value", spelled);
      }
    } else if (eq) {
      usage_error("option '%s' takes no value", spelled);
    }
    apply_flag(o, f, spelled, value);
  }
  if (i >= argc) usage_error("no program to run");
  o->argv = argv + i;

  if (o->standalone) {
    if (o->nnodes_set && o->nnodes != 1) {
      usage_error("--standalone runs a single node; it cannot be used with --nnodes %d", o->nnodes);
    }
    if (o->node_rank_set && o->node_rank != 0) {
      usage_error("--standalone runs a single node; it cannot be used with --node-rank %d",
                  o->node_rank);
    }
    if (o->addr_set || o->port_set) {
      say("warning: --standalone picks 127.0.0.1 and a free port; ignoring --master-addr and "
          "--master-port");
    }
    o->master_addr = "127.0.0.1";
  }
  if (o->node_rank >= o->nnodes) {
    usage_error("--node-rank %d is out of range for --nnodes %d", o->node_rank, o->nnodes);
  }
  if ((long long)o->nnodes * o->nproc > INT_MAX) {
    usage_error("--nnodes %d times --nproc-per-node %d is too many workers", o->nnodes, o->nproc);
  }
}

/* ------------------------------------------------------------------------------------------
 * Launcher state.
 */

/* One worker stream that --tee prefixes: the read end of its pipe and the unfinished line. */
typedef struct {
  int fd;     /* -1 when not piped or closed */
  int target; /* STDOUT_FILENO or STDERR_FILENO */
  char *buf;  /* RRUN_LINE_MAX bytes */
  size_t len;
} stream;

typedef struct {
  int local_rank, rank;
  pid_t pid;      /* 0 until started */
  bool alive;     /* started and not reaped */
  bool signalled; /* rrun sent it a signal: its death is not a failure of its own */
  bool failed;    /* exited non-zero or was killed while nobody asked it to stop */
  int status;     /* wait status, once reaped */
  char prefix[RRUN_PREFIX_MAX];
  size_t prefix_len;
  stream out[2]; /* [0] stdout, [1] stderr */
} worker;

typedef struct {
  const options *opt;
  int sigfd;
  sigset_t orig_mask;         /* restored in workers */
  struct sigaction orig_pipe; /* SIGPIPE and SIGCHLD dispositions, restored in workers */
  struct sigaction orig_chld;
  worker *w; /* nproc entries */
  struct pollfd *pfd;
  struct {
    worker *w;
    stream *s;
  } * pwatch;     /* the worker stream behind pfd[i], i >= 1 */
  bool broken[3]; /* rrun's stdout/stderr failed (reader gone): drop prefixed output */
  char out[RRUN_LINE_MAX + RRUN_PREFIX_MAX];
  size_t out_len;
  /* Per attempt. */
  int restart;
  int live;
  bool stopping, killed;
  double deadline;
  int stop_sig;      /* what rrun sent when it began stopping the group */
  int first_failed;  /* index of the first failed worker, -1 if none */
  int signal_in;     /* first signal rrun received, 0 if none */
  bool launch_error; /* rrun itself could not start a worker */
} launcher;

static int count_alive(const launcher *L) {
  int n = 0;
  for (int i = 0; i < L->opt->nproc; i++) n += L->w[i].alive;
  return n;
}

/* ------------------------------------------------------------------------------------------
 * Prefixed output.
 */
static void flush_out(launcher *L, int target) {
  if (L->out_len > 0 && !L->broken[target] && write_all(target, L->out, L->out_len) != 0) {
    /* Typically EPIPE: whoever read our output went away. Workers that write directly would
     * get SIGPIPE; rrun drops the output but keeps supervising. */
    L->broken[target] = true;
    if (target != STDERR_FILENO) say("writing worker output: %s; dropping it", strerror(errno));
  }
  L->out_len = 0;
}

/* Queues "[rankR]: " + line + "\n"; a line is never split between two writes. */
static void emit_line(launcher *L, const worker *w, int target, const char *p, size_t n) {
  size_t need = w->prefix_len + n + 1;
  if (L->out_len + need > sizeof L->out) flush_out(L, target);
  memcpy(L->out + L->out_len, w->prefix, w->prefix_len);
  memcpy(L->out + L->out_len + w->prefix_len, p, n);
  L->out[L->out_len + need - 1] = '\n';
  L->out_len += need;
}

/* Emits every complete line in s; at EOF also the unfinished one, and when the buffer is full
 * without a newline, its content as one piece (a line longer than the buffer). */
static void emit_lines(launcher *L, const worker *w, stream *s, bool eof) {
  size_t start = 0;
  for (;;) {
    char *nl = memchr(s->buf + start, '\n', s->len - start);
    if (!nl) break;
    size_t end = (size_t)(nl - s->buf);
    emit_line(L, w, s->target, s->buf + start, end - start);
    start = end + 1;
  }
  size_t rest = s->len - start;
  if (rest > 0 && (eof || rest == RRUN_LINE_MAX)) {
    emit_line(L, w, s->target, s->buf + start, rest);
    start = s->len;
    rest = 0;
  }
  memmove(s->buf, s->buf + start, rest);
  s->len = rest;
  flush_out(L, s->target);
}

static void stream_close(stream *s) {
  if (s->fd >= 0 && close(s->fd) != 0) say("close: %s", strerror(errno));
  s->fd = -1;
  free(s->buf);
  s->buf = NULL;
  s->len = 0;
}

/* Reads what the worker wrote: one read (fair to the other workers) or, with drain, what the
 * pipe holds now. Not "until empty": a process the worker left behind could keep writing and
 * hold rrun here forever. EOF flushes the last partial line and closes the pipe. */
static void stream_read(launcher *L, const worker *w, stream *s, bool drain) {
  if (s->fd < 0) return;
  int avail = 0;
  if (drain && ioctl(s->fd, FIONREAD, &avail) != 0) {
    say("reading output of rank %d: ioctl(FIONREAD): %s", w->rank, strerror(errno));
    avail = 0;
  }
  size_t left = drain && avail > 0 ? (size_t)avail : 1;
  for (;;) {
    /* emit_lines leaves the buffer with room: a full buffer goes out as one piece. */
    ssize_t n = read(s->fd, s->buf + s->len, RRUN_LINE_MAX - s->len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n > 0) {
      s->len += (size_t)n;
      emit_lines(L, w, s, false);
      if ((size_t)n >= left) return;
      left -= (size_t)n;
      continue;
    }
    if (n < 0) say("reading output of rank %d: %s", w->rank, strerror(errno));
    emit_lines(L, w, s, true); /* EOF (or a broken pipe): the last, unfinished line */
    stream_close(s);
    return;
  }
}

/* ------------------------------------------------------------------------------------------
 * Starting workers.
 */
enum child_stage { STAGE_SETPGID, STAGE_PDEATHSIG, STAGE_DUP2, STAGE_SIGNALS, STAGE_EXEC };
static const char *const kStageNames[] = {"setpgid", "prctl(PR_SET_PDEATHSIG)", "dup2",
                                          "restoring signals", "exec"};

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

/* In the child after fork: own process group, die with rrun, wire the pipes, exec. */
static _Noreturn void child_main(const launcher *L, int pipes[2][2], int report_fd, pid_t parent) {
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
  execvp(L->opt->argv[0], L->opt->argv);
  child_fail(report_fd, STAGE_EXEC);
}

static int set_env(const char *name, const char *value) {
  if (setenv(name, value, 1) != 0) {
    say("setenv %s: %s", name, strerror(errno));
    return -1;
  }
  return 0;
}

static int set_env_int(const char *name, long value) {
  char buf[32];
  snprintf(buf, sizeof buf, "%ld", value);
  return set_env(name, buf);
}

static void close_fd(int *fd) {
  if (*fd >= 0 && close(*fd) != 0) say("close: %s", strerror(errno));
  *fd = -1;
}

enum spawn_result { SPAWN_OK, SPAWN_EXEC_FAILED, SPAWN_ERROR };

/* Makes the pipe for one prefixed stream: rrun keeps the read end, non-blocking. */
static int make_stream_pipe(stream *s, int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) {
    say("pipe: %s", strerror(errno));
    return -1;
  }
  s->fd = fds[0];
  s->buf = malloc(RRUN_LINE_MAX);
  if (!s->buf) {
    say("out of memory");
    return -1;
  }
  int flags = fcntl(s->fd, F_GETFL);
  if (flags < 0 || fcntl(s->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    say("fcntl: %s", strerror(errno));
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
  enum spawn_result result = SPAWN_ERROR;
  for (int s = 0; s < 2; s++) {
    if ((L->opt->tee & (1 << s)) && make_stream_pipe(&w->out[s], pipes[s]) != 0) goto out;
  }
  if (pipe2(report, O_CLOEXEC) != 0) {
    say("pipe: %s", strerror(errno));
    goto out;
  }
  if (set_env_int("RANK", w->rank) || set_env_int("LOCAL_RANK", w->local_rank) ||
      set_env_int("ROLE_RANK", w->rank)) {
    goto out;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    say("fork: %s", strerror(errno));
    goto out;
  }
  if (pid == 0) child_main(L, pipes, report[1], parent);
  w->pid = pid;
  w->alive = true;
  L->live++;
  close_fd(&report[1]);
  struct child_report r;
  ssize_t n = SYS(read(report[0], &r, sizeof r));
  if (n == (ssize_t)sizeof r) {
    const char *stage = r.stage >= 0 && r.stage <= STAGE_EXEC ? kStageNames[r.stage] : "?";
    if (r.stage == STAGE_EXEC) {
      say("cannot run '%s': %s", L->opt->argv[0], strerror(r.err));
    } else {
      say("cannot start rank %d: %s: %s", w->rank, stage, strerror(r.err));
    }
    result = SPAWN_EXEC_FAILED; /* the child exits 127: reaped as a failed worker */
  } else {
    if (n < 0) say("reading the start report of rank %d: %s", w->rank, strerror(errno));
    result = SPAWN_OK;
  }
out:
  for (int s = 0; s < 2; s++) close_fd(&pipes[s][1]);
  close_fd(&report[0]);
  close_fd(&report[1]);
  if (result == SPAWN_ERROR) {
    for (int s = 0; s < 2; s++) stream_close(&w->out[s]);
  }
  return result;
}

/* ------------------------------------------------------------------------------------------
 * Stopping workers.
 */

/* Signals the worker's process group, so processes it started get the signal too. */
static void signal_worker(worker *w, int sig) {
  w->signalled = true;
  if (kill(-w->pid, sig) == 0) return;
  /* ESRCH: the worker left its group (setsid, setpgid); fall back to the process itself. */
  if (errno == ESRCH && kill(w->pid, sig) == 0) return;
  if (errno != ESRCH) say("kill rank %d (pid %d): %s", w->rank, (int)w->pid, strerror(errno));
}

static int signal_workers(launcher *L, int sig) {
  int n = 0;
  for (int i = 0; i < L->opt->nproc; i++) {
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
  say("%d worker(s) still running %g s after %s; sending SIGKILL", n, L->opt->grace_s,
      sig_name(L->stop_sig));
  signal_workers(L, SIGKILL);
}

/* ------------------------------------------------------------------------------------------
 * Events.
 */
static worker *find_worker(launcher *L, pid_t pid) {
  for (int i = 0; i < L->opt->nproc; i++) {
    if (L->w[i].pid == pid && L->w[i].alive) return &L->w[i];
  }
  return NULL;
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
      if (errno != ECHILD) say("waitpid: %s", strerror(errno));
      break;
    }
    worker *w = find_worker(L, pid);
    if (!w) continue; /* rrun starts no other children */
    w->alive = false;
    w->status = status;
    L->live--;
    /* Its last lines come out before any message about it. */
    for (int s = 0; s < 2; s++) stream_read(L, w, &w->out[s], true);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || w->signalled) continue;
    w->failed = true;
    new_failure = true;
    if (L->first_failed < 0) L->first_failed = (int)(w - L->w);
    char how[96];
    describe_status(status, how, sizeof how);
    say("rank %d (local rank %d, pid %d) failed: %s", w->rank, w->local_rank, (int)pid, how);
  }
  if (new_failure && !L->stopping) {
    int n = count_alive(L);
    if (n > 0) {
      say("stopping %d other worker(s) (SIGTERM, then SIGKILL after %g s)", n, L->opt->grace_s);
    }
    stop_group(L, SIGTERM);
  }
}

static void forward_signal(launcher *L, int sig) {
  if (L->signal_in == 0) L->signal_in = sig;
  int n = count_alive(L);
  if (n == 0) {
    say("received %s", sig_name(sig));
  } else if (L->stopping) {
    say("received %s; forwarding it to %d worker(s)", sig_name(sig), n);
  } else {
    say("received %s; forwarding it to %d worker(s) (SIGKILL after %g s)", sig_name(sig), n,
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
      say("reading signals: %s", n < 0 ? strerror(errno) : "short read");
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
  for (int i = 0; i < L->opt->nproc; i++) {
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
  int ready = SYS(poll(L->pfd, n, timeout));
  if (ready < 0) {
    say("poll: %s", strerror(errno));
    abort(); /* only EFAULT/EINVAL/ENOMEM: a bug, and looping would spin */
  }
  for (nfds_t i = 1; i < n; i++) {
    if (L->pfd[i].revents != 0) stream_read(L, L->pwatch[i].w, L->pwatch[i].s, false);
  }
  if (L->pfd[0].revents) handle_signals(L);
  check_deadline(L);
}

/* ------------------------------------------------------------------------------------------
 * The job.
 */
static void print_summary(const launcher *L) {
  int failed = 0, stopped = 0;
  for (int i = 0; i < L->opt->nproc; i++) {
    failed += L->w[i].failed;
    stopped += L->w[i].signalled;
  }
  say("summary: %d of %d worker(s) failed, %d stopped by rrun", failed, L->opt->nproc, stopped);
  for (int i = 0; i < L->opt->nproc; i++) {
    const worker *w = &L->w[i];
    if (!w->failed) continue;
    char how[96];
    describe_status(w->status, how, sizeof how);
    say("  rank %d (local rank %d, pid %d): %s%s", w->rank, w->local_rank, (int)w->pid, how,
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
  for (int i = 0; i < o->nproc; i++) {
    worker *w = &L->w[i];
    *w = (worker){.local_rank = i, .rank = o->node_rank * o->nproc + i};
    w->prefix_len = (size_t)snprintf(w->prefix, sizeof w->prefix, "[rank%d]: ", w->rank);
    for (int s = 0; s < 2; s++) w->out[s] = (stream){.fd = -1, .target = s + 1};
  }
  if (set_env_int("TORCHELASTIC_RESTART_COUNT", L->restart) != 0) {
    L->launch_error = true;
    return;
  }
  for (int i = 0; i < o->nproc; i++) {
    enum spawn_result r = spawn_worker(L, &L->w[i]);
    if (r == SPAWN_OK) continue;
    if (r == SPAWN_ERROR) {
      L->launch_error = true;
      int n = count_alive(L);
      if (n > 0) {
        say("stopping the %d worker(s) already started (SIGTERM, then SIGKILL after %g s)", n,
            o->grace_s);
      }
      stop_group(L, SIGTERM);
    }
    break; /* after an exec failure the program will not start for the others either */
  }
  while (L->live > 0) poll_once(L);
  /* Whatever is still in the pipes; a pipe still open now is held by a process the worker
   * left behind, which rrun does not wait for. */
  for (int i = 0; i < o->nproc; i++) {
    for (int s = 0; s < 2; s++) {
      stream *st = &L->w[i].out[s];
      stream_read(L, &L->w[i], st, true);
      if (st->fd >= 0) emit_lines(L, &L->w[i], st, true);
      stream_close(st);
    }
  }
}

/* Runs the group until it succeeds, is stopped by a signal, or has used its restarts. */
static int run_job(launcher *L) {
  for (;;) {
    run_group(L);
    if (L->first_failed >= 0) print_summary(L);
    /* A signal that came after the last worker exited must not let a restart begin. */
    handle_signals(L);
    if (L->signal_in) return 128 + L->signal_in;
    if (L->launch_error) return EXIT_FAILURE;
    if (L->first_failed < 0) return 0;
    if (L->restart >= L->opt->max_restarts) return exit_code_of(L->w[L->first_failed].status);
    L->restart++;
    say("restarting the worker group (restart %d of %d)", L->restart, L->opt->max_restarts);
  }
}

/* ------------------------------------------------------------------------------------------
 * Setup.
 */

/* With 0, 1 or 2 closed, a pipe could land there and be clobbered by a worker's dup2. */
static int ensure_std_fds(void) {
  for (int fd = 0; fd < 3; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    int nfd = open("/dev/null", O_RDWR);
    if (nfd < 0) return -1;
    if (nfd != fd) { /* cannot happen: open returns the lowest free fd */
      if (close(nfd) != 0) return -1;
      errno = EBADF;
      return -1;
    }
  }
  return 0;
}

/* Blocks SIGCHLD and the forwarded signals and opens the signalfd that delivers them. A signal
 * rrun inherited as ignored (nohup, '&' in a script) stays ignored: on Linux a blocked signal
 * is queued even when ignored, so it is left out of the set rather than blocked. */
static int setup_signals(launcher *L) {
  static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  sigset_t set;
  if (sigemptyset(&set) != 0 || sigaddset(&set, SIGCHLD) != 0) return -1;
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) {
    struct sigaction old;
    if (sigaction(forwarded[i], NULL, &old) != 0) return -1;
    if (old.sa_handler != SIG_IGN && sigaddset(&set, forwarded[i]) != 0) return -1;
  }
  /* SIGCHLD ignored would make the kernel reap workers before rrun sees their status. */
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  if (sigaction(SIGCHLD, &dfl, &L->orig_chld) != 0) return -1;
  /* A reader of rrun's output going away is reported by write(), not a fatal signal. */
  struct sigaction ign = {.sa_handler = SIG_IGN};
  if (sigaction(SIGPIPE, &ign, &L->orig_pipe) != 0) return -1;
  if (sigprocmask(SIG_BLOCK, &set, &L->orig_mask) != 0) return -1;
  L->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  return L->sigfd < 0 ? -1 : 0;
}

static int random_bytes(unsigned char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(buf + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

/* A free port, as torchrun's standalone mode finds one: bind port 0 on loopback and read back
 * what the kernel chose. The port is released again, for rank 0 to bind. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof addr;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
      getsockname(fd, (struct sockaddr *)&addr, &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  int saved = errno;
  if (close(fd) != 0) return -1;
  errno = saved;
  return port;
}

/* The environment every worker shares, set once in rrun's own environment. */
static int setup_env(launcher *L) {
  const options *o = L->opt;
  char uuid[40];
  const char *run_id = o->run_id ? o->run_id : "none";
  if (o->standalone) {
    /* torchrun --standalone makes its run id a random UUID (version 4). */
    unsigned char u[16];
    if (random_bytes(u, sizeof u) != 0) {
      say("getrandom: %s", strerror(errno));
      return -1;
    }
    u[6] = (unsigned char)((u[6] & 0x0f) | 0x40);
    u[8] = (unsigned char)((u[8] & 0x3f) | 0x80);
    snprintf(uuid, sizeof uuid,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    if (o->run_id) say("warning: --standalone picks a random run id; ignoring --rdzv-id");
    run_id = uuid;
  }
  int port = o->master_port;
  if (o->standalone && (port = free_port()) < 0) {
    say("finding a free port on 127.0.0.1: %s", strerror(errno));
    return -1;
  }
  int world = o->nnodes * o->nproc;
  if (set_env_int("WORLD_SIZE", world) || set_env_int("LOCAL_WORLD_SIZE", o->nproc) ||
      set_env_int("GROUP_RANK", o->node_rank) || set_env_int("GROUP_WORLD_SIZE", o->nnodes) ||
      set_env_int("ROLE_WORLD_SIZE", world) || set_env("MASTER_ADDR", o->master_addr) ||
      set_env_int("MASTER_PORT", port) || set_env("TORCHELASTIC_RUN_ID", run_id) ||
      set_env_int("TORCHELASTIC_MAX_RESTARTS", o->max_restarts)) {
    return -1;
  }
  if (!getenv("OMP_NUM_THREADS") && o->nproc > 1) {
    say("warning: Setting OMP_NUM_THREADS environment variable for each process to be 1 in "
        "default, to avoid your system being overloaded, please further tune the variable "
        "for optimal performance in your application as needed.");
    if (set_env("OMP_NUM_THREADS", "1")) return -1;
  }
  if (!getenv("RR_JOB_TOKEN") && o->nnodes > 1) {
    /* Each node's rrun would make a different token and the nodes could never meet, so a
     * multi-node job without an exported token runs without one (the library then accepts
     * any well-formed peer). */
    say("warning: RR_JOB_TOKEN is not set, so this %d-node job runs unauthenticated (any "
        "process that reaches %s:%d can join it); export the same RR_JOB_TOKEN on every node "
        "to enable the job token (see 'rrun --help')",
        o->nnodes, o->master_addr, port);
  } else if (!getenv("RR_JOB_TOKEN")) {
    /* One secret per launch: workers of another job cannot join this one by mistake. */
    unsigned char b[16];
    char hex[2 * sizeof b + 1];
    if (random_bytes(b, sizeof b) != 0) {
      say("getrandom: %s", strerror(errno));
      return -1;
    }
    for (size_t i = 0; i < sizeof b; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
    if (set_env("RR_JOB_TOKEN", hex)) return -1;
  }
  return 0;
}

static int setup(launcher *L, const options *o) {
  L->opt = o;
  L->sigfd = -1;
  if (ensure_std_fds() != 0) {
    say("opening /dev/null for a closed standard stream: %s", strerror(errno));
    return -1;
  }
  if (setup_signals(L) != 0) {
    say("setting up signals: %s", strerror(errno));
    return -1;
  }
  L->w = calloc((size_t)o->nproc, sizeof *L->w);
  L->pfd = calloc(2 * (size_t)o->nproc + 1, sizeof *L->pfd);
  L->pwatch = calloc(2 * (size_t)o->nproc + 1, sizeof *L->pwatch);
  if (!L->w || !L->pfd || !L->pwatch) {
    say("out of memory for %d workers", o->nproc);
    return -1;
  }
  return setup_env(L);
}

static void teardown(launcher *L) {
  if (L->sigfd >= 0 && close(L->sigfd) != 0) say("close: %s", strerror(errno));
  free(L->w);
  free(L->pfd);
  free(L->pwatch);
}

int main(int argc, char **argv) {
  options opt;
  parse_args(argc, argv, &opt);
  static launcher L; /* large (the output buffer): keep it off the stack */
  int rc = setup(&L, &opt) == 0 ? run_job(&L) : EXIT_FAILURE;
  teardown(&L);
  return rc;
}
