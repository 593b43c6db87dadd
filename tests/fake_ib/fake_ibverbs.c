/* A fake libibverbs for the tests: never the default, never installed. (Over 800 lines on
 * purpose: the verbs objects and the NIC thread share one lock and every structure; split,
 * each half would reach into the other's internals through a header.) The library loads
 * it in place of libibverbs.so.1 when RR_IB_LIBRARY names it, so the real dlopen path runs.
 *
 * It models one RDMA device per process whose "wire" is AF_UNIX stream sockets: every queue
 * pair listens on /tmp/rr-fakeib-<uid>/<qpn> (a file, so processes in different network
 * namespaces of one machine reach each other: tests/netns.sh), and at RTR connects to its
 * destination's. A "NIC"
 * thread per process moves the packets: it writes RDMA payloads straight into the target
 * process's registered memory (the target's CPU is not involved, as with hardware),
 * generates completions and acknowledgements, and times out what is never acknowledged.
 *
 * What it enforces, and where each rule comes from (IBTA = InfiniBand Architecture
 * Specification vol. 1, release 1.4; man pages = rdma-core's):
 *  - QP state machine, and for each transition the required and allowed attribute masks
 *    (IBTA 11.2.4.2 / table 97 "QP state transition properties", ibv_modify_qp(3)); values
 *    in range (timeout <= 31, retry_cnt and rnr_retry <= 7: ibv_modify_qp(3)); path_mtu
 *    not above the port's active MTU (IBTA 9.7.4.1.1... the port's MTU caps the path).
 *  - ibv_post_send only in RTS (IBTA 10.8.2: WRs are processed only in RTS; posting in
 *    RESET/INIT/RTR is an error, ibv_post_send(3) EINVAL); ibv_post_recv from INIT on
 *    (ibv_post_recv(3)); queue depths from ibv_create_qp's cap (ENOMEM when full).
 *  - Local keys: an SGE must lie inside an MR of the QP's PD with its lkey, else
 *    IBV_WC_LOC_PROT_ERR (ibv_poll_cq(3)).
 *  - ibv_reg_mr: REMOTE_WRITE requires LOCAL_WRITE (ibv_reg_mr(3), EINVAL).
 *  - Remote writes: the rkey must name an MR of the target QP's PD registered with
 *    IBV_ACCESS_REMOTE_WRITE, the target QP must allow remote writes (qp_access_flags), and
 *    [addr, addr + len) must lie inside the MR; else the requester gets
 *    IBV_WC_REM_ACCESS_ERR (IBTA 9.7.5.2.4 NAK remote access error; ibv_poll_cq(3)).
 *  - RDMA_WRITE_WITH_IMM consumes one posted receive request at the responder and
 *    completes it with IBV_WC_RECV_RDMA_WITH_IMM, byte_len and imm_data
 *    (ibv_post_send(3), IBTA 9.4.3); a plain RDMA_WRITE consumes none and completes
 *    nothing there. No receive posted: receiver-not-ready (IBTA 9.7.5.2.8 RNR NAK); with
 *    the requester's rnr_retry = 7 ("infinite", ibv_modify_qp(3)) the packet waits for a
 *    receive; with fewer retries the fake retries at once and fails the WR with
 *    IBV_WC_RNR_RETRY_EXC_ERR (stricter than hardware, which waits min_rnr_timer between
 *    tries: a receive posted within that window would have saved it).
 *  - Completions of one QP in posting order (IBTA 10.8.3.1); unsignalled successful
 *    sends produce none, errors always do (ibv_post_send(3) IBV_SEND_SIGNALED).
 *  - An error completion moves the QP to ERR; every outstanding and later WR, sends and
 *    receives, completes with IBV_WC_WR_FLUSH_ERR (IBTA 10.3.1 / 11.2.4.2 error state).
 *  - No acknowledgement within 4.096 us x 2^timeout x (retry_cnt + 1): IBV_WC_RETRY_EXC_ERR
 *    (IBTA 9.7.6.1.x local ACK timeout; ibv_modify_qp(3) timeout, retry_cnt);
 *    RR_FAKE_IB_ACK_TIMEOUT_MS replaces the formula so tests need not wait 34 s.
 *  - CQ overflow: more completions than the CQ holds puts it in error; ibv_poll_cq then
 *    fails (IBTA 11.4.2.1 CQ overrun, ibv_create_cq(3)).
 *  - Completion events: ibv_req_notify_cq arms for the next completion only; the event is
 *    read from the channel's fd with ibv_get_cq_event and must be acknowledged before the
 *    CQ is destroyed (ibv_get_cq_event(3)).
 *
 * Faults (RR_FAKE_IB_FAULT, read when the device is opened), N counting this process's
 * posted send WRs from 1:
 *   retry:N          WR N completes with IBV_WC_RETRY_EXC_ERR (the peer never acknowledged)
 *   flush:N          at WR N the QP enters ERR: WR N and everything outstanding is flushed
 *   rkey:N           WR N carries a wrong rkey: the responder NAKs, remote access error
 *   mute:N           after WR N this process's NIC stops: no packets, no acknowledgements
 *   link_down:N      at WR N the port goes down: it reports IBV_PORT_DOWN, the NIC stops as
 *                    with mute, and every WR outstanding or posted later on this process's
 *                    QPs fails with IBV_WC_RETRY_EXC_ERR at once (hardware reports it after
 *                    its ACK timeout: nothing can reach the peer)
 *   port_down        the port reports IBV_PORT_DOWN from the start
 * RR_FAKE_IB_ROCE=1 makes the port Ethernet (RoCE) with a GID table instead of a LID.
 *
 * What it cannot show: timing, bandwidth or congestion of a real fabric; retransmission,
 * PSN sequence errors and packet loss (its wire is a reliable socket); memory ordering of a
 * real NIC's DMA (payloads land with memcpy); GPUDirect; the payload of a send is copied at
 * post time, so an application that changes a buffer before its completion goes unseen. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#undef ibv_reg_mr
#undef ibv_query_port
#undef ibv_get_device_list

#define FK_API __attribute__((visibility("default")))
#define FK_MAX_WR 4096
#define FK_MAGIC 0x4b414646u /* "FFAK" */

