#!/usr/bin/env bash
# The three ways two ranks sharing one GPU hand a collective's data over, side by side in one
# run (issue 39 part 5), and what a hand-off between two processes costs on that GPU:
#
#   ## D2D copy            reduce_kernel_perf at 256 MiB: its memcpy column is B, the copy's
#                          traffic rate, which tests/gpu/report.py measures every figure against
#   ## hand-offs           tests/gpu/handoff_probe.cu without the library: the host-driven
#                          rows, then a stream wait/write ping-pong between two processes
#                          (memop) and a bounded spin ping-pong between two kernels (spin)
#   ## <coll>, <form>      all_reduce 8 B .. 256 MiB, 2 ranks on one GPU, float32 sum, device
#                          buffers, in each form: the host hand-off (the ring, each segment
#                          handed over by the hosts: RR_CUDA_MEMOPS=0 RR_CUDA_DIRECT=0), the
#                          stream-memop ring (RR_CUDA_DIRECT=0) and the one-kernel form (the
#                          default on one GPU); reduce_scatter and all_gather in the last two.
#                          The stream-memop ring's all_reduce and all_gather pull their
#                          all-gather steps (RR_CUDA_PULL_BYTES=0, the default); "slots" is the
#                          same ring without the pull (RR_CUDA_PULL_BYTES=1024G), beside it.
#                          (tests/gpu/report.py does not tabulate "slots" yet: read forms.txt.)
#
# Exits 1 if anything failed (a launch, a result all_reduce_perf's own check found wrong, the
# probe). Every launch is time-limited; the whole takes about a minute on an H100 or H200.
#
#   bash tests/gpu/forms.sh RESULTS     (on the GPU machine, after run.sh's build piece)
#   RR_GPU_DRY=1 bash tests/gpu/forms.sh RESULTS   print the commands, run nothing
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: $0 RESULTS_DIR}
mkdir -p "$out"
dir=build-gpu
dry=${RR_GPU_DRY:-0}
export RR_TIMEOUT=60 OMP_NUM_THREADS=1
command -v nvcc > /dev/null || export PATH=/usr/local/cuda/bin:$PATH
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
fails=0
# One command, or (dry) its line.
go() {
  if [ "$dry" = 1 ]; then echo "+ $*"; return 0; fi
  "$@"
}
# One *_perf launch on 2 ranks: its table rows, or FAILED with why (its exit status, or a
# result its own check found wrong: "# Out of bounds values : N FAILED").
perf() {
  local tool=$1 log rc
  shift
  if [ "$dry" = 1 ]; then echo "+ rrun 2 $tool $*"; return 0; fi
  log=$(mktemp)
  timeout 120 "$dir/bin/rrun" --standalone --nproc-per-node 2 "$dir/bin/$tool" "$@" > "$log" 2>&1
  rc=$?
  grep -E '^ +[0-9]' "$log"
  if [ $rc != 0 ] || ! grep -q 'Out of bounds values : 0 OK' "$log"; then
    echo "FAILED (exit $rc): $tool $*"; tail -5 "$log"; fails=$((fails + 1))
  fi
  rm -f "$log"
}
sizes=(-b 8 -e 256M -f 2 --mem cuda)
{
  go nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
  echo "## D2D copy: reduce_kernel_perf float32 sum at 256 MiB (memcpy GB/s: B)"
  go "$dir/bin/reduce_kernel_perf" -b 256M -e 256M -d float -o sum || {
    echo "FAILED: reduce_kernel_perf"; fails=$((fails + 1)); }
  echo "## hand-offs between two processes on one GPU, without the library (handoff_probe.cu)"
  if go nvcc -O2 -arch=sm_"${arch:-90}" -o "$dir/handoff_probe" tests/gpu/handoff_probe.cu \
    -L"$(dirname "$(command -v nvcc)")/../lib64/stubs" -lcuda; then
    go timeout 120 "$dir/handoff_probe" 2000 || { echo "FAILED: handoff_probe"; fails=$((fails + 1)); }
  else
    echo "FAILED: nvcc handoff_probe.cu"; fails=$((fails + 1))
  fi
  echo "## all_reduce, host hand-off (RR_CUDA_MEMOPS=0 RR_CUDA_DIRECT=0)"
  RR_CUDA_MEMOPS=0 RR_CUDA_DIRECT=0 perf all_reduce_perf "${sizes[@]}" -n 10 -w 3
  for coll in all_reduce reduce_scatter all_gather; do
    echo "## $coll, stream-memop ring (RR_CUDA_MEMOPS=1 RR_CUDA_DIRECT=0)"
    RR_CUDA_MEMOPS=1 RR_CUDA_DIRECT=0 perf ${coll}_perf "${sizes[@]}" -n 20 -w 5
    if [ "$coll" != reduce_scatter ]; then
      echo "## $coll, slots: no pull (RR_CUDA_MEMOPS=1 RR_CUDA_DIRECT=0 RR_CUDA_PULL_BYTES=1024G)"
      RR_CUDA_MEMOPS=1 RR_CUDA_DIRECT=0 RR_CUDA_PULL_BYTES=1024G perf ${coll}_perf "${sizes[@]}" -n 10 -w 3
    fi
    echo "## $coll, one kernel (RR_CUDA_DIRECT=1)"
    RR_CUDA_DIRECT=1 perf ${coll}_perf "${sizes[@]}" -n 20 -w 5
  done
  echo "failures: $fails"
} 2>&1 | tee "$out/forms.txt"
grep -q '^failures: 0$' "$out/forms.txt"
