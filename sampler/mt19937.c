/* MT19937 (Matsumoto & Nishimura 1998), the reference algorithm; see mt19937.h for why it
 * must match torch's generator word for word. */
#include "sampler/mt19937.h"

#define RR__MT_M 397
#define RR__MT_MATRIX_A 0x9908b0dfu
#define RR__MT_UPPER 0x80000000u
#define RR__MT_LOWER 0x7fffffffu

void rr__mt19937_seed(rr__mt19937 *mt, uint32_t seed) {
  mt->s[0] = seed;
  for (uint32_t i = 1; i < RR__MT_N; i++)
    mt->s[i] = 1812433253u * (mt->s[i - 1] ^ (mt->s[i - 1] >> 30)) + i;
  mt->next = RR__MT_N;
}

/* Regenerate all 624 words at once (the "twist"). */
static void rr__mt19937_twist(rr__mt19937 *mt) {
  uint32_t *s = mt->s;
  for (int i = 0; i < RR__MT_N; i++) {
    uint32_t y = (s[i] & RR__MT_UPPER) | (s[(i + 1) % RR__MT_N] & RR__MT_LOWER);
    s[i] = s[(i + RR__MT_M) % RR__MT_N] ^ (y >> 1) ^ ((y & 1u) ? RR__MT_MATRIX_A : 0u);
  }
  mt->next = 0;
}

uint32_t rr__mt19937_u32(rr__mt19937 *mt) {
  if (mt->next >= RR__MT_N) rr__mt19937_twist(mt);
  uint32_t y = mt->s[mt->next++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}
