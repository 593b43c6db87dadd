/*
 * ringreduce DistributedSampler: which dataset indices each rank reads per epoch, the same
 * indices as torch.utils.data.DistributedSampler (torch >= 1.13) for the same arguments.
 *
 *   rr_sampler s;
 *   if (rr_sampler_init(&s, n, world, rank, 1, 0, 0) != RR_OK)      // shuffle, seed 0
 *     fprintf(stderr, "%s\n", rr_last_error());
 *   int64_t *idx = malloc(rr_sampler_len(&s) * sizeof *idx);
 *   for (int epoch = 0; epoch < epochs; epoch++) {
 *     rr_sampler_set_epoch(&s, epoch);                               // as sampler.set_epoch
 *     rr_sampler_indices(&s, idx, rr_sampler_len(&s));                // list(iter(sampler))
 *     ...
 *   }
 *
 * The recipe (bit-exact): num_samples = ceil((N - R) / R) when drop_last and N % R != 0,
 * else ceil(N / R); total = num_samples * R. With shuffle, the permutation is torch's CPU
 * randperm(N) drawn from MT19937 seeded with the low 32 bits of seed + epoch; without, it is
 * 0..N-1. Not drop_last: padded to total by repeating from the start; drop_last: truncated.
 * Rank r reads positions r, r + R, r + 2R, ... below total.
 *
 * Differences from torch, all refusals or documented edge cases:
 *  - shuffle with N >= RR_SAMPLER_SHUFFLE_MAX_LEN is refused (RR_ENOTSUP): torch switches to
 *    a different randperm algorithm there (64-bit draws, torch >= 2.6), so we could not
 *    promise its indices. Without shuffle any N works.
 *  - An empty dataset gives an empty list on every rank (torch 1.13 does the same).
 */
#ifndef RINGREDUCE_SAMPLER_H_
#define RINGREDUCE_SAMPLER_H_

#include <stddef.h>
#include <stdint.h>

#include "ringreduce/ringreduce.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* torch's CPU randperm draws 32-bit numbers only for n < UINT32_MAX / 20 = 214,748,364. */
#define RR_SAMPLER_SHUFFLE_MAX_LEN 214748364ull

/* The sampler's state: plain data (no allocation), readable like the torch attributes of
 * the same names. Set it up with rr_sampler_init; change only the epoch afterwards. */
typedef struct rr_sampler {
  uint64_t dataset_len; /* N */
  int num_replicas;     /* R */
  int rank;
  int shuffle;
  int drop_last;
  int64_t seed;         /* any value: only the low 32 bits of seed + epoch are used */
  int64_t epoch;        /* 0 until rr_sampler_set_epoch */
  uint64_t num_samples; /* indices this rank reads per epoch (len(sampler)) */
  uint64_t total_size;  /* num_samples * num_replicas */
} rr_sampler;

/* torch.utils.data.DistributedSampler(dataset_len, num_replicas, rank, shuffle, seed,
 * drop_last). num_replicas >= 1 and 0 <= rank < num_replicas (RR_EINVAL otherwise, torch's
 * "Invalid rank" wording). Seeds torch accepts above 2^63 (it takes up to 2^64 - 1) are
 * passed as (int64_t)(uint64_t)seed: the low 32 bits are what counts. */
int rr_sampler_init(rr_sampler *s, uint64_t dataset_len, int num_replicas, int rank, int shuffle,
                    int64_t seed, int drop_last);
/* sampler.set_epoch(epoch): only stores it; the next rr_sampler_indices uses it. */
void rr_sampler_set_epoch(rr_sampler *s, int64_t epoch);
/* len(sampler): the number of indices rr_sampler_indices writes. */
uint64_t rr_sampler_len(const rr_sampler *s);
/* This rank's indices for the current epoch, in torch's order, into out[0 .. num_samples).
 * out_len (elements) must be >= num_samples (RR_EINVAL otherwise). Allocates a permutation
 * of N 32-bit words while it runs (RR_ENOMEM if that fails). */
int rr_sampler_indices(const rr_sampler *s, int64_t *out, size_t out_len);

/* torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on the CPU: out[0 .. n).
 * n < RR_SAMPLER_SHUFFLE_MAX_LEN (RR_ENOTSUP otherwise). randperm(10) with seed 0 is
 * 4 1 7 5 3 9 0 8 6 2. */
int rr_randperm(uint64_t n, uint64_t seed, int64_t *out);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* RINGREDUCE_SAMPLER_H_ */
