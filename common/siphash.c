#include "common/siphash.h"

#include <string.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND       \
  do {                 \
    v0 += v1;          \
    v1 = ROTL(v1, 13); \
    v1 ^= v0;          \
    v0 = ROTL(v0, 32); \
    v2 += v3;          \
    v3 = ROTL(v3, 16); \
    v3 ^= v2;          \
    v0 += v3;          \
    v3 = ROTL(v3, 21); \
    v3 ^= v0;          \
    v2 += v1;          \
    v1 = ROTL(v1, 17); \
    v1 ^= v2;          \
    v2 = ROTL(v2, 32); \
  } while (0)

static uint64_t rr__le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

uint64_t rr__siphash(const uint8_t key[16], const void *data, size_t len) {
  const uint8_t *in = data;
  uint64_t k0 = rr__le64(key), k1 = rr__le64(key + 8);
  uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
  uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
  size_t full = len - len % 8;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m = rr__le64(in + i);
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
  }
  uint64_t b = (uint64_t)len << 56;
  for (size_t i = 0; i < len % 8; i++) b |= (uint64_t)in[full + i] << (8 * i);
  v3 ^= b;
  SIPROUND;
  SIPROUND;
  v0 ^= b;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

void rr__token_key(const char *token, uint8_t key[16]) {
  memset(key, 0, 16);
  if (!token || !*token) return;
  /* Two halves from two fixed keys: any token string becomes 128 key bits. */
  static const uint8_t k0[16] = "ringreduce-key-0", k1[16] = "ringreduce-key-1";
  uint64_t a = rr__siphash(k0, token, strlen(token)), b = rr__siphash(k1, token, strlen(token));
  for (int i = 0; i < 8; i++)
    key[i] = (uint8_t)(a >> (8 * i)), key[8 + i] = (uint8_t)(b >> (8 * i));
}
