#!/usr/bin/env bash
# Growing back in the training example (issue 26 parts 2 and 3, docs/elastic.md "Growing
# back"): test_grow_train.sh RRUN MLP_DIGITS CASE
# CASE hand:
#   An undisturbed run (4 ranks under rrun, 10 epochs, seed 0) for the accuracy bar. Then the
#   same under rrun --keep-going with --elastic, RR_GROW_ADDR and a job token: a random rank
#   (RR_TEST_SEED picks it, 0 included) killed by SIGKILL after epoch 0; once the survivors
#   have shrunk to 3, a newcomer process (RR_GROW_JOIN=1, the job's token, not started by
#   rrun) joins them at a step boundary. rrun exits 0, the newcomer exits 0 having joined as
#   rank 3 of 4, the 4 ranks end with bit-identical parameters (hash all-gather), and the
#   final accuracy is within 1 point of the undisturbed run's.
# CASE replace: the same kill under rrun --keep-going --replace 1 (rrun picks RR_GROW_ADDR and
#   makes the token): rrun starts the replacement itself, which joins; rrun exits 0 and
#   reports both; 4 ranks end bit-identical. Then --replace without --keep-going is refused.
set -uo pipefail
rrun=$1 prog=$2 case=$3
tmp=$(mktemp -d /tmp/rr_grow_train.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export RR_TIMEOUT=${RR_TIMEOUT:-10} RR_GRACE_PERIOD=${RR_GRACE_PERIOD:-2}
fail() {
  echo "FAIL: $*"
  echo "--- job:"; cat "$tmp/out"
  echo "--- newcomer:"; cat "$tmp/new" 2>/dev/null
  exit 1
}
want() { grep -q -- "$1" "${2:-$tmp/out}" || fail "output lacks '$1'"; }

common=(--device cpu --epochs 10 --checkpoint "" --comm-iters 0 --step-sleep-ms 5)
"$rrun" --standalone --nproc-per-node 4 "$prog" "${common[@]}" >"$tmp/out" 2>&1 ||
  fail "the undisturbed run failed"
base=$(sed -n 's/^final held-out accuracy \([0-9.]*\)%$/\1/p' "$tmp/out")

if [ "$case" = replace ]; then
  seed=${RR_TEST_SEED:-$(($(date +%s%N) % 100000))}
  victim=$((seed % 4))
  echo "undisturbed: $base%; seed $seed: rank $victim killed after epoch 0; rrun replaces it"
  : >"$tmp/out"
  timeout 90 "$rrun" --standalone --nproc-per-node 4 --keep-going --replace 1 "$prog" \
    "${common[@]}" --elastic >>"$tmp/out" 2>&1 &
  rp=$!
  for ((i = 0; i < 6000; i++)); do grep -q "^epoch  0" "$tmp/out" && break; sleep 0.01; done
  grep -q "^epoch  0" "$tmp/out" || { wait $rp; fail "epoch 0 never ended (no kill made)"; }
  rr_pid=$(pgrep -P $rp -x rrun) || rr_pid=$rp
  pid=
  for k in $(pgrep -P "$rr_pid"); do
    [ "$(tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | sed -n 's/^RANK=//p')" = $victim ] && pid=$k
  done
  [ -n "$pid" ] || { wait $rp; fail "rank $victim was not found running"; }
  kill -9 "$pid" || { wait $rp; fail "rank $victim ended before the kill"; }
  wait $rp
  rc=$?
  cat "$tmp/out"
  [ $rc -eq 0 ] || fail "rrun exit code $rc"
  want "rrun: rank $victim (local rank $victim, pid [0-9]*) failed: killed by signal SIGKILL"
  want "rrun: --replace: starting a replacement for rank $victim"
  want "elastic: world 4 -> 3"
  want "elastic: world 3 -> 4 (a newcomer joined)"
  want "joined as rank 3 of 4"
  want "parameters bit-identical on all 4 ranks: yes"
  want "summary: 1 of 5 worker(s) failed"  # the replacement counts as a fifth
  "$rrun" --standalone --nproc-per-node 2 --replace 1 true >"$tmp/out" 2>&1
  [ $? -eq 2 ] || fail "--replace without --keep-going was not refused"
  want "--replace needs --keep-going"
  echo "replace: rrun started the replacement and it joined"
  exit 0
fi

# The growth's port: below the ephemeral range, one nobody answers on now.
for ((i = 0; i < 50; i++)); do
  port=$((20000 + RANDOM % 12000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
done
export RR_GROW_ADDR=127.0.0.1:$port
export RR_JOB_TOKEN=grow-train-$RANDOM$RANDOM
seed=${RR_TEST_SEED:-$(($(date +%s%N) % 100000))}
victim=$((seed % 4))
echo "undisturbed: $base%; seed $seed: rank $victim killed after epoch 0; growing at $RR_GROW_ADDR"

: >"$tmp/out"
timeout 90 "$rrun" --standalone --nproc-per-node 4 --keep-going "$prog" "${common[@]}" \
  --elastic >>"$tmp/out" 2>&1 &
rp=$!
for ((i = 0; i < 6000; i++)); do grep -q "^epoch  0" "$tmp/out" && break; sleep 0.01; done
grep -q "^epoch  0" "$tmp/out" || { wait $rp; fail "epoch 0 never ended (no kill made)"; }
rr_pid=$(pgrep -P $rp -x rrun) || rr_pid=$rp
pid=
for k in $(pgrep -P "$rr_pid"); do
  [ "$(tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | sed -n 's/^RANK=//p')" = $victim ] && pid=$k
done
[ -n "$pid" ] || { wait $rp; fail "rank $victim was not found running"; }
kill -9 "$pid" || { wait $rp; fail "rank $victim ended before the kill"; }
for ((i = 0; i < 3000; i++)); do grep -q "elastic: world 4 -> 3" "$tmp/out" && break; sleep 0.01; done
grep -q "elastic: world 4 -> 3" "$tmp/out" || { wait $rp; fail "the survivors never shrank"; }
# The newcomer: a fresh process with the job's token (env), not a child of rrun.
RR_GROW_JOIN=1 timeout 90 "$prog" "${common[@]}" --elastic >"$tmp/new" 2>&1
nrc=$?
wait $rp
rc=$?
cat "$tmp/out"
echo "--- newcomer (exit $nrc):"
cat "$tmp/new"
[ $rc -eq 0 ] || fail "rrun exit code $rc"
[ $nrc -eq 0 ] || fail "newcomer exit code $nrc"
want "rrun: rank $victim (local rank $victim, pid [0-9]*) failed: killed by signal SIGKILL"
want "elastic: world 4 -> 3"
want "elastic: world 3 -> 4 (a newcomer joined)"
want "joined as rank 3 of 4" "$tmp/new"
want "parameters bit-identical on all 4 ranks: yes"
acc=$(sed -n 's/^final held-out accuracy \([0-9.]*\)%$/\1/p' "$tmp/out")
awk -v a="$acc" -v b="$base" 'BEGIN { d = a - b; exit !(d <= 1 && d >= -1) }' ||
  fail "accuracy $acc% is not within 1 point of the undisturbed run's $base%"
echo "grow: accuracy $acc% (undisturbed $base%)"
