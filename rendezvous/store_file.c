/* The file store, as torch's FileStore: one file shared by every process of the job (on a
 * shared filesystem when the job spans hosts), an append-only log of records written under
 * an exclusive flock(). Each process keeps the keys it has read so far in memory and, on
 * every call, takes the lock, reads the records appended since, and acts. get and wait poll
 * (10 ms, growing to 100 ms) until their deadline; add reads and appends under one lock, so
 * it is atomic across processes; delete appends a tombstone.
 *
 * Record: 16-byte header, little endian, then the key and the value:
 *    0 u32 magic RR__FREC_MAGIC   4 u8 type (1 set, 2 delete)   5 u8[3] zero
 *    8 u32 key length (1..4096)   12 u32 value length (<= 64 MiB; 0 for a delete)
 *
 * The file counts its users under a key no user can name ("\0refs": user keys hold no NUL):
 * opening adds 1, rr_store_free subtracts 1, and the last one out deletes the file (as torch
 * does). A process that opened the file but found it unlinked by that last user (the race
 * between open and lock) opens it again.
 *
 * A file left behind by a job that crashed keeps its keys and its count: remove it before
 * starting a new job on the same path, or the new job sees the old job's keys.
 *
 * Who may use the file: the store holds what every rank believes about every other (and,
 * without RR_JOB_TOKEN, the group's token), so only this user may write or read it. The
 * file must be this user's, a regular file with one link, readable and writable by nobody
 * else; its directory must be this user's or root's, and writable by others only when
 * sticky (as /tmp is: nobody else can then rename or remove our file). Anything else is
 * refused by name before a byte is read (rr__file_check_place).
 *
 * Locking: flock() is per open file description, so threads of one process sharing a store
 * also take a mutex; and a store object must not be used across fork(). The lock is only
 * held for one read-and-append; taking it gives up after the store's timeout. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "rendezvous/store.h"

#define RR__FREC_MAGIC 0x66535252u /* bytes 'R' 'R' 'S' 'f' */
#define RR__FREC_HDR 16
#define RR__FREC_SET 1
#define RR__FREC_DEL 2
#define RR__FILE_POLL_MIN_MS 10
#define RR__FILE_POLL_MAX_MS 100

static const char rr__refs_key[] = {'\0', 'r', 'e', 'f', 's'};

typedef struct rr__file_store {
  rr_store base;
  pthread_mutex_t lock; /* threads of this process; flock() is for the processes */
  int fd;
  char *path;
  rr__kv *kv;   /* the records read so far */
  uint64_t off; /* bytes of the file read into kv */
} rr__file_store;

#define RR__FILE(s) ((rr__file_store *)(s))

static int rr__pread_all(int fd, void *buf, size_t n, uint64_t off) {
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) {
      errno = ENODATA;
      return -1;
    }
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

static int rr__pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
  const uint8_t *p = buf;
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return -1;
    }
    p += w;
    n -= (size_t)w;
    off += (uint64_t)w;
  }
  return 0;
}

