/* A group's connections and the loop that moves their bytes.
 *
 * Every pair of ranks in a group has one control socket (TCP) and one or more data lanes
 * from the transport chosen for the pair. The collectives post requests on lanes and call
 * rr__comm_progress / rr__comm_wait; the wait sleeps in poll() on the busy lanes, every
 * peer's control socket and an eventfd, so a dead peer is noticed at once (its control
 * socket closes), and an abort from any thread or any rank wakes it. (A call that blocks
 * may first poll its lanes for a bounded time: rr__comm_block, whose spin policy is this
 * layer's, since it owns the wait.) */
#ifndef RR__TRANSPORT_COMM_H_
#define RR__TRANSPORT_COMM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/fork.h"
#include "common/status.h"
#include "transport/transport.h"

/* Control messages, on the per-peer control socket (little-endian): ABORT with the reason,
 * and BYE, an orderly leave, so that the socket closing next is not taken for a crash.
 * An ABORT names the first collective its sender did not finish: it finished every earlier
 * one, so a peer still in an earlier collective completes it and fails from that one on
 * (every rank fails in the same call). A BYE's seq says why the group went (enum
 * rr__bye_why), so that a peer still in a call that needed it can tell the user. */
enum rr__ctl_type {
  RR__CTL_ABORT = 1,
  RR__CTL_BYE = 2,
  /* rr_pg_shrink's agreement and the new group's lanes (group/elastic.c):
   * seq carries the agreement's epoch, the text its data. */
  RR__CTL_VOTE = 3,
  RR__CTL_DECIDE = 4,
  RR__CTL_ACK = 5,
  RR__CTL_COMMIT = 6,
  RR__CTL_OUT = 7,
  RR__CTL_SETUP = 8
};
#define RR__CTL_IS_SHRINK(t) ((t) >= RR__CTL_VOTE && (t) <= RR__CTL_SETUP)
/* Why a BYE was sent, in its seq. Builds before the reason sent 0 there and ignore the field,
 * so old and new builds still understand each other's goodbyes: no new wire version. */
enum rr__bye_why {
  RR__BYE_UNKNOWN = 0,   /* a build that does not say */
  RR__BYE_DESTROYED = 1, /* the program destroyed the group (rr_destroy_process_group) */
  RR__BYE_EXITING = 2    /* freed while the process exits (rr__comm_exiting): the program
                          * ended without destroying it, and an exit hook freed it */
};
#define RR__CTL_FIXED 28
#define RR__CTL_TEXT_MAX 1024
typedef struct rr__ctl {
  uint32_t type;
  int32_t origin; /* global rank that sent it */
  int32_t status; /* rr_status of an ABORT */
  uint32_t len;   /* bytes of text that follow */
  uint64_t seq;   /* ABORT: the first collective (group sequence number) it concerns */
} rr__ctl;
void rr__ctl_encode(const rr__ctl *c, uint8_t out[RR__CTL_FIXED]);
int rr__ctl_decode(const uint8_t in[RR__CTL_FIXED], rr__ctl *c);
/* Send an ABORT on a control socket, best effort, never blocking. */
void rr__ctl_send_abort(int fd, int origin, int status, uint64_t seq, const char *text);
/* During setup: 1 when the next bytes on a control socket begin a control message (a peer
 * that gave up sent its ABORT where a setup message was due), without consuming them;
 * waits until deadline_ms for the first 4 bytes, 0 on anything else. */
int rr__ctl_next_is_ctl(int fd, int64_t deadline_ms);
/* During setup, after a step with the peer failed: read one ABORT from its control socket
 * (waiting until deadline_ms); RR_OK with its status and text (NUL-terminated, n > 0), or
 * an error when none came, with this thread's error text left as it was (the caller's own
 * failure is then the one to report). */
int rr__ctl_read_abort(int fd, int64_t deadline_ms, int *status, char *text, size_t n);

/* A waiting call peeks at most this many bytes of a peer's next message: a call header. */
#define RR__SNIFF_BYTES 48

/* While a collective waits it looks at headers that arrive from peers it is not reading
 * from: a peer in the same call with a different idea of it (another collective, another
 * pattern) is a mismatch, even when the two patterns never meet. */
typedef struct rr__sniff {
  uint64_t seq; /* the waiting call's sequence number (each peer is looked at once per seq) */
  /* RR_OK, or the error (RR_EMISMATCH / RR_EPROTO) for this header from `peer`. */
  int (*check)(void *ctx, int peer, const uint8_t hdr[RR__SNIFF_BYTES]);
  void *ctx;
  /* 1: a wake-up with nothing to peek (a stray shared-memory wake-up byte) keeps the peer
   * watched while it may still send; only a peer that said goodbye or lost its control
   * socket is let go. A receive from any rank that stopped watching a live peer would miss
   * its message; a collective only misses a mismatch check, so it lets any empty peer go. */
  int watch_live;
} rr__sniff;