enum { FK_WRITE = 1, FK_ACK = 2, FK_HELLO = 3 };
enum { FK_OK = 0, FK_NAK_ACCESS = 1, FK_NAK_RNR = 2 };

typedef struct fk_pkt { /* on the wire, host order (one host) */
  uint32_t magic, type;
  uint32_t imm, has_imm;
  uint64_t seq, raddr;
  uint32_t rkey, len;
  uint32_t status, rnr_retry;
  uint32_t src_qpn, dst_qpn;
  uint16_t src_lid, pad16;
  uint8_t src_gid[16];
} fk_pkt;

typedef struct fk_buf {
  char *p;
  size_t len, cap, off;
} fk_buf;

typedef struct fk_link {
  int fd;
  fk_buf out, in;
  int dead;
} fk_link;

typedef struct fk_ch {
  struct ibv_comp_channel ch;
  int wfd;
} fk_ch;

typedef struct fk_cq {
  struct ibv_cq cq;
  struct ibv_wc *q;
  int cap, head, n;
  int armed, overflow;
  unsigned events, acked;
} fk_cq;

typedef struct fk_mr {
  struct ibv_mr mr;
  int access;
  struct fk_mr *next;
} fk_mr;

typedef struct fk_swr {
  uint64_t wr_id, seq;
  int signaled;
  int64_t deadline_ms;
  int fault_status; /* nonzero: complete with this error when its turn comes */
} fk_swr;

typedef struct fk_qp {
  struct ibv_qp qp;
  struct fk_qp *next;
  int lfd;
  fk_link req; /* our requests out, their acks in */
  fk_link rsp; /* their requests in, our acks out */
  int have_hello;
  fk_pkt hello;
  int nakked;     /* a NAK went out: later requests are out of PSN sequence, dropped */
  int tx_stopped; /* a WR will fail here: what is posted behind it never leaves (it would
                     reach the responder out of PSN sequence) and is flushed with it */
  uint8_t port;
  int access, path_mtu, timeout, retry_cnt, rnr_retry, min_rnr;
  uint32_t dest_qpn;
  uint16_t dlid;
  int is_global;
  union ibv_gid dgid;
  struct ibv_qp_cap cap;
  uint64_t *rq;
  int rq_head, rq_n;
  fk_swr *sq;
  int sq_head, sq_n;
  uint64_t next_seq;
} fk_qp;

static pthread_mutex_t fk_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fk_once = PTHREAD_ONCE_INIT;
static struct ibv_device fk_dev;
static struct ibv_device *fk_list[2];
static fk_qp *fk_qps;
static fk_mr *fk_mrs;
static int fk_wake[2] = {-1, -1};
static uint16_t fk_lid;
static union ibv_gid fk_gid;
static int fk_roce, fk_port_down, fk_muted, fk_link_down;
static long fk_fault_n;
static char fk_fault[32];
static long fk_posts;
static int64_t fk_ack_ms = -1;
static char fk_dir[80]; /* where the QPs' sockets live (fk_name) */
static void fk_name(uint32_t qpn, struct sockaddr_un *sa, socklen_t *len);

