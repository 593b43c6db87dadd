/* Init methods: tcp:// and file:// URLs, rank and world size from rr_pg_options over the
 * environment, the Slurm and Open MPI fallbacks, an IPv6 master, RR_DEBUG_FILE with %h and
 * %p, links and FIFOs planted at the log and trace paths, and timeout_ms in the options.
 * Each rank is a process of t_run with its own environment; each checks its rank, the
 * group's size and a collective's exact result.
 *
 *   test_init
 * <tcp|file|options|slurm|ompi|slurm_lists|ipv6|debug_file|debug_link|debug_fifo|trace_fifo|file_perms|timeout_opt|store_callbacks>
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rendezvous/init_method.h"
#include "tests/harness.h"

typedef struct iarg {
  int world;
  int port;       /* for tcp:// */
  char path[256]; /* for file:// */
  char tag[96];   /* per-run prefix of files under /tmp */
  int phase;
} iarg;

/* The group has the expected shape and works: an all-gather of ranks and an exact
 * all-reduce of random int64 data. */
static int check_group(rr_pg *pg, int rank, int world, uint64_t seed) {
  T_CHECK(rr_get_rank(pg) == rank, "rr_get_rank = %d, want %d", rr_get_rank(pg), rank);
  T_CHECK(rr_get_world_size(pg) == world, "rr_get_world_size = %d, want %d", rr_get_world_size(pg),
          world);
  int32_t me = rank * 1000 + 7, all[64];
  T_CHECK(world <= 64, "world too big");
  memset(all, 0xa5, sizeof all);
  T_OK(rr_all_gather(pg, &me, all, 1, RR_INT32));
  for (int q = 0; q < world; q++)
    T_CHECK(all[q] == q * 1000 + 7, "all_gather block %d is %d", q, all[q]);
  int64_t x[257];
  t_fill(x, 257, RR_INT64, RR_SUM, seed, rank, 0);
  T_OK(rr_all_reduce(pg, x, x, 257, RR_INT64, RR_SUM));
  size_t wrong = t_check_reduced(x, 257, RR_INT64, RR_SUM, seed, world, 0, "all_reduce");
  T_CHECK(!wrong, "all_reduce: %zu wrong", wrong);
  return 0;
}

/* Whole file into a malloc'd string (NULL if it cannot be read). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += r;
    if (cap - len < 2) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (buf) buf[len] = '\0';
  return buf;
}

static void clear_rank_env(void) {
  static const char *const vars[] = {"RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_RANK",
                                     "LOCAL_WORLD_SIZE",
                                     "SLURM_PROCID",
                                     "SLURM_NTASKS",
                                     "SLURM_LOCALID",
                                     "SLURM_NTASKS_PER_NODE",
                                     "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "OMPI_COMM_WORLD_LOCAL_SIZE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

static void set_int_env(const char *name, int v) {
  char s[32];
  snprintf(s, sizeof s, "%d", v);
  setenv(name, s, 1);
}

/* Log to a per-rank file of this run; returns its path in buf. */
static const char *log_to_file(const iarg *a, int rank, char *buf, size_t n) {
  snprintf(buf, n, "/tmp/%s-rank%d.log", a->tag, rank);
  unlink(buf);
  setenv("RR_DEBUG", "INFO", 1);
  setenv("RR_DEBUG_FILE", buf, 1);
  return buf;
}

static int log_has(const char *path, const char *needle) {
  char *s = slurp(path);
  T_CHECK(s != NULL, "cannot read the log %s", path);
  int ok = strstr(s, needle) != NULL;
  if (!ok) fprintf(stderr, "rank %d: log %s lacks '%s'; it holds:\n%s\n", t_rank, path, needle, s);
  free(s);
  return ok ? 0 : 1;
}

