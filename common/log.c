#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/param.h"
#include "common/util.h"

/* Logger configuration is process-wide by nature (one stderr, one RR_DEBUG); it is set
 * once and only read afterwards, except the rank shown in the prefix. */
static struct {
  int level;
  int subsys;
  FILE *out;
  char host[64];
  pthread_mutex_t lock;
} rr__logger = {.lock = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t rr__log_once = PTHREAD_ONCE_INIT;
static atomic_int rr__log_rank = -1;

static int rr__subsys_bit(const char *name, size_t n) {
  static const struct {
    const char *name;
    int bit;
  } tab[] = {{"INIT", RR__SUB_INIT},
             {"COLL", RR__SUB_COLL},
             {"NET", RR__SUB_NET},
             {"STORE", RR__SUB_STORE},
             {"ALL", RR__SUB_ALL}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (strlen(tab[i].name) == n && strncasecmp(tab[i].name, name, n) == 0) return tab[i].bit;
  return 0;
}

/* What a path that is not a regular file is, for the refusal. */
static const char *rr__file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "it is a FIFO, not a regular file";
  if (S_ISSOCK(m)) return "it is a socket, not a regular file";
  if (S_ISCHR(m)) return "it is a character device, not a regular file";
  if (S_ISBLK(m)) return "it is a block device, not a regular file";
  if (S_ISDIR(m)) return "it is a directory, not a regular file";
  return "it is not a regular file";
}

int rr__log_open_private(const char *path, char *why, size_t n) {
  /* O_NONBLOCK: without it, opening a FIFO for writing waits for a reader, and whoever
   * planted the FIFO need never read: rank 0 hung in open() during init, under no deadline,
   * before it served the rendezvous store (RR_DEBUG_FILE, and RR_TRACE, which the group
   * reads as it is made). With it, a FIFO without a reader fails at once (ENXIO) and one
   * with a reader opens and is refused by fstat.
   * O_NOCTTY: a terminal named here must not become the process's controlling terminal.
   * O_NOFOLLOW: a symbolic link at the last step fails (ELOOP) instead of being followed. */
  const int flags = O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK;
  int fd = open(path, flags | O_CREAT | O_EXCL, 0600);
  if (fd < 0 && errno == EEXIST) fd = open(path, flags);
  if (fd < 0) {
    int e = errno;
    struct stat ls;
    /* ENXIO is what a FIFO without a reader (or a socket) answers a non-blocking writer;
     * lstat only names the kind for the message, the refusal does not depend on it. */
    if (e == ENXIO && lstat(path, &ls) == 0 && !S_ISREG(ls.st_mode))
      snprintf(why, n, "%s", rr__file_kind(ls.st_mode));
    else
      snprintf(why, n, "%s", e == ELOOP ? "it is a symbolic link" : strerror(e));
    return -1;
  }
  struct stat st;
  const char *bad = NULL;
  int fl;
  if (fstat(fd, &st) != 0)
    bad = strerror(errno);
  else if (!S_ISREG(st.st_mode))
    bad = rr__file_kind(st.st_mode);
  else if (st.st_nlink != 1)
    bad = "it has other names (hard links)";
  else if (st.st_uid != geteuid())
    bad = "it belongs to another user";
  /* A regular file: blocking writes from here on. Linux ignores O_NONBLOCK on regular
   * files, but a file system that honoured it could answer EAGAIN, and a log line or trace
   * record cut short is worse than a write that waits. */
  else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
    bad = strerror(errno);
  if (!bad) return fd;
  snprintf(why, n, "%s", bad);
  (void)close(fd); /* opened for writing, nothing written: nothing to lose */
  return -1;
}

static void rr__open_file(const char *pattern) {
  char path[512];
  size_t o = 0;
  for (const char *p = pattern; *p && o + 32 < sizeof path; p++) {
    int w = -1;
    if (p[0] == '%' && p[1] == 'h')
      w = snprintf(path + o, sizeof path - o, "%s", rr__logger.host);
    else if (p[0] == '%' && p[1] == 'p')
      w = snprintf(path + o, sizeof path - o, "%d", (int)getpid());
    if (w >= 0) {
      /* snprintf returns what it wanted to write: never step past the buffer. */
      o = RR__MIN(o + (size_t)w, sizeof path - 1);
      p++;
    } else {
      path[o++] = *p;
    }
  }
  path[o] = '\0';
  char why[128];
  int fd = rr__log_open_private(path, why, sizeof why);
  FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
  if (f) {
    setvbuf(f, NULL, _IOLBF, 0);
    rr__logger.out = f;
  } else {
    if (fd >= 0) snprintf(why, sizeof why, "%s", strerror(errno)), close(fd);
    fprintf(stderr, "ringreduce: refusing RR_DEBUG_FILE %s (%s); logging to stderr\n", path, why);
  }
}

static void rr__log_init(void) {
  const rr__params *p = rr__params_get();
  const char *lv = p->debug;
  rr__logger.level = !strcasecmp(lv, "TRACE")  ? RR__LEVEL_TRACE
                     : !strcasecmp(lv, "INFO") ? RR__LEVEL_INFO
                     : !strcasecmp(lv, "WARN") ? RR__LEVEL_WARN
                                               : RR__LEVEL_NONE;
  const char *s = p->debug_subsys;
  int invert = (*s == '^');
  if (invert) s++;
  int mask = 0;
  while (*s) {
    size_t n = strcspn(s, ",");
    mask |= rr__subsys_bit(s, n);
    s += n;
    if (*s == ',') s++;
  }
  rr__logger.subsys = invert ? (RR__SUB_ALL & ~mask) : (mask ? mask : RR__SUB_ALL);
  if (gethostname(rr__logger.host, sizeof rr__logger.host) != 0)
    snprintf(rr__logger.host, sizeof rr__logger.host, "unknown");
  rr__logger.host[sizeof rr__logger.host - 1] = '\0';
  char *dot = strchr(rr__logger.host, '.');
  if (dot) *dot = '\0';
  rr__logger.out = stderr;
  if (p->debug_file[0]) rr__open_file(p->debug_file);
}

int rr__log_enabled(int level, int subsys) {
  pthread_once(&rr__log_once, rr__log_init);
  return level <= rr__logger.level && (subsys & rr__logger.subsys);
}

void rr__log_set_rank(int rank) {
  atomic_store(&rr__log_rank, rank);
}

void rr__log(int level, int subsys, const char *file, int line, const char *fmt, ...) {
  (void)subsys;
  static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
  char msg[2048];
  int n = 0;
  if (level >= RR__LEVEL_TRACE) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const char *base = strrchr(file, '/');
    n = snprintf(msg, sizeof msg, "%ld.%06ld %s:%d ", (long)ts.tv_sec, ts.tv_nsec / 1000,
                 base ? base + 1 : file, line);
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&rr__logger.lock);
  fprintf(rr__logger.out, "%s:%d:%d [%d] RR %s %s\n", rr__logger.host, (int)getpid(),
          (int)syscall(SYS_gettid), atomic_load(&rr__log_rank), names[level], msg);
  fflush(rr__logger.out);
  pthread_mutex_unlock(&rr__logger.lock);
}
