/* Groups that set up at the same time through one store (issues 38 item 1 and 43), as a
 * framework's groups do: rr_init_process_group_on_store on callbacks that put each group
 * under its own prefix of one shared TCP store (torch's PrefixStore), each group named by
 * rr_pg_options.group_key.
 *
 *   test_groups swap       4 ranks, RR_JOB_TOKEN set: {0,1} and {2,3} set up at once while
 *                          whoever can write the store moves each group's records into the
 *                          other's place (the callbacks do it, the same every run). Every
 *                          rank must fail at setup naming the record; without the group's
 *                          key in the records and proofs, rank 0 paired with rank 3 and
 *                          rank 1 with rank 2, and every sum was the wrong one.
 *   test_groups same_name  5 ranks: {0,2,4} and {1,3} under ONE prefix (a framework that
 *                          names groups alike on different ranks), told apart by their keys
 *                          only, then one-rank groups {r} under one prefix too: each reaches
 *                          its own members (exact int64 sums over random data); one-rank
 *                          groups touch the store not at all.
 *   test_groups same_name_unkeyed   the same without keys: refused at setup, never mixed
 *                          ("claimed by 2 processes"). */
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"

typedef struct ctx {
  rr_store *inner;
  char prefix[16]; /* this group's prefix in the shared store */
  int swap;        /* move the other group's records in */
  int calls;       /* store calls made through the callbacks */
  rr_store *st;    /* the callbacks' store: the group's until it is destroyed */
} ctx;

static regex_t record_re; /* <prefix>rr/<id>/peer/<rank> */

static int full(const ctx *x, const char *k, char *out, size_t n) {
  return snprintf(out, n, "%s%s", x->prefix, k) < (int)n ? RR_OK : RR_EINVAL;
}

/* The other group's record of the same rank number (its key found in the index the setter
 * keeps, as an attacker watching the store sees every key), or NULL while there is none. */
static char *other_record(ctx *x, const char *key) {
  regmatch_t m[4], o[4];
  if (regexec(&record_re, key, 4, m, 0) != 0) return NULL;
  int64_t n = 0;
  for (int tries = 0; tries < 2000; tries++, usleep(5000)) {
    if (rr_store_add(x->inner, "attacker/n", 0, &n) != RR_OK) return NULL;
    for (int64_t i = 1; i <= n; i++) {
      char ik[64];
      snprintf(ik, sizeof ik, "attacker/key/%lld", (long long)i);
      void *v = NULL;
      size_t len = 0;
      if (rr_store_get(x->inner, ik, &v, &len) != RR_OK) return NULL;
      char *k = strndup(v, len);
      free(v);
      if (k && regexec(&record_re, k, 4, o, 0) == 0 && !strcmp(k + o[3].rm_so, key + m[3].rm_so) &&
          strncmp(k, key, (size_t)m[3].rm_so))
        return k;
      free(k);
    }
  }
  return NULL;
}

