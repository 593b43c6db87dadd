#!/usr/bin/env bash
# Issue 41, item 1: jobs under a real Slurm (Debian's slurmctld, slurmd and munge) across
# simulated hosts (tests/netns_cluster.sh): a login host running slurmctld, salloc and srun,
# and two compute hosts node0 and node1, each with its own slurmd, address and host name.
# Every job is `srun -N 2 --ntasks-per-node 2` (4 tasks, 2 per host).
#
#   netns_slurm.sh c BINDIR        the C programs of BINDIR:
#     all_reduce_perf   every dtype and op, 8 B - 1 MiB (recursive doubling and ring): every
#                       row's #wrong 0, out of place and in place
#     mlp_digits        the training example, 5 epochs: its per-epoch lines, parameter hash and
#                       checkpoint the same, byte for byte, as rrun's on one host (4 ranks)
#     a killed task     netns_fault_rank's verified all-reduce loop; task 3 (node1) killed
#                       with SIGKILL: tasks 0-2 must fail with an error naming rank 3 within
#                       KILL_BOUND (5) s
#   netns_slurm.sh torch PYTHON    tests/python/torch_slurm.py under srun on that torch: exact
#                       sums with init_process_group("ringreduce"), then task 3 kills itself
#                       and tasks 0-2 must fail naming rank 3 within KILL_BOUND s
#
# For every job the ranks' RR_DEBUG=INFO logs must show the rank and world size taken from
# SLURM_PROCID (C; torch hands the backend its own), shared memory between the two ranks of a
# host and TCP between hosts (cl_check_links).
#
# Where the rendezvous comes from: Slurm's variables alone. The library reads the rank, world
# size and local rank from SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID, and with MASTER_ADDR
# and MASTER_PORT unset takes the step's first node and a port from the job and step ids
# (rendezvous/init_method.c); mlp_digits takes SLURM_PROCID for a launcher's rank, and the
# torch backend fills torch's RANK, WORLD_SIZE, MASTER_ADDR, ... from the same rule on import.
# The allocation exports only a job token (RR_JOB_TOKEN): the secret a multi-node job needs,
# which srun hands every task. RR_TEST_SLURM_VARS=1 runs the jobs as a batch script that sets
# MASTER_ADDR, MASTER_PORT and RANK itself would instead (docs/cluster.md).
#
# Needs root, ip netns and Slurm + munge (RR_DEPS_SLURM=1 bash tools/deps.sh); exit 77
# saying why otherwise. Cleans up its hosts, daemons, jobs and files on exit.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:?usage: netns_slurm.sh c BINDIR | torch PYTHON}
arg=${2:?usage: netns_slurm.sh c BINDIR | torch PYTHON}
KILL_BOUND=${KILL_BOUND:-5}
# shellcheck source=tests/netns_cluster.sh
source "$here/netns_cluster.sh"

case $mode in
  c) for b in all_reduce_perf mlp_digits rrun netns_fault_rank; do
       [ -x "$arg/$b" ] || cl_fail "no $arg/$b"
     done ;;
  torch) "$arg" -c 'import torch, torch.distributed' 2>/dev/null ||
           cl_skip "no torch for $arg" ;;
  *) cl_fail "unknown case $mode (c or torch)" ;;
esac

cl_setup slurm login node0 node1
cl_deadline "$([ "$mode" = c ] && echo 150 || echo 270)"  # (ctest's limits: 180, 300 s)
cl_slurm_up login node0 node1
J=$CL_DIR/job
mkdir -p "$J" && chmod 777 "$J"

# What a batch script does before its sruns today (docs/cluster.md); salloc runs it on login.
cat >"$CL_DIR/alloc" <<'EOF'
#!/bin/bash
# One secret per job, which srun hands every task: the ranks then authenticate.
export RR_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
if [ "${RR_TEST_SLURM_VARS:-0}" = 1 ]; then
  export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
  export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
