/* Shared-memory transport, setup and teardown: making one lane between two ranks on one host
 * (the handshake, creating, sealing, passing, checking and mapping the memfd) and closing it.
 * transport/shm.c has the protocol that then runs over the mapping; transport/shm_lane.h the
 * lane's state both files share; transport/shm.h the mapping's format.
 *
 * Setup, per pair, in connect() over the pair's TCP control socket: both send a hello
 * (rank, pid, slot wishes); the lower rank also names an abstract-namespace UNIX socket it
 * listens on (pids and a random nonce in the name). The higher rank connects; each side
 * checks with SO_PEERCRED that the other end is the process the rendezvous published; the
 * lower rank passes the memfd over the socket (SCM_RIGHTS), the higher maps it, checks it
 * and acknowledges. One lane per pair: one memory pipe, more lanes would not add bandwidth.
 *
 * Nothing the peer sends is trusted: the hello's geometry is bounded, and the memfd's type,
 * size and seal and the header are checked before the lane uses the mapping.
 */
#include "transport/shm_lane.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "common/util.h"
#include "transport/comm.h"
#include "transport/cuda_ipc.h"
#include "transport/shm.h"
#include "transport/socket.h"

#define RR__SHM_MAGIC 0x31764d4853525252ull /* "RRRSHMv1" */
#define RR__SHM_VERSION 1u

static size_t rr__round_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

void rr__shm_layout_page(uint32_t nslots, size_t slot, size_t page, rr__shm_layout *l) {
  size_t o = RR__SHM_PAGE; /* page 0: header */
  for (int d = 0; d < 2; d++) l->ring[d] = o, o += sizeof(rr__shm_ring);
  for (int d = 0; d < 2; d++) l->desc[d] = o, o += (size_t)nslots * sizeof(rr__shm_desc);
  for (int d = 0; d < 2; d++) l->ipc[d] = o, o += rr__round_up(sizeof(rr__ipc_export), RR__SHM_CL);
  /* Its own host pages (the mapping starts on one): cudaHostRegister pins and maps whole
   * pages, so the flag words share none with the words before them or the data after them,
   * whatever the host's page size (64 KiB on some aarch64 hosts, GH200's). rr__mop_start
   * registers exactly [mop, mop + mop_bytes). */
  const size_t align = RR__MAX((size_t)RR__SHM_PAGE, page);
  o = rr__round_up(o, align);
  l->mop = o, l->mop_bytes = rr__mop_area(page), o += l->mop_bytes;
  for (int d = 0; d < 2; d++) l->data[d] = o, o += (size_t)nslots * slot;
  l->total = o;
}

void rr__shm_layout_of(uint32_t nslots, size_t slot, rr__shm_layout *l) {
  rr__shm_layout_page(nslots, slot, rr__mop_host_page(), l);
}

int rr__shm_can_connect(const rr__peer_info *self, const rr__peer_info *peer) {
  /* RR_TRANSPORT=auto or shm (which only keeps device buffers off CUDA IPC): tcp forces
   * sockets, ib forces verbs. */
  const char *mode = rr__params_get()->transport;
  if (strcmp(mode, "auto") != 0 && strcmp(mode, "shm") != 0) return 0;
  return self->hostid[0] != '\0' && strncmp(self->hostid, peer->hostid, sizeof self->hostid) == 0;
}

int rr__shm_setup_sockets(const rr__peer_info *self, const rr__peer_info *peer) {
  (void)self;
  (void)peer;
  return 0; /* everything goes through the mapping and one UNIX socket */
}

/* ---- making a lane ---- */

#define RR__SHM_NAME_MAX 96

/* Sent by both sides over the control socket. Same host, same ABI: sent as is. */
typedef struct rr__shm_hello {
  uint64_t magic;
  int32_t global_rank;
  int32_t pid;
  uint32_t nslots; /* wishes */
  uint32_t version;
  uint64_t slot_bytes;
  char name[RR__SHM_NAME_MAX]; /* the lower rank's socket (abstract; name[0] is '@') */
} rr__shm_hello;

/* Sent with the memfd. */
typedef struct rr__shm_offer {
  uint64_t magic;
  uint64_t total_bytes;
} rr__shm_offer;

/* A slot holds a whole pipeline segment (so the ring can reduce straight out of it); the
 * ring is at least RR__SHM_DEPTH slots deep, RR_SLOTS if larger (docs/shm.md: deeper rings
 * let a sender run ahead while an oversubscribed receiver waits for a core). */