/* Apply the records appended since the last read. Called with the lock held. */
static int rr__file_refresh(rr__file_store *s, uint64_t size, const char *what) {
  if (size < s->off)
    return rr__set_error(RR_ESTATE,
                         "%s: the store file %s shrank from %" PRIu64 " to %" PRIu64
                         " bytes (truncated by another program?)",
                         what, s->path, s->off, size);
  if (size == s->off) return RR_OK;
  if (size - s->off > SIZE_MAX / 2)
    return rr__set_error(RR_ENOMEM, "%s: the store file %s is too large", what, s->path);
  size_t n = (size_t)(size - s->off);
  uint8_t *buf = malloc(n);
  if (!buf)
    return rr__set_error(RR_ENOMEM, "%s: out of memory reading %zu bytes of the store file %s",
                         what, n, s->path);
  if (rr__pread_all(s->fd, buf, n, s->off) != 0) {
    int e = errno;
    free(buf);
    return rr__set_error(RR_ESYS, "%s: cannot read the store file %s: %s", what, s->path,
                         strerror(e));
  }
  size_t p = 0;
  int rc = RR_OK;
  while (p < n) {
    const uint8_t *h = buf + p;
    uint32_t magic = 0, klen = 0, vlen = 0;
    int type = 0;
    if (n - p >= RR__FREC_HDR) {
      magic = rr__get_u32(h);
      type = h[4];
      klen = rr__get_u32(h + 8);
      vlen = rr__get_u32(h + 12);
    }
    if (n - p < RR__FREC_HDR || magic != RR__FREC_MAGIC || h[5] || h[6] || h[7] ||
        (type != RR__FREC_SET && type != RR__FREC_DEL) || klen == 0 || klen > RR__STORE_MAX_KEY ||
        vlen > RR__STORE_MAX_VALUE || (type == RR__FREC_DEL && vlen != 0) ||
        (uint64_t)klen + vlen > n - p - RR__FREC_HDR) {
      rc = rr__set_error(RR_EPROTO,
                         "%s: the store file %s is corrupt at byte %" PRIu64
                         " (a process died while writing it, or another program wrote it); "
                         "remove it and restart the job",
                         what, s->path, s->off + p);
      break;
    }
    const uint8_t *key = h + RR__FREC_HDR;
    if (type == RR__FREC_SET) {
      void *v = NULL;
      if (vlen && !(v = malloc(vlen))) {
        rc = rr__set_error(RR_ENOMEM, "%s: out of memory for a value of %" PRIu32 " bytes", what,
                           vlen);
        break;
      }
      if (vlen) memcpy(v, key + klen, vlen);
      if ((rc = rr__kv_set(s->kv, key, klen, v, vlen)) != RR_OK) break;
    } else {
      rr__kv_del(s->kv, key, klen);
    }
    p += RR__FREC_HDR + klen + vlen;
  }
  s->off += p; /* up to the first record not applied, retried next time */
  free(buf);
  return rc;
}

/* Take the mutex and the file lock, check that the path still names our file, and read what
 * is new. RR_ESTATE when the file was removed or replaced. */
static int rr__file_begin(rr__file_store *s, const char *what) {
  int64_t deadline = rr__deadline(s->base.timeout_ms);
  int rc = pthread_mutex_lock(&s->lock);
  if (rc != 0) return rr__set_error(RR_ESYS, "%s: pthread_mutex_lock: %s", what, strerror(rc));
  int64_t nap_us = 50;
  for (;;) {
    if (flock(s->fd, LOCK_EX | LOCK_NB) == 0) break;
    int e = errno;
    if (e == EINTR) continue;
    if (e != EWOULDBLOCK) {
      pthread_mutex_unlock(&s->lock);
      return rr__set_error(RR_ESYS, "%s: cannot lock the store file %s: %s", what, s->path,
                           strerror(e));
    }
    if (rr__ms_left(deadline) == 0) {
      pthread_mutex_unlock(&s->lock);
      return rr__set_error(RR_ETIMEDOUT,
                           "%s: the store file %s stayed locked by another process for %.1f s",
                           what, s->path, (double)s->base.timeout_ms / 1000);
    }
    usleep((useconds_t)nap_us);
    nap_us = RR__MIN(nap_us * 2, 2000);
  }
  struct stat mine, named;
  if (fstat(s->fd, &mine) != 0) {
    rc = rr__set_error(RR_ESYS, "%s: fstat of the store file %s: %s", what, s->path,
                       strerror(errno));
  } else if (stat(s->path, &named) != 0 || named.st_ino != mine.st_ino ||
             named.st_dev != mine.st_dev) {
    rc = rr__set_error(RR_ESTATE, "%s: the store file %s was removed or replaced while in use",
                       what, s->path);
  } else {
    rc = rr__file_refresh(s, (uint64_t)mine.st_size, what);
  }
  if (rc != RR_OK) {
    flock(s->fd, LOCK_UN);
    pthread_mutex_unlock(&s->lock);
  }
  return rc;
}

