#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/status.h"

int64_t rr__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t rr__now_ms_coarse(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t rr__deadline(int64_t timeout_ms) {
  int64_t now = rr__now_ms();
  return timeout_ms > INT64_MAX / 2 - now ? INT64_MAX / 2 : now + timeout_ms;
}

int64_t rr__deadline_coarse(int64_t timeout_ms) {
  int64_t now = rr__now_ms_coarse() + RR__COARSE_LAG_MS;
  return timeout_ms > INT64_MAX / 2 - now ? INT64_MAX / 2 : now + timeout_ms;
}

void *rr__calloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) rr__set_error(RR_ENOMEM, "out of memory allocating %zu x %zu bytes", n, size);
  return p;
}

char *rr__strdup(const char *s) {
  char *p = strdup(s ? s : "");
  if (!p) rr__set_error(RR_ENOMEM, "out of memory copying a string");
  return p;
}

int rr__open_append_private(const char *path, char *why, size_t n) {
  const int flags = O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW;
  int fd = open(path, flags | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) return fd;
  if (errno != EEXIST) {
    snprintf(why, n, "%s", strerror(errno));
    return -1;
  }
  fd = open(path, flags);
  if (fd < 0) {
    snprintf(why, n, "%s", errno == ELOOP ? "it is a symbolic link" : strerror(errno));
    return -1;
  }
  struct stat st;
  const char *bad = NULL;
  if (fstat(fd, &st) != 0) bad = strerror(errno);
  else if (!S_ISREG(st.st_mode)) bad = "not a plain file";
  else if (st.st_nlink != 1) bad = "it has other names (hard links)";
  else if (st.st_uid != geteuid()) bad = "it belongs to another user";
  if (!bad) return fd;
  snprintf(why, n, "%s", bad);
  close(fd);
  return -1;
}
