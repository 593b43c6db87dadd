/* A stranger on the job's ports (issue 38, items 2 and 3): another local process without
 * RR_JOB_TOKEN that finds the group's listening sockets (as anyone can, in /proc/net/tcp)
 * and connects to them. The attacker here runs as the same user: nothing it does needs more
 * (binding a port a listener let go, connecting, staying silent; it finds the ports as
 * `ss -lt` does), so no root is needed.
 *
 *   test_stranger <scenario>
 *
 * grow_knock   world 3 with a job token polls rr_pg_grow_pending at every step while a
 *              stranger connects to the growth's port every few milliseconds (a bare
 *              connect, one that stays silent, garbage, a store client without the token)
 *              and a process with another token tries rr_pg_join: no step may see a
 *              newcomer waiting (before the fix, one connect started a growth nobody joined),
 *              and the steps stay fast; the intruder is refused naming the token. Then the
 *              rightful newcomer comes while the stranger holds a silent connection on
 *              every listener of every process (the growth's store and the grown group's
 *              setup included): it is seen and joins, and the grown group works.
 * grow_squat   world 3, a squatter process of the same user. (1) It holds a port before the
 *              group ever listens there: rr_pg_grow_pending says "nobody" and succeeds (it
 *              failed with RR_EADDR, which killed the C elastic job). (2) A growth nobody
 *              comes to: the port is not let go, the squatter cannot bind it (before the fix
 *              it could, and every later poll failed). (3) A newcomer joins; the old group
 *              is destroyed; the port is still held (by the grown group's rank 0).
 * shrink       world 6 over TCP, one rank killed by SIGKILL; the survivors shrink while the
 *              stranger connects to every socket they listen on and says nothing (init's,
 *              the store's and the shrink's data ports alike). Every survivor must get the
 *              group of the 5, well inside one timeout (before the fix a silent stranger
 *              first in the queue used up the step and the pair failed). 2 trials.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/harness.h"

#define S_MAXP 8
#define S_RETRY 75 /* exit code: the job could not start (a port taken); run it again */
#define S_HELD 256 /* connections the stranger keeps open */

typedef struct stranger_case {
  int world;      /* members */
  int victim;     /* shrink: the rank killed */
  char addr[64];  /* where the group grows */
  char addr2[64]; /* grow_squat: a port the squatter holds first */
  volatile int pids[S_MAXP];
  volatile int phase;          /* the members' progress, for the stranger and the newcomer */
  volatile int squat1, squat2; /* grow_squat: 1 the squatter bound the port, -1 it could not */
  volatile int done;           /* processes finished with the group */
  volatile int stop;           /* the stranger may go */
  volatile int failed;         /* a member failed: the helpers stop waiting for it */
  volatile int joined;         /* shrink: members whose init returned */
} stranger_case;

static stranger_case *sc;

/* ---- the stranger's tools ---- */

/* Wait until the members reach phase p (bounded: a member that failed never will). */
static int wait_phase(int p) {
  for (double end = t_now() + 30; sc->phase < p; usleep(500))
    if (sc->failed || t_now() > end) return 0;
  return 1;
}

/* Join the job as member id of a world of n (the other processes of the run are not in it). */
static int join_world(rr_pg **pg, int id, int n) {
  rr_pg_options o = RR_PG_OPTIONS_INIT;
  o.rank = id;
  o.world_size = n;
  return rr_init_process_group(pg, &o);
}

static int port_of(const char *addr) {
  return atoi(strrchr(addr, ':') + 1);
}

/* A non-blocking connect to ip:port (127.0.0.1 for the wildcard); the descriptor, or -1. */
static int poke(uint32_t ip_be, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = ip_be ? ip_be : htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

/* The inodes of the sockets the target processes hold. */
static int socket_inodes(unsigned long *ino, int max) {
  int n = 0;
  for (int p = 0; p < S_MAXP; p++) {
    if (!sc->pids[p]) continue;
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", sc->pids[p]);
    DIR *d = opendir(dir);
    if (!d) continue; /* gone */
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
      char path[320], link[64];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      ssize_t l = readlink(path, link, sizeof link - 1);
      if (l <= 0) continue;
      link[l] = '\0';
      unsigned long i;
      if (sscanf(link, "socket:[%lu]", &i) == 1) ino[n++] = i;
    }
    closedir(d);
  }
  return n;
}

