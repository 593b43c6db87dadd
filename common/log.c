#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
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
  static const struct { const char *name; int bit; } tab[] = {
      {"INIT", RR__SUB_INIT}, {"COLL", RR__SUB_COLL}, {"NET", RR__SUB_NET},
      {"STORE", RR__SUB_STORE}, {"ALL", RR__SUB_ALL}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (strlen(tab[i].name) == n && strncasecmp(tab[i].name, name, n) == 0) return tab[i].bit;
  return 0;
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
  int fd = rr__open_append_private(path, why, sizeof why);
  FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
  if (f) {
    setvbuf(f, NULL, _IOLBF, 0);
    rr__logger.out = f;
  } else {
    if (fd >= 0) snprintf(why, sizeof why, "%s", strerror(errno)), close(fd);
    fprintf(stderr, "ringreduce: refusing RR_DEBUG_FILE %s (%s); logging to stderr\n", path,
            why);
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

void rr__log_set_rank(int rank) { atomic_store(&rr__log_rank, rank); }

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