static void rr__shm_wishes(uint32_t *nslots, size_t *slot) {
  const rr__params *p = rr__params_get();
  size_t s = rr__round_up((size_t)p->seg_bytes, RR__SHM_PAGE);
  *slot = RR__MAX(RR__MIN(s, (size_t)RR__SHM_MAX_SLOT), (size_t)RR__SHM_MIN_SLOT);
  int64_t n = RR__MAX(p->slots, (int64_t)RR__SHM_DEPTH);
  *nslots = (uint32_t)RR__MIN(n, (int64_t)RR__SHM_MAX_SLOTS);
}

static int rr__shm_sockaddr(const char *name, struct sockaddr_un *sa, socklen_t *len) {
  size_t n = strnlen(name, RR__SHM_NAME_MAX);
  if (n < 2 || n >= RR__SHM_NAME_MAX || n >= sizeof sa->sun_path || name[0] != '@')
    return rr__set_error(RR_EPROTO, "bad shared-memory socket name");
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  memcpy(sa->sun_path, name, n);
  sa->sun_path[0] = '\0'; /* abstract namespace: nothing on disk to clean up */
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
  return RR_OK;
}

/* The process at the other end of a UNIX socket must be the one the rendezvous named. */
static int rr__shm_check_peer(int fd, const rr__peer_info *peer) {
  struct ucred cr;
  socklen_t l = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) != 0)
    return rr__set_error(RR_ESYS, "SO_PEERCRED: %s", strerror(errno));
  if (cr.pid != peer->pid)
    return rr__set_error(RR_EPROTO,
                         "the process on the shared-memory socket is pid %d, not rank %d's "
                         "pid %d (separate pid namespaces? set RR_TRANSPORT=tcp)",
                         (int)cr.pid, peer->global_rank, peer->pid);
  return RR_OK;
}

static int rr__shm_send_fd(int sock, int fd, const rr__shm_offer *o, int64_t deadline_ms) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct iovec iov = {.iov_base = (void *)o, .iov_len = sizeof *o};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  for (;;) {
    ssize_t w = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w == (ssize_t)sizeof *o) return RR_OK;
    if (w >= 0) return rr__set_error(RR_ESYS, "sendmsg: short write");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return rr__set_error(RR_EPEER, "sendmsg: %s", strerror(errno));
    RR__CHECK(rr__sock_wait(sock, POLLOUT, deadline_ms));
  }
}

static int rr__shm_recv_fd(int sock, int *fd, rr__shm_offer *o, int64_t deadline_ms) {
  *fd = -1;
  char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  struct iovec iov = {.iov_base = o, .iov_len = sizeof *o};
  struct msghdr mh = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  ssize_t r;
  for (;;) {
    RR__CHECK(rr__sock_wait(sock, POLLIN, deadline_ms));
    r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r >= 0) break;
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    return rr__set_error(RR_EPEER, "recvmsg: %s", strerror(errno));
  }
  /* Take every descriptor that came, whatever else is wrong, so none leaks. */
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < nfd; k++) {
      int f;
      memcpy(&f, CMSG_DATA(cm) + k * sizeof(int), sizeof f);
      if (*fd < 0)
        *fd = f;
      else
        close(f);
    }
  }
  if (r == 0) return rr__set_error(RR_EPEER, "the peer closed the socket during setup");
  if (r != (ssize_t)sizeof *o || (mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) || *fd < 0)
    return rr__set_error(RR_EPROTO, "malformed shared-memory offer");
  return RR_OK;
}

/* Map the memfd and point a lane at it; `lower` says which ring we send on. */
static int rr__shm_attach(rr__shm_conn *c, int memfd, size_t total, int lower) {
  void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (m == MAP_FAILED)
    return rr__set_error(RR_ESYS, "mmap of %zu bytes: %s", total, strerror(errno));
  c->map = m;
  c->map_len = total;
  rr__shm_layout l;
  rr__shm_layout_of(c->nslots, c->slot, &l);
  int t = lower ? 0 : 1, r = 1 - t;
  c->tx = (rr__shm_ring *)(c->map + l.ring[t]);
  c->rx = (rr__shm_ring *)(c->map + l.ring[r]);
  c->tx_desc = (rr__shm_desc *)(c->map + l.desc[t]);
  c->rx_desc = (rr__shm_desc *)(c->map + l.desc[r]);
  c->tx_data = c->map + l.data[t];
  c->rx_data = c->map + l.data[r];
  c->ipc_mine = (rr__ipc_export *)(c->map + l.ipc[t]);
  c->ipc_theirs = (rr__ipc_export *)(c->map + l.ipc[r]);
  c->mop_page = (rr__mop_page *)(c->map + l.mop);
  c->lower = lower;
  return RR_OK;
}

