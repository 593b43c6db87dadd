/* Stream memory operations and the shared GPU, as the fake encodes them (issue 39 part 1;
 * docs/cuda.md, "The fake"). Every call goes through the library's CUDA table, so the cases
 * that make sense on a GPU run there too (tests/gpu/run.sh's probe): then the real runtime
 * checks the fake's rules.
 *
 *   test_cuda_memops [--fake] rules      one process: cuStreamWaitValue32 GEQ (cyclic: across
 *                                        the wrap of 2^32 too), EQ; a wait nobody writes never
 *                                        completes, and the host's store into a registered word
 *                                        ends it, with the work queued behind it; a write comes
 *                                        after the stream's earlier work; managed memory is
 *                                        refused, and (the fake only: a GPU may take it) the
 *                                        host address of registered memory
 *   test_cuda_memops [--fake] pingpong   two processes, one shared page registered by each:
 *                                        N round trips of stream writes answered by stream
 *                                        waits (on a GPU: the cost of one, printed)
 *   test_cuda_memops --fake spin         two processes on one fake GPU. First the design the
 *                                        library uses: A's stream waits for a word, B's stream
 *                                        writes it, A completes. Then the planted one no path
 *                                        may have: A runs a kernel that spins on the word; B's
 *                                        write cannot run while A's kernel holds the GPU, and
 *                                        the watchdog ends A's kernel with
 *                                        cudaErrorLaunchTimeout. The test passes when the fake
 *                                        catches it so. Also: the device changed hands.
 *   test_cuda_memops --fake handoff      two ranks through CUDA IPC whose devices differ: rank
 *                                        1's have no stream memory operations (as a driver
 *                                        without them). A ring whose one side queues segments
 *                                        on its stream while the other waits on its host
 *                                        would hang; the call header says how segments are
 *                                        handed over, so both ranks fail at once with
 *                                        RR_EMISMATCH naming the cause.
 *   test_cuda_memops --fake early        a peer dead before the lane opened its slots: one
 *                                        all_reduce by stream memory operations (each lane
 *                                        also exports the host hand-off's slots, opened by
 *                                        nobody yet); rank 1 is killed; rank 0's device send
 *                                        must then open the dead rank's slots, which fails,
 *                                        and must report RR_EPEER naming rank 1, not the
 *                                        runtime's RR_ECUDA
 *   test_cuda_memops layout              the pair's mapping on hosts of 4, 16 and 64 KiB
 *                                        pages (transport/shm.h; no CUDA): the flag page
 *                                        starts on a host page, takes whole ones, and what
 *                                        rr__mop_start registers (rr__mop_area) is exactly
 *                                        it, ending where the data slots begin; on this host
 *                                        too (rr__mop_host_page)
 *   test_cuda_memops --fake freeclose    the slots' exporter frees them only after its peer
 *                                        closed its mapping: world 2, one all_reduce by
 *                                        stream memory operations, rank 1 destroys its group
 *                                        300 ms after rank 0; no cudaFree of either may find
 *                                        the other process still mapping the memory (the
 *                                        fake counts it: rr_fake_cuda_free_violations)
 *   test_cuda_memops --fake forms        the form of a ring kind by size (group/ipc.c's table),
 *                                        with RR_CUDA_STAGED_BYTES=4096 and
 *                                        RR_CUDA_MEMOPS_BYTES=262144 (cudafake.memops_forms):
 *                                        all_reduce and all_gather at sizes on each side of
 *                                        both bounds take staged / the host hand-off / stream
 *                                        memory operations, every result exact
 *
 * A forked process cannot use its parent's CUDA: the shared page is made before the ranks
 * are forked, and each registers it. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/util.h"
#include "transport/cuda_ipc.h"
#include "transport/shm.h"
#include "tests/cuda_harness.h"

#define SKIP 77
#define ROUNDS 200

static int g_fake;
/* Shared by the ranks (made before the fork): three words the streams use, and the host's
 * own flags for coordinating the two processes of a case. */
typedef struct shared {
  _Atomic uint32_t w[3];
  char pad[64];
  _Atomic int launched, phase, victim;
} shared;
static shared *g_sh;
static size_t g_page;

