/* The one interface the ring calls to move bytes (NCCL's src/transport, Gloo's pair).
 *
 * A transport is a const table of functions. A connection (rr__conn) carries an ordered
 * stream of messages to one peer in each direction: the k-th isend on one side matches the
 * k-th irecv on the other, with the same length. Requests are owned by the caller (no
 * allocation per message); the transport links them into its queues until they complete.
 *
 * Contract: isend, irecv and progress never block. progress moves what it can and sets
 * req->complete; pollfd says which fd and events to sleep on when nothing moved. Errors are
 * returned as rr_status with the last error naming the peer.
 *
 * Each peer gets the first transport of the registry (transport/transport.c), in priority
 * order, whose can_connect() accepts it; both sides decide from the same published
 * information, so they agree without talking.
 */
#ifndef RR__TRANSPORT_TRANSPORT_H_
#define RR__TRANSPORT_TRANSPORT_H_

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/api.h" /* rr__cuda_ipc_handle */

/* A request whose bytes are in CUDA device memory (transport/cuda_ipc.c): buf (or, for a
 * consumed receive, the hook's destination) is on `device`, and the transport queues its
 * copies on `stream`, in order with the call's other device work. Completion means the
 * device work is done, not only queued: a send completes once its copy into the peer's slot
 * completed (the slot is published then), a receive once its read of the slot did (the slot
 * is released then; transport/cuda_ipc.h). ring/pipe_dev.c relies on it to reuse a reduce
 * chain's landing slot. Only transports with a device_msg_max accept such requests. */
/* A call that hands device segments over with stream memory operations (transport/cuda_ipc.h,
 * rr__req_dev.memops) queues waits on flag words that other processes' streams write. The
 * lanes it queued them on are listed here, so that when the call fails the host can release
 * those waits (rr__dev_release) and no stream is left waiting for a dead peer. */
#define RR__DEV_WAITS_MAX 64
typedef struct rr__dev_waits {
  int n;
  struct rr__mop *lane[RR__DEV_WAITS_MAX];
} rr__dev_waits;

/* One buffer described by its allocation (a host message between ranks of one host): the
 * allocation's base and size, the id CUDA gives it (process-wide unique: memory freed and
 * allocated again, even at one address, has a new id), the IPC handle of the base, and the
 * buffer's offset in it. */
typedef struct rr__ipc_region {
  uint64_t id, base, bytes, offset;
  rr__cuda_ipc_handle h;
} rr__ipc_region;

#define RR__IPC_MAPS 32    /* peer allocations kept mapped */
#define RR__IPC_EXPORTS 16 /* own allocations whose handles are kept */

/* A process's caches: peer allocations it mapped, by (peer, id), never by address; and its
 * own allocations' handles (ok 0: the allocation gives none). */
typedef struct rr__ipc_cache {
  struct {
    int peer; /* -1: empty */
    unsigned long long id;
    uint64_t base, bytes;
    char *mapped;
    uint64_t used;
  } map[RR__IPC_MAPS];
  struct {
    unsigned long long id;
    int ok;
    rr__cuda_ipc_handle h;
  } exp[RR__IPC_EXPORTS];
  int exp_next;
  uint64_t tick;
} rr__ipc_cache;

void rr__ipc_cache_init(rr__ipc_cache *k);
/* Close every mapping (no device work may still use one). */
void rr__ipc_cache_close(rr__ipc_cache *k);
/* Describe p (bytes long) by its allocation: 1, 0 when it gives no IPC handle (r is filled
 * but for the handle; all zero when the driver gives no usable range or id: VMM memory,
 * pools), < 0 an error (set). */
int rr__ipc_describe(rr__ipc_cache *k, const void *p, size_t bytes, rr__ipc_region *r);
/* This process's pointer to byte `need` of peer's region r (peer_global for messages): from
 * the cache, or opened now, closing the mappings of that peer's allocations it overlaps
 * (freed since: two live allocations never overlap). 1 opened, 0 cached, < 0 an error. */
int rr__ipc_map(rr__ipc_cache *k, int peer, int peer_global, const rr__ipc_region *r, size_t need,
                char **out);