fi
exec "$@"
EOF
# What torch's env:// (and mlp_digits) need besides, per task.
cat >"$CL_DIR/rankenv" <<'EOF'
#!/bin/bash
if [ "${RR_TEST_SLURM_VARS:-0}" = 1 ]; then
  export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID
fi
exec "$@"
EOF
chmod 755 "$CL_DIR/alloc" "$CL_DIR/rankenv"

# job NAME CMD...: one allocation of 2 hosts x 2 tasks and one srun of CMD in it, each task's
# output in $J/NAME.<task>.out and its library log in $J/NAME.<host>.<pid>.log.
job() {
  local name=$1
  shift
  RR_DEBUG=INFO RR_DEBUG_SUBSYS=INIT RR_DEBUG_FILE="$J/$name.%h.%p.log" RR_TIMEOUT=60 \
    timeout -s KILL 100 "$CL_DIR/on" login salloc -N 2 --ntasks-per-node 2 --job-name "$name" \
    "$CL_DIR/alloc" srun --kill-on-bad-exit=0 --output "$J/$name.%t.out" "$@"
}

show() { local f; for f in "$J/$1".*.out; do sed "s|^|[$(basename "$f")] |" "$f"; done; }

fail=0
bad() { echo "FAILED: $*"; fail=1; }

# kill_check NAME: tasks 0-2 of job NAME must have failed naming rank 3, no survivor blamed,
# within KILL_BOUND s of the kill; REPORTS holds each survivor's "<seconds> <message>".
kill_check() {
  local name=$1 r took msg s
  for r in 0 1 2; do
    took=${REPORTS[r]%% *}
    msg=${REPORTS[r]#* }
    echo "task $r: ${took} s after the kill: $msg"
    if [ -z "$msg" ] || [ "$took" = "$msg" ]; then bad "$name: task $r reported no error"; continue; fi
    case $msg in *"rank 3"*) ;; *) bad "$name: task $r's error does not name rank 3" ;; esac
    for s in 0 1 2; do
      case $msg in *"lost rank $s:"*) bad "$name: task $r blames survivor rank $s" ;; esac
    done
    awk -v t="$took" -v b="$KILL_BOUND" 'BEGIN{exit !(t >= -0.01 && t <= b)}' ||
      bad "$name: task $r reported ${took} s after the kill: outside [0, $KILL_BOUND] s"
  done
}