static int cb_set(void *c, const char *k, const void *v, size_t n) {
  ctx *x = c;
  char key[512];
  x->calls++;
  if (full(x, k, key, sizeof key) != RR_OK) return rr_store_fail(RR_EINVAL, "key too long");
  int st = rr_store_set(x->inner, key, v, n);
  if (st == RR_OK && x->swap && regexec(&record_re, key, 0, NULL, 0) == 0) {
    int64_t i = 0;
    char ik[64];
    if ((st = rr_store_add(x->inner, "attacker/n", 1, &i)) != RR_OK) return st;
    snprintf(ik, sizeof ik, "attacker/key/%lld", (long long)i);
    st = rr_store_set(x->inner, ik, key, strlen(key));
  }
  return st;
}
static int cb_get(void *c, const char *k, int64_t timeout_ms, rr_store_value *out) {
  ctx *x = c;
  char key[512];
  (void)timeout_ms;
  x->calls++;
  if (full(x, k, key, sizeof key) != RR_OK) return rr_store_fail(RR_EINVAL, "key too long");
  char *other = x->swap ? other_record(x, key) : NULL;
  void *v = NULL;
  size_t n = 0;
  int st = rr_store_get(x->inner, other ? other : key, &v, &n);
  free(other);
  if (st == RR_OK) st = rr_store_value_set(out, v, n);
  free(v);
  return st;
}
static int cb_add(void *c, const char *k, int64_t d, int64_t *r) {
  ctx *x = c;
  char key[512];
  x->calls++;
  if (full(x, k, key, sizeof key) != RR_OK) return rr_store_fail(RR_EINVAL, "key too long");
  return rr_store_add(x->inner, key, d, r);
}
static int cb_wait(void *c, const char *const *k, int n, int64_t timeout_ms) {
  ctx *x = c;
  char keys[16][512];
  const char *p[16];
  x->calls++;
  if (n > 16) return rr_store_fail(RR_EINVAL, "too many keys");
  for (int i = 0; i < n; i++) {
    if (full(x, k[i], keys[i], sizeof keys[i]) != RR_OK) return rr_store_fail(RR_EINVAL, "key");
    p[i] = keys[i];
  }
  return rr_store_wait(x->inner, p, n, timeout_ms);
}
static int cb_del(void *c, const char *k, int *deleted) {
  ctx *x = c;
  char key[512];
  x->calls++;
  if (full(x, k, key, sizeof key) != RR_OK) return rr_store_fail(RR_EINVAL, "key too long");
  return rr_store_delete(x->inner, key, deleted);
}

typedef struct targ {
  const char *mode;
  int port, world;
} targ;

/* Set up a group of `n` ranks (this one `rank` among them) on the shared store under
 * `prefix`, named by `key` (NULL: unkeyed). */
static int setup(ctx *x, const char *prefix, int rank, int n, const char *key, rr_pg **pg) {
  snprintf(x->prefix, sizeof x->prefix, "%s", prefix);
  rr_store_callbacks cb = {x, cb_set, cb_get, cb_add, cb_wait, NULL, cb_del, NULL};
  if (x->st) rr_store_free(x->st); /* the last group set up on it is gone */
  x->st = NULL;
  int rc = rr_store_from_callbacks(&cb, 10000, &x->st);
  if (rc != RR_OK) return rc;
  rr_pg_options opt;
  rr_pg_options_init(&opt);
  opt.rank = rank;
  opt.world_size = n;
  opt.timeout_ms = 10000;
  opt.group_key = key;
  return rr_init_process_group_on_store(pg, &opt, x->st);
}

/* An exact int64 sum over the group: member i contributes stream (tag, global rank). */
static int check_sum(rr_pg *pg, const int *members, int n, int me, uint64_t tag) {
  enum { N = 4099 };
  static int64_t x[N];
  t_fill(x, N, RR_INT64, RR_SUM, tag, me, 0);
  T_OK(rr_all_reduce(pg, x, x, N, RR_INT64, RR_SUM));
  for (size_t i = 0; i < N; i++) {
    /* The library's int64 sum wraps (two's complement), as torch's does: add unsigned. */
    uint64_t sum = 0;
    for (int q = 0; q < n; q++) sum += (uint64_t)t_value_bits(RR_INT64, RR_SUM, tag, members[q], i);
    int64_t want = (int64_t)sum;
    T_CHECK(x[i] == want, "group of %d: element %zu is %lld, the members' sum is %lld", n, i,
            (long long)x[i], (long long)want);
  }
  return 0;
}

/* Leave once every rank is done with the shared store (rank 0 serves it; 30 s at most). */
static int finish(ctx *x, int world) {
  int64_t done = 0;
  T_OK(rr_store_add(x->inner, "done", 1, &done));
  for (int i = 0; i < 3000 && done < world; i++) {
    usleep(10000);
    if (rr_store_add(x->inner, "done", 0, &done) != RR_OK) break;
  }
  if (x->st) rr_store_free(x->st);
  rr_store_free(x->inner);
  return 0;
}