/* One look at the host's listening TCP sockets, as `ss -lt` takes it (sock_diag over
 * netlink: what /proc/net/tcp shows, the attacker's source, without the thousands of
 * other sockets a busy test machine lists there): every one of the targets' that it has not
 * met yet gets a connection that then says nothing. Returns the number of new ones. */
static int attack_new_listeners(unsigned long *met, int *nmet, int *held, int *nheld) {
  unsigned long ino[1024];
  int ni = socket_inodes(ino, 1024), found = 0;
  if (ni == 0) return 0;
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return 0;
  struct {
    struct nlmsghdr h;
    struct inet_diag_req_v2 r;
  } req = {.h = {.nlmsg_len = sizeof req,
                 .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
           .r = {.sdiag_family = AF_INET,
                 .sdiag_protocol = IPPROTO_TCP,
                 .idiag_states = 1u << 10 /* TCP_LISTEN */}};
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  if (sendto(nl, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
    close(nl);
    return 0;
  }
  static char buf[1 << 16];
  for (int done = 0; !done;) {
    ssize_t n = recv(nl, buf, sizeof buf, 0);
    if (n <= 0) break;
    for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
        done = 1;
        break;
      }
      const struct inet_diag_msg *m = NLMSG_DATA(h);
      unsigned long inode = m->idiag_inode;
      int mine = 0, seen = 0;
      for (int i = 0; i < ni && !mine; i++) mine = ino[i] == inode;
      for (int i = 0; i < *nmet && !seen; i++) seen = met[i] == inode;
      if (!mine || seen || *nmet >= 4096) continue;
      met[(*nmet)++] = inode;
      found++;
      if (*nheld < S_HELD) {
        int fd = poke(m->id.idiag_src[0], ntohs(m->id.idiag_sport));
        if (fd >= 0) held[(*nheld)++] = fd;
      }
    }
  }
  close(nl);
  return found;
}

/* Until sc->stop (or `seconds`): a silent connection on every listener the targets open.
 * slow >= 0: the stranger is given the time a loaded machine would give it. Process
 * `slow`, the highest rank, which only connects and never listens in the setups of init, of
 * the shrink and of the grown group, is kept stopped (SIGSTOP) but for 0.2 ms in every cycle of two
 * looks at the listeners: every lower rank's listener that waits for it is then seen before it
 * connects. Without this the stranger here seldom looks in time: a shrink takes
 * milliseconds on an idle machine. */
static int silent_attacker(double seconds, int slow) {
  static unsigned long met[4096];
  static int held[S_HELD];
  int nmet = 0, nheld = 0, found = 0, cycles = 0, at_init = -1;
  for (double end = t_now() + seconds; !sc->stop && !sc->failed && t_now() < end;) {
    if (at_init < 0 && sc->world && sc->joined == sc->world) at_init = found;
    int stopped = slow >= 0 && sc->pids[slow] && kill(sc->pids[slow], SIGSTOP) == 0;
    found += attack_new_listeners(met, &nmet, held, &nheld);
    if (!stopped) continue;
    found += attack_new_listeners(met, &nmet, held, &nheld);
    if (kill(sc->pids[slow], SIGCONT) != 0) perror("kill(SIGCONT)");
    cycles++;
    usleep(200);
  }
  printf(
      "stranger: %d listeners found (%d before every member's init returned), %d silent "
      "connections held (%d cycles with process %d stopped)\n",
      found, at_init, nheld, cycles, slow);
  for (int i = 0; i < nheld; i++) close(held[i]);
  return 0;
}

/* ---- grow_knock ---- */

