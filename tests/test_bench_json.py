#!/usr/bin/env python3
"""Checks one *_perf run's JSON (-J) against nccl-tests 2.19's document and against the table
the same run printed (tests/test_bench.sh calls it):

  test_bench_json.py JSON TABLE NRANKS FACTOR [--iter SKIP] [--cputime]
                     [--a2av SPREAD|--matrix FILE] [--args ARG...]

Exact where the document is exact: the keys and their order (util.cu's writers), nccl-tests'
string booleans and 6-character root (--cputime: -C 1's "cpu_time" for "time"), one result per table row with the row's size, count,
type, redop and root; the figures equal the table's within its printing; algbw = size /
time, busbw = algbw * FACTOR; #wrong 0. With --iter (-I 1): the per-iteration summary
recomputed from times_us (the first SKIP left out) by nccl-tests' rules, every time the
slowest rank's, min <= p50 <= p95 <= p99 <= max, and the table's i_* columns. With --a2av /
--matrix: every row's size and count as nccl-tests' alltoallv computes them, computed here
independently. Exit 0 pass, 1 fail (the first difference on stderr).
"""
import json
import math
import re
import sys

TOP = ["version", "start_time", "args", "env", "ringreduce", "config", "results",
       "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"]
CONFIG = ["nthreads", "ngpus", "minimum_bytes", "maximum_bytes", None, "warmup_iters",
          "iterations", "aggregated_iterations", "validation", "graph", "blocking_collectives",
          "per_iter_timing", "per_iter_skip", "parallel_init", "devices"]
DEVICE = ["rank", "group", "pid", "hostname", "device", "device_hex", "device_info"]
HALF = ["time", "alg_bw", "bus_bw", "nwrong"]
PER_ITER = ["skipped_iterations", "min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us",
            "stdev_us", "cv_pct", "times_us"]
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")
ESIZE = {"int8": 1, "uint8": 1, "half": 2, "bfloat16": 2, "int32": 4, "float": 4, "int64": 8,
         "double": 8}


