/* White-box: which cause a waiting rank reports when several things go wrong at once.
 *
 * A 3-rank comm is built in-process (rr__comm_new) as rank 0, with a real TCP lane to
 * peer 1 (a loopback pair through rr__tcp_transport) and control sockets to peers 1 and 2
 * (socket pairs, whose far ends the test plays). Then, before rank 0 looks:
 *   - peer 1's far end of the lane is closed with a reset (SO_LINGER 0), as when a rank
 *     that already failed exits with bytes unread: the near end reports ECONNRESET;
 *   - peer 2 either sent an ABORT with its reason ("abort"), or its control socket closed
 *     without a goodbye ("dead"): the real cause of the failure.
 * rank 0 must report that cause, not the reset link: a survivor that left is not the
 * culprit. The reset is seen two ways:
 *   lane_*    rank 0 has a receive posted on the lane: progress fails on it (rr__lane_error)
 *   sniff_*   rank 0 is not reading from peer 1 in this call, only sniffing its next header
 *             (rr__comm_wait's mismatch detection peeks at the lane)
 *
 *   test_rel_comm lane_abort | lane_dead | sniff_abort | sniff_dead */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"
#include "transport/comm.h"
#include "tests/harness.h"

/* A connected TCP pair on loopback: *near for the comm, *far for the test. */
static int tcp_pair(int *near_fd, int *far_fd) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  T_CHECK(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 1) == 0 &&
              getsockname(l, (struct sockaddr *)&a, &len) == 0,
          "listen: %s", strerror(errno));
  int c = socket(AF_INET, SOCK_STREAM, 0);
  T_CHECK(c >= 0 && connect(c, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
          strerror(errno));
  int s = accept(l, NULL, NULL);
  T_CHECK(s >= 0, "accept: %s", strerror(errno));
  close(l);
  *near_fd = c;
  *far_fd = s;
  return 0;
}

static int always_ok(void *ctx, int peer, const uint8_t hdr[RR__SNIFF_BYTES]) {
  (void)ctx, (void)peer, (void)hdr;
  return RR_OK;
}

static int scenario(int via_sniff, int peer2_dead) {
  t_rank = 0;
  rr__comm *cm = NULL;
  T_OK(rr__comm_new(0, 3, 0, &cm));
  for (int i = 0; i < 3; i++) cm->peers[i].info.global_rank = i;

  /* Peer 1: a TCP lane and a control socket. */
  int lane_near, lane_far, c1[2], c2[2];
  if (tcp_pair(&lane_near, &lane_far)) return 1;
  T_CHECK(
      socketpair(AF_UNIX, SOCK_STREAM, 0, c1) == 0 && socketpair(AF_UNIX, SOCK_STREAM, 0, c2) == 0,
      "socketpair");
  cm->peers[1].tp = &rr__tcp_transport;
  T_OK(rr__tcp_transport.connect(&cm->peers[0].info, &cm->peers[1].info, 1, &lane_near, 1, c1[0],
                                 rr__now_ms() + 1000, cm->peers[1].lane, RR__MAX_LANES,
                                 &cm->peers[1].nlanes));
  cm->peers[1].ctrl_fd = c1[0];
  cm->peers[2].ctrl_fd = c2[0];
  rr__comm_new_call(cm, 1, 0);

  uint8_t hdr[RR__SNIFF_BYTES];
  rr__req req = {.buf = (char *)hdr, .len = sizeof hdr};
  if (!via_sniff) T_OK(rr__comm_irecv(cm, 1, 0, &req));

  /* Peer 2 says why (or dies); then peer 1, which left because of it, resets the lane. */
  if (peer2_dead) {
    close(c2[1]);
  } else {
    const char *why = "rank 2: all_reduce #5 (1000 x float, sum, ring): timed out after 3.0 s";
    uint8_t msg[RR__CTL_FIXED + 128];
    rr__ctl c = {
        .type = RR__CTL_ABORT, .origin = 2, .status = RR_ETIMEDOUT, .len = (uint32_t)strlen(why)};
    rr__ctl_encode(&c, msg);
    memcpy(msg + RR__CTL_FIXED, why, c.len);
    T_CHECK(write(c2[1], msg, RR__CTL_FIXED + c.len) == (ssize_t)(RR__CTL_FIXED + c.len), "write");
  }
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  T_CHECK(setsockopt(lane_far, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0, "SO_LINGER");
  close(lane_far);
  usleep(20000);

  /* What a blocked collective does: progress, then wait (with header sniffing). */
  rr__sniff sn = {.seq = 7, .check = always_ok, .ctx = NULL};
  int st = RR_OK;
  for (int i = 0; i < 10 && st == RR_OK && !req.complete; i++) {
    size_t moved = 0;
    st = rr__comm_progress(cm, &moved);
    if (st == RR_OK) st = rr__comm_wait(cm, rr__now_ms() + 500, &sn);
  }
  const char *e = rr_last_error();
  printf("%s, peer 2 %s: %s: %s\n", via_sniff ? "sniffing" : "receiving",
         peer2_dead ? "died" : "aborted", rr_status_name(st), e);
  /* Checked after the comm is freed, so a failing run is not also a leak report. */
  int want = peer2_dead ? RR_EPEER : RR_ETIMEDOUT;
  const char *cause = peer2_dead ? "lost rank 2" : "rank 2 aborted the group";
  int ok_status = st == want, ok_cause = strstr(e, cause) != NULL;
  int blames_1 = strstr(e, "connection to rank 1") != NULL || strstr(e, "from rank 1") != NULL;
  char msg[RR__ERRMSG_MAX];
  snprintf(msg, sizeof msg, "%s", e);
  cm->no_bye = 1;
  rr__comm_free(cm);
  close(c1[1]);
  if (!peer2_dead) close(c2[1]);
  T_CHECK(ok_status, "status %s, want %s", rr_status_name(st), rr_status_name(want));
  T_CHECK(ok_cause, "message lacks '%s': %s", cause, msg);
  T_CHECK(!blames_1, "blames rank 1, which only left after the failure: %s", msg);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s lane_abort|lane_dead|sniff_abort|sniff_dead\n", argv[0]);
    return 2;
  }
  setenv("RR_DEBUG", "NONE", 1);
  const char *s = argv[1];
  if (!strcmp(s, "lane_abort")) return scenario(0, 0);
  if (!strcmp(s, "lane_dead")) return scenario(0, 1);
  if (!strcmp(s, "sniff_abort")) return scenario(1, 0);
  if (!strcmp(s, "sniff_dead")) return scenario(1, 1);
  fprintf(stderr, "unknown scenario %s\n", s);
  return 2;
}
