#include "common/param.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/status.h"

/* Process-wide cache: environment variables do not change under a running job, and reading
 * them once keeps every rank's view stable for the whole run. */
static rr__params rr__cached;
static char rr__param_err[256];
static pthread_once_t rr__param_once = PTHREAD_ONCE_INIT;

int rr__parse_size(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || errno != 0 || v < 0) return -1;
  int64_t mul = 1;
  switch (*end) {
    case 'k': case 'K': mul = 1024; end++; break;
    case 'm': case 'M': mul = 1024 * 1024; end++; break;
    case 'g': case 'G': mul = 1024LL * 1024 * 1024; end++; break;
    default: break;
  }
  if (*end == 'i' || *end == 'B') end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
  if (*end != '\0' || v > INT64_MAX / mul) return -1;
  *out = (int64_t)v * mul;
  return 0;
}

static void rr__bad(const char *env, const char *val) {
  if (rr__param_err[0] == '\0')
    snprintf(rr__param_err, sizeof rr__param_err, "environment variable %s='%s' is malformed",
             env, val);
}

static void rr__params_load(void) {
  const char *v;
#define RR__L_INT(f, env, def, doc)                                \
  rr__cached.f = (def);                                            \
  if ((v = getenv(env)) != NULL && *v) {                           \
    int64_t x;                                                     \
    if (rr__parse_size(v, &x) == 0) rr__cached.f = x;              \
    else rr__bad(env, v);                                          \
  }
#define RR__L_DBL(f, env, def, doc)                                \
  rr__cached.f = (def);                                            \
  if ((v = getenv(env)) != NULL && *v) {                           \
    char *end;                                                     \
    double x = strtod(v, &end);                                    \
    if (end != v && *end == '\0' && x > 0) rr__cached.f = x;       \
    else rr__bad(env, v);                                          \
  }
#define RR__L_STR(f, env, def, doc) \
  rr__cached.f = ((v = getenv(env)) != NULL && *v) ? v : (def);
  RR__INT_PARAMS(RR__L_INT)
  RR__DBL_PARAMS(RR__L_DBL)
  RR__STR_PARAMS(RR__L_STR)
#undef RR__L_INT
#undef RR__L_DBL
#undef RR__L_STR
  /* Ranges: refuse values that would break the wire protocol or the pipeline. */
  if (rr__cached.nsocks < 1 || rr__cached.nsocks > 16) {
    rr__bad("RR_NSOCKS", getenv("RR_NSOCKS"));
    rr__cached.nsocks = 2;
  }
  if (rr__cached.seg_bytes < 4096 || rr__cached.seg_bytes > (64 << 20)) {
    rr__bad("RR_SEG_BYTES", getenv("RR_SEG_BYTES"));
    rr__cached.seg_bytes = 256 * 1024;
  }
  if (rr__cached.spin_us < -1 || rr__cached.spin_us > 1000000) {
    rr__bad("RR_SPIN_US", getenv("RR_SPIN_US"));
    rr__cached.spin_us = -1;
  }
  if (rr__cached.slots < 2 || rr__cached.slots > 64) {
    rr__bad("RR_SLOTS", getenv("RR_SLOTS"));
    rr__cached.slots = 4;
  }
  if (strcmp(rr__cached.algo, "auto") && strcmp(rr__cached.algo, "ring") &&
      strcmp(rr__cached.algo, "rd") && strcmp(rr__cached.algo, "star")) {
    rr__bad("RR_ALGO", rr__cached.algo);
    rr__cached.algo = "auto";
  }
  if (strcmp(rr__cached.transport, "auto") && strcmp(rr__cached.transport, "tcp")) {
    rr__bad("RR_TRANSPORT", rr__cached.transport);
    rr__cached.transport = "auto";
  }
  /* A misspelt level would otherwise silence the log (the one place a user looks). */
  if (strcasecmp(rr__cached.debug, "NONE") && strcasecmp(rr__cached.debug, "WARN") &&
      strcasecmp(rr__cached.debug, "INFO") && strcasecmp(rr__cached.debug, "TRACE")) {
    rr__bad("RR_DEBUG", rr__cached.debug);
    rr__cached.debug = "WARN";
  }
}

const rr__params *rr__params_get(void) {
  pthread_once(&rr__param_once, rr__params_load);
  return &rr__cached;
}

int rr__params_check(void) {
  rr__params_get();
  if (rr__param_err[0])
    return rr__set_error(RR_EENV, "%s (see docs/env.md for the accepted values)",
                         rr__param_err);
  return RR_OK;
}
