/* A rank killed in the middle of device all-reduces through CUDA IPC (issue 24 item 2,
 * docs/cuda.md "The CUDA IPC path", "A dead peer").
 *
 *   test_cuda_ipc_kill [--fake]
 *
 * World 3 on one host: every rank loops over 4 MiB float32 calls on device buffers, in turn
 * an all_reduce, a broadcast (a chain: the middle rank forwards from its destination), a
 * reduce (a chain: the middle rank forwards from its device landing slots), a gather, a
 * scatter and an all_to_all, all through CUDA IPC (the first call checks that segments
 * did); once all three are
 * inside the loop, rank 1 is SIGKILLed at a random moment (RR_TEST_SEED). The survivors must
 * fail with RR_EPEER naming rank 1, within a bound far below RR_TIMEOUT (the death is seen on
 * the sockets, not by a timeout), then rr_destroy_process_group must return and the process
 * exit 0. What this guards against: a survivor's device work waiting for something only the
 * dead rank could complete (an event it recorded): then the call, its final wait or the
 * destroy (cudaFree waits for the device) never returns. On the fake (tests/fake_cuda/) an
 * interprocess event recorded by a process that dies before that work ran never completes,
 * as on a GPU; whether the real runtime does the same is for the GPU run (cuda_ipc_kill_w3).
 *
 * With RR_TEST_KILL_RING=1 (cudafake.memop_kill_w3, ...1gpu) the loop keeps to the kinds whose
 * segments the GPUs' streams hand over by stream memory operations: the kill then leaves the
 * survivors' streams waiting for flag words rank 1 will never write, and the host must release
 * them (transport/cuda_ipc.h) for the call, its final wait and the destroy to return.
 *
 * With RR_TRANSPORT=tcp (cudafake.piped_kill_w3) the all-reduces take the piped path instead
 * (ring/pipe_dev.c: pinned slots over sockets; the first call checks it) and the other kinds
 * are staged: the same must hold there.
 *
 * Its own program, not a case of test_cuda.c: that file is already its longest. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ring/coll.h" /* rr__piped_segments */
#include "transport/cuda_ipc.h"
#include "tests/cuda_harness.h"

#define SKIP 77
#define WORLD 3
#define VICTIM 1
#define COUNT ((size_t)1 << 20) /* floats: 4 MiB */
/* How long the survivors may take to report, after the kill (RR_TIMEOUT is 120 s here). */
#define REPORT_S 30.0
/* How long the whole run may take before the children are killed (a hang); RR_TEST_RUN_S
 * shortens it (to show a hang quickly). */
#define RUN_S 90.0

typedef struct kcase {
  double kill_after, killed_at;
  int fake;           /* on the fake: its queues can be looked at */
  char ready_dir[64]; /* each rank drops a file here once it is inside the loop */
} kcase;