static int64_t fk_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fk_grow(fk_buf *b, size_t need) {
  if (b->len + need <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 65536;
  while (cap < b->len + need) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

static void fk_queue(fk_link *l, const fk_pkt *h, const void *payload, size_t len) {
  if (l->fd < 0 || l->dead || fk_grow(&l->out, sizeof *h + len) != 0) return;
  memcpy(l->out.p + l->out.len, h, sizeof *h);
  if (len) memcpy(l->out.p + l->out.len + sizeof *h, payload, len);
  l->out.len += sizeof *h + len;
  char b = 1;
  if (write(fk_wake[1], &b, 1) < 0) { /* the NIC is awake already */
  }
}

/* ---- completion queues ---- */

static void fk_cq_push(fk_cq *c, const struct ibv_wc *wc) {
  if (c->overflow) return;
  if (c->n == c->cap) { /* CQ overrun: the CQ is in error from now on */
    c->overflow = 1;
    return;
  }
  c->q[(c->head + c->n) % c->cap] = *wc;
  c->n++;
  if (c->armed && c->cq.channel) { /* one event per arm (ibv_req_notify_cq(3)) */
    c->armed = 0;
    c->events++;
    fk_cq *self = c;
    if (write(((fk_ch *)c->cq.channel)->wfd, &self, sizeof self) != (ssize_t)sizeof self) {
    }
  }
}

static void fk_complete(fk_qp *q, fk_cq *cq, uint64_t wr_id, enum ibv_wc_status st,
                        enum ibv_wc_opcode op, uint32_t len, uint32_t imm, int with_imm) {
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = wr_id;
  wc.status = st;
  wc.opcode = op;
  wc.byte_len = len;
  wc.qp_num = q->qp.qp_num;
  if (with_imm) {
    wc.imm_data = imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
  }
  fk_cq_push(cq, &wc);
}

/* The QP enters ERR: everything outstanding is flushed (IBTA 10.3.1). */
static void fk_qp_error(fk_qp *q) {
  q->qp.state = IBV_QPS_ERR;
  for (; q->sq_n > 0; q->sq_n--, q->sq_head = (q->sq_head + 1) % (int)q->cap.max_send_wr)
    fk_complete(q, (fk_cq *)q->qp.send_cq, q->sq[q->sq_head].wr_id, IBV_WC_WR_FLUSH_ERR,
                IBV_WC_RDMA_WRITE, 0, 0, 0);
  for (; q->rq_n > 0; q->rq_n--, q->rq_head = (q->rq_head + 1) % (int)q->cap.max_recv_wr)
    fk_complete(q, (fk_cq *)q->qp.recv_cq, q->rq[q->rq_head], IBV_WC_WR_FLUSH_ERR,
                IBV_WC_RECV_RDMA_WITH_IMM, 0, 0, 0);
}

/* The head send WR is acknowledged (or failed). */
static void fk_sq_done(fk_qp *q, enum ibv_wc_status st) {
  fk_swr *w = &q->sq[q->sq_head];
  q->sq_head = (q->sq_head + 1) % (int)q->cap.max_send_wr;
  q->sq_n--;
  if (st != IBV_WC_SUCCESS || w->signaled)
    fk_complete(q, (fk_cq *)q->qp.send_cq, w->wr_id, st, IBV_WC_RDMA_WRITE, 0, 0, 0);
  if (st != IBV_WC_SUCCESS) fk_qp_error(q);
}

/* ---- the NIC ---- */

static fk_mr *fk_find_rkey(struct ibv_pd *pd, uint32_t rkey) {
  for (fk_mr *m = fk_mrs; m; m = m->next)
    if (m->mr.rkey == rkey && m->mr.pd == pd) return m;
  return NULL;
}

/* One request at the responder. Returns 0 done, 1 stalled (RNR with infinite retry). */
static int fk_respond(fk_qp *q, const fk_pkt *h, const char *payload) {
  /* After a NAK the responder still expects the NAKed PSN; the packets behind it are out
   * of sequence and discarded (IBTA 9.7.5.2.x), while the requester's QP goes to ERR. */
  if (q->nakked) return 0;
  fk_pkt ack = {.magic = FK_MAGIC, .type = FK_ACK, .seq = h->seq, .status = FK_OK};
  fk_mr *m = fk_find_rkey(q->qp.pd, h->rkey);
  uintptr_t lo = m ? (uintptr_t)m->mr.addr : 0;
  if (!m || !(m->access & IBV_ACCESS_REMOTE_WRITE) || !(q->access & IBV_ACCESS_REMOTE_WRITE) ||
      h->raddr < lo || h->raddr + h->len > lo + m->mr.length || h->raddr + h->len < h->raddr) {
    ack.status = FK_NAK_ACCESS;
    q->nakked = 1;
    fk_queue(&q->rsp, &ack, NULL, 0);
    return 0;
  }
  if (h->has_imm && q->rq_n == 0) {
    if (h->rnr_retry == 7) return 1; /* waits for a receive */
    ack.status = FK_NAK_RNR;
    q->nakked = 1;
    fk_queue(&q->rsp, &ack, NULL, 0);
    return 0;
  }
  if (h->len) memcpy((void *)(uintptr_t)h->raddr, payload, h->len);
  if (h->has_imm) {
    uint64_t id = q->rq[q->rq_head];
    q->rq_head = (q->rq_head + 1) % (int)q->cap.max_recv_wr;
    q->rq_n--;
    fk_complete(q, (fk_cq *)q->qp.recv_cq, id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, h->len,
                h->imm, 1);
  }
  fk_queue(&q->rsp, &ack, NULL, 0);
  return 0;
}

/* Does the connecting QP's hello match what RTR said about the destination? A packet from
 * any other QP is not for this connection (IBTA 9.6.1.5: RC accepts its own peer only). */
static int fk_hello_ok(const fk_qp *q) {
  const fk_pkt *h = &q->hello;
  if (h->dst_qpn != q->qp.qp_num || h->src_qpn != q->dest_qpn) return 0;
  if (q->is_global) return memcmp(h->src_gid, q->dgid.raw, 16) == 0;
  return h->src_lid == q->dlid;
}

static void fk_read(fk_link *l) {
  if (l->fd < 0 || l->dead) return;
  for (;;) {
    if (fk_grow(&l->in, 1 << 16) != 0) return;
    ssize_t r = recv(l->fd, l->in.p + l->in.len, l->in.cap - l->in.len, MSG_DONTWAIT);
    if (r > 0) {
      l->in.len += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    l->dead = 1; /* the peer's process is gone: nothing acknowledges from now on */
    return;
  }
}

static void fk_write(fk_link *l) {
  while (l->fd >= 0 && !l->dead && l->out.off < l->out.len) {
    ssize_t w =
        send(l->fd, l->out.p + l->out.off, l->out.len - l->out.off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      l->out.off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    l->dead = 1;
  }
  if (l->out.off == l->out.len) l->out.off = l->out.len = 0;
}

/* Take complete packets from a link; `rsp`: requests (we are the responder), else acks. */
static void fk_consume(fk_qp *q, fk_link *l, int rsp) {
  size_t pos = 0;
  while (l->in.len - pos >= sizeof(fk_pkt)) {
    fk_pkt h;
    memcpy(&h, l->in.p + pos, sizeof h);
    size_t need = sizeof h + (h.type == FK_WRITE ? h.len : 0);
    if (h.magic != FK_MAGIC) {
      l->dead = 1;
      break;
    }
    if (l->in.len - pos < need) break;
    if (h.type == FK_HELLO && rsp) {
      q->hello = h;
      q->have_hello = 1;
    } else if (h.type == FK_WRITE && rsp) {
      /* Requests count only in RTR/RTS, from the connected peer; else they are dropped
       * silently and the requester times out (IBTA 10.3.1: a QP below RTR discards what
       * arrives). One leniency: a request reaching a QP still in INIT is held until RTR,
       * where hardware would drop it and retransmit after its ACK timeout (4 s); the
       * library's ready handshake keeps that from happening anyway. */
      if (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS) {
        if (q->qp.state == IBV_QPS_INIT) break;
      } else if (q->have_hello && fk_hello_ok(q)) {
        if (fk_respond(q, &h, l->in.p + pos + sizeof h)) break;
      }
    } else if (h.type == FK_ACK && !rsp) {
      if (q->sq_n > 0 && q->sq[q->sq_head].seq == h.seq && q->qp.state != IBV_QPS_ERR)
        fk_sq_done(q, h.status == FK_OK        ? IBV_WC_SUCCESS
                      : h.status == FK_NAK_RNR ? IBV_WC_RNR_RETRY_EXC_ERR
                                               : IBV_WC_REM_ACCESS_ERR);
    }
    pos += need;
  }
  if (pos == 0) return;
  memmove(l->in.p, l->in.p + pos, l->in.len - pos);
  l->in.len -= pos;
}

static void fk_timers(fk_qp *q, int64_t now) {
  while (q->qp.state == IBV_QPS_RTS && q->sq_n > 0) {
    fk_swr *w = &q->sq[q->sq_head];
    if (w->fault_status) {
      fk_sq_done(q, (enum ibv_wc_status)w->fault_status);
      continue;
    }
    if (now < w->deadline_ms) break;
    fk_sq_done(q, IBV_WC_RETRY_EXC_ERR);
  }
}

/* The NIC: sleeps until a link has bytes (or room for ours), a post wakes it, or 5 ms
 * pass (for the acknowledgement timers), then moves everything it can. */
#define FK_MAX_FDS 512
static void *fk_nic(void *arg) {
  (void)arg;
  struct pollfd pfd[FK_MAX_FDS];
  for (;;) {
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = fk_wake[0], .events = POLLIN};
    pthread_mutex_lock(&fk_mu);
    for (fk_qp *q = fk_qps; q && !fk_muted && n + 3 <= FK_MAX_FDS; q = q->next) {
      if (q->rsp.fd < 0 && q->lfd >= 0) pfd[n++] = (struct pollfd){.fd = q->lfd, .events = POLLIN};
      fk_link *ls[2] = {&q->req, &q->rsp};
      for (int k = 0; k < 2; k++)
        if (ls[k]->fd >= 0 && !ls[k]->dead)
          pfd[n++] = (struct pollfd){
              .fd = ls[k]->fd,
              .events = (short)(POLLIN | (ls[k]->out.len > ls[k]->out.off ? POLLOUT : 0))};
    }
    pthread_mutex_unlock(&fk_mu);
    if (poll(pfd, (nfds_t)n, 5) > 0 && pfd[0].revents) {
      char b[256];
      while (read(fk_wake[0], b, sizeof b) > 0) {
      }
    }
    pthread_mutex_lock(&fk_mu);
    int64_t now = fk_now_ms();
    for (fk_qp *q = fk_qps; q && !fk_muted; q = q->next) {
      if (q->rsp.fd < 0 && q->lfd >= 0) {
        int fd = accept4(q->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
          /* The one peer is connected: the name is no longer needed, and a process killed
           * later leaves no file behind. */
          struct sockaddr_un sa;
          socklen_t sl;
          q->rsp.fd = fd;
          fk_name(q->qp.qp_num, &sa, &sl);
          unlink(sa.sun_path);
        }
      }
      fk_read(&q->rsp);
      fk_consume(q, &q->rsp, 1);
      fk_read(&q->req);
      fk_consume(q, &q->req, 0);
      fk_timers(q, now);
      fk_write(&q->req);
      fk_write(&q->rsp);
    }
    pthread_mutex_unlock(&fk_mu);
  }
  return NULL;
}

static void fk_init(void) {
  snprintf(fk_dev.name, sizeof fk_dev.name, "fakeib0");
  snprintf(fk_dev.dev_name, sizeof fk_dev.dev_name, "uverbs0");
  fk_list[0] = &fk_dev;
  const char *f = getenv("RR_FAKE_IB_FAULT");
  if (f && *f) {
    const char *colon = strchr(f, ':');
    snprintf(fk_fault, sizeof fk_fault, "%.*s", (int)(colon ? colon - f : (long)strlen(f)), f);
    fk_fault_n = colon ? atol(colon + 1) : 0;
    fk_port_down = !strcmp(fk_fault, "port_down");
  }
  snprintf(fk_dir, sizeof fk_dir, "/tmp/rr-fakeib-%u", (unsigned)getuid());
  if (mkdir(fk_dir, 0700) != 0 && errno != EEXIST) return;
  const char *a = getenv("RR_FAKE_IB_ACK_TIMEOUT_MS");
  if (a && *a) fk_ack_ms = atol(a);
  fk_roce = getenv("RR_FAKE_IB_ROCE") && !strcmp(getenv("RR_FAKE_IB_ROCE"), "1");
  fk_lid = (uint16_t)(1 + getpid() % 0xbffe); /* unicast LIDs: 1..0xbfff */
  fk_gid.raw[0] = 0xfe;
  fk_gid.raw[1] = 0x80;
  uint32_t pid = (uint32_t)getpid();
  memcpy(fk_gid.raw + 12, &pid, 4);
  if (pipe2(fk_wake, O_NONBLOCK | O_CLOEXEC) != 0) return;
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &at, fk_nic, NULL) != 0) fk_wake[0] = -1;
  pthread_attr_destroy(&at);
}

/* ---- devices ---- */

FK_API struct ibv_device **ibv_get_device_list(int *num) {
  pthread_once(&fk_once, fk_init);
  struct ibv_device **l = calloc(2, sizeof *l);
  if (!l) return NULL;
  l[0] = &fk_dev;
  if (num) *num = 1;
  return l;
}

FK_API void ibv_free_device_list(struct ibv_device **list) {
  free(list);
}

FK_API const char *ibv_get_device_name(struct ibv_device *dev) {
  return dev->name;
}

static int fk_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fk_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int fk_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int fk_req_notify(struct ibv_cq *cq, int solicited_only);

FK_API struct ibv_context *ibv_open_device(struct ibv_device *dev) {
  pthread_once(&fk_once, fk_init);
  if (fk_wake[0] < 0) return NULL;
  struct ibv_context *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->device = dev;
  c->cmd_fd = -1;
  c->async_fd = -1;
  c->num_comp_vectors = 1;
  c->ops.post_send = fk_post_send;
  c->ops.post_recv = fk_post_recv;
  c->ops.poll_cq = fk_poll_cq;
  c->ops.req_notify_cq = fk_req_notify;
  pthread_mutex_init(&c->mutex, NULL);
  return c;
}

FK_API int ibv_close_device(struct ibv_context *c) {
  pthread_mutex_destroy(&c->mutex);
  free(c);
  return 0;
}

FK_API int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
  (void)c;
  memset(a, 0, sizeof *a);
  a->phys_port_cnt = 1;
  a->max_qp_wr = FK_MAX_WR;
  a->max_sge = 4;
  a->max_cqe = 1 << 16;
  a->max_qp = 1 << 16;
  a->max_mr_size = ~0ull;
  return 0;
}

