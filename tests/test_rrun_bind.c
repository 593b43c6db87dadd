/* rrun --bind-to's plan (tools/rrun_bind.c) on machines this one is not: hyperthreads
 * numbered both ways (siblings n apart, as Intel's usual numbering, or adjacent), two
 * packages, no topology at all, a taskset subset. Exact CPU lists for each shape, then a
 * sweep over random shapes checking the rules every plan must keep. A test binary of its own
 * (no ranks, no sockets): `test_rrun_bind`. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/rrun.h"

static int failures;

#define MAXC 64

/* Local rank k's plan as text, "0,4" (CPUs in the order given) or "-" when unbound. */
static const char *plan(const rr__cpu_place *cpus, int count, int mode, int n, int k) {
  static char buf[512];
  int out[MAXC];
  int got = rr__bind_share(cpus, count, mode, n, k, out);
  if (got == 0) return "-";
  buf[0] = '\0';
  for (int i = 0; i < got; i++) {
    size_t len = strlen(buf);
    snprintf(buf + len, sizeof buf - len, "%s%d", i ? "," : "", out[i]);
  }
  return buf;
}

/* want: the plans of local ranks 0..n-1 joined by " ". */
static void expect(const char *shape, const rr__cpu_place *cpus, int count, int mode, int n,
                   const char *want) {
  char got[2048] = "";
  for (int k = 0; k < n; k++) {
    size_t len = strlen(got);
    snprintf(got + len, sizeof got - len, "%s%s", k ? " " : "", plan(cpus, count, mode, n, k));
  }
  if (strcmp(got, want) != 0) {
    fprintf(stderr, "FAIL %s, %s, n=%d: got '%s', want '%s'\n", shape,
            mode == RRUN_BIND_CORE    ? "core"
            : mode == RRUN_BIND_SLICE ? "slice"
                                      : "none",
            n, got, want);
    failures++;
  }
}

/* cores x threads on `packages` packages; sibling numbering: 0 = n apart (cpu c + t*C/threads),
 * 1 = adjacent (cpu c*threads + t). */
static int shape(rr__cpu_place *p, int packages, int cores, int threads, int adjacent) {
  int total = packages * cores * threads, i = 0;
  for (int cpu = 0; cpu < total; cpu++) {
    int core_index = adjacent ? cpu / threads : cpu % (packages * cores);
    int lowest = adjacent ? core_index * threads : core_index;
    p[i++] = (rr__cpu_place){cpu, core_index / cores, lowest};
  }
  return total;
}

static void fixed_shapes(void) {
  rr__cpu_place p[MAXC], sub[MAXC];
  const int S = RRUN_BIND_SLICE, C = RRUN_BIND_CORE;

  /* 4 cores x 2 threads, siblings 4 apart: 0/4, 1/5, 2/6, 3/7. */
  int c = shape(p, 1, 4, 2, 0);
  const char *ht = "4 cores x 2 threads (siblings 4 apart)";
  expect(ht, p, c, C, 2, "0 1"); /* two physical cores, not 0 and its sibling 4 */
  expect(ht, p, c, C, 4, "0 1 2 3");
  expect(ht, p, c, C, 8, "0 1 2 3 4 5 6 7");
  expect(ht, p, c, C, 9, "0 1 2 3 4 5 6 7 0"); /* core binds whatever n */
  expect(ht, p, c, S, 1, "0,4,1,5,2,6,3,7");
  expect(ht, p, c, S, 2, "0,4,1,5 2,6,3,7");
  expect(ht, p, c, S, 3, "0,4 1,5 2,6,3,7"); /* whole cores, never half of one */
  expect(ht, p, c, S, 4, "0,4 1,5 2,6 3,7");
  expect(ht, p, c, S, 5, "0 1 2 3 4"); /* more workers than cores: one CPU each */
  expect(ht, p, c, S, 8, "0 1 2 3 4 5 6 7");
  expect(ht, p, c, S, 16, "0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7");
  expect(ht, p, c, S, 12, "- - - - - - - - - - - -"); /* 8 does not divide 12: unbound */
  expect(ht, p, c, RRUN_BIND_NONE, 2, "- -");

  /* The same, siblings adjacent: 0/1, 2/3, 4/5, 6/7. */
  c = shape(p, 1, 4, 2, 1);
  const char *adj = "4 cores x 2 threads (siblings adjacent)";
  expect(adj, p, c, C, 2, "0 2");
  expect(adj, p, c, C, 8, "0 2 4 6 1 3 5 7");
  expect(adj, p, c, S, 2, "0,1,2,3 4,5,6,7");
  expect(adj, p, c, S, 3, "0,1 2,3 4,5,6,7");
  expect(adj, p, c, S, 6, "0 2 4 6 1 3");

  /* Two packages of 4 cores, no hyperthreads: shares follow the packages. */
  c = shape(p, 2, 4, 1, 0);
  const char *two = "2 packages x 4 cores";
  expect(two, p, c, S, 2, "0,1,2,3 4,5,6,7");
  expect(two, p, c, S, 4, "0,1 2,3 4,5 6,7");
  expect(two, p, c, C, 3, "0 1 2");

  /* Nothing known about the topology, as in this VM's 2 CPUs when sysfs says nothing. */
  rr__cpu_place bare[2] = {{0, -1, -1}, {1, -1, -1}};
  const char *none = "2 CPUs, no topology";
  expect(none, bare, 2, S, 1, "0,1");
  expect(none, bare, 2, S, 2, "0 1");
  expect(none, bare, 2, S, 3, "- - -");
  expect(none, bare, 2, S, 4, "0 1 0 1");
  expect(none, bare, 2, C, 3, "0 1 0");

  /* A taskset subset of the hyperthreaded shape, given out of order: CPUs 7, 2, 6, 3. */
  c = shape(p, 1, 4, 2, 0);
  sub[0] = p[7], sub[1] = p[2], sub[2] = p[6], sub[3] = p[3];
  const char *ts = "taskset 2,3,6,7 of 4x2";
  expect(ts, sub, 4, S, 2, "2,6 3,7");
  expect(ts, sub, 4, C, 2, "2 3");
  expect(ts, sub, 4, S, 3, "2 3 6");
}