/* What a rank sends its ring successor once per pulling call (after the call header). */
#define RR__PULL_MAGIC 0x4c4c5550u /* "PULL" */
typedef struct rr__ipc_pull_desc {
  uint32_t magic;
  uint32_t ok;  /* 1: the successor pulls from `out`; 0: no IPC handle, the slots */
  uint64_t seq; /* the call's sequence number */
  uint64_t len; /* the output's bytes */
  rr__ipc_region out;
} rr__ipc_pull_desc;

typedef struct rr__req_dev {
  void *stream; /* cudaStream_t */
  int device;
  /* Segments go through stream memory operations: queued at once on the stream, the sender's
   * and receiver's streams ordering them with flag words, not the host (transport/cuda_ipc.h);
   * waits: the lanes they wait on (filled by the transport). */
  int memops;
  rr__dev_waits *waits;
  /* With memops: the call's all-gather steps pull (transport/cuda_ipc.h, "pull"); NULL: not. */
  struct rr__ipc_pull *pull;
} rr__req_dev;

/* Store into this process's wait words on every lane in w the values that satisfy every wait
 * queued on them so far (transport/cuda_ipc.c), so a stream left waiting for a peer that will
 * never write drains. The lanes are unusable afterwards (their epochs are gone). */
void rr__dev_release(rr__dev_waits *w);

/* Queue on stream, for each lane in w that pulled segments of ours since the last fence, a
 * wait until the receiver finished the last of them (before the call's end event). */
int rr__dev_fence(rr__dev_waits *w, void *stream);
/* Segments this process pulled from a peer's buffer so far (tests). */
uint64_t rr__mop_pulled(void);

typedef struct rr__req {
  struct rr__req *next; /* queue link while the transport owns the request */
  char *buf;
  size_t len;
  size_t done;  /* bytes moved so far */
  int complete; /* set by the transport once done == len */
  /* Optional, receives only: a transport whose bytes sit in memory of its own (shared
   * memory) may, instead of copying them to buf, call consume once with the whole message
   * contiguous, and set consumed. The ring uses it to reduce straight out of the transport's
   * buffer into the destination. Transports that cannot simply ignore it. */
  void (*consume)(struct rr__req *r, const void *data, size_t len);
  void *ctx;
  int consumed;
  const rr__req_dev *dev; /* NULL: host memory */
  /* Point to point: the peer chose its path from its own buffer alone, so its bytes may be
   * in the other memory than ours. A lane that carries device messages (shm with CUDA IPC)
   * then copies across (docs/cuda.md, "Point to point"), and a device send to a peer that
   * never exported device slots goes as host bytes instead of waiting for them. Others
   * ignore it: their messages are always host bytes. */
  int p2p;
  /* A device message with memops: a flag and no bytes (len 0). The sender's stream writes
   * the lane's signal word, the receiver's waits for it: one process's stream ordered after
   * another's (the one-kernel form, group/direct.c). */
  int signal;
  /* A device message with memops whose bytes the receiver copies straight out of the sender's
   * buffer (transport/cuda_ipc.h, "pull"): the sender sets pull (buf: its segment, where it
   * stays); the receiver sets pull too, with pull_off the segment's bytes into the sender's
   * described buffer (r->dev->pull). A lane without stream memory operations ignores both. */
  int pull;
  size_t pull_off;
} rr__req;

/* A pulling call's state (group/ipc.c fills it, the ring sends and receives the descriptions,
 * the lanes map and read). */
typedef struct rr__ipc_pull {
  rr__ipc_cache *cache;
  int from;                 /* the group rank pulled from (the ring predecessor) */
  rr__ipc_pull_desc mine;   /* this rank's output, for its successor */
  rr__ipc_pull_desc theirs; /* the predecessor's, once received (theirs.ok: pull) */
  char *recvbuf;            /* this rank's output: a segment's offset is measured from it */
  rr__req sreq, rreq;       /* the two descriptions' messages */
} rr__ipc_pull;

/* What every rank publishes at rendezvous about itself. */
#define RR__PEER_ADDR_MAX 64 /* as transport/socket.h's longest address text */
typedef struct rr__peer_info {
  int global_rank;
  int pid;
  int nsocks;                   /* TCP data sockets it wants per peer */
  char addr[RR__PEER_ADDR_MAX]; /* where it accepts connections during setup (text) */
  char hostid[128];             /* equal for ranks on one host (see bootstrap.c) */
  char mode[8];                 /* its RR_TRANSPORT: every rank must choose by the same rule */
  uint64_t nonce;               /* fresh per group setup: greetings to it are bound to it */
  int ib;                       /* 1: an InfiniBand port is up here (transport/ib) */
  /* Its pid namespace: the boot id and /proc/self/ns/pid's link, or "?" when unknown. Equal
   * to ours: its pid means the same process here, so it can be watched by a pidfd
   * (transport/comm.c) whatever transport the pair uses. */
  char pidns[96];
} rr__peer_info;

