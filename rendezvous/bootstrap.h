#ifndef RR__RING_BOOTSTRAP_H_
#define RR__RING_BOOTSTRAP_H_

#include <stdint.h>

#include "transport/comm.h"
#include "ringreduce/ringreduce.h"
#include "transport/socket.h"

/* The greeting every socket the bootstrap opens starts with, saying who is calling, and
 * the acceptor's 8-byte reply (little-endian; rendezvous/hello.c). */
#define RR__HELLO_BYTES 128
#define RR__GROUP_ID_MAX 48
typedef struct rr__hello {
  char group[RR__GROUP_ID_MAX]; /* group id, NUL-terminated */
  int32_t from, to;             /* group ranks */
  int32_t index;                /* 0: control socket, 1..: data sockets */
  int32_t nsockets;             /* sockets the caller opens to this peer in total */
  char transport[16];           /* the transport the caller chose for this pair */
  uint64_t token_hash;          /* the caller's proof of the job token (0 when none) */
  uint64_t nonce;               /* fresh for this socket: the acceptor's reply proof covers it */
} rr__hello;
void rr__hello_encode(const rr__hello *h, uint8_t out[RR__HELLO_BYTES]);
int rr__hello_decode(const uint8_t in[RR__HELLO_BYTES], rr__hello *h);
/* The reply: magic(4) status(4) proof(8), the proof the acceptor's answer to this greeting
 * (0 without a job token). */
#define RR__HELLO_OK 0x4f4b
#define RR__REPLY_BYTES 16


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