/* Lower rank: create, seal and fill in the mapping. */
static int rr__shm_create(rr__shm_conn *c, const rr__peer_info *self, const rr__peer_info *peer,
                          size_t total, int *memfd) {
  int fd = memfd_create("ringreduce-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return rr__set_error(RR_ESYS, "memfd_create: %s", strerror(errno));
  int st = RR_OK;
  if (ftruncate(fd, (off_t)total) != 0) {
    st = rr__set_error(RR_ESYS, "ftruncate to %zu bytes: %s", total, strerror(errno));
    goto fail;
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    st = rr__set_error(RR_ESYS, "sealing the memfd: %s", strerror(errno));
    goto fail;
  }
  RR__CHECK_GOTO(rr__shm_attach(c, fd, total, 1), st, fail);
  rr__shm_hdr *h = (rr__shm_hdr *)c->map;
  *h = (rr__shm_hdr){.magic = RR__SHM_MAGIC,
                     .version = RR__SHM_VERSION,
                     .nslots = c->nslots,
                     .slot_bytes = c->slot,
                     .total_bytes = total,
                     .lower_rank = self->global_rank,
                     .higher_rank = peer->global_rank,
                     .lower_pid = self->pid,
                     .higher_pid = peer->pid};
  /* The flag words start at RR_IPC_EPOCH0 (0; tests set it near 2^32 to cross the wrap). */
  rr__mop_page_init(c->mop_page, (uint32_t)rr__params_get()->ipc_epoch0);
  *memfd = fd;
  return RR_OK;
fail:
  close(fd);
  return st;
}

/* Higher rank: check what the lower rank handed over, then map it. */
static int rr__shm_open(rr__shm_conn *c, const rr__peer_info *self, const rr__peer_info *peer,
                        int memfd, const rr__shm_offer *o, size_t total) {
  struct stat sb;
  if (o->magic != RR__SHM_MAGIC || o->total_bytes != total)
    return rr__set_error(RR_EPROTO, "shared-memory offer does not match the agreed geometry");
  if (fstat(memfd, &sb) != 0) return rr__set_error(RR_ESYS, "fstat: %s", strerror(errno));
  if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != total)
    return rr__set_error(RR_EPROTO, "the shared-memory file has %lld bytes, not %zu",
                         (long long)sb.st_size, total);
  int seals = fcntl(memfd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    return rr__set_error(RR_EPROTO, "the shared-memory file is not sealed against shrinking");
  RR__CHECK(rr__shm_attach(c, memfd, total, 0));
  const rr__shm_hdr *h = (const rr__shm_hdr *)c->map;
  if (h->magic != RR__SHM_MAGIC || h->version != RR__SHM_VERSION || h->nslots != c->nslots ||
      h->slot_bytes != c->slot || h->total_bytes != total || h->lower_rank != peer->global_rank ||
      h->higher_rank != self->global_rank)
    return rr__set_error(RR_EPROTO, "the shared-memory header does not match the agreed setup");
  return RR_OK;
}

static int rr__shm_check_hello(const rr__shm_hello *h, const rr__peer_info *peer, int lower_peer) {
  if (h->magic != RR__SHM_MAGIC || h->version != RR__SHM_VERSION)
    return rr__set_error(RR_EPROTO, "garbage instead of the shared-memory hello");
  if (h->global_rank != peer->global_rank || h->pid != peer->pid)
    return rr__set_error(RR_EPROTO,
                         "shared-memory hello from rank %d pid %d, expected rank %d pid %d",
                         h->global_rank, h->pid, peer->global_rank, peer->pid);
  if (h->nslots < RR__SHM_MIN_SLOTS || h->nslots > RR__SHM_MAX_SLOTS ||
      h->slot_bytes < RR__SHM_MIN_SLOT || h->slot_bytes > RR__SHM_MAX_SLOT ||
      h->slot_bytes % RR__SHM_PAGE)
    return rr__set_error(RR_EPROTO, "shared-memory hello with a bad geometry");
  if (lower_peer && (h->name[0] != '@' || !memchr(h->name, '\0', sizeof h->name)))
    return rr__set_error(RR_EPROTO, "shared-memory hello without a socket name");
  return RR_OK;
}

/* The lower rank's wait for the peer on its abstract socket, watching the pair's control
 * socket too: a peer that dies (or gives up and says so) between its hello and its connect
 * is seen at once, not at the deadline. Anyone on the host can see the socket's name, so a
 * connection is kept only from the peer's process (SO_PEERCRED); others are refused and
 * logged, and the wait goes on. */
static int rr__shm_accept_peer(int lfd, int ctrl_fd, const rr__peer_info *peer, int64_t deadline_ms,
                               int *sock) {
  for (;;) {
    struct pollfd pf[2] = {{.fd = lfd, .events = POLLIN}, {.fd = ctrl_fd, .events = POLLIN}};
    int64_t left = deadline_ms - rr__now_ms();
    if (left <= 0)
      return rr__set_error(RR_ETIMEDOUT,
                           "timed out waiting for rank %d to connect to its "
                           "shared memory",
                           peer->global_rank);
    int rc = poll(pf, 2, (int)RR__MIN(left, 1000));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return rr__set_error(RR_ESYS, "poll: %s", strerror(errno));
    if (pf[1].revents) {
      /* Nothing is due on the control socket before the connect: an ABORT (the bootstrap
       * reads and reports it) or the connection closing (the peer died). */
      char b;
      ssize_t n = recv(ctrl_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return rr__set_error(RR_EPEER,
                             "lost rank %d during the shared-memory setup: its "
                             "connection closed (the process exited, crashed or was killed)",
                             peer->global_rank);
      if (n > 0)
        return rr__set_error(RR_EPEER, "rank %d gave up during the shared-memory setup",
                             peer->global_rank);
    }
    if (!(pf[0].revents & POLLIN)) continue;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return rr__set_error(RR_ESYS, "accept: %s", strerror(errno));
    }
    if (rr__shm_check_peer(fd, peer) == RR_OK) {
      *sock = fd;
      return RR_OK;
    }
    RR__LOG_WARN(RR__SUB_INIT, "shm: refused a stranger on the socket for rank %d: %s",
                 peer->global_rank, rr__error());
    close(fd);
  }
}

int rr__shm_connect(const rr__peer_info *self, const rr__peer_info *peer, int peer_rank,
                    const int *fds, int nfds, int ctrl_fd, int64_t deadline_ms, rr__conn **conns,
                    int max_lanes, int *nlanes) {
  int st = RR_OK, lfd = -1, sock = -1, memfd = -1;
  for (int i = 0; i < nfds; i++) close(fds[i]); /* none are asked for */
  const int lower = self->global_rank < peer->global_rank;
  rr__shm_conn *c = rr__calloc(1, sizeof *c);
  if (!c) return RR_ENOMEM;
  c->sock = -1;
  if (max_lanes < 1) {
    st = rr__set_error(RR_EINVAL, "shm: no room for a lane");
    goto fail;
  }

  rr__shm_hello mine = {.magic = RR__SHM_MAGIC,
                        .version = RR__SHM_VERSION,
                        .global_rank = self->global_rank,
                        .pid = self->pid};
  rr__shm_wishes(&mine.nslots, &mine.slot_bytes);
  if (lower) {
    uint64_t nonce;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) nonce = (uint64_t)rr__now_ns();
    snprintf(mine.name, sizeof mine.name, "@ringreduce-shm/%d/%d/%016llx", self->pid, peer->pid,
             (unsigned long long)nonce);
    struct sockaddr_un sa;
    socklen_t sl = 0;
    RR__CHECK_GOTO(rr__shm_sockaddr(mine.name, &sa, &sl), st, fail);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0) {
      st = rr__set_error(RR_ESYS, "socket(AF_UNIX): %s", strerror(errno));
      goto fail;
    }
    if (bind(lfd, (struct sockaddr *)&sa, sl) != 0 || listen(lfd, 4) != 0) {
      st = rr__set_error(RR_ESYS, "listening on an abstract UNIX socket: %s", strerror(errno));
      goto fail;
    }
  }
  /* Both hellos are small: the sends never wait on each other. */
  rr__shm_hello theirs;
  RR__CHECK_GOTO(rr__sock_send_all(ctrl_fd, &mine, sizeof mine, deadline_ms), st, fail);
  /* A peer that failed before its hello sent an ABORT instead: leave it for the bootstrap
   * to read (it says why), rather than taking its bytes for a garbled hello. */
  if (rr__ctl_next_is_ctl(ctrl_fd, deadline_ms)) {
    st = rr__set_error(RR_EPEER, "rank %d gave up before its shared-memory hello",
                       peer->global_rank);
    goto fail;
  }
  RR__CHECK_GOTO(rr__sock_recv_all(ctrl_fd, &theirs, sizeof theirs, deadline_ms), st, fail);
  RR__CHECK_GOTO(rr__shm_check_hello(&theirs, peer, !lower), st, fail);
  c->nslots = RR__MAX(mine.nslots, theirs.nslots);
  c->slot = (size_t)RR__MAX(mine.slot_bytes, theirs.slot_bytes);
  c->dev_slot =
      RR__MAX(rr__round_up((size_t)rr__params_get()->ipc_seg_bytes, RR__SHM_PAGE), c->slot);
  rr__shm_layout l;
  rr__shm_layout_of(c->nslots, c->slot, &l);
  rr__shm_offer offer = {.magic = RR__SHM_MAGIC, .total_bytes = l.total};

  if (lower) {
    RR__CHECK_GOTO(rr__shm_create(c, self, peer, l.total, &memfd), st, fail);
    RR__CHECK_GOTO(rr__shm_accept_peer(lfd, ctrl_fd, peer, deadline_ms, &sock), st, fail);
    close(lfd);
    lfd = -1;
    RR__CHECK_GOTO(rr__shm_send_fd(sock, memfd, &offer, deadline_ms), st, fail);
    close(memfd);
    memfd = -1;
    char ack = 0;
    RR__CHECK_GOTO(rr__sock_recv_all(sock, &ack, 1, deadline_ms), st, fail);
    if (ack != 'K') {
      st = rr__set_error(RR_EPROTO, "rank %d refused the shared memory", peer->global_rank);
      goto fail;
    }
  } else {
    struct sockaddr_un sa;
    socklen_t sl = 0;
    RR__CHECK_GOTO(rr__shm_sockaddr(theirs.name, &sa, &sl), st, fail);
    sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) {
      st = rr__set_error(RR_ESYS, "socket(AF_UNIX): %s", strerror(errno));
      goto fail;
    }
    int rc;
    do rc = connect(sock, (struct sockaddr *)&sa, sl);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      st = rr__set_error(RR_ESYS,
                         "connecting to rank %d's shared-memory socket: %s (ranks in different "
                         "network namespaces with one RR_HOSTID? set RR_TRANSPORT=tcp)",
                         peer->global_rank, strerror(errno));
      goto fail;
    }
    RR__CHECK_GOTO(rr__shm_check_peer(sock, peer), st, fail);
    rr__shm_offer got;
    RR__CHECK_GOTO(rr__shm_recv_fd(sock, &memfd, &got, deadline_ms), st, fail);
    RR__CHECK_GOTO(rr__shm_open(c, self, peer, memfd, &got, l.total), st, fail);
    close(memfd);
    memfd = -1;
    RR__CHECK_GOTO(rr__sock_send_all(sock, "K", 1, deadline_ms), st, fail);
  }
  RR__CHECK_GOTO(rr__sock_nonblock(sock, 1), st, fail);
  c->sock = sock;
  sock = -1;
  c->base.tp = &rr__shm_transport;
  c->base.peer = peer_rank;
  c->base.peer_global = peer->global_rank;
  c->self_global = self->global_rank;
  c->peer_pid = peer->pid;
  c->base.lane = 0;
  c->base.last_rx_ms = rr__now_ms_coarse();
  conns[0] = &c->base;
  *nlanes = 1;
  RR__LOG_INFO(RR__SUB_INIT,
               "shm: rank %d <-> rank %d: %u slots of %zu KiB each way (%zu KiB mapped)",
               self->global_rank, peer->global_rank, c->nslots, c->slot >> 10, l.total >> 10);
  return RR_OK;
