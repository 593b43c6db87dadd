/* rrun's command line, spelled as torchrun's: every long flag in both its '-' and '_' forms,
 * "--flag value" or "--flag=value". All of it is checked before anything starts, so a typo
 * costs a message and exit code 2 rather than a half-launched job.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rrun.h"

#ifndef RRUN_VERSION
#define RRUN_VERSION "unknown"
#endif

/* Bounds that keep the arithmetic (ranks, poll timeouts in ms) far from overflow. */
#define RRUN_MAX_PROCS (1 << 20)
#define RRUN_MAX_GRACE_S 1e6

__attribute__((format(printf, 1, 2), noreturn)) static void usage_error(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rr__say("%s (see 'rrun --help')", msg);
  exit(EXIT_USAGE);
}

enum flag_id {
  F_NPROC,
  F_NNODES,
  F_NODE_RANK,
  F_MASTER_ADDR,
  F_MASTER_PORT,
  F_STANDALONE,
  F_MAX_RESTARTS,
  F_KEEP_GOING,
  F_BIND_TO,
  F_REPLACE,
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
    {"--keep-going", F_KEEP_GOING, false},
    {"--replace", F_REPLACE, true},
    {"--bind-to", F_BIND_TO, true},
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
      "  --keep-going         a worker that dies does not stop the others (for programs that\n"
      "                       survive it: rr_pg_shrink); see the exit status below\n"
      "  --replace N          with --keep-going: for each worker that dies, start a replacement\n"
      "                       (up to N in all) with RR_GROW_JOIN=1, which joins the running\n"
      "                       group (rr_pg_join); sets RR_GROW_ADDR when unset (one node).\n"
      "                       One that died before it joined the rendezvous is replaced in\n"
      "                       its place instead (same RANK, RR_RANK_GENERATION=1, ...)\n"
      "  --bind-to WHAT       where workers run, among the C CPUs rrun may run on (default\n"
      "                       slice, or $RR_BIND_TO): slice: each of the n workers of this\n"
      "                       node its own share (whole cores while n <= cores, one CPU each\n"
      "                       up to n = C, CPU k mod C when C divides n, else unbound); core:\n"
      "                       local rank k the (k mod C)-th CPU alone; none: wherever the\n"
      "                       kernel puts them. Bound workers get RR_HOST_CPUS=C. Why:\n"
      "                       docs/performance.md, section 10\n"
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
      "SIGQUIT sent to rrun are forwarded to the workers; rrun then exits 128 + signal number.\n"
      "\n"
      "With --keep-going a failed worker is reported (rank, pid, exit code or signal) and the\n"
      "others keep running. rrun then exits 0 when at least one worker exited 0 and every\n"
      "other one either exited 0 or was killed by a signal rrun did not send (a death the job\n"
      "survived); otherwise with the exit code of the lowest rank that exited non-zero, then\n"
      "128 + the signal of the lowest rank that crashed (SIGSEGV, SIGBUS, SIGABRT, ...: never\n"
      "a death survived), or, when none did, 128 + the signal of the first worker killed. A\n"
      "worker that cannot be started stops the others. --max-restarts then restarts the\n"
      "whole group only when that status is not 0. With --replace a replacement that exits 0\n"
      "counts as a worker that exited 0, and a failed one as a failure.\n"
      "\n"
      "With --keep-going rrun also tells the job's rendezvous store (the library's, at\n"
      "MASTER_ADDR:MASTER_PORT, proving RR_JOB_TOKEN) that a worker died, so that ranks still\n"
      "waiting for it in the rendezvous fail at once naming it instead of at RR_TIMEOUT; for a\n"
      "dead rank 0, whose store died with it, rrun answers at that address in its place.\n"
      "See docs/elastic.md, \"A death before the group is formed\".\n";
  if (rr__write_all(STDOUT_FILENO, text, sizeof text - 1) != 0) exit(1);
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

static int bind_value(const char *flag, const char *value) {
  if (strcmp(value, "slice") == 0) return RRUN_BIND_SLICE;
  if (strcmp(value, "core") == 0) return RRUN_BIND_CORE;
  if (strcmp(value, "none") == 0) return RRUN_BIND_NONE;
  usage_error("%s: expected 'slice', 'core' or 'none', got '%s'", flag, value);
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
    case F_KEEP_GOING:
      o->keep_going = true;
      break;
    case F_REPLACE:
      o->replace = int_value(spelled, value, 0, 1000000);
      break;
    case F_BIND_TO:
      o->bind = bind_value(spelled, value);
      o->bind_asked = true;
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
      rr__say(
          "warning: ignoring %s=%s: rrun uses a static rendezvous (--master-addr, "
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
      exit(rr__write_all(STDOUT_FILENO, text, sizeof text - 1) == 0 ? 0 : 1);
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

void rr__parse_args(int argc, char **argv, options *o) {
  *o = (options){.nproc = 1,
                 .nnodes = 1,
                 .master_addr = "127.0.0.1",
                 .master_port = RRUN_DEFAULT_PORT,
                 .grace_s = 30};
  o->bind = RRUN_BIND_SLICE;
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
  /* After the flags: --help and --version do not read it, and --bind-to overrides it. */
  const char *env_bind = getenv("RR_BIND_TO");
  if (!o->bind_asked && env_bind && *env_bind) {
    o->bind = bind_value("RR_BIND_TO", env_bind);
    o->bind_asked = true;
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
      rr__say(
          "warning: --standalone picks 127.0.0.1 and a free port; ignoring --master-addr and "
          "--master-port");
    }
    o->master_addr = "127.0.0.1";
  }
  if (o->node_rank >= o->nnodes) {
    usage_error("--node-rank %d is out of range for --nnodes %d", o->node_rank, o->nnodes);
  }
  if (o->replace > 0 && !o->keep_going)
    usage_error("--replace needs --keep-going (without it the first death stops the job)");
  if (o->replace > 0 && o->nnodes > 1 && !getenv("RR_GROW_ADDR"))
    usage_error(
        "--replace across %d nodes needs RR_GROW_ADDR exported (host:port where the "
        "group's rank 0 serves growths)",
        o->nnodes);
  if ((long long)o->nnodes * o->nproc > INT_MAX) {
    usage_error("--nnodes %d times --nproc-per-node %d is too many workers", o->nnodes, o->nproc);
  }
}
