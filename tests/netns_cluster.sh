#!/usr/bin/env bash
# Simulated hosts for the cluster tests (tests/netns_slurm.sh, tests/netns_torchrun.sh);
# sourced, never run. Each host is a network namespace with its own address on one bridge
# (which lives in a "switch" namespace: nothing is added to the caller's namespace), and
# every command run on a host gets that host's name (a UTS namespace of its own) and an
# /etc/hosts naming every host (bind-mounted in the mount namespace `ip netns exec` makes:
# the machine's /etc is not touched). So host names resolve as on a real cluster, and the
# library's host id (host name, boot id, network namespace) tells the hosts apart.
#
#   cl_setup NAME HOST...       hosts get 10.79.0.1, .2, ... in order; makes CL_DIR (a
#                               temporary directory), and arms the cleanup
#   cl_addr HOST                that host's address
#   cl_on HOST CMD...           run CMD on HOST (in the foreground); $CL_DIR/on is the same
#                               as a program, for drivers written in another language
#   cl_bg HOST LOG CMD...       the same in the background, output to LOG; its pid is in
#                               CL_PID afterwards and is killed by the cleanup
#   cl_deadline SECONDS         fail (with the cleanup) if the test still runs then: ctest's
#                               own limit kills with SIGKILL, which no trap sees
#   cl_slurm_up CTL NODE...     munged (a key and socket of its own in CL_DIR), slurmctld on
#                               host CTL and one slurmd per NODE, each with its own node name,
#                               spool and log; exports SLURM_CONF. Exits 77 saying why when
#                               Slurm or munge is not installed or will not start here.
#   cl_slurm_logs               the daemons' logs' last lines (for a failure message)
#
# The cleanup (EXIT): every process left in the hosts' namespaces (slurmstepd, tasks,
# torchrun's workers ...) and every process started here is killed with SIGKILL, the
# namespaces are deleted and CL_DIR is removed (kept, for a look, with RR_TEST_KEEP=1).
# INT, TERM and HUP exit through it.
# Exit 77 ("skipped: ...") without root, ip(8), unshare(1) or network namespaces.

CL_NET=10.79.0
CL_HOSTS=()
CL_NS=()          # namespaces made, the switch first
CL_PIDS=()        # processes started here (in any namespace)
CL_DIR=
CL_PID=
CL_DEADLINE=

cl_skip() { echo "skipped: $*"; exit 77; }
cl_fail() { echo "FAILED: $*" >&2; exit 1; }

cl_cleanup() {
  local ns pid left
  trap - EXIT INT TERM HUP USR1
  {  # (stderr away: bash reports every job it reaps here as "Killed")
    [ -n "$CL_DEADLINE" ] && kill -9 "$CL_DEADLINE" && wait "$CL_DEADLINE"
    for pid in "${CL_PIDS[@]}"; do kill -9 "$pid"; done
    # Whatever runs in a host's namespace is the test's: daemons' children, tasks, workers.
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      left=0
      for ns in "${CL_NS[@]}"; do
        for pid in $(ip netns pids "$ns"); do kill -9 "$pid"; left=1; done
      done
      [ "$left" = 0 ] && break
      sleep 0.2
    done
    for pid in "${CL_PIDS[@]}"; do wait "$pid"; done
    for ns in "${CL_NS[@]}"; do ip netns del "$ns"; done
  } 2>/dev/null
  if [ -n "$CL_DIR" ] && [ "${RR_TEST_KEEP:-0}" = 1 ]; then
    echo "kept $CL_DIR (RR_TEST_KEEP=1)"
  elif [ -n "$CL_DIR" ]; then
    rm -rf "$CL_DIR"
  fi
}

