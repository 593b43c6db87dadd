/* A host fake of the library's CUDA table (cuda/api.h), for tests only: it runs the library's
 * device paths on a machine without a GPU and enforces the CUDA runtime's contract, so that a
 * missing synchronisation or a misused handle fails a test here instead of on a GPU months
 * later. The rules and what the fake cannot prove: tests/fake_cuda/fake_cuda.c and
 * docs/cuda.md ("The fake").
 *
 * A test installs it first thing in main(), before any CUDA question (rr__cuda_use_api
 * refuses later), and before rr_spawn: each rank then starts its own fake "driver" when it
 * first uses it, as a forked child must with the real one. */
#ifndef RR_TESTS_FAKE_CUDA_H_
#define RR_TESTS_FAKE_CUDA_H_

#include <stddef.h>
#include <stdint.h>

#include "cuda/api.h"

/* The fake's table, with `devices` fake GPUs (1..8). */
const rr__cuda_api *rr_fake_cuda(int devices);

/* Install it (rr__cuda_use_api). 0, or an RR_ status with the last error set. */
int rr_fake_cuda_install(int devices);

/* The fake's kernels (fake_kernels.c), run on a stream worker: dst = a op b (and dst2) as
 * cuda/reduce.cu, and the DDP element work as cuda/ddp.cu. Pointers are readable host views. */
void rr_fake_reduce_run(void *dst, void *dst2, const void *a, const void *b, size_t n, int dtype,
                        int op, int div);
void rr_fake_ddp_run(int kind, void *dst, const void *src, size_t n, int dtype, int wire,
                     int world);

/* The one-kernel form (cuda/api.h's rr__cuda_direct) on readable host views of its
 * pointers (fake_kernels.c). */
void rr_fake_direct_run(const rr__cuda_direct *d);

/* Tests of the fake's device model (fake_gpu.c): queue on `stream` a kernel that spins until
 * the 32-bit word at the device pointer `word` reaches `value` (>=, cyclic), the design no
 * ringreduce path may have: it holds the GPU while it spins, so another process's write to
 * the word never runs, and the watchdog ends it with cudaErrorLaunchTimeout. And how many
 * times a device went from one context to another. */
int rr_fake_cuda_spin_kernel(void *word, unsigned value, void *stream);
uint64_t rr_fake_cuda_switches(int device);
/* Device memory that gives no IPC handle (as memory from cudaMallocAsync's default pool):
 * cudaIpcGetMemHandle fails on it. Freed with the table's free. */
int rr_fake_cuda_malloc_noexport(void **p, size_t bytes);
/* Device memory like VMM memory (cuMemCreate + cuMemMap): no IPC handle, BUFFER_ID 0. */
int rr_fake_cuda_malloc_vmm(void **p, size_t bytes);
/* This process's devices lose (1) or regain (0) stream memory operations, as
 * RR_FAKE_CUDA_NO_MEMOPS=1 for the whole test: for a rank that must differ from its peers. */
void rr_fake_cuda_no_memops(int on);

/* Work the fake's streams still have queued in this process (tests of the fake itself). */
int rr_fake_cuda_pending(void);
/* cudaFree calls of exported memory that another live process still mapped (fake_ipc.c). */
int rr_fake_cuda_free_violations(void);

/* Device 0..7's primary context in this process: 0 when it has none; 1 when it has one, with
 * buf (n bytes) telling which call on which thread made it, and whether that thread had
 * chosen its device (fake_devices.c). */
int rr_fake_cuda_ctx_origin(int device, char *buf, size_t n);

/* How many stream waits this process put on one device's legacy stream (NULL or
 * cudaStreamLegacy on the calling thread) for an event of another device; buf (n bytes)
 * describes the first. */
int rr_fake_cuda_legacy_cross(char *buf, size_t n);

#endif