static int rank_fn(int rank, void *arg) {
  kcase *kc = arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int dev = -1;
  T_OK(rr__cuda_pick_device(-1, rank, &dev));
  C_OK(set_device(dev));
  void *x = NULL, *y = NULL; /* y: WORLD blocks of COUNT (gather's, scatter's root buffer) */
  C_OK(malloc(&x, COUNT * sizeof(float)));
  C_OK(malloc(&y, WORLD * COUNT * sizeof(float)));
  C_OK(memset_async(x, 0, COUNT * sizeof(float), NULL));
  C_OK(memset_async(y, 0, WORLD * COUNT * sizeof(float), NULL));
  C_OK(stream_sync(NULL));
  /* One call before the kill may come: it must have gone through CUDA IPC (or, over TCP, the
   * piped path), or this test would check the staged path. */
  const char *tp = getenv("RR_TRANSPORT");
  const int piped = tp && !strcmp(tp, "tcp");
  uint64_t before = piped ? rr__piped_segments() : (rr__ipc_segments() + rr__mop_segments());
  const uint64_t mop_before = rr__mop_segments();
  T_OK(rr_all_reduce(pg, x, x, COUNT, RR_FLOAT32, RR_SUM));
  T_CHECK((piped ? rr__piped_segments() : (rr__ipc_segments() + rr__mop_segments())) > before,
          "the all-reduce did not go through %s", piped ? "the piped path" : "CUDA IPC");
  /* RR_TEST_EXPECT_MEMOPS=1: and its segments by stream memory operations. */
  const char *em = getenv("RR_TEST_EXPECT_MEMOPS");
  if (em && !strcmp(em, "1"))
    T_CHECK(rr__mop_segments() > mop_before, "the all-reduce did not use stream memory operations");
  T_CHECK(!t_ready_mark(kc->ready_dir, rank), "cannot mark rank %d ready in %s", rank,
          kc->ready_dir);
  int st;
  long calls = 0;
  /* RR_TEST_KILL_RING=1: only the kinds whose segments the streams hand over by stream
   * memory operations (all_reduce, broadcast, reduce), so the kill lands in one of them. */
  const char *kr = getenv("RR_TEST_KILL_RING");
  const int kinds = kr && !strcmp(kr, "1") ? 3 : 6;
  do {
    const int root = (int)(calls / kinds % WORLD);
    switch (calls % kinds) {
      case 0:
        st = rr_all_reduce(pg, x, x, COUNT, RR_FLOAT32, RR_SUM);
        break;
      case 1:
        st = rr_broadcast(pg, x, x, COUNT, RR_FLOAT32, root);
        break;
      case 2:
        st = rr_reduce(pg, x, x, COUNT, RR_FLOAT32, RR_SUM, root);
        break;
      case 3:
        st = rr_gather(pg, x, y, COUNT, RR_FLOAT32, root);
        break;
      case 4:
        st = rr_scatter(pg, y, x, COUNT, RR_FLOAT32, root);
        break;
      default:
        st = rr_all_to_all(pg, x, y, COUNT / WORLD, RR_FLOAT32);
        break;
    }
    calls++;
  } while (st == RR_OK);
  const char *e = rr_last_error();
  printf("rank %d: call %ld failed: %s: %s\n", rank, calls, rr_status_name(st), e);
  fflush(stdout);
  T_CHECK(st == RR_EPEER, "status %s: %s", rr_status_name(st), e);
  T_CHECK(strstr(e, "lost rank") || strstr(e, "closed by the peer") || strstr(e, "reset"),
          "the message does not say the peer is gone: %s", e);
  T_HAS(e, "rank 1");
  /* The failed call's device work is over when it returns: nothing queued for it may still
   * write the buffers the caller now owns again (DDP reuses them on the next group). Only the
   * fake can say what is queued. */
  if (kc->fake) {
    int q = rr_fake_cuda_pending();
    T_CHECK(q == 0, "%d operations were still queued after the failed call returned", q);
  }
  rr_destroy_process_group(pg);
  printf("rank %d: destroyed\n", rank);
  fflush(stdout);
  /* The device buffer is not freed: if the device were still blocked, cudaFree would wait
   * for it, and the process must be able to exit regardless. */
  return 0;
}

static void kill_victim(const int *pids, int n, void *arg) {
  kcase *kc = arg;
  /* Wait until every rank is looping (slow under load), then a random moment. */
  t_ready_wait(kc->ready_dir, n, 60);
  usleep((useconds_t)(kc->kill_after * 1e6));
  kill(pids[VICTIM], SIGKILL);
  kc->killed_at = t_now();
}

int main(int argc, char **argv) {
  int fake = cu_setup(&argc, &argv);
  if (!rr__cuda_built() && !fake) {
    printf("skipped: no CUDA device (this build has no CUDA; run with --fake)\n");
    return SKIP;
  }
  if (!have_device_forked()) {
    printf("skipped: no CUDA device (the CUDA runtime found no usable driver or GPU)\n");
    return SKIP;
  }
  t_seed_announce("cuda_ipc_kill");
  kcase kc = {.fake = fake, .kill_after = 0.05 + (double)(t_bits(t_seed(), 24, 2) % 500) / 1000.0};
  snprintf(kc.ready_dir, sizeof kc.ready_dir, "/tmp/rr-ipckill-XXXXXX");
  if (!mkdtemp(kc.ready_dir)) {
    perror("mkdtemp");
    return 1;
  }
  int codes[WORLD], sigs[WORLD];
  double t0 = t_now();
  const char *rs = getenv("RR_TEST_RUN_S");
  double run_s = rs && atof(rs) > 0 ? atof(rs) : RUN_S;
  int rc = t_run(WORLD, rank_fn, &kc, kill_victim, run_s, codes, sigs);
  t_ready_remove(kc.ready_dir, WORLD);
  if (rc) {
    fprintf(stderr,
            "cuda_ipc_kill: the ranks had not all exited %.1f s after the start (rank %d "
            "killed %.2f s into the loop): survivors hung\n",
            t_now() - t0, VICTIM, kc.kill_after);
    return 1;
  }
  int bad = 0;
  double took = t_now() - kc.killed_at;
  printf("cuda_ipc_kill: rank %d killed %.2f s into the loop; survivors done %.2f s later\n",
         VICTIM, kc.kill_after, took);
  for (int r = 0; r < WORLD; r++)
    if (r != VICTIM && (codes[r] != 0 || sigs[r] != 0)) {
      fprintf(stderr, "survivor rank %d: exit %d signal %d\n", r, codes[r], sigs[r]);
      bad = 1;
    }
  if (sigs[VICTIM] != SIGKILL) bad = 1, fprintf(stderr, "rank %d was not killed\n", VICTIM);
  if (took > REPORT_S) {
    fprintf(stderr, "survivors took %.1f s after the kill (at most %.0f s)\n", took, REPORT_S);
    bad = 1;
  }
  return bad;
}
