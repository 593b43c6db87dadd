/* Host reductions (ring/op.c) against independent references.
 *
 *   test_op names | check | convert | reduce | reduce_portable | paths | bench
 *
 * Random data comes from a fixed seed, printed; RR_TEST_SEED=<n> replays or varies it.
 * The references never call the code under test: integers are computed in wrapping uint64,
 * float32 in double (one double rounding then one float rounding is exact for + - * /
 * because 53 >= 2*24+2), float64 in __float128 (113 >= 2*53+2), and float16/bfloat16
 * through a decoder/encoder written from the format's definition in double arithmetic
 * (cross-checked against GCC's _Float16 where the compiler has it).
 *
 * `bench` (not run by ctest) prints throughput; nothing here asserts on time.
 *
 * One executable from several files, one per feature: test_op_names.c (names, check),
 * test_op_convert.c (convert), test_op_reduce.c (reduce, reduce_portable), test_op_paths.c
 * (paths, bench), test_op_ref.c (the references they check against). This file holds the
 * counters, the random source, the tables they share and the dispatch.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tests/test_op.h"

/* ---------------------------------------------------------------------------------------------
 * Reporting and randomness.
 */

long g_checks, g_failures;

uint64_t g_seed = 0x5eed2024u;
uint64_t g_rng;

uint64_t rnd(void) { /* splitmix64: good enough, and one line to reproduce */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
uint32_t rnd32(void) {
  return (uint32_t)(rnd() >> 32);
}
uint32_t rnd_below(uint32_t n) {
  return (uint32_t)(rnd() % n);
}

uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
float f32_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
double f64_of(uint64_t u) {
  double f;
  memcpy(&f, &u, sizeof f);
  return f;
}

const char *const k_dtype_names[RR_NUM_DTYPES] = {"int8", "uint8",    "int32", "int64",
                                                  "half", "bfloat16", "float", "double"};
const size_t k_dtype_sizes[RR_NUM_DTYPES] = {1, 1, 4, 8, 2, 2, 4, 8};
const char *const k_op_names[RR_NUM_OPS] = {"sum", "prod", "min", "max",
                                            "avg", "band", "bor", "bxor"};
const int k_divs[K_NDIVS] = {0, 1, 2, 3, 7, 8};

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  const char *env = getenv("RR_TEST_SEED");
  if (env && *env) g_seed = strtoull(env, NULL, 0);
  printf("seed %" PRIu64 " (set RR_TEST_SEED to change)\n", g_seed);
  if (strcmp(which, "bench") == 0) {
    bench();
    return 0;
  }
  int all = strcmp(which, "all") == 0, ran = 0, rc = 0;
#define SECTION(name, call)                                          \
  if (all || strcmp(which, name) == 0) {                             \
    g_rng = g_seed;                                                  \
    int64_t t0 = rr__now_ns();                                       \
    call;                                                            \
    printf("%s: %.2f s\n", name, (double)(rr__now_ns() - t0) / 1e9); \
    ran = 1;                                                         \
  }
  SECTION("names", test_names());
  SECTION("check", test_check());
  SECTION("convert", test_convert());
  SECTION("reduce", test_reduce());
  SECTION("reduce_portable", (rr__op_force_portable(1), test_reduce(), rr__op_force_portable(0)));
  SECTION("paths", rc = test_paths());
#undef SECTION
  if (!ran) {
    printf("unknown section '%s'\n", which);
    return 2;
  }
  printf("%ld checks, %ld failures\n", g_checks, g_failures);
  if (g_failures) return 1;
  return rc == 77 && !all ? 77 : 0;
}
