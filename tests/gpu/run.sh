#!/usr/bin/env bash
# The CUDA checks on a GPU machine (the `device` tool's H100/H200; one GPU, so ranks share
# it), run step by step so that each call stays well inside the tool's 10 minutes and a
# killed step loses nothing:
#
#   tests/gpu/run.sh STEP RESULTS_DIR      one step; writes RESULTS_DIR/STEP.log, STEP.verdict
#                                          and rewrites RESULTS_DIR/summary.txt
#   tests/gpu/run.sh all RESULTS_DIR       every step in order (an interactive GPU machine)
#   tests/gpu/run.sh list                  what awaits a GPU run (also printed first by every
#                                          call)
#
# Steps, in order (each < 10 min on one H100; build first, the others reuse build-gpu):
#   build     configure build-gpu (-DRR_CUDA=ON, the local GPU's architecture, no -Werror:
#             warnings listed, not fatal) and build
#   probe     nvidia-smi; the IPC contract the fake encodes, on the real runtime (a memory
#             handle opened in its own process fails, in another process it maps the same
#             memory and twice gives one pointer; interprocess events need DisableTiming and
#             order a stream in another process: test_cuda ipc), and that a CPU-only program
#             creates no context (test_cuda noctx)
#   cuda      ctest -L cuda without DDP/training: pointer detection, kernels bit for bit
#             against ring/op.c (every dtype x op, each pointer misaligned alone, dst == a /
#             dst == b, fused, (1<<24)+5 elements past the grid cap), collectives on device
#             buffers world 1-4 over shm and TCP, 64 MiB, stream order on a user stream,
#             managed buffers, cudaStreamPerThread refused, a rank SIGKILLed mid-call
#             through CUDA IPC (cuda_ipc_kill_w3: the survivors fail, destroy and exit), no
#             context on GPU 0 from the worker (skipped with one GPU); nothing may be
#             skipped but workerctx
#   ddp       DDP on device gradients (ddp.gpu_w1..3, ddp.gpu_tcp_w2), bit-identical to the
#             host path, and the training example (ddp.train_gpu_w2, ddp.train_gpu_rrun_w4)
#   sanitizer compute-sanitizer memcheck: kernel, a 2-rank collective through CUDA IPC (the
#             library's kernels on mapped peer memory), DDP 2 ranks, one epoch of
#             mlp_digits --device cuda (no racecheck: reduce.cu has no __shared__)
#   torch     the PyTorch backend: CUDA tensors through every collective and a DDP step
#             against gloo (torch_cuda.py), and the CPU torch tests on this torch (2.x)
#   perf      reduce_kernel_perf (kernel vs cudaMemcpy D2D, same run, avg kernels included),
#             all_reduce_perf on device buffers staged and over CUDA IPC, and on host
#             buffers (2 ranks, one GPU), examples/bench_ddp.sh
# The CPU suite is not here: CI runs it (and the same CUDA tests on the host fake).
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=build-gpu
steps=(build probe cuda ddp sanitizer torch perf)

