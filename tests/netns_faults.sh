#!/usr/bin/env bash
# Network faults between "hosts": three network namespaces (one rank each) joined by veth
# pairs to a bridge in a fourth, the job driven by tests/netns_fault_rank (every result
# verified; exit 3 = the library reported an error, 4 = wrong data, never allowed).
#
#   tests/netns_faults.sh <netns_fault_rank binary> [cut|slow|drain|kill9|all]...  (default all)
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
# kill9 one rank is killed with SIGKILL while the ranks loop over verified all-reduces
#       (RR_TIMEOUT 60, so only the dead rank's closed connections can end the survivors'
#       calls in time): each rank position in turn, with a ring-sized (4 MiB) and a
#       recursive-doubling-sized (16 KiB) all-reduce, 0-300 ms after every rank verified a
#       round. Each survivor must exit 3 (never 4: wrong data; never a signal: a crash)
#       with RR_EPEER from an all_reduce whose message names the dead rank, says it is gone
#       and blames no survivor ("lost rank S:"), within KILL_BOUND s of the kill; its
#       rr_destroy_process_group must return an error within 2 s. The victim must have died
#       of the SIGKILL (137), and nobody may still run KILL_BOUND + 30 s after the kill.
#       KILL_BOUND (default 5) may be fractional.
# drain rank 2's link slowed to 1 Mbit/s (tbf); rank 2 sends 128 KiB to each of the others,
#       destroys its group and exits at once, its bytes (and its goodbye) still in its
#       sockets (about 2 s of them). Ranks 0 and 1 must receive every byte, verified (exit 0):
#       its process being gone does not make it lost while its sockets still deliver (a
#       rank that finished and exited was reported lost by peers still receiving its last
#       step over a slow link, in the slow case of one CI run).
#
# Needs root and `ip netns`; exits 77 (skipped) when namespaces cannot be made. Cleans up
# its namespaces on exit.
set -u
rank_bin=${1:-}
[ -n "$rank_bin" ] && [ -x "$rank_bin" ] || { echo "usage: $0 <netns_fault_rank> [cut|slow|drain|kill9|all]..."; exit 2; }
shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(all)
for c in "${cases[@]}"; do
  case $c in cut|slow|drain|kill9|all) ;; *) echo "unknown case $c"; exit 2 ;; esac
