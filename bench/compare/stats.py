"""bench/compare: the statistics table.py prints, apart so that a test can check them on
made-up rounds (tests/test_compare_stats.py).

A system's figure for one size is the median over rounds; next to it the spread, so a reader
sees how much one launch can move it. A round is flagged when it lies more than 30% away from
each of its neighbouring rounds (the rounds just before and after it of the same system, np and
size; neighbours() says what the first and last take): one launch hit by something else on the
machine, which the median already outvotes but
which the reader should be able to find in runs.log. A cluster of bad rounds in a row is not
flagged that way; the spread shows it instead.
"""
import statistics

FLAG_FRACTION = 0.30      # a round this far from each neighbour is flagged
LAUNCH_SWING_MAX = 1.5    # issue 27: latency within 1.5x between any two launches


def summary(values):
    """(median, lowest, highest, spread) of a non-empty list; spread = (highest - lowest) /
    median, a fraction (0.12 = the rounds span 12% of their median)."""
    if not values:
        raise ValueError("summary of no values")
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return med, lo, hi, ((hi - lo) / med if med else 0.0)


def neighbours(n, i):
    """Indices of the rounds a round at index i (of n, in round order) is judged against: the
    ones just before and after it; the first and the last round, which lack one side, take the
    two nearest on their one side instead, so that a first round is not flagged for standing
    apart from a second round that is itself the odd one."""
    if n < 2:
        return []
    if i == 0:
        return [j for j in (1, 2) if j < n]
    if i == n - 1:
        return [j for j in (n - 2, n - 3) if j >= 0]
    return [i - 1, i + 1]


def flagged_rounds(series, fraction=FLAG_FRACTION):
    """series: [(round, value)] of one system, np and size. The rounds whose value differs by
    more than `fraction` (relative to the neighbour) from each of its neighbours (neighbours()).
    With a single round there is no neighbour and nothing is flagged; with two rounds more than
    `fraction` apart both are flagged (nothing says which one is off)."""
    s = sorted(series)
    out = []
    for i, (rnd, v) in enumerate(s):
        nbrs = [s[j][1] for j in neighbours(len(s), i)]
        if nbrs and all(n > 0 and abs(v / n - 1.0) > fraction for n in nbrs):
            out.append(rnd)
    return out


def launch_swing(values):
    """Largest over smallest of the launches' figures (1.0 for one launch): issue 27's
    'between any two launches'."""
    if not values:
        raise ValueError("swing of no values")
    lo = min(values)
    return max(values) / lo if lo > 0 else float("inf")


def ratio_at_least(mine, ref, want):
    """(ratio, met) for a higher-is-better figure; (None, None) when either is missing."""
    if mine is None or ref is None or ref <= 0:
        return None, None
    r = mine / ref
    return r, r >= want


def ratio_at_most(mine, ref, want):
    """(ratio, met) for a lower-is-better figure (latency)."""
    if mine is None or ref is None or ref <= 0:
        return None, None
    r = mine / ref
    return r, r <= want