static void rr__file_end(rr__file_store *s) {
  if (flock(s->fd, LOCK_UN) != 0)
    RR__LOG_WARN(RR__SUB_STORE, "cannot unlock the store file %s: %s", s->path, strerror(errno));
  pthread_mutex_unlock(&s->lock);
}

/* Append one record and read it back into the table (one path for every change). */
static int rr__file_append(rr__file_store *s, int type, const void *key, size_t klen,
                           const void *value, size_t vlen, const char *what) {
  uint8_t head[RR__FREC_HDR + RR__STORE_MAX_KEY];
  memset(head, 0, RR__FREC_HDR);
  rr__put_u32(head, RR__FREC_MAGIC);
  head[4] = (uint8_t)type;
  rr__put_u32(head + 8, (uint32_t)klen);
  rr__put_u32(head + 12, (uint32_t)vlen);
  memcpy(head + RR__FREC_HDR, key, klen);
  uint64_t at = s->off; /* == the file's size: refreshed under this lock */
  if (rr__pwrite_all(s->fd, head, RR__FREC_HDR + klen, at) != 0 ||
      (vlen && rr__pwrite_all(s->fd, value, vlen, at + RR__FREC_HDR + klen) != 0)) {
    int e = errno;
    /* Do not leave half a record for the others to trip on. */
    if (ftruncate(s->fd, (off_t)at) != 0)
      RR__LOG_WARN(RR__SUB_STORE, "cannot cut a half-written record off the store file %s: %s",
                   s->path, strerror(errno));
    return rr__set_error(RR_ESYS, "%s: cannot write the store file %s: %s", what, s->path,
                         strerror(e));
  }
  return rr__file_refresh(s, at + RR__FREC_HDR + klen + vlen, what);
}

/* Add under the lock already held; the add arithmetic is shared with the TCP server. */
static int rr__file_add_locked(rr__file_store *s, const void *key, size_t klen, int64_t delta,
                               int64_t *result, const char *what) {
  char text[24];
  int rc = rr__store_add_value(rr__kv_get(s->kv, key, klen), delta, result, text);
  if (rc == RR__ADD_NOTINT)
    return rr__set_error(RR_EINVAL,
                         "%s in the store file %s: the value stored is not an integer "
                         "(add needs ASCII decimal)",
                         what, s->path);
  if (rc == RR__ADD_OVERFLOW)
    return rr__set_error(RR_EINVAL, "%s in the store file %s: the sum overflows a 64-bit integer",
                         what, s->path);
  return rr__file_append(s, RR__FREC_SET, key, klen, text, strlen(text), what);
}

static int rr__file_set(rr_store *st, const char *key, const void *value, size_t len) {
  rr__file_store *s = RR__FILE(st);
  char what[200], ks[160];
  snprintf(what, sizeof what, "set of key %s", rr__store_key_str(key, strlen(key), ks, sizeof ks));
  RR__CHECK(rr__file_begin(s, what));
  int rc = rr__file_append(s, RR__FREC_SET, key, strlen(key), value, len, what);
  rr__file_end(s);
  return rc;
}

/* Sleep before polling again: 10 ms growing to 100 ms, never past the deadline. */
static void rr__file_nap(int64_t *nap_ms, int64_t deadline) {
  int64_t ms = RR__MIN(*nap_ms, rr__ms_left(deadline));
  if (ms > 0) usleep((useconds_t)(ms * 1000));
  *nap_ms = RR__MIN(*nap_ms * 3 / 2, RR__FILE_POLL_MAX_MS);
}

