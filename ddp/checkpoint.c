/* DDP checkpoints (rr_ddp_save, rr_ddp_load): rank 0 writes or reads the file, every rank
 * gets rank 0's verdict, and a load ends with the coalesced broadcast. Apart from ddp.c
 * because the file format and its checks are independent of the iteration: they need only
 * the tensor descriptions, device copies, the broadcast and the wrapper's error state.
 *
 * The file, in host byte order:
 *
 *   "RRDDPCK1" | u32 version 1 | u32 nparams | u32 nbuffers | u32 0
 *   per tensor: u32 dtype | u32 ndim | u64 count | i64 shape[ndim] | u32 namelen | name
 *   per tensor: count * dtype-size bytes
 *   u64 FNV-1a of everything before
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/status.h"
#include "common/util.h"
#include "ddp/ddp_internal.h"

#define RR__CKPT_MAGIC "RRDDPCK1"

static uint64_t rr__fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

typedef struct rr__wfile {
  FILE *fp;
  uint64_t h;
  int err; /* errno of a failed write */
  int st;  /* a failure to read a device tensor (its text in the last error) */
} rr__wfile;

static void rr__w(rr__wfile *w, const void *p, size_t n) {
  if (w->err || n == 0) return;
  if (fwrite(p, 1, n, w->fp) != n) w->err = errno ? errno : EIO;
  w->h = rr__fnv(w->h, p, n);
}

static void rr__w_tensor_hdr(rr__wfile *w, const rr_ddp_tensor *t) {
  uint32_t dt = (uint32_t)t->dtype, nd = (uint32_t)t->ndim, nl = (uint32_t)strlen(t->name);
  uint64_t c = t->count;
  rr__w(w, &dt, 4), rr__w(w, &nd, 4), rr__w(w, &c, 8);
  rr__w(w, t->shape, (size_t)t->ndim * 8);
  rr__w(w, &nl, 4), rr__w(w, t->name, nl);
}

/* A tensor's data; a device tensor's through a host copy. */
static void rr__w_data(const rr_ddp *d, rr__wfile *w, const rr_ddp_tensor *t) {
  size_t n = t->count * rr_dtype_size(t->dtype);
  if (t->device < 0 || n == 0) {
    rr__w(w, t->data, n);
    return;
  }
  if (w->err || w->st) return;
  void *h = malloc(n);
  if (!h) {
    w->st = rr__set_error(RR_ENOMEM, "out of memory for a %zu-byte host copy of '%s'", n, t->name);
    return;
  }
  int st = rr__ddp_copy(d, t, h, t->data, n);
  if (st == RR_OK)
    rr__w(w, h, n);
  else
    w->st = rr__prefix_error(st, "copying '%s' from CUDA device %d", t->name, t->device);
  free(h);
}

/* A new temporary file beside path, created by this call and no one else: O_EXCL with a
 * random name, so that nothing planted at a guessable name (a link to another file, which
 * fopen would truncate; a FIFO, which would block the open) is ever opened. The mode is
 * what fopen would give (0666 less the umask). */
static FILE *rr__ddp_tmpfile(const char *path, char *tmp, size_t n) {
  for (int tries = 0; tries < 8; tries++) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) return NULL;
    if ((size_t)snprintf(tmp, n, "%s.tmp.%d.%08x", path, (int)getpid(), r) >= n) {
      errno = ENAMETOOLONG;
      return NULL;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
      int e = errno;
      close(fd);
      unlink(tmp);
      errno = e;
    }
    return f;
  }
  errno = EEXIST;
  return NULL;
}

/* Rank 0's half of a save: a temporary file, flushed to disk, renamed over path. */
static int rr__ddp_write(rr_ddp *d, const char *path) {
  char tmp[4096];
  rr__wfile w = {.fp = rr__ddp_tmpfile(path, tmp, sizeof tmp), .h = 14695981039346656037ull};
  if (!w.fp)
    return rr__set_error(RR_ESYS, "cannot create a temporary file beside %s: %s", path,
                         strerror(errno));
  uint32_t head[4] = {1, (uint32_t)d->nparams, (uint32_t)d->nbuffers, 0};
  rr__w(&w, RR__CKPT_MAGIC, 8);
  rr__w(&w, head, sizeof head);
  for (int i = 0; i < d->nparams; i++) rr__w_tensor_hdr(&w, &d->params[i]);
  for (int i = 0; i < d->nbuffers; i++) rr__w_tensor_hdr(&w, &d->buffers[i]);
  for (int i = 0; i < d->nparams; i++) rr__w_data(d, &w, &d->params[i]);
  for (int i = 0; i < d->nbuffers; i++) rr__w_data(d, &w, &d->buffers[i]);
  uint64_t h = w.h;
  rr__w(&w, &h, 8);
  if (!w.err && fflush(w.fp) != 0) w.err = errno;
  if (!w.err && fsync(fileno(w.fp)) != 0) w.err = errno;
  if (fclose(w.fp) != 0 && !w.err) w.err = errno;
  if (w.st) {
    unlink(tmp);
    return rr__prefix_error(w.st, "writing %s", path);
  }
  if (!w.err && rename(tmp, path) != 0) w.err = errno;
  if (w.err) {
    unlink(tmp);
    return rr__set_error(RR_ESYS, "writing %s: %s", path, strerror(w.err));
  }
  return RR_OK;
}

