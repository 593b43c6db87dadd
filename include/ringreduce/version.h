/*
 * ringreduce's version, at compile time (the macros) and at run time (the functions).
 *
 * The macros describe the header a program was compiled against; rr_version() and
 * rr_version_num() are answered by the library the program loaded. They differ when a
 * program runs against another installation than the one it was built with:
 *
 *   if (rr_version_num() / 10000 != RR_VERSION_MAJOR)
 *     fprintf(stderr, "built for ringreduce %s, running with %s\n", RR_VERSION_STRING,
 *             rr_version());
 *
 * The three numbers below are the project's only record of its version: CMakeLists.txt reads
 * them for project(VERSION), so the SONAME, ringreduceConfigVersion.cmake, ringreduce.pc and
 * `rrun --version` all follow an edit here.
 */
#ifndef RINGREDUCE_VERSION_H_
#define RINGREDUCE_VERSION_H_

#define RR_VERSION_MAJOR 0
#define RR_VERSION_MINOR 2
#define RR_VERSION_PATCH 0

/* Spelled out from the numbers rather than written again, so it cannot drift from them. */
#define RR__VERSION_STR(x) #x
#define RR__VERSION_XSTR(x) RR__VERSION_STR(x)
#define RR_VERSION_STRING            \
  RR__VERSION_XSTR(RR_VERSION_MAJOR) \
  "." RR__VERSION_XSTR(RR_VERSION_MINOR) "." RR__VERSION_XSTR(RR_VERSION_PATCH)
/* One integer that orders versions (0.1.0 is 100, 1.2.3 is 10203), usable in #if. Minor and
 * patch stay below 100 for that to hold. */
#define RR_VERSION_NUM (RR_VERSION_MAJOR * 10000 + RR_VERSION_MINOR * 100 + RR_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; these two are part of its interface. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* The loaded library's RR_VERSION_STRING ("0.2.0"). Static storage, never NULL. */
const char *rr_version(void);
/* The loaded library's RR_VERSION_NUM. */
int rr_version_num(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* RINGREDUCE_VERSION_H_ */
