/* DistributedSampler (sampler/): bit-identical indices to torch's.
 *
 *   test_sampler golden FILE   every line of a golden file made by real torch
 *                              (tests/data/make_sampler_golden.py): randperm and sampler
 *                              cases, every rank of each, compared by hash and leading values
 *   test_sampler unit          MT19937 against its published outputs, torch's known
 *                              randperm(10), the arithmetic of num_samples / padding /
 *                              drop_last, refusals and argument errors
 *
 * The golden test runs always (on the committed file); tests/test_sampler_live.sh makes a
 * fresh file with torch when it is installed and runs `golden` on it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringreduce/sampler.h"
#include "sampler/mt19937.h"

static int g_fail;

#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      if (g_fail++ < 20) {                                     \
        printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
        printf(__VA_ARGS__);                                   \
        printf("\n");                                          \
      }                                                        \
    }                                                          \
  } while (0)

/* The golden file's hash (see make_sampler_golden.py). */
static uint64_t fnv_words(const int64_t *v, uint64_t n) {
  uint64_t h = 14695981039346656037ull;
  for (uint64_t i = 0; i < n; i++) h = (h ^ (uint64_t)v[i]) * 1099511628211ull;
  return h;
}

/* A seed as Python printed it: negative ones are int64, others up to 2^64 - 1. */
static int64_t parse_seed(const char *s) {
  return s[0] == '-' ? strtoll(s, NULL, 10) : (int64_t)strtoull(s, NULL, 10);
}

static void show(const char *what, const int64_t *v, uint64_t n) {
  printf("  %s:", what);
  for (uint64_t i = 0; i < n && i < 16; i++) printf(" %" PRId64, v[i]);
  printf("\n");
}

/* Split a line into whitespace-separated fields (in place). */
static int split(char *line, char **f, int max) {
  int n = 0;
  for (char *t = strtok(line, " \t\n"); t && n < max; t = strtok(NULL, " \t\n")) f[n++] = t;
  return n;
}

static int golden(const char *path) {
  FILE *fp = fopen(path, "r");
  if (!fp) {
    printf("cannot open %s: %s\n", path, strerror(errno));
    return 1;
  }
  char line[1 << 16];
  int lineno = 0, nperm = 0, ncase = 0;
  while (fgets(line, sizeof line, fp)) {
    lineno++;
    if (line[0] == '#' || line[0] == '\n') continue;
    char *f[64];
    int nf = split(line, f, 64);
    if (nf >= 4 && strcmp(f[0], "P") == 0) {
      uint64_t n = strtoull(f[1], NULL, 10), want = strtoull(f[3], NULL, 10);
      int64_t seed = parse_seed(f[2]);
      int64_t *p = malloc((n ? n : 1) * sizeof *p);
      CHECK(p != NULL, "malloc");
      if (!p) break;
      int st = rr_randperm(n, (uint64_t)seed, p);
      CHECK(st == RR_OK, "line %d: rr_randperm(%" PRIu64 "): %s", lineno, n, rr_last_error());
      int first_ok = 1;
      for (int i = 4; i < nf; i++) first_ok &= p[i - 4] == strtoll(f[i], NULL, 10);
      uint64_t h = fnv_words(p, n);
      CHECK(h == want && first_ok, "line %d: randperm(%" PRIu64 ", seed %s) differs from torch's",
            lineno, n, f[2]);
      if (h != want || !first_ok) show("ours", p, n);
      free(p);
      nperm++;
    } else if (nf >= 8 && strcmp(f[0], "S") == 0) {
      uint64_t n = strtoull(f[1], NULL, 10);
      int r = atoi(f[2]), shuffle = atoi(f[3]), drop_last = atoi(f[4]);
      int64_t seed = parse_seed(f[5]), epoch = strtoll(f[6], NULL, 10);
      uint64_t want_len = strtoull(f[7], NULL, 10);
      CHECK(nf >= 8 + r + 1 && strcmp(f[8 + r], ":") == 0, "line %d: malformed", lineno);
      if (nf < 8 + r + 1) break;
      for (int rank = 0; rank < r; rank++) {
        rr_sampler s;
        int st = rr_sampler_init(&s, n, r, rank, shuffle, seed, drop_last);
        CHECK(st == RR_OK, "line %d: init: %s", lineno, rr_last_error());
        if (st != RR_OK) break;
        rr_sampler_set_epoch(&s, epoch);
        CHECK(rr_sampler_len(&s) == want_len, "line %d: len %" PRIu64 ", torch %" PRIu64, lineno,
              rr_sampler_len(&s), want_len);
        uint64_t len = rr_sampler_len(&s);
        int64_t *idx = malloc((len ? len : 1) * sizeof *idx);
        CHECK(idx != NULL, "malloc");
        if (!idx) break;
        st = rr_sampler_indices(&s, idx, len);
        CHECK(st == RR_OK, "line %d: indices: %s", lineno, rr_last_error());
        uint64_t want = strtoull(f[8 + rank], NULL, 10), h = fnv_words(idx, len);
        int first_ok = 1;
        if (rank == 0)
          for (int i = 9 + r; i < nf; i++) first_ok &= idx[i - 9 - r] == strtoll(f[i], NULL, 10);
        CHECK(h == want && first_ok,
              "line %d: N=%" PRIu64
              " R=%d rank %d shuffle=%d drop_last=%d seed=%s epoch=%s: "
              "indices differ from torch's",
              lineno, n, r, rank, shuffle, drop_last, f[5], f[6]);
        if ((h != want || !first_ok) && rank == 0) show("ours", idx, len);
        free(idx);
      }
      ncase++;
    } else {
      CHECK(0, "line %d: unknown line kind '%s'", lineno, nf ? f[0] : "");
    }
  }
  fclose(fp);
  CHECK(nperm > 0 && ncase > 0, "%s holds no cases", path);
  printf("golden %s: %d randperm lines, %d sampler cases (every rank), %d failures\n", path, nperm,
         ncase, g_fail);
  return g_fail != 0;
}

