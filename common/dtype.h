/* What every layer knows about a dtype and an op: its names, its size, and which ops apply
 * to it. The reductions themselves live above (ring/op.c on the host, cuda/reduce.cu on the
 * device); both have a loop for exactly the pairs rr__op_applies accepts, so the rule is
 * stated here once and the group, the ring and the CUDA layer all ask it. The public
 * rr_dtype_size / rr_dtype_name / rr_op_name / rr_*_from_name are defined in dtype.c. */
#ifndef RR__COMMON_DTYPE_H_
#define RR__COMMON_DTYPE_H_

#include "ringreduce/ringreduce.h"

#ifdef __cplusplus
extern "C" { /* cuda/reduce.cu asks rr__op_applies too */
#endif

static inline int rr__dtype_valid(rr_dtype dtype) {
  return (unsigned)dtype < RR_NUM_DTYPES;
}
static inline int rr__op_valid(rr_op op) {
  return (unsigned)op < RR_NUM_OPS;
}

/* 1 when op is defined for dtype: both in range, and a bitwise op (BAND, BOR, BXOR) only on
 * an integer dtype. Sets no error. */
int rr__op_applies(rr_dtype dtype, rr_op op);

/* RR_OK if op applies to dtype; RR_EINVAL with the last error set otherwise (bitwise ops
 * on floating types, values out of range). */
int rr__op_check(rr_dtype dtype, rr_op op);

#ifdef __cplusplus
}
#endif

#endif /* RR__COMMON_DTYPE_H_ */
