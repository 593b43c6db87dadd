/* RR_TRACE=1: the teaching trace. One line per rank per step of every algorithm, saying
 * which chunk went to whom and, when a chunk is small, the values before and after the
 * reduction, so a learner can follow the ring on a 4-rank run of 8 numbers
 * (docs/ring.md walks through one). Kept out of the step engine so that pipe.c reads as
 * the data path alone; nothing here can fail a call. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/half.h"
#include "common/param.h"
#include "common/util.h"
#include "ring/coll.h"

int rr__trace_on(void) { return rr__params_get()->trace != 0; }

/* Up to n values as "{1 2 3}"; returns the characters written (cut at cap - 1). */
static int rr__trace_values(char *out, size_t cap, const void *buf, size_t n, rr_dtype d) {
  size_t o = 0;
  o += (size_t)snprintf(out + o, cap - o, "{");
  for (size_t i = 0; i < n && o < cap; i++) {
    const char *p = (const char *)buf + i * rr_dtype_size(d);
    double v;
    switch (d) {
      case RR_INT8: v = *(const int8_t *)p; break;
      case RR_UINT8: v = *(const uint8_t *)p; break;
      case RR_INT32: { int32_t x; memcpy(&x, p, 4); v = x; break; }
      case RR_INT64: { int64_t x; memcpy(&x, p, 8); v = (double)x; break; }
      case RR_FLOAT16: { uint16_t x; memcpy(&x, p, 2); v = rr__half_to_float(x); break; }
      case RR_BFLOAT16: { uint16_t x; memcpy(&x, p, 2); v = rr__bf16_to_float(x); break; }
      case RR_FLOAT32: { float x; memcpy(&x, p, 4); v = x; break; }
      default: { double x; memcpy(&x, p, 8); v = x; }
    }
    o += (size_t)snprintf(out + o, cap - o, "%s%g", i ? " " : "", v);
  }
  if (o < cap) o += (size_t)snprintf(out + o, cap - o, "}");
  return (int)RR__MIN(o, cap - 1);
}

/* "[rank 2] all_reduce #0 " ahead of every line. */
static int rr__trace_prefix(const rr__coll *c, char *line, size_t cap) {
  return snprintf(line, cap, "[rank %d] %s #%llu ", rr__grank(c, c->r),
                  rr__kind_name(c->hdr.kind), (unsigned long long)c->hdr.seq);
}

/* One write per line, so lines of different ranks never interleave mid-line. */
static void rr__trace_write(char *line, size_t cap, int o) {
  if (o >= (int)cap - 1) o = (int)cap - 2;
  line[o++] = '\n';
  if (write(STDERR_FILENO, line, (size_t)o) < 0) { /* tracing must never fail a call */ }
}

void rr__trace_reduce(rr__coll *c, const void *x, const void *y, const void *result, size_t n) {
  char line[640];
  const rr_dtype d = c->a->dtype;
  int o = rr__trace_prefix(c, line, sizeof line);
  o += snprintf(line + o, sizeof line - (size_t)o, "%s: ", rr__coll_where(c));
  o += rr__trace_values(line + o, sizeof line - (size_t)o, x, n, d);
  o += snprintf(line + o, sizeof line - (size_t)o, " %s ", rr_op_name(c->a->op));
  o += rr__trace_values(line + o, sizeof line - (size_t)o, y, n, d);
  o += snprintf(line + o, sizeof line - (size_t)o, " = ");
  o += rr__trace_values(line + o, sizeof line - (size_t)o, result, n, d);
  rr__trace_write(line, sizeof line, o);
}

void rr__trace_step(rr__coll *c, const rr__step *st, const void *own, const void *got) {
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
  rr__trace_write(line, sizeof line, o);
}
