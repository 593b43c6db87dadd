/* MT19937, the 32-bit Mersenne Twister, exactly as torch's CPU generator runs it
 * (aten/src/ATen/core/MT19937RNGEngine.h): init_genrand seeding from a 32-bit seed and the
 * standard tempering, so draw k equals C++ std::mt19937's k-th output for the same seed.
 * Internal: the sampler's shuffle depends on being bit-identical to torch's. */
#ifndef RR__SAMPLER_MT19937_H_
#define RR__SAMPLER_MT19937_H_

#include <stdint.h>

#define RR__MT_N 624

typedef struct rr__mt19937 {
  uint32_t s[RR__MT_N];
  int next; /* index of the next word to temper; RR__MT_N means "twist first" */
} rr__mt19937;

/* s[0] = seed, s[i] = 1812433253 * (s[i-1] ^ (s[i-1] >> 30)) + i. torch seeds with the low
 * 32 bits of its 64-bit seed; callers pass those. */
void rr__mt19937_seed(rr__mt19937 *mt, uint32_t seed);
/* The next 32-bit output. */
uint32_t rr__mt19937_u32(rr__mt19937 *mt);

#endif /* RR__SAMPLER_MT19937_H_ */