fail:
  if (lfd >= 0) close(lfd);
  if (sock >= 0) close(sock);
  if (memfd >= 0) close(memfd);
  rr__shm_close(&c->base);
  return st;
}

void rr__shm_close(rr__conn *base) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  rr__mop_free(c->mop, c->peer_pid, c->sock);
  rr__ipc_free(c->ipc, c->sock, c->peer_pid);
  if (c->map) munmap(c->map, c->map_len);
  if (c->sock >= 0) close(c->sock);
  free(c);
}

/* comm.h: a forked child lets go of the lane. Its socket is closed, so that the parent's
 * death shows its peer an end of file as if the child did not exist; the mapping is
 * unmapped, so that nothing in the child can write into the rings the parent and its peer
 * still use; the CUDA IPC state is the parent's (CUDA does not survive fork) and is left
 * alone, not freed. rr__shm_close then frees only the lane itself. */
void rr__shm_forked(rr__conn *base) {
  rr__shm_conn *c = (rr__shm_conn *)base;
  if (c->sock >= 0) close(c->sock);
  c->sock = -1;
  c->dead = 1;
  if (c->map) munmap(c->map, c->map_len);
  c->map = NULL;
  c->tx = c->rx = NULL;
  c->tx_desc = c->rx_desc = NULL;
  c->tx_data = c->rx_data = NULL;
  c->ipc_mine = c->ipc_theirs = NULL;
  c->ipc = NULL;
  c->mop_page = NULL;
  c->mop = NULL;
}
