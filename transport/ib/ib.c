/* InfiniBand transport: one reliable-connected (RC) queue pair per peer, data written by
 * RDMA into the receiver's slot ring. docs/ib.md has the protocol with a worked example.
 *
 * Per lane and direction the receiver owns a ring of nslots slots of slot bytes, registered
 * once, whose {address, rkey} it sent at setup. The messages form a byte stream as over TCP:
 * the sender cuts each request into pieces of at most one slot, copies piece k into its own
 * registered staging slot k mod nslots and posts IBV_WR_RDMA_WRITE_WITH_IMM into the
 * receiver's slot k mod nslots; the immediate carries k (mod 512) and the length. The write
 * consumes one receive request the receiver posted in advance and completes on its CQ, in
 * order (RC). The receiver hands the slot's bytes to its requests (through req->consume, so
 * the ring reduces straight out of the slot), posts the receive request again, and returns
 * credit: an 8-byte RDMA_WRITE_WITH_IMM of its released-slot count into the sender's credit
 * word, the immediate marked as credit. The sender writes slot k only once the count says
 * slot k - nslots is free, so a slot is never overwritten while it is read. Credits come as
 * completions too, so a waiting sender sleeps on its completion channel like a receiver.
 *
 * Receive requests: data writes in flight toward a lane are at most its nslots (credit),
 * credit writes at most the peer's nslots (each frees at least one of our slots, and we
 * send no more than the credit we have seen); the receive queue holds both and every
 * consumed request is posted again before the credit that could use it leaves.
 *
 * Send completions are requested every RR__IB_SIGNAL posts and for the last piece of every
 * request (error completions come regardless, ibv_post_send(3)); a signalled completion
 * retires every earlier post of the send queue (completions of one queue pair come in
 * order). A send request completes when its last piece is acknowledged (rr__ib_acked).
 *
 * Sleeping: a lane's CQ has a completion channel. Before sleeping we arm the CQ
 * (ibv_req_notify_cq) and poll it once more: what came before the arm is found there, what
 * comes after raises an event on the channel's fd, the fd the comm's poll() waits on.
 *
 * Failure: an error completion (IBV_WC_RETRY_EXC_ERR when the peer's port, host or process
 * is gone; flush errors after it; a remote access error) fails the lane with the peer's rank
 * and the status; the comm turns it into the group's abort, as a closed TCP socket. A dead
 * peer is seen first on its control socket, as over TCP.
 *
 * Memory: staging copies. Sends are copied into the lane's registered staging ring rather
 * than registering the caller's buffers: a cache of registrations keyed by address would
 * keep pinning pages that the caller freed and the allocator reused elsewhere (docs/ib.md). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "transport/ib/ib.h"
#include "transport/queue.h"
#include "transport/socket.h"
#include "transport/transport.h"

#define RR__IB_MAGIC 0x31424952u /* "RIB1" */
#define RR__IB_MIN_SLOT 4096u
#define RR__IB_MAX_SLOT (4u << 20) /* the immediate has 22 bits of length */
#define RR__IB_MAX_SLOTS 64u
#define RR__IB_SIGNAL 4 /* a signalled send completion every this many posts */
#define RR__IB_POLL 32  /* completions taken per ibv_poll_cq */
#define RR__IB_ACKQ 256 /* > the send queue depth */
#define RR__IB_CREDIT_BIT 0x80000000u
#define RR__IB_SEQ_SHIFT 22
#define RR__IB_SEQ_MASK 0x1ffu
#define RR__IB_LEN_MASK 0x3fffffu
/* NCCL's values (NCCL_IB_TIMEOUT 20: 4.096 us x 2^20 = 4.3 s per try; NCCL_IB_RETRY_CNT 7).
 * RNR retry: NCCL uses 7, which verbs defines as "retry forever"; here a missing receive
 * request is a protocol bug, so 6 bounded tries turn it into an error instead of a hang. */
#define RR__IB_TIMEOUT 20
#define RR__IB_RETRY 7
#define RR__IB_RNR_RETRY 6
#define RR__IB_MIN_RNR_TIMER 12

