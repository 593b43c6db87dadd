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
  /* Written by the other side, the importer: 1 before it opens the handle, 1 once it closed
   * it (or its open failed). The exporter frees the slots only after (rr__ipc_free). */
  _Atomic uint32_t mapped, closed;
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
int rr__ipc_open_peer(rr__ipc *x, rr__ipc_export *theirs);
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
 * depend on nothing a peer must do, so this ends even when the peer died), closes the peer's
 * slots and says so in its export, then waits for the peer to have closed ours before they
 * are freed ("Calling cudaFree on an exported memory region before calling
 * cudaIpcCloseMemHandle in the importing context will result in undefined behavior":
 * cudaIpcOpenMemHandle), until the lane's socket `sock` or the process peer_pid says the peer
 * is gone, or 5 s. */
void rr__ipc_free(rr__ipc *x, int sock, int peer_pid);

/* Segments this process sent through CUDA IPC so far (tests check the path was taken). */
uint64_t rr__ipc_segments(void);

/* ---- stream memory operations: the host leaves the data path (docs/cuda.md) ----
 *
 * A call whose device messages carry rr__req_dev.memops hands its segments over on the GPUs'
 * own streams: every segment of every step is queued when the ring posts it, and the request
 * completes at once; the host looks at nothing per segment. Each side of a pair owns the
 * slots it SENDS from (device memory, exported to the peer), and the pair's mapping holds,
 * per direction, a page of flag words both processes register with their GPU:
 *
 *   sender's stream    wait freed[i] >= e - 1      (the receiver is done with slot i's last use)
 *                      copy the segment into its own slot i
 *                      write ready[i] = e           (fenced: the copy is visible first)
 *   receiver's stream  wait ready[i] >= e
 *                      the kernel (or a copy) reads the sender's slot i
 *                      write freed[i] = e
 *
 * Segment t of a direction (counted over the lane's life by both sides alike) takes slot
 * t mod nslots with epoch e = epoch0 + t / nslots + 1; the words start at epoch0 and the
 * waits compare cyclically, so the epochs may wrap around 2^32. A signal (rr__req.signal) is
 * the direction's sig word: the sender's stream writes epoch0 + k for its k-th, the
 * receiver's stream waits for it.
 *
 * Why the sender owns its slots: a sender then needs nothing from its peer to queue its
 * work, and a receiver only the peer's export, which the peer publishes when it posts its
 * first send (it waits for nothing to do so); a ring whose every rank sends before it
 * receives cannot wait in a circle for exports. The ring posts a lane's requests in order
 * (ring/pipe_dev.c), so each stream's order is the loop's.
 *
 * No kernel ever waits for another process (two processes' kernels do not run at once on one
 * GPU without MPS): only streams do, and a waiting stream holds no GPU. A peer that dies
 * leaves waits nobody will satisfy: the host sees the death on its sockets and stores the
 * release values into its own wait words (rr__dev_release), so its stream drains.
 *
 * Same process (threads): never (two streams of one context waiting on each other through
 * memory CUDA does not see may be put in one hardware queue and deadlock: "Stream Memory
 * Operations", warning); such a lane keeps the host hand-off above. */
#define RR__MOP_MAGIC 0x504f4d52u /* "RMOP" */

/* What the sender of a direction publishes: its slots. ready is set last (seq_cst). */
typedef struct rr__mop_export {
  _Atomic uint32_t ready;
  _Atomic uint32_t mapped, closed; /* the receiver's, as in rr__ipc_export */
  int32_t pid;
  int32_t device;
  uint32_t nslots;
  uint64_t slot_bytes;
  uint64_t slots_ptr;        /* same process only */
  rr__cuda_ipc_handle slots; /* the sender's slots */
} rr__mop_export;

/* One direction's words, each group on its own cache lines: ready and sig written by the
 * sender's stream, freed by the receiver's. */
typedef struct rr__mop_dir {
  _Alignas(64) _Atomic uint32_t ready[RR__IPC_MAX_SLOTS];
  _Alignas(64) _Atomic uint32_t freed[RR__IPC_MAX_SLOTS];
  _Alignas(64) _Atomic uint32_t sig;
  _Alignas(64) rr__mop_export exp;
} rr__mop_dir;

/* The page (in the pair's mapping, transport/shm.h) both sides register with their GPU.
 * The creator writes epoch0 and every word before the peer maps it. */
