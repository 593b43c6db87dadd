/* RR_TRACE: the teaching trace, in two forms.
 *
 * RR_TRACE=1 prints one text line per rank per step of every algorithm on stderr, saying
 * which chunk went to whom and, when a chunk is small, the values before and after the
 * reduction, so a learner can follow the ring on a 4-rank run of 8 numbers (docs/ring.md
 * walks through one).
 *
 * RR_TRACE=<path> appends JSON lines to that file instead, for tools/ringreduce-view to
 * draw: per rank and call a "begin" record (the call, the group, the input values), one
 * "step" record per step (what was sent to whom and received from whom, the chunk, its
 * element and byte ranges, whether it was reduced, the operands and result when the chunk
 * has at most RR__TRACE_CAPTURE elements, and the step's start and end on the wall clock)
 * and an "end" record (status, output values). docs/ring.md, "The trace file", lists the
 * fields. Every rank of a host may append to one file: each record is one write() on an
 * O_APPEND descriptor, which a local file system places whole at the end of the file
 * (Linux holds the file's lock for the length of the write), so records never interleave
 * mid-line. On a network file system appends of two hosts can mix; give each host its own
 * file there (the viewer merges several files by time).
 *
 * Everything the trace knows of a step comes through one hook in the step engine (pipe.c),
 * which every algorithm runs its steps on: rr__trace_step_begin before the step keeps what
 * the step will overwrite (a small reduction's own operand, what a small send carries) and
 * asks for the operands of a small reduction, which the engine hands over as it reduces
 * (rr__trace_got, rr__trace_made); rr__trace_step_end writes the line or record. The
 * algorithms themselves hold no trace code: only labels on their steps (chunk numbers, a
 * phase). Nothing here can fail a call: a file that cannot be opened is reported once, as a
 * warning, and no trace is written. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/half.h"
#include "common/log.h"
#include "common/param.h"
#include "common/util.h"
#include "ring/mem.h"
#include "ring/prims.h"
#include "ring/trace.h"

static int rr__trace_kind;
static int rr__trace_fd = -1;
static pthread_once_t rr__trace_once = PTHREAD_ONCE_INIT;

/* RR_TRACE was checked with the other tunables (common/param.c): 0, 1 or a path. */
static void rr__trace_load(void) {
  const char *v = rr__params_get()->trace;
  if (!strcmp(v, "0")) return;
  if (!strcmp(v, "1")) {
    rr__trace_kind = RR__TRACE_TEXT;
    return;
  }
  char why[128];
  rr__trace_fd = rr__log_open_private(v, why, sizeof why);
  if (rr__trace_fd < 0) {
    RR__LOG_WARN(RR__SUB_COLL,
                 "RR_TRACE=%s: cannot open it for appending (%s); no trace is written", v, why);
    return;
  }
  rr__trace_kind = RR__TRACE_FILE;
}

static int rr__trace_get(void) {
  pthread_once(&rr__trace_once, rr__trace_load);
  return rr__trace_kind;
}

int rr__trace_mode(void) {
  return rr__trace_get();
}