typedef struct rr__ib_conn {
  rr__conn base; /* first: the ring sees only this */
  const rr__ib_dev *dev;
  const rr__ibv *v;
  struct ibv_comp_channel *ch;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *rx_mr, *tx_mr, *cr_mr;
  int armed; /* the CQ is armed and its event not taken yet */
  /* Receiving: our ring, written by the peer. */
  char *rx_ring;
  uint32_t rx_nslots;
  size_t rx_slot;
  uint32_t rx_len[RR__IB_MAX_SLOTS]; /* length of each arrived, unreleased slot */
  uint64_t rx_arrived;               /* data writes completed here */
  uint64_t rx_tail;                  /* slots released */
  size_t rx_off;                     /* bytes of slot rx_tail handed out */
  uint64_t credit_sent;              /* rx_tail as last written to the peer */
  int credit_owed;                   /* a credit waits for send queue space */
  /* Sending: the peer's ring. */
  char *tx_ring; /* staging, same geometry as the peer's ring */
  uint32_t tx_nslots;
  size_t tx_slot;
  uint64_t remote_ring, remote_credit;
  uint32_t remote_ring_rkey, remote_credit_rkey;
  uint64_t tx_head;   /* pieces posted */
  uint64_t tx_credit; /* pieces the peer released */
  uint64_t *credit;   /* [0]: the peer's count lands here, [1]: the source of ours */
  /* Send queue accounting. */
  uint32_t sq_depth, rq_depth;
  uint64_t sq_posted, sq_retired;
  /* Sends whose pieces are all posted, waiting for the acknowledgement of their last
   * piece (posted signalled), with that piece's post index; at most one per send queue
   * entry. */
  rr__req *ack_head, *ack_tail;
  uint64_t ack_wr[RR__IB_ACKQ];
  uint32_t ack_first, ack_n;
  size_t acked_bytes; /* of sends completed since progress last reported them */
  int failed;         /* an error completion came; the last error text is in fail_msg */
  int fail_status;
  char fail_msg[256];
  rr__reqq sq, rq;
} rr__ib_conn;

/* An eventfd that is always readable: pollfd hands it out when work is already there. */
static int rr__ib_ready_fd = -1;
static pthread_once_t rr__ib_ready_once = PTHREAD_ONCE_INIT;
static void rr__ib_ready_init(void) {
  rr__ib_ready_fd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
}

static int rr__ib_fail(rr__ib_conn *c, int status, const char *fmt, const char *what) {
  if (!c->failed) {
    c->failed = 1;
    c->fail_status = status;
    snprintf(c->fail_msg, sizeof c->fail_msg, fmt, c->base.peer_global, what);
  }
  return rr__set_error(c->fail_status, "%s", c->fail_msg);
}

static int rr__ib_post_recvs(rr__ib_conn *c, uint32_t n) {
  while (n > 0) {
    struct ibv_recv_wr wr[16], *bad = NULL;
    uint32_t k = RR__MIN(n, 16u);
    for (uint32_t i = 0; i < k; i++)
      wr[i] = (struct ibv_recv_wr){.wr_id = 0, .next = i + 1 < k ? &wr[i + 1] : NULL};
    int e = c->v->post_recv(c->qp, wr, &bad);
    if (e) return rr__ib_fail(c, RR_ESYS, "ib: rank %d: ibv_post_recv: %s", strerror(e));
    n -= k;
  }
  return RR_OK;
}

/* Post one RDMA write (with immediate unless imm is NULL; signalled every RR__IB_SIGNAL
 * posts, or always with `signal`). Returns 1 posted, 0 no send queue space, <0 error. */
static int rr__ib_write(rr__ib_conn *c, void *src, uint32_t lkey, uint32_t len, uint64_t raddr,
                        uint32_t rkey, const uint32_t *imm, int signal) {
  if (c->sq_posted - c->sq_retired >= c->sq_depth) return 0;
  struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = lkey};
  struct ibv_send_wr wr = {.wr_id = c->sq_posted,
                           .sg_list = len ? &sge : NULL,
                           .num_sge = len ? 1 : 0,
                           .opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
                           .imm_data = imm ? htonl(*imm) : 0};
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  if (signal || (c->sq_posted + 1) % RR__IB_SIGNAL == 0) wr.send_flags = IBV_SEND_SIGNALED;
  struct ibv_send_wr *bad = NULL;
  int e = c->v->post_send(c->qp, &wr, &bad);
  if (e) return rr__ib_fail(c, RR_ESYS, "ib: rank %d: ibv_post_send: %s", strerror(e));
  c->sq_posted++;
  return 1;
}

/* Complete the sends whose last piece the peer acknowledged. A send completes only then,
 * not when posted: the caller may free or reuse its buffer either way (we sent from a
 * copy), but the group may be destroyed right after its last call, and destroying a queue
 * pair drops what it has not delivered (TCP's kernel keeps sending after close, a QP does
 * not). */
