/*
 * rrun_allreduce — a worker for tests/test_rrun.sh that really communicates: it joins the job
 * rrun describes (env://), all-reduces a buffer and checks the result exactly.
 *
 *   rrun_allreduce             run as a worker (RANK, WORLD_SIZE, MASTER_* from rrun)
 *   rrun_allreduce --free-port print a TCP port on 127.0.0.1 that was free just now
 *
 * Each rank contributes (rank + 1) * (i + 1) at element i of 1000 int64 values (SUM: exact),
 * then prints one line:
 *   "rank R of W: all_reduce ok, RR_JOB_TOKEN set|unset"
 * and exits 0; on any error or wrong element it says so on stderr and exits 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "ringreduce/ringreduce.h"
#include "tests/test_port.h"

/* A probed port below the kernel's ephemeral range (tests/test_port.h says why not port 0). */
static int free_port(void) {
  int port = rr_test_free_port();
  if (port < 0) {
    fprintf(stderr, "rrun_allreduce: no port in %d-%d could be bound on 127.0.0.1\n",
            RR_TEST_PORT_LO, RR_TEST_PORT_HI - 1);
    return 1;
  }
  if (printf("%d\n", port) < 0) return 1;
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--free-port") == 0) return free_port();
  if (argc != 1) {
    fprintf(stderr, "usage: rrun_allreduce [--free-port]\n");
    return 2;
  }
  rr_pg *pg;
  if (rr_init_process_group(&pg, NULL) != RR_OK) {
    fprintf(stderr, "rrun_allreduce: rr_init_process_group: %s\n", rr_last_error());
    return 1;
  }
  int rank = rr_get_rank(pg), world = rr_get_world_size(pg);
  enum { N = 1000 };
  static int64_t v[N];
  for (int i = 0; i < N; i++) v[i] = (int64_t)(rank + 1) * (i + 1);
  if (rr_all_reduce(pg, v, v, N, RR_INT64, RR_SUM) != RR_OK) {
    fprintf(stderr, "rrun_allreduce: rank %d: rr_all_reduce: %s\n", rank, rr_last_error());
    return 1;
  }
  int wrong = 0;
  for (int i = 0; i < N; i++) {
    int64_t want = (int64_t)world * (world + 1) / 2 * (i + 1);
    if (v[i] != want && wrong++ < 5)
      fprintf(stderr, "rrun_allreduce: rank %d: element %d is %lld, expected %lld\n", rank, i,
              (long long)v[i], (long long)want);
  }
  if (rr_destroy_process_group(pg) != RR_OK) {
    fprintf(stderr, "rrun_allreduce: rank %d: rr_destroy_process_group: %s\n", rank,
            rr_last_error());
    return 1;
  }
  if (wrong) return 1;
  const char *token = getenv("RR_JOB_TOKEN");
  if (printf("rank %d of %d: all_reduce ok, RR_JOB_TOKEN %s\n", rank, world,
             token && token[0] ? "set" : "unset") < 0 ||
      fflush(stdout) != 0)
    return 1;
  return 0;
}
