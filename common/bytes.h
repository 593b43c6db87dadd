/* Little-endian integers in byte buffers: every message the library puts on a wire (call
 * headers, control messages, greetings, the store's protocol) is written and read with
 * these, so the format never depends on the host's byte order or alignment. */
#ifndef RR__COMMON_BYTES_H_
#define RR__COMMON_BYTES_H_

#include <stdint.h>

static inline void rr__put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t rr__get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline void rr__put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint64_t rr__get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

#endif /* RR__COMMON_BYTES_H_ */