static void rr__ib_acked(rr__ib_conn *c) {
  while (c->ack_n > 0 && c->ack_wr[c->ack_first] < c->sq_retired) {
    rr__req *r = c->ack_head;
    c->ack_head = r->next;
    if (!c->ack_head) c->ack_tail = NULL;
    c->ack_first = (c->ack_first + 1) % RR__IB_ACKQ;
    c->ack_n--;
    r->complete = 1;
    c->base.pending--;
    c->acked_bytes += r->len;
  }
}

/* Take every completion the CQ has. */
static int rr__ib_poll(rr__ib_conn *c) {
  if (c->failed) return rr__set_error(c->fail_status, "%s", c->fail_msg);
  for (;;) {
    struct ibv_wc wc[RR__IB_POLL];
    int n = c->v->poll_cq(c->cq, RR__IB_POLL, wc);
    if (n < 0) return rr__ib_fail(c, RR_ESYS, "ib: rank %d: ibv_poll_cq failed%s", "");
    uint32_t reposts = 0;
    for (int i = 0; i < n; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        int st = wc[i].status == IBV_WC_RETRY_EXC_ERR || wc[i].status == IBV_WC_WR_FLUSH_ERR ||
                         wc[i].status == IBV_WC_RNR_RETRY_EXC_ERR
                     ? RR_EPEER
                     : RR_EPROTO;
        return rr__ib_fail(c, st, "ib: connection to rank %d failed: %s",
                           rr__ibv_wc_status(wc[i].status));
      }
      if (wc[i].opcode == IBV_WC_RDMA_WRITE) { /* a signalled send: retires all before it */
        c->sq_retired = wc[i].wr_id + 1;
        rr__ib_acked(c);
        continue;
      }
      if (wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc[i].wc_flags & IBV_WC_WITH_IMM))
        return rr__ib_fail(c, RR_EPROTO, "ib: rank %d: unexpected completion (%s)", "opcode");
      reposts++;
      uint32_t imm = ntohl(wc[i].imm_data);
      RR__LOG_TRACE(
          RR__SUB_NET,
          "ib: from rank %d: imm %08x len %u (arrived %llu tail %llu credit %llu head %llu)",
          c->base.peer_global, imm, wc[i].byte_len, (unsigned long long)c->rx_arrived,
          (unsigned long long)c->rx_tail, (unsigned long long)c->tx_credit,
          (unsigned long long)c->tx_head);
      if (imm & RR__IB_CREDIT_BIT) {
        uint64_t delta = ((imm & ~RR__IB_CREDIT_BIT) - (uint32_t)c->tx_credit) & ~RR__IB_CREDIT_BIT;
        if (delta > c->tx_head - c->tx_credit)
          return rr__ib_fail(c, RR_EPROTO, "ib: rank %d returned credit for %s",
                             "slots never sent");
        c->tx_credit += delta;
        continue;
      }
      uint32_t seq = (imm >> RR__IB_SEQ_SHIFT) & RR__IB_SEQ_MASK;
      uint32_t len = (imm & RR__IB_LEN_MASK) + 1;
      if (seq != (c->rx_arrived & RR__IB_SEQ_MASK) || len > c->rx_slot || wc[i].byte_len != len)
        return rr__ib_fail(c, RR_EPROTO, "ib: rank %d sent %s", "a piece out of order or size");
      if (c->rx_arrived - c->rx_tail >= c->rx_nslots)
        return rr__ib_fail(c, RR_EPROTO, "ib: rank %d wrote %s", "more pieces than its credit");
      c->rx_len[c->rx_arrived % c->rx_nslots] = len;
      c->rx_arrived++;
      c->base.last_rx_ms = rr__now_ms_coarse();
    }
    /* Before any credit that could let the peer use them (see the top). */
    if (reposts) RR__CHECK(rr__ib_post_recvs(c, reposts));
    if (n < RR__IB_POLL) return RR_OK;
  }
}

/* Take the channel's events (non-blocking fd): the CQ must be armed again before a sleep. */
static int rr__ib_take_events(rr__ib_conn *c) {
  if (!c->armed) return RR_OK;
  for (;;) {
    struct ibv_cq *cq;
    void *ctx;
    if (c->v->get_cq_event(c->ch, &cq, &ctx) != 0) break;
    c->v->ack_cq_events(cq, 1);
    c->armed = 0;
  }
  return RR_OK;
}

