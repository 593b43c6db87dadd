#!/usr/bin/env bash
# all_reduce over CUDA IPC, 2 ranks sharing one GPU, by segment size and slot count: what
# one segment's hand-off between the two processes costs. Exits 1 if anything failed (a
# launch, a wrong result, the probe). The first GPU run
# (docs/gpu-runs/2026-11-27-h200.md) moved 4.8 GB/s busbw at 256 MiB with the default
# 256 KiB segments, about 0.5% of what the GPU's memory allows; if the time goes into each
# hand-off (a copy in one process's context, a kernel in the other's), larger segments
# should divide it, and small calls show one hand-off's latency directly. handoff_probe.cu
# measures a hand-off between two processes' contexts without the library.
#
#   bash tests/gpu/ipc_sweep.sh RESULTS     (on the GPU machine; builds if run.sh has not)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: $0 RESULTS_DIR}
mkdir -p "$out"
dir=build-gpu
[ -x "$dir/bin/all_reduce_perf" ] || bash tests/gpu/run.sh build "$out" > /dev/null 2>&1
export RR_TIMEOUT=60 OMP_NUM_THREADS=1
command -v nvcc > /dev/null || export PATH=/usr/local/cuda/bin:$PATH
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
fails=0
# One all_reduce_perf launch: its table rows, or FAILED with why (its exit status, or a
# result its own check found wrong: "# Out of bounds values : N FAILED").
perf() {
  local log rc
  log=$(mktemp)
  timeout 90 "$dir/bin/rrun" --standalone --nproc-per-node 2 "$dir/bin/all_reduce_perf" "$@" \
    > "$log" 2>&1
  rc=$?
  grep -E '^ +[0-9]' "$log"
  if [ $rc != 0 ] || ! grep -q 'Out of bounds values : 0 OK' "$log"; then
    echo "FAILED (exit $rc): all_reduce_perf $*"; tail -5 "$log"; fails=$((fails + 1))
  fi
  rm -f "$log"
}
{
  nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
  echo "## hand-offs between two processes' contexts, without the library (handoff_probe.cu)"
  if nvcc -O2 -arch=sm_"${arch:-90}" -o "$dir/handoff_probe" tests/gpu/handoff_probe.cu; then
    timeout 90 "$dir/handoff_probe" 2000 || { echo "FAILED: handoff_probe"; fails=$((fails + 1)); }
  else
    echo "FAILED: nvcc handoff_probe.cu"; fails=$((fails + 1))
  fi
  echo "## small calls, device buffers over CUDA IPC (defaults)"
  perf -b 8 -e 1M -f 8 -n 50 -w 5 --mem cuda
  echo "## small calls, device buffers staged through host memory (RR_CUDA_IPC=0; up to"
  echo "## RR_SMALL_BYTES: above it they are piped): each rank's copies are in its own"
  echo "## context, and a call still waits once for the other's (its bytes come through host)"
  RR_CUDA_IPC=0 perf -b 8 -e 64K -f 8 -n 50 -w 5 --mem cuda
  echo "## small calls, host buffers over shm (same run)"
  perf -b 8 -e 1M -f 8 -n 50 -w 5 --mem host
  # RR_IPC_SEG_BYTES: the ring and chain kinds' device segment (since the first run; that
  # run's rows varied RR_SEG_BYTES, which then set it). 256K 4 is that run's default.
  for cfg in "256K 4" "1M 4" "4M 4" "4M 16" "16M 4" "16M 16"; do
    set -- $cfg
    echo "## RR_IPC_SEG_BYTES=$1 RR_SLOTS=$2, CUDA IPC"
    RR_IPC_SEG_BYTES=$1 RR_SLOTS=$2 perf -b 1M -e 256M -f 4 -n 10 -w 3 --mem cuda
  done
  echo "## host buffers over shm, defaults (unchanged by RR_IPC_SEG_BYTES)"
  perf -b 1M -e 256M -f 16 -n 10 -w 3 --mem host
  echo "## piped through pinned host slots (RR_CUDA_IPC=0), defaults"
  RR_CUDA_IPC=0 perf -b 1M -e 256M -f 16 -n 10 -w 3 --mem cuda
  echo "failures: $fails"
} 2>&1 | tee "$out/ipc_sweep.txt"
grep -q '^failures: 0$' "$out/ipc_sweep.txt"
