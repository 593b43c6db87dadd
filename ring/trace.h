/* The teaching trace (ring/trace.c), as the step engine (ring/pipe.c) and the dispatcher
 * (ring/coll.c) call it. RR_TRACE=1: a text line per rank per step on stderr.
 * RR_TRACE=<path>: JSON lines appended to that file, a "begin" and an "end" record per rank
 * and call and a "step" record per rank and step (the fields: docs/ring.md, "The trace
 * file"). */
#ifndef RR__RING_TRACE_H_
#define RR__RING_TRACE_H_

#include "ring/prims.h"

/* Which of the two is on (enum rr__trace_mode, ring/prims.h), read once from the
 * environment; the group's state keeps it (rr__coll_state.trace), and calls read it there. */
int rr__trace_mode(void);
/* Text lines show values only for chunks this small; file records for chunks up to
 * RR__TRACE_CAPTURE elements (which also bounds the copies a traced step keeps). */
#define RR__TRACE_VALUES 8
#define RR__TRACE_CAPTURE 64
/* What a traced step keeps of its data, which the step overwrites or releases before it
 * ends: its start time, what a small send carried (copied before the step), and the operands
 * of a small reduction (`own` before the step, `got` as received and `res` as made, handed
 * over by the step as it reduces). The step engine holds it; only ring/trace.c reads it. */
typedef struct rr__trace_cap {
  int64_t t0_ns;
  int keep, has_sent; /* operands kept; `sent` holds what was sent */
  unsigned char own[RR__TRACE_CAPTURE * 8], got[RR__TRACE_CAPTURE * 8];
  unsigned char res[RR__TRACE_CAPTURE * 8], sent[RR__TRACE_CAPTURE * 8];
} rr__trace_cap;
/* Around every step (ring/pipe.c, only when the group's trace is on): begin keeps what the
 * step will overwrite and returns cap when the step is to hand over its reductions' operands
 * (NULL when not); end writes the step's text line or file record and counts the step. */
rr__trace_cap *rr__trace_step_begin(rr__coll *c, const rr__step *st, rr__trace_cap *cap);
void rr__trace_step_end(rr__coll *c, const rr__step *st, const rr__trace_cap *cap);
/* Inside a step whose operands are kept: `len` bytes at byte `off` of the received chunk,
 * as received (before the reduction reads them) and as reduced (after it wrote them). */
void rr__trace_got(rr__trace_cap *cap, size_t off, const void *got, size_t len);
void rr__trace_made(rr__trace_cap *cap, size_t off, const void *res, size_t len);
/* File only: the call's begin record (with its input when small) and end record (with
 * its status and, when it succeeded and is small, its output). */
void rr__trace_begin(rr__coll *c);
void rr__trace_end(rr__coll *c, int status);

#endif /* RR__RING_TRACE_H_ */
