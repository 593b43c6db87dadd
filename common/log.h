/* Debug logging switched on by the environment, as NCCL_DEBUG:
 *   RR_DEBUG=WARN|INFO|TRACE   RR_DEBUG_SUBSYS=INIT,COLL,NET,STORE (^ to exclude)
 *   RR_DEBUG_FILE=/tmp/rr.%h.%p.log
 * Lines look like "host:pid:tid [rank] RR INFO <message>". */
#ifndef RR_COMMON_LOG_H_
#define RR_COMMON_LOG_H_

#include "common/status.h"

enum { RR_LOG_NONE = 0, RR_LOG_WARN = 1, RR_LOG_INFO = 2, RR_LOG_TRACE = 3 };
enum {
  RR_SUB_INIT = 1 << 0,
  RR_SUB_COLL = 1 << 1,
  RR_SUB_NET = 1 << 2,
  RR_SUB_STORE = 1 << 3,
  RR_SUB_ALL = 0xff
};

/* Current level (read once from RR_DEBUG). */
int rr__log_level(void);
int rr__log_enabled(int level, int subsys);
void rr__log(int level, int subsys, const char *file, int line, const char *fmt, ...)
    RR__PRINTF(5, 6);
/* The global rank shown in the prefix; -1 until a process group is made. */
void rr__log_set_rank(int rank);

#define RR_LOGF(level, sub, ...)                                                 \
  do {                                                                           \
    if (rr__log_enabled((level), (sub)))                                         \
      rr__log((level), (sub), __FILE__, __LINE__, __VA_ARGS__);                  \
  } while (0)
#define RR_WARN(sub, ...) RR_LOGF(RR_LOG_WARN, sub, __VA_ARGS__)
#define RR_INFO(sub, ...) RR_LOGF(RR_LOG_INFO, sub, __VA_ARGS__)
#define RR_TRACE(sub, ...) RR_LOGF(RR_LOG_TRACE, sub, __VA_ARGS__)

#endif /* RR_COMMON_LOG_H_ */
