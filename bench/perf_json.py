#!/usr/bin/env python3
"""The *_perf tools' JSON (-J FILE.json), read for bench/'s scripts in place of scraping the
printed table: nccl-tests 2.19's document (its version 3; bench/README.md lists the keys), so
this reads an nccl-tests file too.

As a module (python3 -c 'import sys; sys.path.insert(0, "bench"); import perf_json'):
  load(path) -> the document, after checking it is one (version 3, results, no errors)
  half(row, in_place) -> Half(time_us, algbw, busbw, wrong): wrong is an int, None unchecked

From the shell:
  python3 bench/perf_json.py results SYSTEM NP FILE   # bench/compare's RESULT lines: out of
                                                      # place as SYSTEM, in place SYSTEM-inplace
  python3 bench/perf_json.py time FILE                # the first row's out-of-place time (us)

nccl-tests' quirks are undone here: "nan" (its NaN) becomes float("nan"), "true"/"false"
strings become booleans (ok()), #wrong comes as a float and is made an int.
"""
import json
import math
import sys
from collections import namedtuple

Half = namedtuple("Half", "time_us algbw busbw wrong")


class PerfJsonError(ValueError):
    pass


def num(x):
    """A number of the document: nccl-tests writes NaN as the string "nan"."""
    if isinstance(x, str):
        if x == "nan":
            return math.nan
        raise PerfJsonError(f"not a number: {x!r}")
    return float(x)


def _from_first_format(d):
    """The JSON ringreduce's tools wrote before they took nccl-tests' document (its "rows",
    "time_us", "busbw_GBps", "wrong"), as that document, so that bench/ab.sh can time an
    older build too. Only what this module reads is carried over."""
    def h(x):
        return {"time": x["time_us"], "alg_bw": x["algbw_GBps"], "bus_bw": x["busbw_GBps"],
                "nwrong": x["wrong"]}
    ok_ = "true" if d.get("status") == "OK" else "false"
    return {"version": 3, "results": [
        {"size": r["size"], "count": r["count"], "type": r["type"], "redop": r["redop"],
         "root": "%6i" % r["root"], "out_of_place": h(r["out_of_place"]),
         "in_place": h(r["in_place"])} for r in d["rows"]],
        "out_of_bounds": {"count": d.get("out_of_bounds", 0), "okay": ok_},
        "average_bus_bandwidth": {"bandwidth": d.get("avg_busbw_GBps"), "okay": "unchecked"},
        "errors": []}


def load(path, allow_errors=False):
    with open(path) as f:
        d = json.load(f)
    if isinstance(d, dict) and "rows" in d and "tool" in d and "version" in d:
        d = _from_first_format(d)
    if not isinstance(d, dict) or d.get("version") != 3 or not isinstance(d.get("results"), list):
        raise PerfJsonError(f"{path}: not an nccl-tests JSON document (version 3 with results)")
    if d.get("errors") and not allow_errors:
        raise PerfJsonError(f"{path}: the run failed: {'; '.join(map(str, d['errors']))}")
    return d


def half(row, in_place=False):
    h = row["in_place" if in_place else "out_of_place"]
    if h is None:  # nccl-tests writes null for a half it did not run
        return None
    t = h["cpu_time"] if "cpu_time" in h else h["time"]  # -C 1 renames it
    w = h["nwrong"]
    return Half(num(t), num(h["alg_bw"]), num(h["bus_bw"]), None if w is None else int(num(w)))


def ok(d):
    """The run's verdict, as its footer: no wrong element and, with NCCL_TESTS_MIN_BW, the
    bandwidth reached ("okay" is the string "true", "false" or "unchecked")."""
    return (not d.get("errors") and d["out_of_bounds"]["okay"] == "true"
            and d["average_bus_bandwidth"]["okay"] != "false")


def result_lines(system, np_, d):
    """bench/compare's RESULT lines (bench/compare/common.h's format), out of place as SYSTEM
    and in place as SYSTEM-inplace."""
    out = []
    for r in d["results"]:
        for in_place, name in ((False, system), (True, system + "-inplace")):
            h = half(r, in_place)
            if h is None:
                continue
            wrong = "N/A" if h.wrong is None else str(h.wrong)
            out.append(f"RESULT {name} {np_} {r['size']} {h.time_us:.2f} {h.busbw:.4f} {wrong}")
    return out


def main(argv):
    if len(argv) == 5 and argv[1] == "results":
        print("\n".join(result_lines(argv[2], int(argv[3]), load(argv[4]))))
        return 0
    if len(argv) == 3 and argv[1] == "time":
        d = load(argv[2])
        if not d["results"]:
            raise PerfJsonError(f"{argv[2]}: no rows")
        print(f"{half(d['results'][0]).time_us:.3f}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ValueError, KeyError) as e:
        print(f"perf_json: {e}", file=sys.stderr)
        sys.exit(1)
