/* Shared-memory transport, internal: the state of one lane, which transport/shm_setup.c
 * fills in (the mapping, the socket, the geometry agreed with the peer) and transport/shm.c
 * then runs the protocol on; and what each of the two files gives the other. Not for use
 * outside transport/shm*.c (transport/shm.h is the mapping's format, for tests too). */
#ifndef RR__TRANSPORT_SHM_LANE_H_
#define RR__TRANSPORT_SHM_LANE_H_

#include <stddef.h>
#include <stdint.h>

#include "transport/cuda_ipc.h"
#include "transport/queue.h"
#include "transport/shm.h"
#include "transport/transport.h"

typedef struct rr__shm_conn {
  rr__conn base; /* first: the ring sees only this */
  int sock;      /* AF_UNIX stream to the peer: wake-ups, and EOF when it dies */
  char *map;
  size_t map_len;
  uint32_t nslots;
  size_t slot;
  /* Device slots (CUDA IPC), as many as the host slots: RR_IPC_SEG_BYTES rounded up to a
   * page, at least `slot` (a collective's device segment is larger than a host one; a point
   * to point's is a host one). Each side computes it alike; rr__ipc_open_peer checks. */
  size_t dev_slot;
  rr__shm_ring *tx, *rx;
  rr__shm_desc *tx_desc, *rx_desc;
  char *tx_data, *rx_data;
  uint64_t tx_head, tx_tail; /* slots we published; the peer's tail as last seen */
  uint64_t tx_queued;        /* slots filled (device: their copy queued), >= tx_head */
  uint64_t rx_tail;          /* slots we read (device: their read queued) */
  uint64_t rx_freed;         /* slots we released (the shared tail), <= rx_tail */
  size_t rx_off;             /* bytes of slot rx_tail already handed out */
  uint32_t rx_len;           /* its length, read once (0: not yet read) */
  uint32_t rx_flags;         /* and its flags, read with it */
  int armed_rx, armed_tx;    /* we set rx->rx_wait / tx->tx_wait */
  int wake_due;              /* the peer took a flag of ours: its byte is (or will be) here */
  int idle;                  /* pollfd calls since progress last moved bytes */
  int dead;                  /* the socket hit EOF or an error */
  int dead_errno;
  rr__reqq sq, rq;
  /* Device messages (transport/cuda_ipc.c), started by the first one: what we publish and
   * what the peer does, in the mapping. */
  rr__ipc *ipc;
  rr__ipc_export *ipc_mine, *ipc_theirs;
  /* Stream memory operations (transport/cuda_ipc.h), started by the first message that asks
   * for them; the page of flag words in the mapping; receives that wait for the peer's
   * slots (mq: in order, before anything later of the lane's memop messages). */
  rr__mop *mop;
  rr__mop_page *mop_page;
  rr__reqq mq;
  int lower; /* this side is the pair's lower global rank */
  /* A device slot is published only once our copy into it completed, and released only
   * once our read of it did (transport/cuda_ipc.h): until then its request stays incomplete
   * here (the request the slot ends, or NULL); rx_dev: the bytes of a read device slot that
   * waits so (0: a host slot). */
  rr__req *tx_req[RR__SHM_MAX_SLOTS], *rx_req[RR__SHM_MAX_SLOTS];
  uint32_t rx_dev[RR__SHM_MAX_SLOTS];
  int self_global;
  int peer_pid; /* the rendezvous's, checked with SO_PEERCRED at setup */
} rr__shm_conn;

/* transport/shm_setup.c, for the table in transport/shm.c. */
int rr__shm_can_connect(const rr__peer_info *self, const rr__peer_info *peer);
int rr__shm_setup_sockets(const rr__peer_info *self, const rr__peer_info *peer);
int rr__shm_connect(const rr__peer_info *self, const rr__peer_info *peer, int peer_rank,
                    const int *fds, int nfds, int ctrl_fd, int64_t deadline_ms, rr__conn **conns,
                    int max_lanes, int *nlanes);
void rr__shm_close(rr__conn *base);

#endif /* RR__TRANSPORT_SHM_LANE_H_ */