done
rank_bin=$(cd "$(dirname "$rank_bin")" && pwd)/$(basename "$rank_bin")
CUT_SLACK=${CUT_SLACK:-3}
KILL_BOUND=${KILL_BOUND:-5}
[[ $KILL_BOUND =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "KILL_BOUND must be a number of seconds"; exit 2; }
KILL_WAIT=$(( ${KILL_BOUND%.*} + 30 ))   # past this a survivor is hung
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
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
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

# start_job <iterations> <count> <timeout_s> [all_reduce]: ranks in the background, output
# in $work/rankN. `ip netns exec` and env exec, so ${pids[i]} is rank i's own process.
start_job() {
  pids=()
  local port=$(( 20000 + RANDOM % 20000 ))
  for i in 0 1 2; do
    ip netns exec "${ns[$i]}" env RANK=$i WORLD_SIZE=3 LOCAL_RANK=0 MASTER_ADDR="$net.1" \
      MASTER_PORT=$port RR_TIMEOUT="$3" RR_DEBUG=WARN "$rank_bin" "$1" "$2" ${4:+"$4"} \
      >"$work/rank$i" 2>&1 &
    pids+=($!)
  done
}

# wait_ok <seconds>: 0 once every rank has printed a verified round ("ok").
wait_ok() {
  local i
  for i in $(seq $(( $1 * 20 ))); do
    [ "$(grep -l ' ok ' "$work"/rank* 2>/dev/null | wc -l)" = 3 ] && return 0
    sleep 0.05
  done
  return 1
}

# wait_job <seconds>: 0 when every rank exited by then; exit codes in codes[].
wait_job() {
  local end=$(( $(date +%s) + $1 )) i
  codes=()
  for i in 0 1 2; do
    while kill -0 "${pids[$i]}" 2>/dev/null && [ "$(date +%s)" -lt $end ]; do sleep 0.05; done
    if kill -0 "${pids[$i]}" 2>/dev/null; then codes[$i]=hung; else wait "${pids[$i]}" 2>/dev/null; codes[$i]=$?; fi
  done
}

# reap_job: kill whatever of the last job still runs (a hung rank) before the next one.
reap_job() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
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
  reap_job
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

test_drain() {
  if ! ip netns exec "${ns[2]}" tc qdisc add dev "${tag}v2" root tbf rate 1mbit burst 16kb \
      latency 50ms 2>/dev/null; then
    echo "== drain: no tbf qdisc in this kernel: skipped"; return
  fi
  echo "== drain: rank 2 (link at 1 Mbit/s) sends 128 KiB to each rank, destroys its group, exits"
  start_job 1 32768 30 send_exit
  wait_job 60
  for i in 0 1 2; do
    echo "rank $i: exit ${codes[$i]}: $(grep -E 'ERROR|WRONG|ok|sent' "$work/rank$i" | tail -1)"
    [ "${codes[$i]}" = 0 ] || { echo "  want exit 0 (every byte received and verified)"; tail -5 "$work/rank$i"; fail=1; }
  done
  grep -q ' sent, exiting' "$work/rank2" || { echo "  rank 2 never finished its sends"; fail=1; }
  reap_job
  ip netns exec "${ns[2]}" tc qdisc del dev "${tag}v2" root 2>/dev/null
}

# One kill9 trial: kill9_trial <victim> <count>.
kill9_trial() {
  local victim=$1 count=$2 i
  echo "-- kill9: rank $victim killed mid all-reduce of $count x int32"
  start_job 100000000 "$count" 60 all_reduce
  if ! wait_ok 30; then
    echo "  the ranks did not all verify a round within 30 s"; fail=1
    for i in 0 1 2; do tail -3 "$work/rank$i"; done
    reap_job
    return
  fi
  # The pid must be the rank itself, not a wrapper that would survive it.
  if [ "$(cat "/proc/${pids[$victim]}/comm" 2>/dev/null)" != "$(basename "$rank_bin" | cut -c1-15)" ]; then
    echo "  pid ${pids[$victim]} is not the rank program: $(cat "/proc/${pids[$victim]}/comm" 2>/dev/null)"
    fail=1
  fi
  sleep "0.$(printf %03d $(( RANDOM % 300 )))"
  local t_kill
  t_kill=$(now)
  kill -9 "${pids[$victim]}"
  wait_job "$KILL_WAIT" 2>/dev/null   # no "Killed" job notice
  for i in 0 1 2; do
    if [ "$i" = "$victim" ]; then
      echo "rank $i (victim): exit ${codes[$i]}"
      [ "${codes[$i]}" = 137 ] || { echo "  the victim did not die of SIGKILL"; fail=1; }
      continue
    fi
    local err t_end took msg dline dst dsecs s
    err=$(grep ' ERROR ' "$work/rank$i" | tail -1)
    t_end=$(echo "$err" | sed -n 's/^t=\([0-9.]*\).*/\1/p')
    took=?
    [ -n "$t_end" ] && took=$(awk -v a="$t_end" -v b="$t_kill" 'BEGIN{printf "%.3f", a-b}')
    msg=${err#* ERROR }
    dline=$(grep ' destroy ' "$work/rank$i" | tail -1)
    dst=$(echo "$dline" | awk '{print $5}')
    dsecs=$(echo "$dline" | awk '{print $6}')
    echo "rank $i: exit ${codes[$i]}, ${took} s after the kill, destroy ${dst:-?} in ${dsecs:-?} s: $msg"
    case ${codes[$i]} in
      3) ;;
      4) echo "  WRONG DATA: $(grep WRONG "$work/rank$i")"; fail=1; continue ;;
      hung) echo "  still running $KILL_WAIT s after the kill: HANG"; fail=1; continue ;;
      0) echo "  finished as if nothing happened"; fail=1; continue ;;
      *) echo "  unexpected exit (a crash?)"; tail -5 "$work/rank$i"; fail=1; continue ;;
    esac
    [ -n "$t_end" ] || { echo "  no ERROR line"; tail -5 "$work/rank$i"; fail=1; continue; }
    case $msg in RR_EPEER:*) ;; *) echo "  want RR_EPEER"; fail=1 ;; esac
    case $msg in *all_reduce*) ;; *) echo "  the failing call is not an all_reduce"; fail=1 ;; esac
    case $msg in *"rank $victim"*) ;; *) echo "  the message does not name rank $victim"; fail=1 ;; esac
    case $msg in *"lost rank"*|*closed*|*reset*) ;; *) echo "  the message does not say a peer is gone"; fail=1 ;; esac
    for s in 0 1 2; do
      [ "$s" = "$victim" ] && continue
      case $msg in *"lost rank $s:"*) echo "  blames survivor rank $s"; fail=1 ;; esac
    done
    if awk -v t="$took" -v b="$KILL_BOUND" 'BEGIN{exit !(t > b || t < -0.01)}'; then
      echo "  reported ${took} s after the kill: outside [0, ${KILL_BOUND}] s"; fail=1
    fi
    if [ -z "$dst" ] || [ "$dst" = RR_OK ] || awk -v t="$dsecs" 'BEGIN{exit !(t >= 2)}'; then
      echo "  rr_destroy_process_group: want an error within 2 s"; fail=1
    fi
  done
  reap_job
  kill9_done=$((kill9_done + 1))
}

test_kill9() {
  echo "== kill9: one rank SIGKILLed mid all-reduce (RR_TIMEOUT=60, bound ${KILL_BOUND} s)"
  local v c
  kill9_done=0
  for c in 1048576 4096; do
    for v in 0 1 2; do kill9_trial "$v" "$c"; done
  done
  # A trial cut short by a shell error must not pass silently.
  [ "$kill9_done" = 6 ] || { echo "kill9: only $kill9_done of 6 trials ran to the end"; fail=1; }
}

# A shell error (e.g. bad arithmetic) abandons this whole loop and carries on below it:
# count the cases that ran to their end, so that cannot pass.
cases_done=0
for c in "${cases[@]}"; do
  case $c in
    cut) test_cut ;;
    slow) test_slow ;;
    drain) test_drain ;;
    kill9) test_kill9 ;;
    all) test_cut; test_slow; test_drain; test_kill9 ;;
  esac
  cases_done=$((cases_done + 1))
done
[ "$cases_done" = ${#cases[@]} ] || { echo "netns_faults: a case was cut short by a shell error"; fail=1; }
[ $fail = 0 ] && echo "netns_faults: passed" || echo "netns_faults: FAILED"
exit $fail