struct rr__transport;

/* One lane of a connection to one peer. Transports embed this first in their own struct. */
typedef struct rr__conn {
  const struct rr__transport *tp;
  int peer;           /* the peer's rank in the group */
  int peer_global;    /* its global rank, for messages */
  int lane;           /* index among this peer's lanes */
  int pending;        /* requests queued here (maintained by the transport) */
  int rx_pending;     /* of which receives */
  int64_t last_rx_ms; /* when bytes last arrived, rr__now_ms_coarse (for timeout messages) */
} rr__conn;

typedef struct rr__transport {
  const char *name;
  /* Optional: fill this transport's fields of the record this rank publishes (what it can
   * offer peers), before anything is published. */
  void (*publish)(rr__peer_info *self);
  /* The largest message in device memory (rr__req.dev) a request may carry, in bytes; 0:
   * none. The shm transport carries them through CUDA IPC (transport/cuda_ipc.c), one slot
   * each. */
  size_t device_msg_max;
  /* With two or more lanes to a peer, give each direction lanes of its own (rr__lane_for in
   * transport/comm.c): a TCP socket that carries data both ways makes each side's sends and
   * receives contend for the socket's lock. */
  int one_way_lanes;
  /* Can this transport carry data between self and peer? Pure function of the two infos
   * and the environment, evaluated identically on both sides. */
  int (*can_connect)(const rr__peer_info *self, const rr__peer_info *peer);
  /* How many setup sockets (beyond the control socket) the bootstrap must open to the peer
   * for this transport: TCP uses them as its lanes. */
  int (*setup_sockets)(const rr__peer_info *self, const rr__peer_info *peer);
  /* Build the lanes for one peer. fds are the setup sockets (ownership passes to the
   * transport, also on failure); ctrl_fd is the peer's control socket, usable for a
   * blocking exchange of setup data until deadline_ms. Fills conns[0..*nlanes). */
  int (*connect)(const rr__peer_info *self, const rr__peer_info *peer, int peer_rank,
                 const int *fds, int nfds, int ctrl_fd, int64_t deadline_ms, rr__conn **conns,
                 int max_lanes, int *nlanes);
  int (*isend)(rr__conn *c, rr__req *r);
  int (*irecv)(rr__conn *c, rr__req *r);
  /* Move bytes; *moved += bytes moved. */
  int (*progress)(rr__conn *c, size_t *moved);
  /* Fill *pfd to sleep on this lane; returns 0 if it has nothing to wait for. */
  int (*pollfd)(rr__conn *c, struct pollfd *pfd);
  /* Copy up to len bytes that have arrived but no receive has taken yet, without consuming
   * them (so a waiting call can look at a peer's next header); returns the count. pfd gets
   * what to poll on for such bytes. Never blocks. */
  int (*peek)(rr__conn *c, void *buf, size_t len, size_t *got);
  void (*peekfd)(rr__conn *c, struct pollfd *pfd);
  /* Close and free the lane. */
  void (*close)(rr__conn *c);
} rr__transport;

extern const rr__transport rr__shm_transport; /* transport/shm.c: ranks on one host */
extern const rr__transport rr__ib_transport;  /* transport/ib/: verbs, between hosts */
extern const rr__transport rr__tcp_transport; /* transport/tcp.c: anyone, the fallback */

/* The registry: transports in priority order, NULL-terminated. */
extern const rr__transport *const rr__transports[];
/* The transport for the pair (self, peer): the first of the registry that can connect them.
 * Never NULL (tcp reaches everyone). Both ends get the same answer. */
const rr__transport *rr__transport_choose(const rr__peer_info *self, const rr__peer_info *peer);
/* Why this process has no usable InfiniBand port ("" when it has one): transport/ib. */
const char *rr__ib_not_used(void);
/* Let every transport fill its fields of this rank's record. */
void rr__transport_publish(rr__peer_info *self);

#define RR__MAX_LANES 16

#endif /* RR__TRANSPORT_TRANSPORT_H_ */
