/* Interface selection (RR_SOCKET_IFNAME, NCCL syntax): the internal filter rr__if_match and
 * chooser rr__if_select as units, then whole groups whose data sockets must land on the
 * interface asked for, and a spec that matches nothing failing init with a clear message.
 *
 *   test_ifname <match|select|nomatch|group_lo|group_nonlo> */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"
#include "transport/socket.h"

/* ---- rr__if_match ---- */
static int match(void) {
  static const struct {
    const char *spec, *ifname;
    int want;
  } cases[] = {
      /* empty: everything */
      {NULL, "eth0", 1},
      {"", "eth0", 1},
      {"", "lo", 1},
      /* prefixes */
      {"eth", "eth0", 1},
      {"eth", "eth10", 1},
      {"eth", "ib0", 0},
      {"eth", "veth0", 0},
      {"eth0", "eth", 0},
      {"eth0", "eth0", 1},
      {"eth0", "eth01", 1},
      {"lo", "lo", 1},
      {"eth,ib", "ib0", 1},
      {"eth,ib", "eth1", 1},
      {"eth,ib", "lo", 0},
      {"eth,,ib", "ib3", 1},
      {"docker,eth,", "eth2", 1},
      /* ^ excludes */
      {"^eth", "eth0", 0},
      {"^eth", "lo", 1},
      {"^eth", "ib0", 1},
      {"^docker,lo", "lo", 0},
      {"^docker,lo", "docker0", 0},
      {"^docker,lo", "eth0", 1},
      {"^", "eth0", 1},
      /* = exact */
      {"=eth0", "eth0", 1},
      {"=eth0", "eth01", 0},
      {"=eth0", "eth", 0},
      {"=eth", "eth0", 0},
      {"=eth0,ib0", "ib0", 1},
      {"=eth0,ib0", "ib01", 0},
      {"=lo", "lo", 1},
      {"=lo", "lo0", 0},
      /* ^= exact exclude */
      {"^=eth0", "eth0", 0},
      {"^=eth0", "eth01", 1},
      {"^=eth0", "lo", 1},
      {"^=lo,eth0", "lo", 0},
      {"^=lo,eth0", "eth0", 0},
      {"^=lo,eth0", "eth00", 1},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int got = rr__if_match(cases[i].spec, cases[i].ifname);
    if (!got != !cases[i].want) {
      fprintf(stderr, "rr__if_match(\"%s\", \"%s\") = %d, want %d\n",
              cases[i].spec ? cases[i].spec : "(null)", cases[i].ifname, got, cases[i].want);
      bad++;
    }
  }
  T_CHECK(!bad, "%d of %zu rr__if_match cases wrong", bad, sizeof cases / sizeof cases[0]);
  printf("match: %zu cases ok\n", sizeof cases / sizeof cases[0]);
  return 0;
}

/* ---- rr__if_select ---- */
/* The first up, non-loopback interface with an IPv4 address (name, address, netmask). */
static int first_nonlo(char *name, size_t n, struct in_addr *addr, struct in_addr *mask) {
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) return 0;
  int found = 0;
  for (struct ifaddrs *i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
        (i->ifa_flags & IFF_LOOPBACK) || !i->ifa_netmask)
      continue;
    snprintf(name, n, "%s", i->ifa_name);
    *addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
    *mask = ((struct sockaddr_in *)i->ifa_netmask)->sin_addr;
    found = 1;
  }
  freeifaddrs(list);
  return found;
}

