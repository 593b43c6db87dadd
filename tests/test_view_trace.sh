#!/usr/bin/env bash
# RR_TRACE=<file>: the JSON lines of every algorithm, and the viewer's replay of them.
#  - the docs/ring.md run (ring, 4 ranks, 8 numbers): every field of two step records
#    exactly, every rank's begin and end records, 8 records per rank;
#  - every algorithm the page draws at several world sizes (16 ranks appending to one file
#    included): every line one whole JSON record, every rank's output equal to the sums of
#    the inputs (random integers from RR_DEMO_SEED, recomputed here; the docs run keeps
#    10 * rank + i), and the viewer's step count equal to the algorithm's;
#  - a file that cannot be opened: a warning, and the call still succeeds.
# usage: test_view_trace.sh RRUN RING_DEMO VIEW
set -euo pipefail
rrun=$1 demo=$2 view=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
export RR_TEST_SEED=${RR_TEST_SEED:-$(( $(date +%s%N) % 1000000 ))}
echo "inputs: RR_DEMO_SEED=$RR_TEST_SEED (set RR_TEST_SEED to replay)"

# trace NAME ALGO N [ring_demo args]: one run, its trace in $dir/NAME.jsonl
trace() {
  local name=$1 algo=$2 n=$3
  shift 3
  local seed=()
  [ "$name" = ring4 ] || seed=(RR_DEMO_SEED="$RR_TEST_SEED")
  env "${seed[@]}" RR_ALGO=$algo RR_TRACE="$dir/$name.jsonl" "$rrun" --standalone --nproc-per-node "$n" "$demo" "$@" \
    >"$dir/$name.out" 2>"$dir/$name.err" || { cat "$dir/$name.err"; fail "run $name"; }
}

# Every case: name, algorithm, ranks, collective, count, root, the steps the page must show.
cases=(
  "ring2 ring 2 all_reduce 8 0 2" "ring3 ring 3 all_reduce 8 0 4" "ring4 ring 4 all_reduce 8 0 6"
  "ring5 ring 5 all_reduce 8 0 8" "ring8 ring 8 all_reduce 8 0 14" "ring16 ring 16 all_reduce 8 0 30"
  "ring4odd ring 4 all_reduce 7 0 6"
  "star2 star 2 all_reduce 8 0 2" "star3 star 3 all_reduce 8 0 4" "star5 star 5 all_reduce 8 0 8"
  "rd2 rd 2 all_reduce 8 0 1" "rd3 rd 3 all_reduce 8 0 3" "rd4 rd 4 all_reduce 8 0 2"
  "rd5 rd 5 all_reduce 8 0 4" "rd8 rd 8 all_reduce 8 0 3"
  "bc3 ring 3 broadcast 8 1 2" "bc4 ring 4 broadcast 8 1 3" "red3 ring 3 reduce 8 2 2"
  "red4 ring 4 reduce 8 2 3" "rs3 ring 3 reduce_scatter 2 0 2" "rs4 ring 4 reduce_scatter 3 0 3"
  "ag3 ring 3 all_gather 2 0 2" "ag4 ring 4 all_gather 3 0 3"
)
for c in "${cases[@]}"; do
  read -r name algo n coll count root steps <<<"$c"
  trace "$name" "$algo" "$n" "$coll" "$count" "$root"
  out=$("$view" "$dir/$name.jsonl" -o "$dir/$name.html" 2>&1) || fail "$name: the viewer refused the trace: $out"
  case "$out" in
    *", $steps steps, "*) ;;
    *) fail "$name: the viewer says '$out', want $steps steps" ;;
  esac
done

python3 - "$dir" "${cases[@]}" <<'EOF'
import json, os, sys
d, cases = sys.argv[1], [c.split() for c in sys.argv[2:]]

def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)

SEED = int(os.environ["RR_TEST_SEED"])
M = 0xFFFFFFFF

def X(name, q, i):
    """Element i of rank q's input: examples/ring_demo.c's demo_random (10 * q + i for the
    docs run, which has no seed)."""
    if name == "ring4":
        return 10 * q + i
    h = (SEED * 2654435761 + q * 40503 + i * 2246822519) & M
    h ^= h >> 15
    h = (h * 2246822519) & M
    h ^= h >> 13
    return h % 100

def records(name):
    raw = open(f"{d}/{name}.jsonl", "rb").read()
    if not raw.endswith(b"\n"):
        fail(f"{name}: the trace does not end with a newline")
    recs = []
    for i, line in enumerate(raw.decode().split("\n")[:-1], 1):
        try:
            recs.append(json.loads(line))
        except ValueError as e:
            fail(f"{name}: line {i} is not one JSON record ({e}): {line[:120]}")
    return recs