/* The wall clock in nanoseconds, for step records. */
static int64_t rr__trace_clock(void) {
  struct timespec ts;
  /* The wall clock, so that records of ranks on different hosts merge by time (as well as
   * their clocks agree); a step's duration is short enough for a clock step not to matter. */
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0;
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Element i of buf as a double (every dtype fits one for display). */
static double rr__trace_elem(const void *buf, size_t i, rr_dtype d) {
  const char *p = (const char *)buf + i * rr_dtype_size(d);
  switch (d) {
    case RR_INT8:
      return *(const int8_t *)p;
    case RR_UINT8:
      return *(const uint8_t *)p;
    case RR_INT32: {
      int32_t x;
      memcpy(&x, p, 4);
      return x;
    }
    case RR_INT64: {
      int64_t x;
      memcpy(&x, p, 8);
      return (double)x;
    }
    case RR_FLOAT16: {
      uint16_t x;
      memcpy(&x, p, 2);
      return rr__half_to_float(x);
    }
    case RR_BFLOAT16: {
      uint16_t x;
      memcpy(&x, p, 2);
      return rr__bf16_to_float(x);
    }
    case RR_FLOAT32: {
      float x;
      memcpy(&x, p, 4);
      return x;
    }
    default: {
      double x;
      memcpy(&x, p, 8);
      return x;
    }
  }
}

/* ---- RR_TRACE=1: text lines on stderr ---- */

/* Up to n values as "{1 2 3}"; returns the characters written (cut at cap - 1). */
static int rr__trace_values(char *out, size_t cap, const void *buf, size_t n, rr_dtype d) {
  size_t o = 0;
  o += (size_t)snprintf(out + o, cap - o, "{");
  for (size_t i = 0; i < n && o < cap; i++)
    o += (size_t)snprintf(out + o, cap - o, "%s%g", i ? " " : "", rr__trace_elem(buf, i, d));
  if (o < cap) o += (size_t)snprintf(out + o, cap - o, "}");
  return (int)RR__MIN(o, cap - 1);
}

/* "[rank 2] all_reduce #0 " ahead of every line. */
static int rr__trace_prefix(const rr__coll *c, char *line, size_t cap) {
  return snprintf(line, cap, "[rank %d] %s #%llu ", rr__grank(c, c->r), rr__kind_name(c->hdr.kind),
                  (unsigned long long)c->hdr.seq);
}

/* One write per line, so lines of different ranks never interleave mid-line. */
static void rr__trace_write(int fd, char *line, size_t cap, int o) {
  if (o >= (int)cap - 1) o = (int)cap - 2;
  line[o++] = '\n';
  if (write(fd, line, (size_t)o) < 0) { /* tracing must never fail a call */
  }
}

/* A whole step's reduction, "x op y = result" in the order it was computed (recursive
 * doubling's rounds: docs/ring.md shows them). */
static void rr__trace_reduce(rr__coll *c, const void *x, const void *y, const void *result,
                             size_t n) {
  char line[640];
  const rr_dtype d = c->a->dtype;
  int o = rr__trace_prefix(c, line, sizeof line);
  o += snprintf(line + o, sizeof line - (size_t)o, "%s: ", rr__coll_where(c));
  o += rr__trace_values(line + o, sizeof line - (size_t)o, x, n, d);
  o += snprintf(line + o, sizeof line - (size_t)o, " %s ", rr_op_name(c->a->op));
  o += rr__trace_values(line + o, sizeof line - (size_t)o, y, n, d);
  o += snprintf(line + o, sizeof line - (size_t)o, " = ");
  o += rr__trace_values(line + o, sizeof line - (size_t)o, result, n, d);
  rr__trace_write(STDERR_FILENO, line, sizeof line, o);
}

static void rr__trace_text_step(rr__coll *c, const rr__step *st, const void *own, const void *got) {
  char line[640];
  const rr_dtype d = c->a->dtype;
  int o = rr__trace_prefix(c, line, sizeof line);
  o += snprintf(line + o, sizeof line - (size_t)o, "%s:", rr__coll_where(c));
  if (st->to >= 0)
    o += snprintf(line + o, sizeof line - (size_t)o, " sent c%d (%zu) to %d;", st->schunk,
                  st->scount, rr__grank(c, st->to));
  if (st->from >= 0) {
    o += snprintf(line + o, sizeof line - (size_t)o, " got c%d (%zu) from %d", st->rchunk,
                  st->rcount, rr__grank(c, st->from));
    if (st->rcount <= RR__TRACE_VALUES && st->rcount > 0 && st->rbuf) {
      o += snprintf(line + o, sizeof line - (size_t)o, ": ");
      if (own && got) {
        o += rr__trace_values(line + o, sizeof line - (size_t)o, own, st->rcount, d);
        o += snprintf(line + o, sizeof line - (size_t)o, " %s ", rr_op_name(c->a->op));
        o += rr__trace_values(line + o, sizeof line - (size_t)o, got, st->rcount, d);
        o += snprintf(line + o, sizeof line - (size_t)o, " = ");
      }
      o += rr__trace_values(line + o, sizeof line - (size_t)o, st->rbuf, st->rcount, d);
      if (st->avg_div) o += snprintf(line + o, sizeof line - (size_t)o, " (sum / %d)", st->avg_div);
    }
  }
  rr__trace_write(STDERR_FILENO, line, sizeof line, o);
}

/* ---- RR_TRACE=<path>: JSON lines ---- */

/* A record is built in a fixed buffer; one that does not fit (it cannot: values are capped
 * at RR__TRACE_CAPTURE per array) is dropped whole rather than written cut. */
typedef struct rr__jbuf {
  char b[16384];
  size_t n;
  int over;
} rr__jbuf;

static void rr__jput(rr__jbuf *j, const char *fmt, ...) RR__PRINTF(2, 3);
static void rr__jput(rr__jbuf *j, const char *fmt, ...) {
  if (j->over) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(j->b + j->n, sizeof j->b - j->n, fmt, ap);
  va_end(ap);
  if (k < 0 || (size_t)k >= sizeof j->b - j->n) {
    j->over = 1;
    return;
  }
  j->n += (size_t)k;
}

/* A JSON string; the texts traced are our own (names, "reduce-scatter step 1/3"), but a
 * quote or a control character must still not break the line. */
static void rr__jstr(rr__jbuf *j, const char *key, const char *s) {
  rr__jput(j, ",\"%s\":\"", key);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      rr__jput(j, "\\%c", ch);
    else if (ch < 0x20)
      rr__jput(j, "\\u%04x", ch);
    else
      rr__jput(j, "%c", ch);
  }
  rr__jput(j, "\"");
}