/* Poll an event for up to ms: 1 done, 0 not, -1 an error. */
static int done_within(void *ev, int ms) {
  for (double end = t_now() + ms / 1000.0;;) {
    int e = cu->event_query(ev);
    if (e == 0) return 1;
    if (e != RR__CUDA_ERR_NOT_READY) return -1;
    if (t_now() > end) return 0;
    usleep(200);
  }
}

/* Queue a wait on stream s for *dw >= / == v and an event behind it; pending for 50 ms (the
 * word does not satisfy it); then the host stores `w`: done within 5 s. */
static int wait_case(void *s, void *ev, void *dw, _Atomic uint32_t *hw, uint32_t start,
                     unsigned flags, uint32_t v, uint32_t not_yet, uint32_t w, const char *what) {
  atomic_store(hw, start);
  C_OK(stream_wait_value32(s, dw, v, flags));
  C_OK(event_record(ev, s));
  T_CHECK(done_within(ev, 50) == 0, "%s: the wait passed with the word at %#x", what, start);
  atomic_store(hw, not_yet);
  T_CHECK(done_within(ev, 50) == 0, "%s: the wait passed with the word at %#x", what, not_yet);
  atomic_store(hw, w);
  T_CHECK(done_within(ev, 5000) == 1, "%s: the host's store of %#x did not end the wait", what, w);
  return 0;
}

