#!/usr/bin/env bash
# DDP overhead of the digits example (examples/mlp_digits.c): the training step at world
# 1, 2 and 4, with DDP's all-reduce and with --no-comm, each run REPS times (median taken).
#
#   examples/bench_ddp.sh [BUILD_DIR] [mlp_digits flags...]
#   examples/bench_ddp.sh build --hidden 1024,1024 --batch 256 --epochs 10
#
# Columns (milliseconds per training step, medians over the runs of each run's p50):
#   ddp        step with DDP (forward, backward with bucketed all-reduce, sync, SGD)
#   no-comm    the same step with --no-comm (no all-reduce; ranks run independently)
#   overhead   ddp / no-comm
#   comm       one step's all-reduces run back to back with nothing to overlap
#              (measured by the example after training)
#   exposed    time a step waits in rr_ddp_sync: communication not hidden, plus any wait
#              for the slowest rank
#   hidden     1 - exposed / comm, floored at 0
set -euo pipefail
build=${1:-build}
[ $# -gt 0 ] && shift
prog=$build/bin/mlp_digits
[ -x "$prog" ] || { echo "bench_ddp: $prog not built" >&2; exit 1; }
reps=${REPS:-3}
flags=(--checkpoint "" --epochs 10 "$@")
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $prog ${flags[*]} (median of $reps runs)"
printf "%5s %10s %10s %9s %10s %10s %7s\n" world ddp no-comm overhead comm exposed hidden
for w in 1 2 4; do
  d=() n=() c=() e=()
  for _ in $(seq "$reps"); do
    out=$("$prog" --spawn "$w" "${flags[@]}" | grep '^timing:')
    d+=("$(echo "$out" | sed -n 's/.*(p50 \([0-9.]*\) ms).*/\1/p')")
    c+=("$(echo "$out" | sed -n 's/.*comm \([0-9.]*\) ms\/step standalone.*/\1/p')")
    e+=("$(echo "$out" | sed -n 's/.*exposed \([0-9.]*\) ms\/step.*/\1/p')")
    out=$("$prog" --spawn "$w" "${flags[@]}" --no-comm | grep '^timing:')
    n+=("$(echo "$out" | sed -n 's/.*(p50 \([0-9.]*\) ms).*/\1/p')")
  done
  md=$(printf "%s\n" "${d[@]}" | median) mn=$(printf "%s\n" "${n[@]}" | median)
  mc=$(printf "%s\n" "${c[@]}" | median) me=$(printf "%s\n" "${e[@]}" | median)
  awk -v w="$w" -v d="$md" -v n="$mn" -v c="$mc" -v e="$me" 'BEGIN {
    h = c > 0 ? 100 * (1 - e / c) : 0; if (h < 0) h = 0;
    printf "%5d %10.3f %10.3f %8.2fx %10.3f %10.3f %6.0f%%\n", w, d, n, d / n, c, e, h }'
done
