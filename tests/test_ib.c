/* The InfiniBand transport's own tests (the collective matrix over ib runs test_coll, see
 * tests/ib.cmake). Ranks are processes on this host; the fake verbs library
 * (tests/fake_ib/) carries their queue pairs. Where a case needs ranks to look like
 * different hosts it gives each its own RR_HOSTID (what two machines would publish), so
 * the automatic choice (shm on one host, ib between hosts) is the one exercised.
 *
 *   test_ib hca                 RR_IB_HCA matching (NCCL's syntax)
 *   test_ib auto                 2 "hosts" x 2 ranks: shm inside a host, ib between, results exact
 *   test_ib roce                 the fake port as RoCE: GID addressing, results exact
 *   test_ib fallback             no usable port (real libibverbs without a device, or
 *                                RR_IB_LIBRARY missing, or the fake's port down): tcp, and
 *                                RR_DEBUG=INFO says why; RR_TRANSPORT=ib then fails naming it
 *   test_ib fault <kind>         RR_FAKE_IB_FAULT=<kind>:N on rank 1: every rank's call
 *                                fails within the limit, naming a rank and the cause
 *                                (mute: the ACK timeout, or RR_TIMEOUT when no rank had a
 *                                write outstanding to the silent one)
 *
 * Everything is checked on every rank; data is random (t_fill) and reduced results exact
 * (int32 sums). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"
#include "transport/ib/ib.h"

static char t_dir[64];
static const char *t_kind = "";

/* This rank's RR_DEBUG=INFO log, whole. */
static char *read_log(int rank) {
  char path[128];
  snprintf(path, sizeof path, "%s/rank%d.log", t_dir, rank);
  FILE *f = fopen(path, "r");
  if (!f) return strdup("");
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strdup(buf);
}

static void log_to_file(int rank) {
  char path[128];
  snprintf(path, sizeof path, "%s/rank%d.log", t_dir, rank);
  setenv("RR_DEBUG", "INFO", 1);
  setenv("RR_DEBUG_SUBSYS", "INIT", 1);
  setenv("RR_DEBUG_FILE", path, 1);
}

/* One exact all-reduce of n int32 (several segments) and its check. */
static int reduce_once(rr_pg *pg, int world, size_t n, uint64_t salt) {
  int32_t *x = malloc(n * sizeof *x);
  T_CHECK(x != NULL, "out of memory");
  uint64_t seed = t_seed() + salt;
  t_fill(x, n, RR_INT32, RR_SUM, seed, t_rank, 0);
  T_OK(rr_all_reduce(pg, x, x, n, RR_INT32, RR_SUM));
  size_t bad = t_check_reduced(x, n, RR_INT32, RR_SUM, seed, world, 0, "all_reduce");
  free(x);
  T_CHECK(bad == 0, "%zu wrong elements", bad);
  return 0;
}

/* ---- hca ---- */
static int hca_case(void) {
  struct {
    const char *spec, *dev;
    int port, want;
  } c[] = {
      {"", "mlx5_0", 1, 1},           {"mlx5", "mlx5_0", 1, 1},      {"mlx5", "mlx4_0", 1, 0},
      {"mlx5_0:1", "mlx5_0", 1, 1},   {"mlx5_0:1", "mlx5_0", 2, 0},  {"=mlx5_0", "mlx5_01", 1, 0},
      {"=mlx5_0", "mlx5_0", 1, 1},    {"^mlx5_1", "mlx5_0", 1, 1},   {"^mlx5_1", "mlx5_1", 1, 0},
      {"^=mlx5", "mlx5_0", 1, 1},     {"^=mlx5_0", "mlx5_0", 1, 0},  {"a,mlx5_1:2", "mlx5_1", 2, 1},
      {"a,mlx5_1:2", "mlx5_1", 1, 0}, {"^mlx5_0:2", "mlx5_0", 1, 1}, {"^mlx5_0:2", "mlx5_0", 2, 0},
  };
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
    T_CHECK(rr__ib_hca_match(c[i].spec, c[i].dev, c[i].port) == c[i].want,
            "RR_IB_HCA='%s' on %s:%d should %s", c[i].spec, c[i].dev, c[i].port,
            c[i].want ? "match" : "not match");
  printf("hca: %zu cases\n", sizeof c / sizeof c[0]);
  return 0;
}

/* ---- auto: two hosts of two ranks ---- */
static int auto_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  char host[32];
  snprintf(host, sizeof host, "host%d", rank / 2);
  setenv("RR_HOSTID", host, 1);
  log_to_file(rank);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  for (int it = 0; it < 3; it++)
    if (reduce_once(pg, 4, 700000 + (size_t)it * 12345, (uint64_t)it)) return 1;
  rr_destroy_process_group(pg);
  char *log = read_log(rank);
  int mate = rank ^ 1;
  for (int p = 0; p < 4; p++) {
    if (p == rank) continue;
    char want[96];
    snprintf(want, sizeof want, "rank %d <-> rank %d over %s", rank, p, p == mate ? "shm" : "ib");
    T_HAS(log, want);
  }
  free(log);
  return 0;
}