static int test_rules(void) {
  int ok = 0;
  C_OK(mem_ops(0, &ok));
  if (!ok) return printf("rules: device 0 has no stream memory operations: skipped\n"), SKIP;
  C_OK(set_device(0));
  void *s = NULL, *ev = NULL, *dword = NULL, *dptr = NULL, *managed = NULL;
  C_OK(stream_create(&s, 1));
  C_OK(event_create(&ev, RR__CUDA_EVENT_DISABLE_TIMING));
  /* Device memory: a write, then waits it satisfies at once. */
  C_OK(malloc(&dword, 4));
  C_OK(memset_async(dword, 0, 4, s));
  C_OK(stream_write_value32(s, dword, 5, RR__CUDA_WRITE_DEFAULT));
  C_OK(stream_wait_value32(s, dword, 5, RR__CUDA_WAIT_GEQ));
  C_OK(stream_wait_value32(s, dword, 4, RR__CUDA_WAIT_GEQ));
  C_OK(
      stream_wait_value32(s, dword, 0xfffffff0u, RR__CUDA_WAIT_GEQ)); /* 5 is past it, cyclically */
  C_OK(stream_wait_value32(s, dword, 5, RR__CUDA_WAIT_EQ));
  C_OK(event_record(ev, s));
  T_CHECK(done_within(ev, 5000) == 1, "waits that the written word satisfies did not pass");
  /* Host memory registered with the device: the host ends waits by storing into it. */
  char *page = mmap(NULL, g_page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  T_CHECK(page != MAP_FAILED, "mmap");
  _Atomic uint32_t *hw = (_Atomic uint32_t *)page;
  C_OK(host_register(page, g_page));
  C_OK(host_device_ptr(&dptr, page));
  if (wait_case(s, ev, dptr, hw, 5, RR__CUDA_WAIT_GEQ, 6, 5, 6, "GEQ 6")) return 1;
  /* Across the wrap: 0x10 is "after" 0xfffffff0, 0x0f is still before it. */
  if (wait_case(s, ev, dptr, hw, 0xfffffff0u, RR__CUDA_WAIT_GEQ, 0x10, 0x0f, 0x10,
                "GEQ across 2^32"))
    return 1;
  if (wait_case(s, ev, dptr, hw, 7, RR__CUDA_WAIT_EQ, 8, 9, 8, "EQ 8")) return 1;
  /* Work behind a wait nobody satisfies does not run, whatever else happens; the host's
   * release lets it. Then a write comes after the copy before it. */
  atomic_store(hw, 0);
  atomic_store(&hw[1], 0);
  void *dcopy = NULL;
  C_OK(malloc(&dcopy, 4));
  uint32_t seven = 7, got = 0;
  C_OK(memset_async(dcopy, 0, 4, s));
  C_OK(stream_sync(s));
  C_OK(stream_wait_value32(s, dptr, 1, RR__CUDA_WAIT_GEQ));
  C_OK(memcpy_async(dcopy, &seven, 4, s));
  C_OK(memcpy_async((char *)dptr + 8, dcopy, 4, s));
  C_OK(stream_write_value32(s, (char *)dptr + 4, 1, RR__CUDA_WRITE_DEFAULT));
  C_OK(event_record(ev, s));
  T_CHECK(done_within(ev, 100) == 0, "work queued behind an unsatisfied wait ran");
  T_CHECK(atomic_load(&hw[1]) == 0, "a write behind an unsatisfied wait landed");
  atomic_store(hw, 1); /* the host's release */
  T_CHECK(done_within(ev, 5000) == 1, "the host's release did not drain the stream");
  memcpy(&got, page + 8, 4);
  T_CHECK(atomic_load(&hw[1]) == 1 && got == 7,
          "the write (%u) or the copy before it (%u) is missing", (unsigned)atomic_load(&hw[1]),
          got);
  /* Refusals: managed memory (Driver API: "none of the operations accepts pointers to
   * managed memory"); the host address of registered memory, on the fake (a GPU that maps
   * host pointers may take it). */
  C_OK(malloc_managed(&managed, 4));
  T_CHECK(cu->stream_wait_value32(s, managed, 0, RR__CUDA_WAIT_GEQ) != 0,
          "a wait on managed memory was accepted");
  cu->clear_error();
  if (g_fake) {
    T_CHECK(dptr != (void *)page, "the fake's device pointer is the host address");
    T_CHECK(cu->stream_write_value32(s, page, 1, RR__CUDA_WRITE_DEFAULT) != 0,
            "a write to the host address of registered memory was accepted");
    cu->clear_error();
  }
  C_OK(stream_sync(s));
  C_OK(host_unregister(page));
  munmap(page, g_page);
  C_OK(free(managed));
  C_OK(free(dword));
  C_OK(free(dcopy));
  C_OK(event_destroy(ev));
  C_OK(stream_destroy(s));
  printf("rules: ok\n");
  return 0;
}

/* Wait (30 s at most) for the other process to set a flag to v. */
static int flag_is(_Atomic int *f, int v) {
  for (double end = t_now() + 30; atomic_load(f) != v;) {
    if (t_now() > end) return 0;
    usleep(1000);
  }
  return 1;
}

/* The two processes' common start: the shared page registered, a stream on `device`. */
static int two_start(int device, void **s, void **ev, void **dw) {
  int ok = 0;
  C_OK(mem_ops(device, &ok));
  T_CHECK(ok, "device %d has no stream memory operations", device);
  C_OK(set_device(device));
  C_OK(stream_create(s, 1));
  C_OK(event_create(ev, RR__CUDA_EVENT_DISABLE_TIMING));
  C_OK(host_register(g_sh, g_page));
  C_OK(host_device_ptr(dw, (void *)g_sh->w));
  return 0;
}

static int pingpong_rank(int rank, void *arg) {
  t_rank = rank;
  void *s, *ev, *dw;
  if (two_start(0, &s, &ev, &dw)) return 1;
  char *w = dw;
  double t0 = t_now();
  /* Rank 0 writes w[0] = k and waits for w[1] >= k; rank 1 answers each. */
  for (uint32_t k = 1; k <= ROUNDS; k++) {
    if (rank == 0) {
      C_OK(stream_write_value32(s, w, k, RR__CUDA_WRITE_DEFAULT));
      C_OK(stream_wait_value32(s, w + 4, k, RR__CUDA_WAIT_GEQ));
    } else {
      C_OK(stream_wait_value32(s, w, k, RR__CUDA_WAIT_GEQ));
      C_OK(stream_write_value32(s, w + 4, k, RR__CUDA_WRITE_DEFAULT));
    }
  }
  C_OK(event_record(ev, s));
  T_CHECK(done_within(ev, 60000) == 1, "the ping-pong did not finish");
  double us = (t_now() - t0) * 1e6 / ROUNDS;
  if (rank == 0)
    printf("pingpong: %d round trips, %.1f us each (stream write + wait, two processes)\n", ROUNDS,
           us);
  T_CHECK(atomic_load(&g_sh->w[0]) == ROUNDS && atomic_load(&g_sh->w[1]) == ROUNDS, "final words");
  C_OK(host_unregister(g_sh));
  return 0;
}

static int spin_rank(int rank, void *arg) {
  t_rank = rank;
  void *s, *ev, *dw;
  if (two_start(0, &s, &ev, &dw)) return 1;
  char *w = dw;
  /* 1. Stream waits: A's stream waits on w[0], B's stream writes it; the GPU goes to B while
   *    A's stream waits, so A completes. */
  if (rank == 0) {
    C_OK(stream_wait_value32(s, w, 1, RR__CUDA_WAIT_GEQ));
    C_OK(event_record(ev, s));
    atomic_store(&g_sh->launched, 1);
    T_CHECK(done_within(ev, 10000) == 1,
            "a stream wait answered by the other process's write did not pass");
    atomic_store(&g_sh->phase, 1);
  } else {
    T_CHECK(flag_is(&g_sh->launched, 1), "the other process never queued its wait");
    C_OK(stream_write_value32(s, w, 1, RR__CUDA_WRITE_DEFAULT));
    C_OK(stream_sync(s));
    T_CHECK(flag_is(&g_sh->phase, 1), "the other process's wait never passed");
  }
  /* 2. The planted design: A's kernel spins on w[1] while B's stream is to write it. */
  uint64_t sw0 = rr_fake_cuda_switches(0);
  if (rank == 0) {
    void *busy = NULL;
    C_OK(malloc(&busy, 4));
    C_OK(memset_async(busy, 0, 4, s)); /* some device work first: A holds the GPU */
    T_CHECK(rr_fake_cuda_spin_kernel(w + 4, 1, s) == 0, "the spin kernel's launch");
    C_OK(event_record(ev, s));
    atomic_store(&g_sh->launched, 2);
    int e = cu->stream_sync(s);
    T_CHECK(e == RR__CUDA_ERR_LAUNCH_TIMEOUT,
            "a kernel spinning on another process's word ended with %s, not "
            "cudaErrorLaunchTimeout: the fake let two contexts run at once",
            e ? cu->error_name(e) : "success");
    printf("spin: the fake ended the spinning kernel with %s (the planted design is caught)\n",
           cu->error_name(e));
    atomic_store(&g_sh->phase, 2);
  } else {
    T_CHECK(flag_is(&g_sh->launched, 2), "the other process never launched its kernel");
    usleep(200000); /* A's kernel runs by now */
    C_OK(stream_write_value32(s, w + 4, 1, RR__CUDA_WRITE_DEFAULT));
    C_OK(stream_sync(s)); /* runs once the watchdog freed the GPU */
    T_CHECK(flag_is(&g_sh->phase, 2), "the other process failed");
    T_CHECK(rr_fake_cuda_switches(0) > sw0, "the GPU never went from one process to the other");
  }
  C_OK(host_unregister(g_sh));
  return 0;
}

/* Rank 1's devices lose stream memory operations before its first CUDA call. */
static int handoff_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  if (rank == 1) rr_fake_cuda_no_memops(1);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  const size_t count =
      1 << 16; /* 256 KiB: the ring (RR_SMALL_BYTES takes less), through CUDA IPC */
  void *x = NULL;
  C_OK(malloc(&x, count * sizeof(float)));
  C_OK(memset_async(x, 0, count * sizeof(float), NULL));
  C_OK(stream_sync(NULL));
  const int64_t t0 = rr__now_ms();
  int st = rr_all_reduce(pg, x, x, count, RR_FLOAT32, RR_SUM);
  const char *msg = rr_last_error();
  T_CHECK(st == RR_EMISMATCH, "rank %d: the all_reduce returned %s (%s), want RR_EMISMATCH", rank,
          rr_status_name(st), msg);
  /* The rank that read the other's header names the cause; the other learns of the abort. */
  T_CHECK(strstr(msg, "RR_CUDA_MEMOPS differs") || strstr(msg, "aborted"),
          "rank %d: the error does not say why: %s", rank, msg);
  T_CHECK(rr__now_ms() - t0 < 20000, "rank %d: the mismatch took %lld ms to find", rank,
          (long long)(rr__now_ms() - t0));
  printf("handoff: rank %d: %s\n", rank, msg);
  C_OK(free(x));
  rr_destroy_process_group(pg);
  return 0;
}

