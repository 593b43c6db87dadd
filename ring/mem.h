/* Where a call's bytes live, and all that changes with it below the algorithms.
 *
 * An algorithm reads the same for every memory: it copies with rr__coll_copy, takes scratch
 * with rr__coll_scratch and runs steps (ring/pipe.c). The call's memory (rr__coll.mem, one
 * const table, as a transport is) says how each of those is done: a local copy and a
 * reduction in order with the call's other work (memmove and the host loops of ring/op.c,
 * or a copy and a kernel on the call's CUDA stream), scratch of that memory, and how the
 * segments of a pipelined step reach the wire and leave it, through the hooks that the one
 * segment loop of ring/pipe.c calls.
 *
 * Four memories today: host memory (ring/pipe.c), and device buffers (ring/pipe_dev.c)
 * either over lanes that carry device messages (CUDA IPC: a segment is reduced by a kernel
 * straight out of the transport's device slot) or piped through pinned host slots over any
 * lanes (a segment is copied off the device before it is sent, and onto it before it is
 * reduced), or whose segments the GPUs' streams hand over by stream
 * memory operations (the host only queues them). A new way to hand device segments over is
 * a new table beside these, chosen by the group (ring/coll.h, rr__coll_on_device); no
 * algorithm changes. */
#ifndef RR__RING_MEM_H_
#define RR__RING_MEM_H_

#include <stddef.h>

#include "ring/prims.h"
#include "ring/trace.h"

/* The most segments one step has in flight each way (sends staged and not yet complete,
 * receives posted and not yet processed): the request arrays of a step are this long. A
 * memory's windows may be smaller: sends on lanes that carry a call's own bytes as they are
 * queue up to RR__PIPE_SEND_WIN. */
#define RR__PIPE_WIN 64
#define RR__PIPE_SEND_WIN 32

/* One reduction of a step (a segment, or a whole buffer): dst = own (op) got, or got (op)
 * own. It runs wherever the received bytes are: in the step's loop (a staging slot, the
 * landing buffer), or inside the transport straight out of its memory (rr__req.consume). */
typedef struct rr__red {
  const rr__coll *c;
  char *dst;
  const char *own;
  size_t off; /* bytes into the step's received chunk */
  int avg_div, got_first;
  rr__trace_cap *tap; /* the trace keeps this step's operands (NULL: not) */
  int status;         /* a reduction the transport ran: its status */
} rr__red;

/* A pipelined step in progress, as the loop (ring/pipe.c) and the memory's hooks share it.
 * Segment k of a step is the k-th `seg` elements of its buffers; its requests live in
 * sreq / rreq / red at k % RR__PIPE_WIN. */
typedef struct rr__pipe {
  rr__coll *c;
  const rr__step *st;
  size_t es, seg;      /* bytes per element, elements per segment */
  size_t nsend, nrecv; /* segments to send and to receive */
  /* What the step does with received bytes (its kind): reduce them in a slot first;
   * forward each segment once it arrived; forward it from the slot it was reduced in. */
  int slotted, forward, fwd_from_slot;
  int p2p; /* point to point: the lane may copy across memories (rr__req.p2p) */
  /* The receive slots of a slotted step (the memory's begin hook sets them), and the most
   * segments the memory lets be in flight each way (at most RR__PIPE_WIN). */
  char *slots;
  size_t nslots, slot_bytes;
  size_t swin, rwin;
  size_t sq, sp, sd; /* sends staged (handed to the memory), posted on the wire, complete */
  size_t rp, rd;     /* receives posted, processed */
  void *mine;        /* the memory's own state for the step (the piped path's slots) */
  int64_t ctl_ms;    /* the piped path's last look at the control sockets */
  rr__trace_cap *tap;
  /* Last: the loop clears the fields above at the start of a step, and these as it uses
   * them. */
  rr__req sreq[RR__PIPE_WIN], rreq[RR__PIPE_WIN];
  rr__red red[RR__PIPE_WIN];
} rr__pipe;

/* Capabilities of a memory. */
#define RR__MEM_HOST 0x1u  /* the host reads the bytes as they are (the trace shows them) */
#define RR__MEM_WHOLE 0x2u /* it runs whole steps (recursive doubling's, ring/pipe.c) */

typedef struct rr__mem {
  const char *name;
  unsigned caps; /* RR__MEM_* */
  /* Local work, in order with everything else the call does to this memory: a copy
   * (regions may overlap) and a reduction, dst[i] = a[i] (op) b[i] for i < n elements (AVG
   * divides by avg_div when > 0). */
  int (*copy)(const rr__coll *c, void *dst, const void *src, size_t bytes);
  int (*reduce)(const rr__coll *c, void *dst, const void *a, const void *b, size_t n, int avg_div);
  /* The group's grow-only scratch buffer of this memory, at least `bytes`. */
  int (*scratch)(rr__coll *c, size_t bytes, void **out);

  /* A pipelined step's segments (ring/pipe.c). Each returns an RR_ status unless it says
   * otherwise, and sets the last error on failure.
   *   begin       before the first segment: refuse a step it cannot run, set the receive
   *               slots and the windows
   *   send_stage  segment k (len bytes at src) is next to go: fill r (buf, dev) for it;
   *               it may first have to be copied somewhere the lane can read
   *   send_ready  1 when staged segment k may be posted, 0 not yet, < 0 an error; NULL:
   *               always at once
   *   recv_post   1 with r filled in (buf, dev, a consume hook with x for a slotted step)
   *               when segment k may be posted now, 0 while its slot is still in use
   *   recv_done   segment k arrived (complete): reduce it, or hand it on
   *   idle        nothing moved: wait for the wire (or for the memory's own work), toward
   *               `peer`, as long as the call's deadline allows */
  int (*begin)(rr__pipe *p);
  int (*send_stage)(rr__pipe *p, size_t k, rr__req *r, const char *src, size_t len);
  int (*send_ready)(rr__pipe *p, size_t k);
  int (*recv_post)(rr__pipe *p, size_t k, rr__req *r, rr__red *x);
  int (*recv_done)(rr__pipe *p, size_t k, rr__req *r, rr__red *x);
  int (*idle)(rr__pipe *p, int peer);
} rr__mem;

/* The memories. */
extern const rr__mem rr__mem_host;  /* ring/pipe.c */
extern const rr__mem rr__mem_ipc;   /* ring/pipe_dev.c: device buffers, device messages */
extern const rr__mem rr__mem_piped; /* ring/pipe_dev.c: device buffers, pinned host slots */
/* ring/pipe_dev.c: device buffers, device messages handed over on the GPUs' streams by
 * stream memory operations (rr__req_dev.memops); the loop only queues them, in order */
extern const rr__mem rr__mem_memop;

/* The piped memory's pinned slots (ring/pipe_dev.c), which the group keeps between calls
 * (rr__coll_state.piped): free them (waits for the device first); and the segments it
 * handed to the device so far in this process (tests). */
void rr__piped_free(rr__coll_state *cs);
uint64_t rr__piped_segments(void);

#endif /* RR__RING_MEM_H_ */