/* ---- tcp:// ---- */
static int tcp_rank(int rank, void *p) {
  iarg *a = p;
  clear_rank_env();
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  char url[256];
  rr_pg_options opt;
  rr_pg_options_init(&opt);
  rr_pg *pg = (rr_pg *)1;
  /* Refused before anything is sent: a missing rank, an unknown parameter, a bad port. */
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d?world_size=%d", a->port, a->world);
  opt.init_method = url;
  int st = rr_init_process_group(&pg, &opt);
  T_CHECK(st == RR_EINVAL && pg == NULL, "URL without rank: %s", rr_status_name(st));
  T_HAS(rr_last_error(), "rank");
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d?rank=%d&world_size=%d&wrld=2", a->port, rank,
           a->world);
  st = rr_init_process_group(&pg, &opt);
  T_CHECK(st == RR_EINVAL, "URL with a typo: %s", rr_status_name(st));
  T_HAS(rr_last_error(), "wrld");
  snprintf(url, sizeof url, "tcp://127.0.0.1:99999?rank=%d&world_size=%d", rank, a->world);
  st = rr_init_process_group(&pg, &opt);
  T_CHECK(st != RR_OK, "port 99999 accepted");
  /* The real one: rank and size from the URL alone (RANK, MASTER_* are unset). */
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d?rank=%d&world_size=%d", a->port, rank, a->world);
  T_OK(rr_init_process_group(&pg, &opt));
  if (check_group(pg, rank, a->world, 11)) return 1;
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---- file:// ---- */
static int file_rank(int rank, void *p) {
  iarg *a = p;
  clear_rank_env();
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  char url[512];
  snprintf(url, sizeof url, "file://%s?rank=%d&world_size=%d", a->path, rank, a->world);
  rr_pg_options opt;
  rr_pg_options_init(&opt);
  opt.init_method = url;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, &opt));
  T_CHECK(access(a->path, F_OK) == 0, "the store file %s does not exist while in use", a->path);
  if (check_group(pg, rank, a->world, 12)) return 1;
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---- rr_pg_options over the environment and over the URL ---- */
static int options_rank(int rank, void *p) {
  iarg *a = p;
  char logp[256];
  log_to_file(a, rank, logp, sizeof logp);
  /* The environment lies about rank and size; the options win. */
  set_int_env("RANK", (rank + 1) % a->world);
  set_int_env("WORLD_SIZE", 99);
  rr_pg_options opt;
  rr_pg_options_init(&opt);
  opt.rank = rank;
  opt.world_size = a->world;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, &opt));
  if (check_group(pg, rank, a->world, 13)) return 1;
  T_OK(rr_destroy_process_group(pg));
  if (log_has(logp, "ready (rank and size from options)")) return 1;
  /* So does a URL's query. */
  char url[256];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d?rank=%d&world_size=7", a->port,
           (rank + 2) % a->world);
  opt.init_method = url;
  T_OK(rr_init_process_group(&pg, &opt));
  if (check_group(pg, rank, a->world, 14)) return 1;
  T_OK(rr_destroy_process_group(pg));
  unlink(logp);
  return 0;
}

