/* The TCP store's wire protocol, version 2: the one thing its server (store_server.c) and
 * client (store_client.c) must agree on, kept apart from both so that tests and fuzzers can
 * speak it byte for byte, malformed on purpose when they want to. Limits it refers to
 * (RR__STORE_MAX_*) are the store's, in store.h.
 *
 * Every message starts with a 24-byte header, little endian:
 *
 *    0  u32 magic      RR__STORE_REQ_MAGIC ("RRSq") / RR__STORE_REP_MAGIC ("RRSa")
 *    4  u8  op         RR__SOP_*; a reply echoes the request's
 *    5  u8  status     0 in a request; RR__SST_* in a reply
 *    6  u16 reserved   0
 *    8  u32 nargs      request: number of arguments; reply: 0
 *   12  u32 body_len   bytes after the header (request <= RR__STORE_MAX_BODY,
 *                      reply <= RR__STORE_MAX_VALUE)
 *   16  i64 num        HELLO: protocol version; GET/WAIT: timeout in ms (> 0); ADD: delta.
 *                      Reply: ADD the new value, CHECK 1/0, DELETE 1/0, HELLO the version,
 *                      a WAIT that timed out the index of the first key still missing.
 *
 * A request body is nargs arguments, each u32 length + bytes, filling body_len exactly.
 * A reply with status FAILED, to any request, carries the server's reason (text) as body.
 * A server that gives up also sends it unasked, with op 0, on each idle connection before
 * closing it (the goodbye): a client takes it as the answer to whatever it asks next. Its num
 * is 0, or RR_EMISMATCH when the serving process failed on the group's disagreeing settings
 * (every rank then reports that status).
 * Arguments: HELLO [client nonce], AUTH [client MAC], SET [key, value], GET/ADD/DELETE
 * [key], WAIT/CHECK [key...]. A reply body is the value (GET), the challenge (HELLO) or
 * empty. Keys are 1..4096 bytes without NUL.
 *
 * The handshake proves knowledge of the job token without sending it, and makes a recorded
 * handshake worthless (each side's MAC covers the other side's fresh nonce):
 *
 *   client -> HELLO  num = version, [cn: 16 random bytes]
 *   server <- HELLO  OK, body = sn (16 random bytes) + MAC(key, server, cn, sn) (8 bytes),
 *                    or DENIED (another protocol version; num = the server's)
 *   client -> AUTH   [MAC(key, client, cn, sn)]   (checked by a client that holds a token:
 *                    a store that cannot prove the token is not this job's)
 *   server <- AUTH   OK, or DENIED (the MAC does not prove this job's token)
 *
 * MAC is SipHash-2-4 keyed with the token's key (common/siphash.h) over a label naming the
 * side and both nonces; without a token the key is all zeros and nobody checks it. Until
 * AUTH succeeds a connection may send only these two messages, each of its exact size, and
 * must finish within the pre-authentication deadline. Then one request at a time, each
 * answered once; GET and WAIT are answered when their keys exist or, with RR__SST_TIMEOUT,
 * at their deadline. The server closes a connection that breaks any rule above.
 */
#ifndef RR__RENDEZVOUS_STORE_PROTO_H_
#define RR__RENDEZVOUS_STORE_PROTO_H_

#include <stdint.h>
#include <string.h>

#include "common/bytes.h"
#include "common/siphash.h"
#include "rendezvous/store.h"

#define RR__STORE_REQ_MAGIC 0x71535252u /* bytes 'R' 'R' 'S' 'q' */
#define RR__STORE_REP_MAGIC 0x61535252u /* bytes 'R' 'R' 'S' 'a' */
#define RR__STORE_VERSION 2
#define RR__STORE_NONCE 16 /* bytes of a handshake nonce */
#define RR__STORE_MAC 8    /* bytes of a handshake MAC */
#define RR__STORE_HDR 24

enum {
  RR__SOP_HELLO = 1,
  RR__SOP_SET = 2,
  RR__SOP_GET = 3,
  RR__SOP_ADD = 4,
  RR__SOP_WAIT = 5,
  RR__SOP_CHECK = 6,
  RR__SOP_DELETE = 7,
  RR__SOP_AUTH = 8,
  RR__SOP_MAX = 8
};

enum {
  RR__SST_OK = 0,
  RR__SST_TIMEOUT = 1,  /* GET / WAIT deadline passed */
  RR__SST_NOTINT = 2,   /* ADD to a value that is not an integer */
  RR__SST_OVERFLOW = 3, /* ADD would overflow int64 */
  RR__SST_DENIED = 4,   /* HELLO: another protocol version; AUTH: not this job's token */
  RR__SST_FAILED = 5,   /* the server is giving up (the body says why); it closes next */
  RR__SST_MAX = 5
};

typedef struct rr__store_hdr {
  uint32_t magic;
  uint8_t op;
  uint8_t status;
  uint16_t reserved;
  uint32_t nargs;
  uint32_t body_len;
  int64_t num;
} rr__store_hdr;

static inline void rr__store_hdr_encode(const rr__store_hdr *h, uint8_t out[RR__STORE_HDR]) {
  rr__put_u32(out, h->magic);
  out[4] = h->op;
  out[5] = h->status;
  out[6] = (uint8_t)h->reserved;
  out[7] = (uint8_t)(h->reserved >> 8);
  rr__put_u32(out + 8, h->nargs);
  rr__put_u32(out + 12, h->body_len);
  rr__put_u64(out + 16, (uint64_t)h->num);
}

static inline void rr__store_hdr_decode(const uint8_t in[RR__STORE_HDR], rr__store_hdr *h) {
  h->magic = rr__get_u32(in);
  h->op = in[4];
  h->status = in[5];
  h->reserved = (uint16_t)(in[6] | (in[7] << 8));
  h->nargs = rr__get_u32(in + 8);
  h->body_len = rr__get_u32(in + 12);
  h->num = (int64_t)rr__get_u64(in + 16);
}

/* The handshake MAC of one side (server: 1, client: 2) over both nonces. */
static inline void rr__store_mac(const uint8_t key[16], int side, const uint8_t cn[RR__STORE_NONCE],
                                 const uint8_t sn[RR__STORE_NONCE], uint8_t out[RR__STORE_MAC]) {
  uint8_t msg[20 + 2 * RR__STORE_NONCE];
  memcpy(msg, side == 1 ? "rr-store-v2 server: " : "rr-store-v2 client: ", 20);
  memcpy(msg + 20, cn, RR__STORE_NONCE);
  memcpy(msg + 20 + RR__STORE_NONCE, sn, RR__STORE_NONCE);
  rr__put_u64(out, rr__siphash(key, msg, sizeof msg));
}

/* Compare MACs in time that does not depend on where they differ. */
static inline int rr__store_mac_equal(const uint8_t *a, const uint8_t *b) {
  uint8_t d = 0;
  for (int i = 0; i < RR__STORE_MAC; i++) d |= (uint8_t)(a[i] ^ b[i]);
  return d == 0;
}

#endif /* RR__RENDEZVOUS_STORE_PROTO_H_ */
