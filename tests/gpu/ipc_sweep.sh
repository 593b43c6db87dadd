#!/usr/bin/env bash
# all_reduce over CUDA IPC, 2 ranks sharing one GPU, by segment size and slot count: what
# one segment's hand-off between the two processes costs. The first GPU run
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
perf() { timeout 90 "$dir/bin/rrun" --standalone --nproc-per-node 2 "$dir/bin/all_reduce_perf" "$@"; }
{
  nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
  echo "## hand-offs between two processes' contexts, without the library (handoff_probe.cu)"
  nvcc -O2 -arch=sm_"${arch:-90}" -o "$dir/handoff_probe" tests/gpu/handoff_probe.cu &&
    timeout 60 "$dir/handoff_probe" 2000
  echo "## small calls, device buffers over CUDA IPC (defaults)"
  perf -b 8 -e 1M -f 8 -n 50 -w 5 --mem cuda | grep -E '^ +[0-9]'
  echo "## small calls, device buffers staged through host memory (RR_CUDA_IPC=0): each"
  echo "## rank's device work stays in its own context, nothing alternates between the two"
  RR_CUDA_IPC=0 perf -b 8 -e 1M -f 8 -n 50 -w 5 --mem cuda | grep -E '^ +[0-9]'
  echo "## small calls, host buffers over shm (same run)"
  perf -b 8 -e 1M -f 8 -n 50 -w 5 --mem host | grep -E '^ +[0-9]'
  for cfg in "256K 4" "1M 4" "4M 4" "4M 16" "4M 64"; do
    set -- $cfg
    echo "## RR_SEG_BYTES=$1 RR_SLOTS=$2, CUDA IPC"
    RR_SEG_BYTES=$1 RR_SLOTS=$2 perf -b 1M -e 256M -f 4 -n 10 -w 3 --mem cuda | grep -E '^ +[0-9]'
  done
  echo "## RR_SEG_BYTES=4M, piped through pinned host slots (RR_CUDA_IPC=0)"
  RR_SEG_BYTES=4M RR_CUDA_IPC=0 perf -b 1M -e 256M -f 16 -n 10 -w 3 --mem cuda | grep -E '^ +[0-9]'
} 2>&1 | tee "$out/ipc_sweep.txt"
