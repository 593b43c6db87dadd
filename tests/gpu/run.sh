#!/usr/bin/env bash
# The CUDA checks on a GPU machine: the `device` tool's one H100/H200 (16 cores, PyTorch 2.x,
# nvcc, compute-sanitizer), lent now and then for about 15 minutes in all, start included.
# So the checks come as two commands of under 7 minutes each, most valuable first, every
# piece under its own time limit and the whole command under a budget, all output in one
# folder (what the tool brings back: at most 8 files, so one log per command, not per piece):
#
#   tests/gpu/run.sh quick-a RESULTS   preflight, build, IPC probe, kernels, collectives,
#                                      stream order / managed / refusals, torch CUDA tensors
#   tests/gpu/run.sh quick-b RESULTS   build (a no-op when quick-a's is still there), DDP and
#                                      the training example, compute-sanitizer, the figures
#   tests/gpu/run.sh all RESULTS       both, then the longer extras (an interactive machine)
#   tests/gpu/run.sh PIECE RESULTS     one piece (names below), e.g. to rerun what failed
#   tests/gpu/run.sh list              what has run on a GPU, and what has not
#   RR_GPU_DRY=1 tests/gpu/run.sh ...  a dry run: every piece prints the commands it would run
#                                      and runs none (seconds; the test gpu_run_dry runs it)
#
# On the device tool: `bash tests/gpu/run.sh quick-a $OUT` with timeout_s 480, then the same
# with quick-b while the machine is warm (it rebuilds if it is not: the build is then part of
# quick-b's budget). RESULTS gets CMD.log (everything, piece by piece), CMD.txt (one line per
# piece: verdict, seconds, limit) and, from quick-a's build, build.log; quick-b adds
# figures.txt (the perf piece's tables alone) and forms.txt (the forms piece's). Back here,
# `python3 tests/gpu/report.py A B` turns the two folders into the page for docs/gpu-runs/
# (verdicts, every figure against the physical bound and its algorithm's own).
#
# Pieces: what each verifies, its limit (s) and what it took on the fake-free dry run here.
# quick-a (budget RR_GPU_BUDGET, default 400 s):
#   preflight  20  driver, GPU, compute capability, nvcc, cmake, ninja, torch, sanitizer,
#                  kernel (gVisor answers 4.4.0: compute-sanitizer refuses the device there)
#   build     240  -DRR_CUDA=ON for the local architecture only (90 with no GPU), no -Werror
#                  (a compiler CI never met must not cost the window: warnings listed), only
#                  the targets the pieces use
#   probe      60  the IPC contract the fake encodes, on the real runtime (test_cuda ipc),
#                  that a CPU-only program creates no context (noctx), stream memory
#                  operations alone (cuda_memops_rules, _pingpong)
#   kernels    90  pointer detection; every dtype x op bit for bit against ring/op.c,
#                  misaligned, aliased, fused, (1<<24)+5 elements (test_cuda ptr, kernel)
#   coll      150  every collective on device buffers, world 1, 2, 4 over CUDA IPC (checked
#                  taken; RR_CUDA_DIRECT=0: the ring), piped over TCP (world 2, checked
#                  taken), staged (world 2); a rank SIGKILLed mid-call through CUDA IPC: the
#                  survivors fail, destroy, exit; the one-kernel form (every rank on the one
#                  GPU): its collectives at world 2 and 4, its cache of mapped buffers, a peer
#                  SIGKILLed mid-call (test_cuda_direct); the all-gather's pull
#                  (cuda_pull_coll)
#   streams    90  async order on a user stream, no stream sync (buffer and managed),
#                  managed blocking, capture refused, per-thread stream refused, device
#                  option, no context on GPU 0 from the worker (skips with one GPU)
#   torch      90  the PyTorch backend on CUDA tensors: every collective, a side stream, DDP
#                  against gloo (tests/python/torch_cuda.py 2)
# quick-b (same budget):
#   build     240  as above; a no-op on a warm machine
#   ddp       120  DDP on device gradients bit-identical to the host path over IPC and TCP
#                  (ddp.gpu_w2, ddp.gpu_tcp_w2) and the training example (ddp.train_gpu_w2)
#   memcheck  150  compute-sanitizer memcheck: the kernels (small sizes), a 2-rank collective
#                  through CUDA IPC (the kernels on a peer's mapped memory), the one-kernel
#                  form at 2 ranks, DDP 2 ranks; on a machine where it refuses the device:
#                  reported as SKIP, not a failure
#   perf      150  reduce kernel vs cudaMemcpy D2D (float32 sum by size; every dtype x op at
#                  256 MiB, each as a fraction of the same run's copy); all_reduce_perf 2 ranks on one GPU:
#                  device buffers over IPC, piped and staged over shm, piped over TCP, host
#                  buffers over TCP and shm; torch ringreduce vs torch gloo on the same CUDA
#                  tensors; the example's DDP step on the GPU and on the CPU
#   forms     120  two ranks on one GPU, side by side: the host hand-off, the stream-memop
#                  ring and the one-kernel form, 8 B .. 256 MiB (all_reduce; reduce_scatter and
#                  all_gather in the last two); the D2D copy rate B of the same run; the
#                  hand-off probe's rows, a stream wait/write ping-pong between two processes
#                  and a bounded spin ping-pong between two kernels (tests/gpu/forms.sh,
#                  tests/gpu/handoff_probe.cu; forms.txt)
# extras (only with `all`): ddp_more (gpu_w1/w3, rrun_w4), torch_cpu (the CPU torch tests on
#   this torch 2.x), perf_more (the fused kernel, bench_ddp.sh).
# Without a GPU (a dry run, as on the machine that writes this) every piece still runs its
# commands: the build is real, the tests answer "skipped: no CUDA device" (77) and the
# piece says SKIP; memcheck and the figures are skipped outright.
# The CPU suite is not here: CI runs it (and the same CUDA tests on the host fake).
set -uo pipefail
cd "$(dirname "$0")/../.."
dir=build-gpu
quick_a=(preflight build probe kernels coll streams torch)
quick_b=(build ddp memcheck perf forms)
extras=(ddp_more torch_cpu perf_more)
declare -A limit=([preflight]=20 [build]=240 [probe]=60 [kernels]=90 [coll]=150 [streams]=90
  [torch]=90 [ddp]=120 [memcheck]=150 [perf]=150 [forms]=120 [ddp_more]=240 [torch_cpu]=400
  [perf_more]=400)