/* The exported symbol takes the old, shorter struct (verbs.h's inline ___ibv_query_port
 * passes a struct ibv_port_attr through this type); the fields filled here are common. */
FK_API int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *ca) {
  (void)c;
  struct ibv_port_attr *a = (struct ibv_port_attr *)ca;
  if (port != 1) return EINVAL;
  memset(a, 0, offsetof(struct ibv_port_attr, link_layer) + 1);
  a->state = fk_port_down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = fk_roce ? IBV_MTU_1024 : IBV_MTU_4096;
  a->lid = fk_roce ? 0 : fk_lid;
  a->gid_tbl_len = fk_roce ? 4 : 1;
  a->link_layer = fk_roce ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  a->active_width = 2;  /* 4x */
  a->active_speed = 32; /* EDR */
  return 0;
}

FK_API int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid) {
  (void)c;
  if (port != 1 || index < 0 || index >= (fk_roce ? 4 : 1)) return -1;
  memset(gid, 0, sizeof *gid);
  if (index == 0) {
    *gid = fk_gid;         /* fe80::pid: link-local (IB's default GID; RoCE's skipped entry) */
  } else if (index == 2) { /* RoCE: ::ffff:127.77.x.y, an IPv4-mapped address */
    gid->raw[10] = gid->raw[11] = 0xff;
    gid->raw[12] = 127;
    gid->raw[13] = 77;
    memcpy(gid->raw + 14, &fk_lid, 2);
  } /* 1 and 3 stay empty */
  return 0;
}

