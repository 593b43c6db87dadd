/* The dtype and op tables: names (canonical and aliases), sizes, and which ops each dtype
 * allows (common/dtype.h says why they sit below every layer). */
#include "common/dtype.h"

#include <stdio.h>
#include <strings.h>

#include "common/status.h"
#include "common/util.h"

/* ---------------------------------------------------------------------------------------------
 * Which ops apply: integers take every op, floating types all but the bitwise ones (the
 * contract ringreduce.h states on rr_op).
 */

static const unsigned char rr__dtype_integer[RR_NUM_DTYPES] = {
    [RR_INT8] = 1,
    [RR_UINT8] = 1,
    [RR_INT32] = 1,
    [RR_INT64] = 1,
};

static int rr__op_bitwise(rr_op op) {
  return op == RR_BAND || op == RR_BOR || op == RR_BXOR;
}

int rr__op_applies(rr_dtype dtype, rr_op op) {
  if (!rr__dtype_valid(dtype) || !rr__op_valid(op)) return 0;
  return !rr__op_bitwise(op) || rr__dtype_integer[dtype];
}

int rr__op_check(rr_dtype dtype, rr_op op) {
  if (!rr__dtype_valid(dtype))
    return rr__set_error(RR_EINVAL, "invalid dtype %d (valid: 0..%d)", (int)dtype,
                         RR_NUM_DTYPES - 1);
  if (!rr__op_valid(op))
    return rr__set_error(RR_EINVAL, "invalid op %d (valid: 0..%d)", (int)op, RR_NUM_OPS - 1);
  if (!rr__op_applies(dtype, op))
    return rr__set_error(RR_EINVAL,
                         "op %s is not defined for dtype %s (bitwise ops need an integer type)",
                         rr_op_name(op), rr_dtype_name(dtype));
  return RR_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Names. The first name of each value is its canonical one (nccl-tests' spelling); the rest
 * are aliases accepted when parsing.
 */

typedef struct rr__name {
  const char *name;
  int value;
} rr__name;

static const rr__name rr__dtype_names[] = {
    {"int8", RR_INT8},       {"uint8", RR_UINT8},    {"int32", RR_INT32},
    {"int64", RR_INT64},     {"half", RR_FLOAT16},   {"bfloat16", RR_BFLOAT16},
    {"float", RR_FLOAT32},   {"double", RR_FLOAT64}, {"char", RR_INT8},
    {"u8", RR_UINT8},        {"int", RR_INT32},      {"long", RR_INT64},
    {"float16", RR_FLOAT16}, {"fp16", RR_FLOAT16},   {"bf16", RR_BFLOAT16},
    {"float32", RR_FLOAT32}, {"fp32", RR_FLOAT32},   {"float64", RR_FLOAT64},
    {"fp64", RR_FLOAT64},
};

static const rr__name rr__op_names[] = {
    {"sum", RR_SUM},   {"prod", RR_PROD}, {"min", RR_MIN},   {"max", RR_MAX},      {"avg", RR_AVG},
    {"band", RR_BAND}, {"bor", RR_BOR},   {"bxor", RR_BXOR}, {"product", RR_PROD},
};

static const size_t rr__dtype_sizes[RR_NUM_DTYPES] = {
    [RR_INT8] = 1,    [RR_UINT8] = 1,    [RR_INT32] = 4,   [RR_INT64] = 8,
    [RR_FLOAT16] = 2, [RR_BFLOAT16] = 2, [RR_FLOAT32] = 4, [RR_FLOAT64] = 8,
};

static const char *rr__name_of(const rr__name *names, size_t count, int value) {
  for (size_t i = 0; i < count; i++)
    if (names[i].value == value) return names[i].name;
  return "invalid";
}

static int rr__parse_name(const rr__name *names, size_t count, const char *what, const char *name,
                          int *value) {
  if (name != NULL && value != NULL)
    for (size_t i = 0; i < count; i++)
      if (strcasecmp(name, names[i].name) == 0) {
        *value = names[i].value;
        return RR_OK;
      }
  /* List every accepted spelling so the user can fix the call without reading the source. */
  char valid[256];
  size_t len = 0;
  valid[0] = '\0';
  for (size_t i = 0; i < count && len < sizeof valid; i++)
    len += (size_t)snprintf(valid + len, sizeof valid - len, "%s%s", i ? ", " : "", names[i].name);
  if (value == NULL) return rr__set_error(RR_EINVAL, "%s_from_name: NULL output", what);
  return rr__set_error(RR_EINVAL, "unknown %s '%s' (valid, any case: %s)", what,
                       name ? name : "(null)", valid);
}

size_t rr_dtype_size(rr_dtype dtype) {
  return rr__dtype_valid(dtype) ? rr__dtype_sizes[dtype] : 0;
}

const char *rr_dtype_name(rr_dtype dtype) {
  return rr__name_of(rr__dtype_names, RR__ARRAY_SIZE(rr__dtype_names), (int)dtype);
}

const char *rr_op_name(rr_op op) {
  return rr__name_of(rr__op_names, RR__ARRAY_SIZE(rr__op_names), (int)op);
}

int rr_dtype_from_name(const char *name, rr_dtype *dtype) {
  int v;
  int st = rr__parse_name(rr__dtype_names, RR__ARRAY_SIZE(rr__dtype_names), "dtype", name,
                          dtype ? &v : NULL);
  if (st == RR_OK) *dtype = (rr_dtype)v;
  return st;
}

int rr_op_from_name(const char *name, rr_op *op) {
  int v;
  int st = rr__parse_name(rr__op_names, RR__ARRAY_SIZE(rr__op_names), "op", name, op ? &v : NULL);
  if (st == RR_OK) *op = (rr_op)v;
  return st;
}
