#!/usr/bin/env bash
# The pages of tools/ringreduce-view in a real browser (headless Chromium), for every
# algorithm the page draws: a trace from a run of examples/ring_demo, its page, then
#  - played from the start to the end (#play=1, timers run on virtual time): no error, the
#    step counter at the trace's step count, and every rank's buffer in the DOM equal, value
#    for value, to the output its end record holds and to the sums of the inputs (random
#    from RR_DEMO_SEED, recomputed here; the ring case keeps 10 * rank + i for the docs);
#  - opened at step 0: every rank's buffer equal to its input;
#  - screenshots at the start, at the end of the first phase (the reduce-scatter for the
#    ring) and at the end, written to SHOTS (docs/ring.md embeds some).
# The page reports script errors into its DOM (data-errors, #errors); Chromium's own log
# (--enable-logging) is searched too. One page with a planted error checks that both catch it.
# usage: test_view_browser.sh RRUN RING_DEMO VIEW SHOTS
set -euo pipefail
rrun=$1 demo=$2 view=$3 shots=$4
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "skipped: no chromium (tools/deps.sh installs Debian's)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$shots"
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
# Random inputs (examples/ring_demo.c's RR_DEMO_SEED), but for the "ring" case: its frames
# are the ones docs/ring.md shows, with the inputs 10 * rank + i.
export RR_TEST_SEED=${RR_TEST_SEED:-$(( $(date +%s%N) % 1000000 ))}
echo "inputs: RR_DEMO_SEED=$RR_TEST_SEED (set RR_TEST_SEED to replay)"
# The input element i of rank q, as ring_demo makes it: x(name, q, i) in Python.
pyx='
import os
def x(name, q, i):
    if name == "ring":
        return 10 * q + i
    m = 0xFFFFFFFF
    h = (int(os.environ["RR_TEST_SEED"]) * 2654435761 + q * 40503 + i * 2246822519) & m
    h ^= h >> 15
    h = (h * 2246822519) & m
    h ^= h >> 13
    return h % 100
'

# chrome URL OUT.html|OUT.png: the DOM after the page ran, or a screenshot. Root needs
# --no-sandbox; a private profile keeps runs apart; timers run on virtual time.
chrome() {
  local url=$1 out=$2 mode=(--dump-dom)
  [[ $out == *.png ]] && mode=(--screenshot="$out" --window-size=1000,625 --hide-scrollbars)
  timeout 60 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
    --user-data-dir="$dir/profile" --enable-logging=stderr --v=0 --virtual-time-budget=60000 \
    "${mode[@]}" "$url" >"$dir/dom.html" 2>"$dir/chrome.log" || { cat "$dir/chrome.log"; fail "chromium on $url"; }
  [[ $out == *.png ]] || mv "$dir/dom.html" "$out"
  if grep -E 'CONSOLE|Uncaught' "$dir/chrome.log" | grep -viE 'deprecat' >"$dir/console.txt"; then
    cp "$dir/console.txt" "$out.console"
  else
    rm -f "$out.console"
  fi
}

# check DOM PAGE_TRACE WANT_STEP EXPECT: the page's state in the DOM against the trace.
# EXPECT "out" compares every rank's buffer with its end record, "in" with its begin record.
check() {
  python3 - "$@" <<'EOF'
import json, sys
from html.parser import HTMLParser
dom, trace, want_step, which, known = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]

class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.attrs, self.cells, self.cur, self.errors, self.in_err = {}, {}, None, "", False
    def handle_starttag(self, tag, a):
        a = dict(a)
        if tag in ("html", "body"):
            self.attrs.update({k: v for k, v in a.items() if k.startswith("data-")})
        if tag == "td" and "data-elem" in a:
            self.cur = (int(a["data-rank"]), a["data-elem"])
            self.cells[self.cur] = ""
        self.in_err = tag == "div" and a.get("id") == "errors"
    def handle_endtag(self, tag):
        self.cur = None if tag == "td" else self.cur
        self.in_err = False if tag == "div" else self.in_err
    def handle_data(self, d):
        if self.cur is not None:
            self.cells[self.cur] += d
        if self.in_err:
            self.errors += d

p = P()
p.feed(open(dom).read())
def fail(msg):
    print(f"FAIL: {dom}: {msg}")
    sys.exit(1)
if p.attrs.get("data-errors") or p.errors.strip():
    fail(f"the page reported errors: {p.errors.strip()}")
if p.attrs.get("data-ready") != "1":
    fail("the page never finished drawing (no data-ready)")
recs = [json.loads(l) for l in open(trace)]
steps = int(p.attrs.get("data-steps", -1))
if steps != want_step and which == "out":
    fail(f"the page has {steps} steps, the algorithm {want_step}")
if int(p.attrs.get("data-step", -1)) != (steps if which == "out" else 0):
    fail(f"the page stopped at step {p.attrs.get('data-step')}")
if which == "out" and p.attrs.get("data-played") != "1":
    fail("playing did not reach the end")
nrec = sum(1 for r in recs if r["ev"] == "step")
if int(p.attrs.get("data-records", -1)) != nrec:
    fail(f"the page shows {p.attrs.get('data-records')} step records, the trace has {nrec}")
