/* The smallest complete ringreduce program, and the one docs/ring.md traces: every rank
 * holds 8 numbers (10 * rank + i), they all-reduce them, and every rank prints the sum.
 *
 *   RR_ALGO=ring RR_TRACE=1 build/bin/rrun --nproc-per-node 4 build/bin/ring_demo
 *
 * RR_TRACE=1 prints one line per rank per ring step: which chunk went where, and the values
 * that were added. (Without RR_ALGO=ring, 8 numbers are few enough that recursive doubling
 * is used instead; its rounds are traced too.) */
#include <stdio.h>

#include "ringreduce/ringreduce.h"

int main(void) {
  rr_pg *pg;
  if (rr_init_process_group(&pg, NULL) != RR_OK) { /* env://, as set by rrun */
    fprintf(stderr, "%s\n", rr_last_error());
    return 1;
  }
  int rank = rr_get_rank(pg);
  float x[8];
  for (int i = 0; i < 8; i++) x[i] = (float)(10 * rank + i);
  if (rr_all_reduce(pg, x, x, 8, RR_FLOAT32, RR_SUM) != RR_OK) {
    fprintf(stderr, "%s\n", rr_last_error());
    return 1;
  }
  printf("rank %d:", rank);
  for (int i = 0; i < 8; i++) printf(" %g", x[i]);
  printf("\n");
  return rr_destroy_process_group(pg) == RR_OK ? 0 : 1;
}
