/* test_op: the names of dtypes and ops (canonical, aliases, any case, unknown ones) and which
 * (dtype, op) pairs rr__op_check accepts. */
#include <stdio.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "tests/test_op.h"

/* ---------------------------------------------------------------------------------------------
 * names: canonical names, aliases, case, unknown names.
 */

static const struct {
  const char *name;
  rr_dtype dtype;
} k_dtype_aliases[] = {
    {"float16", RR_FLOAT16}, {"fp16", RR_FLOAT16},      {"half", RR_FLOAT16},
    {"bf16", RR_BFLOAT16},   {"bfloat16", RR_BFLOAT16}, {"float32", RR_FLOAT32},
    {"fp32", RR_FLOAT32},    {"float", RR_FLOAT32},     {"float64", RR_FLOAT64},
    {"fp64", RR_FLOAT64},    {"double", RR_FLOAT64},    {"int", RR_INT32},
    {"int32", RR_INT32},     {"char", RR_INT8},         {"int8", RR_INT8},
    {"uint8", RR_UINT8},     {"u8", RR_UINT8},          {"long", RR_INT64},
    {"int64", RR_INT64},
};

static void case_variants(const char *name, char upper[32], char mixed[32]) {
  size_t i = 0;
  for (; name[i] && i < 31; i++) {
    upper[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 32 : name[i]);
    mixed[i] = (char)(i % 2 ? upper[i] : name[i]);
  }
  upper[i] = mixed[i] = '\0';
}

void test_names(void) {
  for (int d = 0; d < RR_NUM_DTYPES; d++) {
    CHECK(strcmp(rr_dtype_name((rr_dtype)d), k_dtype_names[d]) == 0, "dtype %d name '%s'", d,
          rr_dtype_name((rr_dtype)d));
    CHECK(rr_dtype_size((rr_dtype)d) == k_dtype_sizes[d], "dtype %d size %zu", d,
          rr_dtype_size((rr_dtype)d));
    rr_dtype back = RR_NUM_DTYPES;
    CHECK(rr_dtype_from_name(rr_dtype_name((rr_dtype)d), &back) == RR_OK && back == (rr_dtype)d,
          "dtype %d does not round-trip", d);
  }
  for (int o = 0; o < RR_NUM_OPS; o++) {
    CHECK(strcmp(rr_op_name((rr_op)o), k_op_names[o]) == 0, "op %d name '%s'", o,
          rr_op_name((rr_op)o));
    rr_op back = RR_NUM_OPS;
    CHECK(rr_op_from_name(rr_op_name((rr_op)o), &back) == RR_OK && back == (rr_op)o,
          "op %d does not round-trip", o);
  }
  for (size_t i = 0; i < RR__ARRAY_SIZE(k_dtype_aliases); i++) {
    char upper[32], mixed[32];
    case_variants(k_dtype_aliases[i].name, upper, mixed);
    const char *spellings[3] = {k_dtype_aliases[i].name, upper, mixed};
    for (int s = 0; s < 3; s++) {
      rr_dtype d = RR_NUM_DTYPES;
      CHECK(rr_dtype_from_name(spellings[s], &d) == RR_OK && d == k_dtype_aliases[i].dtype,
            "dtype alias '%s' -> %d", spellings[s], (int)d);
    }
  }
  const char *prods[] = {"product", "PRODUCT", "Prod", "pRoD"};
  for (size_t i = 0; i < RR__ARRAY_SIZE(prods); i++) {
    rr_op o = RR_NUM_OPS;
    CHECK(rr_op_from_name(prods[i], &o) == RR_OK && o == RR_PROD, "op alias '%s'", prods[i]);
  }
  for (int o = 0; o < RR_NUM_OPS; o++) {
    char upper[32], mixed[32];
    case_variants(k_op_names[o], upper, mixed);
    rr_op a = RR_NUM_OPS, b = RR_NUM_OPS;
    CHECK(rr_op_from_name(upper, &a) == RR_OK && a == (rr_op)o, "op '%s'", upper);
    CHECK(rr_op_from_name(mixed, &b) == RR_OK && b == (rr_op)o, "op '%s'", mixed);
  }

  const char *bad_dtypes[] = {"",         "float8", "int16",  "fp",     "floa",
                              "float32 ", " float", "uint32", "bfloat", "halff"};
  for (size_t i = 0; i < RR__ARRAY_SIZE(bad_dtypes); i++) {
    rr_dtype d = (rr_dtype)77;
    rr__clear_error();
    CHECK(rr_dtype_from_name(bad_dtypes[i], &d) == RR_EINVAL && d == (rr_dtype)77,
          "dtype '%s' accepted", bad_dtypes[i]);
    CHECK(strstr(rr_last_error(), "bfloat16") && strstr(rr_last_error(), "double") &&
              strstr(rr_last_error(), "int8"),
          "error for '%s' does not list valid names: %s", bad_dtypes[i], rr_last_error());
    char quoted[64];
    snprintf(quoted, sizeof quoted, "'%s'", bad_dtypes[i]);
    CHECK(strstr(rr_last_error(), quoted) != NULL, "error does not name %s: %s", quoted,
          rr_last_error());
  }
  const char *bad_ops[] = {"", "add", "mean", "products", "xor", "sum2", "bandd"};
  for (size_t i = 0; i < RR__ARRAY_SIZE(bad_ops); i++) {
    rr_op o = (rr_op)77;
    rr__clear_error();
    CHECK(rr_op_from_name(bad_ops[i], &o) == RR_EINVAL && o == (rr_op)77, "op '%s' accepted",
          bad_ops[i]);
    CHECK(strstr(rr_last_error(), "bxor") && strstr(rr_last_error(), "avg"),
          "error for op '%s' does not list valid names: %s", bad_ops[i], rr_last_error());
  }
  rr_dtype d;
  rr_op o;
  CHECK(rr_dtype_from_name(NULL, &d) == RR_EINVAL, "NULL dtype name accepted");
  CHECK(rr_op_from_name(NULL, &o) == RR_EINVAL, "NULL op name accepted");
  CHECK(rr_dtype_from_name("float", NULL) == RR_EINVAL, "NULL dtype output accepted");
  CHECK(rr_op_from_name("sum", NULL) == RR_EINVAL, "NULL op output accepted");

  int bad[] = {-1, RR_NUM_DTYPES, RR_NUM_OPS, 1000};
  for (size_t i = 0; i < RR__ARRAY_SIZE(bad); i++) {
    if (bad[i] >= RR_NUM_DTYPES || bad[i] < 0)
      CHECK(rr_dtype_size((rr_dtype)bad[i]) == 0, "size of dtype %d", bad[i]);
    const char *dn = rr_dtype_name((rr_dtype)bad[i]), *on = rr_op_name((rr_op)bad[i]);
    if (bad[i] >= RR_NUM_DTYPES || bad[i] < 0)
      CHECK(dn != NULL && strcmp(dn, "invalid") == 0, "name of dtype %d", bad[i]);
    if (bad[i] >= RR_NUM_OPS || bad[i] < 0)
      CHECK(on != NULL && strcmp(on, "invalid") == 0, "name of op %d", bad[i]);
  }
}

