/* SipHash-2-4 (Aumasson & Bernstein): a keyed 64-bit PRF. Used to prove knowledge of the
 * job token in handshakes without sending the token itself. */
#ifndef RR__COMMON_SIPHASH_H_
#define RR__COMMON_SIPHASH_H_

#include <stddef.h>
#include <stdint.h>

uint64_t rr__siphash(const uint8_t key[16], const void *data, size_t len);

/* The 128-bit key of a job token string (any length); all zero when token is NULL/empty. */
void rr__token_key(const char *token, uint8_t key[16]);

#endif /* RR__COMMON_SIPHASH_H_ */