static int rr__ib_send_credit(rr__ib_conn *c) {
  if (c->credit_sent == c->rx_tail) return RR_OK;
  c->credit[1] = c->rx_tail;
  uint32_t imm = RR__IB_CREDIT_BIT | ((uint32_t)c->rx_tail & ~RR__IB_CREDIT_BIT);
  int p = rr__ib_write(c, &c->credit[1], c->cr_mr->lkey, sizeof(uint64_t), c->remote_credit,
                       c->remote_credit_rkey, &imm, 0);
  if (p < 0) return p;
  /* No send queue space: keep the lane busy (pending) until the credit leaves. */
  if (p == 0 && !c->credit_owed) c->credit_owed = 1, c->base.pending++;
  if (p == 1) {
    c->credit_sent = c->rx_tail;
    if (c->credit_owed) c->credit_owed = 0, c->base.pending--;
  }
  return RR_OK;
}

static int rr__ib_send_some(rr__ib_conn *c, size_t *moved) {
  while (c->sq.head && c->tx_head - c->tx_credit < c->tx_nslots) {
    rr__req *r = c->sq.head;
    size_t n = RR__MIN(r->len - r->done, c->tx_slot);
    size_t k = (size_t)(c->tx_head % c->tx_nslots);
    char *stage = c->tx_ring + k * c->tx_slot;
    memcpy(stage, r->buf + r->done, n);
    uint32_t imm =
        (((uint32_t)c->tx_head & RR__IB_SEQ_MASK) << RR__IB_SEQ_SHIFT) | (uint32_t)(n - 1);
    int last = r->done + n == r->len;
    RR__LOG_TRACE(RR__SUB_NET, "ib: to rank %d: piece %llu len %zu", c->base.peer_global,
                  (unsigned long long)c->tx_head, n);
    int p = rr__ib_write(c, stage, c->tx_mr->lkey, (uint32_t)n, c->remote_ring + k * c->tx_slot,
                         c->remote_ring_rkey, &imm, last);
    if (p < 0) return p;
    if (p == 0) break;
    c->tx_head++;
    r->done += n;
    *moved += n;
    if (last) { /* all posted: it waits for the acknowledgement (rr__ib_acked) */
      c->sq.head = r->next;
      if (!c->sq.head) c->sq.tail = NULL;
      r->next = NULL;
      if (c->ack_tail)
        c->ack_tail->next = r;
      else
        c->ack_head = r;
      c->ack_tail = r;
      c->ack_wr[(c->ack_first + c->ack_n) % RR__IB_ACKQ] = c->sq_posted - 1;
      c->ack_n++;
    }
  }
  return RR_OK;
}

static int rr__ib_recv_some(rr__ib_conn *c, size_t *moved) {
  while (c->rq.head && c->rx_tail < c->rx_arrived) {
    uint32_t k = (uint32_t)(c->rx_tail % c->rx_nslots);
    uint32_t len = c->rx_len[k];
    const char *data = c->rx_ring + (size_t)k * c->rx_slot + c->rx_off;
    rr__req *r = c->rq.head;
    size_t take = rr__req_deliver(r, data, len - c->rx_off);
    c->rx_off += take;
    *moved += take;
    if (c->rx_off == len) {
      c->rx_off = 0;
      c->rx_tail++;
    }
    if (r->done == r->len) rr__reqq_pop(&c->base, &c->rq, 1);
  }
  return rr__ib_send_credit(c);
}

static int rr__ib_progress(rr__conn *base, size_t *moved) {
  rr__ib_conn *c = (rr__ib_conn *)base;
  RR__CHECK(rr__ib_take_events(c));
  RR__CHECK(rr__ib_poll(c));
  RR__CHECK(rr__ib_send_some(c, moved));
  RR__CHECK(rr__ib_recv_some(c, moved));
  /* A send completing is progress too, though no byte moved now: a caller that spins until
   * something moves must not go to sleep on a lane that has nothing left to wait for. */
  *moved += c->acked_bytes;
  c->acked_bytes = 0;
  return RR_OK;
}

static int rr__ib_isend(rr__conn *base, rr__req *r) {
  rr__reqq_post(base, &((rr__ib_conn *)base)->sq, r, 0);
  return RR_OK;
}

static int rr__ib_irecv(rr__conn *base, rr__req *r) {
  rr__reqq_post(base, &((rr__ib_conn *)base)->rq, r, 1);
  return RR_OK;
}

/* Arm the CQ and look once more (see the top); fill pfd with the channel's fd, or with the
 * always-ready fd when something is there already (or the lane failed: progress says why).
 * `peeking`: bytes that arrived before (taken off the CQ by an earlier look) and that no
 * receive took yet count as there: no completion announces them again, and a receive from any
 * rank waits for exactly those. */
