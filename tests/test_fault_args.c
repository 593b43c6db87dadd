/* Bad input: arguments a rank refuses alone, calls that differ between the ranks, and
 * arguments only one rank's role can get wrong. Each scenario asserts what every rank sees:
 * the status, that the message names the rank and the cause, and that it arrives within a
 * bounded time. (Faults of processes and the environment: test_fault.c.)
 *
 *   test_fault_args <scenario>      invalid_args, mismatch, role_args, role_race, coll_args */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness.h"

/* ---- invalid arguments: refused locally, nothing sent, the group stays usable ---- */
static int invalid_args(int rank, void *arg) {
  (void)arg;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int n = rr_get_world_size(pg);
  float buf[64] = {0};
  for (int i = 0; i < 64; i++) buf[i] = (float)(rank + 1);
  struct {
    int st;
    const char *needle;
  } cases[12];
  int k = 0;
  rr_work *w = (rr_work *)1;
  cases[k++] =
      (typeof(cases[0])){rr_all_reduce(pg, NULL, buf, 10, RR_FLOAT32, RR_SUM), "sendbuf is NULL"};
  cases[k++] =
      (typeof(cases[0])){rr_all_reduce(pg, buf, NULL, 10, RR_FLOAT32, RR_SUM), "recvbuf is NULL"};
  cases[k++] = (typeof(cases[0])){rr_all_reduce(pg, buf, buf, 10, (rr_dtype)99, RR_SUM), "dtype"};
  cases[k++] = (typeof(cases[0])){rr_all_reduce(pg, buf, buf, 10, RR_FLOAT32, RR_BAND), "band"};
  cases[k++] = (typeof(cases[0])){rr_all_reduce(pg, buf, buf, 10, RR_FLOAT32, (rr_op)42), "op"};
  cases[k++] =
      (typeof(cases[0])){rr_broadcast(pg, buf, buf, 10, RR_FLOAT32, n + 3), "out of range"};
  cases[k++] =
      (typeof(cases[0])){rr_reduce(pg, buf, buf, 10, RR_FLOAT32, RR_SUM, -1), "out of range"};
  cases[k++] = (typeof(cases[0])){rr_all_reduce(pg, buf, buf, SIZE_MAX / 2, RR_FLOAT32, RR_SUM),
                                  "overflows"};
  cases[k++] =
      (typeof(cases[0])){rr_all_reduce(pg, buf, buf + 1, 10, RR_FLOAT32, RR_SUM), "overlap"};
  cases[k++] = (typeof(cases[0])){rr_send(pg, buf, 10, RR_FLOAT32, rank), "oneself"};
  cases[k++] = (typeof(cases[0])){rr_all_reduce_async(pg, buf, buf, 10, RR_FLOAT32, RR_SUM, NULL),
                                  "work is NULL"};
  cases[k++] = (typeof(cases[0])){rr_all_reduce_async(pg, NULL, buf, 10, RR_FLOAT32, RR_SUM, &w),
                                  "sendbuf is NULL"};
  T_CHECK(w == NULL, "a refused async call must leave *work NULL");
  char who[32];
  snprintf(who, sizeof who, "rank %d", rank);
  for (int i = 0; i < k; i++) {
    T_CHECK(cases[i].st == RR_EINVAL, "case %d: status %s, want RR_EINVAL", i,
            rr_status_name(cases[i].st));
  }
  /* The messages (re-run each to read its text; the last error is per call). */
  rr_all_reduce(pg, NULL, buf, 10, RR_FLOAT32, RR_SUM);
  T_HAS(rr_last_error(), who);
  T_HAS(rr_last_error(), "all_reduce");
  T_HAS(rr_last_error(), "sendbuf is NULL");
  rr_all_reduce(pg, buf, buf, 10, RR_FLOAT32, RR_BAND);
  T_HAS(rr_last_error(), "band");
  rr_broadcast(pg, buf, buf, 10, RR_FLOAT32, n + 3);
  T_HAS(rr_last_error(), "root");
  /* Nothing was sent: the next valid call is the first one every rank sees. */
  T_OK(rr_all_reduce(pg, buf, buf, 64, RR_FLOAT32, RR_SUM));
  for (int i = 0; i < 64; i++)
    T_CHECK(buf[i] == (float)(n * (n + 1) / 2), "element %d is %g after invalid calls", i, buf[i]);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

/* ---- mismatched calls: every rank fails, and every message shows both calls ---- */
typedef struct mm_case {
  const char *name;
  const char *a, *b;  /* substrings: both calls must appear in every rank's message */
  const char *absent; /* a hint that would blame the wrong thing (NULL: none) */
} mm_case;
static const mm_case mm_cases[] = {
    {"collective", "all_reduce #1", "broadcast #1", NULL},
    {"count", "(100 x float", "(101 x float", NULL},
    {"dtype", "x float,", "x double,", NULL},
    {"op", "float, sum", "float, max", NULL},
    {"root", "root 0", "root 1", NULL},
    {"reduce_root", "reduce #1 (100 x float, sum, root 0)", "root 2", NULL},
    {"seg_bytes", "RR_SEG_BYTES differs", "all_reduce", NULL},
    /* Counts on either side of RR_SMALL_BYTES pick different algorithms: the counts are
     * what differs, not a setting. */
    {"small_split", "(100 x float", "(100000 x float", "differs between the ranks"},
    /* The same call, but one rank's RR_SMALL_BYTES picks the ring. */
    {"small_bytes", "RR_ALGO or RR_SMALL_BYTES differs", "(1000 x float", "RR_SEG_BYTES"},
    /* Only the gather's root hears from the scatter's ranks; the others learn from it. */
    {"gather_scatter", "gather #1 (100 x float per rank, root 0)",
     "scatter #1 (100 x float per rank, root 0)", NULL},
    {"scatter_count", "scatter #1 (100 x float per rank, root 1)", "(101 x float per rank", NULL},
    {"all_to_all_count", "all_to_all #1 (100 x float per rank)", "(101 x float per rank)", NULL},
    /* One pair of an all_to_allv disagrees (1 -> 2); the ranks outside it must fail too. */
    {"all_to_allv_pair", "rank 1 sends 5 x float to rank 2 (its sendcounts[2])",
     "rank 2 expects 6 x float from rank 1 (its recvcounts[1])", NULL},
    /* A rank disagrees with itself about its own block. */
    {"all_to_allv_self", "rank 3 sends 6 x float to rank 3 (its sendcounts[3])",
     "rank 3 expects 5 x float from rank 3 (its recvcounts[3])", NULL},
};

/* The calls of the mismatch cases of gather, scatter and all_to_all(v). `odd` marks ranks 2
 * and 3, which make the other call. */
static int mismatch_more(rr_pg *pg, const char *m, int rank, int odd) {
  float *a = calloc(4 * 101, sizeof *a), *b = calloc(4 * 101, sizeof *b);
  size_t sc[4], sd[4], rc[4], rd[4];
  for (int j = 0; j < 4; j++) sc[j] = rc[j] = 5, sd[j] = rd[j] = 10 * (size_t)j;
  int st;
  if (!strcmp(m, "gather_scatter"))
    st = odd ? rr_scatter(pg, a, b, 100, RR_FLOAT32, 0) : rr_gather(pg, a, b, 100, RR_FLOAT32, 0);
  else if (!strcmp(m, "scatter_count"))
    st = rr_scatter(pg, a, b, odd ? 101 : 100, RR_FLOAT32, 1);
  else if (!strcmp(m, "all_to_all_count"))
    st = rr_all_to_all(pg, a, b, odd ? 101 : 100, RR_FLOAT32);
  else {
    if (!strcmp(m, "all_to_allv_pair") && rank == 2) rc[1] = 6;
    if (!strcmp(m, "all_to_allv_self") && rank == 3) sc[3] = 6;
    st = rr_all_to_allv(pg, a, sc, sd, b, rc, rd, RR_FLOAT32);
  }
  free(a);
  free(b);
  return st;
}

static int mismatch(int rank, void *arg) {
  const mm_case *mc = arg;
  if (!strcmp(mc->name, "seg_bytes") && rank == 2) setenv("RR_SEG_BYTES", "8192", 1);
  if (!strcmp(mc->name, "small_bytes") && rank == 2) setenv("RR_SMALL_BYTES", "1K", 1);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float x[101], y[101];
  double z[100];
  for (int i = 0; i < 101; i++) x[i] = (float)i;
  for (int i = 0; i < 100; i++) z[i] = i;
  /* Call #0 matches everywhere. But ranks leave a barrier at different times: one still
   * leaving it can be overtaken by the abort of ranks that already met the mismatch in
   * call #1, and then fails there, with that reason. */
  double t0 = t_now();
  int st = rr_barrier(pg);
  T_CHECK(st == RR_OK || st == RR_EMISMATCH, "barrier #0: %s: %s", rr_status_name(st),
          rr_last_error());
  const char *m = mc->name;
  int odd = rank >= 2; /* ranks 2 and 3 make the other call */
  if (st != RR_OK)
    ; /* overtaken: the barrier's status and message are checked as the call's */
  else if (!strcmp(m, "collective"))
    st = odd ? rr_broadcast(pg, x, y, 100, RR_FLOAT32, 0)
             : rr_all_reduce(pg, x, y, 100, RR_FLOAT32, RR_SUM);
  else if (!strcmp(m, "count"))
    st = rr_all_reduce(pg, x, y, odd ? 101 : 100, RR_FLOAT32, RR_SUM);
  else if (!strcmp(m, "dtype"))
    st = odd ? rr_all_reduce(pg, z, z, 100, RR_FLOAT64, RR_SUM)
             : rr_all_reduce(pg, x, y, 100, RR_FLOAT32, RR_SUM);
  else if (!strcmp(m, "op"))
    st = rr_all_reduce(pg, x, y, 100, RR_FLOAT32, odd ? RR_MAX : RR_SUM);
  else if (!strcmp(m, "root"))
    st = rr_broadcast(pg, x, y, 100, RR_FLOAT32, odd ? 1 : 0);
  else if (!strcmp(m, "reduce_root"))
    st = rr_reduce(pg, x, y, 100, RR_FLOAT32, RR_SUM, rank == 3 ? 2 : 0);
  else if (!strncmp(m, "gather", 6) || !strncmp(m, "scatter", 7) || !strncmp(m, "all_to_all", 10))
    st = mismatch_more(pg, m, rank, odd);
  else if (!strcmp(m, "small_split") || !strcmp(m, "small_bytes")) {
    size_t count = !strcmp(m, "small_bytes") ? 1000 : odd ? 100000 : 100;
    float *v = calloc(count, sizeof *v);
    st = rr_all_reduce(pg, v, v, count, RR_FLOAT32, RR_SUM);
    free(v);
  } else { /* seg_bytes: one rank cuts segments differently; a (segmented) ring must notice */
    float *big = calloc(1 << 18, sizeof *big);
    st = rr_all_reduce(pg, big, big, 1 << 18, RR_FLOAT32, RR_SUM);
    free(big);
  }
  double dt = t_now() - t0;
  const char *e = rr_last_error();
  T_CHECK(st == RR_EMISMATCH, "status %s, want RR_EMISMATCH: %s", rr_status_name(st), e);
  T_HAS(e, "mismatched calls");
  T_HAS(e, mc->a);
  T_HAS(e, mc->b);
  if (mc->absent) T_CHECK(!strstr(e, mc->absent), "the message blames '%s': %s", mc->absent, e);
  T_CHECK(dt < 5.0, "took %.1f s to report the mismatch", dt);
  /* The group is unusable now, and says why. */
  st = rr_barrier(pg);
  T_CHECK(st == RR_EABORTED, "next call returned %s", rr_status_name(st));
  T_HAS(rr_last_error(), "mismatched calls");
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- arguments only one rank's role can get wrong: every rank fails in that call ---- */
typedef struct role_case {
  const char *name;
  int bad_rank;       /* the rank whose arguments are wrong */
  const char *reason; /* what its refusal says */
} role_case;
static const role_case role_cases[] = {
    {"broadcast_root_overlap", 0, "overlap without being in place"},
    {"reduce_root_null", 2, "recvbuf is NULL"},
    {"all_gather_offset", 1, "in place is sendbuf == recvbuf + rank*count"},
};

static int role_args(int rank, void *arg) {
  const role_case *rc = arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int n = rr_get_world_size(pg);
  float buf[4 * 64] = {0};
  double t0 = t_now();
  /* The bad rank's abort names the call it refused: a rank still leaving this barrier
   * completes it (role_race checks that 40 times over). */
  int st = rr_barrier(pg);
  T_CHECK(st == RR_OK, "barrier #0: %s: %s", rr_status_name(st), rr_last_error());
  const int bad = rank == rc->bad_rank;
  if (!strcmp(rc->name, "broadcast_root_overlap")) /* the root's buffers overlap */
    st = rr_broadcast(pg, buf, bad ? buf + 1 : buf, 64, RR_FLOAT32, 0);
  else if (!strcmp(rc->name, "reduce_root_null")) /* only the root needs a recvbuf */
    st = rr_reduce(pg, buf, NULL, 64, RR_FLOAT32, RR_SUM, 2);
  else /* "in place" at offset 0, right only for rank 0 */
    st = rr_all_gather(pg, bad ? buf : buf + rank * 64, buf, 64, RR_FLOAT32);
  double dt = t_now() - t0;
  const char *e = rr_last_error();
  T_CHECK(st == RR_EINVAL, "status %s, want RR_EINVAL: %s", rr_status_name(st), e);
  char who[64];
  snprintf(who, sizeof who, "rank %d: %s", rc->bad_rank,
           !strncmp(rc->name, "broadcast", 9) ? "broadcast"
           : !strncmp(rc->name, "reduce", 6)  ? "reduce"
                                              : "all_gather");
  T_HAS(e, who);
  T_HAS(e, rc->reason);
  if (!bad) T_HAS(e, "aborted the group");
  T_CHECK(dt < 5.0, "took %.1f s to fail", dt);
  (void)n;
  rr_destroy_process_group(pg);
  return 0;
}

/* ---- the barrier race (issue 22, item 4): a barrier on a fresh subgroup, then rank 0
 * refuses its part of a broadcast on it. Every other rank must complete the barrier and
 * fail in the broadcast, naming rank 0: before the abort carried the number of the call it
 * belongs to, a rank still in the barrier when rank 0's abort arrived failed the barrier
 * with the broadcast's reason (2 of 40 trials at 4 ranks with RR_SPIN_US=0). ---- */
#define RACE_TRIALS 40
static int role_race(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *world;
  T_OK(rr_init_process_group(&world, NULL));
  int n = rr_get_world_size(world), ranks[16];
  for (int i = 0; i < n; i++) ranks[i] = i;
  float buf[64] = {0};
  int wrong = 0;
  for (int trial = 0; trial < RACE_TRIALS; trial++) {
    rr_pg *pg;
    T_OK(rr_new_group(world, ranks, n, 0, &pg));
    int st = rr_barrier(pg);
    if (st != RR_OK) {
      fprintf(stderr, "rank %d trial %d: the barrier failed: %s\n", rank, trial, rr_last_error());
      wrong++;
    } else {
      st = rr_broadcast(pg, buf, rank == 0 ? buf + 1 : buf, 32, RR_FLOAT32, 0);
      T_CHECK(st == RR_EINVAL, "trial %d: broadcast %s: %s", trial, rr_status_name(st),
              rr_last_error());
      T_HAS(rr_last_error(), "rank 0: broadcast");
    }
    rr_destroy_process_group(pg);
    /* Line the ranks up again on the world, which the subgroup's abort left alone. */
    T_OK(rr_barrier(world));
  }
  T_CHECK(wrong == 0, "%d of %d barriers failed with the next call's reason", wrong, RACE_TRIALS);
  T_OK(rr_destroy_process_group(world));
  return 0;
}

/* ---- gather, scatter, all_to_all(v): what each rank refuses alone, then the rooted calls'
 * role checks, which fail every rank ---- */
#define T_REFUSED(call, needle)                                                             \
  do {                                                                                      \
    int st_ = (call);                                                                       \
    T_CHECK(st_ == RR_EINVAL, "%s: status %s, want RR_EINVAL", #call, rr_status_name(st_)); \
    T_HAS(rr_last_error(), needle);                                                         \
  } while (0)

static int coll_args_local(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int n = rr_get_world_size(pg);
  float buf[4 * 64] = {0}, *out = buf + 2 * 64;
  size_t sc[3], sd[3], rc[3], rd[3], huge[3];
  for (int j = 0; j < 3; j++)
    sc[j] = rc[j] = 4, sd[j] = rd[j] = 4 * (size_t)j, huge[j] = SIZE_MAX / 8;
  char who[32];
  snprintf(who, sizeof who, "rank %d: all_to_allv", rank);
  T_REFUSED(rr_all_to_all(pg, buf, buf, 4, RR_FLOAT32), "not possible for all_to_all");
  T_REFUSED(rr_all_to_all(pg, buf, buf + 2, 4, RR_FLOAT32), "overlap");
  T_REFUSED(rr_all_to_allv(pg, buf, NULL, sd, out, rc, rd, RR_FLOAT32),
            "sendcounts or sdispls is NULL");
  T_HAS(rr_last_error(), who);
  T_REFUSED(rr_all_to_allv(pg, buf, sc, sd, out, rc, NULL, RR_FLOAT32),
            "recvcounts or rdispls is NULL");
  T_REFUSED(rr_all_to_allv(pg, buf, huge, sd, out, rc, rd, RR_FLOAT32), "overflows");
  T_REFUSED(rr_all_to_allv(pg, buf, sc, sd, buf + 8, rc, rd, RR_FLOAT32),
            "not possible for all_to_allv");
  T_REFUSED(rr_all_to_allv(pg, NULL, sc, sd, out, rc, rd, RR_FLOAT32), "sendbuf is NULL");
  rd[1] = 2; /* block 1 would cover elements 2..5 of block 0's 0..3 */
  T_REFUSED(rr_all_to_allv(pg, buf, sc, sd, out, rc, rd, RR_FLOAT32),
            "recvbuf blocks 0 and 1 overlap");
  rd[1] = 4;
  T_REFUSED(rr_gather(pg, buf, out, 4, RR_FLOAT32, n + 1), "out of range");
  T_REFUSED(rr_scatter(pg, buf, out, 4, RR_FLOAT32, -2), "out of range");
  rr_work *w = (rr_work *)1;
  T_REFUSED(rr_all_to_all_async(pg, buf, out, 4, RR_FLOAT32, NULL), "work is NULL");
  T_REFUSED(rr_all_to_allv_async(pg, buf, NULL, sd, out, rc, rd, RR_FLOAT32, &w), "sendcounts");
  T_CHECK(w == NULL, "a refused async call must leave *work NULL");
  /* Nothing was sent: the next valid call is the first one every rank sees. Rank r's block
   * for rank j holds r*10 + j, in blocks of 4 with gaps between them on the receive side. */
  for (int j = 0; j < 3; j++) {
    rd[j] = 6 * (size_t)j;
    for (int e = 0; e < 4; e++) buf[4 * j + e] = (float)(rank * 10 + j);
  }
  for (int e = 0; e < 64; e++) out[e] = -1;
  T_OK(rr_all_to_allv(pg, buf, sc, sd, out, rc, rd, RR_FLOAT32));
  for (int i = 0; i < 3; i++)
    for (int e = 0; e < 6; e++) {
      float want = e < 4 ? (float)(i * 10 + rank) : -1;
      T_CHECK(out[6 * i + e] == want, "element %d of block %d is %g, want %g", e, i, out[6 * i + e],
              want);
    }
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

typedef struct rooted_case {
  const char *name;   /* "<gather|scatter>_<null|offset>" */
  int root;           /* the rank whose arguments are wrong */
  const char *reason; /* what its refusal says */
} rooted_case;
static const rooted_case rooted_cases[] = {
    {"gather_null", 1, "recvbuf is NULL"},
    {"gather_offset", 2, "in place is sendbuf == recvbuf + root*count"},
    {"scatter_null", 0, "sendbuf is NULL"},
    {"scatter_offset", 1, "in place is recvbuf == sendbuf + root*count"},
};

static int coll_args_rooted(int rank, void *arg) {
  const rooted_case *rc = arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  float buf[4 * 64] = {0};
  double t0 = t_now();
  /* As in mismatch(): a rank still leaving this barrier may be overtaken by the root's
   * abort, and then fails here with the root's reason. */
  int st = rr_barrier(pg);
  T_CHECK(st == RR_OK || st == RR_EINVAL, "barrier #0: %s: %s", rr_status_name(st),
          rr_last_error());
  const int gather = !strncmp(rc->name, "gather", 6), null = strstr(rc->name, "null") != NULL;
  const int bad = rank == rc->root;
  /* A correct call gathers from the tail of buf into its head, or scatters the head into
   * the tail. The root passes NULL for its side of the data instead, or both buffers at the
   * head: in place at offset 0, which is wrong for any root but 0. */
  float *head = buf, *tail = buf + 3 * 64;
  float *s = gather ? tail : head, *r = gather ? head : tail;
  if (bad && null) *(gather ? &r : &s) = NULL;
  if (bad && !null) s = r = head;
  if (st == RR_OK)
    st = gather ? rr_gather(pg, s, r, 64, RR_FLOAT32, rc->root)
                : rr_scatter(pg, s, r, 64, RR_FLOAT32, rc->root);
  double dt = t_now() - t0;
  const char *e = rr_last_error();
  T_CHECK(st == RR_EINVAL, "status %s, want RR_EINVAL: %s", rr_status_name(st), e);
  char who[64];
  snprintf(who, sizeof who, "rank %d: %s", rc->root, gather ? "gather" : "scatter");
  T_HAS(e, who);
  T_HAS(e, rc->reason);
  if (!bad) T_HAS(e, "aborted the group");
  T_CHECK(dt < 5.0, "took %.1f s to fail", dt);
  rr_destroy_process_group(pg);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <scenario>\n", argv[0]);
    return 2;
  }
  const char *s = argv[1];
  int codes[8], sigs[8];
  if (!strcmp(s, "invalid_args")) {
    return t_run_all(3, invalid_args, NULL, 60, s);
  }
  if (!strcmp(s, "mismatch")) {
    int bad = 0;
    for (size_t i = 0; i < sizeof mm_cases / sizeof mm_cases[0]; i++) {
      printf("mismatch: %s\n", mm_cases[i].name);
      fflush(stdout);
      if (t_run(4, mismatch, (void *)&mm_cases[i], NULL, 60, codes, sigs)) return 1;
      bad |= t_exits_ok(4, codes, sigs, mm_cases[i].name);
    }
    return bad;
  }
  if (!strcmp(s, "role_args")) {
    int bad = 0;
    for (size_t i = 0; i < sizeof role_cases / sizeof role_cases[0]; i++) {
      printf("role_args: %s\n", role_cases[i].name);
      fflush(stdout);
      if (t_run(3, role_args, (void *)&role_cases[i], NULL, 60, codes, sigs)) return 1;
      bad |= t_exits_ok(3, codes, sigs, role_cases[i].name);
    }
    return bad;
  }
  if (!strcmp(s, "role_race")) return t_run_all(4, role_race, NULL, 120, s);
  if (!strcmp(s, "coll_args")) {
    int bad = t_run_all(3, coll_args_local, NULL, 60, s);
    for (size_t i = 0; i < sizeof rooted_cases / sizeof rooted_cases[0]; i++) {
      printf("coll_args: %s\n", rooted_cases[i].name);
      fflush(stdout);
      if (t_run(3, coll_args_rooted, (void *)&rooted_cases[i], NULL, 60, codes, sigs)) return 1;
      bad |= t_exits_ok(3, codes, sigs, rooted_cases[i].name);
    }
    return bad;
  }
  fprintf(stderr, "unknown scenario %s\n", s);
  return 2;
}
