#include "common/param.h"

#include <errno.h>
#include <math.h>
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
    case 'k':
    case 'K':
      mul = 1024;
      end++;
      break;
    case 'm':
    case 'M':
      mul = 1024 * 1024;
      end++;
      break;
    case 'g':
    case 'G':
      mul = 1024LL * 1024 * 1024;
      end++;
      break;
    default:
      break;
  }
  if (*end == 'i' || *end == 'B') end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
  if (*end != '\0' || v > INT64_MAX / mul) return -1;
  *out = (int64_t)v * mul;
  return 0;
}

static void rr__bad(const char *env, const char *val) {
  if (rr__param_err[0] == '\0')
    snprintf(rr__param_err, sizeof rr__param_err, "environment variable %s='%s' is malformed", env,
             val);
}

static void rr__out_of_range(const char *env, const char *val, const char *range) {
  if (rr__param_err[0] == '\0')
    snprintf(rr__param_err, sizeof rr__param_err,
             "environment variable %s='%s' is out of range (%s)", env, val, range);
}

/* A whole number (K/M/G suffixes) in [lo, hi]; sets *out and returns 1, or reports and
 * returns 0. */
static int rr__load_int(const char *env, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  int64_t x;
  /* Negative values only where the range has them (RR_SPIN_US=-1 is "auto"). */
  int neg = v[0] == '-' && lo < 0;
  if (rr__parse_size(neg ? v + 1 : v, &x) != 0) {
    rr__bad(env, v);
    return 0;
  }
  if (neg) x = -x;
  if (x < lo || x > hi) {
    char range[96];
    snprintf(range, sizeof range, "a whole number from %lld to %lld", (long long)lo, (long long)hi);
    rr__out_of_range(env, v, range);
    return 0;
  }
  *out = x;
  return 1;
}

/* A finite number of seconds in [lo, hi]: "inf", "nan" and 1e300 are refused, and so is a
 * value that would round to 0 ms (every handshake would time out at once). */
static int rr__load_dbl(const char *env, const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (end == v || *end != '\0') {
    rr__bad(env, v);
    return 0;
  }
  if (!isfinite(x) || x < lo || x > hi || errno == ERANGE) {
    char range[96];
    snprintf(range, sizeof range, "a finite number of seconds from %g to %g", lo, hi);
    rr__out_of_range(env, v, range);
    return 0;
  }
  *out = x;
  return 1;
}

static void rr__params_load(void) {
  const char *v;
#define RR__L_INT(f, env, def, lo, hi, doc) \
  rr__cached.f = (def);                     \
  if ((v = getenv(env)) != NULL && *v) rr__load_int(env, v, (lo), (hi), &rr__cached.f);
#define RR__L_DBL(f, env, def, lo, hi, doc) \
  rr__cached.f = (def);                     \
  if ((v = getenv(env)) != NULL && *v) rr__load_dbl(env, v, (lo), (hi), &rr__cached.f);
#define RR__L_STR(f, env, def, doc) rr__cached.f = ((v = getenv(env)) != NULL && *v) ? v : (def);
  RR__INT_PARAMS(RR__L_INT)
  RR__DBL_PARAMS(RR__L_DBL)
  RR__STR_PARAMS(RR__L_STR)
#undef RR__L_INT
#undef RR__L_DBL
#undef RR__L_STR
  if (strcmp(rr__cached.algo, "auto") && strcmp(rr__cached.algo, "ring") &&
      strcmp(rr__cached.algo, "rd") && strcmp(rr__cached.algo, "star")) {
    rr__bad("RR_ALGO", rr__cached.algo);
    rr__cached.algo = "auto";
  }
  if (strcmp(rr__cached.transport, "auto") && strcmp(rr__cached.transport, "tcp") &&
      strcmp(rr__cached.transport, "ib") && strcmp(rr__cached.transport, "shm")) {
    rr__bad("RR_TRANSPORT", rr__cached.transport);
    rr__cached.transport = "auto";
  }
  /* RR_TRACE is 0, 1 or a file path; a number other than 0 and 1 is a mistake (a level
   * that does not exist), not a file to create in the working directory. */
  v = rr__cached.trace;
  if (v[strspn(v, "0123456789")] == '\0' && strcmp(v, "0") && strcmp(v, "1")) {
    rr__out_of_range("RR_TRACE", v, "0, 1 or a file path for JSON lines");
    rr__cached.trace = "0";
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
    return rr__set_error(RR_EENV, "%s (see docs/env.md for the accepted values)", rr__param_err);
  return RR_OK;
}
