/* A store whose operations are the caller's (rr_store_from_callbacks): how a framework's
 * own store, torch's TCPStore or PrefixStore for one, carries the rendezvous, so a job needs
 * no second port. store.c has already checked every argument; this file passes them on,
 * makes sure a failing callback leaves a sentence behind, and copies values out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "common/util.h"
#include "rendezvous/store.h"

struct rr_store_value {
  void *data; /* malloc'd copy, handed to the caller of rr_store_get */
  size_t len;
  int set;
};

typedef struct rr__cb_store {
  rr_store base; /* first: store.c sees only this */
  rr_store_callbacks cb;
} rr__cb_store;

#define RR__CB(s) ((rr__cb_store *)(s))

/* A callback's verdict: a status in the library's range, and a message naming the call and
 * the key even when the callback gave none. */
static int rr__cb_result(int rc, const char *call, const char *key) {
  if (rc == RR_OK) return RR_OK;
  /* Not one of ours, or a positive one (no callback returns "in progress"): a failure all the
   * same. Checked against the status table, so a status added to it is passed through. */
  if (rc > 0 || !rr__status_known(rc)) rc = RR_ESYS;
  char ks[192] = "";
  if (key) rr__store_key_str(key, strlen(key), ks, sizeof ks);
  if (!rr__error()[0]) rr__set_error(rc, "the callback returned %s", rr_status_name(rc));
  return rr__prefix_error(rc, "store callback %s%s%s", call, key ? " of key " : "", ks);
}

static int rr__cb_set(rr_store *s, const char *key, const void *value, size_t len) {
  rr__clear_error();
  return rr__cb_result(RR__CB(s)->cb.set(RR__CB(s)->cb.ctx, key, value, len), "set", key);
}

static int rr__cb_get(rr_store *s, const char *key, int64_t timeout_ms, void **value, size_t *len) {
  rr_store_value out = {0};
  rr__clear_error();
  int rc = rr__cb_result(RR__CB(s)->cb.get(RR__CB(s)->cb.ctx, key, timeout_ms, &out), "get", key);
  if (rc == RR_OK && !out.set)
    rc = rr__set_error(RR_EPROTO,
                       "store callback get of key '%s': it succeeded without "
                       "rr_store_value_set",
                       key);
  if (rc != RR_OK) {
    free(out.data);
    return rc;
  }
  *value = out.data;
  *len = out.len;
  return RR_OK;
}

static int rr__cb_add(rr_store *s, const char *key, int64_t delta, int64_t *result) {
  rr__clear_error();
  return rr__cb_result(RR__CB(s)->cb.add(RR__CB(s)->cb.ctx, key, delta, result), "add", key);
}

static int rr__cb_wait(rr_store *s, const char *const *keys, int nkeys, int64_t timeout_ms) {
  rr__clear_error();
  return rr__cb_result(RR__CB(s)->cb.wait(RR__CB(s)->cb.ctx, keys, nkeys, timeout_ms), "wait",
                       nkeys == 1 ? keys[0] : NULL);
}

static int rr__cb_check(rr_store *s, const char *const *keys, int nkeys, int *exists) {
  rr__clear_error();
  rr__cb_store *c = RR__CB(s);
  if (c->cb.check) return rr__cb_result(c->cb.check(c->cb.ctx, keys, nkeys, exists), "check", NULL);
  /* No check: a wait that cannot wait stands in for it. */
  int rc = c->cb.wait(c->cb.ctx, keys, nkeys, 1);
  if (rc == RR_ETIMEDOUT) {
    rr__clear_error();
    *exists = 0;
    return RR_OK;
  }
  *exists = rc == RR_OK;
  return rr__cb_result(rc, "wait (standing in for check)", NULL);
}

static int rr__cb_del(rr_store *s, const char *key, int *deleted) {
  rr__clear_error();
  return rr__cb_result(RR__CB(s)->cb.del(RR__CB(s)->cb.ctx, key, deleted), "delete", key);
}

static int rr__cb_port(const rr_store *s) {
  (void)s;
  return -1;
}

static void rr__cb_free(rr_store *s) {
  rr__cb_store *c = RR__CB(s);
  if (c->cb.free) c->cb.free(c->cb.ctx);
  free(c);
}

static const rr__store_ops rr__cb_ops = {
    .set = rr__cb_set,
    .get = rr__cb_get,
    .add = rr__cb_add,
    .wait = rr__cb_wait,
    .check = rr__cb_check,
    .del = rr__cb_del,
    .port = rr__cb_port,
    .free = rr__cb_free,
};

int rr_store_from_callbacks(const rr_store_callbacks *cb, int64_t timeout_ms, rr_store **store) {
  if (!store) return rr__set_error(RR_EINVAL, "rr_store_from_callbacks: store is NULL");
  *store = NULL;
  if (!cb || !cb->set || !cb->get || !cb->add || !cb->wait || !cb->del)
    return rr__set_error(RR_EINVAL,
                         "rr_store_from_callbacks: set, get, add, wait and del are "
                         "required (check and free may be NULL)");
  rr__cb_store *s = rr__calloc(1, sizeof *s);
  if (!s) return RR_ENOMEM;
  s->base.ops = &rr__cb_ops;
  s->base.timeout_ms = timeout_ms > 0 ? timeout_ms : RR__STORE_DEFAULT_TIMEOUT_MS;
  s->cb = *cb;
  *store = &s->base;
  return RR_OK;
}

int rr_store_value_set(rr_store_value *out, const void *data, size_t len) {
  if (!out || (len && !data))
    return rr__set_error(RR_EINVAL, "rr_store_value_set: NULL %s", out ? "data" : "out");
  if (len > RR__STORE_MAX_VALUE)
    return rr__set_error(RR_EINVAL,
                         "rr_store_value_set: a value of %zu bytes is over the limit "
                         "of %u",
                         len, (unsigned)RR__STORE_MAX_VALUE);
  void *copy = malloc(len ? len : 1);
  if (!copy) return rr__set_error(RR_ENOMEM, "out of memory for a value of %zu bytes", len);
  if (len) memcpy(copy, data, len);
  free(out->data);
  out->data = copy;
  out->len = len;
  out->set = 1;
  return RR_OK;
}

int rr_store_fail(int status, const char *message) {
  if (status >= RR_OK) status = RR_ESYS;
  return rr__set_error(status, "%s", message ? message : rr_status_name(status));
}