class Fail(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Fail(msg)


def tol(printed):
    """Half a unit of the printed number's last digit (nccl-tests 2.19's formatting)."""
    if "e" in printed:
        return abs(float(printed)) * 0.051
    d = printed.find(".")
    return 0.5 * 10 ** -(len(printed) - d - 1) * 1.01 if d >= 0 else 0.51


def same(value, printed, what):
    need(abs(value - float(printed)) <= tol(printed) + 1e-6,
         f"{what}: JSON {value} but the table printed {printed}")


def close(a, b, what, rel=1e-4, abs_=2e-6):
    need(abs(a - b) <= abs_ + rel * abs(b), f"{what}: {a} != {b}")


def stats_of(times):
    """nccl-tests' computeIterStats."""
    s = sorted(times)
    n = len(s)
    def rank(p):
        return s[min(n - 1, (n * p + 99) // 100 - 1)]
    avg = sum(s) / n
    sd = math.sqrt(sum((x - avg) ** 2 for x in s) / n)
    return {"min_us": s[0], "max_us": s[-1], "avg_us": avg, "p50_us": s[n // 2],
            "p95_us": rank(95), "p99_us": rank(99), "stdev_us": sd,
            "cv_pct": sd / avg * 100 if avg > 0 else 0.0}


def a2av_sizes(n, es, nominal, spread, matrix):
    """(size, count) of alltoallv_perf's row for a nominal size, or None when skipped."""
    def pair(i, j, T):
        if matrix:
            return matrix[i][j]
        if n == 1:
            return T & ~15
        d = (j - i + n) % n
        b = (1 - spread) * T / n + spread * d * T / (n * (n - 1) / 2)
        return int(b) & ~15
    param = 0 if matrix else (nominal // es // n) & ~(16 // es - 1)
    T = param * n * es
    send = max(sum(pair(i, j, T) // es for j in range(n)) for i in range(n))
    recv = max(sum(pair(j, i, T) // es for j in range(n)) for i in range(n))
    if send == 0 and recv == 0:
        return None
    return max(send, recv) * es, param


def check(args):
    path, table, n, factor = args[0], args[1], int(args[2]), float(args[3])
    opts = args[4:]
    iter_skip = int(opts[opts.index("--iter") + 1]) if "--iter" in opts else None
    spread = float(opts[opts.index("--a2av") + 1]) if "--a2av" in opts else None
    matrix = None
    if "--matrix" in opts:
        rows_ = [l.split() for l in open(opts[opts.index("--matrix") + 1]) if l.strip()]
        matrix = [[int(float(x)) & ~15 for x in r] for r in rows_]
    want_args = opts[opts.index("--args") + 1:] if "--args" in opts else None
    half_keys = (["cpu_time"] if "--cputime" in opts else ["time"]) + HALF[1:]

    d = json.load(open(path), object_pairs_hook=lambda kv: dict(kv))
    need(list(d) == TOP, f"top-level keys {list(d)}")
    need(d["version"] == 3, "version")
    need(STAMP.match(d["start_time"]) and STAMP.match(d["end_time"]), "start/end time")
    need(all(isinstance(a, str) for a in d["args"]), "args")
    if want_args is not None:
        need(d["args"][1:] == want_args, f"args {d['args'][1:]} != {want_args}")
    need(f"WORLD_SIZE={n}" in d["env"], "env lacks WORLD_SIZE")
    need(not any(e.startswith("RR_JOB_TOKEN=") or "SECRET" in e.split("=")[0] for e in d["env"]),
         "env carries a secret")
    need(all("=" in e for e in d["env"]), "env entries are NAME=VALUE")
    rr = d["ringreduce"]
    need(rr["nranks"] == n and rr["tool"].endswith("_perf"), "ringreduce object")
    c = d["config"]
    step = "step_factor" if "step_factor" in c else "step_bytes"
    need(list(c) == [k or step for k in CONFIG], f"config keys {list(c)}")
    need((c["nthreads"], c["ngpus"], c["aggregated_iterations"], c["graph"]) == (1, 1, 1, 0),
         "config constants")
    for k in ("blocking_collectives", "per_iter_timing", "parallel_init"):
        need(c[k] in ("true", "false"), f"config {k}: nccl-tests' string booleans")
    need(c["per_iter_timing"] == ("true" if iter_skip is not None else "false"), "per_iter_timing")
    need(c["per_iter_skip"] == (iter_skip or 0), "per_iter_skip")
    need(len(c["devices"]) == n, "devices")
    for i, dev in enumerate(c["devices"]):
        need(list(dev) == DEVICE and dev["rank"] == i and dev["pid"] > 0, f"device {i}: {dev}")
    iters = c["iterations"]

    lines = [l.split() for l in open(table) if l.strip() and not l.startswith("#")]
    res = d["results"]
    need(len(res) == len(lines), f"{len(res)} results for {len(lines)} table rows")
    ip = 13 if iter_skip is not None else 9  # the table's in-place time column
    for r, t in zip(res, lines):
        keys = ["size", "count", "type", "redop", "root", "out_of_place"]
        keys += ["out_of_place_per_iter"] if iter_skip is not None else []
        keys += ["in_place"] + (["in_place_per_iter"] if iter_skip is not None else [])
        keys += ["actual_iterations", "experiment_name"]
        need(list(r) == keys, f"result keys {list(r)}")
        need([r["size"], r["count"], r["type"], r["redop"]] == [int(t[0]), int(t[1]), t[2], t[3]],
             f"row {t[:4]} against {r}")
        need(r["root"] == "%6i" % int(t[4]), f"root {r['root']!r}: nccl-tests' %6i text")
        need(r["actual_iterations"] == iters and r["experiment_name"] == "", "row trailer")
        where = f"size {r['size']}"
        for name, col in (("out_of_place", 5), ("in_place", ip)):
            h = r[name]
            need(list(h) == half_keys, f"{name} keys {list(h)}")
            need(h["nwrong"] == 0 and t[col + 3] == "0", f"{where} {name}: #wrong {h['nwrong']}")
            h["time"] = h[half_keys[0]]
            same(h["time"], t[col], f"{where} {name} time")
            same(h["alg_bw"], t[col + 1], f"{where} {name} algbw")
            same(h["bus_bw"], t[col + 2], f"{where} {name} busbw")
            close(h["alg_bw"], r["size"] / (h["time"] * 1e3), f"{where} {name} algbw = size/time")
            close(h["bus_bw"], h["alg_bw"] * factor, f"{where} {name} busbw = algbw * {factor}")
            if iter_skip is None:
                continue
            p = r[name + "_per_iter"]
            need(list(p) == PER_ITER + (["per_process_max_times_us"] if n > 1 else []),
                 f"{name}_per_iter keys {list(p)}")
            need(p["skipped_iterations"] == iter_skip and len(p["times_us"]) == iters,
                 f"{where} {name}: {len(p['times_us'])} times")
            if n > 1:
                rows_ = p["per_process_max_times_us"]
                need(len(rows_) == n and all(len(x) == iters for x in rows_), "per-process rows")
                need(p["times_us"] == [max(x[i] for x in rows_) for i in range(iters)],
                     f"{where} {name}: times_us is not the slowest rank's")
            st = stats_of(p["times_us"][iter_skip:])
            for k, v in st.items():
                # The times are printed to 1e-6 us; cv_pct is stdev / avg of unrounded times.
                slack = 100 * 2e-6 / st["avg_us"] if k == "cv_pct" and st["avg_us"] > 0 else 2e-6
                close(p[k], v, f"{where} {name} {k}", abs_=slack)
            need(p["min_us"] <= p["p50_us"] <= p["p95_us"] <= p["p99_us"] <= p["max_us"],
                 f"{where} {name}: percentiles out of order")
            need(p["min_us"] <= p["avg_us"] <= p["max_us"], f"{where} {name}: avg")
            for k, off in (("min_us", 4), ("max_us", 5), ("p99_us", 6), ("cv_pct", 7)):
                same(p[k], t[col + off], f"{where} {name} table {k}")
    if spread is not None or matrix:  # every nominal size has its row, in order, per type
        types = list(dict.fromkeys(r["type"] for r in res))
        want = [a2av_sizes(n, ESIZE[ty], s, spread, matrix) for ty in types for s in nominal_sizes(c)]
        want = [w for w in want if w]
        need([(r["size"], r["count"]) for r in res] == want, f"alltoallv rows {want}")
    need(d["out_of_bounds"] == {"count": 0, "okay": "true"}, f"out_of_bounds {d['out_of_bounds']}")
    avg = d["average_bus_bandwidth"]
    need(list(avg) == ["bandwidth", "okay"] and avg["okay"] == "unchecked", f"average {avg}")
    bws = [r[h]["bus_bw"] for r in res for h in ("out_of_place", "in_place")]
    need(len(bws) > 0, "no results")
    close(avg["bandwidth"], sum(bws) / len(bws), "average bus bandwidth")
    need(d["errors"] == [], f"errors {d['errors']}")


def nominal_sizes(c):
    s, out = c["minimum_bytes"], []
    while s <= c["maximum_bytes"]:
        out.append(s)
        nxt = (s * c["step_factor"] if s else 1) if "step_factor" in c else s + c["step_bytes"]
        if nxt <= s:
            break
        s = nxt
    return out


if __name__ == "__main__":
    try:
        check(sys.argv[1:])
    except (Fail, KeyError, ValueError, TypeError, IndexError) as e:
        print(f"JSON check: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print("JSON checked")