static int select_case(const char *spec, const char *hint_host, const char *want_ip,
                       const char *want_if, int want_loopback) {
  rr__addr hint, out;
  memset(&out, 0x5a, sizeof out);
  if (hint_host) T_OK(rr__addr_resolve(hint_host, 29500, &hint));
  char ifname[64] = "";
  T_OK(rr__if_select(spec, hint_host ? &hint : NULL, &out, ifname, sizeof ifname));
  char s[RR__ADDRSTRLEN];
  rr__addr_str(&out, s, sizeof s);
  T_CHECK(rr__addr_port(&out) == 0, "spec '%s': port %d, want 0", spec ? spec : "",
          rr__addr_port(&out));
  if (want_ip) {
    char w[RR__ADDRSTRLEN];
    snprintf(w, sizeof w, "%s:0", want_ip);
    T_CHECK(!strcmp(s, w), "spec '%s' hint %s: picked %s (%s), want %s", spec ? spec : "",
            hint_host ? hint_host : "none", s, ifname, w);
  }
  if (want_if)
    T_CHECK(!strcmp(ifname, want_if), "spec '%s': interface %s, want %s", spec ? spec : "", ifname,
            want_if);
  if (want_loopback >= 0)
    T_CHECK(rr__addr_is_loopback(&out) == want_loopback,
            "spec '%s' hint %s: picked %s (%s), loopback %d", spec ? spec : "",
            hint_host ? hint_host : "none", s, ifname, want_loopback);
  printf("select: spec '%s' hint %s -> %s (%s)\n", spec ? spec : "", hint_host ? hint_host : "none",
         s, ifname);
  return 0;
}

static int select_(void) {
  /* Loopback by name, prefix or exact, with or without a hint: IPv4 first. */
  if (select_case("lo", NULL, "127.0.0.1", "lo", 1)) return 1;
  if (select_case("=lo", NULL, "127.0.0.1", "lo", 1)) return 1;
  if (select_case("lo", "127.0.0.1", "127.0.0.1", "lo", 1)) return 1;
  /* No spec: a loopback master keeps a one-host job on loopback. */
  if (select_case(NULL, "127.0.0.1", "127.0.0.1", "lo", 1)) return 1;
  if (select_case("", "127.0.0.1", "127.0.0.1", "lo", 1)) return 1;
  char name[64];
  struct in_addr addr, mask;
  if (first_nonlo(name, sizeof name, &addr, &mask)) {
    char ip[INET_ADDRSTRLEN], other[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr, ip, sizeof ip);
    /* Another host of the same subnet as the master: the interface on that subnet. */
    struct in_addr peer = {.s_addr = (addr.s_addr & mask.s_addr) | (~mask.s_addr & htonl(7))};
    if (peer.s_addr == addr.s_addr)
      peer.s_addr = (addr.s_addr & mask.s_addr) | (~mask.s_addr & htonl(9));
    inet_ntop(AF_INET, &peer, other, sizeof other);
    if (select_case(NULL, other, ip, name, 0)) return 1;
    /* ^lo: anything but loopback. */
    if (select_case("^lo", NULL, NULL, NULL, 0)) return 1;
    /* The exact name; and a spec wins over the hint. */
    char exact[80];
    snprintf(exact, sizeof exact, "=%s", name);
    if (select_case(exact, "127.0.0.1", ip, name, 0)) return 1;
    if (select_case("lo", other, "127.0.0.1", "lo", 1)) return 1;
    /* No hint, no spec: a non-loopback interface. */
    if (select_case(NULL, NULL, NULL, NULL, 0)) return 1;
  } else {
    /* Only loopback here: ^lo must fail, naming the spec. */
    rr__addr out;
    int st = rr__if_select("^lo", NULL, &out, NULL, 0);
    T_CHECK(st == RR_EADDR, "^lo with only loopback: %s", rr_status_name(st));
    T_HAS(rr_last_error(), "^lo");
    printf("select: no non-loopback interface; ^lo fails as it should\n");
  }
  /* An IPv6 loopback master, when lo has ::1: the IPv6 address of lo. */
  rr__addr h6;
  if (rr__addr_resolve("::1", 1, &h6) == RR_OK) {
    struct ifaddrs *list = NULL, *i;
    int has6 = 0;
    if (getifaddrs(&list) == 0) {
      for (i = list; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET6 && (i->ifa_flags & IFF_LOOPBACK))
          has6 = 1;
      freeifaddrs(list);
    }
    if (has6 && select_case(NULL, "::1", "[::1]", "lo", 1)) return 1;
  }
  /* Nothing matches: RR_EADDR naming the spec and the variable. */
  const char *none[] = {"rr_no_such_if", "=l", "=lo0"};
  for (size_t k = 0; k < sizeof none / sizeof none[0]; k++) {
    rr__addr out;
    int st = rr__if_select(none[k], NULL, &out, NULL, 0);
    T_CHECK(st == RR_EADDR, "spec '%s': %s", none[k], rr_status_name(st));
    T_HAS(rr_last_error(), none[k]);
    T_HAS(rr_last_error(), "RR_SOCKET_IFNAME");
  }
  printf("select: ok\n");
  return 0;
}

