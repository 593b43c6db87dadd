/* Strangers in a failing rank's listen backlog (issue 38 item 3's audit of every listener):
 * a rank whose setup fails answers the higher ranks' greetings still waiting on its listener
 * with the reason, so they fail at once naming it. Those answers must not wait on strangers
 * one after another.
 *
 *   test_init_strangers   2 ranks. Rank 1 reads rank 0's record in the store (no job token:
 *                         anyone can) and opens 40 silent connections to rank 0's setup
 *                         listener, then joins with another RR_TRANSPORT, so rank 0's setup
 *                         fails ("RR_TRANSPORT differs") with the strangers in its backlog.
 *                         Rank 0 must report within 3 s of rank 1's arrival (answered one
 *                         after another, 200 ms each, it took 8 s and more). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/harness.h"

enum { STRANGERS = 40 };

/* Rank 0's setup address from its record: "... addr=IP:PORT ...". */
static int rank0_addr(struct sockaddr_in *sa) {
  rr_store *st;
  T_OK(rr_store_tcp("127.0.0.1", atoi(getenv("MASTER_PORT")), 0, 10000, &st));
  void *v = NULL;
  size_t n = 0;
  T_OK(rr_store_get(st, "rr/w/peer/0", &v, &n));
  char rec[600];
  snprintf(rec, sizeof rec, "%.*s", (int)n, (const char *)v);
  free(v);
  rr_store_free(st);
  char ip[64];
  int port = 0;
  const char *a = strstr(rec, " addr=");
  T_CHECK(a && sscanf(a, " addr=%63[^:]:%d", ip, &port) == 2, "no address in '%s'", rec);
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)port);
  T_CHECK(inet_pton(AF_INET, ip, &sa->sin_addr) == 1, "address '%s'", ip);
  return 0;
}

static int rank_main(int rank, void *arg) {
  (void)arg;
  if (rank == 1) {
    setenv("RR_TRANSPORT", "tcp", 1); /* before any library call: settings are read once */
    struct sockaddr_in sa;
    if (rank0_addr(&sa)) return 1;
    int fds[STRANGERS];
    for (int i = 0; i < STRANGERS; i++) {
      fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      T_CHECK(fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&sa, sizeof sa) == 0, "stranger %d",
              i);
    }
    /* The strangers are another process's, silent for 5 s: this rank fails and exits at
     * once too, and its exit must not close them. */
    pid_t holder = fork();
    T_CHECK(holder >= 0, "fork");
    if (holder == 0) {
      sleep(5);
      _exit(0);
    }
    for (int i = 0; i < STRANGERS; i++) close(fds[i]);
  }
  double t0 = t_now();
  rr_pg *pg = NULL;
  int st = rr_init_process_group(&pg, NULL);
  double dt = t_now() - t0;
  T_CHECK(st != RR_OK, "init succeeded with RR_TRANSPORT differing");
  T_HAS(rr_last_error(), "RR_TRANSPORT differs");
  if (rank == 0) printf("rank 0 failed %.2f s after it began: %s\n", dt, rr_last_error());
  /* Rank 0 began before rank 1 looked it up and connected its strangers (~0.1 s). */
  T_CHECK(dt < 3.0, "rank %d reported after %.1f s", rank, dt);
  return 0;
}

int main(void) {
  setenv("RR_TIMEOUT", "20", 1);
  unsetenv("RR_JOB_TOKEN");
  return t_run_all(2, rank_main, NULL, 60, "init_strangers");
}
