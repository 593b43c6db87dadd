#!/usr/bin/env bash
# The ring all-reduce lesson in one command (docs/ring.md, "See the ring"):
#
#   1. a 4-rank all-reduce of 8 numbers (examples/ring_demo) with the ring and with the star
#      (parameter server), each traced with RR_TRACE=<file> and drawn by
#      tools/ringreduce-view as an animated page: ring.html and star.html;
#   2. the measured side of the same story: bench/scaling/netns_scaling.sh runs all_reduce_perf
#      on simulated hosts (network namespaces, every link shaped to --rate) for the ring and
#      the star, and plots busbw against the number of hosts (scaling.png): the ring stays
#      near the link rate, as its cost 2(n-1)/n * S / B says, the star falls like 1/n.
#
#   tools/lesson.sh [--build DIR] [--out DIR] [--no-bench] [--rate 100mbit] [--size 4M]
#                   [--hosts "2 4 8"]
#
# Builds what is missing (cmake, in --build, default build/). The benchmark needs root (network
# namespaces) and takes about two minutes with the defaults (on a 2-core VM: star at 2 hosts
# 48.5% of the link, the model's 50%; 1M takes half a minute but lands further from the model,
# as TCP start-up and the shaper's burst weigh more); without root, or with --no-bench, the
# lesson points at the plot committed in bench/scaling/results instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build" out="$root/out/lesson" bench=1 rate=100mbit size=4M hosts="2 4 8"
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --rate) rate=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "lesson: unknown option $1" >&2; usage 2 >&2 ;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin="$build/bin"
if [ ! -x "$bin/rrun" ] || [ ! -x "$bin/ring_demo" ] || { [ "$bench" = 1 ] && [ ! -x "$bin/all_reduce_perf" ]; }; then
  echo "lesson: building rrun, ring_demo and all_reduce_perf in $build"
  gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  [ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${gen[@]}" >/dev/null
  cmake --build "$build" -j "$(nproc)" --target rrun ring_demo all_reduce_perf >/dev/null
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# One traced run per algorithm; the trace file is appended to, so it starts empty.
for algo in ring star; do
  rm -f "$out/$algo.jsonl"
  RR_ALGO=$algo RR_TRACE="$out/$algo.jsonl" "$bin/rrun" --standalone --nproc-per-node 4 \
    "$bin/ring_demo" >"$out/$algo.out"
  "$root/tools/ringreduce-view" "$out/$algo.jsonl" -o "$out/$algo.html" >/dev/null
done
echo "Every rank held 10*rank + 0..7; every rank now holds:"
sort "$out/ring.out" | sed 's/^/  /'

# What each rank moved, from the traces: the ring spreads the work, the star piles it on rank 0.
python3 - "$out/ring.jsonl" "$out/star.jsonl" <<'EOF'
import json, sys
for path in sys.argv[1:]:
    sent, recv, size = {}, {}, 0
    for line in open(path):
        r = json.loads(line)
        if r["ev"] == "begin":
            size = r["count"] * 4
        if r["ev"] != "step":
            continue
        for side, book in (("send", sent), ("recv", recv)):
            if side in r:
                b = r[side]["bytes"]
                book[r["rank"]] = book.get(r["rank"], 0) + b[1] - b[0]
    algo = "ring" if path.endswith("ring.jsonl") else "star"
    per = ", ".join(f"rank {q}: {sent.get(q, 0)} B out / {recv.get(q, 0)} B in" for q in sorted(sent))
    print(f"{algo}: buffer S = {size} B; {per}")
EOF
echo "  (ring: every rank sends and receives 2(n-1)/n * S; star: rank 0 carries (n-1) * S each way)"

plot=""
if [ "$bench" = 1 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "Measuring ring against star on simulated hosts ($hosts hosts, $rate links, $size per rank)..."
    rc=0
    "$root/bench/scaling/netns_scaling.sh" --bin "$bin" --out "$out/scaling" --rate "$rate" \
      --size "$size" --hosts "$hosts" --iters 2 --warmup 1 --label lesson >"$out/scaling.log" 2>&1 || rc=$?
    if [ "$rc" = 0 ] && [ -f "$out/scaling/scaling.png" ]; then
      plot="$out/scaling/scaling.png"
      sed -n '/^| N /,/^$/p' "$out/scaling/scaling.md" | cut -d'|' -f2-4,6-7 | sed 's/^/  /'
    else
      echo "lesson: the benchmark did not finish (status $rc); see $out/scaling.log"
    fi
  else
    echo "lesson: the benchmark needs root (network namespaces): sudo $0"
  fi
fi
if [ -z "$plot" ]; then
  plot="$root/bench/scaling/results/2026-11-24-100mbit/scaling.png"
  echo "A plot measured earlier on this project's CI machine: $plot"
fi
cat <<EOF

Open in a browser (no network needed):
  file://$out/ring.html    the ring: chunks travel around, every link busy
  file://$out/star.html    the star: every buffer goes through rank 0
  file://$plot
                           busbw as hosts are added: ring flat near the link rate
                           (its time 2(n-1)/n * S / B), star falling like 1/n
How to read the pages: docs/ring.md, "See the ring".
EOF