static void rr__ib_arm(rr__ib_conn *c, int peeking, struct pollfd *pfd) {
  uint64_t before = c->rx_arrived + c->tx_credit + c->sq_retired;
  int ready = c->failed;
  if (!ready && !c->armed) {
    if (c->v->req_notify_cq(c->cq, 0) != 0)
      ready = 1; /* cannot sleep on it: poll again at once */
    else
      c->armed = 1;
  }
  if (!ready)
    ready = rr__ib_poll(c) != RR_OK || before != c->rx_arrived + c->tx_credit + c->sq_retired;
  if (!ready && (c->rq.head || peeking) && c->rx_tail < c->rx_arrived) ready = 1;
  pthread_once(&rr__ib_ready_once, rr__ib_ready_init);
  pfd->fd = ready && rr__ib_ready_fd >= 0 ? rr__ib_ready_fd : c->ch->fd;
  pfd->events = POLLIN;
  pfd->revents = 0;
}

static int rr__ib_pollfd(rr__conn *base, struct pollfd *pfd) {
  rr__ib_conn *c = (rr__ib_conn *)base;
  if (!c->sq.head && !c->rq.head && !c->ack_head && !c->credit_owed) return 0;
  rr__ib_arm(c, 0, pfd);
  return 1;
}

static int rr__ib_peek(rr__conn *base, void *buf, size_t len, size_t *got) {
  rr__ib_conn *c = (rr__ib_conn *)base;
  *got = 0;
  RR__CHECK(rr__ib_take_events(c));
  RR__CHECK(rr__ib_poll(c));
  uint64_t s = c->rx_tail;
  size_t off = c->rx_off;
  while (*got < len && s < c->rx_arrived) {
    uint32_t k = (uint32_t)(s % c->rx_nslots);
    size_t take = RR__MIN(c->rx_len[k] - off, len - *got);
    memcpy((char *)buf + *got, c->rx_ring + (size_t)k * c->rx_slot + off, take);
    *got += take;
    s++;
    off = 0;
  }
  return RR_OK;
}

static void rr__ib_peekfd(rr__conn *base, struct pollfd *pfd) {
  rr__ib_arm((rr__ib_conn *)base, 1, pfd);
}

static void rr__ib_close(rr__conn *base) {
  rr__ib_conn *c = (rr__ib_conn *)base;
  if (c->v) {
    if (c->qp) c->v->destroy_qp(c->qp);
    if (c->cq) {
      rr__ib_take_events(c); /* every event acknowledged, or destroy_cq would wait */
      c->v->destroy_cq(c->cq);
    }
    if (c->ch) c->v->destroy_comp_channel(c->ch);
    if (c->rx_mr) c->v->dereg_mr(c->rx_mr);
    if (c->tx_mr) c->v->dereg_mr(c->tx_mr);
    if (c->cr_mr) c->v->dereg_mr(c->cr_mr);
  }
  free(c->rx_ring);
  free(c->tx_ring);
  free(c->credit);
  free(c);
}

/* ---- selection ---- */

static void rr__ib_publish(rr__peer_info *self) {
  /* RR_TRANSPORT=tcp: sockets only, the verbs library is never even loaded. */
  self->ib = strcmp(rr__params_get()->transport, "tcp") != 0 && rr__ib_device() != NULL;
}

const char *rr__ib_not_used(void) {
  return rr__ib_why();
}

static int rr__ib_can_connect(const rr__peer_info *self, const rr__peer_info *peer) {
  const char *mode = rr__params_get()->transport;
  if (!self->ib || !peer->ib || strcmp(mode, "tcp") == 0) return 0;
  /* ib forces verbs between every pair; auto uses them between hosts (shm, earlier in the
   * registry, takes ranks on one host). */
  return strcmp(mode, "ib") == 0 || strcmp(self->hostid, peer->hostid) != 0;
}

static int rr__ib_setup_sockets(const rr__peer_info *self, const rr__peer_info *peer) {
  (void)self;
  (void)peer;
  return 0; /* setup data goes over the control socket */
}

/* ---- setup ---- */

/* What each side sends over the control socket, little-endian, fixed layout. */
#define RR__IB_HELLO_BYTES 96
typedef struct rr__ib_hello {
  uint32_t magic, global_rank, qpn, psn;
  uint32_t lid, roce, mtu, nslots;
  uint64_t slot_bytes, ring_addr, credit_addr;
  uint32_t ring_rkey, credit_rkey;
  uint8_t gid[16];
} rr__ib_hello;

