/* libFuzzer harness: the control-socket stream parser of a live group (transport/comm.c,
 * rr__read_ctl_msgs behind rr__comm_poll_ctl and rr__comm_wait).
 *
 * A 2-rank comm is made in-process with rr__comm_new (peer 1 is the last element of the peer
 * array, so ASan sees any write past its receive buffer); its control socket is one end of
 * a socketpair, and the input is what "peer 1" wrote on it: any number of ABORT / BYE
 * messages, garbage, a message cut short. Byte 0 of the input picks how the stream ends
 * (bit 0: the writer closes, i.e. the peer died or left; bit 1: read it through
 * rr__comm_wait instead of rr__comm_poll_ctl). The harness then checks the comm's state is
 * consistent: an abort has a status in the rr_status range and a printable,
 * NUL-terminated reason, and the group is either still healthy or aborted, never half. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"
#include "transport/comm.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_ASSERT(cond)                                                                     \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "fuzz_ctl_stream: %s:%d: invariant failed: %s\n", __FILE__, __LINE__, \
              #cond);                                                                       \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setenv("RR_DEBUG", "NONE", 1); /* aborts log a WARN each; keep the fuzzer's output clean */
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int close_after = data[0] & 1, via_wait = data[0] & 2;
  data++, size--;
  /* Larger than a socket buffer would need a writer thread; the parser's buffer is 1 KiB. */
  if (size > 64 * 1024) size = 64 * 1024;
  int sv[2];
  FZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  int big = 256 * 1024;
  (void)setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  (void)setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  FZ_ASSERT(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0);
  size_t off = 0;
  while (off < size) {
    ssize_t w = send(sv[1], data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0) break; /* buffer full: the parser sees a prefix, which is fine */
    off += (size_t)w;
  }
  if (close_after) close(sv[1]), sv[1] = -1;

  rr__comm *cm = NULL;
  FZ_ASSERT(rr__comm_new(0, 2, 0, &cm) == RR_OK);
  cm->no_bye = 1;
  for (int i = 0; i < 2; i++) cm->peers[i].info.global_rank = i;
  cm->peers[1].ctrl_fd = sv[0];
  if (via_wait) {
    int st = rr__comm_wait(cm, rr__now_ms(), NULL);
    FZ_ASSERT(st <= 0);
  } else {
    rr__comm_poll_ctl(cm);
  }
  /* Read again: a parser in a bad state would misbehave on the second pass. */
  rr__comm_poll_ctl(cm);

  int st = rr__comm_check(cm);
  if (atomic_load(&cm->aborted)) {
    FZ_ASSERT(st < 0 && st >= -1000);
    const char *why = rr_last_error();
    FZ_ASSERT(strlen(why) < RR__ERRMSG_MAX);
    for (const char *t = why; *t; t++) FZ_ASSERT(isprint((unsigned char)*t));
    FZ_ASSERT(strstr(why, "rank 1") != NULL);
  } else {
    FZ_ASSERT(st == RR_OK);
    /* Healthy means the peer said nothing wrong: no close without a goodbye. */
    FZ_ASSERT(cm->peers[1].ctrl_fd >= 0 || cm->peers[1].said_bye);
  }
  FZ_ASSERT(cm->peers[1].ctl_have <= sizeof cm->peers[1].ctl_buf);
  if (cm->peers[1].ctrl_fd < 0) sv[0] = -1; /* the comm closed it */
  rr__comm_free(cm);                        /* closes sv[0] if still open */
  if (sv[1] >= 0) close(sv[1]);
  return 0;
}