if [ "$mode" = c ]; then
  echo "== all_reduce_perf: every dtype and op, 8 B - 1 MiB"
  job perf "$arg/all_reduce_perf" -b 8 -e 1M -f 8 -d all -o all -n 2 -w 1 ||
    bad "all_reduce_perf: srun exit $?"
  show perf | grep -v '^\[[^]]*\] #  Rank' | head -n 20
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13' "$J/perf.0.out" | wc -l)
  wrong=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0)' "$J/perf.0.out" | wc -l)
  echo "all_reduce_perf: $rows rows, $wrong with #wrong > 0"
  # -o all: sum, prod, min, max, avg; 8 dtypes, 6 sizes.
  [ "$rows" = 240 ] || bad "all_reduce_perf: $rows rows, want 240 (8 dtypes x 5 ops x 6 sizes)"
  [ "$wrong" = 0 ] || bad "all_reduce_perf: $wrong rows with #wrong > 0"
  grep -q '^# Out of bounds values : 0 OK' "$J/perf.0.out" || bad "all_reduce_perf: no '0 OK'"
  cl_check_links "$J" perf 4 SLURM_PROCID || fail=1

  echo "== mlp_digits: under srun, and under rrun on one host"
  job train "$CL_DIR/rankenv" "$arg/mlp_digits" --device cpu --epochs 5 \
    --checkpoint "$J/srun.ckpt" || bad "mlp_digits under srun: exit $?"
  cat "$J/train.0.out"
  OMP_NUM_THREADS=1 timeout -s KILL 100 "$arg/rrun" --standalone --nproc-per-node 4 \
    "$arg/mlp_digits" --device cpu --epochs 5 --checkpoint "$J/rrun.ckpt" >"$J/rrun.out" 2>&1 ||
    bad "mlp_digits under rrun: exit $?"
  pick() { grep -E '^(mlp_digits: |epoch |parameter hash|parameters bit-identical|final held-out)' "$1" | sed 's/^\(mlp_digits: [0-9]* ranks\).*/\1/'; }
  if ! diff <(pick "$J/rrun.out") <(pick "$J/train.0.out") >"$J/train.diff"; then
    cat "$J/rrun.out"
    bad "mlp_digits: srun's result differs from rrun's (< rrun, > srun):"; cat "$J/train.diff"
  fi
  grep -q '^mlp_digits: 4 ranks' "$J/train.0.out" || bad "mlp_digits under srun: not one 4-rank job"
  cmp "$J/rrun.ckpt" "$J/srun.ckpt" || bad "mlp_digits: the checkpoints differ"
  [ "$fail" = 0 ] && echo "mlp_digits: srun's epochs, parameter hash and checkpoint equal rrun's"
  # (rankenv copies SLURM_PROCID into RANK only with RR_TEST_SLURM_VARS.)
  if [ "${RR_TEST_SLURM_VARS:-0}" = 1 ]; then src=RANK; else src=SLURM_PROCID; fi
  cl_check_links "$J" train 4 "$src" || fail=1

  echo "== a killed task: task 3 (node1) SIGKILLed in a verified all-reduce loop"
  # Each task records its pid (the processes are visible here: no pid namespace).
  # shellcheck disable=SC2016 # the task's shell expands them
  job kill bash -c 'echo $$ >"$0/pid.$SLURM_PROCID"; exec "$1" 1000000 262144 all_reduce' \
    "$J" "$arg/netns_fault_rank" &
  jpid=$!
  for t in $(seq 300); do  # until every task has verified 50 rounds (or 30 s)
    n=0
    for r in 0 1 2 3; do grep -q ' ok ' "$J/kill.$r.out" 2>/dev/null && n=$((n + 1)); done
    [ "$n" = 4 ] && [ -s "$J/pid.3" ] && break
    sleep 0.1
  done
  [ "$n" = 4 ] || { show kill; bad "the kill job did not get going"; }
  t_kill=$(date +%s.%N)
  kill -9 "$(cat "$J/pid.3")"
  wait "$jpid"
  show kill | grep -v ' ok '
  REPORTS=()
  for r in 0 1 2; do
    e=$(grep ' ERROR ' "$J/kill.$r.out" | tail -n 1)
    t=$(echo "$e" | sed -n 's/^t=\([0-9.]*\).*/\1/p')
    REPORTS[r]="$(awk -v a="${t:-0}" -v b="$t_kill" 'BEGIN{printf "%.3f", a-b}') ${e#* ERROR }"
    [ -n "$e" ] || REPORTS[r]="?"
  done
  kill_check kill
  cl_check_links "$J" kill 4 SLURM_PROCID || fail=1
else
  echo "== torch ($("$arg" -c 'import torch; print(torch.__version__)')): init_process_group(\"ringreduce\") under srun"
  PYTHONPATH="$here/../python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 \
    job torch "$CL_DIR/rankenv" "$arg" "$here/python/torch_slurm.py" "$J"
  show torch | grep -v 'Warning'
  REPORTS=()
  for r in 0 1 2 3; do grep -q "^@@ rank $r exact" "$J/torch.$r.out" || bad "task $r: no exact sums"; done
  for r in 0 1 2; do
    e=$(grep "^@@ rank $r error after" "$J/torch.$r.out" | tail -n 1)
    REPORTS[r]=$(echo "$e" | sed -n 's/^@@ rank [0-9]* error after \([0-9.na]*\) s: \(.*\)/\1 \2/p')
    [ -n "${REPORTS[r]}" ] || REPORTS[r]="?"
  done
  kill_check torch
  cl_check_links "$J" torch 4 || fail=1
fi

[ "$fail" = 0 ] || { cl_slurm_logs; echo "netns_slurm $mode: FAILED"; exit 1; }
echo "netns_slurm $mode: passed"