static void rr__ib_hello_put(const rr__ib_hello *h, uint8_t *b) {
  memset(b, 0, RR__IB_HELLO_BYTES);
  rr__put_u32(b, h->magic);
  rr__put_u32(b + 4, h->global_rank);
  rr__put_u32(b + 8, h->qpn);
  rr__put_u32(b + 12, h->psn);
  rr__put_u32(b + 16, h->lid);
  rr__put_u32(b + 20, h->roce);
  rr__put_u32(b + 24, h->mtu);
  rr__put_u32(b + 28, h->nslots);
  rr__put_u64(b + 32, h->slot_bytes);
  rr__put_u64(b + 40, h->ring_addr);
  rr__put_u64(b + 48, h->credit_addr);
  rr__put_u32(b + 56, h->ring_rkey);
  rr__put_u32(b + 60, h->credit_rkey);
  memcpy(b + 64, h->gid, 16);
}

static void rr__ib_hello_get(const uint8_t *b, rr__ib_hello *h) {
  h->magic = rr__get_u32(b);
  h->global_rank = rr__get_u32(b + 4);
  h->qpn = rr__get_u32(b + 8);
  h->psn = rr__get_u32(b + 12);
  h->lid = rr__get_u32(b + 16);
  h->roce = rr__get_u32(b + 20);
  h->mtu = rr__get_u32(b + 24);
  h->nslots = rr__get_u32(b + 28);
  h->slot_bytes = rr__get_u64(b + 32);
  h->ring_addr = rr__get_u64(b + 40);
  h->credit_addr = rr__get_u64(b + 48);
  h->ring_rkey = rr__get_u32(b + 56);
  h->credit_rkey = rr__get_u32(b + 60);
  memcpy(h->gid, b + 64, 16);
}

/* Our ring: a slot holds a pipeline segment (RR_SEG_BYTES, page-rounded, within bounds);
 * RR_SLOTS slots. */
static void rr__ib_geometry(uint32_t *nslots, size_t *slot) {
  const rr__params *p = rr__params_get();
  size_t s = ((size_t)p->seg_bytes + 4095) / 4096 * 4096;
  *slot = RR__MAX(RR__MIN(s, (size_t)RR__IB_MAX_SLOT), (size_t)RR__IB_MIN_SLOT);
  *nslots = (uint32_t)RR__MAX(RR__MIN(p->slots, (int64_t)RR__IB_MAX_SLOTS), 2);
}

static int rr__ib_alloc_mr(rr__ib_conn *c, size_t bytes, int access, char **mem,
                           struct ibv_mr **mr) {
  if (posix_memalign((void **)mem, 4096, bytes) != 0) return RR_ENOMEM;
  memset(*mem, 0, bytes);
  *mr = c->v->reg_mr(c->dev->pd, *mem, bytes, access);
  if (!*mr) return rr__set_error(RR_ESYS, "ibv_reg_mr of %zu bytes: %s", bytes, strerror(errno));
  return RR_OK;
}

static int rr__ib_modify(rr__ib_conn *c, struct ibv_qp_attr *a, int mask, const char *to) {
  int e = c->v->modify_qp(c->qp, a, mask);
  if (e) return rr__set_error(RR_ESYS, "ibv_modify_qp to %s: %s", to, strerror(e > 0 ? e : errno));
  return RR_OK;
}

/* RESET -> INIT: the port, and remote writes allowed into our memory. */
static int rr__ib_to_init(rr__ib_conn *c) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = c->dev->port,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  return rr__ib_modify(c, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                       "INIT");
}

/* INIT -> RTR -> RTS with the peer's address. */
static int rr__ib_to_rts(rr__ib_conn *c, const rr__ib_hello *peer, uint32_t my_psn) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = (enum ibv_mtu)RR__MIN((int)c->dev->mtu, (int)peer->mtu);
  a.dest_qp_num = peer->qpn;
  a.rq_psn = peer->psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = RR__IB_MIN_RNR_TIMER;
  a.ah_attr.port_num = c->dev->port;
  if (c->dev->roce) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)c->dev->gid_index;
    a.ah_attr.grh.hop_limit = 255;
  } else {
    a.ah_attr.dlid = (uint16_t)peer->lid;
  }
  RR__CHECK(rr__ib_modify(c, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                          "RTR"));
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = RR__IB_TIMEOUT;
  a.retry_cnt = RR__IB_RETRY;
  a.rnr_retry = RR__IB_RNR_RETRY;
  a.sq_psn = my_psn;
  a.max_rd_atomic = 1;
  return rr__ib_modify(c, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                       "RTS");
}

