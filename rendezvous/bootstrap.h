#ifndef RR__RING_BOOTSTRAP_H_
#define RR__RING_BOOTSTRAP_H_

#include <stdint.h>

#include "rendezvous/lanes.h"
#include "rendezvous/notice.h"
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
  int64_t timeout_ms;       /* for messages */
  const uint8_t *token_key; /* 16 bytes, or NULL without a job token */
  /* rrun's notices (rendezvous/notice.h), both 0 where the store is not the job's own: */
  int notices; /* the store may hold them: while waiting for a member, fail at once when
                * rrun says it died and nobody takes its place */
  int seat;    /* the world's setup: take this rank's seat (generation `gen`) right before
                * publishing its record, so rrun can tell whether it got that far */
  int gen;
} rr__boot;

/* How a world's init that failed on the process serving its store begins the goodbye it
 * leaves the store's clients (group/pg.c). The setup (rr__bootstrap) recognises it in a store
 * error as the serving rank giving up on this very setup, which then cannot complete, as
 * opposed to a store that closed for some other reason. */
#define RR__STORE_HOST_FAILED "the process serving it failed: "

/* rrun's notice that a process of a global rank died (rendezvous/notice.h), as read back. */
typedef struct rr__dead_notice {
  int gen;                      /* generation of the process that died (0: the first of its rank) */
  int seat;                     /* 1: it had taken its seat in the world's rendezvous */
  int inplace;                  /* 1: rrun started generation gen + 1 in its place */
  char how[RR__NOTICE_HOW_MAX]; /* "killed by signal SIGKILL (9)", "exit code 3" */
} rr__dead_notice;
/* 1 with *out filled: the store holds a notice for global rank `rank` that carries this job's
 * token (token_key NULL: no token, no check); 0: none; 2: one that does not carry the token,
 * or is malformed (to be ignored: it changes nothing); < 0: the store failed (error set).
 * Never blocks. */
int rr__dead_notice_read(rr_store *store, const uint8_t *token_key, int rank, rr__dead_notice *out);

/* What a setup step that waits for members remembers between its looks at rrun's notices
 * (rendezvous/notice.c). */
typedef struct rr__member_watch {
  rr_store *store;          /* the job's store, which may hold rrun's notices; NULL: no looks */
  const uint8_t *token_key; /* 16 bytes, or NULL without a job token */
  const char *group_id;     /* for messages */
  const int *global_ranks;  /* [size]: whose notice is member p's */
  int warned;               /* a notice without the token was reported */
  int replaced;             /* a replacement in a dead member's place was reported */
  int store_gone;           /* the store closed: no more notices to read */
} rr__member_watch;
/* How long a wait for other ranks goes between looks at rrun's notices. */
#define RR__NOTICE_POLL_MS 200
/* Has rrun said that member p (a group rank) died with nobody in its place? RR_EPEER naming it
 * (`when`: "before joining the rendezvous", ...), else RR_OK. mesh: the records are in and
 * connections are awaited (a store that closed with the serving rank's goodbye is then the
 * cause). No store: RR_OK at once. */
int rr__member_dead(rr__member_watch *w, int p, const char *when, int mesh);

/* Rendezvous through the store and connect every pair of the group. */
int rr__bootstrap(const rr__boot *b, rr__comm **out);

#endif /* RR__RING_BOOTSTRAP_H_ */
