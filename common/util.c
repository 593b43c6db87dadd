#include "common/util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

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