/* Queues, rings and registrations of one lane, up to INIT with receives posted. */
static int rr__ib_build(rr__ib_conn *c) {
  const rr__ibv *v = c->v;
  rr__ib_geometry(&c->rx_nslots, &c->rx_slot);
  /* The peer's geometry is not known yet: room for the largest it may have. */
  c->rq_depth = c->rx_nslots + RR__IB_MAX_SLOTS;
  c->sq_depth = RR__IB_MAX_SLOTS + c->rx_nslots + 2 * RR__IB_SIGNAL;
  c->ch = v->create_comp_channel(c->dev->ctx);
  if (!c->ch) return rr__set_error(RR_ESYS, "ibv_create_comp_channel: %s", strerror(errno));
  int fl = fcntl(c->ch->fd, F_GETFL);
  if (fl < 0 || fcntl(c->ch->fd, F_SETFL, fl | O_NONBLOCK) != 0)
    return rr__set_error(RR_ESYS, "completion channel O_NONBLOCK: %s", strerror(errno));
  c->cq = v->create_cq(c->dev->ctx, (int)(c->rq_depth + c->sq_depth), c, c->ch, 0);
  if (!c->cq) return rr__set_error(RR_ESYS, "ibv_create_cq: %s", strerror(errno));
  struct ibv_qp_init_attr ia = {.send_cq = c->cq,
                                .recv_cq = c->cq,
                                .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = c->sq_depth,
                                        .max_recv_wr = c->rq_depth,
                                        .max_send_sge = 1,
                                        .max_recv_sge = 1}};
  c->qp = v->create_qp(c->dev->pd, &ia);
  if (!c->qp) return rr__set_error(RR_ESYS, "ibv_create_qp: %s", strerror(errno));
  RR__CHECK(rr__ib_alloc_mr(c, (size_t)c->rx_nslots * c->rx_slot,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &c->rx_ring,
                            &c->rx_mr));
  RR__CHECK(rr__ib_alloc_mr(c, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                            (char **)&c->credit, &c->cr_mr));
  RR__CHECK(rr__ib_to_init(c));
  /* Receives may be posted from INIT on (ibv_post_recv(3)); the peer writes only after the
   * ready byte below, when it is in RTS and so are we. */
  int st = rr__ib_post_recvs(c, c->rq_depth);
  if (st != RR_OK) c->failed = 0; /* a setup error, not a lane failure */
  return st;
}

static int rr__ib_check_hello(const rr__ib_hello *h, const rr__peer_info *peer,
                              const rr__ib_dev *d) {
  if (h->magic != RR__IB_MAGIC)
    return rr__set_error(RR_EPROTO, "garbage instead of the InfiniBand hello");
  if ((int)h->global_rank != peer->global_rank)
    return rr__set_error(RR_EPROTO, "InfiniBand hello from rank %u, expected rank %d",
                         h->global_rank, peer->global_rank);
  if ((int)h->roce != d->roce)
    return rr__set_error(RR_EPROTO, "rank %d's port is %s, ours %s: no path between them",
                         peer->global_rank, h->roce ? "RoCE" : "InfiniBand",
                         d->roce ? "RoCE" : "InfiniBand");
  if (h->nslots < 2 || h->nslots > RR__IB_MAX_SLOTS || h->slot_bytes < RR__IB_MIN_SLOT ||
      h->slot_bytes > RR__IB_MAX_SLOT || h->mtu < IBV_MTU_256 || h->mtu > IBV_MTU_4096 ||
      h->qpn == 0 || h->qpn > 0xffffff)
    return rr__set_error(RR_EPROTO, "InfiniBand hello from rank %d with a bad geometry",
                         peer->global_rank);
  return RR_OK;
}