# Outputs: every rank's end record, against sums of the known inputs.
for name, algo, n, coll, count, root, steps in cases:
    n, count, root = int(n), int(count), int(root)
    recs = records(name)
    ends = {r["rank"]: r for r in recs if r["ev"] == "end"}
    begins = {r["rank"]: r for r in recs if r["ev"] == "begin"}
    if sorted(ends) != list(range(n)) or sorted(begins) != list(range(n)):
        fail(f"{name}: begin/end records of ranks {sorted(begins)}/{sorted(ends)}, want 0..{n - 1}")
    L = count * n if coll in ("reduce_scatter", "all_gather") else count
    for r in range(n):
        b, e = begins[r], ends[r]
        if b["algo"] != ("chain" if coll in ("broadcast", "reduce") else algo):
            fail(f"{name}: rank {r} algo {b['algo']}")
        if e["status"] != "RR_OK":
            fail(f"{name}: rank {r} ended with {e['status']}")
        nin = count * n if coll == "reduce_scatter" else count
        if coll != "broadcast" or r == root:
            if b.get("in") != [X(name, r, i) for i in range(nin)]:
                fail(f"{name}: rank {r} input {b.get('in')}")
        if coll in ("all_reduce", "broadcast", "all_gather") or (coll == "reduce" and r == root):
            if coll == "all_reduce" or coll == "reduce":
                want = [sum(X(name, q, i) for q in range(n)) for i in range(count)]
            elif coll == "broadcast":
                want = [X(name, root, i) for i in range(count)]
            else:
                want = [X(name, i // count, i % count) for i in range(L)]
        elif coll == "reduce_scatter":
            want = [sum(X(name, q, r * count + i) for q in range(n)) for i in range(count)]
        else:
            want = None
        if want is not None and e.get("out") != want:
            fail(f"{name}: rank {r} output {e.get('out')}, want {want}")
        nsteps = sum(1 for x in recs if x["ev"] == "step" and x["rank"] == r)
        if e["steps"] != nsteps:
            fail(f"{name}: rank {r} wrote {nsteps} step records, its end record says {e['steps']}")
        for x in recs:
            if x["ev"] == "step" and x["rank"] == r and not x["t0_ns"] <= x["t1_ns"] <= e["t_ns"]:
                fail(f"{name}: rank {r} step {x['step']} times out of order")

# The docs/ring.md run, record by record.
recs = records("ring4")
by = {(r["rank"], r["ev"], r.get("step")): r for r in recs}
if len(recs) != 32:
    fail(f"ring4: {len(recs)} records, want 4 ranks x (begin + 6 steps + end)")
s = by[(1, "step", 0)]
want = {"coll": "all_reduce", "seq": 0, "algo": "ring", "rank": 1, "grank": 1, "n": 4, "step": 0,
        "phase": "reduce-scatter", "where": "reduce-scatter step 1/3",
        "send": {"to": 2, "to_rank": 2, "chunk": 1, "count": 2, "off": 2, "bytes": [8, 16],
                 "values": [12, 13]},
        "recv": {"from": 0, "from_rank": 0, "chunk": 0, "count": 2, "off": 0, "bytes": [0, 8],
                 "reduce": True, "op": "sum", "own": [10, 11], "got": [0, 1], "values": [10, 12]}}
for k, v in want.items():
    if s.get(k) != v:
        fail(f"ring4 rank 1 step 0: {k} = {s.get(k)}, want {v}")
s = by[(0, "step", 5)]
if (s["phase"], s["send"]["chunk"], s["recv"]["chunk"], s["recv"]["values"], s["recv"]["reduce"],
        s["recv"]["bytes"]) != ("all-gather", 3, 2, [76, 80], False, [16, 24]):
    fail(f"ring4 rank 0 step 5: {s}")
b = by[(2, "begin", None)]
if (b["ranks"], b["dtype"], b["op"], b["count"], b["in_count"]) != ([0, 1, 2, 3], "float", "sum", 8, 8):
    fail(f"ring4 rank 2 begin: {b}")
# A chain link forwards what it made; the star's root receives every rank's buffer.
red = {(r["rank"], r.get("step")): r for r in records("red4") if r["ev"] == "step"}
link = red[(0, 0)]  # root 2: the chain is 3 -> 0 -> 1 -> 2
if not link.get("forward") or link["send"]["values"] != link["recv"]["values"] or \
        link["recv"]["values"] != [X("red4", 3, i) + X("red4", 0, i) for i in range(8)]:
    fail(f"red4: rank 0's link record {link}")
star = [r for r in records("star5") if r["ev"] == "step" and r["rank"] == 0]
if [r["recv"]["from"] for r in star if "recv" in r] != [1, 2, 3, 4] or \
        [r["send"]["to"] for r in star if "send" in r] != [1, 2, 3, 4]:
    fail(f"star5: rank 0's steps {star}")
print("trace records ok")
EOF

# A trace file that cannot be opened: the run goes on, with one warning per rank.
RR_ALGO=ring RR_TRACE="$dir/no/such/dir/t.jsonl" "$rrun" --standalone --nproc-per-node 2 "$demo" \
  >"$dir/noopen.out" 2>"$dir/noopen.err" || { cat "$dir/noopen.err"; fail "a bad RR_TRACE path failed the run"; }
grep -q "RR_TRACE=$dir/no/such/dir/t.jsonl: cannot open it for appending (No such file or directory)" \
  "$dir/noopen.err" || { cat "$dir/noopen.err"; fail "no warning for a bad RR_TRACE path"; }
[ "$(grep -c '^rank [01]: ' "$dir/noopen.out")" = 2 ] || fail "the run with a bad RR_TRACE path printed no sums"
echo "view trace ok"
