/* Port scans and junk during a running job. Four ranks run verified all-reduces in a loop
 * and, every few rounds, make a subgroup (a fresh bootstrap: every rank listens for setup
 * connections again) and reduce on it too; one rank arrives 1 s late each time, so the
 * others' setup listeners stay open long enough to be found. Meanwhile the parent process
 * attacks every TCP port the job's processes listen on (found the way a port scanner on
 * the host would: /proc/net/tcp{,6} listeners owned by the job's pids):
 *
 *   store port (MASTER_PORT)   random bytes; a handshake proving a wrong job token; requests before
 *                              HELLO; half-open connections held to the end; a request cut
 *                              after a few bytes and held; bursts of 50 connections; a slow
 *                              writer (one byte per second)
 *   setup listeners            random bytes; a forged greeting for every guessable group id
 *                              ("w.0".."w.7") whose proof is wrong (with a token) or whose
 *                              group is foreign (without); half-open connections; half a
 *                              greeting held; a flood of 100 connections; a slow writer
 *
 * Asserted: every rank finishes every round with exact results (integer sums), exit 0;
 * the attacker did reach the store and at least one setup listener; the refusals are in the
 * ranks' logs (RR_DEBUG_FILE, level WARN) with their reasons; with a token, the store
 * answered the wrong-token handshake with "denied" and no wrong token was ever accepted.
 *
 *   test_junk token      RR_JOB_TOKEN set in every rank (as rrun does)
 *   test_junk notoken    no token (the store and setup accept any well-formed peer; junk
 *                        must still be refused and the job must still finish) */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/siphash.h"
#include "rendezvous/store_proto.h"
#include "rendezvous/bootstrap.h"
#include "ring/hdr.h"
#include "transport/comm.h"
#include "tests/harness.h"

#define W 4
#define ROUNDS 96
#define SUBGROUP_EVERY 8
#define LATE_MS 1000 /* long enough for a scan under a loaded CI machine (300 ms flaked) */
#define MAXHELD 600

static const char *g_token = "junk-test-token-5f1c0d7e";
static int g_with_token;
static char g_logdir[256];

/* ---------------------------------------------------------------------------------------------
 * The job
 */
static int verify_reduce(rr_pg *pg, int size, uint64_t seed, size_t n, int32_t *buf) {
  t_fill(buf, n, RR_INT32, RR_SUM, seed, rr_get_rank(pg), 0);
  int st = rr_all_reduce(pg, buf, buf, n, RR_INT32, RR_SUM);
  if (st != RR_OK) return st;
  return t_check_reduced(buf, n, RR_INT32, RR_SUM, seed, size, 0, "all_reduce") ? RR_EPROTO : RR_OK;
}

static atomic_int *g_port_shared; /* rank 0 publishes MASTER_PORT here for the attacker */
static int g_silent_flood;        /* mode silent_flood: see main */
#include <sys/resource.h>