static int rr__ib_connect(const rr__peer_info *self, const rr__peer_info *peer, int peer_rank,
                          const int *fds, int nfds, int ctrl_fd, int64_t deadline_ms,
                          rr__conn **conns, int max_lanes, int *nlanes) {
  for (int i = 0; i < nfds; i++) close(fds[i]); /* none are asked for */
  const rr__ib_dev *d = rr__ib_device();
  if (!d) return rr__set_error(RR_ENOTSUP, "ib: no usable device: %s", rr__ib_why());
  if (max_lanes < 1) return rr__set_error(RR_EINVAL, "ib: no room for a lane");
  rr__ib_conn *c = rr__calloc(1, sizeof *c);
  if (!c) return RR_ENOMEM;
  c->dev = d;
  c->v = d->v;
  c->base.tp = &rr__ib_transport;
  c->base.peer = peer_rank;
  c->base.peer_global = peer->global_rank;
  c->base.last_rx_ms = rr__now_ms_coarse();
  int st;
  RR__CHECK_GOTO(rr__ib_build(c), st, fail);
  uint32_t psn = 0;
  if (getrandom(&psn, sizeof psn, 0) != (ssize_t)sizeof psn) psn = (uint32_t)rr__now_ns();
  psn &= 0xffffff;
  rr__ib_hello mine = {.magic = RR__IB_MAGIC,
                       .global_rank = (uint32_t)self->global_rank,
                       .qpn = c->qp->qp_num,
                       .psn = psn,
                       .lid = d->lid,
                       .roce = (uint32_t)d->roce,
                       .mtu = (uint32_t)d->mtu,
                       .nslots = c->rx_nslots,
                       .slot_bytes = c->rx_slot,
                       .ring_addr = (uintptr_t)c->rx_ring,
                       .credit_addr = (uintptr_t)&c->credit[0],
                       .ring_rkey = c->rx_mr->rkey,
                       .credit_rkey = c->cr_mr->rkey};
  memcpy(mine.gid, d->gid.raw, 16);
  uint8_t out[RR__IB_HELLO_BYTES], in[RR__IB_HELLO_BYTES];
  rr__ib_hello_put(&mine, out);
  /* Both hellos are small: the sends never wait on each other. */
  RR__CHECK_GOTO(rr__sock_send_all(ctrl_fd, out, sizeof out, deadline_ms), st, fail);
  RR__CHECK_GOTO(rr__sock_recv_all(ctrl_fd, in, sizeof in, deadline_ms), st, fail);
  rr__ib_hello theirs;
  rr__ib_hello_get(in, &theirs);
  RR__CHECK_GOTO(rr__ib_check_hello(&theirs, peer, d), st, fail);
  c->tx_nslots = theirs.nslots;
  c->tx_slot = (size_t)theirs.slot_bytes;
  c->remote_ring = theirs.ring_addr;
  c->remote_ring_rkey = theirs.ring_rkey;
  c->remote_credit = theirs.credit_addr;
  c->remote_credit_rkey = theirs.credit_rkey;
  RR__CHECK_GOTO(rr__ib_alloc_mr(c, (size_t)c->tx_nslots * c->tx_slot, IBV_ACCESS_LOCAL_WRITE,
                                 &c->tx_ring, &c->tx_mr),
                 st, fail);
  RR__CHECK_GOTO(rr__ib_to_rts(c, &theirs, psn), st, fail);
  /* Both in RTS before the first write: a write reaching a queue pair still in INIT would
   * be dropped and retried only after the 4 s timeout. */
  char ready = 'R', got = 0;
  RR__CHECK_GOTO(rr__sock_send_all(ctrl_fd, &ready, 1, deadline_ms), st, fail);
  RR__CHECK_GOTO(rr__sock_recv_all(ctrl_fd, &got, 1, deadline_ms), st, fail);
  if (got != 'R') {
    st = rr__set_error(RR_EPROTO, "rank %d did not confirm its InfiniBand queue pair",
                       peer->global_rank);
    goto fail;
  }
  conns[0] = &c->base;
  *nlanes = 1;
  RR__LOG_INFO(RR__SUB_INIT,
               "ib: rank %d <-> rank %d: %s port %u, QPN %u -> %u, MTU %d, %u x %zu KiB slots in, "
               "%u x %zu KiB out",
               self->global_rank, peer->global_rank, d->name, d->port, c->qp->qp_num, theirs.qpn,
               128 << RR__MIN((int)d->mtu, (int)theirs.mtu), c->rx_nslots, c->rx_slot >> 10,
               c->tx_nslots, c->tx_slot >> 10);
  return RR_OK;
fail:
  rr__ib_close(&c->base);
  return st;
}

const rr__transport rr__ib_transport = {
    .name = "ib",
    .publish = rr__ib_publish,
    .can_connect = rr__ib_can_connect,
    .setup_sockets = rr__ib_setup_sockets,
    .connect = rr__ib_connect,
    .isend = rr__ib_isend,
    .irecv = rr__ib_irecv,
    .progress = rr__ib_progress,
    .pollfd = rr__ib_pollfd,
    .peek = rr__ib_peek,
    .peekfd = rr__ib_peekfd,
    .close = rr__ib_close,
};
