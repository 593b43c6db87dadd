/* Running one call, as the group sees the ring (group/run.c): set up the context of a call,
 * number it and write its header, run its algorithm, describe it. The dispatcher
 * (ring/coll.c) sits above the algorithms and the primitives they are written against
 * (ring/prims.h), which it includes for the group: the call's arguments, the ring's state
 * between calls, a call's context. */
#ifndef RR__RING_COLL_H_
#define RR__RING_COLL_H_

#include "ring/mem.h"
#include "ring/prims.h"

/* Fill in the tunables of a group's state (segment size, slots, algorithm, trace), so that a
 * call reads them from the state and not from the environment's tables. */
void rr__coll_state_setup(rr__coll_state *cs);

/* Set up the context of a call of group rank `rank` of `size` over `cm`. */
void rr__coll_init(rr__coll *c, rr__coll_state *cs, rr__comm *cm, const rr__args *a, int rank,
                   int size, int64_t timeout_ms);
/* The call's segment size (rr__coll_init: the group's RR_SEG_BYTES). Before rr__coll_begin,
 * which puts it in the header: every rank of the call must choose the same. */
void rr__coll_set_seg(rr__coll *c, size_t seg_bytes);
/* Number the call and write its header (takes the next sequence number). */
void rr__coll_begin(rr__coll *c);
/* Run the call's algorithm to the end: RR_OK, or the failure with the last error set (the
 * caller adds who and where, and aborts the group). */
int rr__coll_exec(rr__coll *c);
/* One line naming the call, for logs and errors. Returns desc. */
const char *rr__coll_describe(const rr__coll *c, char *desc, size_t n);

/* The call runs on device buffers (ring/mem.h, ring/pipe_dev.c), on dev's device and stream:
 * over lanes that carry device messages (CUDA IPC), or, piped, through pinned host slots.
 * Before rr__coll_begin (the algorithm a call chooses depends on it). */
void rr__coll_on_device(rr__coll *c, const rr__req_dev *dev, int piped);

#endif /* RR__RING_COLL_H_ */