/* ---- Slurm and Open MPI stand in for RANK / WORLD_SIZE / LOCAL_RANK ---- */
static int launcher_rank(int rank, void *p) {
  iarg *a = p;
  char logp[256];
  log_to_file(a, rank, logp, sizeof logp);
  clear_rank_env();
  const char *src;
  if (a->phase == 0) {
    set_int_env("SLURM_PROCID", rank);
    set_int_env("SLURM_NTASKS", a->world);
    set_int_env("SLURM_LOCALID", 0); /* one task per node: local rank 0 everywhere */
    src = "SLURM_PROCID";
    /* Slurm's variables alone: the master is the step's first node and the port comes from
     * the job and step ids (job 0: the port is 20000 + the step id, here the harness's). */
    int port = atoi(getenv("MASTER_PORT"));
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    setenv("SLURM_STEP_NODELIST", "localhost,nodeb[2-5]", 1);
    set_int_env("SLURM_JOB_ID", 0);
    set_int_env("SLURM_STEP_ID", port - 20000);
  } else {
    set_int_env("OMPI_COMM_WORLD_RANK", rank);
    set_int_env("OMPI_COMM_WORLD_SIZE", a->world);
    set_int_env("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    src = "OMPI_COMM_WORLD_RANK";
  }
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  if (check_group(pg, rank, a->world, 15 + (uint64_t)a->phase)) return 1;
  T_OK(rr_destroy_process_group(pg));
  char want[96];
  snprintf(want, sizeof want, "rank %d of %d ready (rank and size from %s)", rank, a->world, src);
  if (log_has(logp, want)) return 1;
  unlink(logp);
  return 0;
}

/* ---- Slurm's host lists and tasks per node, as the library reads them ---- */
static int slurm_lists(void) {
  static const struct {
    const char *list, *first;
  } hosts[] = {{"node[01-04,07],gpu5", "node01"},
               {"n[3,5-7]", "n3"},
               {"login", "login"},
               {"a,b", "a"},
               {"rack[1-2]-gpu[03-04]", "rack1-gpu03"},
               {"x[007]y", "x007y"}};
  char out[64];
  for (size_t i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
    int rc = rr__slurm_first_host(hosts[i].list, out, sizeof out);
    const char *want = hosts[i].first;
    T_CHECK(rc == 0 && !strcmp(out, want), "first host of '%s': %s, want %s", hosts[i].list,
            rc == 0 ? out : "(error)", want);
  }
  static const char *const bad[] = {"", "node[", "node[a-b]", "]x", ",a"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    T_CHECK(rr__slurm_first_host(bad[i], out, sizeof out) != 0, "'%s' was read", bad[i]);
  T_CHECK(rr__slurm_first_host("averyveryverylongname", out, 8) != 0, "overflow accepted");
  static const struct {
    const char *per_node;
    int node, tasks;
  } per[] = {{"2(x3),1", 0, 2}, {"2(x3),1", 2, 2}, {"2(x3),1", 3, 1}, {"2(x3),1", 4, -1},
             {"4", 0, 4},       {"1,3,2", 1, 3},   {"2(3)", 0, -1},   {"", 0, -1}};
  for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) {
    int t = rr__slurm_tasks_on_node(per[i].per_node, per[i].node);
    T_CHECK(t == per[i].tasks, "'%s' node %d: %d tasks, want %d", per[i].per_node, per[i].node, t,
            per[i].tasks);
  }
  return 0;
}

/* ---- IPv6 loopback master ---- */
static int ipv6_rank(int rank, void *p) {
  iarg *a = p;
  char logp[256];
  log_to_file(a, rank, logp, sizeof logp);
  setenv("MASTER_ADDR", "::1", 1);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  if (check_group(pg, rank, a->world, 17)) return 1;
  T_OK(rr_destroy_process_group(pg));
  /* The data sockets follow the master onto IPv6 loopback. */
  if (log_has(logp, "listening on [::1]:")) return 1;
  /* The bracketed form in a tcp:// URL. */
  char url[128];
  snprintf(url, sizeof url, "tcp://[::1]:%d?rank=%d&world_size=%d", a->port, rank, a->world);
  rr_pg_options opt;
  rr_pg_options_init(&opt);
  opt.init_method = url;
  T_OK(rr_init_process_group(&pg, &opt));
  if (check_group(pg, rank, a->world, 18)) return 1;
  T_OK(rr_destroy_process_group(pg));
  unlink(logp);
  return 0;
}

static int have_ipv6_loopback(char *why, size_t n) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) {
    snprintf(why, n, "no IPv6 sockets (%s)", strerror(errno));
    return 0;
  }
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  if (!ok) snprintf(why, n, "cannot bind [::1] (%s): no IPv6 on lo", strerror(errno));
  close(fd);
  return ok;
}

/* ---- RR_DEBUG=INFO into RR_DEBUG_FILE with %h and %p ---- */
static int debug_file_rank(int rank, void *p) {
  iarg *a = p;
  char pattern[256];
  snprintf(pattern, sizeof pattern, "/tmp/%s.%%h.%%p.log", a->tag);
  setenv("RR_DEBUG", "INFO", 1);
  setenv("RR_DEBUG_FILE", pattern, 1);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  if (check_group(pg, rank, a->world, 19)) return 1;
  T_OK(rr_destroy_process_group(pg));
  char host[256] = "";
  T_CHECK(gethostname(host, sizeof host) == 0, "gethostname");
  host[strcspn(host, ".")] = '\0';
  char path[512];
  snprintf(path, sizeof path, "/tmp/%s.%s.%d.log", a->tag, host, (int)getpid());
  struct stat st;
  T_CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
          "the log file %s is not a plain file of mode 600 (mode %o)", path, (unsigned)st.st_mode);
  char *s = slurp(path);
  T_CHECK(s != NULL, "no log file %s (RR_DEBUG_FILE=%s)", path, pattern);
  int lines = 0, mine = 0, ready = 0;
  char *save = NULL;
  for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char h[256], level[16];
    int pid = -1, tid = -1, r = -2, used = 0;
    int got = sscanf(line, "%255[^:]:%d:%d [%d] RR %15s %n", h, &pid, &tid, &r, level, &used);
    T_CHECK(got == 5 && used > 0,
            "line %d does not look like 'host:pid:tid [rank] RR LEVEL msg': %s", lines, line);
    T_CHECK(!strcmp(h, host) && pid == (int)getpid() && tid > 0,
            "line %d has host '%s' pid %d tid %d; want %s, %d: %s", lines, h, pid, tid, host,
            (int)getpid(), line);
    T_CHECK(!strcmp(level, "INFO") || !strcmp(level, "WARN"), "line %d: level %s", lines, level);
    if (r == rank && !strcmp(level, "INFO")) mine++;
    if (r == rank && strstr(line, "ready")) ready++;
    lines++;
  }
  free(s);
  T_CHECK(mine > 0 && ready == 1,
          "%d lines, %d 'RR INFO' lines with prefix [%d], %d 'ready' lines in %s", lines, mine,
          rank, ready, path);
  unlink(path);
  return 0;
}

