#!/usr/bin/env bash
# The training example (examples/mlp_digits.c) end to end, one case per CTest test:
#   test_train.sh RRUN MLP_DIGITS CASE
# The CPU cases pass --device cpu, so they test the CPU path on GPU machines too.
#   rrun_w4    4 ranks under rrun, 5 epochs: held-out accuracy >= 90%, parameters checked
#              bit-identical on all ranks after every step, checkpoint written by rank 0
#   spawn_w2   2 ranks started by the program itself (--spawn 2), bf16 compression hook
#   no_comm    --no-comm runs and says so in its timing line
#   bad_data   a missing data file fails with a message naming it
#   gpu_w2     --device cuda, 2 ranks sharing the GPU, fp16 hook: held-out accuracy >= 90%
#              after 5 epochs (the CPU run's bar), parameters bit-identical on both ranks
#              after every step, checkpoint written from device parameters
#   gpu_rrun_w4  --device cuda under rrun, 4 ranks on one GPU, no hook: the same bar
#   The gpu cases need a GPU: without one (or in a build without CUDA) the example must
#   refuse --device cuda saying which, and the case then prints "skipped: no CUDA device"
#   and exits 77.
set -uo pipefail
rrun=$1 prog=$2 case=$3
tmp=$(mktemp -d /tmp/rr_train.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export RR_TIMEOUT=${RR_TIMEOUT:-60} RR_GRACE_PERIOD=${RR_GRACE_PERIOD:-2}
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$tmp/out"; exit 1; }
want() { grep -q -- "$1" "$tmp/out" || fail "output lacks '$1'"; }

case $case in
  rrun_w4)
    # --standalone: a free port, not 29500, which another job on this host may hold.
    "$rrun" --standalone --nproc-per-node 4 "$prog" --device cpu --epochs 5 --min-accuracy 90 \
      --check-identical --checkpoint "$tmp/digits.ckpt" --comm-iters 2 >"$tmp/out" 2>&1
    rc=$?
    cat "$tmp/out"
    [ $rc -eq 0 ] || fail "exit code $rc (3 means accuracy below 90%)"
    want "mlp_digits: 4 ranks"
    want "epoch  4  loss"
    want "parameters bit-identical on all 4 ranks: yes"
    # 64*128 + 128 + 128*10 + 10 floats = 38,440 bytes of data, plus headers.
    size=$(stat -c %s "$tmp/digits.ckpt" 2>/dev/null || echo 0)
    [ "$size" -gt 38440 ] || fail "checkpoint missing or too small ($size bytes)"
    [ "$(ls "$tmp" | grep -c 'digits.ckpt.tmp')" -eq 0 ] || fail "temporary checkpoint left behind"
    ;;
  spawn_w2)
    "$prog" --spawn 2 --device cpu --epochs 2 --hook bf16 --checkpoint "" --comm-iters 2 \
      >"$tmp/out" 2>&1
    rc=$?
    cat "$tmp/out"
    [ $rc -eq 0 ] || fail "exit code $rc"
    want "mlp_digits: 2 ranks"
    want "epoch  1  loss"
    want "parameters bit-identical on all 2 ranks: yes"
    ;;
  no_comm)
    "$prog" --spawn 2 --device cpu --epochs 1 --no-comm --checkpoint "" >"$tmp/out" 2>&1
    rc=$?
    cat "$tmp/out"
    [ $rc -eq 0 ] || fail "exit code $rc"
    want "NO COMMUNICATION"
    want "no communication"
    ;;
  bad_data)
    "$prog" --spawn 2 --data "$tmp/nope.csv.gz" >"$tmp/out" 2>&1
    rc=$?
    cat "$tmp/out"
    [ $rc -ne 0 ] || fail "a missing data file must fail"
    want "nope.csv.gz"
    ;;
  gpu_w2|gpu_rrun_w4)
    if [ $case = gpu_w2 ]; then
      "$prog" --spawn 2 --device cuda --hook fp16 --epochs 5 --min-accuracy 90 --check-identical \
        --checkpoint "$tmp/digits.ckpt" --comm-iters 2 >"$tmp/out" 2>&1
      rc=$? world=2
    else
      "$rrun" --standalone --nproc-per-node 4 "$prog" --device cuda --epochs 5 --min-accuracy 90 \
        --check-identical --checkpoint "$tmp/digits.ckpt" --comm-iters 2 >"$tmp/out" 2>&1
      rc=$? world=4
    fi
    cat "$tmp/out"
    if [ $rc -eq 2 ]; then
      # No GPU here: the refusal must say why, then this case is skipped (not passed).
      if grep -q -- "--device cuda: no CUDA device is visible" "$tmp/out"; then
        echo "skipped: no CUDA device (the CUDA runtime found none)"; exit 77
      fi
      if grep -q -- "--device cuda: this example was built without CUDA" "$tmp/out"; then
        echo "skipped: no CUDA device (this build has no CUDA and cuBLAS)"; exit 77
      fi
    fi
    [ $rc -eq 0 ] || fail "exit code $rc (3 means accuracy below 90%)"
    want "mlp_digits: $world ranks"
    want "cuBLAS on CUDA device"
    want "epoch  4  loss"
    want "parameters bit-identical on all $world ranks: yes"
    size=$(stat -c %s "$tmp/digits.ckpt" 2>/dev/null || echo 0)
    [ "$size" -gt 38440 ] || fail "checkpoint missing or too small ($size bytes)"
    ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "PASS: $case"