typedef struct rr__peer {
  rr__peer_info info;
  const rr__transport *tp;
  int nlanes;
  rr__conn *lane[RR__MAX_LANES];
  uint8_t active[RR__MAX_LANES]; /* lane[i] is listed in the comm's active lanes */
  int ctrl_fd;                   /* -1 once closed */
  int said_bye;
  uint32_t bye_why; /* its goodbye's enum rr__bye_why */
  /* A peer on this host whose pid is known to be its own (rr__watch_pids): a pidfd that
   * becomes readable when its process exits, even while a process it forked still holds its
   * sockets open. -1: not watched. */
  int pid_fd;
  int exited; /* its pidfd said so */
  /* When it exited, if that alone does not prove its bytes are all here (a stream socket:
   * rr__exit_grace_left); 0 otherwise. */
  int64_t exit_ms;
  uint8_t ctl_buf[RR__CTL_FIXED + RR__CTL_TEXT_MAX];
  size_t ctl_have;
  uint64_t sniffed; /* seq + 1 of the call that already looked at this peer's next header */
  int rx_used;      /* this call has received from the peer: its next bytes may be payload */
} rr__peer;

typedef struct rr__comm {
  int rank, size; /* in the group */
  int global_rank;
  rr__peer *peers;   /* [size]; peers[rank] is this process (no lanes) */
  int wake_fd;       /* eventfd written by rr__comm_abort */
  rr__conn **active; /* lanes with queued requests */
  int nactive;
  struct pollfd *pfds;
  /* Abort state: set once, read by every later call. `halt` stops transfers mid-way (a
   * local abort); after a peer's abort, data already here may still complete a call. */
  atomic_int aborted;
  atomic_int halt;
  int reported; /* a call on this rank has already failed with the abort's cause */
  int no_bye;   /* set when the group never formed: close without goodbyes */
  /* How a blocking call waits (rr__comm_block): transport/comm.c's alone (checked), decided
   * once by rr__comm_spin_policy. */
  struct {
    int us;      /* poll the lanes this long before sleeping (0: never) */
    int yield;   /* ... giving the core away between polls (ranks outnumber cores) */
    int miss;    /* spins in a row that found nothing, or found it late */
    int skip;    /* waits left that sleep at once (spinning kept failing) */
    int backoff; /* the last such pause, doubled while spinning keeps failing */
  } spin;
  int abort_status;
  char abort_reason[RR__ERRMSG_MAX];
  pthread_mutex_t abort_mu;
  /* Which calls an abort concerns. A local abort concerns every call (abort_from 0); a
   * peer's, the collectives from the number it names on (and every point-to-point call),
   * so the collective running here, if earlier, still completes on the data that comes. */
  _Atomic uint64_t abort_from;
  _Atomic uint64_t unfinished; /* the first collective this rank has not finished */
  /* Called once, on the thread that revoked the comm or heard a peer's revoke, after the
   * abort state is set (no lock held), with the revoke's text: the group revokes its
   * subgroups, which this layer does not know. NULL: nothing to do. */
  void (*on_revoke)(void *ctx, const char *reason);
  void *on_revoke_ctx;
  uint64_t cur_seq; /* the call running now (rr__comm_new_call) ... */
  int cur_coll;     /* ... and whether it is a collective */
  int pids_watched; /* rr__watch_pids ran */
  /* fork() without exec: the child closes this comm's descriptors and marks it (common/fork.h). */
  rr__fork_hook fork;
  int forked; /* this process is a child forked after the comm was made */
} rr__comm;

/* Allocate the comm for a group of `size` (peers filled in by the bootstrap). */
int rr__comm_new(int rank, int size, int global_rank, rr__comm **out);
/* Say goodbye to every peer (if not aborted) and close everything. */
void rr__comm_free(rr__comm *cm);

/* Post a message on the lane of `peer` that carries message number `msg` (lane = msg mod
 * lanes, the same rule on both sides). */
int rr__comm_isend(rr__comm *cm, int peer, int msg, rr__req *r);
int rr__comm_irecv(rr__comm *cm, int peer, int msg, rr__req *r);
/* Do two ranks of the comm run in one process (threads: one host, one pid, and one pid
 * namespace or one not known)? Every rank answers alike: it reads only what the rendezvous
 * published about each. */
int rr__comm_shares_process(const rr__comm *cm);
/* A new call starts (a collective numbered seq, or a point-to-point call): forget which
 * peers the previous one received from. */
