/* The rendezvous store, inside: the object behind the public rr_store_* calls, the table
 * of operations each kind of store (TCP, file) fills in and the key/value table both use.
 * The TCP store's wire protocol has a header of its own, store_proto.h.
 *
 * store.c checks every public argument (key length, value size, key counts) before an
 * operation of the table runs, so the operations may assume them valid. Each operation sets
 * the last error with a complete sentence (which store, which call, which key, why). */
#ifndef RR__RING_STORE_H_
#define RR__RING_STORE_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/bytes.h" /* unused here; store_file.c relies on getting it this way */
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
 * token: the job token. It never crosses the wire: the handshake (store_proto.h) proves it
 * both ways with MACs over fresh nonces. A master with a token admits only clients that
 * prove it; a client with a token talks only to a master that proves it. NULL or "": no
 * proof is given or asked for (what rr_store_tcp does). */
int rr__store_tcp_open(const char *host, int port, int is_master, int64_t timeout_ms,
                       const char *token, rr_store **store);
/* A master's rr__store_tcp_open serving on lfd, a listener already bound to `port`
 * (rr_pg_grow_pending keeps one open between growths), taken over also on failure. */
int rr__store_tcp_serve_fd(const char *host, int port, int lfd, int64_t timeout_ms,
                           const char *token, rr_store **store);
int rr__store_file_open(const char *path, int64_t timeout_ms, rr_store **store);
/* Before rr_store_free of a TCP store whose server this process runs, in a process that is
 * failing with `status`: its clients are left `why` (rr__srv_stop_because) instead of a reset
 * connection. Other stores: nothing. */
void rr__store_goodbye(rr_store *store, const char *why, int status);

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

#endif /* RR__RING_STORE_H_ */
