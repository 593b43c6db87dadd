#!/usr/bin/env bash
# Several hosts on one machine: each rank runs in its own network namespace, joined to the
# others by veth pairs to two bridges that live in a "switch" namespace (nothing is added to
# the caller's namespace):
#
#   rank i namespace:  rra  10.77.0.(i+1)/24  --veth--  a<i> on br0  (switch namespace)
#                      rrb  10.78.0.(i+1)/24  --veth--  b<i> on br1
#
# with a 1 ms netem delay on rra when the kernel has netem. MASTER_ADDR is rank 0's rra
# address. tests/netns_rank.c checks the collectives' results and, from its RR_DEBUG=INFO
# log, that its data sockets listened on its own 10.77/10.78 address in its own namespace;
# this script checks that the host identities of the ranks all differ.
#
#   netns.sh <netns_rank binary> <ring|rd|ifname> [nranks]
#
# ring / rd: RR_ALGO for all-reduce, data on rra (the master's subnet, found by the hint).
# ifname:    RR_SOCKET_IFNAME==rrb, so data goes on 10.78.0.x while the store is on rra.
# ib:        RR_TRANSPORT=auto with RR_IB_LIBRARY (the caller's: tests/ib.cmake sets the fake,
#            whose wire is a UNIX socket directory all namespaces see): every pair must go
#            over ib, the bootstrap still over rra.
# Exit 77 ("skipped: ...") when not root or namespaces cannot be made here.
set -u

bin=${1:?usage: netns.sh <netns_rank> <ring|rd|ifname> [nranks]}
mode=${2:?usage: netns.sh <netns_rank> <ring|rd|ifname> [nranks]}
n=${3:-3}

skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || skip "not root (network namespaces need CAP_SYS_ADMIN)"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
[ -x "$bin" ] || fail "no rank program $bin"

p="rr$$"           # unique per run: parallel runs never share a namespace name
sw="${p}sw"
dir=$(mktemp -d "/tmp/rr-netns-$$.XXXXXX")
pids=()
made=()

cleanup() {
  local pid ns
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if ! ip netns add "$sw" 2>"$dir/err"; then
  skip "ip netns add failed: $(cat "$dir/err")"
fi
made+=("$sw")
ip -n "$sw" link set lo up || fail "switch lo"
for br in br0 br1; do
  ip -n "$sw" link add "$br" type bridge || fail "bridge $br"
  ip -n "$sw" link set "$br" up || fail "bridge $br up"
done

netem=0
for ((i = 0; i < n; i++)); do
  ns="${p}n$i"
  ip netns add "$ns" || fail "ip netns add $ns"
  made+=("$ns")
  ip -n "$ns" link set lo up || fail "lo up in $ns"
  # rrb first: without the master's-subnet rule the first non-loopback interface would win,
  # so data on rra shows that the rule (not the order) chose it.
  ip link add rrb netns "$ns" type veth peer name "b$i" netns "$sw" || fail "veth rrb of $ns"
  ip link add rra netns "$ns" type veth peer name "a$i" netns "$sw" || fail "veth rra of $ns"
  ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev rra || fail "address on rra"
  ip -n "$ns" addr add "10.78.0.$((i + 1))/24" dev rrb || fail "address on rrb"
  ip -n "$ns" link set rra up && ip -n "$ns" link set rrb up || fail "veths up in $ns"
  ip -n "$sw" link set "a$i" master br0 up && ip -n "$sw" link set "b$i" master br1 up ||
    fail "bridge ports of $ns"
  if tc -n "$ns" qdisc add dev rra root netem delay 1ms 2>/dev/null; then netem=$((netem + 1)); fi
done
[ "$netem" = "$n" ] && echo "netem: 1 ms delay on every rra" || echo "netem: not available, no delay"

# The bridges forward at once (no STP); still, wait until rank 0 is reachable on both.
if command -v ping >/dev/null 2>&1; then
  for ((i = 1; i < n; i++)); do
    for a in 10.77.0.1 10.78.0.1; do
      ok=0
      for t in 1 2 3 4 5 6 7 8 9 10; do
        if ip netns exec "${p}n$i" ping -c1 -W1 "$a" >/dev/null 2>&1; then ok=1; break; fi
      done
      [ "$ok" = 1 ] || fail "namespace $i cannot reach $a"
    done
  done
fi

prefix=10.77.0. dataif=rra algo=auto spec=
case "$mode" in
  ring) algo=ring ;;
  rd) algo=rd ;;
  ifname) prefix=10.78.0. dataif=rrb spec="=rrb" ;;
  ib) [ -n "${RR_IB_LIBRARY:-}" ] || fail "mode ib needs RR_IB_LIBRARY"
      export RR_NETNS_OVER=ib RR_TRANSPORT=auto ;;
  *) fail "unknown mode $mode" ;;
esac

start=$(date +%s.%N)
for ((i = 0; i < n; i++)); do
  env RANK="$i" WORLD_SIZE="$n" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.77.0.1 MASTER_PORT=29500 \
    RR_ALGO="$algo" RR_SOCKET_IFNAME="$spec" RR_DEBUG=INFO RR_DEBUG_SUBSYS=INIT \
    RR_DEBUG_FILE="$dir/rank$i.log" RR_TIMEOUT="${RR_TIMEOUT:-60}" \
    timeout -s KILL 100 ip netns exec "${p}n$i" "$bin" "$prefix" "$dataif" >"$dir/out$i" 2>&1 &
  pids+=($!)
done
rc=0
for ((i = 0; i < n; i++)); do
  if ! wait "${pids[$i]}"; then rc=1; echo "rank $i failed:" >&2; fi
done
pids=()
end=$(date +%s.%N)
for ((i = 0; i < n; i++)); do sed "s/^/[out $i] /" "$dir/out$i"; done
[ "$rc" = 0 ] || { for ((i = 0; i < n; i++)); do sed "s/^/[log $i] /" "$dir/rank$i.log" 2>/dev/null; done; fail "a rank failed"; }

# Host identities (host/boot/netns) must all differ, and each must hold its namespace.
hosts=()
for ((i = 0; i < n; i++)); do
  h=$(sed -n 's/.*group w rank .* listening on .*, host \([^ ]*\)$/\1/p' "$dir/rank$i.log" | head -n1)
  [ -n "$h" ] || fail "rank $i: no host identity in its log"
  nsid=$(ip netns exec "${p}n$i" readlink /proc/self/ns/net)
  case "$h" in *"$nsid"*) ;; *) fail "rank $i: host identity $h lacks its namespace $nsid" ;; esac
  for ((j = 0; j < i; j++)); do
    [ "${hosts[$j]}" != "$h" ] || fail "ranks $j and $i share the host identity $h"
  done
  hosts+=("$h")
  echo "rank $i: host $h"
done
printf 'netns %s: %d ranks in %d namespaces, data on %sx (%s), algo %s: ok (%.1f s)\n' \
  "$mode" "$n" "$n" "$prefix" "$dataif" "$algo" "$(echo "$end - $start" | bc 2>/dev/null || echo 0)"
exit 0