/* Everything here has a value known without torch. */
static int unit(void) {
  /* MT19937's published check values: the first outputs for init_genrand(5489) (the C++
   * default seed), and the 10000th, which C++11 [rand.predef] fixes at 4123659995. */
  rr__mt19937 mt;
  rr__mt19937_seed(&mt, 5489u);
  uint32_t first = rr__mt19937_u32(&mt), second = rr__mt19937_u32(&mt);
  CHECK(first == 3499211612u && second == 581869302u, "mt19937(5489) starts %u %u", first, second);
  rr__mt19937_seed(&mt, 5489u);
  uint32_t v = 0;
  for (int i = 0; i < 10000; i++) v = rr__mt19937_u32(&mt);
  CHECK(v == 4123659995u, "mt19937(5489) 10000th output %u", v);

  /* torch.randperm(10, generator=manual_seed(0)). */
  int64_t p[10];
  const int64_t want[10] = {4, 1, 7, 5, 3, 9, 0, 8, 6, 2};
  CHECK(rr_randperm(10, 0, p) == RR_OK && memcmp(p, want, sizeof want) == 0,
        "randperm(10, seed 0) = %lld %lld %lld ...", (long long)p[0], (long long)p[1],
        (long long)p[2]);
  /* Only the low 32 bits of the seed count. */
  int64_t q[10];
  CHECK(rr_randperm(10, 1ull << 32, q) == RR_OK && memcmp(q, want, sizeof want) == 0,
        "seed 2^32 must equal seed 0");

  /* Sampler with shuffle: the sampler's shuffle is randperm(seed + epoch). */
  rr_sampler s;
  int64_t idx[16];
  CHECK(rr_sampler_init(&s, 10, 1, 0, 1, -5, 0) == RR_OK, "%s", rr_last_error());
  rr_sampler_set_epoch(&s, 5); /* -5 + 5 = seed 0 */
  CHECK(s.epoch == 5 && s.num_samples == 10, "set_epoch only stores");
  CHECK(rr_sampler_indices(&s, idx, 16) == RR_OK && memcmp(idx, want, sizeof want) == 0,
        "seed -5 epoch 5 should be randperm(10, 0)");

  /* Arithmetic: N=10, R=3 pads to 12 (4 each) wrapping from the start; drop_last gives 3 each. */
  CHECK(rr_sampler_init(&s, 10, 3, 2, 0, 0, 0) == RR_OK && s.num_samples == 4 && s.total_size == 12,
        "N=10 R=3: %" PRIu64 " / %" PRIu64, s.num_samples, s.total_size);
  CHECK(rr_sampler_indices(&s, idx, 4) == RR_OK && idx[0] == 2 && idx[1] == 5 && idx[2] == 8 &&
            idx[3] == 1,
        "rank 2 of 10/3 unshuffled is 2 5 8 1 (1 = padding)");
  CHECK(rr_sampler_init(&s, 10, 3, 2, 0, 0, 1) == RR_OK && s.num_samples == 3, "drop_last");
  /* Padding that wraps more than once: N=2, R=5 -> 0 1 0 1 0. */
  CHECK(rr_sampler_init(&s, 2, 5, 4, 0, 0, 0) == RR_OK && s.num_samples == 1, "N=2 R=5");
  CHECK(rr_sampler_indices(&s, idx, 1) == RR_OK && idx[0] == 0, "N=2 R=5 rank 4 reads 0");
  CHECK(rr_sampler_init(&s, 2, 5, 4, 0, 0, 1) == RR_OK && s.num_samples == 0, "drop_last N<R");

  /* Without drop_last every index appears, each rank the same number of times +-1. */
  for (int r = 1; r <= 9; r++) {
    int seen[37] = {0};
    for (int rank = 0; rank < r; rank++) {
      CHECK(rr_sampler_init(&s, 37, r, rank, 1, 11, 0) == RR_OK, "%s", rr_last_error());
      int64_t buf[37];
      CHECK(rr_sampler_indices(&s, buf, 37) == RR_OK, "%s", rr_last_error());
      for (uint64_t j = 0; j < s.num_samples; j++) seen[buf[j]]++;
    }
    for (int i = 0; i < 37; i++)
      CHECK(seen[i] >= 1 && seen[i] <= 2, "R=%d index %d seen %d", r, i, seen[i]);
  }

  /* Empty dataset: an empty list, not an error (torch 1.13 does the same). */
  CHECK(rr_sampler_init(&s, 0, 4, 3, 1, 0, 0) == RR_OK && rr_sampler_len(&s) == 0, "empty");
  CHECK(rr_sampler_indices(&s, NULL, 0) == RR_OK, "empty list into NULL: %s", rr_last_error());

  /* Refusals, with words a user can act on. */
  CHECK(rr_sampler_init(&s, 10, 4, 4, 1, 0, 0) == RR_EINVAL &&
            strstr(rr_last_error(), "Invalid rank 4, rank should be in the interval [0, 3]"),
        "bad rank: %s", rr_last_error());
  CHECK(rr_sampler_init(&s, 10, 0, 0, 1, 0, 0) == RR_EINVAL, "num_replicas 0");
  CHECK(rr_sampler_init(&s, RR_SAMPLER_SHUFFLE_MAX_LEN, 2, 0, 1, 0, 0) == RR_ENOTSUP &&
            strstr(rr_last_error(), "214748364"),
        "huge shuffle: %s", rr_last_error());
  CHECK(rr_sampler_init(&s, RR_SAMPLER_SHUFFLE_MAX_LEN - 1, 2, 0, 1, 0, 0) == RR_OK,
        "largest shuffle allowed: %s", rr_last_error());
  CHECK(rr_randperm(RR_SAMPLER_SHUFFLE_MAX_LEN, 0, NULL) == RR_ENOTSUP, "huge randperm");
  /* Without shuffle any size works, computed without a permutation. */
  CHECK(rr_sampler_init(&s, 1ull << 40, 3, 1, 0, 0, 0) == RR_OK &&
            s.num_samples == (1ull << 40) / 3 + 1,
        "2^40 unshuffled");
  CHECK(rr_sampler_init(&s, 10, 3, 0, 0, 0, 0) == RR_OK &&
            rr_sampler_indices(&s, idx, 3) == RR_EINVAL && strstr(rr_last_error(), "room for 3"),
        "short out: %s", rr_last_error());
  printf("unit: %d failures\n", g_fail);
  return g_fail != 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "golden") == 0) return golden(argv[2]);
  if (argc >= 2 && strcmp(argv[1], "unit") == 0) return unit();
  fprintf(stderr, "usage: %s golden FILE | unit\n", argv[0]);
  return 2;
}
