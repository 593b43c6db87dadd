#!/usr/bin/env python3
"""bench/compare: results.txt -> table.md, busbw_np<N>.dat and busbw.gp (gnuplot script).

results.txt holds lines "RESULT system np bytes time_us busbw_GBps wrong round [other% [load]]";
each (system, np, size) is summarised by its median over rounds (by time; busbw follows) and
the spread of its rounds; rounds far from both neighbours are flagged (stats.py says how).
other% (when present) is the CPU used by anything else on the machine during that launch,
load the 1-minute load average when it started.
"""
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats  # noqa: E402

SYSTEMS = ["mpi-tcp", "mpi-tcp-tuned", "mpi-shm", "mpi-shm-tuned", "gloo-ring",
           "gloo-ring_chunked", "socket-ring", "socket-ring-mt", "rr-tcp", "rr-shm"]
EXTRA = ["rr-tcp-inplace", "rr-shm-inplace", "mpi-tcp-tuned-inplace", "mpi-shm-tuned-inplace",
         "rr-tcp-unbound", "rr-shm-unbound"]
TCP_PEERS = ["mpi-tcp", "mpi-tcp-tuned", "gloo-ring", "gloo-ring_chunked"]
ALL_PEERS = TCP_PEERS + ["mpi-shm", "mpi-shm-tuned"]
# The ceiling for TCP: the faster of the bare socket rings (one thread, or a sender thread
# beside the receiving one), cell by cell.
BARE = ["socket-ring", "socket-ring-mt"]


def human(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k} {unit}"
    return f"{b} B"