/* The layout for one host page size and geometry: 0 when the flag page is whole host pages of
 * its own and the registration is exactly it. */
static int layout_one(size_t page, uint32_t nslots, size_t slot) {
  rr__shm_layout l;
  rr__shm_layout_page(nslots, slot, page, &l);
  const size_t reg = rr__mop_area(page); /* what rr__mop_start registers */
  const size_t p = page > 4096 ? page : 4096;
  const size_t before = l.ipc[1] + sizeof(rr__ipc_export);
  int bad = 0;
  bad |= l.mop % p != 0;                   /* starts on a host page */
  bad |= reg % p != 0;                     /* whole host pages */
  bad |= reg < sizeof(rr__mop_page);       /* holds the flag words */
  bad |= reg != l.mop_bytes;               /* the registration is the layout's area */
  bad |= before > l.mop;                   /* nothing before it on its pages */
  bad |= l.data[0] != l.mop + l.mop_bytes; /* the data slots after its last page */
  bad |= l.data[1] != l.data[0] + (size_t)nslots * slot || l.total != l.data[1] + nslots * slot;
  if (bad)
    fprintf(stderr,
            "layout: %zu-byte pages, %u slots of %zu: flag page at %zu, %zu bytes (the "
            "registration: %zu) after words ending at %zu, data at %zu\n",
            page, nslots, slot, l.mop, l.mop_bytes, reg, before, l.data[0]);
  return bad;
}