awaiting() {
  cat <<'EOF'
Every piece passed once, on an H200 (docs/gpu-runs/2026-11-27-h200.md), the torch piece
after a fix to its script; rerun them on every GPU machine lent (the same suites pass on the
host fake in CI, label cudafake, which cannot prove what docs/cuda.md "The fake" lists).
Never run on a GPU: cuda_workerctx (needs two GPUs); handoff_probe.cu (the old ipc piece's
tests/gpu/ipc_sweep.sh ran in its first version; it is no longer a piece, the forms piece
took its place, and still runs alone: bash tests/gpu/ipc_sweep.sh RESULTS); RR_IPC_SEG_BYTES (the ring and chain kinds' own device segments, 4 MiB) and
cuda_ipcseg_w2, which came after that run; the '# Rank' lines' [cuda]; the reduction
kernels as they are now (issue 39.4: float16/bfloat16 through the cvt instructions, two per
word, integer AVG by a magic multiply-high; test_cuda kernel, and the perf piece's every
dtype x op table against the copy, target >= 90% each at 256 MiB).
Never run on a GPU (issue 39): the stream-memop ring (RR_CUDA_MEMOPS; the operations alone:
cuda_memops_rules, _pingpong), the all-gather's pull from the sender's output
(RR_CUDA_PULL_BYTES; cuda_pull_coll), the one-kernel form
for ranks that share a GPU (RR_CUDA_DIRECT; test_cuda_direct: cuda_direct_*), the forms
piece (tests/gpu/forms.sh) and handoff_probe.cu's memop and spin rows; whether the driver
keeps a freed allocation that another process still maps alive (docs/cuda.md, "One kernel
for ranks that share a GPU").
Not built (docs/cuda.md, "Not built yet"): mixed host/device buffers in one sendrecv
through CUDA IPC (staged); the chains (broadcast, reduce) on the piped path.
EOF
}

step=${1:-list}
res=${2:-}
if [ "$step" = list ]; then awaiting; exit 0; fi
# __lib: sourced by a piece's child shell (the runner below), with the results folder.
if [ -z "$res" ]; then
  echo "usage: $0 quick-a|quick-b|all|PIECE RESULTS_DIR   (pieces: ${quick_a[*]} ${quick_b[*]:1} ${extras[*]})" >&2
  exit 2
fi
mkdir -p "$res" && res=$(cd "$res" && pwd) || exit 2
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH

gpu=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU' && gpu=1
# (nproc(1) obeys OMP_NUM_THREADS, set below and inherited by the pieces' shells.)
ncpu=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export RR_TIMEOUT=120 RR_GRACE_PERIOD=2 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1

# ---- helpers, used inside pieces -------------------------------------------------------
# A piece fails if any command in it fails; a command answering 77 ("skipped: no CUDA
# device") counts as a skip, which is a failure on a GPU machine (the device was not seen).
fail=0 skipped=0
dry=${RR_GPU_DRY:-0}
run() {
  echo "+ $*"
  [ "$dry" = 1 ] && return 0
  "$@"
  local rc=$?
  if [ $rc = 77 ]; then
    skipped=1
    [ $gpu = 1 ] && { echo "FAILED: skipped on a GPU machine: $*"; fail=1; }
  elif [ $rc != 0 ]; then
    echo "FAILED ($rc): $*"; fail=1
  fi
}
need_build() {
  [ "$dry" = 1 ] || [ -x "$dir/bin/test_cuda" ] || { echo "FAILED: no $dir: the build piece first"; fail=1; return 1; }
}
# Pieces that need the GPU itself (figures, the sanitizer): a dry run prints their commands.
need_gpu() { [ $gpu = 1 ] || [ "$dry" = 1 ] || { echo "no GPU: $1 not run"; skipped=1; return 1; }; }
# ctest on a regex; on a GPU nothing may be skipped but the tests matching $2.
ctest_gpu() {
  local log
  log=$(mktemp)
  echo "+ ctest -R '$1'"
  [ "$dry" = 1 ] && return 0
  ctest --test-dir "$dir" --output-on-failure -j "${CTEST_J:-3}" -R "$1" 2>&1 | tee "$log"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "FAILED: ctest -R '$1'"; fail=1; }
  if grep -qE "Skipped|Not Run" "$log"; then
    skipped=1
    if [ $gpu = 1 ] && grep -E "Skipped|Not Run" "$log" | grep -vE "$2" | grep -q .; then
      echo "FAILED: a test was skipped on a GPU machine (the device was not seen?)"; fail=1
    fi
  fi
  rm -f "$log"
}
rrun2() { "$dir/bin/rrun" --standalone --nproc-per-node 2 "$@"; }
# The GPU machine's python3 holds its torch; RR_GPU_PYTHON picks another (a dry run here:
# /usr/bin/python3, Debian's CPU torch).
py=${RR_GPU_PYTHON:-python3}
pyenv=(env PYTHONPATH="$PWD/python" RINGREDUCE_LIBRARY="$PWD/$dir/libringreduce.so" "$py")
# No torch: a failure on a GPU machine (its image has one), a skip on a dry run.
need_torch() {
  [ "$dry" = 1 ] && return 0
  "$py" -c "import torch" 2>/dev/null && return 0
  echo "no torch for $py"
  skipped=1
  [ $gpu = 1 ] && { echo "FAILED: no torch on the GPU machine"; fail=1; }
  return 1
}

# ---- pieces ------------------------------------------------------------------------------
p_preflight() {
  nvidia-smi -L || echo "no GPU: a dry run (the build is real, the checks skip)"
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv 2>/dev/null
  echo "kernel: $(uname -r) (4.4.0 is gVisor: compute-sanitizer refuses the device there)"
  nvcc --version | tail -2 || { echo "FAILED: no nvcc"; fail=1; }
  cmake --version | head -1 || { echo "FAILED: no cmake"; fail=1; }
  command -v ninja >/dev/null && echo "ninja $(ninja --version)"
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1
  (command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer) 2>/dev/null || echo "no compute-sanitizer"
  echo "cores: $ncpu, git: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (tree modified)')"
}

p_build() {
  local gen=() arch archflag=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  # Only the local GPU's architecture (the default list is for distributable builds); 90
  # (H100/H200) on a dry run.
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
  archflag=(-DCMAKE_CUDA_ARCHITECTURES="${arch:-90}")
  # No -Werror: this machine's compilers are ones CI has never met, and a new warning must
  # not cost the window. Warnings are counted and listed instead.
  run cmake -S . -B "$dir" "${gen[@]}" -DRR_CUDA=ON -DRR_WERROR=OFF "${archflag[@]}"
  [ $fail = 0 ] || return
  local targets=(ringreduce test_cuda test_cuda_ipc_kill test_cuda_direct test_cuda_memops
    test_cuda_pull test_ddp rrun
    all_reduce_perf reduce_scatter_perf all_gather_perf reduce_kernel_perf mlp_digits)
  echo "+ cmake --build $dir -j $ncpu --target ${targets[*]}"
  [ "$dry" = 1 ] && return 0
  cmake --build "$dir" -j "$ncpu" --target "${targets[@]}" > "$res/build.log" 2>&1
  local rc=$?
  tail -3 "$res/build.log"
  [ $rc = 0 ] || { echo "FAILED ($rc): the build (whole log: build.log)"; fail=1; }
  echo "warnings: $(grep -c 'warning' "$res/build.log") lines (reported, not fatal)"
  grep 'warning' "$res/build.log" | sort -u | head -20
}

p_probe() {
  need_build || return
  run "$dir/bin/test_cuda" ipc
  run "$dir/bin/test_cuda" noctx
  # Stream memory operations alone: the cyclic >= wait, the write after a copy, and two
  # processes' streams ping-ponging on one registered shared page (test_cuda_memops).
  ctest_gpu '^cuda_memops_(rules|pingpong)$' '^$'
}

p_kernels() {
  need_build || return
  run "$dir/bin/test_cuda" ptr
  run "$dir/bin/test_cuda" kernel
}

p_coll() {
  need_build || return
  # IPC taken where it must be (RR_TEST_EXPECT_IPC, set by the tests), staged where not.
  ctest_gpu '^cuda_(coll_(w1|w2|w4|staged_w2|tcp_w2)|ipc_kill_w3|ipcseg_w2)$' '^$'
  # The one-kernel form: every rank on the machine's one GPU (RR_TEST_EXPECT_DIRECT=1).
  ctest_gpu '^cuda_direct_(coll_w2|coll_w4|cache_w2|kill_w3)$' '^$'
  # The all-gather steps pulling from the sender's output (test_cuda_pull, issue 39.3).
  ctest_gpu '^cuda_pull_coll$' '^$'
}

p_streams() {
  need_build || return
  ctest_gpu '^cuda_(stream_w2|nosync_w2|nosync_managed_w2|managed_w2|capture_w2|perthread|pgdevice|workerctx)$' \
    'cuda_workerctx'
}

p_torch() {
  need_build || return
  need_torch || return
  run "${pyenv[@]}" tests/python/torch_cuda.py 2
}

p_ddp() {
  need_build || return
  ctest_gpu '^ddp\.(gpu_w2|gpu_tcp_w2|train_gpu_w2)$' '^$'
}

p_memcheck() {
  need_build || return
  need_gpu memcheck || return
  local cs out
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$cs" ] || [ "$dry" = 1 ] || { echo "FAILED: compute-sanitizer not found"; fail=1; return; }
  # gVisor: "Device not supported" at the first call. Report it and go on.
  out=$([ "$dry" = 1 ] || "$cs" --tool memcheck "$dir/bin/test_cuda" ptr 2>&1)
  echo "$out" | tail -3
  if echo "$out" | grep -qiE "not supported|error 999"; then
    echo "compute-sanitizer refuses this device (gVisor?): memcheck not run"; skipped=1; return
  fi
  # RR_TEST_SMALL: the kernel cases up to 100003 elements (the (1<<24)+5 case ran in
  # kernels); the collective's largest count likewise. The collective goes through CUDA IPC
  # (checked), so the library's kernels run on a peer's mapped memory under the tool.
  RR_TEST_SMALL=1 run "$cs" --tool memcheck --error-exitcode 9 "$dir/bin/test_cuda" kernel
  RR_TIMEOUT=100 RR_TEST_SMALL=1 RR_CUDA_IPC=1 RR_CUDA_DIRECT=0 RR_TEST_EXPECT_IPC=1 run "$cs" \
    --tool memcheck --error-exitcode 9 --target-processes all "$dir/bin/test_cuda" coll 2
  # The one-kernel form: the leader's kernel reads and writes the peer's mapped buffers.
  RR_TIMEOUT=100 RR_TEST_EXPECT_DIRECT=1 run "$cs" --tool memcheck --error-exitcode 9 \
    --target-processes all "$dir/bin/test_cuda_direct" cache 2
  RR_TIMEOUT=100 RR_ALGO=ring RR_CUDA_IPC=1 run "$cs" --tool memcheck --error-exitcode 9 \
    --target-processes all "$dir/bin/test_ddp" gpu 2
}

# The figures of issues 24 and 25, printed and copied to figures.txt.
p_perf() {
  need_build || return
  need_gpu "the figures" || return
  {
    echo "## reduce kernel vs cudaMemcpy D2D (float32 sum)"
    run "$dir/bin/reduce_kernel_perf" -b 1M -e 256M -f 4 -d float -o sum
    # Issue 39.4's target: every kernel >= 90% of the copy at 256 MiB (ratio% column; AVG
    # rows divide by 4). Estimated 2-3 s: 52 rows of 50 kernels and 50 copies, 0.13-0.4 ms each.
    echo "## every dtype x op kernel vs cudaMemcpy D2D at 256 MiB"
    run "$dir/bin/reduce_kernel_perf" -b 256M -e 256M -d all -o all
    local ar=("$dir/bin/all_reduce_perf" -b 1M -e 256M -f 16 -n 10 -w 3)
    echo "## all_reduce, 2 ranks on one GPU: device buffers over CUDA IPC, one kernel"
    RR_CUDA_IPC=1 run rrun2 "${ar[@]}" --mem cuda
    echo "## device buffers piped through pinned slots over shm (no IPC), reduced on the GPU"
    RR_CUDA_IPC=0 run rrun2 "${ar[@]}" --mem cuda
    echo "## device buffers staged whole through pinned host memory over shm"
    RR_CUDA_IPC=0 RR_CUDA_PIPE=0 run rrun2 "${ar[@]}" --mem cuda
    echo "## device buffers over TCP (piped)"
    RR_TRANSPORT=tcp run rrun2 "${ar[@]}" --mem cuda
    echo "## host buffers over TCP, then shm (baselines, same run)"
    RR_TRANSPORT=tcp run rrun2 "${ar[@]}" --mem host
    run rrun2 "${ar[@]}" --mem host
    echo "## torch dist.all_reduce on the same CUDA tensors: ringreduce vs gloo (2 ranks)"
    local j
    j=$(mktemp --suffix .jsonl)
    [ "$dry" = 1 ] && echo "{}" > "$j"
    run "${pyenv[@]}" bench/torch/bench_torch.py coll 2 "$j" --device cuda \
      --sizes 1M,32M,256M --rounds 3
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if not r: continue
    print("%-10s %10d B %10.1f us %8.2f GB/s busbw  wrong %d" % (r["backend"], r["size"],
          r["time_us"], r["busbw_GBps"], r["wrong"]))' "$j"
    echo "## the example's DDP step, 2 ranks: GPU, then CPU"
    run "$dir/bin/mlp_digits" --spawn 2 --device cuda --epochs 2 --checkpoint "" --hidden 1024,1024 --batch 256
    run "$dir/bin/mlp_digits" --spawn 2 --device cpu --epochs 2 --checkpoint "" --hidden 1024,1024 --batch 256
  } 2>&1 | tee "$res/figures.txt"
  # The tee's subshell kept its own verdict: read it back from the text.
  grep -q '^FAILED' "$res/figures.txt" && fail=1
  grep -q '^skipped' "$res/figures.txt" && skipped=1
}

# The three forms side by side, the hand-off probe, the copy rate (tests/gpu/forms.sh).
p_forms() {
  need_build || return
  need_gpu "the figures" || return
  # A dry run prints forms.sh's own commands (it exits 0 then).
  if [ "$dry" = 1 ]; then RR_GPU_DRY=1 bash tests/gpu/forms.sh "$res"; return; fi
  run bash tests/gpu/forms.sh "$res" # exits 1 on a failed launch, result or probe
}

p_ddp_more() {
  need_build || return
  ctest_gpu '^ddp\.(gpu_w1|gpu_w3|train_gpu_rrun_w4)$' '^$'
}

p_torch_cpu() {
  need_build || return
  need_torch || return
  run "${pyenv[@]}" tests/python/torch_collectives.py 3
  run "${pyenv[@]}" tests/python/torch_ddp.py plain 2
  run "${pyenv[@]}" tests/python/torch_ddp.py syncbn 2
  run "${pyenv[@]}" tests/python/torch_faults.py kill9
}

p_perf_more() {
  need_build || return
  need_gpu "the figures" || return
  run "$dir/bin/reduce_kernel_perf" -b 256M -e 256M --fused
  REPS=1 run bash examples/bench_ddp.sh "$dir" --device cuda
}

# ---- the runner ---------------------------------------------------------------------------
budget=${RR_GPU_BUDGET:-400}
t_start=$(date +%s)
log= sum=

piece() {
  local p=$1 cap=${limit[$1]} t0 left lim rc v
  t0=$(date +%s)
  left=$(( budget - (t0 - t_start) ))
  if [ "$left" -lt 20 ]; then
    v="NOT RUN (budget of ${budget} s spent)"
    printf '%-10s %s\n' "$p" "$v" | tee -a "$sum"
    return 1
  fi
  lim=$(( cap < left - 5 ? cap : left - 5 ))
  echo "=== $p (limit $lim s) ===" >> "$log"
  # The piece in a child shell under timeout(1), which signals its whole process group
  # (ctest, rrun, the ranks) at the limit. The child reports its verdict through its exit
  # status: 0 pass, 3 skip, 1 fail.
  timeout -k 10 "$lim" bash -c '
    source "$0" __lib "$2"
    "p_$1"
    [ $fail = 0 ] || exit 1
    [ $skipped = 0 ] || exit 3
    exit 0' "$0" "$p" "$res" >> "$log" 2>&1
  rc=$?
  case $rc in
    0) v=PASS; [ "${RR_GPU_DRY:-0}" = 1 ] && v=DRY ;;
    3) v=SKIP ;;
    124|137) v="FAIL (timed out)" ;;
    *) v=FAIL ;;
  esac
  printf '%-10s %-18s %4d s  (limit %d s)\n' "$p" "$v" $(( $(date +%s) - t0 )) "$lim" | tee -a "$sum"
  [ "$v" = PASS ] || [ "$v" = SKIP ] || [ "$v" = DRY ]
}