/* ---- RR_DEBUG_FILE and RR_TRACE where another user planted links (issue 22, item 6) ----
 * With the documented /tmp/rr.%h.%p.log pattern, anyone can create the name a future pid
 * will use, as a symbolic link to a file they want written (as root, any file). Each rank
 * plants links for its own pid before the library first logs or traces; the files the
 * links point to must stay empty, the links must stay links, and the job must still run. */
static int debug_link_rank(int rank, void *p) {
  iarg *a = p;
  char victim[256], logp[256], tracep[256], pattern[256];
  snprintf(victim, sizeof victim, "/tmp/%s.victim.%d", a->tag, (int)getpid());
  snprintf(pattern, sizeof pattern, "/tmp/%s.%%p.log", a->tag);
  snprintf(logp, sizeof logp, "/tmp/%s.%d.log", a->tag, (int)getpid());
  snprintf(tracep, sizeof tracep, "/tmp/%s.%d.trace", a->tag, (int)getpid());
  int fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  T_CHECK(fd >= 0, "create %s: %s", victim, strerror(errno));
  close(fd);
  unlink(logp), unlink(tracep);
  T_CHECK(symlink(victim, logp) == 0 && symlink(victim, tracep) == 0, "symlink: %s",
          strerror(errno));
  setenv("RR_DEBUG", "INFO", 1);
  setenv("RR_DEBUG_FILE", pattern, 1);
  setenv("RR_TRACE", tracep, 1);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  if (check_group(pg, rank, a->world, 23)) return 1;
  T_OK(rr_destroy_process_group(pg));
  struct stat st;
  int ok = stat(victim, &st) == 0 && st.st_size == 0;
  struct stat l1, l2;
  int links = lstat(logp, &l1) == 0 && S_ISLNK(l1.st_mode) && lstat(tracep, &l2) == 0 &&
              S_ISLNK(l2.st_mode);
  unlink(victim), unlink(logp), unlink(tracep);
  T_CHECK(ok,
          "the file behind the planted links got %lld bytes: RR_DEBUG_FILE or RR_TRACE "
          "followed a symbolic link",
          (long long)st.st_size);
  T_CHECK(links, "a planted link was replaced");
  return 0;
}

/* ---- RR_DEBUG_FILE and RR_TRACE where another user planted FIFOs (issue 38, item 4) ----
 * Opened for writing without O_NONBLOCK, a FIFO waits for a reader that need never come:
 * rank 0 hung in open() during init, before serving the store, and rank 1 timed out reaching
 * it (phase 0: RR_DEBUG_FILE with %p, whose pids are easy to guess; phase 1: RR_TRACE, read
 * as the group is made). Each rank plants a FIFO at its own expanded path; rank 1 also holds it
 * open for reading, as a planter may, so its open does not block and fstat must refuse it.
 * The job must run promptly, each rank must warn naming the path and why it refused it, log
 * to stderr, and write nothing into a FIFO. */
