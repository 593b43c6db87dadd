/* Debug logging switched on by the environment, as NCCL_DEBUG:
 *   RR_DEBUG=WARN|INFO|TRACE   RR_DEBUG_SUBSYS=INIT,COLL,NET,STORE (^ to exclude)
 *   RR_DEBUG_FILE=/tmp/rr.%h.%p.log
 * Lines look like "host:pid:tid [rank] RR INFO <message>". */
#ifndef RR__COMMON_LOG_H_
#define RR__COMMON_LOG_H_

#include "common/status.h"

enum { RR__LEVEL_NONE = 0, RR__LEVEL_WARN = 1, RR__LEVEL_INFO = 2, RR__LEVEL_TRACE = 3 };
enum {
  RR__SUB_INIT = 1 << 0,
  RR__SUB_COLL = 1 << 1,
  RR__SUB_NET = 1 << 2,
  RR__SUB_STORE = 1 << 3,
  RR__SUB_ALL = 0xff
};

int rr__log_enabled(int level, int subsys);
void rr__log(int level, int subsys, const char *file, int line, const char *fmt, ...)
    RR__PRINTF(5, 6);
/* The global rank shown in the prefix; -1 until a process group is made. */
void rr__log_set_rank(int rank);

#define RR__LOGF(level, sub, ...)                                                 \
  do {                                                                           \
    if (rr__log_enabled((level), (sub)))                                         \
      rr__log((level), (sub), __FILE__, __LINE__, __VA_ARGS__);                  \
  } while (0)
#define RR__LOG_WARN(sub, ...) RR__LOGF(RR__LEVEL_WARN, sub, __VA_ARGS__)
#define RR__LOG_INFO(sub, ...) RR__LOGF(RR__LEVEL_INFO, sub, __VA_ARGS__)
#define RR__LOG_TRACE(sub, ...) RR__LOGF(RR__LEVEL_TRACE, sub, __VA_ARGS__)

#endif /* RR__COMMON_LOG_H_ */