static int rr__file_get(rr_store *st, const char *key, int64_t timeout_ms, void **value,
                        size_t *len) {
  rr__file_store *s = RR__FILE(st);
  char what[200], ks[160];
  size_t klen = strlen(key);
  snprintf(what, sizeof what, "get of key %s", rr__store_key_str(key, klen, ks, sizeof ks));
  int64_t deadline = rr__deadline(timeout_ms), nap = RR__FILE_POLL_MIN_MS;
  for (;;) {
    RR__CHECK(rr__file_begin(s, what));
    const rr__kv_val *v = rr__kv_get(s->kv, key, klen);
    int rc = RR_OK, found = v != NULL;
    if (found) {
      void *copy = malloc(v->len ? v->len : 1);
      if (!copy) {
        rc = rr__set_error(RR_ENOMEM, "%s: out of memory for a value of %zu bytes", what, v->len);
      } else {
        if (v->len) memcpy(copy, v->data, v->len);
        *value = copy;
        *len = v->len;
      }
    }
    rr__file_end(s);
    if (found) return rc;
    if (rr__ms_left(deadline) == 0)
      return rr__set_error(RR_ETIMEDOUT,
                           "%s from the store file %s timed out after %.1f s: no process set it",
                           what, s->path, (double)timeout_ms / 1000);
    rr__file_nap(&nap, deadline);
  }
}

static int rr__file_add(rr_store *st, const char *key, int64_t delta, int64_t *result) {
  rr__file_store *s = RR__FILE(st);
  char what[200], ks[160];
  snprintf(what, sizeof what, "add of %" PRId64 " to key %s", delta,
           rr__store_key_str(key, strlen(key), ks, sizeof ks));
  RR__CHECK(rr__file_begin(s, what));
  int rc = rr__file_add_locked(s, key, strlen(key), delta, result, what);
  rr__file_end(s);
  return rc;
}

/* Index of the first key missing, or nkeys when all exist. Lock held. */
static int rr__file_missing(rr__file_store *s, const char *const *keys, int nkeys) {
  for (int i = 0; i < nkeys; i++)
    if (!rr__kv_get(s->kv, keys[i], strlen(keys[i]))) return i;
  return nkeys;
}

static int rr__file_wait(rr_store *st, const char *const *keys, int nkeys, int64_t timeout_ms) {
  rr__file_store *s = RR__FILE(st);
  char what[240], ks[160];
  snprintf(what, sizeof what, "wait for %d key%s (%s%s)", nkeys, nkeys == 1 ? "" : "s",
           rr__store_key_str(keys[0], strlen(keys[0]), ks, sizeof ks), nkeys > 1 ? ", ..." : "");
  int64_t deadline = rr__deadline(timeout_ms), nap = RR__FILE_POLL_MIN_MS;
  for (;;) {
    RR__CHECK(rr__file_begin(s, what));
    int miss = rr__file_missing(s, keys, nkeys);
    rr__file_end(s);
    if (miss == nkeys) return RR_OK;
    if (rr__ms_left(deadline) == 0)
      return rr__set_error(RR_ETIMEDOUT,
                           "%s in the store file %s timed out after %.1f s: key %s (number %d) "
                           "was never set",
                           what, s->path, (double)timeout_ms / 1000,
                           rr__store_key_str(keys[miss], strlen(keys[miss]), ks, sizeof ks), miss);
    rr__file_nap(&nap, deadline);
  }
}

static int rr__file_check(rr_store *st, const char *const *keys, int nkeys, int *exists) {
  rr__file_store *s = RR__FILE(st);
  char what[240], ks[160];
  snprintf(what, sizeof what, "check of %d key%s (%s%s)", nkeys, nkeys == 1 ? "" : "s",
           rr__store_key_str(keys[0], strlen(keys[0]), ks, sizeof ks), nkeys > 1 ? ", ..." : "");
  RR__CHECK(rr__file_begin(s, what));
  *exists = rr__file_missing(s, keys, nkeys) == nkeys;
  rr__file_end(s);
  return RR_OK;
}