/* What strangers do to the growth's port, in turn, every few ms until phase 2. */
static void pester(int port, int round, int *silent, int *nsilent) {
  int fd = poke(0, port);
  if (fd < 0) return;
  switch (round % 4) {
    case 0: /* connect and go */
      close(fd);
      break;
    case 1: /* connect and stay silent */
      if (*nsilent < S_HELD)
        silent[(*nsilent)++] = fd;
      else
        close(fd);
      break;
    case 2: { /* garbage, once the connection is up */
      usleep(2000);
      char junk[64];
      memset(junk, 'x', sizeof junk);
      if (send(fd, junk, sizeof junk, MSG_NOSIGNAL) < 0) {
        /* refused or closed already: a stranger does not care */
      }
      close(fd);
      break;
    }
    default: { /* a store client without the token (the public API) */
      close(fd);
      rr_store *s = NULL;
      char host[32];
      snprintf(host, sizeof host, "127.0.0.1");
      if (rr_store_tcp(host, port, 0, 300, &s) == RR_OK) rr_store_free(s);
      break;
    }
  }
}

static int knock_member(int id) {
  rr_pg *pg, *np = NULL;
  if (join_world(&pg, id, 3) != RR_OK) return S_RETRY;
  int waiting = 0;
  T_OK(rr_pg_grow_pending(pg, sc->addr, &waiting)); /* rank 0 listens from here */
  T_CHECK(!waiting, "a newcomer before anyone came");
  if (id == 0) sc->phase = 1;
  /* Only strangers until rank 0 says stop (it tells the others inside the step's sum, so
   * all leave at the same step). Each step is a tiny all_reduce, a poll and a 2 ms pause. */
  double t0 = t_now();
  int steps = 0;
  for (int32_t x[2] = {0, 0}; !x[1]; steps++) {
    if (id == 0 && t_now() - t0 >= 0.6 && sc->phase < 2) sc->phase = 2;
    x[0] = id + 1;
    x[1] = id == 0 && sc->phase >= 3;
    T_OK(rr_all_reduce(pg, x, x, 2, RR_INT32, RR_SUM));
    T_CHECK(x[0] == 6, "step %d: sum %d", steps, (int)x[0]);
    T_OK(rr_pg_grow_pending(pg, sc->addr, &waiting));
    T_CHECK(!waiting, "step %d: a stranger passed for a newcomer (none has come)", steps);
    usleep(2000);
    T_CHECK(t_now() - t0 < 20, "the strangers' phase did not end");
  }
  double per = (t_now() - t0) / steps;
  if (id == 0) printf("strangers' phase: %d steps, %.2f ms each\n", steps, per * 1e3);
  /* A growth started by a stranger takes the members' wait (seconds); a step here is a few
   * ms, 50 allows for a loaded machine and the sanitizers. */
  T_CHECK(per < 0.05, "a step took %.1f ms on average with strangers about", per * 1e3);
  /* The rightful newcomer knocks; every member sees it at one step and they grow. */
  if (id == 0) sc->phase = 4;
  for (steps = 0; !waiting; steps++) {
    T_CHECK(steps < 5000, "the newcomer was never seen");
    T_OK(rr_pg_grow_pending(pg, sc->addr, &waiting));
    if (!waiting) usleep(2000);
  }
  T_OK(rr_pg_grow(pg, sc->addr, 1, 0, 0, &np));
  int32_t r = rr_get_rank(np), all[4];
  T_CHECK(r == id, "member %d is rank %d of the grown group", id, (int)r);
  T_OK(rr_all_gather(np, &r, all, 1, RR_INT32));
  for (int i = 0; i < 4; i++) T_CHECK(all[i] == i, "rank %d says %d", i, (int)all[i]);
  T_OK(rr_barrier(np));
  T_OK(rr_destroy_process_group(np));
  T_OK(rr_destroy_process_group(pg));
  return 0;
}

