/* CUDA IPC: the device side of a shared-memory lane (docs/cuda.md, "The CUDA IPC path").
 *
 * Ranks on one host whose call buffers are device memory move their segments through device
 * memory, host-driven as NCCL's copy-engine path: no kernel ever waits for a peer. Each side
 * of a pair owns a ring of receive slots in device memory (as many slots, as large, as the
 * shared-memory lane's host slots) and publishes its IPC handle in the pair's mapping
 * (rr__ipc_export). The shm transport (transport/shm.c) keeps its protocol: a device message
 * takes host slot s like any other, but its bytes go to device slot s mod nslots, and its
 * descriptor says so. So the host queue is the signal (descriptor published) and the credit
 * (tail released), and each side orders its own device work against them with events of its
 * own, which only its own host thread looks at:
 *
 *   sender     (host slot i free: the receiver's read of device slot i is complete)
 *              cudaMemcpyAsync(peer slot i <- segment), records sent[i]; publishes the
 *              descriptor only once sent[i] completed (polled, rr__ipc_put_done);
 *   receiver   (descriptor published: the bytes are in slot i) the reduction kernel reads
 *              slot i (or a copy moves it to the destination), records done[i]; releases
 *              the host slot only once done[i] completed (rr__ipc_take_done).
 *
 * No stream ever waits for an event another process records: a peer that dies mid-call can
 * leave nothing queued on this rank's device that only it could complete, so this rank's
 * device work always drains, and its host sees the death on the lane's socket and fails
 * the call (the cost: the host is in the loop between a copy and the kernel that reads it).
 * Same process (threads): the slots by pointer (the runtime refuses to open a handle in the
 * process that exported it). Another process, same or other GPU: an IPC memory handle,
 * opened once per lane and closed with it. */
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
  uint64_t slots_ptr;        /* same process only: the pointer itself */
  rr__cuda_ipc_handle slots; /* the slots this side receives into */
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
/* Sender: queue n bytes from src into the peer's slot i on stream (host slot i is ours: the
 * peer's read of it completed), and record sent[i] behind the copy. */
int rr__ipc_put(rr__ipc *x, uint32_t i, const void *src, size_t n, void *stream);
/* Has the copy into the peer's slot i completed? 1 yes (the slot may be published), 0 not
 * yet, <0 error (set). Never blocks. */
int rr__ipc_put_done(rr__ipc *x, uint32_t i);
/* Receiver: n bytes are in our slot i (the sender's copy completed before it published).
 * Either hand the slot to r->consume (whole message: the ring reduces from it) or copy it to
 * r->buf + r->done; then record done[i]. All queued on stream. */
int rr__ipc_take(rr__ipc *x, uint32_t i, rr__req *r, size_t n, void *stream);
/* Receiver, point to point into host memory: copy n bytes of our slot i to dst and wait for
 * the copy (on the slots' device, chosen around it), so the slot may be released at once. */
int rr__ipc_take_host(rr__ipc *x, uint32_t i, void *dst, size_t n);
/* Has our read of slot i completed? 1 yes (the host slot may be released), 0 not yet, <0
 * error (set). Never blocks. */
int rr__ipc_take_done(rr__ipc *x, uint32_t i);
/* Release everything. Waits first for this side's own copies and reads still queued (they
 * depend on nothing a peer must do, so this ends even when the peer died). */
void rr__ipc_free(rr__ipc *x);

/* Segments this process sent through CUDA IPC so far (tests check the path was taken). */
uint64_t rr__ipc_segments(void);

#endif /* RR__TRANSPORT_CUDA_IPC_H_ */
