#!/usr/bin/env bash
# The CUDA checks, in one call on a GPU machine (the `device` tool's H100/H200; one GPU, so
# ranks share it). Configures build-gpu with -DRR_CUDA=ON, builds, then runs:
#   1. the CTest label "cuda": pointer detection; every dtype x op through the kernels
#      against ring/op.c bit for bit (aligned, tail, misaligned, in place, fused); every
#      collective on device buffers for world sizes 1-4 on one GPU, over shared memory and
#      forced TCP (RR_TRANSPORT=tcp), every dtype x op for all_reduce, in and out of place,
#      counts 0/1/7/1000003, checked against the harness's float64 / exact reference
#      (tolerance: tests/harness.h); 64 MiB; async on a user stream (ordering);
#      DDP on device gradients (ddp.gpu_w1..3, ddp.gpu_tcp_w2: bit-identical to the host
#      path for every hook, legacy and user stream, broadcasts, no_sync, checkpoints) and
#      the training example with --device cuda (ddp.train_gpu_w2, ddp.train_gpu_rrun_w4:
#      held-out accuracy >= 90% after 5 epochs, ranks bit-identical after every step);
#   2. the host tests of the kernels' element functions (cuda_elem_vs_op, ddp.elem_vs_host);
#   3. compute-sanitizer memcheck (and racecheck on the kernel test) on small runs;
#   4. the PyTorch backend (tests/python): CUDA tensors through every collective and a DDP
#      step against gloo on the CPU (torch_cuda.py), and the CPU torch tests on torch 2.x;
#   5. reduce_kernel_perf (kernel GB/s beside cudaMemcpy D2D, same run) and all_reduce_perf
#      on device buffers (--mem cuda) with 2 ranks on the one GPU; the DDP example's step
#      time on the GPU and on the CPU (examples/bench_ddp.sh, world 1/2/4, with and without
#      communication) for docs/performance.md.
# Output: everything on stdout; exit status non-zero when any step failed.
#   tests/gpu/run.sh [--quick]   (--quick: skip the perf runs)
set -uo pipefail
cd "$(dirname "$0")/../.."
quick=0; [ "${1:-}" = "--quick" ] && quick=1
dir=build-gpu
fail=0
step() { echo; echo "=== $* ==="; }
run() { echo "+ $*"; "$@" || { echo "FAILED ($?): $*"; fail=1; }; }

step "GPU"
nvidia-smi -L || true
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
nvcc --version | tail -2

step "configure + build (RR_CUDA=ON)"
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
# Only the local GPU's architecture: the full default list is for distributable builds.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
archflag=(); [ -n "$arch" ] && archflag=(-DCMAKE_CUDA_ARCHITECTURES="$arch")
t0=$(date +%s)
cmake -S . -B "$dir" "${gen[@]}" -DRR_CUDA=ON -DRR_WERROR=ON "${archflag[@]}" >/dev/null || exit 1
cmake --build "$dir" -j "$(nproc)" || exit 1
echo "build: $(( $(date +%s) - t0 )) s"

step "ctest -L cuda (and the element test)"
log=$(mktemp)
ctest --test-dir "$dir" --output-on-failure -L 'cuda' -j 2 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "FAILED: ctest -L cuda"; fail=1; }
# Nothing may be skipped on a GPU machine (a skip would mean the device was not seen).
if grep -q "Skipped\|Not Run" "$log"; then echo "FAILED: a cuda test was skipped on a GPU machine"; fail=1; fi
rm -f "$log"

step "CPU suite still green in this build (short labels)"
run ctest --test-dir "$dir" -j 4 -LE 'stress|soak|fuzz|large|netns|cuda' --output-on-failure

step "compute-sanitizer"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$cs" ]; then
  run "$cs" --tool memcheck --error-exitcode 9 "$dir/bin/test_cuda" ptr
  run "$cs" --tool memcheck --error-exitcode 9 "$dir/bin/test_cuda" kernel
  run "$cs" --tool racecheck --error-exitcode 9 "$dir/bin/test_cuda" kernel
  # A 2-rank collective on device buffers: both ranks under memcheck.
  RR_TIMEOUT=300 run "$cs" --tool memcheck --error-exitcode 9 --target-processes all \
    "$dir/bin/test_cuda" coll 2
  # DDP on device gradients (its kernels, device buckets, staged all-reduce), 2 ranks.
  RR_TIMEOUT=300 run "$cs" --tool memcheck --error-exitcode 9 --target-processes all \
    "$dir/bin/test_ddp" gpu 2
  # The example's kernels and cuBLAS calls, one rank, one epoch.
  run "$cs" --tool memcheck --error-exitcode 9 --target-processes all \
    "$dir/bin/mlp_digits" --spawn 1 --device cuda --epochs 1 --checkpoint "" --comm-iters 1
else
  echo "FAILED: compute-sanitizer not found"; fail=1
fi

step "PyTorch backend: CUDA tensors, and the CPU torch tests on this machine's torch (2.x)"
# python3 here has PyTorch 2.x with CUDA: torch_cuda.py puts every collective on CUDA
# tensors (current and side stream) and a DDP step against gloo on the CPU; the CPU tests
# check the backend on torch 2.x (CI checks Debian's 1.13).
pyenv=(env PYTHONPATH="$PWD/python" RINGREDUCE_LIBRARY="$PWD/$dir/libringreduce.so" OMP_NUM_THREADS=1)
if python3 -c "import torch" 2>/dev/null; then
  run "${pyenv[@]}" python3 tests/python/torch_cuda.py 2
  run "${pyenv[@]}" python3 tests/python/torch_collectives.py 3
  run "${pyenv[@]}" python3 tests/python/torch_ddp.py plain 2
  run "${pyenv[@]}" python3 tests/python/torch_ddp.py syncbn 2
  run "${pyenv[@]}" python3 tests/python/torch_faults.py kill9
else
  echo "FAILED: no torch for python3 on the GPU machine"; fail=1
fi

if [ $quick = 0 ]; then
  step "reduce_kernel_perf (kernel vs cudaMemcpy D2D, same run)"
  run "$dir/bin/reduce_kernel_perf" -b 1M -e 256M -f 4 -d float -o sum
  run "$dir/bin/reduce_kernel_perf" -b 256M -e 256M -d all -o all
  run "$dir/bin/reduce_kernel_perf" -b 256M -e 256M --fused
  step "all_reduce_perf on device buffers, 2 ranks on one GPU (staged path)"
  run "$dir/bin/rrun" --standalone --nproc-per-node 2 "$dir/bin/all_reduce_perf" \
    -b 8 -e 256M -f 8 --mem cuda
  run "$dir/bin/rrun" --standalone --nproc-per-node 2 "$dir/bin/all_reduce_perf" \
    -b 8 -e 256M -f 8 --mem host
  step "DDP example: step time on the GPU and on the CPU (examples/bench_ddp.sh)"
  REPS=1 run bash examples/bench_ddp.sh "$dir" --device cuda
  REPS=1 run bash examples/bench_ddp.sh "$dir" --device cuda --hidden 1024,1024 --batch 256
  REPS=1 run bash examples/bench_ddp.sh "$dir" --device cpu --hidden 1024,1024 --batch 256
fi

echo
[ $fail = 0 ] && echo "GPU RUN: ALL GREEN" || echo "GPU RUN: FAILURES (see above)"
exit $fail