key = "end" if which == "out" else "begin"
known = json.loads(known)  # rank -> the values it must show, from the inputs
seen = 0
for r in recs:
    if r["ev"] != key or (which + "") not in r:
        continue
    vals = r[which]
    # A rank's reduce-scatter output is its block of the buffer; an all-gather input too.
    block = (r["coll"], which) in (("reduce_scatter", "out"), ("all_gather", "in"))
    base = len(vals) * r["grank"] if block else 0
    for i, v in enumerate(vals):
        got = p.cells.get((r["rank"], str(base + i)))
        if got is None:
            fail(f"no cell for rank {r['rank']} element {base + i}")
        if float(got) != float(v):
            fail(f"rank {r['rank']} element {base + i} shows {got}, the trace says {v}")
    if known.get(str(r["rank"])) is not None and vals != known[str(r["rank"])]:
        fail(f"rank {r['rank']}: the trace's {which} {vals} is not {known[str(r['rank'])]}")
    seen += 1
if not seen:
    fail(f"no {which} values in the trace to compare")
print(f"ok {dom}: step {p.attrs.get('data-step')}/{steps}, {seen} ranks' buffers equal to the trace")
EOF
}

# name algo ranks collective count root steps first-phase
cases=(
  "ring ring 4 all_reduce 8 0 6 reduce-scatter"
  "star star 4 all_reduce 8 0 6 gather"
  "rd rd 4 all_reduce 8 0 2 rounds"
  "rd3 rd 3 all_reduce 8 0 3 pair-up"
  "broadcast ring 4 broadcast 8 1 3 broadcast"
  "reduce ring 4 reduce 8 2 3 reduce"
  "reduce_scatter ring 4 reduce_scatter 2 0 3 reduce-scatter"
  "all_gather ring 4 all_gather 2 0 3 all-gather"
)
for c in "${cases[@]}"; do
  read -r name algo n coll count root steps first <<<"$c"
  seed=(); [ "$name" = ring ] || seed=(RR_DEMO_SEED="$RR_TEST_SEED")
  env "${seed[@]}" RR_ALGO=$algo RR_TRACE="$dir/$name.jsonl" "$rrun" --standalone --nproc-per-node "$n" "$demo" \
    "$coll" "$count" "$root" >"$dir/$name.out" 2>"$dir/$name.err" || { cat "$dir/$name.err"; fail "run $name"; }
  "$view" "$dir/$name.jsonl" -o "$dir/$name.html" >/dev/null
  # What every rank must hold, from the inputs alone.
  known=$(python3 -c "$pyx"'
import json, sys
name, coll, n, c, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
x = lambda q, i, x=x: x(name, q, i)
out = {}
for r in range(n):
    if coll == "all_reduce" or (coll == "reduce" and r == root):
        out[r] = [sum(x(q, i) for q in range(n)) for i in range(c)]
    elif coll == "broadcast":
        out[r] = [x(root, i) for i in range(c)]
    elif coll == "reduce_scatter":
        out[r] = [sum(x(q, r * c + i) for q in range(n)) for i in range(c)]
    elif coll == "all_gather":
        out[r] = [x(i // c, i % c) for i in range(n * c)]
print(json.dumps(out))' "$name" "$coll" "$n" "$count" "$root")
  inputs=$(python3 -c "$pyx"'
import json, sys
name, coll, n, c, root = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
m = n * c if coll == "reduce_scatter" else c
print(json.dumps({r: [x(name, r, i) for i in range(m)] for r in range(n) if coll != "broadcast" or r == root}))' \
    "$name" "$coll" "$n" "$count" "$root")
  chrome "file://$dir/$name.html#play=1&speed=8" "$dir/$name.end.html"
  [ ! -e "$dir/$name.end.html.console" ] || fail "$name: console: $(cat "$dir/$name.end.html.console")"
  check "$dir/$name.end.html" "$dir/$name.jsonl" "$steps" out "$known"
  chrome "file://$dir/$name.html#step=0" "$dir/$name.start.html"
  check "$dir/$name.start.html" "$dir/$name.jsonl" "$steps" in "$inputs"
  chrome "file://$dir/$name.html#step=0" "$shots/$name-start.png"
  chrome "file://$dir/$name.html#after=$first" "$shots/$name-$first.png"
  chrome "file://$dir/$name.html#step=end" "$shots/$name-end.png"
  for s in start "$first" end; do
    [ "$(head -c 8 "$shots/$name-$s.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
      || fail "$name-$s.png is not a PNG"
  done
  cmp -s "$shots/$name-start.png" "$shots/$name-end.png" && fail "$name: the start and end pictures are the same"
done

# The detectors detect: a page asked for a phase it does not have reports an error.
chrome "file://$dir/ring.html#after=no-such-phase" "$dir/planted.html"
if check "$dir/planted.html" "$dir/ring.jsonl" 6 out '{}' >/dev/null; then
  fail "a page with an error passed the check"
fi
grep -q 'no phase "no-such-phase"' "$dir/planted.html" || fail "the planted error is not in the DOM"
[ -e "$dir/planted.html.console" ] || fail "chromium's log did not show the planted console error"
echo "view browser ok (screenshots in $shots)"
