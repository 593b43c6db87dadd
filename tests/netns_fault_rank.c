/* One rank of the network-fault job that tests/netns_faults.sh runs inside a network
 * namespace (env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, RR_TIMEOUT).
 *
 *   netns_fault_rank <iterations> <count> [all_reduce|send_exit]
 *
 * Runs <iterations> rounds of all_reduce (int32 sum, <count> elements), broadcast (root
 * rotating) and all_gather, verifying every result exactly; with "all_reduce", a round is
 * the all_reduce alone (so a kill lands inside an all-reduce). With "send_exit" the last rank
 * sends <count> int32 to every other rank, destroys its group and exits at once, while its
 * bytes (and its goodbye) may still be on a slow link: the others must receive every one of
 * them ("ok 0", then "done" whatever their destroy says). One line per event on
 * stdout, with a wall-clock timestamp the script compares with the moment of the fault:
 *   "t=<unix seconds> rank R ok <iteration>"          every 50th completed, verified round
 *   "t=<unix seconds> rank R ERROR <status>: <msg>"   a call failed (exit 3), followed by
 *   "t=<unix seconds> rank R destroy <status> <s>"    rr_destroy_process_group's status and
 *                                                     how long it took (seconds)
 *   "t=<unix seconds> rank R WRONG <what>"            a call returned RR_OK with wrong data
 *                                                     (exit 4: the one outcome never allowed)
 *   "t=<unix seconds> rank R done"                    every round verified (exit 0) */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/harness.h"

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(int rank, int st, rr_pg *pg) {
  printf("t=%.3f rank %d ERROR %s: %s\n", wall(), rank, rr_status_name(st), rr_last_error());
  fflush(stdout);
  if (pg) {
    double t0 = wall();
    int dst = rr_destroy_process_group(pg);
    printf("t=%.3f rank %d destroy %s %.3f\n", wall(), rank, rr_status_name(dst), wall() - t0);
    fflush(stdout);
  }
  return 3;
}

/* "send_exit": the last rank sends, destroys its group and exits; the others receive. */
static int sender_exits(rr_pg *pg, int rank, int w, int32_t *a, size_t n, uint64_t seed) {
  int st, last = w - 1;
  if (rank == last) {
    for (int r = 0; r < last; r++) {
      t_fill(a, n, RR_INT32, RR_SUM, seed, r, 0);
      if ((st = rr_send(pg, a, n, RR_INT32, r)) != RR_OK) return fail(rank, st, pg);
    }
    /* Its goodbye goes on the control socket behind nothing, but through the same slow
     * link as the data: the others may see the process gone before they read it. */
    if ((st = rr_destroy_process_group(pg)) != RR_OK) return fail(rank, st, NULL);
    printf("t=%.3f rank %d sent, exiting\n", wall(), rank);
    fflush(stdout);
    return 0; /* the kernel sends what its closed sockets still hold */
  }
  memset(a, 0, n * sizeof *a);
  if ((st = rr_recv(pg, a, n, RR_INT32, last)) != RR_OK) return fail(rank, st, pg);
  if (t_check_copied(a, n, RR_INT32, RR_SUM, seed, rank, 0, "recv")) {
    printf("t=%.3f rank %d WRONG recv\n", wall(), rank);
    return 4;
  }
  printf("t=%.3f rank %d ok 0\n", wall(), rank);
  fflush(stdout);
  st = rr_destroy_process_group(pg); /* may well report the silent leave: not the point */
  printf("t=%.3f rank %d destroy %s\n", wall(), rank, rr_status_name(st));
  printf("t=%.3f rank %d done\n", wall(), rank);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4 ||
      (argc == 4 && strcmp(argv[3], "all_reduce") != 0 && strcmp(argv[3], "send_exit") != 0)) {
    fprintf(stderr, "usage: %s <iterations> <count> [all_reduce|send_exit]\n", argv[0]);
    return 2;
  }
  int only_all_reduce = argc == 4 && !strcmp(argv[3], "all_reduce");
  int send_exit = argc == 4 && !strcmp(argv[3], "send_exit");
  long iters = atol(argv[1]);
  size_t n = (size_t)atol(argv[2]);
  rr_pg *pg;
  int st = rr_init_process_group(&pg, NULL);
  if (st != RR_OK) return fail(-1, st, NULL);
  int rank = rr_get_rank(pg), w = rr_get_world_size(pg);
  t_rank = rank;
  int32_t *a = malloc(n * sizeof *a), *g = malloc(n * (size_t)w * sizeof *g);
  if (!a || !g) return 1;
  uint64_t seed = t_seed();
  printf("t=%.3f rank %d ready (world %d)\n", wall(), rank, w);
  fflush(stdout);
  if (send_exit) return sender_exits(pg, rank, w, a, n, seed);
  for (long it = 0; it < iters; it++) {
    uint64_t s = t_bits(seed, 11, (uint64_t)it);
    t_fill(a, n, RR_INT32, RR_SUM, s, rank, 0);
    if ((st = rr_all_reduce(pg, a, a, n, RR_INT32, RR_SUM)) != RR_OK) return fail(rank, st, pg);
    if (t_check_reduced(a, n, RR_INT32, RR_SUM, s, w, 0, "all_reduce")) {
      printf("t=%.3f rank %d WRONG all_reduce in round %ld\n", wall(), rank, it);
      return 4;
    }
    if (!only_all_reduce) {
      int root = (int)(it % w);
      if (rank == root)
        t_fill(a, n, RR_INT32, RR_SUM, s, rank, 0);
      else
        memset(a, 0, n * sizeof *a);
      if ((st = rr_broadcast(pg, a, a, n, RR_INT32, root)) != RR_OK) return fail(rank, st, pg);
      if (t_check_copied(a, n, RR_INT32, RR_SUM, s, root, 0, "broadcast")) {
        printf("t=%.3f rank %d WRONG broadcast in round %ld\n", wall(), rank, it);
        return 4;
      }
      t_fill(a, n, RR_INT32, RR_SUM, s, rank, 0);
      if ((st = rr_all_gather(pg, a, g, n, RR_INT32)) != RR_OK) return fail(rank, st, pg);
      for (int r = 0; r < w; r++)
        if (t_check_copied(g + (size_t)r * n, n, RR_INT32, RR_SUM, s, r, 0, "all_gather")) {
          printf("t=%.3f rank %d WRONG all_gather in round %ld\n", wall(), rank, it);
          return 4;
        }
    }
    if (it % 50 == 0 || it == iters - 1) {
      printf("t=%.3f rank %d ok %ld\n", wall(), rank, it);
      fflush(stdout);
    }
  }
  st = rr_destroy_process_group(pg);
  if (st != RR_OK) return fail(rank, st, NULL);
  printf("t=%.3f rank %d done\n", wall(), rank);
  free(a);
  free(g);
  return 0;
}
