/* What the files of test_op share: the check counters and CHECK, the random source, the name
 * and size tables, the references (test_op_ref.c), the operand buffers (test_op_reduce.c) and
 * each section's entry point, which main (test_op.c) dispatches to by name. */
#ifndef RR__TESTS_TEST_OP_H_
#define RR__TESTS_TEST_OP_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ring/op.h"
#include "tests/harness.h"

/* Counted, and printed for the first 30 failures only: a broken loop fails millions of
 * elements, and the first few say what went wrong. */
extern long g_checks, g_failures;

#define CHECK(cond, ...)                            \
  do {                                              \
    g_checks++;                                     \
    if (!(cond)) {                                  \
      if (g_failures++ < 30) {                      \
        printf("FAIL %s:%d: ", __FILE__, __LINE__); \
        printf(__VA_ARGS__);                        \
        printf("\n");                               \
      }                                             \
    }                                               \
  } while (0)

/* g_rng restarts at g_seed for every section, so each one replays alone. */
extern uint64_t g_seed, g_rng;
uint64_t rnd(void);
uint32_t rnd32(void);
uint32_t rnd_below(uint32_t n);

uint32_t f32_bits(float f);
float f32_of(uint32_t u);
double f64_of(uint64_t u);

extern const char *const k_dtype_names[RR_NUM_DTYPES];
extern const size_t k_dtype_sizes[RR_NUM_DTYPES];
extern const char *const k_op_names[RR_NUM_OPS];
#define K_NDIVS 6
extern const int k_divs[K_NDIVS]; /* AVG divisors tried */

/* test_op_ref.c: the references. */
#ifdef __SIZEOF_FLOAT128__
typedef __float128 wide_t; /* 113-bit significand: exact enough for float64 */
#else
typedef long double wide_t; /* 64 bits: a double rounding could slip through, rarely */
#endif
double ref_h2d(uint16_t h);
double ref_bf2d(uint16_t b);
uint16_t ref_f2h(float f);
uint16_t ref_f2bf(float f);
int64_t get_int(rr_dtype dt, const void *p);
void put_int(rr_dtype dt, void *p, uint64_t v);
double float_value(rr_dtype dt, const void *p);
int expect(rr_dtype dt, rr_op op, int div, const void *a, const void *b, void *want);
int elem_isnan(rr_dtype dt, const void *p);
void hex_elem(char *out, size_t cap, rr_dtype dt, const void *p);
int check_elem(rr_dtype dt, rr_op op, int div, const void *a, const void *b, const void *got);

/* test_op_reduce.c: random operands, maxn elements and a guard band past them. */
typedef struct bufs {
  uint8_t *A, *B;        /* operands, never written */
  uint8_t *wa, *wb, *wd; /* working copies */
} bufs;
void bufs_init(bufs *b, rr_dtype dt, size_t maxn);
void bufs_free(bufs *b);

/* The sections. */
void test_names(void);   /* test_op_names.c */
void test_check(void);   /* test_op_names.c */
void test_convert(void); /* test_op_convert.c */
void test_reduce(void);  /* test_op_reduce.c */
int test_paths(void);    /* test_op_paths.c: 77 without the AVX2 path */
void bench(void);        /* test_op_paths.c */

#endif /* RR__TESTS_TEST_OP_H_ */
