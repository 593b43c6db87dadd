#!/usr/bin/env bash
# bench/torch: torch.distributed on "ringreduce" against torch's "gloo", and the C library
# underneath, in one run on this machine.
#
#   bash bench/torch/run.sh     # ~15 min here; writes bench/torch/results/<date>/
#
# For world sizes 2 and 4, and ringreduce's default transport (shared memory) and TCP:
#   1. dist.all_reduce, float32 sum, 8 B ... 256 MiB: ringreduce and gloo in the same ranks,
#      alternating (bench_torch.py coll);
#   2. all_reduce_perf under rrun at the same sizes (the C library with no Python above it:
#      what the torch binding costs is the difference);
#   3. DDP training steps, the tutorial's CNN and a 9.4M-parameter MLP, on ringreduce, gloo
#      and without communication (bench_torch.py ddp).
# Then the tables (table.md), the raw lines (results.jsonl, c/*.json), the machine
# (env.txt) and the plot (busbw.png, when gnuplot is installed).
#
# Environment: WORLDS ("2 4"), TRANSPORTS ("default tcp"), ROUNDS (3), SIZES (bench_torch.py's
# list), BUILD (default build-bench; configured Release and built when missing), OUT.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

WORLDS=${WORLDS:-"2 4"}
TRANSPORTS=${TRANSPORTS:-"default tcp"}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-"8,128,2K,32K,512K,2M,8M,32M,128M,256M"}
BUILD=${BUILD:-build-bench}
OUT=${OUT:-$here/results/$(date +%Y-%m-%d)}
PY=/usr/bin/python3
log() { printf '[bench/torch %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

RR_DEPS_TORCH=1 bash tools/deps.sh
command -v gnuplot >/dev/null 2>&1 || log "gnuplot not installed: no plot (apt-get install gnuplot-nox)"
if [ ! -x "$BUILD/bin/all_reduce_perf" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)" >/dev/null
lib=$(find "$BUILD" -maxdepth 2 -name 'libringreduce.so' | head -1)
[ -n "$lib" ] || { echo "bench/torch: no libringreduce.so in $BUILD" >&2; exit 1; }
export RINGREDUCE_LIBRARY=$root/$lib OMP_NUM_THREADS=1
mkdir -p "$OUT/c"
: > "$OUT/results.jsonl"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "cpus: $(getconf _NPROCESSORS_ONLN); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "torch: $($PY -c 'import torch; print(torch.__version__)'); python: $($PY -V 2>&1)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/env.txt"

for w in $WORLDS; do
  for t in $TRANSPORTS; do
    envs=(); [ "$t" = default ] || envs=(RR_TRANSPORT="$t")
    log "world $w, transport $t: torch all_reduce, ringreduce and gloo"
    env "${envs[@]}" $PY "$here/bench_torch.py" coll "$w" "$OUT/results.jsonl" \
      --sizes "$SIZES" --rounds "$ROUNDS"
    log "world $w, transport $t: all_reduce_perf"
    for s in ${SIZES//,/ }; do
      n=20; case $s in *M) [ "${s%M}" -ge 64 ] && n=5 ;; esac
      env "${envs[@]}" "$BUILD/bin/rrun" --nproc-per-node "$w" "$BUILD/bin/all_reduce_perf" \
        -b "$s" -e "$s" -n "$n" -w 3 -J "$OUT/c/w${w}_${t}_${s}.json" >/dev/null
    done
  done
  for m in cnn mlp; do
    log "world $w: DDP step, $m"
    $PY "$here/bench_torch.py" ddp "$w" "$OUT/results.jsonl" --model "$m" --rounds "$ROUNDS"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"
$PY "$here/bench_torch.py" report "$OUT"
if command -v gnuplot >/dev/null 2>&1; then
  (cd "$OUT" && gnuplot "$here/busbw.gp") && log "plot: $OUT/busbw.png"
fi