typedef struct rr__rfile {
  const unsigned char *p;
  size_t n, off;
} rr__rfile;

static int rr__r(rr__rfile *r, void *dst, size_t n) {
  if (r->n - r->off < n) return -1;
  memcpy(dst, r->p + r->off, n);
  r->off += n;
  return 0;
}

/* A tensor's data, the length already checked; to a device tensor by a copy. */
static int rr__r_data(const rr_ddp *d, rr__rfile *r, const rr_ddp_tensor *t) {
  size_t n = t->count * rr_dtype_size(t->dtype);
  int st = rr__ddp_copy(d, t, t->data, r->p + r->off, n);
  r->off += n;
  if (st != RR_OK)
    return rr__prefix_error(st, "copying '%s' to CUDA device %d", t->name, t->device);
  return RR_OK;
}

/* Check one stored tensor header against the model's tensor. */
static int rr__ddp_read_hdr(rr__rfile *r, const rr_ddp_tensor *t, const char *kind, int i,
                            const char *path) {
  uint32_t dt, nd, nl;
  uint64_t c;
  int64_t shape[RR_DDP_MAX_DIMS] = {0};
  char name[256];
  if (rr__r(r, &dt, 4) || rr__r(r, &nd, 4) || rr__r(r, &c, 8) || nd > RR_DDP_MAX_DIMS ||
      rr__r(r, shape, (size_t)nd * 8) || rr__r(r, &nl, 4))
    return rr__set_error(RR_EPROTO, "%s is truncated or corrupt (in the header of %s[%d])", path,
                         kind, i);
  size_t keep = RR__MIN((size_t)nl, sizeof name - 1);
  if (r->n - r->off < nl)
    return rr__set_error(RR_EPROTO, "%s is truncated (name of %s[%d])", path, kind, i);
  /* Names are compared in full; the copy is only for the message. */
  int same_name =
      !nl || !t->name[0] || (nl == strlen(t->name) && memcmp(r->p + r->off, t->name, nl) == 0);
  memcpy(name, r->p + r->off, keep);
  name[keep] = '\0';
  r->off += nl;
  rr_ddp_tensor f = {.name = name, .count = (size_t)c, .dtype = (rr_dtype)dt, .ndim = (int)nd};
  memcpy(f.shape, shape, sizeof shape);
  int same = dt == (uint32_t)t->dtype && c == t->count && nd == (uint32_t)t->ndim &&
             memcmp(shape, t->shape, (size_t)nd * 8) == 0;
  if (!same || !same_name) {
    char a[160], b[160];
    rr__ddp_shape_str(&f, a, sizeof a);
    rr__ddp_shape_str(t, b, sizeof b);
    return rr__set_error(RR_EMISMATCH,
                         "%s does not fit the model: its %s[%d] is '%s' %s %s, the model's is "
                         "'%s' %s %s",
                         path, kind, i, name, a,
                         dt < RR_NUM_DTYPES ? rr_dtype_name((rr_dtype)dt) : "invalid-dtype",
                         t->name, b, rr_dtype_name(t->dtype));
  }
  return RR_OK;
}