/* "key":[v, ...]: integers exactly, floating point with enough digits to read back the same
 * value (9 for float32 and narrower, 17 for double); NaN and infinities, which JSON lacks,
 * as the strings "nan", "inf", "-inf". */
static void rr__jvalues(rr__jbuf *j, const char *key, const void *buf, size_t n, rr_dtype d) {
  rr__jput(j, ",\"%s\":[", key);
  for (size_t i = 0; i < n; i++) {
    const char *sep = i ? "," : "";
    const char *p = (const char *)buf + i * rr_dtype_size(d);
    if (d == RR_INT64) {
      int64_t x;
      memcpy(&x, p, 8);
      rr__jput(j, "%s%lld", sep, (long long)x);
      continue;
    }
    double v = rr__trace_elem(buf, i, d);
    if (isnan(v))
      rr__jput(j, "%s\"nan\"", sep);
    else if (isinf(v))
      rr__jput(j, "%s\"%sinf\"", sep, v < 0 ? "-" : "");
    else
      rr__jput(j, d == RR_FLOAT64 ? "%s%.17g" : "%s%.9g", sep, v);
  }
  rr__jput(j, "]");
}

/* {"v":1,"ev":...,"coll":...,"seq":...,"algo":...,"rank":...,"grank":...,"n":... */
static void rr__jhead(rr__jbuf *j, const rr__coll *c, const char *ev) {
  rr__jput(j, "{\"v\":1,\"ev\":\"%s\"", ev);
  rr__jstr(j, "coll", rr__kind_name(c->hdr.kind));
  rr__jput(j, ",\"seq\":%llu", (unsigned long long)c->hdr.seq);
  rr__jstr(j, "algo", rr__algo(c->hdr.algo)->short_name);
  rr__jput(j, ",\"rank\":%d,\"grank\":%d,\"n\":%d", rr__grank(c, c->r), c->r, c->n);
}

static void rr__jwrite(rr__jbuf *j) {
  static atomic_int warned; /* calls of several groups may trace at once */
  if (j->over || j->n + 2 > sizeof j->b) {
    if (!atomic_exchange(&warned, 1))
      RR__LOG_WARN(RR__SUB_COLL, "RR_TRACE: a record did not fit its buffer; dropped");
    return;
  }
  j->b[j->n++] = '}';
  j->b[j->n++] = '\n';
  if (write(rr__trace_fd, j->b, j->n) < 0) { /* tracing must never fail a call */
  }
}

/* Where chunk `chunk` of a step starts, in elements: an algorithm that moves whole buffers
 * moves chunk 0; the others cut the kind's largest buffer (count elements, or count from or
 * for each rank) into n chunks (ring/ring.h; blocks of count when there is one per rank).
 * -1: not known here (all_to_allv places blocks by displacement). */
static long long rr__trace_off(const rr__coll *c, int chunk) {
  const rr__kind_info *k = rr__kind(c->hdr.kind);
  if (rr__algo(c->hdr.algo)->whole) return 0;
  if (k->in == RR__IO_DISPLS || k->out == RR__IO_DISPLS) return -1;
  size_t total = c->a->count;
  if (k->in == RR__IO_COUNT_N || k->out == RR__IO_COUNT_N) total *= (size_t)c->n;
  return (long long)rr__chunk_off(total, c->n, chunk);
}