def main(out):
    runs = defaultdict(list)  # (sys, np, bytes) -> [(time_us, busbw, wrong, round, other%, load)]
    with open(os.path.join(out, "results.txt")) as f:
        for line in f:
            p = line.split()
            if len(p) < 8 or p[0] != "RESULT":
                continue
            sysname, np_, b = p[1], int(p[2]), int(p[3])
            wrong = p[6]
            other = float(p[8]) if len(p) > 8 else None
            load = float(p[9]) if len(p) > 9 else None
            runs[(sysname, np_, b)].append((float(p[4]), float(p[5]), wrong, int(p[7]), other,
                                            load))

    # Systems outside the default set that this run measured (SYSTEMS=... of run.sh).
    extra = EXTRA + sorted({k[0] for k in runs} - set(SYSTEMS) - set(EXTRA))

    def med(sysname, np_, b, what="busbw"):
        r = runs.get((sysname, np_, b))
        if not r:
            return None
        t = statistics.median(x[0] for x in r)
        bw = b / (t * 1e3) * 2 * (np_ - 1) / np_ if t > 0 else 0.0
        return t if what == "time" else bw

    def best_round(sysname, np_, b, what="busbw"):
        """best over rounds: interference only ever slows a launch down"""
        r = runs.get((sysname, np_, b))
        if not r:
            return None
        t = min(x[0] for x in r)
        return t if what == "time" else b / (t * 1e3) * 2 * (np_ - 1) / np_

    nps = sorted({k[1] for k in runs})
    sizes = sorted({k[2] for k in runs})
    wrongs = [(k, x) for k, v in runs.items() for x in v if x[2] not in ("0", "N/A")]
    env = open(os.path.join(out, "env.txt")).read() if os.path.exists(
        os.path.join(out, "env.txt")) else ""

    def spread_note(sysname, np_, b):
        """' (12%)': how far apart this cell's rounds are, relative to their median."""
        r = runs.get((sysname, np_, b), [])
        if len(r) < 2:
            return ""
        return f" ({stats.summary([x[1] for x in r])[3] * 100:.0f}%)"

    def fmt(v, nd=2):
        return "–" if v is None else f"{v:.{nd}f}"

    def ratio(a, b):
        return "–" if a is None or not b else f"{a / b:.2f}×"

    def best(np_, b, peers):
        vals = [(med(s, np_, b), s) for s in peers if med(s, np_, b) is not None]
        return max(vals) if vals else (None, None)

    nround = {b: max(len(v) for k, v in runs.items() if k[2] == b) for b in sizes}
    spans = []  # consecutive sizes with the same number of rounds
    for b in sizes:
        if spans and spans[-1][2] == nround[b]:
            spans[-1][1] = b
        else:
            spans.append([b, b, nround[b]])
    rounds_note = "rounds per size: " + ", ".join(
        (human(a) if a == z else f"{human(a)}–{human(z)}") + f": {n}" for a, z, n in spans)

    L = []
    L.append("# bench/compare: ringreduce vs Open MPI, Gloo and a bare socket ring\n")
    L.append("All-reduce, float32 sum, one process per rank on this host. busbw in GB/s "
             "(algbw × 2(n−1)/n, GB = 10⁹ B); time = mean per rank, max over ranks; "
             "median over rounds (" + rounds_note + "), in brackets the spread of the rounds "
             "((highest − lowest) / median). "
             "Every result was checked (see the #wrong note below). ringreduce figures are "
             "out of place, as MPI's; Gloo's algorithms run in place.\n")
    L.append("```\n" + env.strip() + "\n```\n")
    L.append("Systems: `mpi-tcp` Open MPI `--mca pml ob1 --mca btl tcp,self` (default "
             "settings otherwise); `-tuned` adds `-x MALLOC_MMAP_MAX_=0 -x "
             "MALLOC_TRIM_THRESHOLD_=-1`; `mpi-shm` uses `--mca btl vader,self`; "
             "`gloo-ring`/`gloo-ring_chunked` are Gloo's AllreduceRing/AllreduceRingChunked "
             "over its TCP transport; `socket-ring` is bench/compare/socket_ring.c, a bare TCP "
             "ring with no library, and `socket-ring-mt` the same with a sender thread beside "
             "the receiving one (the faster of the two, cell by cell, is the ceiling for TCP, "
             "the \"bare ring\" of the ratios); `rr-tcp` is ringreduce with "
             "`RR_TRANSPORT=tcp`, `rr-shm` with its default (shared memory).\n")

    for np_ in nps:
        L.append(f"\n## busbw, np={np_}\n")
        hdr = ["size"] + SYSTEMS + ["rr-tcp ÷ best TCP peer", "rr-tcp ÷ bare ring",
                                     "rr-shm ÷ best peer", "rr-shm ÷ mpi-shm-tuned"]
        L.append("| " + " | ".join(hdr) + " |")
        L.append("|" + "---|" * len(hdr))
        for b in sizes:
            row = [human(b)]
            vals = {s: med(s, np_, b) for s in SYSTEMS}
            top = max((v for v in vals.values() if v is not None), default=None)
            for s in SYSTEMS:
                v = vals[s]
                cell = fmt(v, 3 if v is not None and v < 0.1 else 2)
                cell = f"**{cell}**" if v is not None and v == top else cell
                row.append(cell + spread_note(s, np_, b))
            bt, _ = best(np_, b, TCP_PEERS)
            ba, _ = best(np_, b, ALL_PEERS)
            bb, _ = best(np_, b, BARE)
            row += [ratio(vals["rr-tcp"], bt), ratio(vals["rr-tcp"], bb),
                    ratio(vals["rr-shm"], ba), ratio(vals["rr-shm"], vals["mpi-shm-tuned"])]
            L.append("| " + " | ".join(row) + " |")

    # The rest of what was measured, busbw by size (ringreduce in place, unbound launches,
    # Open MPI with a forced algorithm, ...).
    for np_ in nps:
        shown = [s for s in extra if any((s, np_, b) in runs for b in sizes if b >= 512 << 10)]
        if not shown:
            continue
        L.append(f"\n## busbw, np={np_}, other systems of this run\n")
        L.append("| size | " + " | ".join(shown) + " |")
        L.append("|" + "---|" * (len(shown) + 1))
        for b in [x for x in sizes if x >= 512 << 10]:
            L.append(f"| {human(b)} | " + " | ".join(
                fmt(med(s, np_, b)) + spread_note(s, np_, b) for s in shown) + " |")

    # Per-round spread at the largest size: how steady the machine was.
    big = max(sizes) if sizes else None
    if big:
        L.append(f"\n## {human(big)} busbw per round (spread = machine drift; in brackets the "
                 "CPU used by other work on the machine during that launch, where recorded)\n")
        rounds = sorted({x[3] for v in runs.values() for x in v})
        hdr = ["system", "np"] + [f"round {r}" for r in rounds]
        L.append("| " + " | ".join(hdr) + " |")
        L.append("|" + "---|" * len(hdr))
        for np_ in nps:
            for s in SYSTEMS + extra:
                r = {x[3]: x for x in runs.get((s, np_, big), [])}

                def cell(x):
                    if x is None:
                        return "–"
                    return fmt(x[1]) + ("" if x[4] is None else f" ({x[4]:.0f}%)")
                if r:
                    L.append("| " + " | ".join([s, str(np_)] + [cell(r.get(k)) for k in rounds])
                             + " |")

    # Latency across launches: every round launches the small sizes afresh.
    K8 = 8 << 10
    L.append("\n## Small-message latency across launches (µs per call: the median launch, and "
             "the slowest launch over the fastest)\n")
    hdr = ["system"] + [f"{human(b)} np={n}" for b in (8, 128, K8) for n in nps]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for s in SYSTEMS + extra:
        row = [s]
        for b in (8, 128, K8):
            for n in nps:
                t = [x[0] for x in runs.get((s, n, b), [])]
                row.append("–" if not t else
                           f"{statistics.median(t):.1f} (×{stats.launch_swing(t):.2f}, "
                           f"{len(t)} launches)")
        L.append("| " + " | ".join(row) + " |")

    # Rounds far from both neighbours.
    flags = []
    for (s, n, b), r in sorted(runs.items()):
        by_round = {x[3]: x for x in r}
        for rnd in stats.flagged_rounds([(x[3], x[1] if b >= 512 << 10 else 1.0 / x[0])
                                         for x in r if x[0] > 0]):
            x = by_round[rnd]
            order = sorted(by_round)
            near = [order[j] for j in stats.neighbours(len(order), order.index(rnd))]
            others = ", ".join(f"round {k}: {by_round[k][1]:.3g}" if b >= 512 << 10
                               else f"round {k}: {by_round[k][0]:.1f} µs" for k in sorted(near))
            what = f"{x[1]:.3g} GB/s" if b >= 512 << 10 else f"{x[0]:.1f} µs"
            flags.append(f"- {s} np={n} {human(b)} round {rnd}: {what} against {others}; "
                         f"other CPU {fmt(x[4], 0)}%, load {fmt(x[5], 2)} at its start")
    L.append(f"\n## Flagged rounds (more than {stats.FLAG_FRACTION * 100:.0f}% from each "
             "neighbouring round of the same system and size)\n")
    L.append("\n".join(flags) if flags else "None: no round stands apart from its neighbours.")

    # Issue 27's targets.
    L.append("\n## Targets (issue 27)\n")
    L.append("Medians over rounds. busbw in GB/s, latency in µs.\n")
    L.append("| target | np | size | ringreduce | reference | ratio | met |")
    L.append("|---|---|---|---|---|---|---|")

    def row27(name, np_, b, mine, ref, refname, r, ok, want, cmp_):
        if r is None:
            L.append(f"| {name} | {np_} | {human(b)} | {fmt(mine)} | – | – | – |")
        else:
            L.append(f"| {name} | {np_} | {human(b)} | {fmt(mine)} | {fmt(ref)} ({refname}) | "
                     f"{r:.2f}× (want {cmp_} {want}×) | {'yes' if ok else '**no**'} |")

    M4 = 4 << 20
    for np_ in nps:
        for b in [x for x in sizes if x >= M4]:
            for refs, name, want in ((["mpi-tcp-tuned"], "mpi-tcp-tuned", 1.25),
                                     (BARE, "bare ring", 0.90)):
                mine = med("rr-tcp", np_, b)
                other, ref = best(np_, b, refs)
                r, ok = stats.ratio_at_least(mine, other, want)
                row27(f"tcp ≥ {want}× {name}", np_, b, mine, other, ref, r, ok, want, "≥")
            # In place against in place, where the run has Open MPI's (torch's all_reduce is
            # in place; out of place ringreduce's reductions write a third buffer).
            mine, other = med("rr-tcp-inplace", np_, b), med("mpi-tcp-tuned-inplace", np_, b)
            if other is not None:
                r, ok = stats.ratio_at_least(mine, other, 1.25)
                row27("tcp in place ≥ 1.25× mpi-tcp-tuned in place", np_, b, mine, other,
                      "mpi-tcp-tuned-inplace", r, ok, 1.25, "≥")
    for np_ in [n for n in nps if n == 4]:
        b = 256 << 20 if (256 << 20) in sizes else big
        mine, other = med("rr-shm", np_, b), med("mpi-shm-tuned", np_, b)
        r, ok = stats.ratio_at_least(mine, other, 1.5)
        row27("shm ≥ 1.5× mpi-shm-tuned", np_, b, mine, other, "mpi-shm-tuned", r, ok, 1.5, "≥")
    for np_ in nps:
        for b in (8, K8):
            for s in ("rr-tcp", "rr-shm"):
                t = [x[0] for x in runs.get((s, np_, b), [])]
                if len(t) >= 2:
                    sw = stats.launch_swing(t)
                    ok = sw <= stats.LAUNCH_SWING_MAX
                    L.append(f"| {s} latency between launches | {np_} | {human(b)} | "
                             f"{min(t):.1f} … {max(t):.1f} | – | {sw:.2f}× (want ≤ "
                             f"{stats.LAUNCH_SWING_MAX}×) | {'yes' if ok else '**no**'} |")
            if np_ == 2:
                mine, other = med("rr-shm", np_, b, "time"), med("mpi-shm", np_, b, "time")
                r, ok = stats.ratio_at_most(mine, other, 2.0)
                row27("shm latency ≤ 2× mpi-shm", np_, b, mine, other, "mpi-shm", r, ok, 2.0, "≤")

    # The targets.
    L.append("\n## Targets (issue 5)\n")
    L.append("Medians over rounds; the last column compares each system's best round instead "
             "(other work on the machine only ever slows a launch down). busbw in GB/s, "
             "latency in µs.\n")
    L.append("| target | np | ringreduce | peer | ratio (median) | met | ratio (best rounds) | met |")
    L.append("|---|---|---|---|---|---|---|---|")

    def target(name, np_, mine, ref, want, refname, lower_is_better=False, best_pair=None):
        if mine is None or ref is None:
            L.append(f"| {name} | {np_} | {fmt(mine)} | – | – | – | – | – |")
            return
        def judge(a, b):
            r = a / b if b else float("inf")
            ok = r <= want if lower_is_better else r >= want
            return f"{r:.2f}×", ("yes" if ok else "**no**")
        r, ok = judge(mine, ref)
        rb, okb = judge(*best_pair) if best_pair and None not in best_pair else ("–", "–")
        L.append(f"| {name} | {np_} | {mine:.2f} | {ref:.2f} ({refname}) | {r} "
                 f"(want {'≤' if lower_is_better else '≥'} {want}×) | {ok} | {rb} | {okb} |")

    B = 256 << 20 if (256 << 20) in sizes else big
    M2 = 2 << 20
    def bestof(np_, b, peers, f):
        vals = [(f(s, np_, b), s) for s in peers if f(s, np_, b) is not None]
        return max(vals) if vals else (None, None)

    def tgt(name, np_, mine_sys, peers, b, want, lower=False):
        what = "time" if lower else "busbw"
        mine, mine_b = med(mine_sys, np_, b, what), best_round(mine_sys, np_, b, what)
        if lower:   # latency: the single peer given
            ref, refname = med(peers[0], np_, b, what), peers[0]
            ref_b = best_round(peers[0], np_, b, what)
        else:
            ref, refname = bestof(np_, b, peers, med)
            ref_b, _ = bestof(np_, b, peers, best_round)
        target(name, np_, mine, ref, want, refname, lower, (mine_b, ref_b))

    for np_ in nps:
        hb = human(B)
        tgt(f"{hb} tcp ≥ 2× Open MPI tcp", np_, "rr-tcp", ["mpi-tcp"], B, 2.0)
        tgt(f"{hb} tcp ≥ 1.5× Gloo", np_, "rr-tcp", ["gloo-ring", "gloo-ring_chunked"], B, 1.5)
        tgt(f"{hb} tcp ≥ 1.25× Open MPI tuned", np_, "rr-tcp", ["mpi-tcp-tuned"], B, 1.25)
        tgt(f"{hb} tcp ≥ 85% of bare ring", np_, "rr-tcp", BARE, B, 0.85)
        tgt(f"{hb} shm ≥ 1.5× Open MPI vader tuned", np_, "rr-shm", ["mpi-shm-tuned"], B, 1.5)
        tgt("2 MiB tcp ≥ best TCP peer", np_, "rr-tcp", TCP_PEERS, M2, 1.0)
        tgt("2 MiB shm ≥ best peer", np_, "rr-shm", ALL_PEERS, M2, 1.0)
        tgt("8 B latency tcp ≤ Open MPI tcp", np_, "rr-tcp", ["mpi-tcp"], 8, 1.0, True)
        tgt("8 B latency shm ≤ 2× Open MPI vader", np_, "rr-shm", ["mpi-shm"], 8, 2.0, True)

    L.append("")
    if wrongs:
        L.append(f"**{len(wrongs)} runs reported wrong elements:** " + ", ".join(
            f"{k[0]} np={k[1]} {human(k[2])} round {x[3]}: {x[2]}" for k, x in wrongs[:20]))
    else:
        L.append("#wrong: every run of every system checked its sums: 0 wrong elements.")
    L.append("\nRaw: `results.txt` (one RESULT line per system, np, size and round), "
             "`runs.log` (every command, the load average when it started and the CPU other work "
             "used during it), `env.txt`; `*.runK.*` are earlier passes whose large sizes "
             "were rerun. "
             "Plot: `busbw.png`.\n")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(L))

    # Plot data and gnuplot script.
    plots = []
    for np_ in nps:
        dat = f"busbw_np{np_}.dat"
        with open(os.path.join(out, dat), "w") as f:
            f.write("# bytes " + " ".join(SYSTEMS) + "\n")
            for b in sizes:
                f.write(str(b) + " " + " ".join(
                    ("NaN" if med(s, np_, b) is None else f"{med(s, np_, b):.5f}")
                    for s in SYSTEMS) + "\n")
        plots.append((np_, dat))
    styles = {"rr-tcp": "lw 3 lc rgb '#d62728'", "rr-shm": "lw 3 lc rgb '#1f77b4'",
              "socket-ring": "lw 2 dt 2 lc rgb 'black'",
              "socket-ring-mt": "lw 2 dt 3 lc rgb 'black'"}
    gp = ["set terminal pngcairo size 1400,560 font ',10' noenhanced", "set output 'busbw.png'",
          "set logscale x 2", "set xlabel 'message size (bytes)'", "set ylabel 'busbw (GB/s)'",
          "set key top left font ',9'", "set grid",
          "set format x '%.0b%B'", f"set multiplot layout 1,{len(plots)}"]
    for np_, dat in plots:
        gp.append(f"set title 'all-reduce float32 sum, np={np_} (one host)'")
        parts = []
        for i, s in enumerate(SYSTEMS):
            st = styles.get(s, "lw 1.5")
            parts.append(f"'{dat}' using 1:{i + 2} with linespoints {st} pt {i + 1} ps 0.7 "
                         f"title '{s}'")
        gp.append("plot " + ", \\\n     ".join(parts))
    gp.append("unset multiplot")
    with open(os.path.join(out, "busbw.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
