/* The library's own version, compiled in here so that a program can compare the header it was
 * built against (RR_VERSION_STRING, RR_VERSION_NUM) with the library it actually loaded. */
#include "ringreduce/version.h"

const char *rr_version(void) {
  return RR_VERSION_STRING;
}

int rr_version_num(void) {
  return RR_VERSION_NUM;
}