static int test_layout(void) {
  static const size_t pages[] = {4096, 16384, 65536};
  static const uint32_t ns[] = {RR__SHM_MIN_SLOTS, RR__SHM_DEPTH, RR__SHM_MAX_SLOTS};
  int bad = 0;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) bad |= layout_one(pages[i], ns[j], RR__SHM_MIN_SLOT);
  bad |= layout_one(rr__mop_host_page(), RR__SHM_DEPTH, 1 << 20);
  rr__shm_layout a, b;
  rr__shm_layout_of(RR__SHM_DEPTH, 65536, &a);
  rr__shm_layout_page(RR__SHM_DEPTH, 65536, rr__mop_host_page(), &b);
  bad |= memcmp(&a, &b, sizeof a) != 0;
  printf("layout: %s (this host's page: %zu bytes)\n", bad ? "WRONG" : "ok", rr__mop_host_page());
  return bad;
}

static int freeclose_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  const size_t count = 1 << 14;
  void *x = NULL; /* never freed: the user's buffer is not what this case checks */
  C_OK(malloc(&x, count * sizeof(float)));
  C_OK(memset_async(x, 0, count * sizeof(float), NULL));
  C_OK(stream_sync(NULL));
  const uint64_t mop0 = rr__mop_segments();
  T_OK(rr_all_reduce(pg, x, x, count, RR_FLOAT32, RR_SUM));
  T_CHECK(rr__mop_segments() > mop0, "the all_reduce did not use stream memory operations");
  if (rank == 1) usleep(300000);
  const int64_t t0 = rr__now_ms();
  T_OK(rr_destroy_process_group(pg));
  const int v = rr_fake_cuda_free_violations();
  printf("freeclose: rank %d: destroyed in %lld ms, %d frees of memory the peer still mapped\n",
         rank, (long long)(rr__now_ms() - t0), v);
  T_CHECK(v == 0, "rank %d freed memory rank %d still mapped (%d times)", rank, 1 - rank, v);
  return 0;
}

/* Is process pid gone (exited: a zombie, or reaped)? */
static int gone(int pid) {
  char path[64], st = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 1;
  int n = fscanf(f, "%*d (%*[^)]) %c", &st);
  fclose(f);
  return n == 1 && (st == 'Z' || st == 'X');
}

/* Rank 0's exit in the early case: 0 RR_EPEER seen before the lane looked at rank 1's slots,
 * EARLY_OPEN RR_EPEER from the failed open (the case under test), EARLY_NONE the send went
 * whole before the kill. */
#define EARLY_OPEN 10
#define EARLY_NONE 11
#define EARLY_ROUNDS 60
#define EARLY_S 2.5