FK_API struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
  struct ibv_pd *pd = calloc(1, sizeof *pd);
  if (pd) pd->context = c;
  return pd;
}

FK_API int ibv_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}

FK_API struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL; /* ibv_reg_mr(3) */
    return NULL;
  }
  fk_mr *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  uint32_t keys[2];
  if (getrandom(keys, sizeof keys, 0) != (ssize_t)sizeof keys) keys[0] = keys[1] = (uint32_t)rand();
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = len;
  m->mr.lkey = keys[0];
  m->mr.rkey = keys[1];
  m->access = access;
  pthread_mutex_lock(&fk_mu);
  m->next = fk_mrs;
  fk_mrs = m;
  pthread_mutex_unlock(&fk_mu);
  return &m->mr;
}

FK_API int ibv_dereg_mr(struct ibv_mr *mr) {
  pthread_mutex_lock(&fk_mu);
  for (fk_mr **p = &fk_mrs; *p; p = &(*p)->next)
    if (&(*p)->mr == mr) {
      fk_mr *m = *p;
      *p = m->next;
      free(m);
      break;
    }
  pthread_mutex_unlock(&fk_mu);
  return 0;
}

/* ---- completion channels and queues ---- */

FK_API struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c) {
  fk_ch *ch = calloc(1, sizeof *ch);
  int p[2];
  if (!ch || pipe2(p, O_CLOEXEC) != 0) {
    free(ch);
    return NULL;
  }
  ch->ch.context = c;
  ch->ch.fd = p[0];
  ch->wfd = p[1];
  return &ch->ch;
}

