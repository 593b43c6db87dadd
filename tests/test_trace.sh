#!/usr/bin/env bash
# RR_TRACE=1 on the docs/ring.md example: 6 lines per rank, the exact chunk routing and the
# values of one step, and the right sums everywhere. usage: test_trace.sh RRUN RING_DEMO
set -euo pipefail
rrun=$1 demo=$2
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
RR_ALGO=ring RR_TRACE=1 "$rrun" --standalone --nproc-per-node 4 "$demo" >"$out" 2>"$err"
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }
[ "$(grep -c '^rank [0-3]: 60 64 68 72 76 80 84 88$' "$out")" = 4 ] || fail "wrong sums"
for r in 0 1 2 3; do
  n=$(grep -c "^\[rank $r\] all_reduce #0 " "$err" || true)
  [ "$n" = 6 ] || fail "rank $r printed $n trace lines, want 6"
done
grep -qxF '[rank 1] all_reduce #0 reduce-scatter step 1/3: sent c1 (2) to 2; got c0 (2) from 0: {10 11} sum {0 1} = {10 12}' "$err" || fail "step 1 of rank 1"
grep -qxF '[rank 2] all_reduce #0 reduce-scatter step 3/3: sent c0 (2) to 3; got c3 (2) from 1: {26 27} sum {58 61} = {84 88}' "$err" || fail "step 3 of rank 2"
grep -qxF '[rank 0] all_reduce #0 all-gather step 3/3: sent c3 (2) to 1; got c2 (2) from 3: {76 80}' "$err" || fail "all-gather of rank 0"
# Recursive doubling traces its rounds too.
RR_TRACE=1 "$rrun" --standalone --nproc-per-node 4 "$demo" >"$out" 2>"$err"
grep -qxF '[rank 0] all_reduce #0 recursive doubling round 2 with rank 2: {10 12 14 16 18 20 22 24} sum {50 52 54 56 58 60 62 64} = {60 64 68 72 76 80 84 88}' "$err" || fail "recursive doubling round"
echo "trace ok"
