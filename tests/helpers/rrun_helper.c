/*
 * rrun_helper — a scriptable worker for tests/test_rrun.sh.
 *
 *   rrun_helper DIR [SPEC=ACTION ...]
 *
 * SPEC is a global rank or '*' (every rank without its own entry); the default is exit:0.
 * Actions:
 *   exit:C[:MS]      wait until every rank of this node is ready (has written its pid file),
 *                    sleep MS milliseconds, then exit with code C
 *   failfirst:C      exit C on the first attempt (TORCHELASTIC_RESTART_COUNT 0), else exit 0
 *   sleep            sleep until a signal arrives
 *   ignoreterm       like sleep, but survive SIGTERM (only SIGKILL ends it)
 *   raise:SIG[:MS]   as exit, but kill itself with signal number SIG
 *   out:N            write N lines to stdout and to stderr, each in small pieces, then a
 *                    200000-byte line of 'L' to stdout, then an unterminated last line on both
 *   bind:MS          bind and listen on MASTER_ADDR:MASTER_PORT, hold it MS ms, then exit 0
 *
 * Files it writes, with R its RANK and A its TORCHELASTIC_RESTART_COUNT:
 *   DIR/env.R.A   the launcher variables, NAME=value (or NAME unset), in a fixed order
 *   DIR/pid.R.A   its pid, written once its signal handlers are installed ("ready")
 *   DIR/sig.R.A   the number of a SIGTERM/SIGINT/SIGHUP/SIGQUIT it received
 *   DIR/port.R.A  the port it bound (bind action)
 * A received signal is recorded, then (except SIGTERM under ignoreterm) takes its default
 * action, so the launcher sees a death by that signal as with an ordinary program.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static char g_sig_path[4096];
static int g_ignore_term;

static void die(const char *what) {
  fprintf(stderr, "rrun_helper: %s: %s\n", what, strerror(errno));
  exit(100);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
    if (errno != EINTR) die("nanosleep");
  }
}

/* Only async-signal-safe calls here. */
static void on_signal(int sig) {
  int saved = errno;
  int fd = open(g_sig_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    char buf[4] = {(char)('0' + sig / 10), (char)('0' + sig % 10), '\n'};
    int skip = sig < 10; /* "2\n", not "02\n" */
    ssize_t n = write(fd, buf + skip, 3 - (size_t)skip);
    (void)n;
    close(fd);
  }
  if (sig == SIGTERM && g_ignore_term) {
    errno = saved;
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Waits (up to 10 s) until every worker of this node has installed its signal handlers, so a
 * test that fails one worker knows the others will record the SIGTERM that follows. */
static void wait_all_ready(const char *dir, int rank, int restart) {
  const char *lr = getenv("LOCAL_RANK"), *lws = getenv("LOCAL_WORLD_SIZE");
  int first = rank - (lr ? atoi(lr) : 0), n = lws ? atoi(lws) : 1;
  for (int r = first; r < first + n; r++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/pid.%d.%d", dir, r, restart);
    for (int tries = 0; access(path, F_OK) != 0 && tries < 1000; tries++) sleep_ms(10);
  }
}

static void write_file(const char *path, const char *text) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) die(tmp);
  if (fputs(text, f) < 0 || fclose(f) != 0) die(tmp);
  if (rename(tmp, path) != 0) die(path); /* readers never see half a file */
}

static void dump_env(const char *path) {
  static const char *const names[] = {"RANK",
                                      "LOCAL_RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_WORLD_SIZE",
                                      "GROUP_RANK",
                                      "ROLE_RANK",
                                      "GROUP_WORLD_SIZE",
                                      "ROLE_WORLD_SIZE",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "TORCHELASTIC_RUN_ID",
                                      "TORCHELASTIC_RESTART_COUNT",
                                      "TORCHELASTIC_MAX_RESTARTS",
                                      "OMP_NUM_THREADS",
                                      "RR_JOB_TOKEN"};
  char text[8192];
  size_t len = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *v = getenv(names[i]);
    len += (size_t)snprintf(text + len, sizeof text - len, v ? "%s=%s\n" : "%s unset\n", names[i],
                            v ? v : "");
  }
  write_file(path, text);
}

/* Writes s in three pieces with pauses, so a launcher that passed raw chunks through would
 * interleave lines of different ranks. */