static int early_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  const size_t count = 1 << 14; /* 64 KiB: device slots, not inline bytes */
  void *x = NULL;
  C_OK(malloc(&x, count * sizeof(float)));
  C_OK(memset_async(x, 0, count * sizeof(float), NULL));
  C_OK(stream_sync(NULL));
  /* Stream memory operations: each side opens the slots the other sends from, and exports,
   * unopened, its host hand-off's slots (a point-to-point send opens them). */
  T_OK(rr_all_reduce(pg, x, x, count, RR_FLOAT32, RR_SUM));
  if (rank == 1) {
    T_CHECK(flag_is(&g_sh->launched, 1), "rank 0 never posted its send");
    atomic_store(&g_sh->victim, (int)getpid());
    atomic_store(&g_sh->phase, 1);
    raise(SIGKILL);
    return 1;
  }
  /* Posted while rank 1 lives (the call's start finds nothing wrong), waited for once it is
   * dead: the lane's first look at rank 1's slots comes after the death. */
  rr_work *w = NULL;
  T_OK(rr_send_async(pg, x, count, RR_FLOAT32, 1, &w));
  atomic_store(&g_sh->launched, 1);
  T_CHECK(flag_is(&g_sh->phase, 1), "rank 1 never got to its death");
  for (double end = t_now() + 10; !gone(atomic_load(&g_sh->victim));) {
    T_CHECK(t_now() < end, "rank 1 (pid %d) did not die", atomic_load(&g_sh->victim));
    usleep(1000);
  }
  const int64_t t0 = rr__now_ms();
  int st = rr_work_wait(w, 30000);
  const char *msg = rr_last_error();
  rr_work_free(w);
  printf("early: rank 0: the send to the dead rank 1 returned %s after %lld ms: %s\n",
         rr_status_name(st), (long long)(rr__now_ms() - t0), msg);
  /* The send may have gone whole before the kill (no verdict: the round is run again). */
  if (st == RR_OK) return rr_destroy_process_group(pg), EARLY_NONE;
  T_CHECK(st == RR_EPEER, "the send returned %s (%s), want RR_EPEER", rr_status_name(st), msg);
  T_HAS(msg, "lost rank 1");
  const int opened = strstr(msg, "its device slots") || strstr(msg, "device memory it published");
  rr_destroy_process_group(pg);
  return opened ? EARLY_OPEN : 0;
}

/* One all_reduce (int32 sum, count elements) or all_gather (count per rank) on device
 * buffers; which form it took is read from the segment counters: staged moves none through
 * CUDA IPC, the host hand-off only host-handed ones, memops only stream-handed ones. */
static int forms_case(rr_pg *pg, int gather, size_t count, const char *want) {
  const int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  const size_t total = gather ? count * (size_t)n : count, es = sizeof(int32_t);
  const uint64_t seed = t_seed() + count + (uint64_t)gather;
  int32_t *h = t_alloc(total * es);
  void *in = NULL, *out = NULL;
  C_OK(malloc(&in, total * es));
  C_OK(malloc(&out, total * es));
  t_fill(h, count, RR_INT32, RR_SUM, seed, r, 0);
  T_CHECK(!cu_copy(in, h, count * es), "upload");
  const uint64_t ipc0 = rr__ipc_segments(), mop0 = rr__mop_segments();
  if (gather)
    T_OK(rr_all_gather(pg, in, out, count, RR_INT32));
  else
    T_OK(rr_all_reduce(pg, in, out, count, RR_INT32, RR_SUM));
  const uint64_t ipc = rr__ipc_segments() - ipc0, mop = rr__mop_segments() - mop0;
  const char *got = mop ? "memops" : ipc ? "hosted" : "staged";
  char what[96];
  snprintf(what, sizeof what, "%s of %zu bytes", gather ? "all_gather" : "all_reduce", total * es);
  T_CHECK(!strcmp(got, want) && !(ipc && mop),
          "%s: took %s (%llu host-handed, %llu stream-handed "
          "segments), want %s",
          what, got, (unsigned long long)ipc, (unsigned long long)mop, want);
  T_CHECK(!cu_copy(h, out, total * es), "download");
  size_t wrong = 0;
  if (!gather) {
    wrong = t_check_reduced(h, count, RR_INT32, RR_SUM, seed, n, 0, what);
  } else {
    int32_t *w = t_alloc(count * es);
    for (int j = 0; j < n; j++) {
      t_fill(w, count, RR_INT32, RR_SUM, seed, j, 0);
      for (size_t i = 0; i < count; i++) wrong += h[(size_t)j * count + i] != w[i];
    }
    free(w);
  }
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  printf("forms: rank %d: %s: %s\n", r, what, got);
  C_OK(free(in));
  C_OK(free(out));
  free(h);
  return 0;
}