awaiting() {
  cat <<'EOF'
Awaiting a GPU run (nothing below has run on a GPU; the same suites pass on the host fake
in CI, label cudafake, which cannot prove what is listed in docs/cuda.md "The fake"):
  1. the IPC contract on the real runtime (probe: test_cuda ipc) -- the fake's IPC rules
  2. no context from a CPU-only program (probe: test_cuda noctx), none on GPU 0 from the
     worker (cuda: workerctx, needs 2 GPUs)
  3. kernels on the device, bit for bit vs ring/op.c, incl. (1<<24)+5 elements (cuda)
  4. collectives on device buffers, world 1-4, 64 MiB (cuda): staged, and (the default,
     RR_CUDA_IPC=1) all_reduce, reduce_scatter, all_gather, broadcast device to device through CUDA
     IPC (cuda_coll_w2..4 check the path was taken); RR_TRANSPORT=shm and tcp staged only;
     a rank SIGKILLed mid-call on that path fails the others (cuda_ipc_kill_w3)
  5. stream order on a user stream with events (async calls wait for the caller's stream
     by an event, rr_work_wait orders the caller's stream after the call); managed
     buffers; cudaStreamPerThread refused (cuda)
  6. DDP on device gradients and mlp_digits --device cuda (ddp)
  7. compute-sanitizer memcheck (sanitizer)
  8. torch CUDA tensors through the backend (torch)
  9. kernel GB/s vs cudaMemcpy D2D (target >= 90%), all_reduce_perf --mem cuda, DDP step
     times (perf)
Not built at all yet (docs/cuda.md): the other collectives through CUDA IPC, the pipelined
staged TCP path with GPU reduction.
EOF
}

awaiting
echo
step=${1:-list}
res=${2:-}
[ "$step" = list ] && exit 0
if [ -z "$res" ]; then
  echo "usage: $0 STEP|all RESULTS_DIR   (steps: ${steps[*]})" >&2
  exit 2
fi
mkdir -p "$res"
res=$(cd "$res" && pwd)

fail=0
run() { echo "+ $*"; "$@" || { echo "FAILED ($?): $*"; fail=1; }; }
need_build() { [ -x "$dir/bin/test_cuda" ] || { echo "FAILED: no $dir: run the build step first"; fail=1; return 1; }; }

do_build() {
  nvidia-smi -L || true
  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  nvcc --version | tail -2
  local gen=() arch archflag=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  # Only the local GPU's architecture: the full default list is for distributable builds.
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  [ -n "$arch" ] && archflag=(-DCMAKE_CUDA_ARCHITECTURES="$arch")
  # No -Werror: this machine's compilers (host and nvcc) are ones CI has never met, and a
  # new warning must not cost the GPU window. Warnings are counted and listed instead.
  run cmake -S . -B "$dir" "${gen[@]}" -DRR_CUDA=ON -DRR_WERROR=OFF "${archflag[@]}"
  [ $fail = 0 ] || return
  echo "+ cmake --build $dir -j $(nproc)"
  cmake --build "$dir" -j "$(nproc)" > "$dir/build.log" 2>&1
  local rc=$?
  tail -5 "$dir/build.log"
  [ $rc = 0 ] || { echo "FAILED ($rc): cmake --build (whole log: $dir/build.log)"; fail=1; }
  echo "warnings: $(grep -c 'warning' "$dir/build.log") lines (reported, not fatal)"
  grep 'warning' "$dir/build.log" | sort -u | head -20
}

do_probe() {
  need_build || return
  nvidia-smi || true
  RR_TIMEOUT=120 run "$dir/bin/test_cuda" ipc
  RR_TIMEOUT=120 run "$dir/bin/test_cuda" noctx
}

# ctest on a label set; on a GPU nothing may be skipped but the tests listed in $2.
ctest_gpu() {
  local log
  log=$(mktemp)
  ctest --test-dir "$dir" --output-on-failure -j 2 "${@:3}" -R "$1" 2>&1 | tee "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "FAILED: ctest -R '$1'"; fail=1; }
  if grep -E "Skipped|Not Run" "$log" | grep -vE "$2" | grep -q .; then
    echo "FAILED: a test was skipped on a GPU machine (the device was not seen?)"; fail=1
  fi
  rm -f "$log"
}

do_cuda() {
  need_build || return
  ctest_gpu '^cuda_' 'cuda_workerctx' -E 'reduce_kernel_perf'
}

do_ddp() {
  need_build || return
  ctest_gpu '^ddp\.(gpu_|train_gpu_)' '^$'
}

do_sanitizer() {
  need_build || return
  local cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$cs" ] || { echo "FAILED: compute-sanitizer not found"; fail=1; return; }
  # ptr launches no kernel: nothing for memcheck there. The collective goes through CUDA IPC
  # (checked to), so the library's reduction kernels run on peers' mapped memory under it;
  # the staged path runs no kernel.
  run "$cs" --tool memcheck --error-exitcode 9 "$dir/bin/test_cuda" kernel
  RR_TIMEOUT=300 RR_CUDA_IPC=1 RR_TEST_EXPECT_IPC=1 run "$cs" --tool memcheck \
    --error-exitcode 9 --target-processes all "$dir/bin/test_cuda" coll 2
  RR_TIMEOUT=300 run "$cs" --tool memcheck --error-exitcode 9 --target-processes all \
    "$dir/bin/test_ddp" gpu 2
  run "$cs" --tool memcheck --error-exitcode 9 --target-processes all \
    "$dir/bin/mlp_digits" --spawn 1 --device cuda --epochs 1 --checkpoint "" --comm-iters 1
}

# The PyTorch backend on CUDA tensors, and its CPU tests on torch 2.x (CI checks Debian's
# 1.13), as one step.
do_torch() {
  need_build || return
  local pyenv=(env PYTHONPATH="$PWD/python" RINGREDUCE_LIBRARY="$PWD/$dir/libringreduce.so" OMP_NUM_THREADS=1)
  if python3 -c "import torch" 2>/dev/null; then
    run "${pyenv[@]}" python3 tests/python/torch_cuda.py 2
    run "${pyenv[@]}" python3 tests/python/torch_collectives.py 3
    run "${pyenv[@]}" python3 tests/python/torch_ddp.py plain 2
    run "${pyenv[@]}" python3 tests/python/torch_ddp.py syncbn 2
    run "${pyenv[@]}" python3 tests/python/torch_faults.py kill9
  else
    echo "FAILED: no torch for python3 on the GPU machine"; fail=1
  fi
}

do_perf() {
  need_build || return
  run "$dir/bin/reduce_kernel_perf" -b 1M -e 256M -f 4 -d float -o sum
  run "$dir/bin/reduce_kernel_perf" -b 256M -e 256M -d all -o all
  run "$dir/bin/reduce_kernel_perf" -b 256M -e 256M --fused
  # Device buffers both ways: staged through pinned host memory, and over CUDA IPC.
  run "$dir/bin/rrun" --standalone --nproc-per-node 2 "$dir/bin/all_reduce_perf" \
    -b 8 -e 256M -f 8 --mem cuda
  RR_CUDA_IPC=1 run "$dir/bin/rrun" --standalone --nproc-per-node 2 "$dir/bin/all_reduce_perf" \
    -b 8 -e 256M -f 8 --mem cuda
  run "$dir/bin/rrun" --standalone --nproc-per-node 2 "$dir/bin/all_reduce_perf" \
    -b 8 -e 256M -f 8 --mem host
  REPS=1 run bash examples/bench_ddp.sh "$dir" --device cuda
  REPS=1 run bash examples/bench_ddp.sh "$dir" --device cuda --hidden 1024,1024 --batch 256
  REPS=1 run bash examples/bench_ddp.sh "$dir" --device cpu --hidden 1024,1024 --batch 256
}

summary() {
  {
    echo "GPU run summary ($(date -u '+%F %T UTC'), $(nvidia-smi -L 2>/dev/null | head -1))"
    for s in "${steps[@]}"; do
      if [ -f "$res/$s.verdict" ]; then echo "  $(cat "$res/$s.verdict")"; else echo "  $s: not run"; fi
    done
  } > "$res/summary.txt"
  cat "$res/summary.txt"
}

one_step() {
  local s=$1 t0
  fail=0
  t0=$(date +%s)
  echo "=== $s ==="
  "do_$s" > "$res/$s.log" 2>&1
  local v=PASS
  [ $fail = 0 ] || v=FAIL
  echo "$s: $v ($(( $(date +%s) - t0 )) s, log $s.log)" | tee "$res/$s.verdict"
  [ $v = FAIL ] && tail -40 "$res/$s.log"
  [ $v = PASS ]
}

rc=0
case "$step" in
  all) for s in "${steps[@]}"; do one_step "$s" || rc=1; done ;;
  build|probe|cuda|ddp|sanitizer|torch|perf) one_step "$step" || rc=1 ;;
  *) echo "unknown step '$step' (steps: ${steps[*]})" >&2; exit 2 ;;
esac
summary
exit $rc