FK_API int ibv_destroy_comp_channel(struct ibv_comp_channel *c) {
  fk_ch *ch = (fk_ch *)c;
  close(ch->ch.fd);
  close(ch->wfd);
  free(ch);
  return 0;
}

FK_API struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *ctx,
                                    struct ibv_comp_channel *ch, int vec) {
  (void)vec;
  if (cqe < 1 || cqe > (1 << 16)) {
    errno = EINVAL;
    return NULL;
  }
  fk_cq *q = calloc(1, sizeof *q);
  if (!q || !(q->q = calloc((size_t)cqe, sizeof *q->q))) {
    free(q);
    return NULL;
  }
  q->cap = cqe;
  q->cq.context = c;
  q->cq.channel = ch;
  q->cq.cq_context = ctx;
  q->cq.cqe = cqe;
  return &q->cq;
}

FK_API int ibv_destroy_cq(struct ibv_cq *cq) {
  fk_cq *q = (fk_cq *)cq;
  if (q->acked != q->events) return EBUSY; /* ibv_get_cq_event(3): ack every event first */
  free(q->q);
  free(q);
  return 0;
}

FK_API int ibv_get_cq_event(struct ibv_comp_channel *c, struct ibv_cq **cq, void **ctx) {
  fk_cq *q;
  ssize_t r = read(c->fd, &q, sizeof q);
  if (r != (ssize_t)sizeof q) return -1; /* EAGAIN on a non-blocking fd */
  *cq = &q->cq;
  *ctx = q->cq.cq_context;
  return 0;
}

FK_API void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) {
  pthread_mutex_lock(&fk_mu);
  ((fk_cq *)cq)->acked += n;
  pthread_mutex_unlock(&fk_mu);
}

static int fk_req_notify(struct ibv_cq *cq, int solicited_only) {
  (void)solicited_only;
  pthread_mutex_lock(&fk_mu);
  ((fk_cq *)cq)->armed = 1;
  pthread_mutex_unlock(&fk_mu);
  return 0;
}

static int fk_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  fk_cq *q = (fk_cq *)cq;
  pthread_mutex_lock(&fk_mu);
  int got = -1;
  if (!q->overflow) {
    for (got = 0; got < n && q->n > 0; got++, q->n--, q->head = (q->head + 1) % q->cap)
      wc[got] = q->q[q->head];
  }
  pthread_mutex_unlock(&fk_mu);
  return got;
}

/* ---- queue pairs ---- */

/* A QP's address on the fake wire: a UNIX socket file in one directory of the file system
 * (not the abstract namespace, which is per network namespace: the tests run ranks in
 * separate network namespaces too, tests/netns.sh). */
static void fk_name(uint32_t qpn, struct sockaddr_un *sa, socklen_t *len) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  int n = snprintf(sa->sun_path, sizeof sa->sun_path, "%s/%06x", fk_dir, qpn);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
}

/* A socket file left by a process that died: nobody accepts on it. */
static int fk_stale(const struct sockaddr_un *sa, socklen_t sl) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int stale = connect(fd, (const struct sockaddr *)sa, sl) != 0 && errno == ECONNREFUSED;
  close(fd);
  return stale;
}

FK_API struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia) {
  if (ia->qp_type != IBV_QPT_RC || !ia->send_cq || !ia->recv_cq || ia->cap.max_send_wr < 1 ||
      ia->cap.max_send_wr > FK_MAX_WR || ia->cap.max_recv_wr < 1 ||
      ia->cap.max_recv_wr > FK_MAX_WR || ia->cap.max_send_sge > 4 || ia->cap.max_recv_sge > 4) {
    errno = EINVAL;
    return NULL;
  }
  fk_qp *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->cap = ia->cap;
  q->rq = calloc(ia->cap.max_recv_wr, sizeof *q->rq);
  q->sq = calloc(ia->cap.max_send_wr, sizeof *q->sq);
  q->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  q->req.fd = q->rsp.fd = -1;
  if (!q->rq || !q->sq || q->lfd < 0) goto fail;
  for (int tries = 0;; tries++) { /* a QPN is unique on the host: the bind proves it */
    uint32_t qpn = 0;
    if (getrandom(&qpn, sizeof qpn, 0) != (ssize_t)sizeof qpn) goto fail;
    qpn &= 0xffffff;
    if (qpn < 2) continue; /* 0 and 1 are the special QPs */
    struct sockaddr_un sa;
    socklen_t sl;
    fk_name(qpn, &sa, &sl);
    if (bind(q->lfd, (struct sockaddr *)&sa, sl) != 0 && errno == EADDRINUSE && fk_stale(&sa, sl))
      unlink(sa.sun_path); /* and try another number */
    else if (listen(q->lfd, 4) == 0) {
      q->qp.qp_num = qpn;
      break;
    }
    if (tries > 100) goto fail;
  }
  q->qp.context = pd->context;
  q->qp.pd = pd;
  q->qp.send_cq = ia->send_cq;
  q->qp.recv_cq = ia->recv_cq;
  q->qp.qp_type = IBV_QPT_RC;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_context = ia->qp_context;
  pthread_mutex_lock(&fk_mu);
  q->next = fk_qps;
  fk_qps = q;
  pthread_mutex_unlock(&fk_mu);
  return &q->qp;
fail:
  if (q->lfd >= 0) close(q->lfd);
  free(q->rq);
  free(q->sq);
  free(q);
  errno = ENOMEM;
  return NULL;
}

