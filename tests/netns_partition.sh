#!/usr/bin/env bash
# A network partition during a job (issue 26, docs/elastic.md "Why no two groups"): two
# "hosts" (network namespaces A and B) joined through a bridge in a third (the hub); the
# ranks of one job are split between them; mid-loop B's port on the bridge goes down, so A
# and B are cut apart while every rank stays alive (no socket is closed, nothing is
# reset: each side sees the other only fall silent). Every rank revokes and shrinks
# (tests/netns_shrink_rank.c). The rule that decides is the strict majority of the old
# group, whichever side holds rank 0 (the store's host):
#   the larger side   forms exactly one group of exactly its ranks, checked on it (the
#                     member list all-gathered, an exact integer all_reduce, a barrier);
#   the smaller side  forms none: each of its ranks fails with the no-majority error
#                     ("only 2 of the group's 5 ranks can agree", or, from its coordinator,
#                     "... coordinating the shrink, found no majority");
# and no rank takes longer than the bound the agreement promises (RR_TIMEOUT for the loop's
# call, then at most 2 x RR_TIMEOUT per epoch, one epoch per rank) plus CUT_SLACK seconds.
#
#   netns_partition.sh <netns_shrink_rank binary> <world> <ranks on B, comma-separated>
#
# Environment: RR_TIMEOUT (default 1 s), RR_TRANSPORT (default tcp; auto gives shared
# memory between the ranks of one namespace), RR_TEST_SEED (the delay of the cut, 0-300 ms
# after every rank verified an all-reduce; printed). Needs root and `ip netns`; exits 77
# ("skipped: ...") otherwise. Deletes its namespaces on any exit.
set -u
bin=${1:-} world=${2:-} minority=${3:-}
[ -n "$bin" ] && [ -x "$bin" ] && [ -n "$world" ] && [ -n "$minority" ] ||
  { echo "usage: $0 <netns_shrink_rank> <world> <ranks on B, comma-separated>"; exit 2; }
export RR_TIMEOUT=${RR_TIMEOUT:-1} RR_TRANSPORT=${RR_TRANSPORT:-tcp}
CUT_SLACK=${CUT_SLACK:-5}
seed=${RR_TEST_SEED:-$(( $(date +%s%N) / 1000 % 100000 ))}

side=()   # side[i]: A or B
onb=0
for ((i = 0; i < world; i++)); do side[$i]=A; done
IFS=, read -ra bl <<<"$minority"
for r in "${bl[@]}"; do
  [[ $r =~ ^[0-9]+$ ]] && [ "$r" -lt "$world" ] || { echo "bad rank '$r' for B"; exit 2; }
  side[$r]=B
  onb=$((onb + 1))
done
ona=$((world - onb))
[ $((2 * ona)) -gt "$world" ] || { echo "B must be the smaller side (A holds the majority)"; exit 2; }

tag=rrp$$
hub=${tag}hub nsA=${tag}A nsB=${tag}B
net=10.$(( ($$ >> 8) % 200 + 20 )).$(( $$ % 250 + 1 ))
addrA=$net.1 addrB=$net.2
work=$(mktemp -d /tmp/rr-partition.XXXXXX)
pids=()

skip() { echo "skipped: $*"; exit 77; }
fail=0
bad() { echo "  FAIL: $*"; fail=1; }
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for n in "$nsA" "$nsB" "$hub"; do ip netns del "$n" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

[ "$(id -u)" = 0 ] || skip "not root (network namespaces need CAP_SYS_ADMIN)"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
ip netns add "$hub" 2>"$work/err" || skip "ip netns add is not permitted here: $(cat "$work/err")"
ip netns add "$nsA" && ip netns add "$nsB" || skip "ip netns add failed"
ip -n "$hub" link add br0 type bridge 2>/dev/null || skip "no bridge support"
ip -n "$hub" link set br0 up && ip -n "$hub" link set lo up || { echo "hub setup failed"; exit 1; }
for s in A B; do
  ns=${tag}$s
  # Made inside the namespaces (nothing ever sits in the caller's), so the names are free.
  ip link add eth0 netns "$ns" type veth peer name "h$s" netns "$hub" 2>/dev/null ||
    skip "no veth support"
  ip -n "$hub" link set "h$s" master br0 up && ip -n "$ns" link set lo up &&
    ip -n "$ns" addr add "$( [ $s = A ] && echo "$addrA" || echo "$addrB")/24" dev eth0 &&
    ip -n "$ns" link set eth0 up || { echo "setting up namespace $s failed"; exit 1; }
done
ok=0
for _ in $(seq 50); do # the bridge forwards at once (no STP); still, be sure
  if ip netns exec "$nsB" bash -c "exec 3<>/dev/tcp/$addrA/9" 2>&1 | grep -q refused; then ok=1; break; fi
  sleep 0.1
done
[ $ok = 1 ] || { echo "namespace B cannot reach A ($addrA)"; exit 1; }

master=$addrA
[ "${side[0]}" = B ] && master=$addrB
want=""
for ((i = 0; i < world; i++)); do [ "${side[$i]}" = A ] && want="$want $i"; done
delay_ms=$((seed % 300))
echo "world $world: A holds {$want }, B holds {$minority} (rank 0 on ${side[0]}," \
  "the store at $master); RR_TIMEOUT=$RR_TIMEOUT, RR_TRANSPORT=$RR_TRANSPORT; seed $seed:" \
  "cut ${delay_ms} ms after every rank verified an all-reduce"
