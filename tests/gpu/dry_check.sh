#!/usr/bin/env bash
# The GPU commands without a GPU (CTest: gpu_run_dry), in seconds: tests/gpu/run.sh quick-a
# and quick-b as a dry run (RR_GPU_DRY=1: every piece prints its commands, none runs) must
# end with every piece DRY and name the commands issue 39 asks of them; and tests/gpu/report.py
# on tests/gpu/fixture (a made-up run whose figures put each bound at a known percentage)
# must print those percentages. What a real GPU run alone can show is not here.
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
want() { # want FILE PATTERN WHY
  grep -qE -- "$2" "$1" || { echo "gpu_run_dry: $3: no line matching '$2' in $(basename "$1")"; bad=1; }
}
for cmd in quick-a quick-b; do
  if ! RR_GPU_DRY=1 bash tests/gpu/run.sh "$cmd" "$tmp" > "$tmp/$cmd.out" 2>&1; then
    echo "gpu_run_dry: RR_GPU_DRY=1 run.sh $cmd failed:"; cat "$tmp/$cmd.out"; bad=1
  fi
  n=$(grep -cE '^[a-z_]+ +DRY ' "$tmp/$cmd.txt" || true)
  want "$tmp/$cmd.txt" '^total: ' "$cmd ran to its end"
  grep -E '^[a-z_]+ +(PASS|SKIP|FAIL|NOT RUN)' "$tmp/$cmd.txt" && {
    echo "gpu_run_dry: $cmd: a piece ran instead of printing its commands"; bad=1; }
  [ "$n" -ge 5 ] || { echo "gpu_run_dry: $cmd: $n pieces said DRY"; bad=1; }
done
want "$tmp/quick-a.log" "ctest -R '\\^cuda_direct_" "quick-a's coll piece runs the one-kernel tests"
want "$tmp/quick-a.log" "--target .*test_cuda_direct" "the build makes test_cuda_direct"
want "$tmp/quick-b.log" 'handoff_probe.cu .*-lcuda' "forms builds the hand-off probe"
want "$tmp/quick-b.log" '^## all_reduce, host hand-off' "forms measures the host hand-off"
want "$tmp/quick-b.log" '^## all_reduce, stream-memop ring' "forms measures the stream-memop ring"
want "$tmp/quick-b.log" '^## all_reduce, one kernel' "forms measures the one-kernel form"
want "$tmp/quick-b.log" 'all_reduce_perf -b 8 -e 256M' "forms spans 8 B .. 256 MiB"
want "$tmp/quick-b.log" 'reduce_kernel_perf -b 256M -e 256M -d all -o all' "every kernel vs the copy"
want "$tmp/quick-b.log" 'memcheck .*test_cuda_direct' "memcheck runs the one-kernel form"
python3 tests/gpu/report.py tests/gpu/fixture > "$tmp/report.md" 2>&1 || {
  echo "gpu_run_dry: report.py failed:"; cat "$tmp/report.md"; bad=1; }
r=$tmp/report.md
want "$r" 'traffic rate in the same run: 2000 GB/s' "B from the D2D copy row"
want "$r" 'all_reduce B\(n-1\)/n\^2 = 500 GB/s' "the physical bound B(n-1)/n^2"
want "$r" '2B/\(9n\) = 222 GB/s' "the rings' own bound"
want "$r" '2B/\(7n\) = 286 GB/s with the all-gather' "the pulling ring's own bound"
want "$r" '^\| 64 MiB \| 15000.0 / 4.44 / 0.89% / 2% \| 600.0 / 111.10 / 22% / 50% \| 469.8 / 142.86 / 29% / 50% \| 170.0 / 400.00 / 80% / 80% \|$' \
  "each form against both bounds (the stream-memop ring's own: 7(n-1)S with the pull)"
want "$tmp/quick-a.log" "ctest -R '\\^cuda_pull_coll" "quick-a's coll piece runs the pull on the GPU"
want "$tmp/quick-a.log" "ctest -R '\\^cuda_memops_\\(rules" "quick-a's probe runs the memops alone"
want "$tmp/quick-b.log" '^## all_gather, slots: no pull' "forms measures the ring without the pull"
want "$r" '^\| 64 MiB \| 200.0 / 300.00 / 90% / 90% \|$' "all_gather against (n+1)S"
want "$r" '^Target: 8 B all_reduce <= 100 us without MPS: 40.0 us \(met\)' "the latency target"
want "$r" '^Target: busbw >= 70% of the physical bound at 64 MiB and up: 80% at worst \(met\)' \
  "the bandwidth target"
want "$r" '^spin +timed out' "the probe's rows"
[ $bad = 0 ] && echo "gpu_run_dry: quick-a and quick-b dry-run, report.py's bounds as expected"
exit $bad