static int forms_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  /* all_reduce: bytes = count x 4; all_gather: count x 4 x 2 ranks. Bounds 4096, 262144. */
  if (forms_case(pg, 0, 1024, "staged") || forms_case(pg, 0, 1025, "hosted") ||
      forms_case(pg, 0, 65535, "hosted") || forms_case(pg, 0, 65536, "memops") ||
      forms_case(pg, 1, 512, "staged") || forms_case(pg, 1, 513, "hosted") ||
      forms_case(pg, 1, 32768, "memops"))
    return 1;
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

int main(int argc, char **argv) {
  g_fake = cu_setup(&argc, &argv);
  const char *what = argc > 1 ? argv[1] : "rules";
  if (!strcmp(what, "layout")) return test_layout(); /* arithmetic only: no CUDA */
  if (!rr__cuda_built() && !g_fake)
    return printf("skipped: no CUDA device (this build has no CUDA; run with --fake)\n"), SKIP;
  if (!have_device_forked())
    return printf("skipped: no CUDA device (the CUDA runtime found no usable driver or GPU)\n"),
           SKIP;
  g_page = (size_t)sysconf(_SC_PAGESIZE);
  g_sh = mmap(NULL, g_page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_sh == MAP_FAILED) return perror("mmap"), 1;
  if (!strcmp(what, "rules")) {
    fflush(NULL);
    pid_t p = fork(); /* the parent stays free of CUDA */
    if (p == 0) {
      int rc = test_rules();
      fflush(NULL);
      _exit(rc);
    }
    int status = 0;
    waitpid(p, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  if (!strcmp(what, "pingpong")) return t_run_all(2, pingpong_rank, NULL, 120, "pingpong");
  if (!strcmp(what, "spin")) {
    if (!g_fake)
      return printf("skipped: the spin case plants a design the fake must catch\n"), SKIP;
    return t_run_all(2, spin_rank, NULL, 120, "spin");
  }
  if (!strcmp(what, "handoff")) {
    if (!g_fake) return printf("skipped: the handoff case takes memops from one rank\n"), SKIP;
    return t_run_all(2, handoff_rank, NULL, 60, "handoff");
  }
  if (!strcmp(what, "early")) {
    if (!g_fake) return printf("skipped: the early case kills a rank\n"), SKIP;
    /* Whether rank 0's lane opens rank 1's slots before or after the kill is a race (the
     * open comes after it in about one round of 30 here): rounds (about 70 ms each) for
     * EARLY_S, every one RR_EPEER (or no verdict). */
    int seen[3] = {0, 0, 0}, k = 0;
    for (const double end = t_now() + EARLY_S; k < EARLY_ROUNDS && t_now() < end; k++) {
      int codes[2], sigs[2];
      atomic_store(&g_sh->launched, 0);
      atomic_store(&g_sh->phase, 0);
      atomic_store(&g_sh->victim, 0);
      if (t_run(2, early_rank, NULL, NULL, 60, codes, sigs)) return 1;
      const int c = codes[0];
      if (sigs[0] || (c != 0 && c != EARLY_OPEN && c != EARLY_NONE))
        return fprintf(stderr, "early: round %d: rank 0 failed\n", k), 1;
      if (sigs[1] != SIGKILL)
        return fprintf(stderr, "early: round %d: rank 1 was not killed\n", k), 1;
      seen[c == EARLY_OPEN ? 1 : c == EARLY_NONE ? 2 : 0]++;
    }
    printf(
        "early: %d rounds: RR_EPEER from the failed open %d, seen before it %d, the send "
        "done before the kill %d\n",
        EARLY_ROUNDS, seen[1], seen[0], seen[2]);
    return 0;
  }
  if (!strcmp(what, "freeclose")) {
    if (!g_fake) return printf("skipped: the freeclose case counts the fake's frees\n"), SKIP;
    return t_run_all(2, freeclose_rank, NULL, 60, "freeclose");
  }
  if (!strcmp(what, "forms")) {
    if (!g_fake) return printf("skipped: the forms case counts the fake's segments\n"), SKIP;
    return t_run_all(2, forms_rank, NULL, 60, "forms");
  }
  fprintf(stderr,
          "usage: test_cuda_memops [--fake] "
          "rules|pingpong|spin|handoff|early|freeclose|forms|layout\n");
  return 2;
}
