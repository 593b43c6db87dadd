/* CUDA IPC: the device side of a shared-memory lane (docs/cuda.md, "The CUDA IPC path").
 *
 * Ranks on one host whose call buffers are device memory move their segments through device
 * memory, host-driven as NCCL's copy-engine path: no kernel ever waits for a peer. Each side
 * of a pair owns a ring of receive slots in device memory (as many slots, as large, as the
 * shared-memory lane's host slots) and two interprocess events per slot, and publishes their
 * IPC handles in the pair's mapping (rr__ipc_export). The shm transport (transport/shm.c)
 * keeps its protocol: a device message takes host slot s like any other, but its bytes go
 * to device slot s mod nslots, and its descriptor says so. So the host queue is the signal
 * (descriptor published) and the credit (tail released), and the events order the device
 * work behind them:
 *
 *   sender     stream waits for done[i] (the receiver finished reading slot i last round),
 *              cudaMemcpyAsync(peer slot i <- segment), records sent[i], publishes the
 *              descriptor;
 *   receiver   sees the descriptor, its stream waits for sent[i], the reduction kernel
 *              reads slot i (or a copy moves it to the destination), records done[i],
 *              releases the host slot.
 *
 * Neither side waits on the host for the device. Same process (threads): the pointers are
 * used as they are (the runtime refuses to open a handle in the process that exported it).
 * Another process, same or other GPU: IPC handles, opened once per lane and closed with it. */
#ifndef RR__TRANSPORT_CUDA_IPC_H_
#define RR__TRANSPORT_CUDA_IPC_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/api.h"
#include "transport/transport.h"

#define RR__IPC_MAX_SLOTS 64 /* as RR__SHM_MAX_SLOTS */

/* What one side publishes in the pair's mapping. Written once, then `ready` set (seq_cst);
 * the other side reads the rest only after seeing it. */
typedef struct rr__ipc_export {
  _Atomic uint32_t ready;
  int32_t pid;
  int32_t device;
  uint32_t nslots;
  uint64_t slot_bytes;
  /* Same process only: the pointers themselves. */
  uint64_t slots_ptr;
  uint64_t done_ptr[RR__IPC_MAX_SLOTS], sent_ptr[RR__IPC_MAX_SLOTS];
  /* The slots this side receives into; done[i]: it finished reading its slot i; sent[i]:
   * its copy into the peer's slot i is complete. */
  rr__cuda_ipc_handle slots;
  rr__cuda_ipc_handle done[RR__IPC_MAX_SLOTS], sent[RR__IPC_MAX_SLOTS];
} rr__ipc_export;

typedef struct rr__ipc rr__ipc;

/* Allocate this side's slots and events on the current device and publish them in *mine
 * (wakes nobody: the caller does). same_process: the peer is a thread of this process (as
 * the lane's setup checked with SO_PEERCRED; never taken from what the peer publishes). */
int rr__ipc_start(rr__ipc **out, rr__ipc_export *mine, uint32_t nslots, size_t slot,
                  int self_global, int peer_global, int same_process);
/* Open what the peer published: 1 done (now or before), 0 not published yet, <0 error. */
int rr__ipc_open_peer(rr__ipc *x, const rr__ipc_export *theirs);
int rr__ipc_opened(const rr__ipc *x);
int rr__ipc_device(const rr__ipc *x);
/* Sender: queue n bytes from src into the peer's slot i on stream, after the peer's last
 * read of that slot, and record sent[i] behind the copy. */
int rr__ipc_put(rr__ipc *x, uint32_t i, const void *src, size_t n, void *stream);
/* Receiver: n bytes arrived in our slot i. After the sender's copy, either hand the slot to
 * r->consume (whole message: the ring reduces from it) or copy it to r->buf + r->done; then
 * record done[i]. All queued on stream. */
int rr__ipc_take(rr__ipc *x, uint32_t i, rr__req *r, size_t n, void *stream);
/* Release everything (waits for the device work still using it). */
void rr__ipc_free(rr__ipc *x);

/* Segments this process sent through CUDA IPC so far (tests check the path was taken). */
uint64_t rr__ipc_segments(void);

#endif /* RR__TRANSPORT_CUDA_IPC_H_ */