cl_setup() {
  local name=$1 i ns host
  shift
  [ "$(id -u)" = 0 ] || cl_skip "not root (network namespaces need CAP_SYS_ADMIN)"
  command -v ip >/dev/null 2>&1 || cl_skip "no ip command (iproute2)"
  command -v unshare >/dev/null 2>&1 || cl_skip "no unshare command (util-linux)"
  CL_HOSTS=("$@")
  CL_DIR=$(mktemp -d "/tmp/rr-$name.XXXXXX") || cl_fail "mktemp"
  chmod 711 "$CL_DIR"  # munged insists that every directory above its socket is searchable
  trap cl_cleanup EXIT
  trap 'exit 130' INT TERM HUP
  trap 'exit 1' USR1  # cl_deadline
  local p="rr$$${name:0:4}"
  ns="${p}sw"
  ip netns add "$ns" 2>"$CL_DIR/err" || cl_skip "ip netns add failed: $(cat "$CL_DIR/err")"
  CL_NS+=("$ns")
  ip -n "$ns" link set lo up || cl_fail "switch lo"
  ip -n "$ns" link add br0 type bridge 2>"$CL_DIR/err" || cl_skip "no bridge: $(cat "$CL_DIR/err")"
  ip -n "$ns" link set br0 up || cl_fail "bridge up"
  { echo "127.0.0.1 localhost"
    for i in "${!CL_HOSTS[@]}"; do echo "$CL_NET.$((i + 1)) ${CL_HOSTS[$i]}"; done
  } >"$CL_DIR/hosts"
  for i in "${!CL_HOSTS[@]}"; do
    host=${CL_HOSTS[$i]}
    ns="${p}$i"
    ip netns add "$ns" || cl_fail "ip netns add $ns"
    CL_NS+=("$ns")
    ip -n "$ns" link set lo up || cl_fail "lo up on $host"
    ip link add eth0 netns "$ns" type veth peer name "p$i" netns "${p}sw" 2>"$CL_DIR/err" ||
      cl_skip "no veth: $(cat "$CL_DIR/err")"
    ip -n "$ns" addr add "$CL_NET.$((i + 1))/24" dev eth0 || cl_fail "address of $host"
    ip -n "$ns" link set eth0 up || cl_fail "eth0 up on $host"
    ip -n "${p}sw" link set "p$i" master br0 up || cl_fail "bridge port of $host"
  done
  # $CL_DIR/on HOST CMD...: cl_on as a program, for drivers that are not this shell.
  # shellcheck disable=SC2016 # the $ are the generated script's
  { echo '#!/bin/sh'
    echo '# on HOST CMD...: run CMD on a simulated host of tests/netns_cluster.sh'
    echo 'host=$1; shift'
    echo 'case $host in'
    for i in "${!CL_HOSTS[@]}"; do echo "  ${CL_HOSTS[$i]}) ns=${p}$i ;;"; done
    echo '  *) echo "on: no host $host" >&2; exit 2 ;;'
    echo 'esac'
    # ip netns exec gives the command a mount namespace of its own (a slave of the
    # machine's), in which /etc/hosts is replaced; unshare --uts gives it its own host name.
    echo 'exec ip netns exec "$ns" unshare --uts sh -c '"'"'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'"'"' sh '"$CL_DIR/hosts"' "$host" "$@"'
  } >"$CL_DIR/on"
  chmod 755 "$CL_DIR/on"
  # The bridge forwards at once (no STP); still, wait until the first host answers.
  if command -v ping >/dev/null 2>&1; then
    for i in "${!CL_HOSTS[@]}"; do
      [ "$i" = 0 ] && continue
      local ok=0
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        if cl_on "${CL_HOSTS[$i]}" ping -c1 -W1 "${CL_HOSTS[0]}" >/dev/null 2>&1; then ok=1; break; fi
      done
      [ "$ok" = 1 ] || cl_fail "${CL_HOSTS[$i]} cannot reach ${CL_HOSTS[0]}"
    done
  fi
}

cl_addr() {
  local i
  for i in "${!CL_HOSTS[@]}"; do
    [ "${CL_HOSTS[$i]}" = "$1" ] && { echo "$CL_NET.$((i + 1))"; return 0; }
  done
  cl_fail "no host $1"
}