static int swap_rank(int rank, targ *a) {
  ctx x = {.swap = 1};
  T_OK(rr_store_tcp("127.0.0.1", a->port, rank == 0, 10000, &x.inner));
  int half = rank / 2;
  rr_pg *pg = (rr_pg *)1;
  int rc = setup(&x, half ? "B/" : "A/", rank % 2, 2, half ? "B" : "A", &pg);
  if (rc == RR_OK) {
    int64_t v = rank + 1;
    rr_all_reduce(pg, &v, &v, 1, RR_INT64, RR_SUM);
    T_FAIL(
        "the groups set up with each other's records: rank %d summed %lld (its own group: "
        "%d)",
        rank, (long long)v, half ? 7 : 3);
  }
  fprintf(stderr, "rank %d: %s\n", rank, rr_last_error());
  T_CHECK(pg == NULL, "a failed setup left a group");
  T_HAS(rr_last_error(), "another group's record");
  T_HAS(rr_last_error(), rank % 2 ? "the record of rank 0" : "the record of rank 1");
  return finish(&x, a->world);
}

static int same_name_rank(int rank, targ *a, int keyed) {
  ctx x = {0};
  T_OK(rr_store_tcp("127.0.0.1", a->port, rank == 0, 10000, &x.inner));
  /* {0,2,4} and {1,3}, one prefix, told apart by their keys alone. */
  static const int even[] = {0, 2, 4}, odd[] = {1, 3};
  const int *mem = rank % 2 ? odd : even;
  int n = rank % 2 ? 2 : 3;
  char key[32];
  snprintf(key, sizeof key, "g/%s", rank % 2 ? "1,3" : "0,2,4");
  rr_pg *pg = NULL;
  int rc = setup(&x, "same/", rank / 2, n, keyed ? key : NULL, &pg);
  if (!keyed) {
    /* Both groups' rank 0 (and rank 1) claim one key: one of each pair is refused, and the
     * other then waits for members that went to the other group: every rank fails, none
     * runs mixed. */
    if (rc == RR_OK) {
      int64_t v = rank + 1;
      rc = rr_all_reduce(pg, &v, &v, 1, RR_INT64, RR_SUM);
      T_CHECK(rc != RR_OK || v == (rank % 2 ? 6 : 9), "unkeyed groups mixed: rank %d summed %lld",
              rank, (long long)v);
      rr_destroy_process_group(pg);
    }
    return finish(&x, a->world);
  }
  T_CHECK(rc == RR_OK, "setup: %s", rr_last_error());
  if (check_sum(pg, mem, n, rank, 77)) return 1;
  T_OK(rr_destroy_process_group(pg));
  /* One-rank groups, every one under the same prefix and without a key: nothing to meet. */
  int before = x.calls;
  T_OK(setup(&x, "one/", 0, 1, NULL, &pg));
  T_CHECK(x.calls == before, "a one-rank group made %d store call(s)", x.calls - before);
  if (check_sum(pg, &rank, 1, rank, 78)) return 1;
  T_OK(rr_destroy_process_group(pg));
  return finish(&x, a->world);
}

static int run_rank(int rank, void *p) {
  targ *a = p;
  t_rank = rank;
  if (!strcmp(a->mode, "swap")) return swap_rank(rank, a);
  return same_name_rank(rank, a, !strcmp(a->mode, "same_name"));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_groups swap|same_name|same_name_unkeyed\n");
    return 2;
  }
  if (regcomp(&record_re, "^(.*)rr/(w[^/]*)/peer/([0-9]+)$", REG_EXTENDED) != 0) return 1;
  targ a = {.mode = argv[1], .port = t_free_port(), .world = 4};
  if (!strcmp(a.mode, "swap"))
    setenv("RR_JOB_TOKEN", "test-groups-token", 1);
  else if (!strcmp(a.mode, "same_name") || !strcmp(a.mode, "same_name_unkeyed"))
    a.world = 5;
  else
    return 2;
  setenv("RR_TIMEOUT", "10", 1);
  return t_run_all(a.world, run_rank, &a, 90, a.mode);
}