FK_API int ibv_destroy_qp(struct ibv_qp *qp) {
  fk_qp *q = (fk_qp *)qp;
  pthread_mutex_lock(&fk_mu);
  for (fk_qp **p = &fk_qps; *p; p = &(*p)->next)
    if (*p == q) {
      *p = q->next;
      break;
    }
  pthread_mutex_unlock(&fk_mu);
  if (q->lfd >= 0) {
    struct sockaddr_un sa;
    socklen_t sl;
    fk_name(q->qp.qp_num, &sa, &sl);
    unlink(sa.sun_path);
    close(q->lfd);
  }
  if (q->req.fd >= 0) close(q->req.fd);
  if (q->rsp.fd >= 0) close(q->rsp.fd);
  free(q->req.in.p);
  free(q->req.out.p);
  free(q->rsp.in.p);
  free(q->rsp.out.p);
  free(q->rq);
  free(q->sq);
  free(q);
  return 0;
}

/* IBTA table 97 for RC: attributes a transition requires, and those it may also take. */
static int fk_mask_ok(int from, int to, int mask) {
  int req, opt;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return mask == IBV_QP_STATE;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    req = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    opt = 0;
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) {
    req = IBV_QP_STATE;
    opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    req = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    req = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
          IBV_QP_MAX_QP_RD_ATOMIC;
    opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH |
          IBV_QP_PATH_MIG_STATE;
  } else if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
    req = IBV_QP_STATE;
    opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH |
          IBV_QP_PATH_MIG_STATE;
  } else {
    return 0; /* not a transition of the state machine */
  }
  return (mask & req) == req && (mask & ~(req | opt)) == 0;
}