static int knock_rank(int id, void *arg) {
  (void)arg;
  t_rank = id;
  if (id == 4) { /* the stranger, without the token */
    unsetenv("RR_JOB_TOKEN");
    if (!wait_phase(1)) return 0;
    int silent[S_HELD], nsilent = 0, round = 0;
    while (sc->phase < 2 && !sc->failed) {
      pester(port_of(sc->addr), round++, silent, &nsilent);
      usleep(3000);
    }
    /* Someone with another job's token tries to join: refused, naming the token. */
    setenv("RR_JOB_TOKEN", "another-job", 1);
    rr_pg_options o = RR_PG_OPTIONS_INIT;
    o.timeout_ms = 3000;
    rr_pg *np = (rr_pg *)&np;
    double t0 = t_now();
    int st = rr_pg_join(sc->addr, &o, &np);
    double dt = t_now() - t0;
    sc->phase = 3; /* the members may stop (before a check here fails) */
    T_CHECK(st != RR_OK && np == NULL, "another job's process joined: %s", rr_status_name(st));
    T_HAS(rr_last_error(), "token");
    T_CHECK(dt < 2.0, "the refusal took %.2f s", dt);
    printf("stranger: %d probes; the intruder refused after %.2f s: %s\n", round, dt,
           rr_last_error());
    for (int i = 0; i < nsilent; i++) close(silent[i]);
    return silent_attacker(30, 3); /* the newcomer: the highest rank of the grown group */
  }
  sc->pids[id] = (int)getpid();
  if (id == 3) { /* the rightful newcomer */
    if (!wait_phase(4)) return 1;
    rr_pg *np = NULL;
    T_OK(rr_pg_join(sc->addr, NULL, &np));
    int32_t r = rr_get_rank(np), all[4];
    T_CHECK(r == 3 && rr_get_world_size(np) == 4, "joined as %d of %d", (int)r,
            rr_get_world_size(np));
    T_OK(rr_all_gather(np, &r, all, 1, RR_INT32));
    for (int i = 0; i < 4; i++) T_CHECK(all[i] == i, "rank %d says %d", i, (int)all[i]);
    T_OK(rr_barrier(np));
    T_OK(rr_destroy_process_group(np));
    if (__atomic_add_fetch(&sc->done, 1, __ATOMIC_SEQ_CST) == 4) sc->stop = 1;
    return 0;
  }
  int rc = knock_member(id);
  if (rc)
    sc->failed = 1;
  else if (__atomic_add_fetch(&sc->done, 1, __ATOMIC_SEQ_CST) == 4)
    sc->stop = 1;
  return rc;
}

/* ---- grow_squat ---- */