static void write_pieces(int fd, const char *s) {
  size_t len = strlen(s), third = len / 3;
  size_t cuts[4] = {0, third, 2 * third, len};
  for (int i = 0; i < 3; i++) {
    const char *p = s + cuts[i];
    size_t n = cuts[i + 1] - cuts[i];
    while (n > 0) {
      ssize_t w = write(fd, p, n);
      if (w < 0) die("write");
      p += w;
      n -= (size_t)w;
    }
    usleep(50);
  }
}

static void do_out(int rank, int lines) {
  char line[256];
  for (int i = 0; i < lines; i++) {
    snprintf(line, sizeof line, "rank %d out line %d abcdefghijklmnopqrstuvwxyz\n", rank, i);
    write_pieces(STDOUT_FILENO, line);
    snprintf(line, sizeof line, "rank %d err line %d ABCDEFGHIJKLMNOPQRSTUVWXYZ\n", rank, i);
    write_pieces(STDERR_FILENO, line);
  }
  size_t big = 200000;
  char *l = malloc(big + 2);
  if (!l) die("malloc");
  memset(l, 'L', big);
  l[big] = '\n';
  l[big + 1] = '\0';
  write_pieces(STDOUT_FILENO, l);
  free(l);
  snprintf(line, sizeof line, "rank %d out partial", rank);
  write_pieces(STDOUT_FILENO, line);
  snprintf(line, sizeof line, "rank %d err partial", rank);
  write_pieces(STDERR_FILENO, line);
}

static void do_bind(const char *path, long ms) {
  const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  if (!addr || !port) die("MASTER_ADDR/MASTER_PORT unset");
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) die("inet_pton");
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) die("bind MASTER_PORT");
  if (listen(fd, 1) != 0) die("listen");
  char text[32];
  snprintf(text, sizeof text, "%s\n", port);
  write_file(path, text);
  sleep_ms(ms);
  close(fd);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: rrun_helper DIR [SPEC=ACTION ...]\n");
    return 100;
  }
  const char *dir = argv[1];
  const char *rank_s = getenv("RANK"), *restart_s = getenv("TORCHELASTIC_RESTART_COUNT");
  int rank = rank_s ? atoi(rank_s) : -1, restart = restart_s ? atoi(restart_s) : 0;
  const char *action = "exit:0";
  for (int i = 2; i < argc; i++) {
    if (strncmp(argv[i], "*=", 2) == 0) action = argv[i] + 2;
  }
  for (int i = 2; i < argc; i++) { /* a rank's own entry wins over '*' */
    char *eq = strchr(argv[i], '=');
    if (eq && argv[i][0] != '*' && atoi(argv[i]) == rank) action = eq + 1;
  }

  char path[4096];
  snprintf(path, sizeof path, "%s/env.%d.%d", dir, rank, restart);
  dump_env(path);
  snprintf(g_sig_path, sizeof g_sig_path, "%s/sig.%d.%d", dir, rank, restart);
  g_ignore_term = strcmp(action, "ignoreterm") == 0;
  static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction sa = {.sa_handler = on_signal};
    if (sigaction(sigs[i], &sa, NULL) != 0) die("sigaction");
  }
  char pid[32];
  snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  snprintf(path, sizeof path, "%s/pid.%d.%d", dir, rank, restart);
  write_file(path, pid);

  int a = 0, b = 0;
  if (sscanf(action, "exit:%d:%d", &a, &b) >= 1) {
    wait_all_ready(dir, rank, restart);
    sleep_ms(b);
    return a;
  }
  if (sscanf(action, "failfirst:%d", &a) == 1) return restart == 0 ? a : 0;
  if (sscanf(action, "raise:%d:%d", &a, &b) >= 1) {
    wait_all_ready(dir, rank, restart);
    sleep_ms(b);
    signal(a, SIG_DFL);
    raise(a);
    return 101; /* not reached for a fatal signal */
  }
  if (sscanf(action, "out:%d", &a) == 1) {
    do_out(rank, a);
    return 0;
  }
  if (sscanf(action, "bind:%d", &a) == 1) {
    snprintf(path, sizeof path, "%s/port.%d.%d", dir, rank, restart);
    do_bind(path, a);
    return 0;
  }
  if (strcmp(action, "sleep") == 0 || strcmp(action, "ignoreterm") == 0) {
    for (;;) pause();
  }
  fprintf(stderr, "rrun_helper: unknown action '%s'\n", action);
  return 100;
}
