"""bench/compare's statistics (bench/compare/stats.py) and the table built from them
(bench/compare/table.py), on made-up rounds whose medians, spreads, flags and target verdicts
are known exactly. No benchmark runs here: this checks the arithmetic a reader trusts.

    python3 tests/test_compare_stats.py
"""
import os
import random
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "compare"))
import stats  # noqa: E402
import table  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def close(a, b):
    # Every figure below is a ratio of short decimal numbers: equal up to float rounding.
    return abs(a - b) <= 1e-12 * max(1.0, abs(b))


def test_stats(rng):
    med, lo, hi, spread = stats.summary([2.0, 1.0, 4.0, 3.0])
    check((med, lo, hi) == (2.5, 1.0, 4.0) and close(spread, 3.0 / 2.5), f"summary: {spread}")
    # A dip in the middle of five steady rounds is flagged; its neighbours are not.
    check(stats.flagged_rounds([(1, 10), (2, 10.5), (3, 6), (4, 9.8), (5, 10)]) == [3],
          "one low round among steady ones")
    # 29% away from each neighbour: not flagged; 31%: flagged.
    check(stats.flagged_rounds([(1, 10), (2, 12.9), (3, 10)]) == [], "29% is not flagged")
    check(stats.flagged_rounds([(1, 10), (2, 13.1), (3, 10)]) == [2], "31% is flagged")
    # Far from one neighbour but close to the other: a step, not an outlier.
    check(stats.flagged_rounds([(1, 10), (2, 10), (3, 20), (4, 20)]) == [],
          "a step between two levels flags nothing")
    # The first and last rounds are judged against the two nearest rounds on their side: a
    # first round apart is flagged, but not one beside an odd second round; two rounds far
    # apart are both flagged; one round alone has no neighbour.
    check(stats.flagged_rounds([(1, 20), (2, 10), (3, 10)]) == [1], "a first round apart")
    check(stats.flagged_rounds([(1, 10), (2, 3), (3, 10), (4, 10)]) == [2],
          "a first round beside an odd second one")
    check(stats.flagged_rounds([(1, 10), (2, 20)]) == [1, 2], "two rounds apart")
    check(stats.flagged_rounds([(7, 5.0)]) == [], "one round alone")
    # Rounds given out of order are judged in round order.
    check(stats.flagged_rounds([(3, 10), (1, 10), (2, 3)]) == [2], "unsorted rounds")
    check(close(stats.launch_swing([17.0, 152.0, 40.0]), 152.0 / 17.0), "swing")
    check(stats.ratio_at_least(1.25, 1.0, 1.25) == (1.25, True), "ratio at least, met")
    check(stats.ratio_at_most(3.0, 1.0, 2.0) == (3.0, False), "ratio at most, missed")
    check(stats.ratio_at_least(None, 1.0, 1.0) == (None, None), "missing figure")
    # Random series: a flagged round always lies > 30% from every neighbour, an unflagged one
    # within 30% of at least one (the rule, checked against its definition).
    for _ in range(200):
        n = rng.randint(1, 8)
        series = [(r + 1, rng.choice([1.0, 1.0, 1.0, 0.5, 2.0]) * rng.uniform(0.9, 1.1))
                  for r in range(n)]
        flagged = set(stats.flagged_rounds(series))
        for i, (rnd, v) in enumerate(series):
            if n == 1:
                nbrs = []
            elif i in (0, n - 1):  # the two nearest on its one side
                nbrs = [series[j][1] for j in ((1, 2) if i == 0 else (n - 2, n - 3))
                        if 0 <= j < n]
            else:
                nbrs = [series[i - 1][1], series[i + 1][1]]
            apart = bool(nbrs) and all(abs(v / x - 1) > 0.30 for x in nbrs)
            check(apart == (rnd in flagged), f"random series {series}: round {rnd}")


def test_table(rng):
    """Five rounds of three systems at np 2, one size of 8 MiB and the latency sizes, written
    as run.sh writes them; table.md must hold the medians, spreads, flags and verdicts."""
    mib8 = 8 << 20
    busbw = {  # round -> GB/s
        "rr-tcp": [1.60, 1.62, 0.90, 1.58, 1.61],         # round 3 dips: flagged
        "mpi-tcp-tuned": [1.20, 1.30, 1.25, 1.22, 1.28],  # median 1.25
        "socket-ring": [1.70, 1.80, 1.75, 1.72, 1.78],    # median 1.75
        "socket-ring-mt": [1.40, 1.50, 1.45, 1.42, 1.48],  # median 1.45: the other is the ceiling
    }
    lat8 = {"rr-tcp": [20.0, 25.0, 31.0, 22.0, 24.0]}     # swing 31/20 = 1.55: missed
    lines = []
    order = list(range(5))
    rng.shuffle(order)  # run.sh writes rounds in time order; the table must not depend on it
    for i in order:
        for s, v in busbw.items():
            t = mib8 / (v[i] * 1e3) * 2 * (2 - 1) / 2  # the time that gives this busbw
            lines.append(f"RESULT {s} 2 {mib8} {t!r} {v[i]} 0 {i + 1} 3 {0.25 * (i + 1)}")
        for s, v in lat8.items():
            lines.append(f"RESULT {s} 2 8 {v[i]} 0.0 0 {i + 1} 1")
    with tempfile.TemporaryDirectory() as out:
        with open(os.path.join(out, "results.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        table.main(out)
        md = open(os.path.join(out, "table.md")).read()
    want_rows = [
        # medians 1.60 / 1.25 / 1.75 and spreads (1.62 - 0.90) / 1.60 = 45%, 8%, 6%
        "| 8 MiB | – | 1.25 (8%) | – | – | – | – | **1.75** (6%) | 1.45 (7%) | 1.60 (45%) | – | "
        "1.28× | 0.91× |",
        "- rr-tcp np=2 8 MiB round 3: 0.9 GB/s against round 2: 1.62, round 4: 1.58; "
        "other CPU 3%, load 0.75 at its start",
        "| tcp ≥ 1.25× mpi-tcp-tuned | 2 | 8 MiB | 1.60 | 1.25 (mpi-tcp-tuned) | 1.28× "
        "(want ≥ 1.25×) | yes |",
        "| tcp ≥ 0.9× bare ring | 2 | 8 MiB | 1.60 | 1.75 (socket-ring) | 0.91× "
        "(want ≥ 0.9×) | yes |",
        "| rr-tcp latency between launches | 2 | 8 B | 20.0 … 31.0 | – | 1.55× (want ≤ 1.5×) "
        "| **no** |",
        "| rr-tcp | 24.0 (×1.55, 5 launches) | – | – |",
    ]
    for w in want_rows:
        check(w in md, f"table.md lacks the line:\n  {w}\n--- table.md:\n{md}")
    # Only round 3 of rr-tcp stands apart.
    check(md.count("\n- ") == 1, "exactly one flagged round")


def main():
    seed = int(os.environ.get("RR_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
    print(f"seed {seed} (RR_TEST_SEED replays it)")
    rng = random.Random(seed)
    test_stats(rng)
    test_table(rng)
    if failures:
        print("FAILED:\n" + "\n".join(failures[:10]))
        return 1
    print("bench/compare statistics: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
