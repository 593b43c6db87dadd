/* The algorithms, one file each (ring/<file>.c, named in the run column of ring/kind.h's
 * rows and in RR__KIND_ALGO_MAP): what the dispatcher (ring/coll.c) runs. Each is written
 * against ring/prims.h alone, and none calls another. */
#ifndef RR__RING_ALGO_H_
#define RR__RING_ALGO_H_

#include "ring/prims.h"

int rr__all_reduce_ring(rr__coll *c);
int rr__all_reduce_rd(rr__coll *c);
int rr__all_reduce_star(rr__coll *c);
int rr__reduce_scatter_ring(rr__coll *c);
int rr__all_gather_ring(rr__coll *c);
int rr__broadcast_chain(rr__coll *c);
int rr__reduce_chain(rr__coll *c);
int rr__gather_linear(rr__coll *c);
int rr__scatter_linear(rr__coll *c);
int rr__all_to_all_pairwise(rr__coll *c);
int rr__all_to_allv_pairwise(rr__coll *c);
int rr__barrier_dissem(rr__coll *c);
int rr__send_p2p(rr__coll *c);
int rr__recv_p2p(rr__coll *c);
int rr__sendrecv_p2p(rr__coll *c);

#endif /* RR__RING_ALGO_H_ */
