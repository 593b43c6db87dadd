/* The smallest complete ringreduce program, and the one docs/ring.md traces: every rank
 * holds 8 numbers (10 * rank + i), they all-reduce them, and every rank prints the sum.
 *
 *   RR_ALGO=ring RR_TRACE=1 build/bin/rrun --nproc-per-node 4 build/bin/ring_demo
 *
 * RR_TRACE=1 prints one line per rank per ring step: which chunk went where, and the values
 * that were added. (Without RR_ALGO=ring, 8 numbers are few enough that recursive doubling
 * is used instead; its rounds are traced too.) RR_TRACE=ring.jsonl writes the same steps as
 * JSON lines, which tools/ringreduce-view turns into an animated page.
 *
 * Optional arguments pick another collective, so that every algorithm can be traced:
 *
 *   ring_demo [all_reduce|reduce_scatter|all_gather|broadcast|reduce [count [root]]]
 *
 * Element i of rank r's input is 10 * r + i in every case (reduce_scatter reads n * count
 * of them), or random with RR_DEMO_SEED (below); each rank prints what it received ("rank r: ...";
 * a reduce only on the root). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringreduce/ringreduce.h"

static int fail(void) {
  fprintf(stderr, "%s\n", rr_last_error());
  return 1;
}

/* RR_DEMO_SEED=<n> (the tests' random data): element i of rank r is an integer 0..99 that
 * depends only on n, r and i (a 32-bit mix; tests/test_view_*.sh recompute it), so the sums
 * stay exact in float32 and a checker needs no copy of the inputs. */
static float demo_random(unsigned long seed, int rank, size_t i) {
  uint32_t h = (uint32_t)seed * 2654435761u + (uint32_t)rank * 40503u + (uint32_t)i * 2246822519u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return (float)(h % 100u);
}

int main(int argc, char **argv) {
  const char *coll = argc > 1 ? argv[1] : "all_reduce";
  const long count = argc > 2 ? atol(argv[2]) : 8;
  const int root = argc > 3 ? atoi(argv[3]) : 0;
  if (count < 1 || count > 1 << 20) {
    fprintf(stderr,
            "usage: %s [all_reduce|reduce_scatter|all_gather|broadcast|reduce "
            "[count [root]]]\n",
            argv[0]);
    return 2;
  }
  rr_pg *pg;
  if (rr_init_process_group(&pg, NULL) != RR_OK) return fail(); /* env://, as set by rrun */
  const int rank = rr_get_rank(pg), n = rr_get_world_size(pg);
  const size_t c = (size_t)count, nin = strcmp(coll, "reduce_scatter") ? c : c * (size_t)n;
  const size_t nout = strcmp(coll, "all_gather") ? c : c * (size_t)n;
  float *x = calloc(nin, sizeof *x), *y = calloc(nout, sizeof *y);
  if (!x || !y) return 1;
  const char *seed = getenv("RR_DEMO_SEED");
  for (size_t i = 0; i < nin; i++)
    x[i] = seed ? demo_random(strtoul(seed, NULL, 10), rank, i) : (float)(10 * rank) + (float)i;

  int st, show = 1;
  if (!strcmp(coll, "all_reduce")) {
    st = rr_all_reduce(pg, x, x, c, RR_FLOAT32, RR_SUM); /* in place, as docs/ring.md shows */
    memcpy(y, x, c * sizeof *x);
  } else if (!strcmp(coll, "reduce_scatter")) {
    st = rr_reduce_scatter(pg, x, y, c, RR_FLOAT32, RR_SUM);
  } else if (!strcmp(coll, "all_gather")) {
    st = rr_all_gather(pg, x, y, c, RR_FLOAT32);
  } else if (!strcmp(coll, "broadcast")) {
    st = rr_broadcast(pg, x, y, c, RR_FLOAT32, root);
  } else if (!strcmp(coll, "reduce")) {
    st = rr_reduce(pg, x, y, c, RR_FLOAT32, RR_SUM, root);
    show = rank == root;
  } else {
    fprintf(stderr, "%s: unknown collective '%s'\n", argv[0], coll);
    return 2;
  }
  if (st != RR_OK) return fail();
  if (show) {
    printf("rank %d:", rank);
    for (size_t i = 0; i < nout; i++) printf(" %g", y[i]);
    printf("\n");
  }
  free(x);
  free(y);
  return rr_destroy_process_group(pg) == RR_OK ? 0 : 1;
}