/* Random shapes and subsets: every plan keeps the rules of rrun_bind.c's top comment. */
static void sweep(void) {
  unsigned seed = 12345;
  for (int trial = 0; trial < 400; trial++) {
    rr__cpu_place full[MAXC], p[MAXC];
    seed = seed * 1103515245u + 12345u;
    int packages = 1 + (int)(seed >> 16) % 2, cores = 1 + (int)(seed >> 8) % 8,
        threads = 1 + (int)(seed >> 20) % 2, adjacent = (int)(seed >> 4) & 1;
    int total = shape(full, packages, cores, threads, adjacent), count = 0;
    for (int i = 0; i < total; i++) { /* a random subset, never empty, in shuffled order */
      seed = seed * 1103515245u + 12345u;
      if ((seed >> 16) % 4 != 0 || (count == 0 && i == total - 1)) p[count++] = full[i];
    }
    for (int i = count - 1; i > 0; i--) {
      seed = seed * 1103515245u + 12345u;
      int j = (int)((seed >> 16) % (unsigned)(i + 1));
      rr__cpu_place t = p[i];
      p[i] = p[j], p[j] = t;
    }
    int ncores = 0;
    for (int i = 0; i < count; i++) {
      bool seen = false;
      for (int j = 0; j < i; j++) seen |= p[j].package == p[i].package && p[j].core == p[i].core;
      ncores += !seen;
    }
    for (int n = 1; n <= 2 * count + 1; n++) {
      int owner[1 << 10], bound = 0;
      memset(owner, -1, sizeof owner);
      for (int k = 0; k < n; k++) {
        int out[MAXC], got = rr__bind_share(p, count, RRUN_BIND_SLICE, n, k, out);
        bound += got > 0;
        for (int i = 0; i < got; i++) {
          int cpu = out[i], in_set = 0, core = -1, pkg = -1;
          for (int j = 0; j < count; j++) {
            if (p[j].cpu == cpu) in_set = 1, core = p[j].core, pkg = p[j].package;
          }
          if (!in_set) {
            fprintf(stderr, "FAIL sweep %d n=%d: rank %d got CPU %d outside the set\n", trial, n, k,
                    cpu);
            failures++;
          }
          if (n <= count && owner[cpu] >= 0) {
            fprintf(stderr, "FAIL sweep %d n=%d: CPU %d given to ranks %d and %d\n", trial, n, cpu,
                    owner[cpu], k);
            failures++;
          }
          owner[cpu] = k;
          /* n <= cores: a share holds every sibling of each of its CPUs */
          for (int j = 0; n <= ncores && j < count; j++) {
            bool mine = false;
            for (int q = 0; q < got; q++) mine |= out[q] == p[j].cpu;
            if (p[j].core == core && p[j].package == pkg && !mine) {
              fprintf(stderr, "FAIL sweep %d n=%d: rank %d has CPU %d but not its sibling %d\n",
                      trial, n, k, cpu, p[j].cpu);
              failures++;
            }
          }
        }
        if (n > ncores && n <= count && got != 1) {
          fprintf(stderr, "FAIL sweep %d n=%d: rank %d got %d CPUs, want 1\n", trial, n, k, got);
          failures++;
        }
      }
      /* everyone bound, or (more workers than CPUs, not a multiple) nobody */
      bool want_all = n <= count || n % count == 0;
      if (bound != (want_all ? n : 0)) {
        fprintf(stderr, "FAIL sweep %d n=%d (%d CPUs): %d of the ranks bound\n", trial, n, count,
                bound);
        failures++;
      }
      /* n <= count: the first min(n, cores) ranks sit on distinct cores */
      for (int k = 0; n <= count && k < n && k < ncores; k++) {
        for (int m = 0; m < k; m++) {
          int a[MAXC], b[MAXC];
          int ga = rr__bind_share(p, count, RRUN_BIND_SLICE, n, k, a);
          int gb = rr__bind_share(p, count, RRUN_BIND_SLICE, n, m, b);
          for (int x = 0; x < ga; x++) {
            for (int y = 0; y < gb; y++) {
              int cx = -1, cy = -2, px = -1, py = -2;
              for (int j = 0; j < count; j++) {
                if (p[j].cpu == a[x]) cx = p[j].core, px = p[j].package;
                if (p[j].cpu == b[y]) cy = p[j].core, py = p[j].package;
              }
              if (cx == cy && px == py) {
                fprintf(stderr, "FAIL sweep %d n=%d: ranks %d and %d share a core\n", trial, n, k,
                        m);
                failures++;
              }
            }
          }
        }
      }
      if (failures > 20) return;
    }
  }
}

int main(void) {
  fixed_shapes();
  sweep();
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("rrun --bind-to plans: all shapes as expected\n");
  return 0;
}