/* ---- groups ---- */
typedef struct garg {
  const char *spec;    /* RR_SOCKET_IFNAME */
  const char *want_ip; /* the data address expected in the log, "" to skip */
  const char *want_if;
  const char *master; /* MASTER_ADDR; NULL: t_run's 127.0.0.1 */
  char tag[64];
} garg;

/* Every rank must say what is wrong, fast, even one that starts after rank 0 (which hosts
 * the store) has already failed: the interface is a local matter, so it can be checked
 * before the rendezvous. */
static int nomatch_rank(int rank, void *p) {
  (void)p;
  setenv("RR_SOCKET_IFNAME", "rr_nosuch_if0", 1);
  setenv("RR_TIMEOUT", "10", 1);
  if (rank > 0) usleep(300000);
  rr_pg *pg = (rr_pg *)1;
  double t0 = t_now();
  int st = rr_init_process_group(&pg, NULL);
  double dt = t_now() - t0;
  T_CHECK(st != RR_OK && pg == NULL, "init with RR_SOCKET_IFNAME matching nothing: %s",
          rr_status_name(st));
  T_CHECK(st == RR_EADDR, "status %s, want RR_EADDR: %s", rr_status_name(st), rr_last_error());
  T_HAS(rr_last_error(), "RR_SOCKET_IFNAME");
  T_HAS(rr_last_error(), "rr_nosuch_if0");
  char me[32];
  snprintf(me, sizeof me, "rank %d", rank);
  T_HAS(rr_last_error(), me);
  T_CHECK(dt < 10.0, "took %.1f s to fail (RR_TIMEOUT=60)", dt);
  if (rank == 0) printf("nomatch: %s\n", rr_last_error());
  return 0;
}

static int group_rank(int rank, void *p) {
  garg *g = p;
  char logp[128];
  snprintf(logp, sizeof logp, "/tmp/%s-rank%d.log", g->tag, rank);
  unlink(logp);
  setenv("RR_SOCKET_IFNAME", g->spec, 1);
  if (g->master) setenv("MASTER_ADDR", g->master, 1);
  setenv("RR_DEBUG", "INFO", 1);
  setenv("RR_DEBUG_SUBSYS", "INIT", 1);
  setenv("RR_DEBUG_FILE", logp, 1);
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  int n = rr_get_world_size(pg);
  float x[1000];
  t_fill(x, 1000, RR_FLOAT32, RR_SUM, 3, rank, 0);
  T_OK(rr_all_reduce(pg, x, x, 1000, RR_FLOAT32, RR_SUM));
  size_t wrong = t_check_reduced(x, 1000, RR_FLOAT32, RR_SUM, 3, n, 0, "all_reduce");
  T_CHECK(!wrong, "%zu wrong", wrong);
  int64_t y[64], all[16 * 64];
  T_CHECK(n <= 16, "world too big");
  t_fill(y, 64, RR_INT64, RR_SUM, 4, rank, 0);
  memset(all, 0xa5, sizeof all);
  T_OK(rr_all_gather(pg, y, all, 64, RR_INT64));
  for (int q = 0; q < n; q++)
    wrong += t_check_copied(all + 64 * q, 64, RR_INT64, RR_SUM, 4, q, 0, "all_gather");
  T_CHECK(!wrong, "all_gather: %zu wrong", wrong);
  T_OK(rr_destroy_process_group(pg));
  FILE *f = fopen(logp, "r");
  T_CHECK(f != NULL, "no log %s", logp);
  char line[1024], want[160];
  snprintf(want, sizeof want, "listening on %s:", g->want_ip);
  char want_if[80];
  snprintf(want_if, sizeof want_if, "(%s)", g->want_if);
  int seen = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "listening on")) {
      T_CHECK(strstr(line, want) && strstr(line, want_if), "data sockets not on %s %s: %s",
              g->want_ip, want_if, line);
      seen++;
    }
  fclose(f);
  unlink(logp);
  T_CHECK(seen == 1, "%d 'listening on' lines in %s", seen, logp);
  return 0;
}

