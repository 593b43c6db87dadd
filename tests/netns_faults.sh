#!/usr/bin/env bash
# Network faults between "hosts": three network namespaces (one rank each) joined by veth
# pairs to a bridge in a fourth, the job driven by tests/netns_fault_rank (every result
# verified; exit 3 = the library reported an error, 4 = wrong data, never allowed).
#
#   tests/netns_faults.sh <netns_fault_rank binary> [cut|slow|all]     (default all)
#
# cut   rank 2's link goes down (ip link set ... down) while the job runs all-reduces in a
#       loop. Every rank must end with an error (exit 3) or, had it finished first, correct
#       results (exit 0) - never wrong data (exit 4) - and within RR_TIMEOUT (5 s) +
#       CUT_SLACK of the cut, not hang.
# slow  every link slowed and lossy: tc netem delay 50ms loss 5% where the kernel has netem;
#       otherwise (no sch_netem, as in some VMs) a tbf rate limit of 4 Mbit/s with 50 ms of
#       queueing, plus 5% random loss through iptables' statistic match when iptables is
#       installed (the script says which it used). Every rank must finish every round with
#       correct results within SLOW_BOUND seconds (RR_TIMEOUT 120).
#
# Needs root and `ip netns`; exits 77 (skipped) when namespaces cannot be made. Cleans up
# its namespaces on exit.
set -u
rank_bin=${1:-}
what=${2:-all}
[ -n "$rank_bin" ] && [ -x "$rank_bin" ] || { echo "usage: $0 <netns_fault_rank> [cut|slow|all]"; exit 2; }
rank_bin=$(cd "$(dirname "$rank_bin")" && pwd)/$(basename "$rank_bin")
CUT_SLACK=${CUT_SLACK:-3}
SLOW_BOUND=${SLOW_BOUND:-240}
tag=rr$$
ns=("${tag}n0" "${tag}n1" "${tag}n2")
hub=${tag}hub
net=10.$(( ($$ >> 8) % 200 + 20 )).$(( $$ % 250 + 1 ))
work=$(mktemp -d /tmp/rr-netns.XXXXXX)
pids=()

skip() { echo "netns_faults: SKIPPED: $*"; exit 77; }
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for n in "${ns[@]}" "$hub"; do ip netns del "$n" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || skip "needs root for ip netns"
command -v ip >/dev/null || skip "no ip(8)"
ip netns add "$hub" 2>/dev/null || skip "ip netns add is not permitted here"
ip -n "$hub" link add br0 type bridge 2>/dev/null || skip "no bridge support"
ip -n "$hub" link set br0 up
ip -n "$hub" link set lo up
for i in 0 1 2; do
  ip netns add "${ns[$i]}" || skip "ip netns add failed"
  ip link add "${tag}v$i" type veth peer name "${tag}h$i" || skip "no veth support"
  ip link set "${tag}v$i" netns "${ns[$i]}"
  ip link set "${tag}h$i" netns "$hub"
  ip -n "$hub" link set "${tag}h$i" master br0 up
  ip -n "${ns[$i]}" link set lo up
  ip -n "${ns[$i]}" addr add "$net.$((i + 1))/24" dev "${tag}v$i"
  ip -n "${ns[$i]}" link set "${tag}v$i" up
done
# The bridge needs a moment to forward (no STP: it forwards at once, but be sure).
for i in 1 2; do
  ok=0
  for _ in $(seq 50); do
    if ip netns exec "${ns[$i]}" bash -c "exec 3<>/dev/tcp/$net.1/9" 2>&1 | grep -q refused; then ok=1; break; fi
    sleep 0.1
  done
  [ $ok = 1 ] || { echo "netns_faults: namespace ${ns[$i]} cannot reach $net.1"; exit 1; }
done

now() { date +%s.%N; }

# start_job <iterations> <count> <timeout_s>: ranks in the background, output in $work/rankN.
start_job() {
  pids=()
  local port=$(( 20000 + RANDOM % 20000 ))
  for i in 0 1 2; do
    ip netns exec "${ns[$i]}" env RANK=$i WORLD_SIZE=3 LOCAL_RANK=0 MASTER_ADDR="$net.1" \
      MASTER_PORT=$port RR_TIMEOUT="$3" RR_DEBUG=WARN "$rank_bin" "$1" "$2" \
      >"$work/rank$i" 2>&1 &
    pids+=($!)
  done
}

# wait_job <seconds>: 0 when every rank exited by then; exit codes in codes[].
wait_job() {
  local end=$(( $(date +%s) + $1 )) i
  codes=()
  for i in 0 1 2; do
    while kill -0 "${pids[$i]}" 2>/dev/null && [ "$(date +%s)" -lt $end ]; do sleep 0.05; done
    if kill -0 "${pids[$i]}" 2>/dev/null; then codes[$i]=hung; else wait "${pids[$i]}"; codes[$i]=$?; fi
  done
}