# Each rank bounded (a hang is reported, not left to CTest): the loop's timeout, n epochs of
# two steps, the slack, and 10 s more to start.
bound=$(awk -v t="$RR_TIMEOUT" -v n="$world" -v s="$CUT_SLACK" 'BEGIN { printf "%.3f", t * (1 + 2 * n) + s }')
# One job; returns 2 when it must be run again: a rank's loop failed before the cut (on a
# loaded machine an all-reduce can stall past RR_TIMEOUT), which is not what is tested.
trial() {
  local i ok out t_end t_fail took
  rm -f "$work"/rank*
  ip -n "$hub" link set hB up || { echo "the link did not come back up"; exit 1; }
  pids=()
  for ((i = 0; i < world; i++)); do
    ip netns exec "${tag}${side[$i]}" env RANK=$i WORLD_SIZE=$world LOCAL_RANK=0 \
      MASTER_ADDR=$master MASTER_PORT=$((29500 + attempt)) RR_DEBUG=WARN \
      timeout -s KILL "$kill_s" "$bin" >"$work/rank$i" 2>&1 &
    pids+=($!)
  done
  ok=0
  for _ in $(seq 600); do
    [ "$(grep -l ' ok ' "$work"/rank* 2>/dev/null | wc -l)" = "$world" ] && { ok=1; break; }
    for i in "${pids[@]}"; do kill -0 "$i" 2>/dev/null || break 2; done # one ended early
    sleep 0.05
  done
  if [ $ok = 0 ]; then
    for ((i = 0; i < world; i++)); do sed "s/^/[rank $i] /" "$work/rank$i"; done
    echo "the ranks did not all verify an all-reduce (within 30 s, or one ended first)"
    for i in "${pids[@]}"; do kill -9 "$i" 2>/dev/null; wait "$i" 2>/dev/null; done
    pids=()
    return 2
  fi
  sleep "$(printf '0.%03d' $delay_ms)"
  t_cut=$(date +%s.%N)
  ip -n "$hub" link set hB down || { echo "the cut failed"; exit 1; }
  echo "cut at $t_cut"
  codes=()
  for ((i = 0; i < world; i++)); do wait "${pids[$i]}"; codes[$i]=$?; done
  pids=()
  for ((i = 0; i < world; i++)); do
    t_fail=$(sed -n 's/^t=\([0-9.]*\) rank [0-9]* failed .*/\1/p' "$work/rank$i")
    if [ -n "$t_fail" ] && awk -v f="$t_fail" -v c="$t_cut" 'BEGIN { exit !(f + 0.002 < c) }'; then
      for ((i = 0; i < world; i++)); do sed "s/^/[rank $i] /" "$work/rank$i"; done
      echo "a loop failed before the cut"
      return 2
    fi
  done
  for ((i = 0; i < world; i++)); do
    sed "s/^/[rank $i] /" "$work/rank$i"
    out=$(grep -E ' (group|noshrink|WRONG) ' "$work/rank$i" | tail -1)
    t_end=$(echo "$out" | sed -n 's/^t=\([0-9.]*\).*/\1/p')
    t_fail=$(sed -n 's/^t=\([0-9.]*\) rank [0-9]* failed .*/\1/p' "$work/rank$i")
    took=$(awk -v a="${t_end:-0}" -v b="$t_cut" 'BEGIN { printf "%.2f", a - b }')
    echo "rank $i (side ${side[$i]}): exit ${codes[$i]}, ${took} s after the cut"
    [ -n "$t_fail" ] || bad "rank $i: its loop did not fail"
    case ${codes[$i]} in
      137) bad "rank $i still ran $kill_s s after it started: HANG"; continue ;;
      4) bad "rank $i: wrong data or a broken group"; continue ;;
    esac
    [ -n "$t_end" ] || { bad "rank $i: no outcome line"; continue; }
    awk -v t="$took" -v b="$bound" 'BEGIN { exit !(t <= b) }' ||
      bad "rank $i: its outcome came ${took} s after the cut, past the bound ${bound} s"
    if [ "${side[$i]}" = A ]; then
      [ "${codes[$i]}" = 0 ] || { bad "rank $i (majority side): exit ${codes[$i]}, want 0 (a group)"; continue; }
      case $out in
        *" group $ona:$want") ;;
        *) bad "rank $i: got '${out#* rank $i }', want the group of exactly$want" ;;
      esac
    else
      [ "${codes[$i]}" = 5 ] || { bad "rank $i (minority side): exit ${codes[$i]}, want 5 (no group)"; continue; }
      case $out in
        *"only $onb of the group's $world ranks can agree, not a strict majority"*) ;;
        *"coordinating the shrink, found no majority"*) ;;
        *) bad "rank $i: want the no-majority error, got '${out#* rank $i }'" ;;
      esac
    fi
  done
  return 0
}

kill_s=$(awk -v b="$bound" 'BEGIN { print int(b) + 40 }')
for attempt in 0 1 2; do
  trial
  r=$?
  [ $r = 2 ] && [ $attempt -lt 2 ] || break
  echo "-- run again (attempt $((attempt + 2)) of 3)"
done
[ $r = 2 ] && bad "three jobs failed before the cut"
if [ $fail = 0 ]; then
  echo "partition: ranks {$want } formed one group of $ona, {$minority} found no majority: passed"
else
  echo "partition: FAILED (seed $seed)"
fi
exit $fail