static int rr__file_del(rr_store *st, const char *key, int *deleted) {
  rr__file_store *s = RR__FILE(st);
  char what[200], ks[160];
  size_t klen = strlen(key);
  snprintf(what, sizeof what, "delete of key %s", rr__store_key_str(key, klen, ks, sizeof ks));
  RR__CHECK(rr__file_begin(s, what));
  int rc = RR_OK;
  *deleted = rr__kv_get(s->kv, key, klen) != NULL;
  if (*deleted) rc = rr__file_append(s, RR__FREC_DEL, key, klen, NULL, 0, what);
  rr__file_end(s);
  return rc;
}

static int rr__file_port(const rr_store *st) {
  (void)st;
  return -1;
}

static void rr__file_destroy(rr__file_store *s) {
  if (s->fd >= 0) close(s->fd);
  rr__kv_free(s->kv);
  pthread_mutex_destroy(&s->lock);
  free(s->path);
  free(s);
}

/* Leave: count one user fewer; the last one deletes the file. */
static void rr__file_free(rr_store *st) {
  rr__file_store *s = RR__FILE(st);
  const char *what = "rr_store_free";
  int rc = rr__file_begin(s, what);
  if (rc == RR_OK) {
    int64_t left = 0;
    rc = rr__file_add_locked(s, rr__refs_key, sizeof rr__refs_key, -1, &left, what);
    if (rc == RR_OK && left <= 0) {
      if (unlink(s->path) != 0)
        RR__LOG_WARN(RR__SUB_STORE, "cannot remove the store file %s: %s", s->path,
                     strerror(errno));
      else
        RR__LOG_INFO(RR__SUB_STORE, "removed the store file %s (last user left)", s->path);
    }
    rr__file_end(s);
  }
  if (rc != RR_OK)
    RR__LOG_WARN(RR__SUB_STORE, "leaving the store file %s in place: %s", s->path, rr__error());
  rr__file_destroy(s);
}

static const rr__store_ops rr__file_ops = {
    .set = rr__file_set,
    .get = rr__file_get,
    .add = rr__file_add,
    .wait = rr__file_wait,
    .check = rr__file_check,
    .del = rr__file_del,
    .port = rr__file_port,
    .free = rr__file_free,
};

/* The directory: nobody but us (or root) may replace what is in it. */
static int rr__file_check_dir(const char *path) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  struct stat d;
  if (stat(dir, &d) != 0)
    return rr__set_error(RR_ESYS,
                         "rr_store_file: cannot use the store file %s: its directory %s: %s", path,
                         dir, strerror(errno));
  if (d.st_uid != geteuid() && d.st_uid != 0)
    return rr__set_error(RR_EINVAL,
                         "rr_store_file: the store file's directory %s belongs to uid %u, not to "
                         "this user (%u) or root: its owner could replace the store; use a "
                         "directory of your own",
                         dir, (unsigned)d.st_uid, (unsigned)geteuid());
  if ((d.st_mode & (S_IWGRP | S_IWOTH)) && !(d.st_mode & S_ISVTX))
    return rr__set_error(RR_EINVAL,
                         "rr_store_file: the store file's directory %s is writable by others "
                         "(mode %03o, not sticky): they could replace the store; use a "
                         "directory only you can write",
                         dir, (unsigned)(d.st_mode & 07777));
  return RR_OK;
}

