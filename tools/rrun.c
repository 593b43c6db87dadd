/*
 * rrun — the job launcher, torchrun's equivalent: start --nproc-per-node copies of a program
 * with the torch.distributed environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), watch them, and
 * tear the whole group down as soon as one of them fails.
 *
 * Design. One thread and one poll() loop. The signals rrun cares about (SIGCHLD and the four it
 * forwards) stay blocked and are read from a signalfd, so nothing runs in a signal handler and
 * no SIGCHLD can slip between a check and a wait. rrun does not link libringreduce: it only
 * manages processes, so it keeps working whatever state the library is in (the one thing it
 * says to the job, a worker's death, it says in the store's wire protocol itself).
 *
 * This file readies the process (standard descriptors, signals, the environment every worker
 * shares) and hands it to the job loop. The command line is read in rrun_flags.c; workers are
 * started, watched, stopped and restarted in rrun_workers.c; rrun's messages and the --tee
 * prefixing of worker output live in rrun_output.c; under --keep-going, rrun_notice.c tells
 * the job's rendezvous about deaths; rrun.h has what they share.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>

#include "rrun.h"

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

/* The kernel's ephemeral range (net.ipv4.ip_local_port_range); the default when it cannot
 * be read. */
static void ephemeral_range(int *lo, int *hi) {
  *lo = 32768, *hi = 60999;
  FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (!f) return;
  int a, b;
  if (fscanf(f, "%d %d", &a, &b) == 2 && a > 0 && b >= a && b < 65536) *lo = a, *hi = b;
  fclose(f);
}

static int port_bindable(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in addr = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
  int ok = bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
  int saved = errno;
  if (close(fd) != 0) return -1;
  errno = saved;
  return ok;
}

/* A free port for --standalone. Rank 0 binds it only after rrun has let it go, so the port
 * must stay free meanwhile. torchrun asks the kernel for port 0, which comes from the
 * ephemeral range; so does the local port of every outgoing connection on the machine, and
 * one of them can take it in that moment (seen in this project's tests, which launch many
 * jobs at once: "Address already in use" on rank 0's store). So: a random port below the
 * ephemeral range (only another explicit bind can take those), probed by binding it on every
 * address as rank 0 will; the kernel's choice only when no such range is left. Never the
 * default port: a job started later without --standalone would find it taken. */
