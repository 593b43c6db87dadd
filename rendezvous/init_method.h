#ifndef RR__RING_INIT_METHOD_H_
#define RR__RING_INIT_METHOD_H_

#include "ringreduce/ringreduce.h"

enum { RR__INIT_ENV = 1, RR__INIT_TCP, RR__INIT_FILE, RR__INIT_STORE };

typedef struct rr__init_info {
  int kind;
  int rank, world_size;
  int local_rank, local_world_size; /* -1 when unknown */
  char host[256];                   /* env:// and tcp:// */
  int port;
  char path[4096];    /* file:// */
  const char *source; /* where rank/world came from, for messages */
} rr__init_info;

/* Resolve the init method of opt (NULL: env://) into rank, world size and rendezvous; with
 * on_store, the caller's store carries the rendezvous and opt only rank and world size. */
int rr__init_parse(const rr_pg_options *opt, int on_store, rr__init_info *info);

/* Slurm's host lists ("node[01-04,07],gpu5"): the first host's name into out (0), or -1 when
 * the list cannot be read or out is too small. */
int rr__slurm_first_host(const char *list, char *out, size_t n);
/* SLURM_STEP_TASKS_PER_NODE ("2(x3),1"): the tasks on node `node` (0-based), -1 if unknown. */
int rr__slurm_tasks_on_node(const char *per_node, int node);

#endif /* RR__RING_INIT_METHOD_H_ */
