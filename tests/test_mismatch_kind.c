/* Two ranks in different collectives (issue 38): one broadcasts, the other all-reduces the
 * same count. Each rank's message must say what the other is really doing, on either side
 * of the call that meets the other's header first, and with either rank as the root.
 *
 *   test_mismatch_kind <bcast_all_reduce>
 *
 * Before the fix, the broadcast's root waited for the completion notice of the broadcast,
 * read the all_reduce's header there, and reported "rank 0 called completion #0 (...)":
 * its own call shown as the notice it was waiting for. */
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

typedef struct mk_case {
  int root;  /* the broadcast's root */
  int bcast; /* the rank that broadcasts; the other all-reduces */
} mk_case;

static int bcast_all_reduce_rank(int rank, void *arg) {
  const mk_case *mc = arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float x[100];
  for (int i = 0; i < 100; i++) x[i] = (float)i;
  /* Call #0 agrees everywhere, so the mismatch is call #1 on both ranks. */
  T_OK(rr_barrier(pg));
  double t0 = t_now();
  int st = rank == mc->bcast ? rr_broadcast(pg, x, x, 100, RR_FLOAT32, mc->root)
                             : rr_all_reduce(pg, x, x, 100, RR_FLOAT32, RR_SUM);
  double dt = t_now() - t0;
  const char *e = rr_last_error();
  printf("rank %d (%s, root %d): %s\n", rank, rank == mc->bcast ? "broadcast" : "all_reduce",
         mc->root, e);
  fflush(stdout);
  T_CHECK(st == RR_EMISMATCH, "status %s, want RR_EMISMATCH: %s", rr_status_name(st), e);
  char want[160];
  const int other = 1 - mc->bcast;
  /* Both calls, each said of the rank that made it, whichever rank tells. */
  snprintf(want, sizeof want, "rank %d called broadcast #1 (100 x float, root %d)", mc->bcast,
           mc->root);
  T_HAS(e, want);
  snprintf(want, sizeof want, "rank %d called all_reduce #1 (100 x float, sum,", other);
  T_HAS(e, want);
  /* Where the call was ("broadcast: completion notice from rank 1") may name the notice;
   * the calls compared after it may not. */
  const char *calls = strstr(e, "mismatched calls:");
  T_CHECK(calls && !strstr(calls, "completion"), "the calls compared name a completion notice: %s",
          e);
  T_CHECK(dt < 5.0, "took %.1f s to report the mismatch", dt);
  rr_destroy_process_group(pg);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "bcast_all_reduce") != 0) {
    fprintf(stderr, "usage: %s bcast_all_reduce\n", argv[0]);
    return 2;
  }
  t_seed_announce(argv[1]);
  static const mk_case cases[] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "rank %d broadcasts from root %d", cases[i].bcast, cases[i].root);
    printf("%s\n", what);
    fflush(stdout);
    bad |= t_run_all(2, bcast_all_reduce_rank, (void *)&cases[i], 60, what);
  }
  if (!bad) printf("bcast_all_reduce: ok\n");
  return bad;
}
