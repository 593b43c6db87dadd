/* Host reductions: one function per (dtype, op), chosen once per call, as Gloo's
 * type-erased reduce. The ring calls rr__reduce(); CUDA buffers go to cuda/ instead. Callers
 * check the pair first with rr__op_check (common/dtype.h, included here). */
#ifndef RR__RING_OP_H_
#define RR__RING_OP_H_

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h" /* rr__op_check: which (dtype, op) pairs rr__reduce has */
#include "common/half.h"  /* the float16 / bfloat16 conversions the reductions use */
#include "ringreduce/ringreduce.h"

/* dst[i] = a[i] (op) b[i] for i < n. dst may be the same pointer as a or b (not a partial
 * overlap). a is the left operand: for the ops here the result does not depend on operand
 * order except in NaN payloads and the sign of a zero from MIN/MAX, which callers that need
 * bit-identical results across ranks handle by always passing operands in rank order.
 *
 * AVG reduces as SUM. When avg_div > 0 the result is then divided by avg_div in the same
 * pass (the last reduction of an AVG); integers divide truncating toward zero, float16 and
 * bfloat16 divide in float32 and round once. Integer SUM/PROD wrap around (two's complement).
 * float16/bfloat16 compute in float32 and round to nearest even once per element. */
void rr__reduce(void *dst, const void *a, const void *b, size_t n, rr_dtype dtype, rr_op op,
                int avg_div);

/* buf[i] /= div, as the end of an AVG where no reduction is left to fuse it into (one rank). */
void rr__avg_scale(void *buf, size_t n, rr_dtype dtype, int div);

/* Tests only: on != 0 forces the portable C loops instead of the AVX2/F16C ones (the results
 * must be bit-identical, which tests/test_op.c checks). Returns 1 when this CPU has the
 * faster path, that is, when forcing changes anything. */
int rr__op_force_portable(int on);

#endif /* RR__RING_OP_H_ */