static int free_port(void) {
  int lo, hi;
  ephemeral_range(&lo, &hi);
  int base = lo > 16384 ? lo / 2 : 1024, span = lo - base;
  for (int i = 0; span > 0 && i < 256; i++) {
    uint32_t r;
    if (random_bytes((unsigned char *)&r, sizeof r) != 0) return -1;
    int port = base + (int)(r % (uint32_t)span);
    if (port == RRUN_DEFAULT_PORT) continue;
    int ok = port_bindable(port);
    if (ok < 0) return -1;
    if (ok) return port;
  }
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
      rr__say("getrandom: %s", strerror(errno));
      return -1;
    }
    u[6] = (unsigned char)((u[6] & 0x0f) | 0x40);
    u[8] = (unsigned char)((u[8] & 0x3f) | 0x80);
    snprintf(uuid, sizeof uuid,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15]);
    if (o->run_id) rr__say("warning: --standalone picks a random run id; ignoring --rdzv-id");
    run_id = uuid;
  }
  int port = o->master_port;
  if (o->standalone && (port = free_port()) < 0) {
    rr__say("finding a free port on 127.0.0.1: %s", strerror(errno));
    return -1;
  }
  int world = o->nnodes * o->nproc;
  if (rr__set_env_int("WORLD_SIZE", world) || rr__set_env_int("LOCAL_WORLD_SIZE", o->nproc) ||
      rr__set_env_int("GROUP_RANK", o->node_rank) ||
      rr__set_env_int("GROUP_WORLD_SIZE", o->nnodes) || rr__set_env_int("ROLE_WORLD_SIZE", world) ||
      rr__set_env("MASTER_ADDR", o->master_addr) || rr__set_env_int("MASTER_PORT", port) ||
      rr__set_env("TORCHELASTIC_RUN_ID", run_id) ||
      rr__set_env_int("TORCHELASTIC_MAX_RESTARTS", o->max_restarts)) {
    return -1;
  }
  /* --replace: the replacement joins at the address where the group's rank 0 serves
   * growths (rr_pg_grow). On one node rrun picks it; across nodes only the job knows where
   * its rank 0 will be, so it must be exported (checked in rrun_flags.c). */
  if (o->replace > 0 && !getenv("RR_GROW_ADDR")) {
    int gp = free_port();
    char ga[32];
    if (gp < 0) {
      rr__say("finding a free port for RR_GROW_ADDR: %s", strerror(errno));
      return -1;
    }
    snprintf(ga, sizeof ga, "127.0.0.1:%d", gp);
    if (rr__set_env("RR_GROW_ADDR", ga)) return -1;
  }
  if (!getenv("OMP_NUM_THREADS") && o->nproc > 1) {
    rr__say(
        "warning: OMP_NUM_THREADS is unset, so every worker gets OMP_NUM_THREADS=1, as "
        "under torchrun: %d processes each starting one thread per core could oversubscribe "
        "this machine. Export OMP_NUM_THREADS to choose another value (under --bind-to "
        "slice, the default, each worker runs on its own share of the CPUs).",
        o->nproc);
    if (rr__set_env("OMP_NUM_THREADS", "1")) return -1;
  }
  if (!getenv("RR_JOB_TOKEN") && o->nnodes > 1) {
    /* Each node's rrun would make a different token and the nodes could never meet, so a
     * multi-node job without an exported token runs without one (the library then accepts
     * any well-formed peer). */
    rr__say(
        "warning: RR_JOB_TOKEN is not set, so this %d-node job runs unauthenticated (any "
        "process that reaches %s:%d can join it); export the same RR_JOB_TOKEN on every node "
        "to enable the job token (see 'rrun --help')",
        o->nnodes, o->master_addr, port);
  } else if (!getenv("RR_JOB_TOKEN")) {
    /* One secret per launch: workers of another job cannot join this one by mistake. */
    unsigned char b[16];
    char hex[2 * sizeof b + 1];
    if (random_bytes(b, sizeof b) != 0) {
      rr__say("getrandom: %s", strerror(errno));
      return -1;
    }
    for (size_t i = 0; i < sizeof b; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
    if (rr__set_env("RR_JOB_TOKEN", hex)) return -1;
  }
  return 0;
}

static int setup(launcher *L, const options *o) {
  L->opt = o;
  L->sigfd = -1;
  if (ensure_std_fds() != 0) {
    rr__say("opening /dev/null for a closed standard stream: %s", strerror(errno));
    return -1;
  }
  if (setup_signals(L) != 0) {
    rr__say("setting up signals: %s", strerror(errno));
    return -1;
  }
  rr__output_init(L->sigfd);
  size_t slots = (size_t)o->nproc + (size_t)o->replace;
  L->w = calloc(slots, sizeof *L->w);
  L->pfd = calloc(2 * slots + 1, sizeof *L->pfd);
  L->pwatch = calloc(2 * slots + 1, sizeof *L->pwatch);
  if (!L->w || !L->pfd || !L->pwatch) {
    rr__say("out of memory for %d workers", o->nproc);
    return -1;
  }
  if (setup_env(L) != 0) return -1;
  /* Deaths are told to the rendezvous only where the others run on (rrun_notice.c): without
   * --keep-going the first death stops the whole group. */
  if (o->keep_going) rr__notice_setup(L);
  return 0;
}

static void teardown(launcher *L) {
  if (L->sigfd >= 0 && close(L->sigfd) != 0) rr__say("close: %s", strerror(errno));
  free(L->w);
  free(L->pfd);
  free(L->pwatch);
  free(L->nt.pending);
  free(L->nt.give_up_at);
}

int main(int argc, char **argv) {
  options opt;
  rr__parse_args(argc, argv, &opt);
  static launcher L; /* large (the output buffer): keep it off the stack */
  int rc = setup(&L, &opt) == 0 ? rr__run_job(&L) : EXIT_FAILURE;
  teardown(&L);
  return rc;
}