/* ---- roce ---- */
static int roce_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  log_to_file(rank);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  if (reduce_once(pg, 3, 500000, 7)) return 1;
  rr_destroy_process_group(pg);
  char *log = read_log(rank);
  T_HAS(log, "(RoCE, GID index 2, MTU 1024");
  T_HAS(log, "over ib");
  free(log);
  return 0;
}

/* ---- fallback ---- */
static int fallback_rank(int rank, void *arg) {
  const char *why = arg;
  t_rank = rank;
  char host[32];
  snprintf(host, sizeof host, "host%d", rank);
  setenv("RR_HOSTID", host, 1);
  log_to_file(rank);
  rr_pg *pg;
  int forced = !strcmp(getenv("RR_TRANSPORT") ? getenv("RR_TRANSPORT") : "", "ib");
  int st = rr_init_process_group(&pg, NULL);
  if (forced) {
    /* Every rank refuses; a rank other than 0 may instead see the store (rank 0's) close
     * under it, when rank 0 refused first. */
    T_CHECK(st != RR_OK, "RR_TRANSPORT=ib without a port: the group formed");
    if (rank != 0 && st != RR_ENOTSUP) return 0;
    T_CHECK(st == RR_ENOTSUP, "RR_TRANSPORT=ib without a port: %s: %s", rr_status_name(st),
            rr_last_error());
    T_HAS(rr_last_error(), "RR_TRANSPORT=ib but rank");
    T_HAS(rr_last_error(), "has no usable InfiniBand port");
    return 0;
  }
  T_OK(st);
  if (reduce_once(pg, 2, 400000, 3)) return 1;
  rr_destroy_process_group(pg);
  char *log = read_log(rank);
  char want[64];
  snprintf(want, sizeof want, "rank %d <-> rank %d over tcp", rank, 1 - rank);
  T_HAS(log, want);
  T_HAS(log, "ib: not used: ");
  T_HAS(log, why);
  free(log);
  return 0;
}

/* ---- faults ---- */
static int fault_rank(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  char spec[64];
  /* Late enough that the group is up and calls are running. */
  snprintf(spec, sizeof spec, "%s:%d", t_kind, !strcmp(t_kind, "mute") ? 40 : 60);
  if (rank == 1) setenv("RR_FAKE_IB_FAULT", spec, 1);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  size_t n = 1 << 18;
  float *x = calloc(n, sizeof *x);
  T_CHECK(x != NULL, "out of memory");
  double t0 = t_now();
  int st = RR_OK;
  long it = 0;
  for (; it < 500 && st == RR_OK; it++) st = rr_all_reduce(pg, x, x, n, RR_FLOAT32, RR_SUM);
  double dt = t_now() - t0;
  const char *e = rr_last_error();
  T_CHECK(st != RR_OK, "no error after %ld calls", it);
  T_CHECK(dt < 30, "the error took %.1f s", dt);
  /* Whoever saw the completion error names its peer and the status; the rest hear it. */
  const char *cause =
      !strcmp(t_kind, "retry") || !strcmp(t_kind, "mute") || !strcmp(t_kind, "link_down")
          ? "retry counter exceeded"
      : !strcmp(t_kind, "flush") ? "flushed"
                                 : "remote access error";
  if (!strcmp(t_kind, "mute") && strstr(e, "timed out")) {
    /* A peer that stops answering is seen by the ACK timeout only by a rank with writes
     * outstanding to it; when every rank already waits to receive, the call timeout
     * (RR_TIMEOUT) names the silent one instead, as on hardware. */
    T_HAS(e, "waiting for");
  } else {
    T_HAS(e, cause);
    T_HAS(e, "ib: connection to rank ");
  }
  fprintf(stderr, "rank %d: %s after %ld calls, %.1f s: %s\n", rank, rr_status_name(st), it, dt, e);
  free(x);
  rr_destroy_process_group(pg);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s hca|auto|roce|fallback <why>|fault <kind>\n", argv[0]);
    return 2;
  }
  t_seed_announce(argv[1]);
  snprintf(t_dir, sizeof t_dir, "/tmp/rr-ib-XXXXXX");
  if (!mkdtemp(t_dir)) return perror("mkdtemp"), 1;
  int rc;
  if (!strcmp(argv[1], "hca")) {
    rc = hca_case();
  } else if (!strcmp(argv[1], "auto")) {
    rc = t_run_all(4, auto_rank, NULL, 240, "auto");
  } else if (!strcmp(argv[1], "roce")) {
    setenv("RR_FAKE_IB_ROCE", "1", 1);
    rc = t_run_all(3, roce_rank, NULL, 240, "roce");
  } else if (!strcmp(argv[1], "fallback") && argc > 2) {
    rc = t_run_all(2, fallback_rank, argv[2], 120, "fallback");
  } else if (!strcmp(argv[1], "fault") && argc > 2) {
    t_kind = argv[2];
    rc = t_run_all(3, fault_rank, NULL, 120, "fault");
  } else {
    fprintf(stderr, "unknown case %s\n", argv[1]);
    rc = 2;
  }
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf %s", t_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", t_dir);
  if (rc == 0) printf("ok\n");
  return rc;
}