static int job_rank(int rank, void *arg) {
  (void)arg;
  if (g_with_token) setenv("RR_JOB_TOKEN", g_token, 1);
  if (g_silent_flood) {
    /* A common default limit; the flood below is larger than what is left of it. */
    struct rlimit rl = {256, 256};
    T_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit");
  }
  if (rank == 0) atomic_store(g_port_shared, atoi(getenv("MASTER_PORT")));
  rr_pg *pg;
  T_OK(rr_init_process_group(&pg, NULL));
  size_t maxn = 1 << 17;
  int32_t *buf = malloc(maxn * sizeof *buf);
  T_CHECK(buf != NULL, "out of memory");
  uint64_t seed = t_seed();
  for (int round = 0; round < ROUNDS; round++) {
    size_t n = 1 + t_bits(seed, 1, (uint64_t)round) % maxn;
    int st = verify_reduce(pg, W, t_bits(seed, 2, (uint64_t)round), n, buf);
    T_CHECK(st == RR_OK, "round %d: all_reduce of %zu: %s: %s", round, n, rr_status_name(st),
            st == RR_EPROTO ? "WRONG RESULT" : rr_last_error());
    if (round % SUBGROUP_EVERY == SUBGROUP_EVERY - 1) {
      /* A fresh bootstrap; one rank comes late so the others listen for a while. */
      if (rank == (round / SUBGROUP_EVERY) % W) usleep(LATE_MS * 1000);
      static const int all[W] = {0, 1, 2, 3};
      int sub_n = 2 + (round / SUBGROUP_EVERY) % (W - 1);
      rr_pg *sub = NULL;
      st = rr_new_group(pg, all, sub_n, 0, &sub);
      T_CHECK(st == RR_OK, "round %d: new_group: %s", round, rr_last_error());
      if (sub) {
        st = verify_reduce(sub, sub_n, t_bits(seed, 3, (uint64_t)round), 1000, buf);
        T_CHECK(st == RR_OK, "round %d: subgroup all_reduce: %s", round,
                st == RR_EPROTO ? "WRONG RESULT" : rr_last_error());
        T_OK(rr_destroy_process_group(sub));
      }
    }
  }
  T_OK(rr_barrier(pg));
  T_OK(rr_destroy_process_group(pg));
  free(buf);
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The attacker (parent process, several threads)
 */
static int g_pids[W];
static int g_store_port;
static atomic_int g_stop;
static atomic_int n_store_attacks, n_boot_ports, n_boot_attacks, n_denied, n_wrong_accepted;
static pthread_mutex_t g_held_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_held[MAXHELD], g_nheld;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static pthread_mutex_t g_rng_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t rnd(void) {
  pthread_mutex_lock(&g_rng_mu);
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  uint64_t v = g_rng;
  pthread_mutex_unlock(&g_rng_mu);
  return v;
}

static void hold(int fd) {
  pthread_mutex_lock(&g_held_mu);
  if (g_nheld < MAXHELD)
    g_held[g_nheld++] = fd;
  else
    close(fd);
  pthread_mutex_unlock(&g_held_mu);
}

static int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

static void send_nb(int fd, const void *p, size_t n) {
  (void)send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void junk(int port) {
  int fd = dial(port);
  if (fd < 0) return;
  uint8_t b[2048];
  size_t n = 1 + rnd() % sizeof b;
  for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
  send_nb(fd, b, n);
  usleep(2000);
  close(fd);
}

static size_t store_req(uint8_t *out, uint8_t op, int64_t num, const char *a, const char *b) {
  size_t la = strlen(a), lb = b ? strlen(b) : 0;
  rr__store_hdr h = {.magic = RR__STORE_REQ_MAGIC,
                     .op = op,
                     .nargs = b ? 2 : 1,
                     .body_len = (uint32_t)(4 + la + (b ? 4 + lb : 0)),
                     .num = num};
  rr__store_hdr_encode(&h, out);
  size_t o = RR__STORE_HDR;
  rr__put_u32(out + o, (uint32_t)la), o += 4;
  memcpy(out + o, a, la), o += la;
  if (b) {
    rr__put_u32(out + o, (uint32_t)lb), o += 4;
    memcpy(out + o, b, lb), o += lb;
  }
  return o;
}

/* Receive exactly n bytes within 2 s; 0 if they did not all come. */
static int recv_n(int fd, uint8_t *p, size_t n) {
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  size_t got = 0;
  while (got < n && poll(&pf, 1, 2000) > 0) {
    ssize_t k = recv(fd, p + got, n - got, 0);
    if (k <= 0) break;
    got += (size_t)k;
  }
  return got == n;
}

/* The whole handshake, but proving a token that is not the job's (MACs keyed with the wrong
 * key; the real token never crosses the wire). */
static void wrong_token_hello(int port) {
  int fd = dial(port);
  if (fd < 0) return;
  uint8_t b[256], r[RR__STORE_HDR], cn[RR__STORE_NONCE], ch[RR__STORE_NONCE + RR__STORE_MAC];
  for (size_t i = 0; i < sizeof cn; i++) cn[i] = (uint8_t)rnd();
  rr__store_hdr h = {.magic = RR__STORE_REQ_MAGIC,
                     .op = RR__SOP_HELLO,
                     .nargs = 1,
                     .body_len = 4 + RR__STORE_NONCE,
                     .num = RR__STORE_VERSION};
  rr__store_hdr_encode(&h, b);
  rr__put_u32(b + RR__STORE_HDR, RR__STORE_NONCE);
  memcpy(b + RR__STORE_HDR + 4, cn, RR__STORE_NONCE);
  send_nb(fd, b, RR__STORE_HDR + 4 + RR__STORE_NONCE);
  if (recv_n(fd, r, sizeof r) && recv_n(fd, ch, sizeof ch)) {
    uint8_t key[16];
    rr__token_key("not-the-job-token", key);
    h = (rr__store_hdr){.magic = RR__STORE_REQ_MAGIC,
                        .op = RR__SOP_AUTH,
                        .nargs = 1,
                        .body_len = 4 + RR__STORE_MAC};
    rr__store_hdr_encode(&h, b);
    rr__put_u32(b + RR__STORE_HDR, RR__STORE_MAC);
    rr__store_mac(key, 2, cn, ch, b + RR__STORE_HDR + 4);
    send_nb(fd, b, RR__STORE_HDR + 4 + RR__STORE_MAC);
    if (recv_n(fd, r, sizeof r)) {
      rr__store_hdr_decode(r, &h);
      if (h.status == RR__SST_DENIED)
        atomic_fetch_add(&n_denied, 1);
      else if (g_with_token)
        atomic_fetch_add(&n_wrong_accepted, 1);
    }
  }
  close(fd);
}

static void store_attack(int i) {
  int port = g_store_port;
  uint8_t b[256];
  switch (i % 6) {
    case 0:
      junk(port);
      break;
    case 1:
      wrong_token_hello(port);
      break;
    case 2: { /* a request before the handshake */
      int fd = dial(port);
      if (fd < 0) break;
      size_t n = store_req(b, RR__SOP_SET, 0, "rr/w/peer/0",
                           "global=0 pid=1 nsocks=1 addr=1.2.3.4:5 host=x");
      send_nb(fd, b, n);
      usleep(2000);
      close(fd);
      break;
    }
    case 3: { /* half-open, held */
      int fd = dial(port);
      if (fd >= 0) hold(fd);
      break;
    }
    case 4: { /* a request cut after ten bytes, held */
      int fd = dial(port);
      if (fd < 0) break;
      size_t n = store_req(b, RR__SOP_HELLO, RR__STORE_VERSION, "x", NULL);
      send_nb(fd, b, n < 10 ? n : 10);
      hold(fd);
      break;
    }
    default: /* a burst of connections, closed at once */
      for (int k = 0; k < 50; k++) {
        int fd = dial(port);
        if (fd >= 0) close(fd);
      }
  }
  atomic_fetch_add(&n_store_attacks, 1);
}

/* Slow writers: one byte per second, to the store and to each setup listener found. */
typedef struct slow {
  int fd;
  uint8_t msg[RR__HELLO_BYTES];
  size_t len;
} slow;
static slow g_slow[64];
static int g_nslow;
static pthread_mutex_t g_slow_mu = PTHREAD_MUTEX_INITIALIZER;

static void add_slow(int port, const uint8_t *msg, size_t len) {
  int fd = dial(port);
  if (fd < 0) return;
  pthread_mutex_lock(&g_slow_mu);
  if (g_nslow < 64) {
    g_slow[g_nslow].fd = fd;
    memcpy(g_slow[g_nslow].msg, msg, len);
    g_slow[g_nslow++].len = len;
  } else {
    close(fd);
  }
  pthread_mutex_unlock(&g_slow_mu);
}

static void *slow_main(void *arg) {
  (void)arg;
  for (int sec = 0; !atomic_load(&g_stop); sec++) {
    pthread_mutex_lock(&g_slow_mu);
    for (int i = 0; i < g_nslow; i++)
      if ((size_t)sec < g_slow[i].len) send_nb(g_slow[i].fd, &g_slow[i].msg[sec], 1);
    pthread_mutex_unlock(&g_slow_mu);
    for (int k = 0; k < 100 && !atomic_load(&g_stop); k++) usleep(10000);
  }
  return NULL;
}

static void *store_main(void *arg) {
  (void)arg;
  uint8_t b[256];
  size_t n = store_req(b, RR__SOP_HELLO, RR__STORE_VERSION, g_token, NULL);
  add_slow(g_store_port, b, n);
  for (int i = 0; !atomic_load(&g_stop); i++) {
    store_attack(i);
    usleep(5000);
  }
  return NULL;
}

/* ---- finding the job's listeners, as a scanner on the host would ---- */
static int sock_inodes(int pid, unsigned long *out, int max) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd", pid);
  DIR *d = opendir(path);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max) {
    char lp[384], target[64];
    snprintf(lp, sizeof lp, "%s/%s", path, e->d_name);
    ssize_t l = readlink(lp, target, sizeof target - 1);
    if (l <= 0) continue;
    target[l] = '\0';
    unsigned long ino;
    if (sscanf(target, "socket:[%lu]", &ino) == 1) out[n++] = ino;
  }
  closedir(d);
  return n;
}

