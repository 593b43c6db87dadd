/* A group's lanes, made in one place (rendezvous/lanes.c): the sockets between every pair of
 * its ranks, their greetings and their hand-over to each pair's transport. Every group comes
 * here: init and subgroups through the bootstrap (rendezvous/bootstrap.c, which finds the
 * members in a store), a growth too (group/grow.c, through the bootstrap on its own store),
 * and a shrink (group/elastic.c, which tells the members over the old control sockets). */
#ifndef RR__RENDEZVOUS_LANES_H_
#define RR__RENDEZVOUS_LANES_H_

#include <stdint.h>

#include "transport/comm.h"
#include "transport/socket.h"
#include "transport/transport.h"

/* The greeting every socket between two ranks starts with, saying who is calling, and the
 * acceptor's reply (little-endian; rendezvous/hello.c). */
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

/* A MAC keyed with `key` (16 bytes) over a context string (what is proved, and in which
 * group, setup and socket), so that a proof is worth nothing anywhere else; 0 without a key,
 * never 0 with one. The records in the store and the greetings are proved with it. */
uint64_t rr__proof(const uint8_t *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

struct rr__member_watch; /* rendezvous/bootstrap.h: rrun's notices */

/* One making of a group's lanes. */
typedef struct rr__lanes {
  const char *group_id;    /* the group's id: every greeting is bound to it */
  int rank, size;          /* this rank and the group's size */
  const int *global_ranks; /* [size], for messages */
  /* [size]: every member's address to connect to (a listener of its own, open before it was
   * told to anyone) and its nonce, fresh for this setup and known to the members only through
   * a channel they trust (a record proved with the token, a control socket); infos[rank] is
   * this rank's. */
  const rr__peer_info *infos;
  /* 16 bytes: the proofs' key (the job token's); NULL: no proofs (init without a token trusts
   * whoever reaches it). */
  const uint8_t *key;
  int lfd; /* this rank's listener (infos[rank].addr), the caller's; -1: none
            * (no higher rank connects to it) */
  int64_t deadline_ms;
  /* How long an accepted connection may take to say its whole greeting; 0: until the
   * deadline (a stranger that says nothing then only holds one of the pending slots). */
  int64_t hello_ms;
  /* 1: every pair has its control socket in the comm already (a shrink's, taken over with each
   * pair's transport, cm->peers[p].tp): only data sockets are made, and a member's control
   * socket showing that it gave up ends a wait for it at once. 0: the control sockets are
   * made here too (socket 0 of each pair) and handed to the comm. */
  int have_ctrl;
  /* Looked at between slices of a wait for a member (rrun's notices); NULL: nothing. */
  struct rr__member_watch *watch;
} rr__lanes;

/* Listen for a group's lanes at `at` (port 0: any free one): *lfd, and in addr
 * (RR__PEER_ADDR_MAX bytes) the address to tell the members. */
int rr__lanes_listen(const rr__addr *at, int *lfd, char *addr);

/* Sockets a pair opens: its control socket and what its transport asks for, the larger wish
 * of the two sides, so that both open the same number. */
int rr__lanes_nsockets(const rr__transport *tp, const rr__peer_info *a, const rr__peer_info *b);

/* Make the lanes of every pair of the group into cm (whose peers' transports and, with
 * have_ctrl, control sockets the caller set; otherwise each pair's transport is the first in
 * priority order that can_connect, rr__transport_choose). The higher rank of a pair connects to
 * the lower's listener and greets on every socket, proving the key over both ranks' nonces and
 * one fresh for the socket; the lower reads every pending connection at once and answers the
 * pair's greetings, each with its own proof; strangers and garbage are closed and logged, and
 * never decide the outcome. Then the sockets go to each pair's transport, in one global order.
 * On failure (the error set) the members half way through a greeting to this rank, or queued
 * on its listener, are answered with the reason, and, without have_ctrl, every peer with a
 * control socket is told why (an ABORT) before it closes; with have_ctrl the comm's owner
 * tells them (rr__comm_abort) and says goodbye when it frees the comm. */
int rr__lanes_make(const rr__lanes *l, rr__comm *cm);

/* This rank's setup failed before its lanes were made (st, the error set): answer the
 * greetings queued on l->lfd with the reason (as rr__lanes_make does on its own failure), all
 * within 200 ms; the error text is left as it was. */
void rr__lanes_refuse(const rr__lanes *l, int st);

#endif /* RR__RENDEZVOUS_LANES_H_ */
