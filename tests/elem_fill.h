/* Random 16-bit float elements for the element tests that compare device code with host
 * code bit for bit (test_cuda_elem.c, test_ddp_elem.c), so both draw from the same mix:
 * half raw bit patterns (NaN payloads, subnormals, infinities come up naturally), an
 * eighth special values, the rest ordinary values exact in the type. Header only: those
 * tests link the library alone, not the test harness. r is a fresh 64-bit random number. */
#ifndef RR__TESTS_ELEM_FILL_H_
#define RR__TESTS_ELEM_FILL_H_

#include <stdint.h>

#include "common/half.h"

static inline uint16_t t_elem_f16(uint64_t r) {
  static const uint16_t special[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe55,
                                     0x0001, 0x03ff, 0x0400, 0x7bff, 0x3c00, 0x3c01, 0xbc00};
  unsigned kind = (unsigned)(r >> 60); /* 0..15 */
  return kind < 8    ? (uint16_t)r
         : kind < 10 ? special[(r >> 16) % (sizeof special / 2)]
                     : rr__float_to_half((float)((int)(r % 4097) - 2048) / 8.0f);
}

static inline uint16_t t_elem_bf16(uint64_t r) {
  static const uint16_t special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc5,
                                     0x0001, 0x007f, 0x0080, 0x7f7f, 0x3f80, 0x3f81, 0xbf80};
  unsigned kind = (unsigned)(r >> 60);
  return kind < 8    ? (uint16_t)r
         : kind < 10 ? special[(r >> 16) % (sizeof special / 2)]
                     : rr__float_to_bf16((float)((int)(r % 65537) - 32768) / 16.0f);
}

#endif /* RR__TESTS_ELEM_FILL_H_ */
