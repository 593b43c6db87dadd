#include "tests/harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ring/op.h"

_Thread_local int t_rank = -1;

uint64_t t_seed(void) {
  const char *s = getenv("RR_TEST_SEED");
  return s && *s ? strtoull(s, NULL, 0) : 0x5eed2026ull;
}

void t_seed_announce(const char *test) {
  printf("%s: seed 0x%llx (set RR_TEST_SEED to replay)\n", test, (unsigned long long)t_seed());
  fflush(stdout);
}

uint64_t t_bits(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t z = seed ^ (stream * 0x9e3779b97f4a7c15ull) ^ (i * 0xbf58476d1ce4e5b9ull);
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int t_is_float(rr_dtype d) {
  return d == RR_FLOAT16 || d == RR_BFLOAT16 || d == RR_FLOAT32 || d == RR_FLOAT64;
}

int t_valid_ops(rr_dtype d, rr_op *out) {
  static const rr_op all[] = {RR_SUM, RR_PROD, RR_MIN, RR_MAX, RR_AVG, RR_BAND, RR_BOR, RR_BXOR};
  int n = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!(t_is_float(d) && all[i] >= RR_BAND)) out[n++] = all[i];
  return n;
}

int t_lean(void) {
  const char *mx = getenv("RR_TEST_MATRIX");
  return mx && !strcmp(mx, "lean");
}

int t_lean_dtype(rr_dtype d) {
  return d == RR_INT8 || d == RR_FLOAT16 || d == RR_FLOAT32 || d == RR_INT64;
}

void *t_alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", t_rank, bytes);
    exit(3);
  }
  return p;
}

/* Round x to what the dtype can hold (the value the buffer will really contain). */
static double t_round(rr_dtype d, double x) {
  switch (d) {
    case RR_FLOAT16:
      return rr__half_to_float(rr__float_to_half((float)x));
    case RR_BFLOAT16:
      return rr__bf16_to_float(rr__float_to_bf16((float)x));
    case RR_FLOAT32:
      return (float)x;
    default:
      return x;
  }
}

double t_value(rr_dtype d, rr_op op, uint64_t seed, int rank, size_t i) {
  uint64_t b = t_bits(seed, (uint64_t)rank + 1, i);
  if (t_is_float(d)) {
    double u = (double)(b >> 11) / 9007199254740992.0; /* [0, 1) */
    double sign = (b & 1) ? -1.0 : 1.0;
    double mag = op == RR_PROD ? 0.5 + 1.5 * u : 0.25 + 3.75 * u;
    return t_round(d, sign * mag);
  }
  return (double)(int64_t)t_value_bits(d, op, seed, rank, i);
}

uint64_t t_value_bits(rr_dtype d, rr_op op, uint64_t seed, int rank, size_t i) {
  uint64_t b = t_bits(seed, (uint64_t)rank + 1, i);
  switch (d) {
    case RR_INT8: {
      int8_t v = (int8_t)(uint8_t)b;
      if (v == 0) v = 1;
      return (uint64_t)(int64_t)v;
    }
    case RR_UINT8:
      return (uint8_t)b ? (uint8_t)b : 1;
    case RR_INT32: {
      int32_t v = (int32_t)(uint32_t)b;
      if (v == 0) v = 1;
      return (uint64_t)(int64_t)v;
    }
    case RR_INT64:
      return b ? b : 1;
    case RR_FLOAT16:
      return rr__float_to_half((float)t_value(d, op, seed, rank, i));
    case RR_BFLOAT16:
      return rr__float_to_bf16((float)t_value(d, op, seed, rank, i));
    case RR_FLOAT32: {
      float f = (float)t_value(d, op, seed, rank, i);
      uint32_t u;
      memcpy(&u, &f, 4);
      return u;
    }
    case RR_FLOAT64: {
      double f = t_value(d, op, seed, rank, i);
      uint64_t u;
      memcpy(&u, &f, 8);
      return u;
    }
    default:
      return 0;
  }
}

static void t_store_bits(void *buf, size_t i, rr_dtype d, uint64_t v) {
  size_t es = rr_dtype_size(d);
  memcpy((char *)buf + i * es, &v, es); /* little-endian: the low bytes */
}

