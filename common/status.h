/* Internal error reporting: set the thread's last-error text and return the status in one
 * expression, so every failure carries its cause upward. */
#ifndef RR__COMMON_STATUS_H_
#define RR__COMMON_STATUS_H_

#include <stddef.h>

#include "ringreduce/ringreduce.h"

#if defined(__GNUC__)
#define RR__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RR__PRINTF(f, a)
#endif

#define RR__ERRMSG_MAX 1024

/* Replace this thread's last error with the formatted text; returns status. */
int rr__set_error(int status, const char *fmt, ...) RR__PRINTF(2, 3);
/* Prefix this thread's last error with the formatted text ("rank 3: all_reduce: ...");
 * returns status. Used by outer layers to add who and what to an inner cause. */
int rr__prefix_error(int status, const char *fmt, ...) RR__PRINTF(2, 3);
/* Replace the last error with a copy of msg (used to hand a worker's error to a waiter). */
void rr__copy_error(const char *msg);
/* Whether status is one of RR_STATUS_MAP's (a callback's answer may be anything). */
int rr__status_known(int status);
/* The last error of this thread (same as rr_last_error). */
const char *rr__error(void);
/* Forget the last error (so a later success does not show a stale one). */
void rr__clear_error(void);

/* Propagate a negative status. */
#define RR__CHECK(call)            \
  do {                             \
    int rr__s_ = (call);           \
    if (rr__s_ < 0) return rr__s_; \
  } while (0)

/* Store a negative status in `st` and jump to `label`. */
#define RR__CHECK_GOTO(call, st, label) \
  do {                                  \
    (st) = (call);                      \
    if ((st) < 0) goto label;           \
  } while (0)

#endif /* RR__COMMON_STATUS_H_ */
