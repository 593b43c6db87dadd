#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The last error is per thread, as errno: the only mutable global here, and the reason is
 * that the public API returns a status and gives the detail on request. */
static _Thread_local char rr__last_error[RR__ERRMSG_MAX];

const char *rr_status_name(int status) {
  switch (status) {
#define RR__NAME_CASE(name, value, msg) \
  case value:                           \
    return "RR_" #name;
    RR_STATUS_MAP(RR__NAME_CASE)
#undef RR__NAME_CASE
  }
  return "RR_UNKNOWN";
}

int rr__status_known(int status) {
  switch (status) {
#define RR__KNOWN_CASE(name, value, msg) \
  case value:                            \
    return 1;
    RR_STATUS_MAP(RR__KNOWN_CASE)
#undef RR__KNOWN_CASE
  }
  return 0;
}

const char *rr_strerror(int status) {
  switch (status) {
#define RR__MSG_CASE(name, value, msg) \
  case value:                          \
    return msg;
    RR_STATUS_MAP(RR__MSG_CASE)
#undef RR__MSG_CASE
  }
  return "unknown status";
}

const char *rr_last_error(void) {
  return rr__last_error;
}
const char *rr__error(void) {
  return rr__last_error;
}
void rr__clear_error(void) {
  rr__last_error[0] = '\0';
}

void rr__copy_error(const char *msg) {
  snprintf(rr__last_error, sizeof rr__last_error, "%s", msg ? msg : "");
}

int rr__set_error(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rr__last_error, sizeof rr__last_error, fmt, ap);
  va_end(ap);
  return status;
}

int rr__prefix_error(int status, const char *fmt, ...) {
  /* Sized so prefix + ": " + old always fits: the cause's tail is what gets cut. */
  char prefix[256];
  char old[RR__ERRMSG_MAX - sizeof prefix - 2];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  size_t keep = strnlen(rr__last_error, sizeof old - 1);
  memcpy(old, rr__last_error, keep);
  old[keep] = '\0';
  if (old[0] == '\0') snprintf(old, sizeof old, "%s", rr_strerror(status));
  snprintf(rr__last_error, sizeof rr__last_error, "%s: %s", prefix, old);
  return status;
}