/* ---------------------------------------------------------------------------------------------
 * check: which (dtype, op) pairs rr__op_check accepts.
 */

void test_check(void) {
  for (int d = 0; d < RR_NUM_DTYPES; d++)
    for (int o = 0; o < RR_NUM_OPS; o++) {
      int bitwise = o >= RR_BAND;
      rr__clear_error();
      int st = rr__op_check((rr_dtype)d, (rr_op)o);
      if (bitwise && t_is_float((rr_dtype)d)) {
        char want[160];
        snprintf(want, sizeof want,
                 "op %s is not defined for dtype %s (bitwise ops need an integer type)",
                 k_op_names[o], k_dtype_names[d]);
        CHECK(st == RR_EINVAL, "%s on %s accepted", k_op_names[o], k_dtype_names[d]);
        CHECK(strstr(rr_last_error(), want) != NULL, "message '%s', want '%s'", rr_last_error(),
              want);
      } else {
        CHECK(st == RR_OK, "%s on %s rejected: %s", k_op_names[o], k_dtype_names[d],
              rr_last_error());
      }
    }
  int bad[] = {-1, -100, RR_NUM_DTYPES, RR_NUM_OPS, 1000};
  for (size_t i = 0; i < RR__ARRAY_SIZE(bad); i++) {
    if (bad[i] < 0 || bad[i] >= RR_NUM_DTYPES) {
      rr__clear_error();
      CHECK(rr__op_check((rr_dtype)bad[i], RR_SUM) == RR_EINVAL, "dtype %d accepted", bad[i]);
      CHECK(strstr(rr_last_error(), "dtype") != NULL, "message '%s'", rr_last_error());
    }
    if (bad[i] < 0 || bad[i] >= RR_NUM_OPS) {
      rr__clear_error();
      CHECK(rr__op_check(RR_INT32, (rr_op)bad[i]) == RR_EINVAL, "op %d accepted", bad[i]);
      CHECK(strstr(rr_last_error(), "op") != NULL, "message '%s'", rr_last_error());
    }
  }
}
