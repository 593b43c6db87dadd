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
#   elastic_w4  issue 26: an undisturbed run (4 ranks under rrun, 10 epochs, seed 0), then the
#              same with --elastic under rrun --keep-going with one random rank (0 included;
#              RR_TEST_SEED picks it) killed by SIGKILL mid-training: rrun exits 0 reporting
#              the death, the 3 survivors finish with bit-identical parameters (hash
#              all-gather) and a final accuracy within 1 point of the undisturbed run's; the
#              time from the kill to training resuming is printed, split into the kill to the
#              first survivor's failure and that to the resumption. Then the same kill
#              without --elastic: the job must fail (the survivors cannot go on).
#   elastic_w8  the same with 8 ranks (7 survivors).
#   elastic_end_w4  a death after training: 4 ranks, 3 epochs, --end-sleep-ms 1500; one random
#              rank (0 included) killed 0-1000 ms after the last epoch's line, in the end of
#              training (checkpoint, parameter check, timing): with --elastic rrun exits 0,
#              the 3 survivors shrink, write the checkpoint and report bit-identical
#              parameters and an accuracy; without it the job fails.
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
  elastic_w4|elastic_w8)
    world=${case#elastic_w} left=$((${case#elastic_w} - 1))
    common=(--device cpu --epochs 10 --checkpoint "" --comm-iters 0 --step-sleep-ms 5)
    "$rrun" --standalone --nproc-per-node $world "$prog" "${common[@]}" >"$tmp/out" 2>&1 ||
      fail "the undisturbed run failed"
    want "parameters bit-identical on all $world ranks: yes"
    base=$(sed -n 's/^final held-out accuracy \([0-9.]*\)%$/\1/p' "$tmp/out")
    seed=${RR_TEST_SEED:-$(( $(date +%s%N) % 100000 ))}
    victim=$((seed % world)) delay_ms=$((seed / world % 500))
    echo "undisturbed: $base%; seed $seed: rank $victim killed ${delay_ms} ms after epoch 0"
    # kill_one ARGS...: runs the job in the background, kills rank $victim by SIGKILL
    # delay_ms after rank 0 printed epoch 0's line (the job then is mid-training), waits.
    kill_one() {
      # Bounded: a survivor stuck after the kill is a failure, not a hang of the test.
      # Emptied here, before the job starts: its own redirection runs in the background, so
      # the loop below could otherwise read the previous run's "epoch  0" and kill too early.
      : >"$tmp/out"
      timeout 90 "$rrun" --standalone --nproc-per-node $world --keep-going "$prog" "${common[@]}" \
        "$@" >>"$tmp/out" 2>&1 &
      local rp=$! i k pid=
      # Up to 60 s: on a loaded machine the start and the first epoch can take several
      # seconds, and a kill before the group formed tests the rendezvous, not the training.
      for ((i = 0; i < 6000; i++)); do grep -q "^epoch  0" "$tmp/out" && break; sleep 0.01; done
      grep -q "^epoch  0" "$tmp/out" || { wait $rp; fail "epoch 0 never ended (no kill made)"; }
      local rr_pid
      rr_pid=$(pgrep -P $rp -x rrun) || rr_pid=$rp
      for k in $(pgrep -P "$rr_pid"); do
        [ "$(tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | sed -n 's/^RANK=//p')" = $victim ] &&
          pid=$k
      done
      [ -n "$pid" ] || { wait $rp; fail "rank $victim was not found running"; }
      sleep "$(printf '0.%03d' $delay_ms)"
      kill_at=${EPOCHREALTIME:-$(date +%s.%N)} # bash 5: no fork between the time and the kill
      kill -9 "$pid" || { wait $rp; fail "rank $victim ended before the kill"; }
      wait $rp
      rc=$?
    }
    kill_one --elastic
    cat "$tmp/out"
    [ $rc -eq 0 ] || fail "exit code $rc with --elastic"
    want "rrun: rank $victim (local rank $victim, pid [0-9]*) failed: killed by signal SIGKILL"
    want "elastic: world $world -> $left"
    want "parameters bit-identical on all $left ranks: yes"
    acc=$(sed -n 's/^final held-out accuracy \([0-9.]*\)%$/\1/p' "$tmp/out")
    awk -v a="$acc" -v b="$base" 'BEGIN { d = a - b; exit !(d <= 1 && d >= -1) }' ||
      fail "accuracy $acc% is not within 1 point of the undisturbed run's $base%"
    # The new rank 0's resumption, and each survivor's first sight of the failure (its first
    # "shrinking" line, still in the old world).
    resumed=$(sed -n 's/^elastic: world .* resuming .*(unix time \([0-9.]*\)).*/\1/p' "$tmp/out" | head -1)
    seen=$(sed -n "s/^mlp_digits rank [0-9]* (world $world, unix time \\([0-9.]*\\)).*shrinking\$/\\1/p" "$tmp/out" | sort -n)
    [ -n "$resumed" ] && [ -n "$seen" ] || fail "no resumption or failure time printed"
    awk -v r="$resumed" -v k="$kill_at" -v f="$(echo "$seen" | head -1)" \
      -v l="$(echo "$seen" | tail -1)" -v n="$(echo "$seen" | wc -l)" \
      'BEGIN { printf "elastic: accuracy %s%% (undisturbed %s%%); kill to resume %.1f ms: kill to the first survivor seeing the failure %.1f ms (the last of %d: %.1f ms), then to resumed %.1f ms\n", "'"$acc"'", "'"$base"'", (r - k) * 1e3, (f - k) * 1e3, n, (l - k) * 1e3, (r - f) * 1e3 }'
    # Without --elastic the same kill ends the job: the survivors exit non-zero.
    kill_one
    [ $rc -ne 0 ] || fail "without --elastic the job survived the kill"
    want "training failed"
    echo "without --elastic: exit code $rc, as it must"
    ;;
  elastic_end_w4)
    world=4
    seed=${RR_TEST_SEED:-$(( $(date +%s%N) % 100000 ))}
    # Up to 499 ms into the 1500 ms end sleep: the second left covers this script's own steps
    # (polls, pgrep, reading environ) on a loaded machine under a sanitizer.
    victim=$((seed % world)) delay_ms=$((seed / world % 500))
    echo "seed $seed: rank $victim killed ${delay_ms} ms after the last epoch"
    end_kill() {
      : >"$tmp/out"
      rm -f "$tmp/end.ckpt"
      timeout 90 "$rrun" --standalone --nproc-per-node $world --keep-going "$prog" --device cpu \
        --epochs 3 --checkpoint "$tmp/end.ckpt" --comm-iters 5 --end-sleep-ms 1500 "$@" \
        >>"$tmp/out" 2>&1 &
      local rp=$! i k pid=
      for ((i = 0; i < 6000; i++)); do grep -q "^epoch  2" "$tmp/out" && break; sleep 0.01; done
      grep -q "^epoch  2" "$tmp/out" || { wait $rp; fail "the last epoch never ended (no kill made)"; }
      local rr_pid
      rr_pid=$(pgrep -P $rp -x rrun) || rr_pid=$rp
      for k in $(pgrep -P "$rr_pid"); do
        [ "$(tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | sed -n 's/^RANK=//p')" = $victim ] &&
          pid=$k
      done
      [ -n "$pid" ] || { wait $rp; fail "rank $victim was not found running"; }
      sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
      kill -9 "$pid" || { wait $rp; fail "rank $victim ended before the kill"; }
      wait $rp
      rc=$?
    }
    end_kill --elastic
    cat "$tmp/out"
    [ $rc -eq 0 ] || fail "exit code $rc with --elastic"
    want "elastic: world 4 -> 3"
    want "parameters bit-identical on all 3 ranks: yes"
    want "checkpoint: $tmp/end.ckpt"
    [ -s "$tmp/end.ckpt" ] || fail "no checkpoint written"
    acc=$(sed -n 's/^final held-out accuracy \([0-9.]*\)%$/\1/p' "$tmp/out")
    awk -v a="$acc" 'BEGIN { exit !(a >= 80) }' || fail "final accuracy '$acc' after the shrink"
    end_kill
    [ $rc -ne 0 ] || fail "without --elastic the job survived a death after training"
    want "the end of training failed"
    echo "without --elastic: exit code $rc, as it must"
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
