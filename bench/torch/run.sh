#!/usr/bin/env bash
# bench/torch: torch.distributed on "ringreduce" against torch's own "gloo", and the C
# library underneath, in one run on this machine, for each torch version.
#
#   bash bench/torch/run.sh     # ~20 min per torch version here; writes bench/torch/results/<date>/
#
# For each torch (Debian's 1.13 and PyPI's 2.x from tools/torch_env.sh), world sizes 2 and
# 4, and ringreduce's default transport (shared memory) and TCP:
#   1. dist.all_reduce, float32 sum, 8 B ... 256 MiB: ringreduce, gloo and the library's own
#      blocking call on the same group (ctypes), interleaved in the same ranks, the order
#      rotated every round (bench_torch.py coll): what the torch layer costs is the
#      difference between the first and the last;
#   2. training steps of the tutorial's CNN and of a 9.4M-parameter MLP with DDP on
#      ringreduce and on gloo, FSDP2 on each (2.x), and without communication (bench_torch.py
#      ddp);
#   3. bench/torch/floor.py: the time torch itself takes per dist.all_reduce on a process
#      group that does nothing, Python and (2.x) C++, beside ringreduce and the C call, at
#      world 1 (floor.md): the least any backend can cost through torch.
# Then per version the tables (torch<ver>/table.md), the raw lines (results.jsonl), the
# machine (env.txt) and the plot (busbw.png, when gnuplot is installed).
#
# Environment: TORCHES ("1 2"), WORLDS ("2 4"), TRANSPORTS ("default tcp"), ROUNDS (5),
# SIZES (bench_torch.py's list), BUILD (default build-bench; configured Release and built
# when missing), OUT.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

TORCHES=${TORCHES:-"1 2"}
WORLDS=${WORLDS:-"2 4"}
TRANSPORTS=${TRANSPORTS:-"default tcp"}
ROUNDS=${ROUNDS:-5}
SIZES=${SIZES:-"8,2K,32K,512K,1M,2M,8M,32M,128M,256M"}
BUILD=${BUILD:-build-bench}
OUT=${OUT:-$here/results/$(date +%Y-%m-%d)}
log() { printf '[bench/torch %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

RR_DEPS_TORCH=1 RR_DEPS_PLOT=1 bash tools/deps.sh
if [ ! -f "$BUILD/build.ninja" ] && [ ! -f "$BUILD/Makefile" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" -j "$(nproc)" --target ringreduce >/dev/null
lib=$(find "$BUILD" -maxdepth 2 -name 'libringreduce.so' | head -1)
[ -n "$lib" ] || { echo "bench/torch: no libringreduce.so in $BUILD" >&2; exit 1; }
export RINGREDUCE_LIBRARY=$root/$lib OMP_NUM_THREADS=1

for v in $TORCHES; do
  if [ "$v" = 1 ]; then PY=/usr/bin/python3; else PY=$(bash tools/torch_env.sh); fi
  o=$OUT/torch$v
  mkdir -p "$o"
  : > "$o/results.jsonl"
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "cpus: $(getconf _NPROCESSORS_ONLN); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
    echo "torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null); python: $($PY -V 2>&1)"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$o/env.txt"
  for w in $WORLDS; do
    for t in $TRANSPORTS; do
      envs=(); [ "$t" = default ] || envs=(RR_TRANSPORT="$t")
      log "torch $v, world $w, transport $t: all_reduce on ringreduce, gloo and the C library"
      env "${envs[@]}" $PY "$here/bench_torch.py" coll "$w" "$o/results.jsonl" \
        --sizes "$SIZES" --rounds "$ROUNDS"
    done
    for m in cnn mlp; do
      log "torch $v, world $w: training step, $m"
      $PY "$here/bench_torch.py" ddp "$w" "$o/results.jsonl" --model "$m" --rounds "$ROUNDS"
    done
  done
  log "torch $v: what one dist.all_reduce costs torch itself (floor.py, world 1)"
  PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" $PY "$here/floor.py" "$o/floor.jsonl" \
    > "$o/floor.md"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$o/env.txt"
  $PY "$here/bench_torch.py" report "$o"
  if command -v gnuplot >/dev/null 2>&1; then
    (cd "$o" && gnuplot "$here/busbw.gp") && log "plot: $o/busbw.png"
  fi
done