fail=0
test_cut() {
  echo "== cut: rank 2's link goes down mid all-reduce (RR_TIMEOUT=5)"
  start_job 1000000 16384 5
  # Let it run (every rank must have verified rounds) before the cut.
  for _ in $(seq 200); do
    [ "$(grep -l ' ok ' "$work"/rank* 2>/dev/null | wc -l)" = 3 ] && break
    sleep 0.05
  done
  sleep 0.5
  local t_cut
  t_cut=$(now)
  ip -n "${ns[2]}" link set "${tag}v2" down
  wait_job $(( 5 + CUT_SLACK + 30 ))
  for i in 0 1 2; do
    local last t_end took
    last=$(grep -E 'ERROR|WRONG|done' "$work/rank$i" | tail -1)
    t_end=$(echo "$last" | sed -n 's/^t=\([0-9.]*\).*/\1/p')
    took=$(awk -v a="${t_end:-0}" -v b="$t_cut" 'BEGIN{printf "%.2f", a-b}')
    echo "rank $i: exit ${codes[$i]}, ${took} s after the cut: ${last#* }"
    case ${codes[$i]} in
      3|0) ;;
      4) echo "  WRONG DATA"; fail=1 ;;
      hung) echo "  still running $(( 5 + CUT_SLACK + 30 )) s after the cut: HANG"; fail=1 ;;
      *) echo "  unexpected exit"; tail -5 "$work/rank$i"; fail=1 ;;
    esac
    if [ -n "$t_end" ] && awk -v t="$took" -v b="$((5 + CUT_SLACK))" 'BEGIN{exit !(t > b)}'; then
      echo "  reported after ${took} s: past the deadline (5 s) + ${CUT_SLACK} s"; fail=1
    fi
    if [ "${codes[$i]}" = 3 ] && ! grep -qE 'timed out|rank [0-9]' "$work/rank$i"; then
      echo "  the error names no rank and no timeout"; fail=1
    fi
  done
  ip -n "${ns[2]}" link set "${tag}v2" up
}

test_slow() {
  local how=""
  for i in 0 1 2; do
    if ip netns exec "${ns[$i]}" tc qdisc add dev "${tag}v$i" root netem delay 50ms loss 5% 2>/dev/null; then
      how="netem delay 50ms loss 5%"
    else
      ip netns exec "${ns[$i]}" tc qdisc add dev "${tag}v$i" root tbf rate 4mbit burst 32kb latency 50ms \
        2>/dev/null && how="tbf 4 Mbit/s, 50 ms queue (no netem in this kernel)"
      if command -v iptables >/dev/null &&
         ip netns exec "${ns[$i]}" iptables -A OUTPUT -o "${tag}v$i" -m statistic --mode random \
           --probability 0.05 -j DROP 2>/dev/null; then
        how="$how + iptables 5% random loss"
      else
        how="$how; loss NOT emulated (no netem, no iptables)"
      fi
    fi
  done
  [ -n "$how" ] || { echo "== slow: no qdisc available: skipped"; return; }
  echo "== slow: $how (RR_TIMEOUT=120)"
  local t0
  t0=$(now)
  start_job 20 16384 120
  wait_job "$SLOW_BOUND"
  local took
  took=$(awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}')
  for i in 0 1 2; do
    echo "rank $i: exit ${codes[$i]}: $(tail -1 "$work/rank$i")"
    [ "${codes[$i]}" = 0 ] || { echo "  want every round verified (exit 0)"; tail -5 "$work/rank$i"; fail=1; }
  done
  echo "slow: 20 rounds of all_reduce + broadcast + all_gather of 64 KiB in ${took} s"
  if command -v iptables >/dev/null; then
    local dropped=0 d
    for i in 0 1 2; do
      d=$(ip netns exec "${ns[$i]}" iptables -L OUTPUT -v -n -x 2>/dev/null | awk '/DROP/ {s += $1} END {print s + 0}')
      dropped=$((dropped + d))
    done
    echo "slow: $dropped packets dropped by the loss rule"
  fi
  for i in 0 1 2; do
    ip netns exec "${ns[$i]}" tc qdisc del dev "${tag}v$i" root 2>/dev/null
    command -v iptables >/dev/null && ip netns exec "${ns[$i]}" iptables -F OUTPUT 2>/dev/null
  done
}

case $what in
  cut) test_cut ;;
  slow) test_slow ;;
  all) test_cut; test_slow ;;
  *) echo "unknown case $what"; exit 2 ;;
esac
[ $fail = 0 ] && echo "netns_faults: passed" || echo "netns_faults: FAILED"
exit $fail