cl_on() { "$CL_DIR/on" "$@"; }

cl_bg() {
  local host=$1 log=$2
  shift 2
  "$CL_DIR/on" "$host" "$@" >"$log" 2>&1 </dev/null &
  CL_PID=$!
  CL_PIDS+=("$CL_PID")
}

cl_deadline() {
  local self=$$
  mkfifo "$CL_DIR/deadline" || cl_fail "mkfifo"
  (
    # A wait with no child process (which a kill of this shell would leave behind): a read
    # from a FIFO that nobody writes, with a time limit.
    exec 3<>"$CL_DIR/deadline"
    read -r -t "$1" -u 3 _
    echo "FAILED: still running after $1 s: stopping (the cleanup runs)" >&2
    kill -USR1 "$self"
    # The script may be waiting for a foreground command, which the trap waits for: end
    # whatever runs on the hosts, so that it returns.
    for ns in "${CL_NS[@]}"; do
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    done
  ) &
  CL_DEADLINE=$!
}

cl_slurm_logs() {
  local f
  for f in "$CL_DIR"/slurm/*.log "$CL_DIR"/munge/munged.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }
  done
}

cl_slurm_up() {
  local ctl=$1 n c
  shift
  local nodes=("$@")
  for c in munged mungekey slurmctld slurmd srun salloc sinfo scontrol; do
    command -v "$c" >/dev/null 2>&1 ||
      cl_skip "no $c: Slurm and munge are not installed (RR_DEPS_SLURM=1 bash tools/deps.sh installs Debian's slurmctld, slurmd, slurm-client and munge)"
  done
  local s="$CL_DIR/slurm"
  mkdir -p "$s/state" "$CL_DIR/munge" || cl_fail "mkdir"
  chmod 711 "$CL_DIR/munge"
  mungekey --create --keyfile="$CL_DIR/munge/munge.key" 2>"$CL_DIR/err" ||
    cl_skip "mungekey failed: $(cat "$CL_DIR/err")"
  munged -F --socket="$CL_DIR/munge/munge.sock" --key-file="$CL_DIR/munge/munge.key" \
    --log-file="$CL_DIR/munge/munged.log" --pid-file="$CL_DIR/munge/munged.pid" \
    --seed-file="$CL_DIR/munge/munged.seed" >"$CL_DIR/munge/out" 2>&1 </dev/null &
  CL_PIDS+=("$!")
  local nodelist=""
  for n in "${nodes[@]}"; do
    nodelist+="${nodelist:+,}$n"
    mkdir -p "$s/spool-$n" && chmod 755 "$s/spool-$n"
  done
  # One line per node: each slurmd runs in its host's namespace and is reached at its address.
  {
    cat <<EOF
ClusterName=rrtest
SlurmctldHost=$ctl($(cl_addr "$ctl"))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$CL_DIR/munge/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool-%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd-%n.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=2
EOF
    for n in "${nodes[@]}"; do echo "NodeName=$n NodeAddr=$(cl_addr "$n") CPUs=4 State=UNKNOWN"; done
    echo "PartitionName=main Nodes=$nodelist Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } >"$s/slurm.conf"
  # Slurm 22.05's slurmd always loads a cgroup plugin; under ip netns exec no cgroup
  # filesystem is mounted, so autodetection would fail. v1 loads without touching any.
  echo "CgroupPlugin=cgroup/v1" >"$s/cgroup.conf"
  export SLURM_CONF="$s/slurm.conf"
  local _
  for _ in $(seq 50); do [ -S "$CL_DIR/munge/munge.sock" ] && break; sleep 0.1; done
  [ -S "$CL_DIR/munge/munge.sock" ] || cl_skip "munged did not start: $(tail -n 3 "$CL_DIR/munge/munged.log" "$CL_DIR/munge/out" 2>&1)"
  local daemons=()
  cl_bg "$ctl" "$s/slurmctld.out" slurmctld -D -f "$SLURM_CONF"
  daemons+=("$CL_PID")
  for n in "${nodes[@]}"; do
    cl_bg "$n" "$s/slurmd-$n.out" slurmd -D -N "$n" -f "$SLURM_CONF"
    daemons+=("$CL_PID")
  done
  # Up when every node is idle (registered): 1-3 s here; give up after 30 s, or at once when
  # a daemon has exited.
  local idle=0 pid gone="" until=$((SECONDS + 30))
  while [ "$SECONDS" -lt "$until" ]; do
    idle=$(cl_on "$ctl" timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$')
    [ "$idle" = "${#nodes[@]}" ] && break
    for pid in "${daemons[@]}"; do kill -0 "$pid" 2>/dev/null || gone=1; done
    [ -n "$gone" ] && break
    sleep 0.2
  done
  if [ "$idle" != "${#nodes[@]}" ]; then
    cl_slurm_logs
    for f in "$s"/*.out; do echo "--- $f"; tail -n 5 "$f"; done
    cl_skip "Slurm did not come up here ($idle of ${#nodes[@]} nodes idle${gone:+, a daemon exited}; logs above)"
  fi
}

# cl_check_links DIR NAME WORLD [SOURCE]: the RR_DEBUG=INFO logs DIR/NAME.*.log of one job,
# one per rank, must show every rank's host (the library's host id: host name, boot id,
# network namespace), WORLD ranks on more than one host, every rank linked to every other
# over shm where both share a host and over tcp where they do not, and with SOURCE, each
# rank's "rank and size from SOURCE". The job's first group of WORLD ranks is the one read.
cl_check_links() {
  python3 - "$@" <<'EOF'
import glob, re, sys
d, name, world = sys.argv[1], sys.argv[2], int(sys.argv[3])
source = sys.argv[4] if len(sys.argv) > 4 else None
host, links, src, bad = {}, {}, {}, []
for path in sorted(glob.glob(f"{d}/{name}.*.log")):
    group = None
    for line in open(path, errors="replace"):
        m = re.search(r"group (\S+) rank (\d+)/(\d+) listening on .*, host (\S+)$", line)
        if m and group is None and int(m.group(3)) == world:
            group, me = m.group(1), int(m.group(2))
            host[me] = m.group(4)
            continue
        m = re.search(r"group (\S+): rank (\d+) <-> rank (\d+) over (\w+)", line)
        if m and m.group(1) == group:
            links[(int(m.group(2)), int(m.group(3)))] = m.group(4)
        m = re.search(r"rank (\d+) of (\d+) ready \(rank and size from (\S+)\)", line)
        if m and group is not None and int(m.group(1)) == me:
            src[me] = m.group(3)
if sorted(host) != list(range(world)):
    bad.append(f"logs of ranks {sorted(host)} only (want 0..{world - 1}) in {d}/{name}.*.log")
names = {r: h.split("/")[0] for r, h in host.items()}
if len(set(host.values())) < 2:
    bad.append(f"all ranks on one host: {host}")
for a in sorted(host):
    for b in sorted(host):
        if a == b:
            continue
        want = "shm" if host[a] == host[b] else "tcp"
        got = links.get((a, b))
        if got != want:
            bad.append(f"rank {a} ({names[a]}) <-> rank {b} ({names[b]}): {got or 'no link logged'}, want {want}")
    if source and src.get(a) != source:
        bad.append(f"rank {a}: rank and size from {src.get(a)}, want {source}")
print(f"links of {name}: " + ", ".join(f"{a}-{b} {t}" for (a, b), t in sorted(links.items()) if a < b)
      + "; hosts: " + ", ".join(f"rank {r} {names[r]}" for r in sorted(names))
      + (f"; rank from {source}" if source and not bad else ""))
for b in bad:
    print(f"FAILED: {name}: {b}")
sys.exit(1 if bad else 0)
EOF
}
