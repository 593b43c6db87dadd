/* Shared-memory transport: ranks on one host exchange messages through a mapping both
 * processes share, instead of loopback TCP. transport/shm.c has the protocol,
 * transport/shm_setup.c the making of a lane (transport/shm_lane.h, what the two share);
 * docs/shm.md the design choices and the measurements behind them.
 *
 * The format of the shared mapping is declared here (tests use it to play a corrupt peer).
 * It is private to one pair of processes of one build: no compatibility across versions is
 * promised beyond the magic/version check at setup. */
#ifndef RR__TRANSPORT_SHM_H_
#define RR__TRANSPORT_SHM_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

extern const rr__transport rr__shm_transport;

/* Slot geometry: each side wishes for slots of RR_SEG_BYTES (rounded up to a page, within
 * these bounds) and max(RR_SLOTS, RR__SHM_DEPTH) of them; the pair takes the larger wish of
 * each. Messages larger than a slot are cut over several slots. */
#define RR__SHM_MIN_SLOT 4096u
#define RR__SHM_MAX_SLOT (4u << 20)
#define RR__SHM_DEPTH 8u
#define RR__SHM_MIN_SLOTS 2u
#define RR__SHM_MAX_SLOTS 64u

#define RR__SHM_CL 64      /* cache line */
#define RR__SHM_PAGE 4096u /* the least alignment of the slot data (the host page may be more) */

/* Page 0 of the mapping, written once by the creator (the lower global rank) and checked
 * by the other side before use. */
typedef struct rr__shm_hdr {
  uint64_t magic;
  uint32_t version;
  uint32_t nslots;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  int32_t lower_rank, higher_rank; /* global ranks */
  int32_t lower_pid, higher_pid;
} rr__shm_hdr;

/* One direction (ring 0: lower -> higher, ring 1: higher -> lower). Slot s (counting from
 * 0, never wrapping) lives at index s mod nslots. Each field has its own cache line: the
 * receiver writes tail and clears tx_wait, the sender sets tx_wait and clears rx_wait. */
typedef struct rr__shm_ring {
  _Alignas(RR__SHM_CL) _Atomic uint64_t tail;    /* slots released by the receiver */
  _Alignas(RR__SHM_CL) _Atomic uint32_t rx_wait; /* 1: the receiver sleeps until a slot comes */
  _Alignas(RR__SHM_CL) _Atomic uint32_t tx_wait; /* 1: the sender sleeps until tail moves */
} rr__shm_ring;

/* Per slot, one cache line, written by the sender: seq = s + 1 publishes slot s (the
 * receiver polls this line alone), len its bytes (1..slot_bytes), which sit in `inl` when
 * they fit (a call header does: one cache line carries the whole message), else in the
 * slot's data. */
#define RR__SHM_INLINE 48
#define RR__SHM_DEVICE 1u
typedef struct rr__shm_desc {
  _Alignas(RR__SHM_CL) _Atomic uint64_t seq;
  uint32_t len;
  uint32_t flags; /* RR__SHM_DEVICE: the bytes are in the receiver's device slot */
  unsigned char inl[RR__SHM_INLINE];
} rr__shm_desc;

/* Offsets in the mapping: header page, ring[0], ring[1], desc[0][nslots], desc[1][nslots],
 * ipc[0], ipc[1] (what the lower / higher rank publishes for CUDA IPC: rr__ipc_export),
 * then, aligned to the host page (at least RR__SHM_PAGE), mop, the flag words of stream
 * memory operations both sides register with their GPU (rr__mop_page, transport/cuda_ipc.h),
 * mop_bytes long (whole host pages: rr__mop_area), then data[0] and data[1], nslots * slot
 * bytes each. */
typedef struct rr__shm_layout {
  size_t ring[2], desc[2], ipc[2], mop, mop_bytes, data[2], total;
} rr__shm_layout;

/* The layout on this host (rr__mop_host_page); _page: for a host page of `page` bytes. */
void rr__shm_layout_of(uint32_t nslots, size_t slot, rr__shm_layout *l);
void rr__shm_layout_page(uint32_t nslots, size_t slot, size_t page, rr__shm_layout *l);

#endif /* RR__TRANSPORT_SHM_H_ */
