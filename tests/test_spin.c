/* The spin policy of a blocking wait (transport/comm.c, rr__comm_spin_policy and
 * rr__comm_block), as docs/env.md states it for RR_SPIN_US and RR_SPIN_YIELD:
 *
 *   auto        poll 50 us while this host's ranks fit its cores, else 100 us with a yield
 *               between polls; the cores are RR_HOST_CPUS where set, else this process's
 *   RR_SPIN_US  the time (0: sleep at once); RR_SPIN_YIELD the yield (0 or 1)
 *   adaptive    four misses in a row, and the next 64 waits sleep at once; the pause
 *               doubles (up to 4096) while spinning keeps failing
 *   inherit     a comm made of another's connections (a shrink) waits as that one decided
 *   device      a device call's waits spin but leave the back-off alone (issue 39 part 3)
 *
 * Each case runs in a child of its own: the library reads its settings once per process.
 * The comm is a group of one (no lanes), so a spin always misses and every wait times out
 * at once. White-box: it reads the comm's spin state, which only transport/comm.c writes. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "transport/comm.h"
#include "tests/harness.h"

typedef struct spin_case {
  const char *env[3]; /* "NAME=value", NULL-terminated */
  int local;          /* ranks on the host, as the setup tells the comm */
  int us, yield;      /* what the policy must decide (us -1: 50 or 100 by the yield) */
} spin_case;

static int one_case(const spin_case *k) {
  for (int i = 0; k->env[i]; i++) T_CHECK(putenv((char *)k->env[i]) == 0, "putenv");
  rr__comm *cm = NULL;
  T_OK(rr__comm_new(0, 1, 0, &cm));
  rr__comm_spin_policy(cm, k->local);
  T_CHECK(cm->spin.yield == k->yield, "yield %d, want %d", cm->spin.yield, k->yield);
  T_CHECK(cm->spin.us == k->us, "spin %d us, want %d", cm->spin.us, k->us);
  /* A spin that finds nothing is a miss; the fourth in a row makes the next 64 waits sleep
   * at once, and the fourth miss after those doubles the pause. A caller that does not
   * block on its call (may_spin 0) never spins, so it never counts. */
  int spins = k->us > 0;
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 4; i++) {
      T_CHECK(rr__comm_block(cm, 0, rr__now_ms(), NULL) == RR_ETIMEDOUT, "background wait");
      T_CHECK(rr__comm_block(cm, 1, rr__now_ms(), NULL) == RR_ETIMEDOUT, "blocking wait");
    }
    T_CHECK(cm->spin.skip == (spins ? 64 << round : 0), "after 4 misses: %d waits skip the spin",
            cm->spin.skip);
    for (int i = 0; spins && i < 64 << round; i++)
      T_CHECK(rr__comm_block(cm, 1, rr__now_ms(), NULL) == RR_ETIMEDOUT, "skipped wait");
    T_CHECK(cm->spin.skip == 0, "%d skips left", cm->spin.skip);
  }
  /* A device call's waits (RR__COMM_SPIN_DEVICE) spin, but neither count a miss nor use up
   * the pause host calls built: after 4 host misses (64 waits to sleep at once), 8 device
   * waits that all miss leave it as it was; from a clean state they start none. */
  if (spins) {
    for (int i = 0; i < 4; i++)
      T_CHECK(rr__comm_block(cm, 1, rr__now_ms(), NULL) == RR_ETIMEDOUT, "blocking wait");
    const int skip = cm->spin.skip, backoff = cm->spin.backoff;
    T_CHECK(skip > 0, "4 host misses set no pause");
    for (int i = 0; i < 8; i++)
      T_CHECK(rr__comm_block(cm, RR__COMM_SPIN_DEVICE, rr__now_ms(), NULL) == RR_ETIMEDOUT,
              "device wait");
    T_CHECK(cm->spin.skip == skip && cm->spin.backoff == backoff && cm->spin.miss == 0,
            "device waits changed the back-off: skip %d -> %d, backoff %d -> %d, miss %d", skip,
            cm->spin.skip, backoff, cm->spin.backoff, cm->spin.miss);
    rr__comm *fresh = NULL;
    T_OK(rr__comm_new(0, 1, 0, &fresh));
    rr__comm_spin_policy(fresh, k->local);
    for (int i = 0; i < 8; i++)
      T_CHECK(rr__comm_block(fresh, RR__COMM_SPIN_DEVICE, rr__now_ms(), NULL) == RR_ETIMEDOUT,
              "device wait");
    T_CHECK(fresh->spin.skip == 0 && fresh->spin.backoff == 0 && fresh->spin.miss == 0,
            "8 device waits that found nothing: skip %d backoff %d miss %d", fresh->spin.skip,
            fresh->spin.backoff, fresh->spin.miss);
    rr__comm_free(fresh);
  }
  /* A shrunk group's comm keeps the decision, not the back-off. */
  rr__comm *heir = NULL;
  T_OK(rr__comm_new(0, 1, 0, &heir));
  rr__comm_spin_inherit(heir, cm);
  T_CHECK(heir->spin.us == cm->spin.us && heir->spin.yield == cm->spin.yield &&
              heir->spin.skip == 0 && heir->spin.backoff == 0,
          "inherited %d us yield %d skip %d", heir->spin.us, heir->spin.yield, heir->spin.skip);
  rr__comm_free(heir);
  rr__comm_free(cm);
  return 0;
}

int main(void) {
  static const spin_case cases[] = {
      {{"RR_HOST_CPUS=4", NULL}, 4, 50, 0},
      {{"RR_HOST_CPUS=4", NULL}, 5, 100, 1},
      {{"RR_HOST_CPUS=2", "LOCAL_WORLD_SIZE=8", NULL},
       3,
       100,
       1}, /* the comm counts what it is told */
      {{"RR_SPIN_US=0", NULL}, 1, 0, 0},
      {{"RR_SPIN_US=7", "RR_HOST_CPUS=1", NULL}, 2, 7, 1},
      {{"RR_SPIN_YIELD=0", "RR_HOST_CPUS=1", NULL}, 4, 50, 0},
      {{"RR_SPIN_YIELD=1", "RR_HOST_CPUS=64", NULL}, 1, 100, 1},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(one_case(&cases[i]));
    int ws = 0;
    int ok = pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
    printf("case %zu (%s %s, %d rank(s) on the host): %s\n", i, cases[i].env[0],
           cases[i].env[1] ? cases[i].env[1] : "", cases[i].local, ok ? "ok" : "FAILED");
    bad |= !ok;
  }
  printf("test_spin: %s\n", bad ? "FAILED" : "passed");
  return bad;
}
