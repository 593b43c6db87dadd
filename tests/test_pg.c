/* Process groups: subgroups made by rr_new_group, used alone, concurrently and nested, their
 * argument checks, destruction order and per-group deadlines; and many small calls back to
 * back. One process per rank (rr_spawn); every rank checks every element of every result
 * against an exact (integers) or float64 (floats, tolerance in harness.h) reference on
 * random non-zero data that each rank regenerates for all the others.
 *
 *   test_pg <subgroups|nested|concurrent|errors|timeout|many_small|early_exit|dies_in_new_group>
 * <world>
 *
 * Data inside a group: the stream of group rank q under a seed derived from the group's
 * tag, so a result built from the wrong group, the wrong member or the wrong root fails. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"

/* Number of bytes of buf[0..n) that are not `v`. */
static size_t not_byte(const void *buf, size_t n, unsigned char v) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += ((const unsigned char *)buf)[i] != v;
  return bad;
}

static int sorted_index(const int *sorted, int n, int global) {
  for (int i = 0; i < n; i++)
    if (sorted[i] == global) return i;
  return -1;
}

static void sort_ints(int *a, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && a[j - 1] > a[j]; j--) {
      int t = a[j];
      a[j] = a[j - 1];
      a[j - 1] = t;
    }
}

/* The group's view of ranks must be the sorted list: group rank = index. */
static int check_identity(rr_pg *g, const int *list, int n, int world, int me) {
  int sorted[64];
  memcpy(sorted, list, (size_t)n * sizeof *sorted);
  sort_ints(sorted, n);
  int want = sorted_index(sorted, n, me);
  T_CHECK(want >= 0, "test bug: rank %d is not in the list", me);
  T_CHECK(rr_get_rank(g) == want, "rr_get_rank = %d, want %d", rr_get_rank(g), want);
  T_CHECK(rr_get_world_size(g) == n, "rr_get_world_size = %d, want %d", rr_get_world_size(g), n);
  for (int i = 0; i < n; i++) {
    T_CHECK(rr_get_global_rank(g, i) == sorted[i], "rr_get_global_rank(%d) = %d, want %d", i,
            rr_get_global_rank(g, i), sorted[i]);
    T_CHECK(rr_get_group_rank(g, sorted[i]) == i, "rr_get_group_rank(%d) = %d, want %d", sorted[i],
            rr_get_group_rank(g, sorted[i]), i);
  }
  for (int x = -1; x <= world; x++)
    if (sorted_index(sorted, n, x) < 0)
      T_CHECK(rr_get_group_rank(g, x) == -1, "rr_get_group_rank(non-member %d) = %d", x,
              rr_get_group_rank(g, x));
  T_CHECK(rr_get_global_rank(g, -1) == -1 && rr_get_global_rank(g, n) == -1,
          "rr_get_global_rank out of range is not -1");
  return 0;
}

/* ---------------------------------------------------------------------------------------
 * One checked call of each kind on a group. `s` is the data seed (depends on the group). */

