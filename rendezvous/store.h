/* The rendezvous store, inside: the object behind the public rr_store_* calls, the table
 * of operations each kind of store (TCP, file) fills in, the key/value table both use, and
 * the TCP store's wire protocol (declared here so that tests can speak it, badly on
 * purpose).
 *
 * store.c checks every public argument (key length, value size, key counts) before an
 * operation of the table runs, so the operations may assume them valid. Each operation sets
 * the last error with a complete sentence (which store, which call, which key, why). */
#ifndef RR__RING_STORE_H_
#define RR__RING_STORE_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ringreduce/ringreduce.h"

/* Limits, shared by the client checks, the server checks and the file records. */
#define RR__STORE_MAX_KEY 4096                         /* bytes in a key (not counting the NUL) */
#define RR__STORE_MAX_VALUE (64u << 20)                /* bytes in a value */
#define RR__STORE_MAX_KEYS 65536                       /* keys in one wait / check */
#define RR__STORE_MAX_TOKEN 4096                       /* bytes in a job token (handshake) */
#define RR__STORE_MAX_BODY ((64u << 20) + (64u << 10)) /* bytes in one request body */
#define RR__STORE_DEFAULT_TIMEOUT_MS 300000            /* torch's store default: 300 s */
#define RR__STORE_GRACE_MS 2000 /* a client waits this much past a server-side deadline */

/* ---------------------------------------------------------------------------------------------
 * Operations of one kind of store. Arguments are already checked by store.c. Every call
 * may block up to the store's timeout (get and wait: up to timeout_ms, plus a short grace
 * for the TCP client), never longer. A wait on the TCP store counts a key as seen once it
 * existed (as torch's server does: a later delete does not undo it); the file store polls
 * until every key exists at one time.
 */
typedef struct rr__store_ops {
  int (*set)(rr_store *s, const char *key, const void *value, size_t len);
  int (*get)(rr_store *s, const char *key, int64_t timeout_ms, void **value, size_t *len);
  int (*add)(rr_store *s, const char *key, int64_t delta, int64_t *result);
  int (*wait)(rr_store *s, const char *const *keys, int nkeys, int64_t timeout_ms);
  int (*check)(rr_store *s, const char *const *keys, int nkeys, int *exists);
  int (*del)(rr_store *s, const char *key, int *deleted);
  int (*port)(const rr_store *s); /* -1 when the store has no port */
  void (*free)(rr_store *s);
} rr__store_ops;

/* The common head of every store; each kind embeds it as its first member. */
struct rr_store {
  const rr__store_ops *ops;
  int64_t timeout_ms; /* > 0 */
};

/* The constructors behind rr_store_tcp and rr_store_file (timeout_ms already > 0).
 * token: the job token sent in the handshake; the master checks that clients present the
 * same one. NULL or "" on the master accepts any client (what rr_store_tcp does today). */
int rr__store_tcp_open(const char *host, int port, int is_master, int64_t timeout_ms,
                       const char *token, rr_store **store);
int rr__store_file_open(const char *path, int64_t timeout_ms, rr_store **store);

/* "'key'" for error messages: the key cut to 128 bytes, with a " (N bytes)" note when cut. */
const char *rr__store_key_str(const char *key, size_t klen, char *buf, size_t n);

/* ---------------------------------------------------------------------------------------------
 * Key/value table: binary keys (ptr, len) to binary values. Not thread safe.
 */
typedef struct rr__kv rr__kv;
typedef struct rr__kv_val {
  uint8_t *data; /* malloc'd (NULL when len == 0) */
  size_t len;
} rr__kv_val;

int rr__kv_new(rr__kv **kv);
void rr__kv_free(rr__kv *kv);
size_t rr__kv_count(const rr__kv *kv);
/* The value under key, or NULL. Valid until the table is next changed. */
const rr__kv_val *rr__kv_get(const rr__kv *kv, const void *key, size_t klen);
/* Store value (taken over: freed by the table, also when this fails). RR_ENOMEM. */
int rr__kv_set(rr__kv *kv, const void *key, size_t klen, void *value, size_t len);
/* 1 when the key was there, 0 when not. */
int rr__kv_del(rr__kv *kv, const void *key, size_t klen);

/* What an add does to the value stored: its outcome, shared by both stores. */
enum { RR__ADD_OK = 0, RR__ADD_NOTINT = 1, RR__ADD_OVERFLOW = 2 };
/* Parse value (absent: NULL, 0) as ASCII decimal, add delta; *out_text gets the new value's
 * text (NUL terminated, at most 21 bytes + NUL, in a buffer of 24). */
int rr__store_add_value(const rr__kv_val *old, int64_t delta, int64_t *result, char out_text[24]);

/* ---------------------------------------------------------------------------------------------
 * TCP wire protocol, version 1. Every message starts with a 24-byte header, little endian:
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
 * Arguments: HELLO [token], SET [key, value], GET/ADD/DELETE [key], WAIT/CHECK [key...].
 * A reply body is the value (GET) or empty. Keys are 1..4096 bytes without NUL.
 *
 * A connection starts with HELLO (the job token; a master holding a token refuses others
 * with RR__SST_DENIED). Then one request at a time, each answered once; GET and WAIT are
 * answered when their keys exist or, with RR__SST_TIMEOUT, at their deadline. The server
 * closes a connection that breaks any rule above.
 */
#define RR__STORE_REQ_MAGIC 0x71535252u /* bytes 'R' 'R' 'S' 'q' */
#define RR__STORE_REP_MAGIC 0x61535252u /* bytes 'R' 'R' 'S' 'a' */
#define RR__STORE_VERSION 1
#define RR__STORE_HDR 24

enum {
  RR__SOP_HELLO = 1,
  RR__SOP_SET = 2,
  RR__SOP_GET = 3,
  RR__SOP_ADD = 4,
  RR__SOP_WAIT = 5,
  RR__SOP_CHECK = 6,
  RR__SOP_DELETE = 7,
  RR__SOP_MAX = 7
};

enum {
  RR__SST_OK = 0,
  RR__SST_TIMEOUT = 1,  /* GET / WAIT deadline passed */
  RR__SST_NOTINT = 2,   /* ADD to a value that is not an integer */
  RR__SST_OVERFLOW = 3, /* ADD would overflow int64 */
  RR__SST_DENIED = 4,   /* HELLO: wrong job token or protocol version */
  RR__SST_MAX = 4
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

#endif /* RR__RING_STORE_H_ */
