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

/* Open a file the user named for a log or a trace (RR_DEBUG_FILE, RR_TRACE=<path>) for
 * appending, safely where others can write too (/tmp): a new file is created 0600 and
 * exclusively; an existing one must be a regular file of this user with one name. Nothing
 * there can block or redirect the open: a symbolic link is never followed (a link planted
 * for a future pid would send a root job's output into another file), and a FIFO, socket or
 * device is refused at once (a FIFO with no reader would hold the open forever). Returns a
 * blocking fd, or -1 with the reason in why. */
int rr__log_open_private(const char *path, char *why, size_t n);

#define RR__LOGF(level, sub, ...)                                                                  \
  do {                                                                                             \
    if (rr__log_enabled((level), (sub))) rr__log((level), (sub), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define RR__LOG_WARN(sub, ...) RR__LOGF(RR__LEVEL_WARN, sub, __VA_ARGS__)
#define RR__LOG_INFO(sub, ...) RR__LOGF(RR__LEVEL_INFO, sub, __VA_ARGS__)
#define RR__LOG_TRACE(sub, ...) RR__LOGF(RR__LEVEL_TRACE, sub, __VA_ARGS__)

#endif /* RR__COMMON_LOG_H_ */
