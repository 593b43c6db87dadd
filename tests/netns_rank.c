/* One rank of tests/netns.sh: run inside its own network namespace (a "host"), joined to
 * the others through veth pairs and a bridge. env:// as usual (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT), with RR_DEBUG=INFO and RR_DEBUG_FILE set by the script.
 *
 *   netns_rank <data address prefix, e.g. 10.77.0.> <data interface name>
 *
 * Checks every element of all-reduces (several dtypes, ops and sizes, in and out of place),
 * broadcasts from every root and an all-gather; that every rank is in a different network
 * namespace; and, from its own log, that its data sockets listened on <prefix><rank+1> on
 * the named interface with a host identity holding this namespace, and reached every peer
 * over tcp. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"

static void *xalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "rank %d: out of memory\n", t_rank);
    exit(3);
  }
  return p;
}

static int all_reduce_case(rr_pg *pg, size_t count, rr_dtype d, rr_op op, int inplace, uint64_t s) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  size_t bytes = count * rr_dtype_size(d);
  char *src = xalloc(bytes), *dst = inplace ? src : xalloc(bytes);
  t_fill(src, count, d, op, s, r, 0);
  if (!inplace) memset(dst, 0xa5, bytes);
  T_OK(rr_all_reduce(pg, src, dst, count, d, op));
  char what[96];
  snprintf(what, sizeof what, "all_reduce %s %s count %zu", rr_dtype_name(d), rr_op_name(op),
           count);
  size_t wrong = t_check_reduced(dst, count, d, op, s, n, 0, what);
  if (!inplace) wrong += t_check_copied(src, count, d, op, s, r, 0, "all_reduce input");
  if (!inplace) free(dst);
  free(src);
  T_CHECK(!wrong, "%s: %zu wrong", what, wrong);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s <data address prefix> <data interface>\n", argv[0]);
    return 2;
  }
  const char *prefix = argv[1], *ifname = argv[2];
  const char *logp = getenv("RR_DEBUG_FILE");
  t_rank = getenv("RANK") ? atoi(getenv("RANK")) : -1;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  uint64_t seed = t_seed();

  static const struct {
    rr_dtype d;
    rr_op op;
    size_t count;
  } ar[] = {
      {RR_INT32, RR_SUM, 1},         {RR_FLOAT32, RR_SUM, 1000},  {RR_INT64, RR_BXOR, 100003},
      {RR_FLOAT64, RR_MAX, 300007},  {RR_BFLOAT16, RR_SUM, 4099}, {RR_INT8, RR_PROD, 77},
      {RR_FLOAT32, RR_AVG, 1 << 20},
  };
  for (size_t i = 0; i < sizeof ar / sizeof ar[0]; i++)
    if (all_reduce_case(pg, ar[i].count, ar[i].d, ar[i].op, (int)(i % 2), seed + i)) return 1;

  size_t bc = 100001;
  int32_t *b = xalloc(bc * 4);
  for (int root = 0; root < n; root++) {
    memset(b, 0xa5, bc * 4);
    if (r == root) t_fill(b, bc, RR_INT32, RR_SUM, seed + 50, root, 0);
    T_OK(rr_broadcast(pg, b, b, bc, RR_INT32, root));
    size_t wrong = t_check_copied(b, bc, RR_INT32, RR_SUM, seed + 50, root, 0, "broadcast");
    T_CHECK(!wrong, "broadcast from %d: %zu wrong", root, wrong);
  }
  free(b);

  size_t gc = 25000;
  float *g = xalloc(gc * 4 * (size_t)n);
  memset(g, 0xa5, gc * 4 * (size_t)n);
  t_fill(g + (size_t)r * gc, gc, RR_FLOAT32, RR_SUM, seed + 60, r, 0);
  T_OK(rr_all_gather(pg, g + (size_t)r * gc, g, gc, RR_FLOAT32));
  size_t wrong = 0;
  for (int q = 0; q < n; q++)
    wrong +=
        t_check_copied(g + (size_t)q * gc, gc, RR_FLOAT32, RR_SUM, seed + 60, q, 0, "all_gather");
  free(g);
  T_CHECK(!wrong, "all_gather: %zu wrong", wrong);

  /* Every rank in its own network namespace. */
  char ns[64] = "", all[64 * 64];
  T_CHECK(n <= 64, "world too big");
  ssize_t l = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
  T_CHECK(l > 0, "readlink /proc/self/ns/net");
  ns[l] = '\0';
  T_OK(rr_all_gather(pg, ns, all, 64, RR_UINT8));
  for (int q = 0; q < n; q++)
    T_CHECK(q == r || strcmp(all + 64 * q, ns) != 0,
            "ranks %d and %d share the network namespace %s", q, r, ns);
  T_OK(rr_destroy_process_group(pg));

  /* The log: where the data sockets listened, with which host identity, and the pairs. */
  T_CHECK(logp && *logp, "RR_DEBUG_FILE is not set");
  FILE *f = fopen(logp, "r");
  T_CHECK(f != NULL, "cannot read %s", logp);
  char want_addr[64], want_if[80], line[1024];
  snprintf(want_addr, sizeof want_addr, "listening on %s%d:", prefix, r + 1);
  snprintf(want_if, sizeof want_if, "(%s)", ifname);
  int listen_ok = 0, pairs = 0;
  /* netns.sh's ib mode: the pairs must go over InfiniBand (the fake, between namespaces). */
  const char *want_tp = getenv("RR_NETNS_OVER") ? getenv("RR_NETNS_OVER") : "tcp";
  char over[32];
  snprintf(over, sizeof over, " over %s", want_tp);
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "group w rank") && strstr(line, "listening on")) {
      T_CHECK(strstr(line, want_addr) && strstr(line, want_if), "want '%s' on %s: %s", want_addr,
              want_if, line);
      T_CHECK(strstr(line, ns) != NULL, "the host identity lacks this namespace %s: %s", ns, line);
      listen_ok++;
    }
    if (strstr(line, "group w: rank") && strstr(line, over)) pairs++;
  }
  fclose(f);
  T_CHECK(listen_ok == 1, "%d listening lines for the world in %s", listen_ok, logp);
  T_CHECK(pairs == n - 1, "%d peers reached over %s, want %d", pairs, want_tp, n - 1);
  printf("rank %d: data on %s%d (%s), namespace %s, %d peers over %s: ok\n", r, prefix, r + 1,
         ifname, ns, pairs, want_tp);
  return 0;
}