/* The file, once open: ours, plain, private. */
static int rr__file_check_file(const rr__file_store *s) {
  struct stat f;
  if (fstat(s->fd, &f) != 0)
    return rr__set_error(RR_ESYS, "rr_store_file: fstat of the store file %s: %s", s->path,
                         strerror(errno));
  if (!S_ISREG(f.st_mode))
    return rr__set_error(RR_EINVAL, "rr_store_file: the store file %s is not a plain file (a %s)",
                         s->path,
                         S_ISFIFO(f.st_mode)   ? "FIFO"
                         : S_ISSOCK(f.st_mode) ? "socket"
                         : S_ISCHR(f.st_mode)  ? "character device"
                         : S_ISBLK(f.st_mode)  ? "block device"
                         : S_ISDIR(f.st_mode)  ? "directory"
                                               : "special file");
  if (f.st_nlink != 1)
    return rr__set_error(RR_EINVAL,
                         "rr_store_file: the store file %s has other names (hard "
                         "links)",
                         s->path);
  if (f.st_uid != geteuid())
    return rr__set_error(RR_EINVAL,
                         "rr_store_file: the store file %s belongs to uid %u, not to this user "
                         "(%u): someone else made it; remove it, or use another path",
                         s->path, (unsigned)f.st_uid, (unsigned)geteuid());
  if (f.st_mode & 077)
    return rr__set_error(RR_EINVAL,
                         "rr_store_file: the store file %s is open to others (mode %03o); the "
                         "store must be readable and writable by this user only (chmod 600)",
                         s->path, (unsigned)(f.st_mode & 0777));
  return RR_OK;
}

int rr__store_file_open(const char *path, int64_t timeout_ms, rr_store **store) {
  *store = NULL;
  rr__file_store *s = rr__calloc(1, sizeof *s);
  if (!s) return RR_ENOMEM;
  s->base.ops = &rr__file_ops;
  s->base.timeout_ms = timeout_ms;
  s->fd = -1;
  int e = pthread_mutex_init(&s->lock, NULL);
  if (e != 0) {
    free(s);
    return rr__set_error(RR_ESYS, "rr_store_file: pthread_mutex_init: %s", strerror(e));
  }
  int rc;
  if (!(s->path = rr__strdup(path))) {
    rr__file_destroy(s);
    return RR_ENOMEM;
  }
  RR__CHECK_GOTO(rr__file_check_dir(path), rc, fail);
  int64_t deadline = rr__deadline(timeout_ms);
  for (;;) {
    rr__kv_free(s->kv);
    s->kv = NULL;
    s->off = 0;
    RR__CHECK_GOTO(rr__kv_new(&s->kv), rc, fail);
    /* O_NONBLOCK: a FIFO planted at the path must not block the open (Linux opens one
     * O_RDWR at once, POSIX leaves it undefined); fstat below refuses it either way. The
     * store's own I/O is on a regular file, where the flag means nothing. O_NOCTTY: a
     * terminal named here must not become the controlling terminal. */
    s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
    if (s->fd < 0) {
      rc = rr__set_error(RR_ESYS, "cannot open the store file %s: %s%s", path, strerror(errno),
                         errno == ELOOP ? " (it is a symbolic link: refused)" : "");
      goto fail;
    }
    RR__CHECK_GOTO(rr__file_check_file(s), rc, fail);
    int fl = fcntl(s->fd, F_GETFL);
    if (fl < 0 || fcntl(s->fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
      rc = rr__set_error(RR_ESYS, "fcntl on the store file %s: %s", path, strerror(errno));
      goto fail;
    }
    rc = rr__file_begin(s, "rr_store_file");
    if (rc == RR_OK) break;
    /* The last user of a previous file unlinked it between our open and our lock. */
    if (rc != RR_ESTATE || rr__ms_left(deadline) == 0) goto fail;
    close(s->fd);
    s->fd = -1;
  }
  int64_t users = 0;
  rc = rr__file_add_locked(s, rr__refs_key, sizeof rr__refs_key, 1, &users, "rr_store_file");
  rr__file_end(s);
  if (rc != RR_OK) goto fail;
  RR__LOG_INFO(RR__SUB_STORE, "opened the store file %s (%" PRId64 " user%s)", path, users,
               users == 1 ? "" : "s");
  *store = &s->base;
  return RR_OK;
fail:
  rr__file_destroy(s);
  return rc;
}