/* Listening ports of rank r's process; returns how many (up to max). */
static int listeners(int r, int *ports, int max) {
  unsigned long ino[512];
  int ni = sock_inodes(g_pids[r], ino, 512), np = 0;
  const char *files[2] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (int f = 0; f < 2; f++) {
    FILE *fp = fopen(files[f], "r");
    if (!fp) continue;
    char line[512];
    if (!fgets(line, sizeof line, fp)) {
      fclose(fp);
      continue;
    }
    while (fgets(line, sizeof line, fp) && np < max) {
      char local[128];
      unsigned st;
      unsigned long inode;
      /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
      if (sscanf(line, " %*s %127s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &inode) != 3)
        continue;
      if (st != 0x0A) continue;
      for (int i = 0; i < ni; i++)
        if (ino[i] == inode) {
          char *colon = strrchr(local, ':');
          if (colon) ports[np++] = (int)strtol(colon + 1, NULL, 16);
        }
    }
    fclose(fp);
  }
  return np;
}

static void boot_attack(int port, int rank) {
  junk(port);
  /* Forged greetings: to this rank, from a higher one, for each guessable group id. With a
   * token, also greetings whose proof is right for another setup of the same group and
   * ranks, as a recording would be: the earlier form of the proof (no nonce), and the
   * current one bound to another nonce than this listener's. Both must be refused. */
  uint8_t key[16];
  rr__token_key(g_token, key);
  for (int g = 0; g < 8 * 3 && rank + 1 < W; g++) {
    char ctx[160];
    int n = g % 3 == 1
                ? snprintf(ctx, sizeof ctx, "rr-hello-v1/w.%d/%d/%d/0", g / 3, rank + 1, rank)
                : snprintf(ctx, sizeof ctx, "rr-hello-v2/w.%d/%d/%d/0/%016llx", g / 3, rank + 1,
                           rank, (unsigned long long)rnd());
    uint64_t recorded = rr__siphash(key, ctx, (size_t)n);
    rr__hello h = {.from = rank + 1,
                   .to = rank,
                   .index = 0,
                   .nsockets = 2,
                   .token_hash = g % 3 == 0 || !g_with_token ? rnd() | 1 : recorded};
    if (g_with_token)
      snprintf(h.group, sizeof h.group, "w.%d", g / 3);
    else
      snprintf(h.group, sizeof h.group, "stranger.%d", g / 3); /* no token: only foreign ids */
    snprintf(h.transport, sizeof h.transport, "tcp");
    uint8_t wire[RR__HELLO_BYTES];
    rr__hello_encode(&h, wire);
    int fd = dial(port);
    if (fd < 0) continue;
    send_nb(fd, wire, sizeof wire);
    hold(fd); /* wait for the refusal; it closes on us */
    if (g == 0) add_slow(port, wire, sizeof wire);
    if (g == 1) {
      int half = dial(port);
      if (half >= 0) send_nb(half, wire, 64), hold(half);
    }
  }
  for (int k = 0; k < 100; k++) { /* a flood, held */
    int fd = dial(port);
    if (fd < 0) break;
    if (k % 2)
      hold(fd);
    else
      close(fd);
  }
  atomic_fetch_add(&n_boot_attacks, 1);
}

static void *scan_main(void *arg) {
  (void)arg;
  int seen[4096], nseen = 0;
  while (!atomic_load(&g_stop)) {
    for (int r = 0; r < W; r++) {
      int ports[16];
      int np = listeners(r, ports, 16);
      for (int i = 0; i < np; i++) {
        if (ports[i] == g_store_port) continue;
        int known = 0;
        for (int k = 0; k < nseen; k++) known |= seen[k] == ports[i];
        if (known || nseen == 4096) continue;
        seen[nseen++] = ports[i];
        atomic_fetch_add(&n_boot_ports, 1);
        boot_attack(ports[i], r);
      }
    }
    usleep(3000);
  }
  return NULL;
}

static pthread_t g_threads[3];

static void start_attack(const int *pids, int n, void *arg) {
  (void)arg;
  memcpy(g_pids, pids, (size_t)n * sizeof *pids);
  /* The store's port (rank 0's MASTER_PORT); wait until the store listens, then go. */
  for (int i = 0; i < 5000 && !(g_store_port = atomic_load(g_port_shared)); i++) usleep(1000);
  for (int i = 0; i < 2000; i++) {
    int fd = dial(g_store_port);
    if (fd >= 0) {
      close(fd);
      break;
    }
    usleep(1000);
  }
  if (g_silent_flood) {
    /* Strangers that connect and never say a word, more than rank 0 has descriptors. */
    for (int i = 0; i < MAXHELD; i++) {
      int fd = dial(g_store_port);
      if (fd >= 0) hold(fd);
    }
    n_store_attacks = 100;
    n_boot_ports = 1;
    return;
  }
  pthread_create(&g_threads[0], NULL, store_main, NULL);
  pthread_create(&g_threads[1], NULL, scan_main, NULL);
  pthread_create(&g_threads[2], NULL, slow_main, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Log checks
 */
static int count_in_logs(const char *needle) {
  DIR *d = opendir(g_logdir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[600], line[4096];
    snprintf(path, sizeof path, "%s/%s", g_logdir, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    while (fgets(line, sizeof line, f))
      if (strstr(line, needle)) n++;
    fclose(f);
  }
  closedir(d);
  return n;
}

static void show_examples(const char *needle) {
  DIR *d = opendir(g_logdir);
  if (!d) return;
  struct dirent *e;
  int shown = 0;
  while ((e = readdir(d)) != NULL && !shown) {
    if (e->d_name[0] == '.') continue;
    char path[600], line[4096];
    snprintf(path, sizeof path, "%s/%s", g_logdir, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    while (!shown && fgets(line, sizeof line, f))
      if (strstr(line, needle)) printf("    e.g. %s", line), shown = 1;
    fclose(f);
  }
  closedir(d);
}

int main(int argc, char **argv) {
  if (argc != 2 ||
      (strcmp(argv[1], "token") && strcmp(argv[1], "notoken") && strcmp(argv[1], "silent_flood"))) {
    fprintf(stderr, "usage: %s token|notoken|silent_flood\n", argv[0]);
    return 2;
  }
  g_with_token = strcmp(argv[1], "notoken") != 0;
  g_silent_flood = !strcmp(argv[1], "silent_flood");
  signal(SIGPIPE, SIG_IGN);
  t_seed_announce("test_junk");
  snprintf(g_logdir, sizeof g_logdir, "/tmp/rr-junk-%d", (int)getpid());
  if (mkdir(g_logdir, 0700) != 0) return perror(g_logdir), 1;
  char logfile[320];
  snprintf(logfile, sizeof logfile, "%s/rank.%%p.log", g_logdir);
  setenv("RR_DEBUG_FILE", logfile, 1);
  setenv("RR_DEBUG", "WARN", 1);
  unsetenv("RR_JOB_TOKEN");
  g_port_shared =
      mmap(NULL, sizeof *g_port_shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_port_shared == MAP_FAILED) return perror("mmap"), 1;
  atomic_store(g_port_shared, 0);

  int codes[W], sigs[W];
  double t0 = t_now();
  int rc = t_run(W, job_rank, NULL, start_attack, 120, codes, sigs);
  double wall = t_now() - t0;
  atomic_store(&g_stop, 1);
  for (int i = 0; i < 3 && !g_silent_flood; i++) pthread_join(g_threads[i], NULL);
  for (int i = 0; i < g_nheld; i++) close(g_held[i]);
  for (int i = 0; i < g_nslow; i++) close(g_slow[i].fd);

  int bad = rc != 0;
  for (int r = 0; r < W; r++)
    if (codes[r] || sigs[r]) bad = 1, printf("rank %d: exit %d signal %d\n", r, codes[r], sigs[r]);
  printf("job: %d ranks x %d verified rounds and %d subgroups: %s in %.1f s\n", W, ROUNDS,
         ROUNDS / SUBGROUP_EVERY, bad ? "FAILED" : "completed", wall);
  printf(
      "attacks: %d on the store (port %d), %d setup listeners found and attacked, "
      "%d connections held open, %d slow writers\n",
      atomic_load(&n_store_attacks), g_store_port, atomic_load(&n_boot_attacks), g_nheld, g_nslow);
  if (atomic_load(&n_store_attacks) < 20) bad = 1, printf("too few store attacks\n");
  if (atomic_load(&n_boot_ports) < 1) bad = 1, printf("no setup listener was reached\n");

  struct {
    const char *needle;
    int required;
  } want[8];
  int nw = 0;
  if (g_silent_flood) {
    /* The server must shed strangers that never speak (as the setup listener does, and
     * must say so), rather than let them take every descriptor of rank 0. */
    want[nw++] = (typeof(want[0])){"closing the connection of client", 1};
    goto check_logs;
  }
  want[nw++] = (typeof(want[0])){"closing the connection of client", 1};
  want[nw++] = (typeof(want[0])){"malformed request: bad magic", 1};
  want[nw++] = (typeof(want[0])){"request (opcode 2) before the handshake", 1};
  want[nw++] = (typeof(want[0])){"closed a setup connection", 1};
  want[nw++] = (typeof(want[0])){"not a ringreduce peer (bad greeting)", 1};
  if (g_with_token) {
    want[nw++] = (typeof(want[0])){"it does not prove this job's token", 1};
    want[nw++] = (typeof(want[0])){"does not hold this job's token", 1};
  } else {
    want[nw++] = (typeof(want[0])){"greeting for group 'stranger.", 1};
  }
check_logs:
  for (int i = 0; i < nw; i++) {
    int n = count_in_logs(want[i].needle);
    printf("log: %5d x \"%s\"\n", n, want[i].needle);
    if (n) show_examples(want[i].needle);
    if (n < want[i].required) bad = 1, printf("  MISSING from the ranks' logs\n");
  }
  if (g_with_token && !g_silent_flood) {
    printf("store: %d wrong-token handshakes denied, %d accepted\n", atomic_load(&n_denied),
           atomic_load(&n_wrong_accepted));
    if (atomic_load(&n_denied) < 1 || atomic_load(&n_wrong_accepted) > 0) bad = 1;
  }
  if (!bad) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_logdir);
    if (system(cmd) != 0) printf("could not remove %s\n", g_logdir);
  } else {
    printf("logs kept in %s\n", g_logdir);
  }
  printf("test_junk %s: %s\n", argv[1], bad ? "FAILED" : "passed");
  return bad;
}