void t_fill(void *buf, size_t n, rr_dtype d, rr_op op, uint64_t seed, int rank, size_t first) {
  for (size_t i = 0; i < n; i++)
    t_store_bits(buf, i, d, t_value_bits(d, op, seed, rank, first + i));
}

double t_load(const void *buf, size_t i, rr_dtype d) {
  const char *p = (const char *)buf + i * rr_dtype_size(d);
  switch (d) {
    case RR_INT8:
      return *(const int8_t *)p;
    case RR_UINT8:
      return *(const uint8_t *)p;
    case RR_INT32: {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    case RR_INT64: {
      int64_t v;
      memcpy(&v, p, 8);
      return (double)v;
    }
    case RR_FLOAT16: {
      uint16_t v;
      memcpy(&v, p, 2);
      return rr__half_to_float(v);
    }
    case RR_BFLOAT16: {
      uint16_t v;
      memcpy(&v, p, 2);
      return rr__bf16_to_float(v);
    }
    case RR_FLOAT32: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    case RR_FLOAT64: {
      double v;
      memcpy(&v, p, 8);
      return v;
    }
    default:
      return NAN;
  }
}

double t_eps(rr_dtype d) {
  switch (d) {
    case RR_FLOAT16:
      return ldexp(1.0, -10);
    case RR_BFLOAT16:
      return ldexp(1.0, -7);
    case RR_FLOAT32:
      return ldexp(1.0, -23);
    case RR_FLOAT64:
      return ldexp(1.0, -52);
    default:
      return 0;
  }
}

/* Integer reference: wrapping arithmetic in the dtype's width, as the library defines it. */
static uint64_t t_int_ref(rr_dtype d, rr_op op, uint64_t seed, int nranks, size_t i) {
  int bits = (int)rr_dtype_size(d) * 8;
  uint64_t mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
  int is_signed = d != RR_UINT8;
  uint64_t acc = t_value_bits(d, op, seed, 0, i) & mask;
  for (int r = 1; r < nranks; r++) {
    uint64_t v = t_value_bits(d, op, seed, r, i) & mask;
    switch (op) {
      case RR_SUM:
      case RR_AVG:
        acc = (acc + v) & mask;
        break;
      case RR_PROD:
        acc = (acc * v) & mask;
        break;
      case RR_BAND:
        acc &= v;
        break;
      case RR_BOR:
        acc |= v;
        break;
      case RR_BXOR:
        acc ^= v;
        break;
      case RR_MIN:
      case RR_MAX: {
        int64_t sa = (int64_t)(acc << (64 - bits)) >> (64 - bits);
        int64_t sv = (int64_t)(v << (64 - bits)) >> (64 - bits);
        int less = is_signed ? sv < sa : v < acc;
        if (op == RR_MIN ? less : (is_signed ? sv > sa : v > acc)) acc = v;
        break;
      }
      default:
        break;
    }
  }
  if (op == RR_AVG) {
    if (is_signed) {
      int64_t s = (int64_t)(acc << (64 - bits)) >> (64 - bits);
      acc = (uint64_t)(s / nranks) & mask;
    } else {
      acc = (acc / (uint64_t)nranks) & mask;
    }
  }
  return acc;
}

size_t t_check_reduced(const void *got, size_t n, rr_dtype d, rr_op op, uint64_t seed, int nranks,
                       size_t first, const char *what) {
  size_t wrong = 0;
  size_t es = rr_dtype_size(d);
  for (size_t k = 0; k < n; k++) {
    size_t i = first + k;
    int bad;
    double g = t_load(got, k, d), ref = 0, tol = 0;
    if (!t_is_float(d)) {
      uint64_t want = t_int_ref(d, op, seed, nranks, i), have = 0;
      memcpy(&have, (const char *)got + k * es, es);
      bad = have != want;
      int bits = (int)es * 8;
      ref = d == RR_UINT8 ? (double)want : (double)((int64_t)(want << (64 - bits)) >> (64 - bits));
    } else {
      double sum = 0, abs_sum = 0, prod = 1, mn = INFINITY, mx = -INFINITY;
      for (int r = 0; r < nranks; r++) {
        double v = t_value(d, op, seed, r, i);
        sum += v;
        abs_sum += fabs(v);
        prod *= v;
        mn = fmin(mn, v);
        mx = fmax(mx, v);
      }
      double eps = t_eps(d);
      switch (op) {
        case RR_SUM:
          ref = sum, tol = nranks * eps * abs_sum;
          break;
        case RR_AVG:
          ref = sum / nranks, tol = eps * abs_sum + eps * fabs(ref);
          break;
        case RR_PROD:
          ref = prod, tol = nranks * eps * fabs(prod);
          break;
        case RR_MIN:
          ref = mn;
          break;
        case RR_MAX:
          ref = mx;
          break;
        default:
          ref = NAN;
      }
      bad = !(fabs(g - ref) <= tol);
    }
    if (bad) {
      if (wrong < 5)
        fprintf(stderr,
                "rank %d: %s: element %zu of %s %s over %d ranks: got %.17g, want %.17g (tolerance "
                "%.3g)\n",
                t_rank, what, i, rr_dtype_name(d), rr_op_name(op), nranks, g, ref, tol);
      wrong++;
    }
  }
  return wrong;
}

size_t t_check_copied(const void *got, size_t n, rr_dtype d, rr_op op, uint64_t seed, int src,
                      size_t first, const char *what) {
  size_t wrong = 0, es = rr_dtype_size(d);
  for (size_t k = 0; k < n; k++) {
    uint64_t want = t_value_bits(d, op, seed, src, first + k), have = 0;
    uint64_t mask = es == 8 ? ~0ull : ((1ull << (8 * es)) - 1);
    memcpy(&have, (const char *)got + k * es, es);
    if (have != (want & mask)) {
      if (wrong < 5)
        fprintf(stderr, "rank %d: %s: element %zu (from rank %d) is 0x%llx, want 0x%llx\n", t_rank,
                what, first + k, src, (unsigned long long)have, (unsigned long long)(want & mask));
      wrong++;
    }
  }
  return wrong;
}

double t_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void t_ready_path(char *path, size_t len, const char *dir, int rank) {
  snprintf(path, len, "%s/%d", dir, rank);
}

int t_ready_mark(const char *dir, int rank) {
  char path[96];
  t_ready_path(path, sizeof path, dir, rank);
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  fclose(f);
  return 0;
}

void t_ready_wait(const char *dir, int n, double wait_s) {
  for (double end = t_now() + wait_s; t_now() < end;) {
    int ready = 0;
    for (int r = 0; r < n; r++) {
      char path[96];
      t_ready_path(path, sizeof path, dir, r);
      ready += access(path, F_OK) == 0;
    }
    if (ready == n) return;
    usleep(10000);
  }
}

void t_ready_remove(const char *dir, int n) {
  for (int r = 0; r < n; r++) {
    char path[96];
    t_ready_path(path, sizeof path, dir, r);
    unlink(path);
  }
  rmdir(dir);
}

uint64_t t_hash(const void *buf, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char *p = buf;
  for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int t_differing_rank(rr_pg *pg, const void *buf, size_t bytes, int *differs) {
  int n = rr_get_world_size(pg);
  uint64_t h = t_hash(buf, bytes), *all = t_alloc((size_t)n * sizeof *all);
  int st = rr_all_gather(pg, &h, all, 1, RR_INT64);
  *differs = -1;
  for (int r = 0; st == RR_OK && r < n && *differs < 0; r++)
    if (all[r] != h) *differs = r;
  free(all);
  return st;
}

static void *t_thread_main(void *p) {
  t_thread *t = p;
  t->rc = t->fn(t->arg);
  return NULL;
}

int t_thread_start(t_thread *t, int (*fn)(void *arg), void *arg) {
  t->fn = fn, t->arg = arg, t->rc = 0;
  return pthread_create(&t->id, NULL, t_thread_main, t);
}

int t_thread_join(t_thread *t) {
  pthread_join(t->id, NULL);
  return t->rc;
}

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/test_port.h"

int t_barrier_early(rr_pg *pg, uint64_t seed, int iter, int *early, double *left, double *entered) {
  int n = rr_get_world_size(pg), r = rr_get_rank(pg);
  *early = -1, *left = 0, *entered = 0;
  usleep((useconds_t)(t_bits(seed, (uint64_t)r, (uint64_t)iter) % 20000));
  double times[2] = {t_now(), 0}, *all = t_alloc((size_t)n * 2 * sizeof *all);
  int st = rr_barrier(pg);
  *left = times[1] = t_now();
  if (st == RR_OK) st = rr_all_gather(pg, times, all, 2, RR_FLOAT64);
  for (int q = 0; st == RR_OK && q < n && *early < 0; q++)
    if (all[2 * r + 1] < all[2 * q]) *early = q, *entered = all[2 * q];
  free(all);
  return st;
}

static int t_abort_main(void *p) {
  t_aborter *a = p;
  usleep((useconds_t)a->delay_ms * 1000);
  rr_abort(a->pg);
  return 0;
}

int t_abort_after(t_aborter *a, rr_pg *pg, int delay_ms) {
  a->pg = pg, a->delay_ms = delay_ms;
  return t_thread_start(&a->thread, t_abort_main, a);
}

int t_free_port(void) {
  return rr_test_free_port();
}

/* The caller's result arrays, held where LeakSanitizer always looks (a global) for ranks whose
 * body ends in exit(): on a rank's path nothing reads them again, so the compiler need not keep
 * the pointers in any register or stack slot, and LeakSanitizer would call them leaked. */
static int *t_run_roots[2];

int t_run(int n, int (*fn)(int rank, void *arg), void *arg, t_during_fn during, double timeout_s,
          int *exit_codes, int *signals) {
  t_run_roots[0] = exit_codes, t_run_roots[1] = signals;
  int port = t_free_port();
  int *pids = calloc((size_t)n, sizeof *pids);
  if (!pids || port < 0) {
    free(pids);
    return -1;
  }
  pid_t parent = getpid();
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    pid_t p = fork();
    if (p < 0) return -1;
    if (p == 0) {
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(125);
      /* The parent's list, not this rank's: a rank body that ends in exit() would otherwise
       * leave it to LeakSanitizer, which reports it when no register or stack slot still holds
       * the pointer (nothing on this path reads it again; rel_fork_bye under ASan). */
      free(pids);
      char v[32];
      snprintf(v, sizeof v, "%d", r);
      setenv("RANK", v, 1);
      setenv("LOCAL_RANK", v, 1);
      snprintf(v, sizeof v, "%d", n);
      setenv("WORLD_SIZE", v, 1);
      snprintf(v, sizeof v, "%d", port);
      setenv("MASTER_PORT", v, 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      t_rank = r;
      int rc = fn(r, arg);
      fflush(NULL);
      _exit(rc);
    }
    pids[r] = p;
  }
  if (during) during(pids, n, arg);
  double end = t_now() + timeout_s;
  int live = n, rc = 0;
  while (live > 0) {
    int ws;
    pid_t p = waitpid(-1, &ws, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < n; r++)
        if (pids[r] == p) {
          exit_codes[r] = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
          signals[r] = WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
          pids[r] = 0;
          live--;
        }
      continue;
    }
    if (t_now() > end) {
      fprintf(stderr, "t_run: %d rank(s) still running after %.0f s: killing them\n", live,
              timeout_s);
      for (int r = 0; r < n; r++)
        if (pids[r]) kill(pids[r], SIGKILL), exit_codes[r] = -1, signals[r] = SIGKILL;
      while (waitpid(-1, NULL, 0) > 0) {
      }
      rc = -1;
      break;
    }
    usleep(2000);
  }
  free(pids);
  return rc;
}

int t_exits_ok(int n, const int *exit_codes, const int *signals, const char *what) {
  int bad = 0;
  for (int r = 0; r < n; r++)
    if (exit_codes[r] != 0 || signals[r] != 0) {
      fprintf(stderr, "%s%srank %d: exit %d signal %d\n", what ? what : "", what ? ": " : "", r,
              exit_codes[r], signals[r]);
      bad = 1;
    }
  return bad;
}

int t_run_all(int n, int (*fn)(int rank, void *arg), void *arg, double timeout_s,
              const char *what) {
  int *codes = calloc((size_t)n, sizeof *codes), *sigs = calloc((size_t)n, sizeof *sigs);
  int bad = !codes || !sigs || t_run(n, fn, arg, NULL, timeout_s, codes, sigs) != 0;
  if (codes && sigs) bad |= t_exits_ok(n, codes, sigs, what);
  free(codes);
  free(sigs);
  return bad;
}