FK_API int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  fk_qp *q = (fk_qp *)qp;
  pthread_mutex_lock(&fk_mu);
  int from = q->qp.state, to = (mask & IBV_QP_STATE) ? (int)a->qp_state : from, e = 0;
  if (!(mask & IBV_QP_STATE) || !fk_mask_ok(from, to, mask)) e = EINVAL;
  if (!e && (mask & IBV_QP_PORT) && a->port_num != 1) e = EINVAL;
  if (!e && (mask & IBV_QP_PATH_MTU) &&
      (a->path_mtu < IBV_MTU_256 || a->path_mtu > (fk_roce ? IBV_MTU_1024 : IBV_MTU_4096)))
    e = EINVAL;
  if (!e && (mask & IBV_QP_TIMEOUT) && a->timeout > 31) e = EINVAL;
  if (!e && (mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) e = EINVAL;
  if (!e && (mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) e = EINVAL;
  if (!e && (mask & IBV_QP_AV) && (fk_roce ? !a->ah_attr.is_global : a->ah_attr.dlid == 0))
    e = EINVAL; /* RoCE needs a GRH (IBTA A16/A17), IB a destination LID */
  if (e) {
    pthread_mutex_unlock(&fk_mu);
    return e;
  }
  if (mask & IBV_QP_PORT) q->port = a->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) q->access = (int)a->qp_access_flags;
  if (mask & IBV_QP_PATH_MTU) q->path_mtu = a->path_mtu;
  if (mask & IBV_QP_TIMEOUT) q->timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT) q->retry_cnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) q->rnr_retry = a->rnr_retry;
  if (mask & IBV_QP_MIN_RNR_TIMER) q->min_rnr = a->min_rnr_timer;
  if (mask & IBV_QP_DEST_QPN) q->dest_qpn = a->dest_qp_num;
  if (mask & IBV_QP_AV) {
    q->is_global = a->ah_attr.is_global;
    q->dlid = a->ah_attr.dlid;
    q->dgid = a->ah_attr.grh.dgid;
  }
  if (to == IBV_QPS_ERR) fk_qp_error(q);
  q->qp.state = (enum ibv_qp_state)to;
  if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    /* Connect to the destination QP; a missing one makes every request time out later. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    socklen_t sl;
    fk_name(q->dest_qpn, &sa, &sl);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sl) == 0 &&
        fcntl(fd, F_SETFL, O_NONBLOCK) == 0) {
      q->req.fd = fd;
      fk_pkt h = {.magic = FK_MAGIC,
                  .type = FK_HELLO,
                  .src_qpn = q->qp.qp_num,
                  .dst_qpn = q->dest_qpn,
                  .src_lid = fk_roce ? 0 : fk_lid};
      if (fk_roce) {
        union ibv_gid g;
        ibv_query_gid(NULL, 1, 2, &g);
        memcpy(h.src_gid, g.raw, 16);
      } else {
        memcpy(h.src_gid, fk_gid.raw, 16);
      }
      fk_queue(&q->req, &h, NULL, 0);
    } else if (fd >= 0) {
      close(fd);
    }
  }
  pthread_mutex_unlock(&fk_mu);
  return 0;
}

static int fk_lkey_ok(struct ibv_pd *pd, const struct ibv_sge *s) {
  for (fk_mr *m = fk_mrs; m; m = m->next)
    if (m->mr.lkey == s->lkey && m->mr.pd == pd && s->addr >= (uintptr_t)m->mr.addr &&
        s->addr + s->length <= (uintptr_t)m->mr.addr + m->mr.length)
      return 1;
  return 0;
}

static int fk_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  fk_qp *q = (fk_qp *)qp;
  int e = 0;
  pthread_mutex_lock(&fk_mu);
  for (; wr; wr = wr->next) {
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR)
      e = EINVAL;
    else if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)
      e = EINVAL;
    else if (wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_send_sge)
      e = EINVAL;
    else if (q->sq_n == (int)q->cap.max_send_wr)
      e = ENOMEM;
    if (e) break;
    long n = ++fk_posts;
    fk_swr *w = &q->sq[(q->sq_head + q->sq_n) % (int)q->cap.max_send_wr];
    *w = (fk_swr){.wr_id = wr->wr_id,
                  .seq = q->next_seq++,
                  .signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0};
    q->sq_n++;
    if (q->qp.state == IBV_QPS_ERR) { /* flushed at once */
      fk_qp_error(q);
      continue;
    }
    int64_t t = fk_ack_ms >= 0
                    ? fk_ack_ms
                    : (int64_t)(4.096e-3 * (double)(1ull << q->timeout) * (q->retry_cnt + 1));
    w->deadline_ms = fk_now_ms() + t;
    size_t len = 0;
    for (int i = 0; i < wr->num_sge; i++) {
      if (!fk_lkey_ok(q->qp.pd, &wr->sg_list[i])) w->fault_status = IBV_WC_LOC_PROT_ERR;
      len += wr->sg_list[i].length;
    }
    if (fk_fault_n == n && !strcmp(fk_fault, "retry")) w->fault_status = IBV_WC_RETRY_EXC_ERR;
    if (fk_fault_n == n && !strcmp(fk_fault, "link_down"))
      fk_link_down = fk_port_down = fk_muted = 1;
    if (fk_link_down) { /* the muted NIC runs no timers: every QP's sends fail here */
      for (fk_qp *o = fk_qps; o; o = o->next)
        if (o->qp.state == IBV_QPS_RTS && o->sq_n > 0) fk_sq_done(o, IBV_WC_RETRY_EXC_ERR);
      continue;
    }
    if (fk_fault_n == n && !strcmp(fk_fault, "flush")) {
      fk_qp_error(q);
      continue;
    }
    if (w->fault_status) q->tx_stopped = 1; /* completes in error on the NIC's next turn */
    if (q->tx_stopped) continue;
    fk_pkt h = {.magic = FK_MAGIC,
                .type = FK_WRITE,
                .seq = w->seq,
                .has_imm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM,
                .imm = wr->imm_data,
                .raddr = wr->wr.rdma.remote_addr,
                .rkey = wr->wr.rdma.rkey,
                .len = (uint32_t)len,
                .rnr_retry = (uint32_t)q->rnr_retry};
    if (fk_fault_n == n && !strcmp(fk_fault, "rkey")) h.rkey++;
    if (fk_grow(&q->req.out, sizeof h + len) == 0 && q->req.fd >= 0 && !q->req.dead) {
      char *p = q->req.out.p + q->req.out.len;
      memcpy(p, &h, sizeof h);
      p += sizeof h;
      for (int i = 0; i < wr->num_sge; i++) {
        memcpy(p, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
        p += wr->sg_list[i].length;
      }
      q->req.out.len += sizeof h + len;
    }
    if (fk_fault_n == n && !strcmp(fk_fault, "mute")) fk_muted = 1;
  }
  pthread_mutex_unlock(&fk_mu);
  char b = 1;
  if (write(fk_wake[1], &b, 1) < 0) {
  }
  if (e && bad) *bad = wr;
  return e;
}

static int fk_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  fk_qp *q = (fk_qp *)qp;
  int e = 0;
  pthread_mutex_lock(&fk_mu);
  for (; wr; wr = wr->next) {
    if (q->qp.state == IBV_QPS_RESET)
      e = EINVAL;
    else if (wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_recv_sge)
      e = EINVAL;
    else if (q->rq_n == (int)q->cap.max_recv_wr)
      e = ENOMEM;
    if (e) break;
    q->rq[(q->rq_head + q->rq_n) % (int)q->cap.max_recv_wr] = wr->wr_id;
    q->rq_n++;
    if (q->qp.state == IBV_QPS_ERR) fk_qp_error(q);
  }
  pthread_mutex_unlock(&fk_mu);
  char b = 1; /* a stalled request may go on now */
  if (write(fk_wake[1], &b, 1) < 0) {
  }
  if (e && bad) *bad = wr;
  return e;
}
