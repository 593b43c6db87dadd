/* The DDP wrapper's element loops on host buckets (ddp/hooks.c), internal (rr__ prefix, not
 * exported). Declared here only so that tests/test_ddp_elem.c can compare them bit for bit
 * with the device versions (cuda/ddp_elem.cuh, run by cuda/ddp.cu); the wrapper itself is
 * their only other caller. Buckets hold gradients of dtype d (float16, bfloat16, float32,
 * float64); the fp16 / bf16 hooks put `wire` (RR_FLOAT16 or RR_BFLOAT16) on the wire. */
#ifndef RR__DDP_DDP_HOST_H_
#define RR__DDP_DDP_HOST_H_

#include <stddef.h>
#include <stdint.h>

#include "ringreduce/ringreduce.h"

/* Gradient -> bucket: times 1/world in the type's op-math when mul, else a plain copy. */
void rr__ddp_copy_in(void *dst, const void *src, size_t n, rr_dtype d, int mul, int world);
/* torch's allreduce_hook: the bucket divided by world, in place. */
void rr__ddp_divide(void *buf, size_t n, rr_dtype d, int world);
/* fp16 / bf16 hooks: round to the wire type, divide by world, round again. */
void rr__ddp_compress(uint16_t *dst, const void *src, size_t n, rr_dtype d, rr_dtype wire,
                      int world);
/* The reduced wire values back in the gradient's type. */
void rr__ddp_decompress(void *dst, const uint16_t *src, size_t n, rr_dtype d, rr_dtype wire);

#endif /* RR__DDP_DDP_HOST_H_ */