/* Bind and listen on port (as any server would, SO_REUSEADDR); the descriptor or -1. */
static int squat(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Try to squat port for up to ms (the moment it is let go); the descriptor or -1. */
static int squat_for(int port, int ms) {
  for (double end = t_now() + ms / 1e3; t_now() < end; usleep(1000)) {
    int fd = squat(port);
    if (fd >= 0) return fd;
  }
  return -1;
}

static int squat_member(int id) {
  rr_pg *pg, *np = NULL;
  if (join_world(&pg, id, 3) != RR_OK) return S_RETRY;
  /* (1) Its port is someone else's: growing is optional, the job goes on. */
  for (int i = 0; i < 3; i++) {
    int waiting = -1;
    int st = rr_pg_grow_pending(pg, sc->addr2, &waiting);
    T_CHECK(st == RR_OK, "poll %d with the port squatted: %s: %s", i, rr_status_name(st),
            rr_last_error());
    T_CHECK(waiting == 0, "poll %d: waiting %d", i, waiting);
    int32_t x = 1;
    T_OK(rr_all_reduce(pg, &x, &x, 1, RR_INT32, RR_SUM));
    T_CHECK(x == 3, "sum %d", (int)x);
  }
  /* (2) A growth nobody comes to, on a port rank 0 listens on. */
  int waiting = 0;
  T_OK(rr_pg_grow_pending(pg, sc->addr, &waiting));
  int st = rr_pg_grow(pg, sc->addr, 1, 300, 0, &np);
  T_CHECK(st == RR_ETIMEDOUT && np == NULL, "a growth nobody came to: %s: %s", rr_status_name(st),
          rr_last_error());
  if (id == 0) sc->phase = 2;
  for (double end = t_now() + 20; sc->squat1 == 0 && t_now() < end;) usleep(1000);
  T_OK(rr_barrier(pg));
  st = rr_pg_grow_pending(pg, sc->addr, &waiting);
  if (id == 0)
    printf("after the failed growth: the squatter %s; the next poll: %s%s%s\n",
           sc->squat1 > 0 ? "bound the port" : "could not bind it", rr_status_name(st),
           st ? ": " : "", st ? rr_last_error() : "");
  T_CHECK(sc->squat1 < 0, "the growth's port was let go: another process bound it");
  T_CHECK(st == RR_OK && waiting == 0, "poll after the failed growth: %s: %s", rr_status_name(st),
          rr_last_error());
  /* (3) The newcomer comes; the grown group's rank 0 holds the port from then on. */
  if (id == 0) sc->phase = 3;
  for (int steps = 0; !waiting; steps++) {
    T_CHECK(steps < 5000, "the newcomer was never seen");
    T_OK(rr_pg_grow_pending(pg, sc->addr, &waiting));
    if (!waiting) usleep(2000);
  }
  T_OK(rr_pg_grow(pg, sc->addr, 1, 0, 0, &np));
  T_OK(rr_barrier(np));
  T_OK(rr_destroy_process_group(pg));
  T_OK(rr_barrier(np));
  if (id == 0) sc->phase = 4;
  for (double end = t_now() + 20; sc->squat2 == 0 && t_now() < end;) usleep(1000);
  T_CHECK(sc->squat2 < 0, "the port was let go when the old group went (squatter bound it)");
  if (id == 0) sc->phase = 5;
  T_OK(rr_barrier(np));
  T_OK(rr_destroy_process_group(np));
  return 0;
}

static int squat_rank(int id, void *arg) {
  (void)arg;
  t_rank = id;
  if (id == 3) { /* the squatter */
    unsetenv("RR_JOB_TOKEN");
    int first = squat(port_of(sc->addr2));
    sc->phase = 1; /* the members start */
    T_CHECK(first >= 0, "the squatter could not take a free port");
    int fd = -1, fd2 = -1;
    if (wait_phase(2)) fd = squat_for(port_of(sc->addr), 300); /* after the failed growth */
    sc->squat1 = fd >= 0 ? 1 : -1;
    if (wait_phase(4)) fd2 = squat_for(port_of(sc->addr), 200); /* after the old group went */
    sc->squat2 = fd2 >= 0 ? 1 : -1;
    for (double end = t_now() + 30; !sc->stop && !sc->failed && t_now() < end;) usleep(1000);
    if (fd >= 0) close(fd);
    if (fd2 >= 0) close(fd2);
    close(first);
    return 0;
  }
  if (id == 4) { /* the newcomer */
    if (!wait_phase(3)) return 1;
    rr_pg *np = NULL;
    T_OK(rr_pg_join(sc->addr, NULL, &np));
    T_OK(rr_barrier(np));
    T_OK(rr_barrier(np));
    if (!wait_phase(5)) return 1;
    T_OK(rr_barrier(np));
    T_OK(rr_destroy_process_group(np));
    return 0;
  }
  if (!wait_phase(1)) return 1;
  int rc = squat_member(id);
  if (rc)
    sc->failed = 1;
  else if (__atomic_add_fetch(&sc->done, 1, __ATOMIC_SEQ_CST) == 3)
    sc->stop = 1;
  return rc;
}

/* ---- shrink ---- */

static int shrink_member(int id) {
  rr_pg *pg, *np = NULL;
  if (join_world(&pg, id, sc->world) != RR_OK) {
    fprintf(stderr, "rank %d: joining the job: %s\n", id, rr_last_error());
    return S_RETRY;
  }
  __atomic_add_fetch(&sc->joined, 1, __ATOMIC_SEQ_CST);
  int32_t x[256];
  int st = RR_OK;
  for (int it = 0; st == RR_OK && it < 1000000; it++) {
    if (id == sc->victim && it == 3) raise(SIGKILL);
    for (int i = 0; i < 256; i++) x[i] = id;
    st = rr_all_reduce(pg, x, x, 256, RR_INT32, RR_SUM);
  }
  double t0 = t_now();
  st = rr_pg_shrink(pg, 0, &np);
  double dt = t_now() - t0;
  const char *to = getenv("RR_TIMEOUT");
  double timeout = to ? atof(to) : 30.0;
  T_CHECK(st == RR_OK, "shrink with a stranger about: %s: %s (after %.2f s)", rr_status_name(st),
          rr_last_error(), dt);
  T_CHECK(rr_get_world_size(np) == sc->world - 1, "a group of %d", rr_get_world_size(np));
  /* A shrink takes milliseconds; a stranger that held the setup for a step took a timeout. */
  T_CHECK(dt < 0.75 * timeout, "the shrink took %.2f s (the timeout is %.1f s)", dt, timeout);
  int k = rr_get_world_size(np);
  int32_t mine[S_MAXP], all[S_MAXP * S_MAXP];
  for (int i = 0; i < k; i++) mine[i] = rr_get_global_rank(np, i);
  T_OK(rr_all_gather(np, mine, all, (size_t)k, RR_INT32));
  for (int r = 0; r < k; r++)
    T_CHECK(!memcmp(all + r * k, mine, (size_t)k * sizeof *mine), "rank %d lists other members", r);
  int32_t sum = 0, v = id;
  for (int i = 0; i < k; i++) sum += mine[i];
  T_OK(rr_all_reduce(np, &v, &v, 1, RR_INT32, RR_SUM));
  T_CHECK(v == sum, "all_reduce on the shrunk group: %d, not %d", (int)v, (int)sum);
  T_OK(rr_barrier(np));
  T_OK(rr_destroy_process_group(np));
  (void)rr_destroy_process_group(pg);
  return 0;
}

static int shrink_rank(int id, void *arg) {
  (void)arg;
  t_rank = id;
  if (id == sc->world) { /* the stranger; it slows the highest survivor */
    int slow = sc->world - 1 == sc->victim ? sc->world - 2 : sc->world - 1;
    return silent_attacker(40, slow);
  }
  sc->pids[id] = (int)getpid();
  int rc = shrink_member(id);
  if (rc && rc != S_RETRY) sc->failed = 1;
  if (rc == S_RETRY)
    sc->stop = 1;
  else if (!rc && __atomic_add_fetch(&sc->done, 1, __ATOMIC_SEQ_CST) == sc->world - 1)
    sc->stop = 1;
  return rc;
}

static int run(const char *s, int nproc, int (*fn)(int, void *), int killed) {
  for (int attempt = 0; attempt < 5; attempt++) {
    stranger_case keep = *sc;
    memset(sc, 0, sizeof *sc);
    sc->world = keep.world;
    sc->victim = keep.victim;
    snprintf(sc->addr, sizeof sc->addr, "127.0.0.1:%d", t_free_port());
    snprintf(sc->addr2, sizeof sc->addr2, "127.0.0.1:%d", t_free_port());
    int codes[S_MAXP], sigs[S_MAXP], again = 0, bad = 0;
    if (t_run(nproc, fn, sc, NULL, 50, codes, sigs) != 0) {
      fprintf(stderr, "%s: timed out (a hang)\n", s);
      return 1;
    }
    for (int r = 0; r < nproc; r++) again |= codes[r] == S_RETRY;
    if (again) continue;
    for (int r = 0; r < nproc; r++)
      if (r == killed ? sigs[r] != SIGKILL : (codes[r] != 0 || sigs[r] != 0)) {
        fprintf(stderr, "%s: process %d: exit %d, signal %d\n", s, r, codes[r], sigs[r]);
        bad = 1;
      }
    return bad;
  }
  fprintf(stderr, "%s: the job could not start in 5 tries\n", s);
  return 1;
}

int main(int argc, char **argv) {
  const char *s = argc > 1 ? argv[1] : "";
  sc = mmap(NULL, sizeof *sc, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sc == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(sc, 0, sizeof *sc);
  sc->victim = -1;
  /* The members and the rightful newcomer hold the token; the stranger drops it. */
  setenv("RR_JOB_TOKEN", "stranger-test-job", 1);
  if (!strcmp(s, "grow_knock")) {
    sc->world = 3;
    return run(s, 5, knock_rank, -1);
  }
  if (!strcmp(s, "grow_squat")) {
    sc->world = 3;
    return run(s, 5, squat_rank, -1);
  }
  if (!strcmp(s, "shrink")) {
    t_seed_announce("test_stranger");
    uint64_t seed = t_seed();
    setenv("RR_TRANSPORT", "tcp", 1);
    int bad = 0;
    for (int trial = 0; trial < 2; trial++) {
      sc->world = 6;
      sc->victim = (int)(t_bits(seed, (uint64_t)trial, 0) % 6);
      printf("shrink trial %d: world 6, rank %d killed\n", trial, sc->victim);
      bad |= run(s, 7, shrink_rank, sc->victim);
    }
    return bad;
  }
  fprintf(stderr, "usage: test_stranger grow_knock|grow_squat|shrink\n");
  return 2;
}