/* Rank 0's half of a load: read all, check all, and only then overwrite the model. */
static int rr__ddp_read(rr_ddp *d, const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return rr__set_error(RR_ESYS, "cannot open %s: %s", path, strerror(errno));
  unsigned char *buf = NULL;
  size_t n = 0, cap = 0;
  int st = RR_OK;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 1 << 16;
      unsigned char *nb = realloc(buf, cap);
      if (!nb) {
        st = rr__set_error(RR_ENOMEM, "out of memory reading %s", path);
        break;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, fp);
    n += got;
    if (got == 0) {
      if (ferror(fp)) st = rr__set_error(RR_ESYS, "reading %s: %s", path, strerror(errno));
      break;
    }
  }
  fclose(fp);
  if (st != RR_OK) {
    free(buf);
    return st;
  }
  rr__rfile r = {.p = buf, .n = n};
  char magic[8];
  uint32_t head[4];
  uint64_t want;
  if (n < 8 + sizeof head + 8 || rr__r(&r, magic, 8) || memcmp(magic, RR__CKPT_MAGIC, 8) != 0) {
    free(buf);
    return rr__set_error(RR_EPROTO, "%s is not a ringreduce DDP checkpoint (no %s header)", path,
                         RR__CKPT_MAGIC);
  }
  memcpy(&want, buf + n - 8, 8);
  if (rr__fnv(14695981039346656037ull, buf, n - 8) != want) {
    free(buf);
    return rr__set_error(RR_EPROTO, "%s is corrupt: its checksum does not match its contents",
                         path);
  }
  r.n = n - 8;
  (void)rr__r(&r, head, sizeof head);
  if (head[0] != 1)
    st = rr__set_error(RR_EPROTO, "%s: checkpoint version %u (want 1)", path, head[0]);
  else if (head[1] != (uint32_t)d->nparams || head[2] != (uint32_t)d->nbuffers)
    st = rr__set_error(RR_EMISMATCH,
                       "%s does not fit the model: it holds %u parameters and %u buffers, the "
                       "model has %d and %d",
                       path, head[1], head[2], d->nparams, d->nbuffers);
  for (int i = 0; st == RR_OK && i < d->nparams; i++)
    st = rr__ddp_read_hdr(&r, &d->params[i], "params", i, path);
  for (int i = 0; st == RR_OK && i < d->nbuffers; i++)
    st = rr__ddp_read_hdr(&r, &d->buffers[i], "buffers", i, path);
  size_t data = 0;
  for (int i = 0; i < d->nparams; i++)
    data += d->params[i].count * rr_dtype_size(d->params[i].dtype);
  for (int i = 0; i < d->nbuffers; i++)
    data += d->buffers[i].count * rr_dtype_size(d->buffers[i].dtype);
  if (st == RR_OK && r.n - r.off != data)
    st = rr__set_error(RR_EPROTO, "%s: %zu bytes of data where the model needs %zu", path,
                       r.n - r.off, data);
  for (int i = 0; st == RR_OK && i < d->nparams; i++) st = rr__r_data(d, &r, &d->params[i]);
  for (int i = 0; st == RR_OK && i < d->nbuffers; i++) st = rr__r_data(d, &r, &d->buffers[i]);
  free(buf);
  return st;
}

/* Rank 0's verdict, so every rank returns the same status and cause. */
typedef struct rr__ddp_verdict {
  int64_t status;
  char msg[504];
} rr__ddp_verdict;

static int rr__ddp_share_verdict(rr_ddp *d, int st, const char *what) {
  rr__ddp_verdict v = {.status = st};
  if (st != RR_OK) snprintf(v.msg, sizeof v.msg, "%s", rr__error());
  int s = rr_broadcast(d->pg, &v, &v, sizeof v, RR_UINT8, d->root);
  if (s != RR_OK) {
    rr__prefix_error(s, "rank %d: %s: waiting for rank 0", d->rank, what);
    return rr__ddp_break(d, s);
  }
  if (v.status != RR_OK)
    return rr__set_error((int)v.status, "rank %d: %s: rank 0 failed: %s", d->rank, what, v.msg);
  return RR_OK;
}

static int rr__ddp_idle(rr_ddp *d, const char *fn) {
  RR__CHECK(rr__ddp_check(d, fn));
  if (d->nmarked > 0)
    return rr__set_error(RR_ESTATE,
                         "rank %d: %s: a backward pass is in progress (call "
                         "rr_ddp_sync first)",
                         d->rank, fn);
  return RR_OK;
}

int rr_ddp_save(rr_ddp *d, const char *path) {
  RR__CHECK(rr__ddp_idle(d, "rr_ddp_save"));
  int st = RR_OK;
  if (d->rank == 0) st = path ? rr__ddp_write(d, path) : rr__set_error(RR_EINVAL, "path is NULL");
  return rr__ddp_share_verdict(d, st, "rr_ddp_save");
}

int rr_ddp_load(rr_ddp *d, const char *path) {
  RR__CHECK(rr__ddp_idle(d, "rr_ddp_load"));
  int st = RR_OK;
  if (d->rank == 0) st = path ? rr__ddp_read(d, path) : rr__set_error(RR_EINVAL, "path is NULL");
  RR__CHECK(rr__ddp_share_verdict(d, st, "rr_ddp_load"));
  RR__CHECK(rr__ddp_bcast(d, d->params, d->nparams, "rr_ddp_load: parameters"));
  RR__CHECK(rr__ddp_bcast(d, d->buffers, d->nbuffers, "rr_ddp_load: buffers"));
  /* A load returns with the tensors written, as construction does. */
  int w = rr__ddp_bcast_wait(d);
  if (w != RR_OK) {
    rr__prefix_error(w, "rank %d: rr_ddp_load: copying loaded tensors to CUDA device %d", d->rank,
                     d->device);
    return rr__ddp_abort(d, w);
  }
  return RR_OK;
}
