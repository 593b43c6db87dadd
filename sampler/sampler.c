/* DistributedSampler, bit-identical to torch's (see include/ringreduce/sampler.h for the
 * recipe). Everything here is arithmetic on the arguments: no communication, no state
 * beyond the struct, so every rank computes its own slice of the same permutation. */
#include "ringreduce/sampler.h"

#include <inttypes.h>
#include <stdlib.h>

#include "common/status.h"
#include "sampler/mt19937.h"

int rr_sampler_init(rr_sampler *s, uint64_t dataset_len, int num_replicas, int rank, int shuffle,
                    int64_t seed, int drop_last) {
  if (!s) return rr__set_error(RR_EINVAL, "rr_sampler_init: sampler is NULL");
  if (num_replicas < 1)
    return rr__set_error(RR_EINVAL, "rr_sampler_init: num_replicas must be >= 1, got %d",
                         num_replicas);
  if (rank < 0 || rank >= num_replicas) /* torch's ValueError, same words */
    return rr__set_error(RR_EINVAL,
                         "rr_sampler_init: Invalid rank %d, rank should be in the interval "
                         "[0, %d]",
                         rank, num_replicas - 1);
  if (shuffle && dataset_len >= RR_SAMPLER_SHUFFLE_MAX_LEN)
    return rr__set_error(RR_ENOTSUP,
                         "rr_sampler_init: cannot shuffle %" PRIu64
                         " items: torch's randperm "
                         "uses a different algorithm from %llu items on (64-bit draws), so "
                         "indices identical to torch's are only promised below that; use "
                         "shuffle=0 or a smaller dataset",
                         dataset_len, RR_SAMPLER_SHUFFLE_MAX_LEN);
  uint64_t n = dataset_len, r = (uint64_t)num_replicas;
  *s = (rr_sampler){.dataset_len = n,
                    .num_replicas = num_replicas,
                    .rank = rank,
                    .shuffle = !!shuffle,
                    .drop_last = !!drop_last,
                    .seed = seed,
                    .epoch = 0};
  /* torch: ceil((N - R) / R) when drop_last and N % R != 0, which is floor(N / R) (0 when
   * N < R: ceil of a value in (-1, 0)); otherwise ceil(N / R), written so N near 2^64 cannot
   * overflow. */
  if (drop_last && n % r != 0)
    s->num_samples = n / r;
  else
    s->num_samples = n / r + (n % r != 0);
  s->total_size = s->num_samples * r;
  return RR_OK;
}

void rr_sampler_set_epoch(rr_sampler *s, int64_t epoch) {
  if (s) s->epoch = epoch;
}

uint64_t rr_sampler_len(const rr_sampler *s) {
  return s ? s->num_samples : 0;
}

/* torch's randperm_cpu for n < 214,748,364: a[i] = i, then for i < n - 1 swap a[i] with
 * a[i + u32() % (n - i)]. Written once over uint32 (the sampler's buffer, half the memory)
 * and once over int64 (the public rr_randperm): same draws, same swaps. */
static void rr__randperm_u32(uint32_t *a, uint64_t n, uint32_t seed32) {
  rr__mt19937 mt;
  rr__mt19937_seed(&mt, seed32);
  for (uint64_t i = 0; i < n; i++) a[i] = (uint32_t)i;
  for (uint64_t i = 0; i + 1 < n; i++) {
    uint64_t z = rr__mt19937_u32(&mt) % (n - i);
    uint32_t t = a[i];
    a[i] = a[i + z];
    a[i + z] = t;
  }
}

int rr_randperm(uint64_t n, uint64_t seed, int64_t *out) {
  if (n >= RR_SAMPLER_SHUFFLE_MAX_LEN)
    return rr__set_error(RR_ENOTSUP,
                         "rr_randperm: n = %" PRIu64
                         " is not below %llu, where torch's "
                         "randperm changes algorithm",
                         n, RR_SAMPLER_SHUFFLE_MAX_LEN);
  if (n > 0 && !out) return rr__set_error(RR_EINVAL, "rr_randperm: out is NULL");
  rr__mt19937 mt;
  rr__mt19937_seed(&mt, (uint32_t)seed); /* torch's mt19937 keeps the low 32 bits */
  for (uint64_t i = 0; i < n; i++) out[i] = (int64_t)i;
  for (uint64_t i = 0; i + 1 < n; i++) {
    uint64_t z = rr__mt19937_u32(&mt) % (n - i);
    int64_t t = out[i];
    out[i] = out[i + z];
    out[i + z] = t;
  }
  return RR_OK;
}

int rr_sampler_indices(const rr_sampler *s, int64_t *out, size_t out_len) {
  if (!s) return rr__set_error(RR_EINVAL, "rr_sampler_indices: sampler is NULL");
  if (s->num_replicas < 1 || s->rank < 0 || s->rank >= s->num_replicas)
    return rr__set_error(RR_EINVAL, "rr_sampler_indices: sampler not set up by rr_sampler_init");
  if (out_len < s->num_samples)
    return rr__set_error(RR_EINVAL,
                         "rr_sampler_indices: out has room for %zu indices, this rank reads "
                         "%" PRIu64,
                         out_len, s->num_samples);
  if (s->num_samples > 0 && !out)
    return rr__set_error(RR_EINVAL, "rr_sampler_indices: out is NULL");
  uint64_t n = s->dataset_len, r = (uint64_t)s->num_replicas;
  uint32_t *perm = NULL;
  if (s->shuffle && s->num_samples > 0) {
    /* rr_sampler_init refused larger N, and the struct is the caller's: check again. */
    if (n >= RR_SAMPLER_SHUFFLE_MAX_LEN)
      return rr__set_error(RR_ENOTSUP, "rr_sampler_indices: cannot shuffle %" PRIu64 " items", n);
    perm = malloc(n * sizeof *perm);
    if (!perm)
      return rr__set_error(RR_ENOMEM,
                           "rr_sampler_indices: out of memory for a permutation "
                           "of %" PRIu64 " items",
                           n);
    /* g.manual_seed(seed + epoch): Python adds exactly, torch keeps the low 32 bits; the low
     * 32 bits of a sum depend only on the low bits of its terms, so uint64 wrapping is exact. */
    uint32_t seed32 = (uint32_t)((uint64_t)s->seed + (uint64_t)s->epoch);
    rr__randperm_u32(perm, n, seed32);
  }
  /* Position k of the padded list is position k mod N of the permutation: padding repeats
   * from the start (wrapping again when R > N); drop_last keeps k < total <= N. */
  for (uint64_t j = 0; j < s->num_samples; j++) {
    uint64_t k = (uint64_t)s->rank + j * r;
    uint64_t p = k < n ? k : k % n;
    out[j] = perm ? (int64_t)perm[p] : (int64_t)p;
  }
  free(perm);
  return RR_OK;
}
