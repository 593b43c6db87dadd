/*
 * rrun_setup_death — a worker for tests/test_rrun.sh whose rank DEAD dies while the group is
 * being set up (issue 38 item 6).
 *
 *   rrun_setup_death DEAD DELAY_MS [before|published]
 *
 * The first process of rank DEAD (RR_RANK_GENERATION unset or 0) sleeps DELAY_MS, so that the
 * other ranks are already waiting in the rendezvous, then
 *   before     kills itself with SIGKILL before it calls rr_init_process_group (the default);
 *   published  calls rr_init_process_group and kills itself with SIGKILL in its first attempt
 *              to connect to another rank: its record is in the store by then (the setup
 *              publishes it, reads everyone's and only then connects), so the others have
 *              it and wait for connections that never come. (This file's connect() stands in
 *              for the C library's in the whole program, the library's calls included; it
 *              passes every other call on, and the store's connections, to MASTER_PORT.)
 * Every other process, a replacement of rank DEAD in its place included (rrun --replace
 * starts one with RR_RANK_GENERATION=1), joins the job (env://), all-reduces
 * (rank + 1) * (i + 1) at element i of 1000 int64 values, checks the sum exactly and prints
 *   "rank R of W: all_reduce ok (generation G)"
 * then exits 0. A newcomer (RR_GROW_JOIN=1: a replacement that is to join a running group)
 * calls rr_pg_join at RR_GROW_ADDR and, joined, does the same. On an error it prints
 * "rank R: <where>: <rr_last_error()>" on stderr and exits 1.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "ringreduce/ringreduce.h"

static int g_die_at_connect; /* published: the dying process, once it calls init */

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : dflt;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
    if (errno != EINTR) break; /* a shorter wait only makes the test harder to pass */
  }
}

/* A stream connection to a port other than the store's: the setup connecting to a peer. */
int connect(int fd, const struct sockaddr *addr, socklen_t len) {
  if (g_die_at_connect && addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6)) {
    int type = 0;
    socklen_t tl = sizeof type;
    in_port_t port = addr->sa_family == AF_INET ? ((const struct sockaddr_in *)addr)->sin_port
                                                : ((const struct sockaddr_in6 *)addr)->sin6_port;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM &&
        ntohs(port) != (int)env_long("MASTER_PORT", 0))
      raise(SIGKILL); /* cannot be caught: a death as the issue describes it */
  }
  return (int)syscall(SYS_connect, fd, addr, len);
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: rrun_setup_death DEAD DELAY_MS [before|published]\n");
    return 2;
  }
  long dead = strtol(argv[1], NULL, 10), delay = strtol(argv[2], NULL, 10);
  int published = argc == 4 && strcmp(argv[3], "published") == 0;
  long rank = env_long("RANK", -1), gen = env_long("RR_RANK_GENERATION", 0);
  int joiner = env_long("RR_GROW_JOIN", 0) == 1;
  if (rank == dead && gen == 0 && !joiner) {
    sleep_ms(delay);
    if (!published) raise(SIGKILL); /* cannot be caught: a death as the issue describes it */
    g_die_at_connect = 1;
  }
  rr_pg *pg;
  if (joiner ? rr_pg_join(getenv("RR_GROW_ADDR"), NULL, &pg) != RR_OK
             : rr_init_process_group(&pg, NULL) != RR_OK) {
    fprintf(stderr, "rank %ld: %s: %s\n", rank, joiner ? "rr_pg_join" : "rr_init_process_group",
            rr_last_error());
    return 1;
  }
  int r = rr_get_rank(pg), world = rr_get_world_size(pg);
  enum { N = 1000 };
  static int64_t v[N];
  for (int i = 0; i < N; i++) v[i] = (int64_t)(r + 1) * (i + 1);
  if (rr_all_reduce(pg, v, v, N, RR_INT64, RR_SUM) != RR_OK) {
    fprintf(stderr, "rank %d: rr_all_reduce: %s\n", r, rr_last_error());
    return 1;
  }
  int wrong = 0;
  for (int i = 0; i < N; i++) {
    int64_t want = (int64_t)world * (world + 1) / 2 * (i + 1);
    if (v[i] != want && wrong++ < 5)
      fprintf(stderr, "rank %d: element %d is %lld, expected %lld\n", r, i, (long long)v[i],
              (long long)want);
  }
  if (rr_destroy_process_group(pg) != RR_OK) {
    fprintf(stderr, "rank %d: rr_destroy_process_group: %s\n", r, rr_last_error());
    return 1;
  }
  if (wrong) return 1;
  if (printf("rank %d of %d: all_reduce ok (generation %ld)\n", r, world, gen) < 0 ||
      fflush(stdout) != 0)
    return 1;
  return 0;
}
