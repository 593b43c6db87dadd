/* Small helpers used across the library: clocks, deadlines, allocation with an error. */
#ifndef RR__COMMON_UTIL_H_
#define RR__COMMON_UTIL_H_

#include <stddef.h>
#include <stdint.h>

#define RR__MIN(a, b) ((a) < (b) ? (a) : (b))
#define RR__MAX(a, b) ((a) > (b) ? (a) : (b))
#define RR__ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Monotonic clock in nanoseconds / milliseconds. */
int64_t rr__now_ns(void);
static inline int64_t rr__now_ms(void) {
  return rr__now_ns() / 1000000;
}
/* The same clock at the kernel's tick (a few ms), without reading the clocksource: cheap
 * enough for every message (a precise read costs about as much as a small message on a VM).
 * For "last byte N s ago" and rate limits; for deadlines only through rr__deadline_coarse,
 * which adds the most it can lag. */
int64_t rr__now_ms_coarse(void);
/* The most CLOCK_MONOTONIC_COARSE lags CLOCK_MONOTONIC: one tick, 10 ms at HZ=100, the
 * coarsest Linux configures. */
#define RR__COARSE_LAG_MS 10
/* Milliseconds left until deadline_ms (a rr__now_ms() value), clamped at 0. */
static inline int64_t rr__ms_left(int64_t deadline_ms) {
  int64_t left = deadline_ms - rr__now_ms();
  return left > 0 ? left : 0;
}
/* Deadline from a timeout, saturating instead of overflowing. */
int64_t rr__deadline(int64_t timeout_ms);
/* The same from the coarse clock (no clocksource read, unlike the precise one: every call
 * computes a deadline): never earlier than rr__deadline's, at most
 * RR__COARSE_LAG_MS later. Compared with rr__now_ms() like any deadline. */
int64_t rr__deadline_coarse(int64_t timeout_ms);

/* calloc that sets the last error on failure (returns NULL). */
void *rr__calloc(size_t n, size_t size);
/* Duplicate a string; NULL (with the last error set) on failure. */
char *rr__strdup(const char *s);

/* a mod n for possibly negative a. */
static inline int rr__mod(int a, int n) {
  return ((a % n) + n) % n;
}

#endif /* RR__COMMON_UTIL_H_ */
