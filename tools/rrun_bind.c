/* --bind-to: which CPUs each worker of a node gets, from the CPUs rrun may run on and where
 * they sit. Pure planning (no system calls), so tests/test_rrun_bind.c can try any machine's
 * shape; rrun_workers.c reads the real one.
 *
 * Why bind at all: a worker the kernel moves onto its peer's core turns a 1 us hand-off into
 * a wait for the scheduler, and that is what made small-message latency differ between
 * launches (docs/performance.md, section 10).
 *
 * Two orders over the C CPUs, both by package and then core (a core is known by the lowest
 * CPU among its hyperthreads):
 *   - by core: every CPU of the first core, then of the second, ...; slice's shares are runs
 *     of whole cores in this order, so a worker's threads stay on its cores' siblings;
 *   - thread first: the first hyperthread of every core, then the second of every core, ...;
 *     a worker that gets one CPU gets the k-th in this order, so that workers fill physical
 *     cores before any two share one.
 *
 * slice (the default), n workers, P cores:
 *   n <= P       worker k gets cores [kP/n, (k+1)P/n) with all their CPUs;
 *   P < n <= C   worker k gets the k-th CPU, thread first;
 *   n > C        the (k mod C)-th CPU, thread first, when C divides n; otherwise nobody is
 *                bound: pinned, some CPUs would carry one worker more than others for the
 *                whole run, where the scheduler evens them out over time.
 * core: the (k mod C)-th CPU, thread first, whatever n (asked for by name).
 */
#include <stdlib.h>
#include <string.h>

#include "rrun.h"

static int place_cmp(const void *a, const void *b) {
  const rr__cpu_place *x = a, *y = b;
  if (x->package != y->package) return x->package < y->package ? -1 : 1;
  if (x->core != y->core) return x->core < y->core ? -1 : 1;
  return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

/* The k-th CPU (0 <= k < count) in thread-first order of the by-core sorted array s, whose
 * cores start at first[0..ncores) (first[ncores] == count). */
static int thread_first(const rr__cpu_place *s, const int *first, int ncores, int k) {
  for (int t = 0;; t++) {
    for (int c = 0; c < ncores; c++) {
      if (first[c] + t < first[c + 1] && k-- == 0) return s[first[c] + t].cpu;
    }
  }
}

int rr__bind_share(const rr__cpu_place *cpus, int count, int mode, int nproc, int local_rank,
                   int *out) {
  if (mode == RRUN_BIND_NONE || count < 1 || nproc < 1 || local_rank < 0) return 0;
  rr__cpu_place *s = malloc((size_t)count * sizeof *s);
  int *first = malloc(((size_t)count + 1) * sizeof *first);
  int n = 0, ncores = 0;
  if (!s || !first) goto done;
  memcpy(s, cpus, (size_t)count * sizeof *s);
  for (int i = 0; i < count; i++) {
    if (s[i].core < 0) s[i].core = s[i].cpu; /* unknown: a core of its own */
  }
  qsort(s, (size_t)count, sizeof *s, place_cmp);
  for (int i = 0; i < count; i++) {
    if (i == 0 || s[i].package != s[i - 1].package || s[i].core != s[i - 1].core)
      first[ncores++] = i;
  }
  first[ncores] = count;
  int k = local_rank;
  if (mode == RRUN_BIND_SLICE && nproc <= ncores) {
    k %= nproc;
    for (int i = first[(long)k * ncores / nproc]; i < first[(long)(k + 1) * ncores / nproc]; i++)
      out[n++] = s[i].cpu;
  } else if (mode == RRUN_BIND_CORE || nproc <= count || nproc % count == 0) {
    out[n++] = thread_first(s, first, ncores, k % count);
  }
done:
  free(s);
  free(first);
  return n;
}
