/* The public rr_store_* calls: check every argument here, once, so that nothing invalid is
 * sent or written, then dispatch to the store's table of operations (store_client.c for
 * the TCP store, whose master also runs store_server.c; store_file.c). Also the key/value table and
 * the add arithmetic both kinds share. */
#include "rendezvous/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"

/* ---------------------------------------------------------------------------------------------
 * Argument checks.
 */
const char *rr__store_key_str(const char *key, size_t klen, char *buf, size_t n) {
  /* Printable copy: keys may hold any byte but NUL; control bytes become '?'. */
  size_t show = RR__MIN(klen, (size_t)128);
  size_t o = 0;
  if (n < 8) {
    if (n) buf[0] = '\0';
    return buf;
  }
  buf[o++] = '\'';
  for (size_t i = 0; i < show && o + 2 < n; i++) {
    unsigned char c = (unsigned char)key[i];
    buf[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  buf[o++] = '\'';
  buf[o] = '\0';
  if (show < klen && o + 1 < n) snprintf(buf + o, n - o, "... (%zu bytes)", klen);
  return buf;
}

static int rr__store_check(const rr_store *s, const char *call) {
  if (!s) return rr__set_error(RR_EINVAL, "rr_store_%s: the store is NULL", call);
  return RR_OK;
}

static int rr__key_check(const char *key, const char *call, size_t *klen) {
  char ks[192];
  if (!key) return rr__set_error(RR_EINVAL, "rr_store_%s: the key is NULL", call);
  size_t n = strnlen(key, RR__STORE_MAX_KEY + 1);
  if (n == 0)
    return rr__set_error(RR_EINVAL, "rr_store_%s: the key is empty (keys are 1 to %d bytes)", call,
                         RR__STORE_MAX_KEY);
  if (n > RR__STORE_MAX_KEY)
    return rr__set_error(RR_EINVAL, "rr_store_%s: key %s is longer than the limit of %d bytes",
                         call, rr__store_key_str(key, n, ks, sizeof ks), RR__STORE_MAX_KEY);
  if (klen) *klen = n;
  return RR_OK;
}

static int rr__keys_check(const char *const *keys, int nkeys, const char *call) {
  if (nkeys < 0)
    return rr__set_error(RR_EINVAL, "rr_store_%s: nkeys is %d (must be >= 0)", call, nkeys);
  if (nkeys > RR__STORE_MAX_KEYS)
    return rr__set_error(RR_EINVAL, "rr_store_%s: %d keys are more than the limit of %d", call,
                         nkeys, RR__STORE_MAX_KEYS);
  if (nkeys > 0 && !keys)
    return rr__set_error(RR_EINVAL, "rr_store_%s: keys is NULL with nkeys = %d", call, nkeys);
  uint64_t body = 0;
  for (int i = 0; i < nkeys; i++) {
    size_t klen;
    int rc = rr__key_check(keys[i], call, &klen);
    if (rc != RR_OK) return rr__prefix_error(rc, "key %d of %d", i, nkeys);
    body += 4 + klen;
  }
  if (body > RR__STORE_MAX_BODY)
    return rr__set_error(RR_EINVAL,
                         "rr_store_%s: %d keys take %" PRIu64
                         " bytes, more than the limit of %u "
                         "bytes for one request",
                         call, nkeys, body, (unsigned)RR__STORE_MAX_BODY);
  return RR_OK;
}

static int64_t rr__store_timeout(int64_t timeout_ms) {
  return timeout_ms > 0 ? timeout_ms : RR__STORE_DEFAULT_TIMEOUT_MS;
}

/* ---------------------------------------------------------------------------------------------
 * Public calls.
 */
int rr_store_tcp(const char *host, int port, int is_master, int64_t timeout_ms, rr_store **store) {
  if (!store) return rr__set_error(RR_EINVAL, "rr_store_tcp: store is NULL");
  *store = NULL;
  if (!host || !*host)
    return rr__set_error(RR_EINVAL, "rr_store_tcp: the host is %s", host ? "empty" : "NULL");
  if (port < 0 || port > 65535)
    return rr__set_error(RR_EINVAL, "rr_store_tcp: port %d is out of range 0..65535", port);
  if (port == 0 && !is_master)
    return rr__set_error(RR_EINVAL,
                         "rr_store_tcp: a client needs the master's port (0 is only for the "
                         "master, which then picks a free one)");
  return rr__store_tcp_open(host, port, is_master, rr__store_timeout(timeout_ms), NULL, store);
}

int rr_store_file(const char *path, int64_t timeout_ms, rr_store **store) {
  if (!store) return rr__set_error(RR_EINVAL, "rr_store_file: store is NULL");
  *store = NULL;
  if (!path || !*path)
    return rr__set_error(RR_EINVAL, "rr_store_file: the path is %s", path ? "empty" : "NULL");
  return rr__store_file_open(path, rr__store_timeout(timeout_ms), store);
}

int rr_store_port(const rr_store *store) {
  return store ? store->ops->port(store) : -1;
}

int rr_store_set(rr_store *store, const char *key, const void *value, size_t len) {
  RR__CHECK(rr__store_check(store, "set"));
  RR__CHECK(rr__key_check(key, "set", NULL));
  if (len > RR__STORE_MAX_VALUE)
    return rr__set_error(RR_EINVAL, "rr_store_set: a value of %zu bytes is over the limit of %u",
                         len, (unsigned)RR__STORE_MAX_VALUE);
  if (len > 0 && !value)
    return rr__set_error(RR_EINVAL, "rr_store_set: the value is NULL with len = %zu", len);
  return store->ops->set(store, key, value, len);
}

int rr_store_get(rr_store *store, const char *key, void **value, size_t *len) {
  RR__CHECK(rr__store_check(store, "get"));
  RR__CHECK(rr__key_check(key, "get", NULL));
  if (!value || !len) return rr__set_error(RR_EINVAL, "rr_store_get: value or len is NULL");
  *value = NULL;
  *len = 0;
  return store->ops->get(store, key, store->timeout_ms, value, len);
}

int rr_store_add(rr_store *store, const char *key, int64_t delta, int64_t *result) {
  RR__CHECK(rr__store_check(store, "add"));
  RR__CHECK(rr__key_check(key, "add", NULL));
  int64_t dummy;
  return store->ops->add(store, key, delta, result ? result : &dummy);
}

int rr_store_wait(rr_store *store, const char *const *keys, int nkeys, int64_t timeout_ms) {
  RR__CHECK(rr__store_check(store, "wait"));
  RR__CHECK(rr__keys_check(keys, nkeys, "wait"));
  if (timeout_ms < 0)
    return rr__set_error(RR_EINVAL,
                         "rr_store_wait: timeout %" PRId64 " ms is negative (0: the store's)",
                         timeout_ms);
  if (nkeys == 0) return RR_OK; /* as torch: waiting for no key returns at once */
  return store->ops->wait(store, keys, nkeys, timeout_ms > 0 ? timeout_ms : store->timeout_ms);
}

int rr_store_check(rr_store *store, const char *const *keys, int nkeys, int *exists) {
  RR__CHECK(rr__store_check(store, "check"));
  RR__CHECK(rr__keys_check(keys, nkeys, "check"));
  if (!exists) return rr__set_error(RR_EINVAL, "rr_store_check: exists is NULL");
  *exists = 0;
  if (nkeys == 0) {
    *exists = 1;
    return RR_OK;
  }
  return store->ops->check(store, keys, nkeys, exists);
}

int rr_store_delete(rr_store *store, const char *key, int *deleted) {
  RR__CHECK(rr__store_check(store, "delete"));
  RR__CHECK(rr__key_check(key, "delete", NULL));
  int dummy;
  return store->ops->del(store, key, deleted ? deleted : &dummy);
}

void rr_store_free(rr_store *store) {
  if (store) store->ops->free(store);
}

/* ---------------------------------------------------------------------------------------------
 * The add arithmetic: values are ASCII decimal, as torch stores them.
 */
static int rr__parse_i64(const uint8_t *p, size_t n, int64_t *out) {
  size_t i = 0;
  int neg = 0;
  if (n == 0 || n > 20) return -1;
  if (p[0] == '-' || p[0] == '+') {
    neg = p[0] == '-';
    i = 1;
    if (n == 1) return -1;
  }
  uint64_t v = 0;
  const uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    uint64_t d = (uint64_t)(p[i] - '0');
    if (v > (lim - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  return 0;
}

int rr__store_add_value(const rr__kv_val *old, int64_t delta, int64_t *result, char out_text[24]) {
  int64_t cur = 0;
  if (old && rr__parse_i64(old->data, old->len, &cur) != 0) return RR__ADD_NOTINT;
  int64_t sum;
  if (__builtin_add_overflow(cur, delta, &sum)) return RR__ADD_OVERFLOW;
  *result = sum;
  snprintf(out_text, 24, "%" PRId64, sum);
  return RR__ADD_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Key/value table: chained hashing (FNV-1a), doubling when the load passes 1.
 */
typedef struct rr__kv_entry {
  struct rr__kv_entry *next;
  uint64_t hash;
  rr__kv_val val;
  size_t klen;
  uint8_t key[]; /* klen bytes */
} rr__kv_entry;

struct rr__kv {
  rr__kv_entry **buckets;
  size_t nbuckets; /* a power of two */
  size_t count;
};

static uint64_t rr__kv_hash(const void *key, size_t klen) {
  const uint8_t *p = key;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < klen; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

int rr__kv_new(rr__kv **out) {
  rr__kv *kv = rr__calloc(1, sizeof *kv);
  if (!kv) return RR_ENOMEM;
  kv->nbuckets = 64;
  kv->buckets = rr__calloc(kv->nbuckets, sizeof *kv->buckets);
  if (!kv->buckets) {
    free(kv);
    return RR_ENOMEM;
  }
  *out = kv;
  return RR_OK;
}

void rr__kv_free(rr__kv *kv) {
  if (!kv) return;
  for (size_t b = 0; b < kv->nbuckets; b++) {
    rr__kv_entry *e = kv->buckets[b];
    while (e) {
      rr__kv_entry *next = e->next;
      free(e->val.data);
      free(e);
      e = next;
    }
  }
  free(kv->buckets);
  free(kv);
}

static rr__kv_entry **rr__kv_slot(const rr__kv *kv, const void *key, size_t klen, uint64_t h) {
  rr__kv_entry **pp = &kv->buckets[h & (kv->nbuckets - 1)];
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->hash == h && (*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0) break;
  return pp;
}

const rr__kv_val *rr__kv_get(const rr__kv *kv, const void *key, size_t klen) {
  rr__kv_entry *e = *rr__kv_slot(kv, key, klen, rr__kv_hash(key, klen));
  return e ? &e->val : NULL;
}

static void rr__kv_grow(rr__kv *kv) {
  size_t n = kv->nbuckets * 2;
  rr__kv_entry **nb = calloc(n, sizeof *nb);
  if (!nb) return; /* keep the smaller table: slower, still correct */
  for (size_t b = 0; b < kv->nbuckets; b++) {
    rr__kv_entry *e = kv->buckets[b];
    while (e) {
      rr__kv_entry *next = e->next;
      e->next = nb[e->hash & (n - 1)];
      nb[e->hash & (n - 1)] = e;
      e = next;
    }
  }
  free(kv->buckets);
  kv->buckets = nb;
  kv->nbuckets = n;
}

int rr__kv_set(rr__kv *kv, const void *key, size_t klen, void *value, size_t len) {
  uint64_t h = rr__kv_hash(key, klen);
  rr__kv_entry **pp = rr__kv_slot(kv, key, klen, h);
  if (*pp) {
    free((*pp)->val.data);
    (*pp)->val.data = value;
    (*pp)->val.len = len;
    return RR_OK;
  }
  rr__kv_entry *e = malloc(sizeof *e + klen);
  if (!e) {
    free(value);
    return rr__set_error(RR_ENOMEM, "out of memory storing a key of %zu bytes", klen);
  }
  e->next = NULL;
  e->hash = h;
  e->val.data = value;
  e->val.len = len;
  e->klen = klen;
  memcpy(e->key, key, klen);
  *pp = e;
  kv->count++;
  if (kv->count > kv->nbuckets) rr__kv_grow(kv);
  return RR_OK;
}

int rr__kv_del(rr__kv *kv, const void *key, size_t klen) {
  rr__kv_entry **pp = rr__kv_slot(kv, key, klen, rr__kv_hash(key, klen));
  rr__kv_entry *e = *pp;
  if (!e) return 0;
  *pp = e->next;
  free(e->val.data);
  free(e);
  kv->count--;
  return 1;
}
