/* One rank of tests/netns_partition.sh (issue 26, docs/elastic.md "Why no two groups"): run
 * inside a network namespace that the script later cuts off from the others (partitioned,
 * not killed). env:// as usual (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, RR_TIMEOUT).
 *
 *   netns_shrink_rank
 *
 * Loops over exactly checked int32 all-reduces until one fails (the cut), then does what an
 * elastic program does: rr_pg_revoke, rr_pg_shrink. With a group it checks it (members in
 * the old order, this rank at its old place, the same member list on every member by an
 * all_gather, an exact integer all_reduce, a barrier). One line per event on stdout, with
 * the wall-clock time the script compares with the moment of the cut:
 *   "t=<unix s> rank R ok <iteration>"               every 1000th verified all-reduce
 *   "t=<unix s> rank R failed <status>: <msg>"       the loop's call that failed
 *   "t=<unix s> rank R group <k>: <old ranks...>"    shrink gave a group, every check held
 *                                                    (exit 0)
 *   "t=<unix s> rank R noshrink <status>: <msg>"     shrink failed (exit 5)
 *   "t=<unix s> rank R destroy <status> <seconds>"   the old group's destroy
 *   "t=<unix s> rank R WRONG <what>"                 wrong data or a broken group (exit 4)
 * Exit 3: anything else (the job did not start, the loop never failed). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/harness.h"

static double wall(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0; /* the script then sees time 0 */
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int say(int rank, const char *what, int st) {
  printf("t=%.3f rank %d %s %s: %s\n", wall(), rank, what, rr_status_name(st), rr_last_error());
  fflush(stdout);
  return st;
}

/* A wrong result or a broken group: the one outcome never allowed (exit 4). */
static int wrong(int rank, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("t=%.3f rank %d WRONG ", wall(), rank);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  return 4;
}

#define N 4096

/* The new group, checked; 0 when every check held, 4 otherwise (the reason printed). */
static int use_group(int rank, rr_pg *np) {
  int k = rr_get_world_size(np), me = rr_get_rank(np);
  int mine[64], all[64 * 64];
  if (k < 1 || k > 64) return wrong(rank, "group of %d", k);
  for (int i = 0; i < k; i++) mine[i] = rr_get_global_rank(np, i);
  for (int i = 0; i + 1 < k; i++)
    if (mine[i] >= mine[i + 1]) return wrong(rank, "members out of the old order");
  if (mine[me] != rank) return wrong(rank, "new rank %d holds old rank %d", me, mine[me]);
  int st = rr_all_gather(np, mine, all, (size_t)k, RR_INT32);
  if (st != RR_OK) return say(rank, "WRONG all_gather on the new group", st), 4;
  for (int r = 0; r < k; r++)
    if (memcmp(all + r * k, mine, (size_t)k * sizeof *mine))
      return wrong(rank, "new rank %d lists other members", r);
  static int32_t x[N];
  int32_t sum = 0;
  for (int i = 0; i < k; i++) sum += mine[i] + 1;
  for (int i = 0; i < N; i++) x[i] = (rank + 1) * (i % 97 + 1);
  if ((st = rr_all_reduce(np, x, x, N, RR_INT32, RR_SUM)) != RR_OK)
    return say(rank, "WRONG all_reduce on the new group", st), 4;
  for (int i = 0; i < N; i++)
    if (x[i] != sum * (i % 97 + 1))
      return wrong(rank, "element %d: %d, not %d", i, (int)x[i], (int)(sum * (i % 97 + 1)));
  if ((st = rr_barrier(np)) != RR_OK) return say(rank, "WRONG barrier on the new group", st), 4;
  printf("t=%.3f rank %d group %d:", wall(), rank, k);
  for (int i = 0; i < k; i++) printf(" %d", mine[i]);
  printf("\n");
  fflush(stdout);
  return 0;
}

int main(void) {
  rr_pg *pg;
  int st = rr_init_process_group(&pg, NULL);
  if (st != RR_OK) return say(-1, "init", st), 3;
  int rank = rr_get_rank(pg), w = rr_get_world_size(pg);
  t_rank = rank;
  static int32_t x[N];
  long it;
  for (it = 0; st == RR_OK && it < 100000000; it++) {
    for (int i = 0; i < N; i++) x[i] = rank + (int32_t)(it % 1000) + i;
    st = rr_all_reduce(pg, x, x, N, RR_INT32, RR_SUM);
    if (st != RR_OK) break;
    for (int i = 0; i < N; i++)
      if (x[i] != w * (w - 1) / 2 + w * ((int32_t)(it % 1000) + i))
        return wrong(rank, "all_reduce %ld element %d", it, i);
    if (it % 1000 == 0) {
      printf("t=%.3f rank %d ok %ld\n", wall(), rank, it);
      fflush(stdout);
    }
  }
  if (st == RR_OK) {
    printf("rank %d: the loop never failed\n", rank);
    return 3;
  }
  say(rank, "failed", st);
  (void)rr_pg_revoke(pg);
  rr_pg *np = NULL;
  st = rr_pg_shrink(pg, 0, &np);
  int code;
  if (st == RR_OK) {
    code = use_group(rank, np);
    (void)rr_destroy_process_group(np);
  } else {
    say(rank, "noshrink", st);
    code = np ? 4 : 5;
  }
  double t0 = wall();
  st = rr_destroy_process_group(pg);
  printf("t=%.3f rank %d destroy %s %.3f\n", wall(), rank, rr_status_name(st), wall() - t0);
  return code;
}