# Sourced by piece's child: the helpers and pieces above, nothing else.
[ "$step" = __lib ] && return 0

run_all() {
  local name=$1 rc=0 p
  shift
  log=$res/$name.log sum=$res/$name.txt
  : > "$log"
  local device="none: a dry run (the build is real, the checks skip)"
  [ $gpu = 1 ] && device=$(nvidia-smi -L | head -1)
  [ "${RR_GPU_DRY:-0}" = 1 ] && device="none: RR_GPU_DRY=1 (commands printed, none run)"
  {
    echo "GPU check $name, $(date -u '+%F %T UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)"
    echo "device: $device"
  } | tee "$sum"
  for p in "$@"; do piece "$p" || rc=1; done
  echo "total: $(( $(date +%s) - t_start )) s of a ${budget} s budget" | tee -a "$sum"
  # On failure, the end of the log (the tool's reply carries the last lines).
  [ $rc = 0 ] || { echo "--- end of $name.log ---"; tail -40 "$log"; }
  return $rc
}

case "$step" in
  quick-a) run_all quick-a "${quick_a[@]}" ;;
  quick-b) run_all quick-b "${quick_b[@]}" ;;
  all) budget=100000; run_all all "${quick_a[@]}" "${quick_b[@]:1}" "${extras[@]}" ;;
  *)
    if [ -n "${limit[$step]:-}" ]; then run_all "$step" "$step"
    else echo "unknown: '$step' (quick-a, quick-b, all, list, or a piece: ${!limit[*]})" >&2; exit 2; fi ;;
esac