typedef struct rr__mop_page {
  uint32_t magic, epoch0;
  rr__mop_dir dir[2]; /* 0: lower -> higher global rank */
} rr__mop_page;

typedef struct rr__mop rr__mop;

/* The host's page size, at least 4096 (sysconf(_SC_PAGESIZE): 64 KiB on some aarch64 hosts),
 * and the bytes the flag page takes in the pair's mapping on a host of `page`-byte pages:
 * sizeof(rr__mop_page) rounded up to whole pages (of max(4096, page) bytes). The layout
 * (transport/shm.h) aligns the page to that and leaves it that many bytes; rr__mop_start
 * registers exactly that. */
size_t rr__mop_host_page(void);
size_t rr__mop_area(size_t page);

/* Fill in a new page (the creator of the mapping). */
void rr__mop_page_init(rr__mop_page *pg, uint32_t epoch0);
/* Start this side: register the page, allocate and export the slots it sends from, on the
 * current device. lower: this rank is the pair's lower global rank. */
int rr__mop_start(rr__mop **out, rr__mop_page *pg, int lower, uint32_t nslots, size_t slot,
                  int self_global, int peer_global);
int rr__mop_device(const rr__mop *m);
/* Has the peer published its slots (then they are opened)? 1, 0 not yet, <0 error. */
int rr__mop_open_peer(rr__mop *m);
/* Queue a send (or signal) on stream; the receive likewise, once rr__mop_open_peer said 1
 * (a signal needs no slots). r->consume, when set on a data receive, gets the peer's slot
 * (the ring's kernel reads it there); else the bytes are copied to r->buf. The lane goes on
 * r->dev->waits. */
int rr__mop_send(rr__mop *m, rr__req *r);
int rr__mop_recv(rr__mop *m, rr__req *r);
/* Release everything (no device work of a call may still use it: every such call waited for
 * its stream before it returned). The peer may still be reading the slots we send from: the
 * free first waits (up to 5 s, or until peer_pid is gone) for it to release their last use,
 * then, as rr__ipc_free, for it to have closed its mapping of them (5 s more at most, or
 * until `sock` or peer_pid says it is gone). */
void rr__mop_free(rr__mop *m, int peer_pid, int sock);
/* Segments this process sent through stream memory operations so far (tests; signals are not
 * counted). */
uint64_t rr__mop_segments(void);
/* Bytes this process copied into the slots it sends from (tests: the pull copies none). */
uint64_t rr__mop_slot_bytes(void);

/* ---- pull: the all-gather's segments read straight out of the sender's buffer ----
 *
 * In an all-gather step (all_gather, all_reduce's second half) the chunk a rank sends lies in
 * its own output at the offset where its successor writes it, and is final: it is never
 * written again in the call. So the receiver's stream copies it straight from the sender's
 * output, mapped here through the allocation's IPC handle, instead of the sender copying it
 * into a slot first. Such a segment is a segment of the lane like any other (slot t mod
 * nslots, epoch e; both sides count it), but no slot holds it:
 *
 *   sender's stream    write ready[i] = e              (stream order: the chunk is final)
 *   receiver's stream  wait ready[i] >= e
 *                      copy sender's output + off -> own output + off
 *                      write freed[i] = e
 *   sender's stream    at the call's end, before its end event: wait freed[i] >= e for the
 *                      last segment pulled (rr__dev_fence), so the call completes (and the
 *                      user may overwrite or free the buffer) only after the reads
 *
 * The sender needs no wait before its write: nothing of its own is overwritten, and a later
 * copy into slot i still waits for freed[i] >= its epoch - 1, which covers the pull. A wait
 * the host releases (rr__dev_release) covers the fence too. The description of the sender's
 * output travels once per call as a host message behind the call header (ring/pipe_dev.c);
 * a buffer whose allocation gives no IPC handle says so there, and both sides keep the slots.
 * Only lanes with stream memory operations pull (two processes); others ignore rr__req.pull.
 *
 * The mappings are cached by the allocation's identity (rr__ipc_map), as the one-kernel form
 * keeps them (group/direct.c shares the cache). */

/* The types and calls of the pull and of the cache are in transport/transport.h (the ring and
 * the group use them). */

#endif /* RR__TRANSPORT_CUDA_IPC_H_ */
