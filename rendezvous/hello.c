/* The greeting on every socket between two ranks (rendezvous/lanes.c): encoding, the checks on
 * what arrives (garbage from a port scan or a foreign program must be refused, never
 * trusted), and the proofs that the greetings and the records in the store carry. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/bytes.h"
#include "common/siphash.h"
#include "common/status.h"
#include "common/util.h"
#include "rendezvous/lanes.h"

#define RR__HELLO_MAGIC 0x31425252u /* "RRB1" */
/* 2: the caller's socket nonce; the reply proves the token too. 3: which lane carries which
 * message changed (one-way TCP lanes, then segments numbered from 1: ring/pipe.c), so builds
 * that map them differently refuse each other at connect instead of reading one another's
 * bytes as the wrong message. 4: the call header's byte 9 says how device segments are handed
 * over (ring/hdr.c; it was padding, which version 3 refuses as a malformed header). */
#define RR__HELLO_VERSION 4

/* Layout: magic(4) version(4) group(48) from(4) to(4) index(4) nsockets(4) transport(16)
 *         token_hash(8) nonce(8) reserved(24) = 128 */
void rr__hello_encode(const rr__hello *h, uint8_t out[RR__HELLO_BYTES]) {
  memset(out, 0, RR__HELLO_BYTES);
  rr__put_u32(out, RR__HELLO_MAGIC);
  rr__put_u32(out + 4, RR__HELLO_VERSION);
  memcpy(out + 8, h->group, strnlen(h->group, RR__GROUP_ID_MAX - 1));
  rr__put_u32(out + 56, (uint32_t)h->from);
  rr__put_u32(out + 60, (uint32_t)h->to);
  rr__put_u32(out + 64, (uint32_t)h->index);
  rr__put_u32(out + 68, (uint32_t)h->nsockets);
  memcpy(out + 72, h->transport, strnlen(h->transport, sizeof h->transport - 1));
  rr__put_u64(out + 88, h->token_hash);
  rr__put_u64(out + 96, h->nonce);
}

int rr__hello_decode(const uint8_t in[RR__HELLO_BYTES], rr__hello *h) {
  if (rr__get_u32(in) != RR__HELLO_MAGIC)
    return rr__set_error(RR_EPROTO, "not a ringreduce peer (bad greeting)");
  if (rr__get_u32(in + 4) != RR__HELLO_VERSION)
    return rr__set_error(RR_EPROTO, "peer speaks wire version %u, this build %u",
                         rr__get_u32(in + 4), RR__HELLO_VERSION);
  memcpy(h->group, in + 8, RR__GROUP_ID_MAX);
  h->group[RR__GROUP_ID_MAX - 1] = '\0';
  h->from = (int32_t)rr__get_u32(in + 56);
  h->to = (int32_t)rr__get_u32(in + 60);
  h->index = (int32_t)rr__get_u32(in + 64);
  h->nsockets = (int32_t)rr__get_u32(in + 68);
  memcpy(h->transport, in + 72, sizeof h->transport);
  h->transport[sizeof h->transport - 1] = '\0';
  h->token_hash = rr__get_u64(in + 88);
  h->nonce = rr__get_u64(in + 96);
  if (h->from < 0 || h->to < 0 || h->index < 0 || h->nsockets < 1 || h->nsockets > 64 ||
      h->index >= h->nsockets)
    return rr__set_error(RR_EPROTO, "malformed greeting (from %d to %d socket %d of %d)", h->from,
                         h->to, h->index, h->nsockets);
  return RR_OK;
}

uint64_t rr__proof(const uint8_t *key, const char *fmt, ...) {
  if (!key) return 0;
  char ctx[768];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  uint64_t h = rr__siphash(key, ctx, (size_t)RR__MIN(n, (int)sizeof ctx - 1));
  return h ? h : 1;
}
