/* Which TCP socket carries which bytes (transport/comm.c, rr__lane_for; docs/env.md,
 * RR_NSOCKS). With RR_NSOCKS = n >= 2 every data socket of a pair carries one direction:
 * segments from the lower rank to the higher on the even sockets, the way back on the odd
 * ones, spread over the n/2 of each (an odd last socket stays unused); message 0 (each
 * call's 48-byte header) stays on the first socket both ways. With n = 1 the one socket
 * carries both. A two-way lane made every send contend with the peer's incoming data for
 * the socket's lock (docs/performance.md, "One-way TCP sockets"), which no result check
 * would notice, so this test looks at the sockets themselves.
 *
 *   test_lanes <world>      (RR_TRANSPORT=tcp, RR_ALGO=ring and RR_NSOCKS set by CTest)
 *
 * Each rank runs ring all-reduces of int32 (every element checked exactly) and counts the
 * bytes each of its established TCP sockets sent and received meanwhile (TCP_INFO's
 * tcpi_bytes_sent and tcpi_bytes_received, Linux 4.19 and later). In a ring a rank sends
 * only to its right neighbour and receives only from its left, so it must find n/2 sockets
 * that sent (each at least 30% of the data sent), n/2 that received, and no socket that
 * carried more than header-sized traffic the other way; with n = 1, at world 2, one socket
 * that did both. The store and control sockets carry little and are not counted. */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tests/harness.h"

enum { MAX_FDS = 1024 };
/* Data a rank sends per call: 2(w-1)/w of 4 MiB, at least 2 MiB. Traffic above BIG is data;
 * headers, store and control messages stay far below SMALL over the few calls here. */
#define COUNT (1u << 20)
#define CALLS 6
#define BIG (1u << 20)
#define SMALL (64u << 10)

typedef struct sock_io {
  int open;
  uint64_t sent, recvd;
} sock_io;

/* The byte counters of every connected IPv4/IPv6 TCP socket of this process, by fd (any
 * state but listening: a peer that closed first leaves ours in CLOSE_WAIT). */
static void snapshot(sock_io *s) {
  for (int fd = 0; fd < MAX_FDS; fd++) {
    s[fd].open = 0;
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &al) != 0 ||
        (a.ss_family != AF_INET && a.ss_family != AF_INET6))
      continue;
    struct tcp_info ti;
    memset(&ti, 0, sizeof ti);
    socklen_t tl = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0 || ti.tcpi_state == 10 /* listen */)
      continue;
    /* An older kernel returns a shorter struct without the byte counters. */
    if (tl < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
      continue;
    s[fd] = (sock_io){1, ti.tcpi_bytes_sent, ti.tcpi_bytes_received};
  }
}

static int lanes(int rank, void *arg) {
  (void)arg;
  t_rank = rank;
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  const int w = rr_get_world_size(pg);
  const char *ns = getenv("RR_NSOCKS");
  const int nsocks = ns ? atoi(ns) : 2;
  T_CHECK(w >= 2 && nsocks >= 1, "world %d, RR_NSOCKS %d", w, nsocks);
  int32_t *buf = t_alloc(COUNT * sizeof *buf);
  const uint64_t seed = t_seed();

  /* Connections are made at init; one call first so that any lazily made ones exist too. */
  t_fill(buf, COUNT, RR_INT32, RR_SUM, seed, rank, 0);
  T_OK(rr_all_reduce(pg, buf, buf, COUNT, RR_INT32, RR_SUM));
  T_OK(rr_barrier(pg));
  static sock_io before[MAX_FDS], after[MAX_FDS];
  snapshot(before);
  for (int c = 0; c < CALLS; c++) {
    t_fill(buf, COUNT, RR_INT32, RR_SUM, seed, rank, 0);
    T_OK(rr_all_reduce(pg, buf, buf, COUNT, RR_INT32, RR_SUM));
    char what[64];
    snprintf(what, sizeof what, "all_reduce %d of %u int32", c, COUNT);
    T_CHECK(t_check_reduced(buf, COUNT, RR_INT32, RR_SUM, seed, w, 0, what) == 0, "%s", what);
  }
  /* Every rank's data has arrived once every rank has reached this barrier (whose own
   * headers are small). */
  T_OK(rr_barrier(pg));
  snapshot(after);
  T_OK(rr_barrier(pg)); /* no rank closes its sockets before every rank has counted */

  int senders = 0, receivers = 0, both = 0;
  uint64_t total_sent = 0, least_sent = UINT64_MAX;
  for (int fd = 0; fd < MAX_FDS; fd++) {
    if (!after[fd].open) continue;
    uint64_t s = after[fd].sent - (before[fd].open ? before[fd].sent : 0);
    uint64_t r = after[fd].recvd - (before[fd].open ? before[fd].recvd : 0);
    if (s > BIG && r > BIG) {
      both++;
      T_CHECK(nsocks == 1,
              "fd %d carried data both ways (%llu bytes sent, %llu received) with "
              "RR_NSOCKS=%d: lanes are meant to be one-way",
              fd, (unsigned long long)s, (unsigned long long)r, nsocks);
      continue;
    }
    if (s > BIG) {
      T_CHECK(r <= SMALL,
              "fd %d sent %llu bytes and received %llu: more than headers the other "
              "way",
              fd, (unsigned long long)s, (unsigned long long)r);
      senders++;
      total_sent += s;
      if (s < least_sent) least_sent = s;
    } else if (r > BIG) {
      T_CHECK(s <= SMALL,
              "fd %d received %llu bytes and sent %llu: more than headers the other "
              "way",
              fd, (unsigned long long)r, (unsigned long long)s);
      receivers++;
    }
  }
  if (nsocks == 1 && w == 2) {
    T_CHECK(both == 1 && senders == 0 && receivers == 0,
            "RR_NSOCKS=1 at world 2: want one socket carrying both ways, found %d (and %d "
            "sending, %d receiving only)",
            both, senders, receivers);
  } else {
    /* One peer sent to (the right neighbour), one received from (the left). */
    const int want = nsocks == 1 ? 1 : nsocks / 2;
    T_CHECK(senders == want && receivers == want,
            "RR_NSOCKS=%d at world %d: %d sockets sent data and %d received it, want %d each",
            nsocks, w, senders, receivers, want);
    if (want > 1)
      T_CHECK(least_sent * 10 >= total_sent * 3,
              "the data is not spread over the %d sending sockets: the least carried %llu of "
              "%llu bytes",
              want, (unsigned long long)least_sent, (unsigned long long)total_sent);
  }
  free(buf);
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2 || atoi(argv[1]) < 2) {
    fprintf(stderr, "usage: %s <world >= 2>\n", argv[0]);
    return 2;
  }
  t_seed_announce("lanes");
  rr_spawn_status st;
  if (rr_spawn(atoi(argv[1]), lanes, NULL, &st) != RR_OK) {
    fprintf(stderr, "FAILED: %s\n", rr_last_error());
    return 1;
  }
  return 0;
}