static int run_all(int n, int (*fn)(int, void *), void *a) {
  int rc = t_run_all(n, fn, a, 45, NULL);
  if (fn == group_rank) /* a failed rank leaves its log behind */
    for (int r = 0; r < n; r++) {
      char logp[128];
      snprintf(logp, sizeof logp, "/tmp/%s-rank%d.log", ((garg *)a)->tag, r);
      unlink(logp);
    }
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <match|select|nomatch|group_lo|group_nonlo>\n", argv[0]);
    return 2;
  }
  const char *s = argv[1];
  if (!strcmp(s, "match")) return match();
  if (!strcmp(s, "select")) return select_();
  if (!strcmp(s, "nomatch")) return run_all(3, nomatch_rank, NULL);
  garg g = {0};
  snprintf(g.tag, sizeof g.tag, "rr-test-ifname-%d", (int)getpid());
  if (!strcmp(s, "group_lo")) {
    /* Both spellings of loopback. The master is on the non-loopback interface when there
     * is one, where the data would go without RR_SOCKET_IFNAME (the master's subnet). */
    static char name[64], ip[INET_ADDRSTRLEN];
    struct in_addr addr, mask;
    if (first_nonlo(name, sizeof name, &addr, &mask)) {
      inet_ntop(AF_INET, &addr, ip, sizeof ip);
      g.master = ip;
    } else {
      printf("no non-loopback interface: the master is on loopback too\n");
    }
    g.spec = "lo", g.want_ip = "127.0.0.1", g.want_if = "lo";
    snprintf(g.tag, sizeof g.tag, "rr-test-ifname-%d-a", (int)getpid());
    if (run_all(3, group_rank, &g)) return 1;
    g.spec = "=lo";
    snprintf(g.tag, sizeof g.tag, "rr-test-ifname-%d-b", (int)getpid());
    if (run_all(3, group_rank, &g)) return 1;
    printf("group_lo: master on %s, data on 127.0.0.1 (lo): ok\n",
           g.master ? g.master : "127.0.0.1");
    return 0;
  }
  if (!strcmp(s, "group_nonlo")) {
    /* The store stays on 127.0.0.1; the data sockets go where RR_SOCKET_IFNAME says. */
    static char name[64], spec[80], ip[INET_ADDRSTRLEN];
    struct in_addr addr, mask;
    if (!first_nonlo(name, sizeof name, &addr, &mask)) {
      printf("skipped: no up, non-loopback IPv4 interface\n");
      return 77;
    }
    inet_ntop(AF_INET, &addr, ip, sizeof ip);
    snprintf(spec, sizeof spec, "=%s", name);
    g = (garg){spec, ip, name, NULL, ""};
    snprintf(g.tag, sizeof g.tag, "rr-test-ifname-%d-c", (int)getpid());
    if (run_all(3, group_rank, &g)) return 1;
    printf("group_nonlo: data on %s (%s): ok\n", ip, name);
    return 0;
  }
  fprintf(stderr, "unknown scenario %s\n", s);
  return 2;
}
