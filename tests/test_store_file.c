/* test_store: the file store: the shared cases (test_store_common.c) through two or more
 * users of one file, the count of users that deletes the file with the last one out, and a
 * corrupt file. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_store.h"

/* ---------------------------------------------------------------------------------------------
 * File store
 */
void test_file_semantics(void) {
  const char *path = tmp_path("sem.store");
  rr_store *a = NULL, *b = NULL;
  OK(rr_store_file(path, 5000, &a));
  OK(rr_store_file(path, 5000, &b));
  CHECK(rr_store_port(a) == -1, "a file store has no port");
  semantics(a, b);
  rr_store_free(a);
  CHECK(file_exists(path), "the file went away while a user was left");
  rr_store_free(b);
  CHECK(!file_exists(path), "the last user did not delete the file");
  /* Errors name the path. */
  rr_store *s = (rr_store *)&s;
  EXPECT(RR_ESYS, "/nonexistent-dir/x", rr_store_file("/nonexistent-dir/x", 1000, &s));
  CHECK(s == NULL, "store not reset on failure");
  EXPECT(RR_EINVAL, NULL, rr_store_file("", 1000, &s));
  EXPECT(RR_EINVAL, NULL, rr_store_file(NULL, 1000, &s));
}

void test_file_add_procs(void) {
  const char *path = tmp_path("add.store");
  rr_store *keep = NULL;
  OK(rr_store_file(path, 20000, &keep));
  add_procs(0, path);
  rr_store_free(keep);
  CHECK(!file_exists(path), "the last user did not delete the file");
}

void test_file_get_blocks(void) {
  const char *path = tmp_path("blocks.store");
  rr_store *s = NULL;
  OK(rr_store_file(path, 10000, &s));
  get_blocks(s, 0, path);
  rr_store_free(s);
}

void test_file_get_timeout(void) {
  const char *path = tmp_path("timeout.store");
  rr_store *a = NULL, *b = NULL;
  OK(rr_store_file(path, 500, &a));
  OK(rr_store_file(path, 20000, &b));
  get_timeout(a, b);
  rr_store_free(a);
  rr_store_free(b);
}

/* Users counted across processes; the last one out deletes the file; a crashed user leaves
 * it behind (documented: remove it before reuse). */
typedef struct ref_arg {
  const char *path;
  int64_t hold_ms;
  int crash;
} ref_arg;

static void ref_child(void *p) {
  ref_arg *a = p;
  rr_store *s = NULL;
  OK(rr_store_file(a->path, 10000, &s));
  OK(rr_store_add(s, "joined", 1, NULL));
  sleep_ms(a->hold_ms);
  if (a->crash) _exit(3); /* no rr_store_free */
  rr_store_free(s);
}

void test_file_refcount(void) {
  const char *path = tmp_path("ref.store");
  rr_store *s = NULL;
  OK(rr_store_file(path, 10000, &s));
  ref_arg a = {path, 0, 0};
  pid_t pids[4];
  for (int i = 0; i < 4; i++) {
    a.hold_ms = 50 * i;
    pids[i] = spawn(ref_child, &a);
  }
  for (int i = 0; i < 4; i++) CHECK(wait_child(pids[i], 10000) == 0, "user %d failed", i);
  CHECK(file_exists(path), "the file was deleted while a user was left");
  int64_t joined = 0;
  OK(rr_store_add(s, "joined", 0, &joined));
  CHECK(joined == 4, "joined = %" PRId64, joined);
  rr_store_free(s);
  CHECK(!file_exists(path), "the last user did not delete the file");
  /* A fresh store on the same path starts empty. */
  OK(rr_store_file(path, 10000, &s));
  int ex = 1;
  const char *k[] = {"joined"};
  OK(rr_store_check(s, k, 1, &ex));
  CHECK(ex == 0, "a new file store saw an old key");
  /* A user that crashes never leaves: the file stays after everyone else is gone. */
  a.hold_ms = 0;
  a.crash = 1;
  CHECK(wait_child(spawn(ref_child, &a), 10000) == 3, "crashing user");
  rr_store_free(s);
  CHECK(file_exists(path), "the file should outlive a crashed user");
  CHECK(unlink(path) == 0, "unlink: %s", strerror(errno));
}

void test_file_threads(void) {
  const char *path = tmp_path("threads.store");
  rr_store *s = NULL;
  OK(rr_store_file(path, 10000, &s));
  threads(s);
  rr_store_free(s);
  CHECK(!file_exists(path), "file left behind");
}

/* A file that is not a store (or was cut by a crash) is reported, naming it. */
void test_file_corrupt(void) {
  const char *path = tmp_path("corrupt.store");
  rr_store *s = NULL;
  OK(rr_store_file(path, 2000, &s));
  OK(rr_store_set(s, "k", "v", 1));
  FILE *f = fopen(path, "ab");
  CHECK(f != NULL, "fopen: %s", strerror(errno));
  uint8_t junk[37];
  fill_bytes(junk, sizeof junk, g_base, 3);
  CHECK(fwrite(junk, 1, sizeof junk, f) == sizeof junk && fclose(f) == 0, "write junk");
  void *v = NULL;
  size_t len = 0;
  EXPECT(RR_EPROTO, "corrupt", rr_store_get(s, "k2", &v, &len));
  CHECK(strstr(rr_last_error(), path), "the error must name the file");
  rr_store *t = NULL;
  EXPECT(RR_EPROTO, path, rr_store_file(path, 2000, &t));
  rr_store_free(s); /* cannot count itself out of a corrupt file: leaves it */
  CHECK(unlink(path) == 0, "unlink: %s", strerror(errno));
}
