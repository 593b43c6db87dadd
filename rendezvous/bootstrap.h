#ifndef RR__RING_BOOTSTRAP_H_
#define RR__RING_BOOTSTRAP_H_

#include <stdint.h>

#include "transport/comm.h"
#include "ringreduce/ringreduce.h"
#include "transport/socket.h"

typedef struct rr__boot {
  rr_store *store;
  const char *group_id;    /* unique per group within the job, e.g. "w" or "w.2" */
  int rank, size;          /* in the group */
  const int *global_ranks; /* [size] */
  const rr__addr *hint;    /* the master's address, to pick an interface; may be NULL */
  int64_t deadline_ms;
  int64_t timeout_ms;      /* for messages */
  const uint8_t *token_key; /* 16 bytes, or NULL without a job token */
} rr__boot;

/* Rendezvous through the store and connect every pair of the group. */
int rr__bootstrap(const rr__boot *b, rr__comm **out);

#endif /* RR__RING_BOOTSTRAP_H_ */