void rr__comm_new_call(rr__comm *cm, int coll, uint64_t seq);
/* Collective seq finished on this rank: an abort from here on concerns the next ones. */
void rr__comm_call_done(rr__comm *cm, uint64_t seq);
/* Does the group's abort (if any) concern a call: a collective numbered seq, or (coll 0) a
 * point-to-point call? */
int rr__comm_abort_concerns(rr__comm *cm, int coll, uint64_t seq);
/* Move bytes on every busy lane without blocking. *moved gets the bytes moved. */
int rr__comm_progress(rr__comm *cm, size_t *moved);
/* Sleep until a busy lane or control socket is ready, the group is aborted, or
 * deadline_ms passes (RR_ETIMEDOUT). Control messages are handled here. */
int rr__comm_wait(rr__comm *cm, int64_t deadline_ms, const rr__sniff *sniff);
/* How a call waits for its bytes when nothing moved: a caller that blocks on the call
 * (may_spin) first polls the lanes for a while, as the spin policy says, and returns RR_OK as
 * soon as bytes move; otherwise, or when that finds nothing, rr__comm_wait. Only a caller
 * that blocks spins: work run in the background never takes cores from the caller's compute.
 * With may_spin RR__COMM_SPIN_DEVICE (a call on device buffers, whose waits end when a
 * device's work does: its own, or a peer's behind the peer's host) it spins as a blocking
 * call does, but what it finds leaves the adaptive back-off alone (it says nothing about how
 * fast a peer's host answers), and a back-off that host calls built up does not make it
 * sleep at once. */
#define RR__COMM_SPIN_DEVICE 2
int rr__comm_block(rr__comm *cm, int may_spin, int64_t deadline_ms, const rr__sniff *sniff);
/* The spin policy, decided once per comm from what the setup tells it: how many ranks run on
 * this host (this one included). The cores are where this process may run, or RR_HOST_CPUS
 * where the launcher says; RR_SPIN_US and RR_SPIN_YIELD override (docs/env.md). Logged. */
void rr__comm_spin_policy(rr__comm *cm, int local_ranks);
/* A comm made of another's connections (rr_pg_shrink's) waits as that one decided. */
void rr__comm_spin_inherit(rr__comm *cm, const rr__comm *from);
/* Read whatever waits on the control sockets, without blocking (an ABORT from a peer
 * becomes this group's state). */
void rr__comm_poll_ctl(rr__comm *cm);
/* rr_pg_shrink's messages on the control sockets (no call runs on the group then). Send
 * one (RR_EPEER when it did not all go out), or wait for the next one from any peer with
 * watch[peer] set: RR_OK with *from, the header in *c and c->len bytes in data
 * (RR__CTL_TEXT_MAX room); a peer's ABORT or goodbye is taken in passing; a watched peer
 * whose socket closes is RR_EPEER with *from set; RR_ETIMEDOUT at deadline_ms. */
int rr__comm_ctl_send(rr__comm *cm, int peer, uint32_t type, uint64_t seq, const void *data,
                      size_t len);
int rr__comm_ctl_next(rr__comm *cm, const uint8_t *watch, int64_t deadline_ms, int *from,
                      rr__ctl *c, uint8_t *data);
/* Milliseconds since bytes last arrived from `peer` (for timeout messages). */
int64_t rr__comm_idle_ms(const rr__comm *cm, int peer);
/* The largest message in device memory that the lanes to every peer carry (the smallest of
 * their transports' device_msg_max); 0 when some peer's transport carries none. */
size_t rr__comm_device_msg_max(const rr__comm *cm);

/* The process is exiting: goodbyes sent from now on say so (RR__BYE_EXITING). Called by
 * the library's own exit handler, and by a language binding whose exit hooks free groups
 * before the C library's run (Python frees them before it calls exit()). */
void rr__comm_exiting(void);

/* A lane in a forked child (rr__comm's fork hook): close its descriptors without telling
 * the peer (close(), never shutdown(): the parent shares them), set them to -1, drop what
 * belongs to the parent (its mappings, its device state) without freeing it. The lane may
 * then only be closed. One per transport that has lanes of its own; the transport table
 * has no entry for it, so the comm calls them by transport. */
void rr__tcp_forked(rr__conn *c);
void rr__shm_forked(rr__conn *c);

/* Abort the group: the first reason is kept, waiting calls wake up. A local abort
 * (tell_peers) also stops transfers at once and sends every peer an ABORT with the
 * reason. Safe from any thread. Returns status. */
int rr__comm_abort(rr__comm *cm, int status, const char *reason, int tell_peers);
/* RR_OK, or the abort status with the last error set to the reason (whichever call it
 * concerns). */
int rr__comm_check(rr__comm *cm);

#endif /* RR__TRANSPORT_COMM_H_ */
