#!/usr/bin/python3
"""Golden vectors for ringreduce's DistributedSampler, made by real torch.

Run with the interpreter that has torch (Debian's python3-torch installs into /usr/bin/python3):

    /usr/bin/python3 tests/data/make_sampler_golden.py > tests/data/sampler_golden.txt

The committed file was made with the defaults (--cases 200 --seed 2026). tests/test_sampler.c
reads this format; tests/test_sampler_live.sh runs this script with another seed and compares
again, live. Lines:

    P n seed hash first...                    torch.randperm(n, generator=manual_seed(seed))
    S N R shuffle drop_last seed epoch num_samples hash_0 .. hash_{R-1} : first...

hash_r covers list(DistributedSampler(...)) of rank r, in order; `first` lists the leading
indices (up to 16 of the permutation, 8 of rank 0's list) so a mismatch can be shown, not only
detected. hash: h = 14695981039346656037; for each index v: h = ((h ^ v) * 1099511628211) mod 2^64
(FNV-1a on 64-bit words; each step is a bijection of h, so one changed index always changes it).
"""
import argparse
import random
import sys

import torch
from torch.utils.data import DistributedSampler

M64 = (1 << 64) - 1


def fnv(seq):
    h = 14695981039346656037
    for v in seq:
        h = ((h ^ (v & M64)) * 1099511628211) & M64
    return h


class Sized:
    """A dataset is only asked for its length by the sampler."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def seed_value(rng):
    kind = rng.randrange(5)
    if kind == 0:
        return rng.randrange(0, 100)
    if kind == 1:
        return rng.randrange(0, 1 << 31)
    if kind == 2:
        return -rng.randrange(1, 1 << 62)          # negative: torch takes it as int64
    if kind == 3:
        return rng.randrange(1 << 32, 1 << 62)     # above 2^32: only the low 32 bits count
    return (1 << 64) - 1 - rng.randrange(0, 1000)  # near torch's upper limit 2^64 - 1


def dataset_len(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randrange(0, 12)                 # tiny, often below num_replicas
    if kind == 1:
        return rng.randrange(12, 200)
    if kind == 2:
        return rng.randrange(200, 5000)
    return int(10 ** rng.uniform(3.7, 5.0))         # up to 100,000


def case_line(n, r, shuffle, drop_last, seed, epoch):
    hashes, first = [], []
    num_samples = None
    for rank in range(r):
        s = DistributedSampler(Sized(n), num_replicas=r, rank=rank, shuffle=bool(shuffle),
                               seed=seed, drop_last=bool(drop_last))
        s.set_epoch(epoch)
        idx = list(s)
        assert len(idx) == len(s)
        num_samples = len(s)
        hashes.append(fnv(idx))
        if rank == 0:
            first = idx[:8]
    return "S %d %d %d %d %d %d %d %s : %s" % (
        n, r, shuffle, drop_last, seed, epoch, num_samples,
        " ".join(str(h) for h in hashes), " ".join(str(v) for v in first))


def perm_line(n, seed):
    g = torch.Generator()
    g.manual_seed(seed)
    p = torch.randperm(n, generator=g).tolist()
    return "P %d %d %d %s" % (n, seed, fnv(p), " ".join(str(v) for v in p[:16]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    out = sys.stdout
    out.write("# DistributedSampler golden vectors: tests/data/make_sampler_golden.py "
              "--cases %d --seed %d, torch %s\n" % (args.cases, args.seed, torch.__version__))
    # randperm: the known value, edge sizes, then random ones.
    for n, seed in [(10, 0), (0, 0), (1, 0), (2, 0), (10, 1), (624, 5), (625, 5), (1000, 42),
                    (100000, 0), (10, -1), (10, (1 << 64) - 1), (10, 1 << 32)]:
        out.write(perm_line(n, seed) + "\n")
    for _ in range(max(1, args.cases // 10)):
        out.write(perm_line(dataset_len(rng), seed_value(rng)) + "\n")
    # Fixed edge cases, then random ones: every (shuffle, drop_last), N < R, N == R,
    # N % R == 0, empty datasets, several epochs.
    fixed = [(0, 1, 1, 0, 0, 0), (0, 4, 1, 1, 0, 0), (0, 3, 0, 0, 0, 0), (1, 1, 1, 0, 0, 0),
             (1, 9, 1, 0, 7, 3), (1, 9, 1, 1, 7, 3), (3, 5, 0, 0, 0, 0), (3, 5, 1, 0, 0, 1),
             (3, 5, 1, 1, 0, 0), (5, 5, 1, 0, 0, 0), (7, 9, 1, 0, 3, 2), (10, 3, 1, 0, 0, 0),
             (10, 3, 1, 1, 0, 0), (10, 3, 0, 1, 0, 0), (12, 4, 1, 1, 1, 1), (1797, 4, 1, 0, 0, 0),
             (1437, 4, 1, 0, 0, 5), (99991, 7, 1, 0, -3, 2), (100000, 8, 1, 1, 1 << 33, 9)]
    for f in fixed:
        out.write(case_line(*f) + "\n")
    for _ in range(args.cases - len(fixed)):
        n = dataset_len(rng)
        r = rng.randint(1, 9)
        shuffle = 1 if rng.random() < 0.8 else 0
        drop_last = rng.randrange(2)
        seed = seed_value(rng)
        epoch = rng.choice([0, 1, 2, 3, 7, rng.randrange(0, 1000)])
        if seed + epoch > M64:  # torch refuses seeds past 2^64 - 1 (OverflowError)
            epoch = 0
        out.write(case_line(n, r, shuffle, drop_last, seed, epoch) + "\n")


if __name__ == "__main__":
    main()