/* A step names its phase when its algorithm has several; else it is the kind's. */
static const char *rr__trace_phase(const rr__coll *c, const rr__step *st) {
  return st->phase ? st->phase : rr__kind(c->hdr.kind)->phase;
}

/* "key":{"to"/"from":group rank,"to_rank"/"from_rank":global rank,"chunk","off","count","bytes" */
static void rr__jside(rr__jbuf *j, const rr__coll *c, const char *key, const char *who, int peer,
                      int chunk, size_t count) {
  if (rr__algo(c->hdr.algo)->whole) chunk = 0;
  long long off = chunk >= 0 ? rr__trace_off(c, chunk) : 0;
  rr__jput(j, ",\"%s\":{\"%s\":%d,\"%s_rank\":%d,\"chunk\":%d,\"count\":%zu", key, who, peer, who,
           rr__grank(c, peer), chunk, count);
  if (off >= 0)
    rr__jput(j, ",\"off\":%lld,\"bytes\":[%llu,%llu]", off, (unsigned long long)off * c->esize,
             (unsigned long long)(off + (long long)count) * c->esize);
}

/* What a finished step shows (NULL: not kept): the operands of a reduction, what arrived or
 * what the reduction made, what was sent. */
typedef struct rr__trace_vals {
  const void *own, *got, *res, *sent;
} rr__trace_vals;

static void rr__trace_json_step(rr__coll *c, const rr__step *st, const rr__trace_cap *cap,
                                const rr__trace_vals *v) {
  rr__jbuf j;
  j.n = 0, j.over = 0;
  const rr_dtype d = c->a->dtype;
  const int reduce = st->kind == RR__STEP_REDUCE || st->kind == RR__STEP_FWD_REDUCE;
  const int forward = st->kind == RR__STEP_FWD_COPY || st->kind == RR__STEP_FWD_REDUCE;
  const void *res = v->res; /* what arrived (a copy) or what the reduction made */
  rr__jhead(&j, c, "step");
  rr__jput(&j, ",\"step\":%d", c->trace_step);
  rr__jstr(&j, "phase", rr__trace_phase(c, st));
  rr__jstr(&j, "where", rr__coll_where(c));
  rr__jput(&j, ",\"t0_ns\":%lld,\"t1_ns\":%lld", (long long)cap->t0_ns,
           (long long)rr__trace_clock());
  if (forward) rr__jput(&j, ",\"forward\":true");
  if (st->to >= 0) {
    rr__jside(&j, c, "send", "to", st->to, st->schunk, st->scount);
    /* A chain link sends on what it received (and, reducing, what it made of it). */
    const void *sent = forward ? res : v->sent;
    if (sent && st->scount <= RR__TRACE_CAPTURE) rr__jvalues(&j, "values", sent, st->scount, d);
    rr__jput(&j, "}");
  }
  if (st->from >= 0) {
    rr__jside(&j, c, "recv", "from", st->from, st->rchunk, st->rcount);
    rr__jput(&j, ",\"reduce\":%s", reduce ? "true" : "false");
    if (reduce) rr__jstr(&j, "op", rr_op_name(c->a->op));
    if (st->avg_div) rr__jput(&j, ",\"avg_div\":%d", st->avg_div);
    if (reduce && v->own && v->got) {
      rr__jvalues(&j, "own", v->own, st->rcount, d);
      rr__jvalues(&j, "got", v->got, st->rcount, d);
    }
    if (res && st->rcount <= RR__TRACE_CAPTURE) rr__jvalues(&j, "values", res, st->rcount, d);
    rr__jput(&j, "}");
  }
  rr__jwrite(&j);
}

/* ---- the hook in the step engine ---- */

rr__trace_cap *rr__trace_step_begin(rr__coll *c, const rr__step *st, rr__trace_cap *cap) {
  const size_t es = c->esize;
  const int reduce = st->kind == RR__STEP_REDUCE || st->kind == RR__STEP_FWD_REDUCE;
  cap->t0_ns = rr__trace_clock();
  /* Device buffers are not read here (the trace would have to copy them back). */
  const int host = (c->mem->caps & RR__MEM_HOST) != 0;
  cap->keep = host && reduce && st->own && st->rcount <= RR__TRACE_CAPTURE;
  cap->has_sent = host && st->to >= 0 && st->sbuf && st->scount <= RR__TRACE_CAPTURE;
  if (cap->keep) memcpy(cap->own, st->own, st->rcount * es);
  if (cap->has_sent) memcpy(cap->sent, st->sbuf, st->scount * es);
  return cap->keep ? cap : NULL;
}

