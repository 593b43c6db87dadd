#!/usr/bin/env bash
# The training example (examples/mlp_digits.c) end to end, one case per CTest test:
#   test_train.sh RRUN MLP_DIGITS CASE
#   rrun_w4    4 ranks under rrun, 5 epochs: held-out accuracy >= 90%, parameters checked
#              bit-identical on all ranks after every step, checkpoint written by rank 0
#   spawn_w2   2 ranks started by the program itself (--spawn 2), bf16 compression hook
#   no_comm    --no-comm runs and says so in its timing line
#   bad_data   a missing data file fails with a message naming it
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
    "$rrun" --standalone --nproc-per-node 4 "$prog" --epochs 5 --min-accuracy 90 --check-identical \
      --checkpoint "$tmp/digits.ckpt" --comm-iters 2 >"$tmp/out" 2>&1
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
    "$prog" --spawn 2 --epochs 2 --hook bf16 --checkpoint "" --comm-iters 2 >"$tmp/out" 2>&1
    rc=$?
    cat "$tmp/out"
    [ $rc -eq 0 ] || fail "exit code $rc"
    want "mlp_digits: 2 ranks"
    want "epoch  1  loss"
    want "parameters bit-identical on all 2 ranks: yes"
    ;;
  no_comm)
    "$prog" --spawn 2 --epochs 1 --no-comm --checkpoint "" >"$tmp/out" 2>&1
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
  *) echo "unknown case $case"; exit 2 ;;
esac
echo "PASS: $case"
