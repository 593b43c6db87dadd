/* A rank that dies between its shared-memory hello and its connect to the lower rank's socket
 * (the window issue 38 item 6's random kills hit in 5 of 11 trials): the lower rank must see
 * it at once on the pair's control socket, not wait out RR_TIMEOUT on the listener.
 *
 *   test_shm_death      2 ranks over shared memory; rank 1 is killed (SIGKILL, by itself)
 *                       inside connect() to rank 0's abstract shm socket. Rank 0's init must
 *                       fail within 5 s (RR_TIMEOUT=15) naming rank 1.
 *
 * The kill comes from this file's own connect(), which the library's call resolves to (a
 * definition in the executable comes first): it passes every other connect straight to the
 * kernel. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/harness.h"

static volatile int die_at_shm_connect;

int connect(int fd, const struct sockaddr *sa, socklen_t len) {
  const struct sockaddr_un *un = (const struct sockaddr_un *)(const void *)sa;
  static const char name[] = "ringreduce-shm/";
  if (die_at_shm_connect && sa && sa->sa_family == AF_UNIX && len > sizeof(sa_family_t) + 1 &&
      un->sun_path[0] == '\0' && !memcmp(un->sun_path + 1, name, sizeof name - 1))
    kill(getpid(), SIGKILL);
  return (int)syscall(SYS_connect, fd, sa, len);
}

static int rank_main(int rank, void *arg) {
  (void)arg;
  if (rank == 1) die_at_shm_connect = 1;
  rr_pg *pg = NULL;
  double t0 = t_now();
  int st = rr_init_process_group(&pg, NULL);
  double dt = t_now() - t0;
  T_CHECK(rank == 0, "rank 1 lived through its connect (status %s)", rr_status_name(st));
  T_CHECK(st != RR_OK && pg == NULL, "init succeeded without rank 1");
  T_HAS(rr_last_error(), "rank 1");
  T_CHECK(dt < 5.0, "rank 0 saw rank 1's death after %.1f s (RR_TIMEOUT=15): %s", dt,
          rr_last_error());
  printf("rank 0 after %.2f s: %s\n", dt, rr_last_error());
  return 0;
}

int main(void) {
  setenv("RR_TIMEOUT", "15", 1);
  setenv("RR_TRANSPORT", "shm", 1);
  int codes[2] = {0}, sigs[2] = {0};
  if (t_run(2, rank_main, NULL, NULL, 40, codes, sigs) != 0) return 1;
  if (codes[0] != 0) return 1;
  if (sigs[1] != SIGKILL) {
    fprintf(stderr, "rank 1 ended with exit %d signal %d, not killed in its connect\n", codes[1],
            sigs[1]);
    return 1;
  }
  return 0;
}