static int debug_fifo_rank(int rank, void *p) {
  iarg *a = p;
  const int trace = a->phase == 1;
  char fifo[256], pattern[256], errp[256];
  snprintf(pattern, sizeof pattern, "/tmp/%s.%%p.%s", a->tag, trace ? "trace" : "log");
  snprintf(fifo, sizeof fifo, "/tmp/%s.%d.%s", a->tag, (int)getpid(), trace ? "trace" : "log");
  snprintf(errp, sizeof errp, "/tmp/%s.%d.stderr", a->tag, (int)getpid());
  unlink(fifo);
  T_CHECK(mkfifo(fifo, 0666) == 0, "mkfifo %s: %s", fifo, strerror(errno));
  int rd = -1;
  if (rank == 1) {
    rd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    T_CHECK(rd >= 0, "open %s for reading: %s", fifo, strerror(errno));
  }
  setenv("RR_DEBUG", "INFO", 1);
  if (trace)
    unsetenv("RR_DEBUG_FILE"), setenv("RR_TRACE", fifo, 1);
  else
    setenv("RR_DEBUG_FILE", pattern, 1), unsetenv("RR_TRACE");
  /* This rank's stderr into a file, to read the warning and the log lines back; the
   * checks below report on the real stderr again. */
  int ef = open(errp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  T_CHECK(ef >= 0, "create %s: %s", errp, strerror(errno));
  fflush(stderr);
  int saved = dup(2);
  T_CHECK(saved >= 0 && dup2(ef, 2) == 2, "dup2: %s", strerror(errno));
  close(ef);
  double t0 = t_now();
  rr_pg *pg;
  int st = rr_init_process_group(&pg, NULL);
  char init_err[512];
  snprintf(init_err, sizeof init_err, "%s: %s", rr_status_name(st), st ? rr_last_error() : "");
  int group_bad = st != RR_OK ? 1 : check_group(pg, rank, a->world, 29 + a->phase);
  if (st == RR_OK) group_bad |= rr_destroy_process_group(pg) != RR_OK;
  double dt = t_now() - t0;
  fflush(stderr);
  T_CHECK(dup2(saved, 2) == 2, "dup2 back: %s", strerror(errno));
  close(saved);
  char *err = slurp(errp);
  T_CHECK(err != NULL, "cannot read %s", errp);
  char want[512];
  if (trace)
    snprintf(want, sizeof want,
             "RR_TRACE=%s: cannot open it for appending (it is a FIFO, "
             "not a regular file); no trace is written",
             fifo);
  else
    snprintf(want, sizeof want,
             "refusing RR_DEBUG_FILE %s (it is a FIFO, not a regular "
             "file); logging to stderr",
             fifo);
  int ok = strstr(err, want) && strstr(err, "RR INFO") && strstr(err, " ready (");
  if (st != RR_OK || group_bad || !ok) fprintf(stderr, "rank %d: its stderr:\n%s\n", rank, err);
  free(err);
  unlink(errp);
  T_CHECK(st == RR_OK && !group_bad, "the group failed beside a FIFO at %s (init: %s)", fifo,
          init_err);
  T_CHECK(ok, "stderr lacks the warning '%s' or the INFO lines logged in the file's place", want);
  T_CHECK(dt < 10.0, "init, two collectives and destroy took %.1f s beside a FIFO", dt);
  struct stat sb;
  T_CHECK(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO %s was replaced", fifo);
  if (rd >= 0) {
    char c;
    ssize_t got = read(rd, &c, 1); /* 0 (no writer) or EAGAIN: nothing was written */
    T_CHECK(got <= 0, "a log line or trace record went into the FIFO %s", fifo);
    close(rd);
  }
  unlink(fifo);
  return 0;
}

/* ---- the file store refuses a place others can write, or a file not ours alone ----
 * (issue 22, item 1: a store in an attacker's world-writable directory was accepted, and
 * its records were readable.) One process, rr_store_file directly; the cases that need
 * another owner run only as root. */
static int file_refused(const char *path, const char *needle) {
  rr_store *st = NULL;
  int rc = rr_store_file(path, 2000, &st);
  if (rc == RR_OK) rr_store_free(st);
  T_CHECK(rc != RR_OK, "rr_store_file(%s) was accepted; want a refusal saying '%s'", path, needle);
  T_HAS(rr_last_error(), needle);
  return 0;
}

static int file_perms(const char *tag) {
  char dir[256], path[300], target[300];
  snprintf(dir, sizeof dir, "/tmp/%s.d", tag);
  snprintf(path, sizeof path, "%s/store", dir);
  snprintf(target, sizeof target, "%s/elsewhere", dir);
  unlink(path), unlink(target), rmdir(dir);
  T_CHECK(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
  int bad = 0;
  T_CHECK(chmod(dir, 0777) == 0, "chmod: %s", strerror(errno));
  bad |= file_refused(path, "is writable by others (mode 777, not sticky)");
  T_CHECK(chmod(dir, 0700) == 0, "chmod: %s", strerror(errno));
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  T_CHECK(fd >= 0 && fchmod(fd, 0644) == 0, "create %s: %s", path, strerror(errno));
  close(fd);
  bad |= file_refused(path, "is open to others (mode 644)");
  unlink(path);
  T_CHECK(symlink(target, path) == 0, "symlink: %s", strerror(errno));
  bad |= file_refused(path, "symbolic link");
  struct stat st;
  T_CHECK(lstat(target, &st) != 0, "the store followed the link and made %s", target);
  unlink(path);
  /* A FIFO at the path: refused at once, never a blocking open. */
  T_CHECK(mkfifo(path, 0600) == 0, "mkfifo %s: %s", path, strerror(errno));
  bad |= file_refused(path, "is not a plain file (a FIFO)");
  unlink(path);
  if (geteuid() == 0) {
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    T_CHECK(fd >= 0 && fchown(fd, 65534, 65534) == 0, "chown %s: %s", path, strerror(errno));
    close(fd);
    bad |= file_refused(path, "belongs to uid 65534, not to this user");
    unlink(path);
    T_CHECK(chown(dir, 65534, 65534) == 0 && chmod(dir, 0755) == 0, "chown: %s", strerror(errno));
    bad |= file_refused(path, "belongs to uid 65534, not to this user (0) or root");
    T_CHECK(chown(dir, 0, 0) == 0 && chmod(dir, 0700) == 0, "chown: %s", strerror(errno));
  }
  /* Ours alone: accepted, and what it creates is 600. In /tmp (sticky, writable by all)
   * too: nobody else can replace our file there. */
  rr_store *store = NULL;
  T_OK(rr_store_file(path, 2000, &store));
  T_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "the store file has mode %o",
          (unsigned)(st.st_mode & 0777));
  rr_store_free(store);
  snprintf(path, sizeof path, "/tmp/%s.store", tag);
  unlink(path);
  T_OK(rr_store_file(path, 2000, &store));
  rr_store_free(store);
  unlink(path), rmdir(dir);
  return bad;
}

/* ---- timeout_ms in the options: the rendezvous and the calls obey it ---- */
static int timeout_rank(int rank, void *p) {
  iarg *a = p;
  rr_pg_options opt;
  rr_pg_options_init(&opt);
  if (a->phase == 0) {
    /* Rank 2 never comes; RR_TIMEOUT is 15 s under CTest but the options say 2 s. */
    if (rank == 2) return 0;
    opt.timeout_ms = 2000;
    rr_pg *pg = (rr_pg *)1;
    double t0 = t_now();
    int st = rr_init_process_group(&pg, &opt);
    double dt = t_now() - t0;
    T_CHECK(st == RR_ETIMEDOUT && pg == NULL, "init without rank 2: %s: %s", rr_status_name(st),
            rr_last_error());
    T_HAS(rr_last_error(), "rank 2");
    T_CHECK(dt >= 1.5 && dt < 8.0, "init gave up after %.2f s with timeout_ms 2000", dt);
    return 0;
  }
  opt.timeout_ms = 1500;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, &opt));
  if (check_group(pg, rank, a->world, 20)) return 1;
  float x[16];
  t_fill(x, 16, RR_FLOAT32, RR_SUM, 21, rank, 0);
  if (rank == 2) usleep(4000000);
  double t0 = t_now();
  int st = rr_all_reduce(pg, x, x, 16, RR_FLOAT32, RR_SUM);
  double dt = t_now() - t0;
  if (rank == 2) {
    T_CHECK(st != RR_OK, "the late rank's call on an aborted group succeeded");
  } else {
    T_CHECK(st == RR_ETIMEDOUT, "all_reduce with rank 2 late: %s: %s", rr_status_name(st),
            rr_last_error());
    T_HAS(rr_last_error(), "1.5 s");
    T_CHECK(dt >= 1.3 && dt < 3.8, "the call gave up after %.2f s with timeout_ms 1500", dt);
  }
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- rr_init_process_group_on_store: the rendezvous on the caller's store, through callbacks ----
 */
/* The callbacks wrap a real TCP store (as a framework's store would be wrapped) and count
 * what the library asked of it; "fail_get" (a status) makes every get fail with it, as a
 * broken store would. */
typedef struct cb_ctx {
  rr_store *inner;
  int calls, fail_get, freed;
} cb_ctx;

static int cb_set(void *c, const char *k, const void *v, size_t n) {
  ((cb_ctx *)c)->calls++;
  return rr_store_set(((cb_ctx *)c)->inner, k, v, n);
}
static int cb_get(void *c, const char *k, int64_t timeout_ms, rr_store_value *out) {
  cb_ctx *x = c;
  x->calls++;
  if (x->fail_get) return rr_store_fail(x->fail_get, "the framework's store is gone");
  void *v = NULL;
  size_t n = 0;
  (void)timeout_ms;
  int st = rr_store_get(x->inner, k, &v, &n);
  if (st == RR_OK) st = rr_store_value_set(out, v, n);
  free(v);
  return st;
}
static int cb_add(void *c, const char *k, int64_t d, int64_t *r) {
  ((cb_ctx *)c)->calls++;
  return rr_store_add(((cb_ctx *)c)->inner, k, d, r);
}
static int cb_wait(void *c, const char *const *k, int n, int64_t timeout_ms) {
  ((cb_ctx *)c)->calls++;
  return rr_store_wait(((cb_ctx *)c)->inner, k, n, timeout_ms);
}
static int cb_del(void *c, const char *k, int *deleted) {
  ((cb_ctx *)c)->calls++;
  return rr_store_delete(((cb_ctx *)c)->inner, k, deleted);
}
static void cb_free(void *c) {
  ((cb_ctx *)c)->freed++;
}

static int callbacks_rank(int rank, void *p) {
  iarg *a = p;
  clear_rank_env();
  unsetenv("MASTER_ADDR"); /* nothing but the options and the store */
  unsetenv("MASTER_PORT");
  /* Phase 1: a status of the library's passes through (RR_EREVOKED is the last in its table);
   * phase 2: a number that is no status becomes RR_ESYS. */
  static const int fails[] = {RR_OK, RR_EREVOKED, -99};
  int want = a->phase == 2 ? RR_ESYS : fails[a->phase];
  cb_ctx ctx = {.fail_get = rank == 1 ? fails[a->phase] : RR_OK};
  T_OK(rr_store_tcp("127.0.0.1", a->port, rank == 0, 10000, &ctx.inner));
  rr_store_callbacks cb = {&ctx, cb_set, cb_get, cb_add, cb_wait, NULL, cb_del, cb_free};
  rr_store *st = NULL;
  T_OK(rr_store_from_callbacks(&cb, 10000, &st));
  rr_pg_options opt;
  rr_pg_options_init(&opt);
  rr_pg *pg = (rr_pg *)1;
  T_CHECK(rr_init_process_group_on_store(&pg, &opt, st) == RR_EINVAL && pg == NULL,
          "a store without rank and world_size was accepted");
  T_HAS(rr_last_error(), "rank and world_size");
  pg = (rr_pg *)1;
  T_CHECK(rr_init_process_group_on_store(&pg, &opt, NULL) == RR_EINVAL && pg == NULL,
          "a NULL store was accepted");
  T_HAS(rr_last_error(), "store is NULL");
  opt.rank = rank;
  opt.world_size = a->world;
  opt.timeout_ms = 5000;
  if (a->phase) { /* rank 1's get fails: it says so, naming the callback and the key */
    int rc = rr_init_process_group_on_store(&pg, &opt, st);
    T_CHECK(rc != RR_OK && pg == NULL, "init succeeded with a failing store");
    if (rank == 1) {
      T_CHECK(rc == want, "status %s, expected %s", rr_status_name(rc), rr_status_name(want));
      T_HAS(rr_last_error(), "store callback get of key 'rr/w/");
      T_HAS(rr_last_error(), "the framework's store is gone");
    }
  } else {
    T_OK(rr_init_process_group_on_store(&pg, &opt, st));
    if (check_group(pg, rank, a->world, 30)) return 1;
    T_OK(rr_destroy_process_group(pg));
    T_CHECK(ctx.calls >= 3, "the library made %d store calls through the callbacks", ctx.calls);
    /* The store is the caller's: still usable after the group is gone, freed only by it. */
    T_CHECK(ctx.freed == 0, "destroying the group freed the caller's store");
    T_OK(rr_store_add(st, "after", 1, &(int64_t){0}));
  }
  rr_store_free(st);
  T_CHECK(ctx.freed == 1, "rr_store_free did not call the free callback once (%d)", ctx.freed);
  /* Rank 0 serves the inner store: leave last, once everyone is done with it. */
  int64_t done = 0;
  T_OK(rr_store_add(ctx.inner, "done", 1, &done));
  if (rank == 0) {
    const char *k = "all_done";
    if (done == a->world) T_OK(rr_store_set(ctx.inner, k, "1", 1));
    T_OK(rr_store_wait(ctx.inner, &k, 1, 0));
  } else if (done == a->world) {
    T_OK(rr_store_set(ctx.inner, "all_done", "1", 1));
  }
  rr_store_free(ctx.inner);
  return 0;
}

/* Remove leftovers of this run under /tmp (files named <tag>*). */
static void cleanup_tmp(const char *tag) {
  DIR *d = opendir("/tmp");
  if (!d) return;
  struct dirent *e;
  char path[512];
  while ((e = readdir(d)) != NULL)
    if (!strncmp(e->d_name, tag, strlen(tag))) {
      snprintf(path, sizeof path, "/tmp/%s", e->d_name);
      unlink(path);
    }
  closedir(d);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: %s "
            "<tcp|file|options|slurm|ompi|slurm_lists|ipv6|debug_file|debug_link|debug_fifo|trace_"
            "fifo|file_perms|timeout_opt|store_callbacks>\n",
            argv[0]);
    return 2;
  }
  const char *s = argv[1];
  t_seed_announce(s);
  iarg a = {.world = 3, .port = t_free_port()};
  snprintf(a.tag, sizeof a.tag, "rr-test-init-%d-%llx", (int)getpid(),
           (unsigned long long)(t_now() * 1e9));
  int rc;
  if (!strcmp(s, "tcp")) {
    rc = t_run_all(3, tcp_rank, &a, 45, NULL);
  } else if (!strcmp(s, "file")) {
    snprintf(a.path, sizeof a.path, "/tmp/%s.store", a.tag);
    unlink(a.path);
    rc = t_run_all(3, file_rank, &a, 45, NULL);
    if (access(a.path, F_OK) == 0) {
      fprintf(stderr, "the store file %s is still there after every rank destroyed its group\n",
              a.path);
      rc = 1;
    }
  } else if (!strcmp(s, "options")) {
    rc = t_run_all(3, options_rank, &a, 45, NULL);
  } else if (!strcmp(s, "slurm") || !strcmp(s, "ompi")) {
    a.phase = !strcmp(s, "ompi");
    rc = t_run_all(3, launcher_rank, &a, 45, NULL);
  } else if (!strcmp(s, "slurm_lists")) {
    rc = slurm_lists();
  } else if (!strcmp(s, "ipv6")) {
    char why[160];
    if (!have_ipv6_loopback(why, sizeof why)) {
      printf("skipped: %s\n", why);
      return 77;
    }
    rc = t_run_all(3, ipv6_rank, &a, 45, NULL);
  } else if (!strcmp(s, "debug_file")) {
    a.world = 2;
    rc = t_run_all(2, debug_file_rank, &a, 45, NULL);
  } else if (!strcmp(s, "file_perms")) {
    rc = file_perms(a.tag);
  } else if (!strcmp(s, "debug_link")) {
    a.world = 2;
    rc = t_run_all(2, debug_link_rank, &a, 45, NULL);
  } else if (!strcmp(s, "debug_fifo") || !strcmp(s, "trace_fifo")) {
    /* 30 s: a rank stuck in open() is killed, and the test says so, within CTest's 60. */
    a.world = 2;
    a.phase = !strcmp(s, "trace_fifo");
    rc = t_run_all(2, debug_fifo_rank, &a, 30, NULL);
  } else if (!strcmp(s, "store_callbacks")) {
    rc = t_run_all(3, callbacks_rank, &a, 45, NULL);
    for (a.phase = 1; !rc && a.phase <= 2; a.phase++) {
      a.port = t_free_port();
      rc = t_run_all(3, callbacks_rank, &a, 45, NULL);
    }
  } else if (!strcmp(s, "timeout_opt")) {
    rc = t_run_all(3, timeout_rank, &a, 45, NULL);
    a.phase = 1;
    if (!rc) rc = t_run_all(3, timeout_rank, &a, 45, NULL);
  } else {
    fprintf(stderr, "unknown scenario %s\n", s);
    return 2;
  }
  cleanup_tmp(a.tag);
  if (rc == 0) printf("%s: ok\n", s);
  return rc ? 1 : 0;
}