static int g_all_reduce(rr_pg *g, size_t count, rr_dtype d, rr_op op, int inplace, uint64_t s,
                        const char *tag) {
  int n = rr_get_world_size(g), r = rr_get_rank(g);
  size_t es = rr_dtype_size(d), bytes = count * es;
  char *src = t_alloc(bytes + 16), *dst = inplace ? src : t_alloc(bytes + 16);
  if (!inplace) memset(dst, 0xa5, bytes + 16);
  memset(src + bytes, 0x5a, 16);
  t_fill(src, count, d, op, s, r, 0);
  T_OK(rr_all_reduce(g, src, dst, count, d, op));
  char what[128];
  snprintf(what, sizeof what, "%s: all_reduce %s %s count %zu %s", tag, rr_dtype_name(d),
           rr_op_name(op), count, inplace ? "in place" : "out of place");
  size_t wrong = t_check_reduced(dst, count, d, op, s, n, 0, what);
  if (!inplace) {
    wrong += t_check_copied(src, count, d, op, s, r, 0, "all_reduce input (must be unchanged)");
    wrong += not_byte(dst + bytes, 16, 0xa5);
  }
  wrong += not_byte(src + bytes, 16, 0x5a);
  if (!inplace) free(dst);
  free(src);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

static int g_broadcast(rr_pg *g, size_t count, rr_dtype d, int root_g, int inplace, uint64_t s,
                       const char *tag) {
  int r = rr_get_rank(g), root = rr_get_global_rank(g, root_g);
  size_t bytes = count * rr_dtype_size(d);
  char *dst = t_alloc(bytes), *src = NULL;
  memset(dst, 0xa5, bytes);
  if (inplace) {
    src = dst;
    if (r == root_g) t_fill(dst, count, d, RR_SUM, s, root_g, 0);
  } else if (r == root_g) {
    src = t_alloc(bytes);
    t_fill(src, count, d, RR_SUM, s, root_g, 0);
  }
  T_OK(rr_broadcast(g, src, dst, count, d, root)); /* root is a global rank */
  char what[128];
  snprintf(what, sizeof what, "%s: broadcast %s count %zu from global rank %d (group rank %d)", tag,
           rr_dtype_name(d), count, root, root_g);
  size_t wrong = t_check_copied(dst, count, d, RR_SUM, s, root_g, 0, what);
  if (!inplace && r == root_g)
    wrong += t_check_copied(src, count, d, RR_SUM, s, root_g, 0, "broadcast input");
  if (!inplace && r == root_g) free(src);
  free(dst);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

static int g_reduce(rr_pg *g, size_t count, rr_dtype d, rr_op op, int root_g, uint64_t s,
                    const char *tag) {
  int n = rr_get_world_size(g), r = rr_get_rank(g), root = rr_get_global_rank(g, root_g);
  size_t bytes = count * rr_dtype_size(d);
  char *src = t_alloc(bytes);
  /* Non-roots alternate between a NULL recvbuf (allowed) and one that must stay untouched. */
  int null_recv = r != root_g && (r % 2);
  char *dst = null_recv ? NULL : t_alloc(bytes);
  t_fill(src, count, d, op, s, r, 0);
  if (dst) memset(dst, 0xa5, bytes);
  T_OK(rr_reduce(g, src, dst, count, d, op, root));
  char what[128];
  snprintf(what, sizeof what, "%s: reduce %s %s count %zu to global rank %d", tag, rr_dtype_name(d),
           rr_op_name(op), count, root);
  size_t wrong = t_check_copied(src, count, d, op, s, r, 0, "reduce input (must be unchanged)");
  if (r == root_g)
    wrong += t_check_reduced(dst, count, d, op, s, n, 0, what);
  else if (dst)
    wrong += not_byte(dst, bytes, 0xa5);
  free(src);
  free(dst);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

static int g_all_gather(rr_pg *g, size_t count, rr_dtype d, int inplace, uint64_t s,
                        const char *tag) {
  int n = rr_get_world_size(g), r = rr_get_rank(g);
  size_t blk = count * rr_dtype_size(d);
  char *dst = t_alloc(blk * (size_t)n), *src = inplace ? dst + (size_t)r * blk : t_alloc(blk);
  memset(dst, 0xa5, blk * (size_t)n);
  t_fill(src, count, d, RR_SUM, s, r, 0);
  T_OK(rr_all_gather(g, src, dst, count, d));
  char what[128];
  snprintf(what, sizeof what, "%s: all_gather %s count %zu", tag, rr_dtype_name(d), count);
  size_t wrong = 0;
  for (int q = 0; q < n; q++)
    wrong += t_check_copied(dst + (size_t)q * blk, count, d, RR_SUM, s, q, 0, what);
  if (!inplace) free(src);
  free(dst);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

static int g_reduce_scatter(rr_pg *g, size_t count, rr_dtype d, rr_op op, uint64_t s,
                            const char *tag) {
  int n = rr_get_world_size(g), r = rr_get_rank(g);
  size_t blk = count * rr_dtype_size(d);
  char *src = t_alloc(blk * (size_t)n), *dst = t_alloc(blk);
  t_fill(src, count * (size_t)n, d, op, s, r, 0);
  memset(dst, 0xa5, blk);
  T_OK(rr_reduce_scatter(g, src, dst, count, d, op));
  char what[128];
  snprintf(what, sizeof what, "%s: reduce_scatter %s %s count %zu", tag, rr_dtype_name(d),
           rr_op_name(op), count);
  size_t wrong = t_check_reduced(dst, count, d, op, s, n, (size_t)r * count, what);
  wrong += t_check_copied(src, count * (size_t)n, d, op, s, r, 0, "reduce_scatter input");
  free(src);
  free(dst);
  T_CHECK(!wrong, "%s: %zu wrong elements", what, wrong);
  return 0;
}

/* No member may leave a barrier before every member entered it. */
static int g_barrier(rr_pg *g, uint64_t s, int iter, const char *tag) {
  int early;
  double left, entered;
  T_OK(t_barrier_early(g, s, iter, &early, &left, &entered));
  T_CHECK(early < 0, "%s: barrier %d: group rank %d left before group rank %d entered", tag, iter,
          rr_get_rank(g), early);
  return 0;
}

/* Point to point with global peers: a ring shift by sendrecv, then group rank 0 exchanges a
 * message with every other member by blocking send/recv. */
static int g_p2p(rr_pg *g, size_t count, rr_dtype d, uint64_t s, const char *tag) {
  int n = rr_get_world_size(g), r = rr_get_rank(g);
  if (n < 2) return 0;
  size_t bytes = count * rr_dtype_size(d);
  char *src = t_alloc(bytes), *dst = t_alloc(bytes);
  size_t wrong = 0;
  char what[128];
  t_fill(src, count, d, RR_SUM, s, r, 0);
  memset(dst, 0xa5, bytes);
  int right = (r + 1) % n, left = (r + n - 1) % n;
  T_OK(rr_sendrecv(g, src, count, rr_get_global_rank(g, right), dst, count,
                   rr_get_global_rank(g, left), d));
  snprintf(what, sizeof what, "%s: sendrecv from global rank %d", tag, rr_get_global_rank(g, left));
  wrong += t_check_copied(dst, count, d, RR_SUM, s, left, 0, what);
  if (r == 0) {
    for (int q = 1; q < n; q++) {
      t_fill(src, count, d, RR_SUM, s + 1 + (uint64_t)q, 0, 0);
      T_OK(rr_send(g, src, count, d, rr_get_global_rank(g, q)));
      memset(dst, 0xa5, bytes);
      T_OK(rr_recv(g, dst, count, d, rr_get_global_rank(g, q)));
      snprintf(what, sizeof what, "%s: reply from global rank %d", tag, rr_get_global_rank(g, q));
      wrong += t_check_copied(dst, count, d, RR_SUM, s + 1 + (uint64_t)q, q, 0, what);
    }
  } else {
    memset(dst, 0xa5, bytes);
    T_OK(rr_recv(g, dst, count, d, rr_get_global_rank(g, 0)));
    snprintf(what, sizeof what, "%s: message from global rank %d", tag, rr_get_global_rank(g, 0));
    wrong += t_check_copied(dst, count, d, RR_SUM, s + 1 + (uint64_t)r, 0, 0, what);
    t_fill(src, count, d, RR_SUM, s + 1 + (uint64_t)r, r, 0);
    T_OK(rr_send(g, src, count, d, rr_get_global_rank(g, 0)));
  }
  free(src);
  free(dst);
  T_CHECK(!wrong, "%s: point to point: %zu wrong elements", tag, wrong);
  return 0;
}

/* Every collective on a group, roots given as global ranks. */
static int group_suite(rr_pg *g, uint64_t seed, const char *tag) {
  int n = rr_get_world_size(g);
  static const struct {
    rr_dtype d;
    rr_op op;
    size_t count;
  } ar[] = {
      {RR_INT32, RR_SUM, 1},        {RR_INT64, RR_BXOR, 7},       {RR_FLOAT32, RR_SUM, 1000},
      {RR_FLOAT64, RR_MAX, 33},     {RR_FLOAT16, RR_AVG, 100},    {RR_INT8, RR_PROD, 65},
      {RR_UINT8, RR_MIN, 5},        {RR_BFLOAT16, RR_SUM, 10007}, {RR_INT32, RR_BAND, 100003},
      {RR_FLOAT32, RR_PROD, 70001},
  };
  uint64_t s = seed;
  for (size_t i = 0; i < sizeof ar / sizeof ar[0]; i++)
    if (g_all_reduce(g, ar[i].count, ar[i].d, ar[i].op, (int)(i % 2), s += 101, tag)) return 1;
  for (int root = 0; root < n; root++) {
    if (g_broadcast(g, 1001, root % 2 ? RR_FLOAT16 : RR_INT32, root, root % 2, s += 101, tag))
      return 1;
    if (g_reduce(g, 513, root % 2 ? RR_FLOAT64 : RR_INT64, root % 2 ? RR_SUM : RR_MAX, root,
                 s += 101, tag))
      return 1;
  }
  if (g_broadcast(g, 200003, RR_FLOAT32, n - 1, 0, s += 101, tag)) return 1;
  if (g_all_gather(g, 37, RR_INT64, 0, s += 101, tag)) return 1;
  if (g_all_gather(g, 50001, RR_FLOAT32, 1, s += 101, tag)) return 1;
  if (g_reduce_scatter(g, 29, RR_INT32, RR_SUM, s += 101, tag)) return 1;
  if (g_reduce_scatter(g, 20001, RR_FLOAT32, RR_MAX, s += 101, tag)) return 1;
  for (int i = 0; i < 3; i++)
    if (g_barrier(g, s, i, tag)) return 1;
  if (g_p2p(g, 3001, RR_INT32, s += 101, tag)) return 1;
  return 0;
}

static uint64_t group_seed(int tag) {
  return t_seed() ^ ((uint64_t)(tag + 1) * 0x100000001b3ull);
}

/* ---------------------------------------------------------------------------------------
 * subgroups: {3,1,4}, {0,2} and the whole world (unsorted), plus {7,5,6} at world 8. */
static int subgroups(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *world;
  T_OK(rr_init_process_group(&world, NULL));
  int n = rr_get_world_size(world);
  int lists[4][8] = {{3, 1, 4}, {0, 2}, {0}, {7, 5, 6}};
  int sizes[4] = {3, 2, n, 3};
  for (int i = 0; i < n; i++) lists[2][i] = (i * 3 + 2) % n; /* a permutation (n = 5, 8) */
  int ngroups = n >= 8 ? 4 : 3;
  rr_pg *g[4] = {0};
  for (int k = 0; k < ngroups; k++) {
    g[k] = (rr_pg *)1;
    T_OK(rr_new_group(world, lists[k], sizes[k], 0, &g[k]));
    int member = 0;
    for (int i = 0; i < sizes[k]; i++) member |= lists[k][i] == rank;
    T_CHECK(member == (g[k] != NULL), "group %d: member %d but group %p", k, member, (void *)g[k]);
    if (member && check_identity(g[k], lists[k], sizes[k], n, rank)) return 1;
  }
  for (int k = 0; k < ngroups; k++) {
    if (!g[k]) continue;
    char tag[64];
    snprintf(tag, sizeof tag, "group %d of %d", k, sizes[k]);
    if (group_suite(g[k], group_seed(k), tag)) return 1;
  }
  /* The world is still fine, and its results do not mix with the groups'. */
  if (g_all_reduce(world, 1001, RR_INT64, RR_SUM, 0, group_seed(99), "world")) return 1;
  for (int k = 0; k < ngroups; k++)
    if (g[k]) T_OK(rr_destroy_process_group(g[k]));
  T_OK(rr_destroy_process_group(world));
  if (rank == 0) printf("subgroups world %d: %d groups checked\n", n, ngroups);
  return 0;
}

/* ---------------------------------------------------------------------------------------
 * nested: P = {4,0,3,1} of the world, N = {4,1} and M = {3,0,4} of P, and {0,4} of M. */
static int nested(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *world;
  T_OK(rr_init_process_group(&world, NULL));
  int n = rr_get_world_size(world);
  const int lp[] = {4, 0, 3, 1}, ln[] = {4, 1}, lm[] = {3, 0, 4}, lmm[] = {0, 4};
  rr_pg *p = NULL, *gn = NULL, *gm = NULL, *gmm = NULL;
  T_OK(rr_new_group(world, lp, 4, 0, &p));
  T_CHECK((p != NULL) == (rank != 2), "membership of P");
  if (p) {
    if (check_identity(p, lp, 4, n, rank)) return 1;
    /* A rank outside the parent cannot be in a child, even if it is in the world. */
    const int bad[] = {1, 2};
    rr_pg *x = (rr_pg *)1;
    int st = rr_new_group(p, bad, 2, 0, &x);
    T_CHECK(st == RR_EINVAL && x == NULL, "new_group of P with rank 2: %s", rr_status_name(st));
    T_HAS(rr_last_error(), "rank 2 is not in the parent");
    T_OK(rr_new_group(p, ln, 2, 0, &gn));
    T_OK(rr_new_group(p, lm, 3, 0, &gm));
    T_CHECK((gn != NULL) == (rank == 1 || rank == 4), "membership of N");
    T_CHECK((gm != NULL) == (rank == 0 || rank == 3 || rank == 4), "membership of M");
    if (gn) {
      if (check_identity(gn, ln, 2, n, rank)) return 1;
      /* Global ranks, not ranks of the parent (4 is rank 3 of P). */
      T_CHECK(rr_get_global_rank(gn, 1) == 4, "N's rank 1 is global %d", rr_get_global_rank(gn, 1));
    }
    if (gm) {
      if (check_identity(gm, lm, 3, n, rank)) return 1;
      T_OK(rr_new_group(gm, lmm, 2, 0, &gmm));
      T_CHECK((gmm != NULL) == (rank == 0 || rank == 4), "membership of M's child");
      if (gmm && check_identity(gmm, lmm, 2, n, rank)) return 1;
    }
    if (gn && group_suite(gn, group_seed(10), "nested N {1,4}")) return 1;
    if (gm && group_suite(gm, group_seed(11), "nested M {0,3,4}")) return 1;
    if (gmm && group_suite(gmm, group_seed(12), "nested M.0 {0,4}")) return 1;
    if (group_suite(p, group_seed(13), "P {0,1,3,4}")) return 1;
    /* A parent with live children cannot go. */
    if (gn || gm) {
      int st2 = rr_destroy_process_group(p);
      T_CHECK(st2 == RR_ESTATE, "destroying P with live children: %s", rr_status_name(st2));
    }
    if (gmm) {
      int st2 = rr_destroy_process_group(gm);
      T_CHECK(st2 == RR_ESTATE, "destroying M with a live child: %s", rr_status_name(st2));
      T_OK(rr_destroy_process_group(gmm));
    }
    if (gm) T_OK(rr_destroy_process_group(gm));
    if (gn) T_OK(rr_destroy_process_group(gn));
    T_OK(rr_destroy_process_group(p));
  }
  if (g_all_reduce(world, 999, RR_FLOAT64, RR_SUM, 1, group_seed(14), "world")) return 1;
  T_OK(rr_destroy_process_group(world));
  if (rank == 0) printf("nested world %d: ok\n", n);
  return 0;
}

/* ---------------------------------------------------------------------------------------
 * concurrent: A = {3,1,0,2} and B = {4,2,1,3} used from two threads of each member while
 * the main thread runs world collectives. Sizes cross the recursive-doubling / ring switch
 * so that calls overlap for a while. */
typedef struct loop_arg {
  rr_pg *g;
  int tag;
  int iters;
  int rc;
  int rank;
} loop_arg;

static int loop_body(void *p) {
  loop_arg *la = p;
  t_rank = la->rank;
  int n = rr_get_world_size(la->g);
  char tag[64];
  snprintf(tag, sizeof tag, "group %d (%d ranks)", la->tag, n);
  static const size_t counts[] = {1, 1000, 65539, 300007};
  for (int it = 0; it < la->iters; it++) {
    uint64_t s = group_seed(la->tag) + (uint64_t)it * 7919;
    size_t c = counts[it % 4];
    if (g_all_reduce(la->g, c, it % 2 ? RR_FLOAT32 : RR_INT32, RR_SUM, it % 3 == 0, s, tag))
      return 1;
    if (g_broadcast(la->g, c, RR_INT64, it % n, it % 2, s + 1, tag)) return 1;
    if (g_all_gather(la->g, c / 4 + 1, RR_INT32, 0, s + 2, tag)) return 1;
  }
  return 0;
}

static int concurrent(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *world;
  T_OK(rr_init_process_group(&world, NULL));
  int n = rr_get_world_size(world);
  const int la_[] = {3, 1, 0, 2}, lb[] = {4, 2, 1, 3};
  rr_pg *a = NULL, *b = NULL;
  T_OK(rr_new_group(world, la_, 4, 0, &a));
  T_OK(rr_new_group(world, lb, 4, 0, &b));
  loop_arg args[2] = {{a, 20, 12, 0, rank}, {b, 21, 12, 0, rank}};
  t_thread th[2];
  int started[2] = {0, 0};
  for (int k = 0; k < 2; k++)
    if (args[k].g) {
      T_CHECK(t_thread_start(&th[k], loop_body, &args[k]) == 0, "pthread_create");
      started[k] = 1;
    }
  loop_arg wa = {world, 22, 12, 0, rank};
  int wrc = loop_body(&wa);
  for (int k = 0; k < 2; k++)
    if (started[k]) args[k].rc = t_thread_join(&th[k]);
  T_CHECK(wrc == 0 && args[0].rc == 0 && args[1].rc == 0,
          "concurrent use failed (world %d, A %d, B %d)", wrc, args[0].rc, args[1].rc);
  if (a) T_OK(rr_destroy_process_group(a));
  if (b) T_OK(rr_destroy_process_group(b));
  T_OK(rr_destroy_process_group(world));
  if (rank == 0) printf("concurrent world %d: ok\n", n);
  return 0;
}

/* ---------------------------------------------------------------------------------------
 * errors: roots and peers outside the group, bad rank lists, and destruction order. */
static int errors(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *world;
  T_OK(rr_init_process_group(&world, NULL));
  int n = rr_get_world_size(world);
  char me[32];
  snprintf(me, sizeof me, "rank %d", rank);
  const int lg[] = {3, 1, 4};
  rr_pg *g = NULL;
  T_OK(rr_new_group(world, lg, 3, 0, &g));
  if (g) {
    int32_t buf[16];
    t_fill(buf, 16, RR_INT32, RR_SUM, 1, rank, 0);
    /* 0 and 2 are world ranks but not members; 0 is also a valid *group* rank. */
    int st = rr_broadcast(g, buf, buf, 16, RR_INT32, 0);
    T_CHECK(st == RR_EINVAL, "broadcast root 0: %s", rr_status_name(st));
    T_HAS(rr_last_error(), me);
    T_HAS(rr_last_error(), "broadcast");
    T_HAS(rr_last_error(), "root 0");
    T_HAS(rr_last_error(), "not a member");
    T_HAS(rr_last_error(), "1, 3, 4");
    st = rr_reduce(g, buf, buf, 16, RR_INT32, RR_SUM, 2);
    T_CHECK(st == RR_EINVAL, "reduce root 2: %s", rr_status_name(st));
    T_HAS(rr_last_error(), "root 2");
    T_HAS(rr_last_error(), "1, 3, 4");
    st = rr_reduce(g, buf, buf, 16, RR_INT32, RR_SUM, 5);
    T_CHECK(st == RR_EINVAL, "reduce root 5: %s", rr_status_name(st));
    st = rr_send(g, buf, 16, RR_INT32, 0);
    T_CHECK(st == RR_EINVAL, "send to 0: %s", rr_status_name(st));
    T_HAS(rr_last_error(), "peer 0");
    st = rr_recv(g, buf, 16, RR_INT32, 2);
    T_CHECK(st == RR_EINVAL, "recv from 2: %s", rr_status_name(st));
    int other = rank == 1 ? 3 : 1;
    int32_t rbuf[16];
    st = rr_sendrecv(g, buf, 16, 0, rbuf, 16, other, RR_INT32);
    T_CHECK(st == RR_EINVAL, "sendrecv to 0: %s", rr_status_name(st));
    rr_work *w = (rr_work *)1;
    st = rr_broadcast_async(g, buf, buf, 16, RR_INT32, 2, &w);
    T_CHECK(st == RR_EINVAL && w == NULL, "broadcast_async root 2: %s", rr_status_name(st));
    /* Nothing was sent: the group's next call is the first one anybody sees. */
    if (g_broadcast(g, 77, RR_INT32, 2, 0, group_seed(30), "G after refused calls")) return 1;
    if (g_all_reduce(g, 77, RR_INT32, RR_SUM, 1, group_seed(31), "G after refused calls")) return 1;
  }
  /* Bad lists fail on every rank, member or not, and create nothing. */
  struct {
    int ranks[8];
    int n;
    const char *needle;
  } bad[] = {
      {{1, 1, 2}, 3, "rank 1 is listed twice"},
      {{0, 5}, 2, "rank 5 is not in the parent"},
      {{4, -1}, 2, "rank -1 is not in the parent"},
      {{0, 1, 2, 3, 4, 0}, 6, "ranks listed"},
      {{2, 0, 2, 4}, 4, "listed twice"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rr_pg *x = (rr_pg *)1;
    int st = rr_new_group(world, bad[i].ranks, bad[i].n, 0, &x);
    T_CHECK(st == RR_EINVAL && x == NULL, "bad list %zu: %s, group %p", i, rr_status_name(st),
            (void *)x);
    T_HAS(rr_last_error(), bad[i].needle);
  }
  {
    rr_pg *x = (rr_pg *)1;
    int st = rr_new_group(world, lg, 0, 0, &x);
    T_CHECK(st == RR_EINVAL && x == NULL, "empty list: %s", rr_status_name(st));
    st = rr_new_group(world, NULL, 2, 0, &x);
    T_CHECK(st == RR_EINVAL && x == NULL, "NULL list: %s", rr_status_name(st));
    st = rr_new_group(NULL, lg, 3, 0, &x);
    T_CHECK(st == RR_EINVAL && x == NULL, "NULL parent: %s", rr_status_name(st));
  }
  /* After the refused lists, ranks still agree on the next group. */
  const int lh[] = {4, 0};
  rr_pg *h = NULL;
  T_OK(rr_new_group(world, lh, 2, 0, &h));
  if (h && group_suite(h, group_seed(32), "H {0,4} after refused lists")) return 1;
  /* The world cannot go while a subgroup of it lives (on members), and stays usable. */
  if (g || h) {
    int st = rr_destroy_process_group(world);
    T_CHECK(st == RR_ESTATE, "destroying the world before its subgroups: %s", rr_status_name(st));
    T_HAS(rr_last_error(), me);
    T_HAS(rr_last_error(), "subgroup");
  }
  if (g_all_reduce(world, 1003, RR_INT32, RR_SUM, 0, group_seed(33), "world after refused destroy"))
    return 1;
  if (g) T_OK(rr_destroy_process_group(g));
  if (h) T_OK(rr_destroy_process_group(h));
  T_OK(rr_destroy_process_group(world));
  T_CHECK(rr_destroy_process_group(NULL) == RR_EINVAL, "destroy(NULL)");
  if (rank == 0) printf("errors world %d: ok\n", n);
  return 0;
}

/* ---------------------------------------------------------------------------------------
 * timeout: a subgroup made with 1500 ms times out in ~1.5 s while the world (RR_TIMEOUT,
 * 20 s under CTest) waits longer without failing; rr_pg_set_timeout lowers and raises a
 * group's deadline. */
static int timeouts(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *world;
  T_OK(rr_init_process_group(&world, NULL));
  int n = rr_get_world_size(world);
  T_CHECK(n == 4, "run with 4 ranks");
  const int ls[] = {1, 2, 3}, lb[] = {0, 1}, lc[] = {2, 3};
  rr_pg *s = NULL, *b = NULL, *c = NULL;
  T_OK(rr_new_group(world, ls, 3, 1500, &s));
  T_OK(rr_new_group(world, lb, 2, 0, &b));
  T_OK(rr_new_group(world, lc, 2, 1000, &c));
  T_CHECK(rr_pg_set_timeout(world, 0) == RR_EINVAL, "set_timeout 0");
  T_CHECK(rr_pg_set_timeout(world, -5) == RR_EINVAL, "set_timeout -5");
  T_CHECK(rr_pg_set_timeout(NULL, 100) == RR_EINVAL, "set_timeout NULL");
  T_OK(rr_barrier(world));

  /* 1. S: rank 3 never makes the call; 1 and 2 fail after ~1.5 s. */
  float x[64];
  t_fill(x, 64, RR_FLOAT32, RR_SUM, 5, rank, 0);
  int st_s = RR_OK;
  if (rank == 1 || rank == 2) {
    double t0 = t_now();
    st_s = rr_all_reduce(s, x, x, 64, RR_FLOAT32, RR_SUM);
    double dt = t_now() - t0;
    T_CHECK(st_s == RR_ETIMEDOUT, "S all_reduce: %s: %s", rr_status_name(st_s), rr_last_error());
    T_HAS(rr_last_error(), "1.5 s");
    T_CHECK(dt >= 1.3 && dt < 5.0, "S (timeout 1500 ms) failed after %.2f s", dt);
    usleep(1000000); /* the world's other ranks now wait > 1.5 s in its barrier */
  }
  /* 2. The world's deadline is RR_TIMEOUT (20 s under CTest): waiting ~2.5 s is fine. */
  double t0 = t_now();
  T_OK(rr_barrier(world));
  double waited = t_now() - t0;
  /* Ranks 1 and 2 come ~2.5 s after their own clocks started; 1 s leaves room for the ranks'
   * clocks starting apart on a loaded machine, and still fails a barrier that did not wait. */
  if (rank == 0 || rank == 3)
    T_CHECK(waited >= 1.0,
            "the world barrier returned after %.2f s; expected to wait for ranks 1 and 2", waited);
  if (rank == 3) {
    /* S was aborted by its other members: this rank's call fails at once. */
    double t1 = t_now();
    int st = rr_all_reduce(s, x, x, 64, RR_FLOAT32, RR_SUM);
    T_CHECK(st != RR_OK, "a call on the aborted S succeeded");
    T_CHECK(t_now() - t1 < 5.0, "a call on the aborted S took %.1f s", t_now() - t1);
  }

  /* 3. B inherits 60 s; set to 800 ms it times out when rank 1 is 2.5 s late. C was made
   * with 1000 ms; raised to 20 s it survives rank 3 being 2 s late. */
  if (b) T_OK(rr_pg_set_timeout(b, 800));
  if (c) T_OK(rr_pg_set_timeout(c, 20000));
  int64_t y[32];
  t_fill(y, 32, RR_INT64, RR_SUM, 6, rank % 2, 0);
  if (rank == 1 || rank == 3) usleep(rank == 1 ? 2500000 : 2000000);
  t0 = t_now();
  int st_b = RR_OK;
  if (b) {
    st_b = rr_all_reduce(b, y, y, 32, RR_INT64, RR_SUM);
    double dt = t_now() - t0;
    if (rank == 0) {
      T_CHECK(st_b == RR_ETIMEDOUT, "B all_reduce: %s: %s", rr_status_name(st_b), rr_last_error());
      T_CHECK(dt >= 0.6 && dt < 2.4, "B (set to 800 ms) failed after %.2f s", dt);
    } else {
      T_CHECK(st_b != RR_OK, "rank 1's late call on the aborted B succeeded");
    }
  }
  if (c) {
    T_OK(rr_all_reduce(c, y, y, 32, RR_INT64, RR_SUM));
    if (rank == 2) /* 1 s, not 2: rank 3's sleep started on its own clock (see above) */
      T_CHECK(t_now() - t0 >= 1.0, "C's all_reduce returned after %.2f s; rank 3 was 2 s late",
              t_now() - t0);
    size_t wrong = t_check_reduced(y, 32, RR_INT64, RR_SUM, 6, 2, 0, "C all_reduce");
    T_CHECK(!wrong, "C all_reduce: %zu wrong", wrong);
  }
  /* 4. Destroying a failed group reports its first error; the world is unaffected. */
  if (s) {
    int st = rr_destroy_process_group(s);
    T_CHECK(st != RR_OK, "destroying the timed-out S returned RR_OK");
    if (rank != 3) T_CHECK(st == RR_ETIMEDOUT, "destroying S: %s", rr_status_name(st));
  }
  if (b) {
    int st = rr_destroy_process_group(b);
    T_CHECK(st != RR_OK, "destroying the timed-out B returned RR_OK");
  }
  if (c) T_OK(rr_destroy_process_group(c));
  if (g_all_reduce(world, 100, RR_FLOAT64, RR_SUM, 0, group_seed(40), "world after sub-timeouts"))
    return 1;
  T_OK(rr_destroy_process_group(world));
  (void)st_s;
  if (rank == 0) printf("timeout world %d: ok\n", n);
  return 0;
}

/* ---------------------------------------------------------------------------------------
 * early_exit: rank 0 (which serves the world's store) is not in {1,2}; it makes the call
 * every rank must make, then destroys the world and leaves. As torch's new_group (a
 * barrier over the whole parent unless use_local_synchronization), the call must not
 * return on a non-member before the members are done with the store, so ranks 1 and 2,
 * arriving 300 ms later, still get a working group. */
static int early_exit(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *world;
  T_OK(rr_init_process_group(&world, NULL));
  const int l[] = {2, 1};
  rr_pg *g = (rr_pg *)1;
  if (rank != 0) usleep(300000);
  int st = rr_new_group(world, l, 2, 0, &g);
  T_CHECK(st == RR_OK, "new_group {1,2}: %s: %s", rr_status_name(st), rr_last_error());
  if (rank == 0) {
    T_CHECK(g == NULL, "rank 0 got a group");
    T_OK(rr_destroy_process_group(world));
    return 0;
  }
  if (g_all_reduce(g, 1000, RR_INT32, RR_SUM, 0, group_seed(50), "{1,2} after rank 0 left"))
    return 1;
  T_OK(rr_destroy_process_group(g));
  rr_destroy_process_group(world); /* rank 0 is gone: its status is not the point here */
  return 0;
}

/* ---------------------------------------------------------------------------------------
 * dies_in_new_group: rank 2 (not a member of {0,1}) dies right after joining the world,
 * before the barrier over the parent that ends rr_new_group. The members must get an
 * error and no group, and the world must still be destroyable (not refused for a child
 * that was never handed out). */
static int dies_in_new_group(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *world;
  T_OK(rr_init_process_group(&world, NULL));
  if (rank == 2) _exit(0); /* gone without a goodbye: the others' barrier cannot complete */
  const int l[] = {0, 1};
  rr_pg *g = (rr_pg *)1;
  int st = rr_new_group(world, l, 2, 0, &g);
  T_CHECK(st == RR_EPEER, "new_group returned %s: %s", rr_status_name(st), rr_last_error());
  T_CHECK(g == NULL, "new_group failed but handed out a group");
  T_HAS(rr_last_error(), "new_group");
  T_HAS(rr_last_error(), "lost rank 2");
  st = rr_destroy_process_group(world);
  T_CHECK(st != RR_ESTATE, "destroying the world was refused: %s", rr_last_error());
  T_HAS(rr_last_error(), "lost rank 2");
  return 0;
}

/* ---------------------------------------------------------------------------------------
 * many_small: 1,000 back-to-back all-reduces of 1-16 elements (random dtype, op, placement)
 * then 1,000 calls mixing all-reduce, broadcast, barrier, all-gather and reduce. */
static int small_all_reduce(rr_pg *pg, uint64_t s, int i, const char *tag) {
  uint64_t bits = t_bits(s, 1000, (uint64_t)i);
  size_t count = 1 + bits % 16;
  rr_dtype d = (rr_dtype)((bits >> 8) % RR_NUM_DTYPES);
  rr_op ops[8];
  int nops = t_valid_ops(d, ops);
  rr_op op = ops[(bits >> 16) % (uint64_t)nops];
  int inplace = (bits >> 24) & 1;
  char what[64];
  snprintf(what, sizeof what, "%s call %d", tag, i);
  return g_all_reduce(pg, count, d, op, inplace, s + (uint64_t)i * 31, what);
}

static int many_small(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int n = rr_get_world_size(pg);
  uint64_t s = t_seed();
  int counts[5] = {0};
  double t0 = t_now();
  for (int i = 0; i < 1000; i++)
    if (small_all_reduce(pg, s, i, "all_reduce only")) return 1;
  double t1 = t_now();
  for (int i = 0; i < 1000; i++) {
    uint64_t bits = t_bits(s, 2000, (uint64_t)i);
    int kind = (int)(bits % 5);
    size_t count = 1 + (bits >> 8) % 16;
    rr_dtype d = (rr_dtype)((bits >> 16) % RR_NUM_DTYPES);
    int root = (int)((bits >> 24) % (uint64_t)n);
    uint64_t si = s + 5000 + (uint64_t)i * 31;
    char what[64];
    snprintf(what, sizeof what, "mixed call %d", i);
    counts[kind]++;
    int rc = 0;
    switch (kind) {
      case 0:
        rc = small_all_reduce(pg, s + 77, i, "mixed");
        break;
      case 1:
        rc = g_broadcast(pg, count, d, root, (int)(bits >> 32) & 1, si, what);
        break;
      case 2:
        T_OK(rr_barrier(pg));
        break;
      case 3:
        rc = g_all_gather(pg, count, d, (int)(bits >> 32) & 1, si, what);
        break;
      default: {
        rr_op ops[8];
        int nops = t_valid_ops(d, ops);
        rc = g_reduce(pg, count, d, ops[(bits >> 40) % (uint64_t)nops], root, si, what);
      }
    }
    if (rc) return 1;
  }
  double t2 = t_now();
  T_OK(rr_destroy_process_group(pg));
  if (rank == 0)
    printf(
        "many_small world %d: 1000 all_reduces in %.3f s (%.0f us each); 1000 mixed calls "
        "(%d all_reduce, %d broadcast, %d barrier, %d all_gather, %d reduce) in %.3f s\n",
        n, t1 - t0, (t1 - t0) * 1e3, counts[0], counts[1], counts[2], counts[3], counts[4],
        t2 - t1);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: %s "
            "<subgroups|nested|concurrent|errors|timeout|many_small|early_exit|dies_in_new_group> "
            "<world>\n",
            argv[0]);
    return 2;
  }
  const char *s = argv[1];
  int world = atoi(argv[2]);
  int (*fn)(int, void *) = !strcmp(s, "subgroups")           ? subgroups
                           : !strcmp(s, "nested")            ? nested
                           : !strcmp(s, "concurrent")        ? concurrent
                           : !strcmp(s, "errors")            ? errors
                           : !strcmp(s, "timeout")           ? timeouts
                           : !strcmp(s, "many_small")        ? many_small
                           : !strcmp(s, "early_exit")        ? early_exit
                           : !strcmp(s, "dies_in_new_group") ? dies_in_new_group
                                                             : NULL;
  if (!fn || world < 1) {
    fprintf(stderr, "unknown scenario %s\n", s);
    return 2;
  }
  if ((fn == nested || fn == concurrent || fn == errors) && world != 5) {
    fprintf(stderr, "%s needs world 5\n", s);
    return 2;
  }
  t_seed_announce(s);
  rr_spawn_status st;
  if (rr_spawn(world, fn, NULL, &st) != RR_OK) {
    fprintf(stderr, "FAILED: %s\n", rr_last_error());
    return 1;
  }
  return 0;
}