void rr__trace_got(rr__trace_cap *cap, size_t off, const void *got, size_t len) {
  memcpy(cap->got + off, got, len);
}
void rr__trace_made(rr__trace_cap *cap, size_t off, const void *res, size_t len) {
  memcpy(cap->res + off, res, len);
}

void rr__trace_step_end(rr__coll *c, const rr__step *st, const rr__trace_cap *cap) {
  const int mode = rr__trace_get();
  const int reduce = st->kind == RR__STEP_REDUCE || st->kind == RR__STEP_FWD_REDUCE;
  rr__trace_vals v = {0};
  if (cap->keep) { /* a chain's result lives on only in the copy (its slot is reused) */
    v.own = cap->own, v.got = cap->got;
    v.res = st->rbuf ? st->rbuf : cap->res;
  } else if (!reduce && st->rbuf && st->rcount <= RR__TRACE_CAPTURE) {
    v.res = st->rbuf; /* what arrived */
  }
  if (cap->has_sent) v.sent = cap->sent;
  if (mode == RR__TRACE_FILE) {
    rr__trace_json_step(c, st, cap, &v);
  } else if (mode == RR__TRACE_TEXT && !st->whole) {
    rr__trace_text_step(c, st, v.own, v.got);
  } else if (mode == RR__TRACE_TEXT && cap->keep && st->rcount <= RR__TRACE_VALUES) {
    /* A whole step shows its reduction as computed, before an AVG division. */
    rr__trace_reduce(c, st->got_first ? v.got : v.own, st->got_first ? v.own : v.got, cap->res,
                     st->rcount);
  }
  c->trace_step++;
}

/* The elements a call reads (in) and writes (out) on this rank (ring/kind.c), for the kinds
 * whose values the viewer replays: only the root reads a broadcast's input and writes a
 * reduce's output. 0: none. */
static rr__call_io rr__trace_io(const rr__coll *c) {
  if (!rr__kind_has(c->a->kind, RR__KF_VIEW)) return (rr__call_io){0};
  return rr__kind_io(c->a, c->n, c->r);
}

void rr__trace_begin(rr__coll *c) {
  if (rr__trace_get() != RR__TRACE_FILE) return;
  const rr__args *a = c->a;
  rr__jbuf j;
  j.n = 0, j.over = 0;
  c->trace_t0 = rr__trace_clock();
  rr__jhead(&j, c, "begin");
  rr__jput(&j, ",\"t_ns\":%lld,\"pid\":%ld", (long long)c->trace_t0, (long)getpid());
  rr__jput(&j, ",\"ranks\":[");
  for (int q = 0; q < c->n; q++) rr__jput(&j, "%s%d", q ? "," : "", rr__grank(c, q));
  rr__jput(&j, "]");
  rr__jstr(&j, "dtype", rr_dtype_name(a->dtype));
  rr__jstr(&j, "op", rr_op_name(a->op));
  rr__jput(&j, ",\"count\":%zu,\"root\":%d", a->count, a->root);
  size_t in = rr__trace_io(c).in;
  rr__jput(&j, ",\"in_count\":%zu", in);
  if (in && in <= RR__TRACE_CAPTURE && a->sendbuf) rr__jvalues(&j, "in", a->sendbuf, in, a->dtype);
  rr__jwrite(&j);
}

void rr__trace_end(rr__coll *c, int status) {
  if (rr__trace_get() != RR__TRACE_FILE) return;
  rr__jbuf j;
  j.n = 0, j.over = 0;
  int64_t t = rr__trace_clock();
  rr__jhead(&j, c, "end");
  rr__jput(&j, ",\"t_ns\":%lld,\"dur_ns\":%lld,\"steps\":%d", (long long)t,
           (long long)(t - c->trace_t0), c->trace_step);
  rr__jstr(&j, "status", rr_status_name(status));
  size_t out = status == RR_OK ? rr__trace_io(c).out : 0;
  rr__jput(&j, ",\"out_count\":%zu", out);
  if (out && out <= RR__TRACE_CAPTURE && c->a->recvbuf)
    rr__jvalues(&j, "out", c->a->recvbuf, out, c->a->dtype);
  rr__jwrite(&j);
}
