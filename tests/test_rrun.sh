#!/usr/bin/env bash
# Tests of the rrun launcher (tools/rrun*.c), one case per run so CTest times each one alone.
#
#   bash tests/test_rrun.sh RRUN HELPER CASE [ALLREDUCE [SETUP_DEATH FORGE]]
#
# The workers are tests/helpers/rrun_helper.c (see its top comment for the actions it takes
# and the env.R.A / pid.R.A / sig.R.A files it writes), and for two_nodes_local ALLREDUCE,
# tests/helpers/rrun_allreduce.c, which joins the job and checks an all-reduce; the
# setup_death cases run SETUP_DEATH, tests/helpers/rrun_setup_death.c, and FORGE,
# tests/helpers/rrun_notice_forge.c.
# Exit 0 pass, 1 fail, 77 skip.
# (About 900 lines: one case per launcher behaviour, each small, sharing the helpers at
# the top; splitting them over files would repeat those helpers or add a sourced library.)
set -u

RRUN=${1:?usage: test_rrun.sh RRUN HELPER CASE [ALLREDUCE [SETUP_DEATH FORGE]]}
HELPER=${2:?}
CASE=${3:?}
ALLREDUCE=${4:-}
SETUP_DEATH=${5:-}
FORGE=${6:-}
[ -x "$RRUN" ] || { echo "rrun not built: $RRUN" >&2; exit 1; }
[ -x "$HELPER" ] || { echo "helper not built: $HELPER (build target rrun_helper)" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/rrun-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

# Nothing inherited that rrun sets or reads, so every expected value below is exact.
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK ROLE_RANK GROUP_WORLD_SIZE \
  ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT \
  TORCHELASTIC_MAX_RESTARTS OMP_NUM_THREADS RR_JOB_TOKEN RR_GRACE_PERIOD RR_SPIN_YIELD \
  RR_BIND_TO RR_HOST_CPUS RR_GROW_ADDR RR_GROW_JOIN RR_RANK_GENERATION

fail() {
  echo "FAIL($CASE): $*" >&2
  for f in "$T/out" "$T/err"; do
    [ -s "$f" ] && { echo "--- $f:"; head -c 4000 "$f"; echo; }
  done >&2
  exit 1
}
skip() { echo "SKIP($CASE): $*" >&2; exit 77; }
now_ms() { date +%s%3N; }

# rr ARGS...: runs rrun, output in $T/out and $T/err; sets RC and ELAPSED (milliseconds).
# The helper's files of an earlier run are removed first: its workers wait for pid files.
# A port for a job's store: probed free, below the kernel's ephemeral range and outside the
# README jobs' 29400-30399 (tests/test_port.h, through rrun_allreduce). Another test's store
# may hold an unprobed pick: rank 0 then fails "Address already in use", or worse, our ranks
# meet its store. Without ALLREDUCE (by hand), an unprobed pick.
job_port() {
  if [ -n "$ALLREDUCE" ]; then "$ALLREDUCE" --free-port; else echo $((20000 + RANDOM % 9400)); fi
}

rr() {
  local t0
  rm -f "$T"/env.* "$T"/pid.* "$T"/sig.* "$T"/port.*
  t0=$(now_ms)
  # A hung rrun fails the case in 30 s (exit code 137) instead of at the CTest timeout.
  timeout -s KILL 30 "$RRUN" "$@" >"$T/out" 2>"$T/err"
  RC=$?
  ELAPSED=$(($(now_ms) - t0))
}
expect_rc() { [ "$RC" = "$1" ] || fail "exit code $RC, expected $1"; }
expect_err() { grep -qF -- "$1" "$T/err" || fail "stderr lacks: $1"; }
expect_no_err() { ! grep -qF -- "$1" "$T/err" || fail "stderr has: $1"; }
expect_faster() { [ "$ELAPSED" -lt "$1" ] || fail "took ${ELAPSED} ms, limit $1 ms"; }
expect_slower() { [ "$ELAPSED" -ge "$1" ] || fail "took ${ELAPSED} ms, expected >= $1 ms"; }
expect_content() { # FILE TEXT
  [ -f "$1" ] || fail "missing $1"
  [ "$(cat "$1")" = "$2" ] || fail "$1 is '$(cat "$1")', expected '$2'"
}
wait_for() { # FILE...: up to 10 s each
  local f i
  for f; do
    for ((i = 0; i < 200; i++)); do [ -e "$f" ] && break; sleep 0.05; done
    [ -e "$f" ] || fail "timed out waiting for $f"
  done
}
# The comm and state of a live (or zombie) worker, empty once it is gone.
worker_stat() { awk '$2 == "(rrun_helper)" { print $2, $3 }' "/proc/$1/stat" 2>/dev/null; }
# Workers are gone: neither running nor zombies (a zombie keeps its /proc/PID/stat).
expect_gone() { # PIDFILE...
  local f pid
  for f; do
    pid=$(cat "$f") || fail "missing $f"
    [ -z "$(worker_stat "$pid")" ] || fail "worker pid $pid ($f) still exists: $(worker_stat "$pid")"
  done
}
# expect_dead PID WHAT: within 2 s the process is gone or a zombie. For processes rrun is not
# the parent of, whose reaping is up to whoever inherits them (a container's init may be slow).
expect_dead() {
  local i st
  for ((i = 0; i < 40; i++)); do
    st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)
    [ -z "$st" ] || [ "$st" = Z ] && return 0
    sleep 0.05
  done
  fail "$2 (pid $1, state $st) is still alive: $(tr '\0' ' ' <"/proc/$1/cmdline")"
}
# wait_exit PID: waits (up to 10 s) for a background rrun and sets RC to its exit status.
wait_exit() {
  local i
  for ((i = 0; i < 200; i++)); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$1" 2>/dev/null; then
    kill -s KILL "$1"
    wait "$1"
    fail "rrun (pid $1) still running 10 s later"
  fi
  wait "$1"
  RC=$?
}

# expect_env FILE RANK LOCAL_RANK WORLD LOCAL_WORLD GROUP_RANK GROUP_WORLD ADDR PORT RUN_ID
#            RESTART MAX_RESTARTS OMP (OMP "-" for unset); RR_JOB_TOKEN is checked for form,
#            or, with TOKEN_WANT=unset, to be unset.
TOKEN_WANT=random
expect_env() {
  local f=$1 omp
  [ -f "$f" ] || fail "missing $f (worker did not start?)"
  if [ "${13}" = - ]; then omp="OMP_NUM_THREADS unset"; else omp="OMP_NUM_THREADS=${13}"; fi
  local want="RANK=$2
LOCAL_RANK=$3
WORLD_SIZE=$4
LOCAL_WORLD_SIZE=$5
GROUP_RANK=$6
ROLE_RANK=$2
GROUP_WORLD_SIZE=$7
ROLE_WORLD_SIZE=$4
MASTER_ADDR=$8
MASTER_PORT=$9
TORCHELASTIC_RUN_ID=${10}
TORCHELASTIC_RESTART_COUNT=${11}
TORCHELASTIC_MAX_RESTARTS=${12}
$omp"
  local got
  got=$(grep -v '^RR_JOB_TOKEN' "$f")
  [ "$got" = "$want" ] || fail "$f:
$got
expected:
$want"
  if [ "$TOKEN_WANT" = unset ]; then
    grep -qx 'RR_JOB_TOKEN unset' "$f" || fail "$f: expected no RR_JOB_TOKEN: $(grep TOKEN "$f")"
  else
    grep -qE '^RR_JOB_TOKEN=[0-9a-f]{32}$' "$f" || fail "$f: bad RR_JOB_TOKEN: $(grep TOKEN "$f")"
  fi
}
# The one line rrun prints for a multi-node job without an exported RR_JOB_TOKEN.
NO_TOKEN_WARNING="rrun: warning: RR_JOB_TOKEN is not set, so this 2-node job runs unauthenticated"
expect_no_token_warning() { # ADDR:PORT
  [ "$(grep -c "RR_JOB_TOKEN" "$T/err")" = 1 ] || fail "expected one line about RR_JOB_TOKEN"
  expect_err "$NO_TOKEN_WARNING (any process that reaches $1 can join it); export the same \
RR_JOB_TOKEN on every node to enable the job token (see 'rrun --help')"
}
token_of() { sed -n 's/^RR_JOB_TOKEN=//p' "$1"; }

# ---------------------------------------------------------------------------------------------
case_env_nproc1() {
  rr "$HELPER" "$T"
  expect_rc 0
  expect_env "$T/env.0.0" 0 0 1 1 0 1 127.0.0.1 29500 none 0 0 -
  [ ! -s "$T/err" ] || fail "rrun printed something for a successful one-worker job"
}

case_env_nproc4() {
  # Inherited values of the variables rrun sets must be overridden.
  RANK=7 LOCAL_RANK=9 WORLD_SIZE=99 MASTER_PORT=1 rr --nproc-per-node 4 --master-port=12345 \
    "$HELPER" "$T"
  expect_rc 0
  local r
  for r in 0 1 2 3; do
    expect_env "$T/env.$r.0" $r $r 4 4 0 1 127.0.0.1 12345 none 0 0 1
  done
  [ "$(cat "$T"/env.*.0 | grep RR_JOB_TOKEN | sort -u | wc -l)" = 1 ] ||
    fail "workers got different RR_JOB_TOKENs"
  [ "$(grep -c 'OMP_NUM_THREADS is unset, so every worker gets OMP_NUM_THREADS=1' \
    "$T/err")" = 1 ] || fail "the OMP_NUM_THREADS warning was not printed exactly once"

  # Inherited OMP_NUM_THREADS and RR_JOB_TOKEN are kept (and then there is no warning).
  OMP_NUM_THREADS=3 RR_JOB_TOKEN=0123456789abcdef0123456789abcdef \
    rr --nproc-per-node 2 "$HELPER" "$T"
  expect_rc 0
  for r in 0 1; do
    expect_env "$T/env.$r.0" $r $r 2 2 0 1 127.0.0.1 29500 none 0 0 3
    [ "$(token_of "$T/env.$r.0")" = 0123456789abcdef0123456789abcdef ] ||
      fail "inherited RR_JOB_TOKEN not passed on"
  done
  expect_no_err OMP_NUM_THREADS

  # A fresh token per launch.
  local t1 t2
  rr "$HELPER" "$T"; t1=$(token_of "$T/env.0.0")
  rr "$HELPER" "$T"; t2=$(token_of "$T/env.0.0")
  [ "$t1" != "$t2" ] || fail "two launches got the same RR_JOB_TOKEN $t1"
}

case_env_multinode() {
  # Without an exported RR_JOB_TOKEN the nodes cannot share a token rrun makes up: none is
  # set, and rrun warns once that the job is unauthenticated.
  rr --nnodes 2 --node-rank 1 --nproc-per-node 3 --master-addr 10.1.2.3 --master-port 23456 \
    --rdzv-id job42 --max-restarts 2 "$HELPER" "$T"
  expect_rc 0
  local l
  TOKEN_WANT=unset
  for l in 0 1 2; do
    expect_env "$T/env.$((3 + l)).0" $((3 + l)) $l 6 3 1 2 10.1.2.3 23456 job42 0 2 1
  done
  [ ! -e "$T/env.0.0" ] || fail "node rank 1 started global rank 0"
  expect_no_token_warning 10.1.2.3:23456
  # An exported token is passed on, without a warning.
  RR_JOB_TOKEN=00112233445566778899aabbccddeeff rr --nnodes 2 --nproc-per-node 2 "$HELPER" "$T"
  expect_rc 0
  TOKEN_WANT=random
  for l in 0 1; do
    expect_env "$T/env.$l.0" $l $l 4 2 0 2 127.0.0.1 29500 none 0 0 1
    [ "$(token_of "$T/env.$l.0")" = 00112233445566778899aabbccddeeff ] ||
      fail "exported RR_JOB_TOKEN not passed on"
  done
  expect_no_err RR_JOB_TOKEN
  # --nnodes 1 (given or not) still makes a token: covered by env_nproc1 and env_nproc4.
  rr --nnodes 1 "$HELPER" "$T"
  expect_rc 0
  expect_env "$T/env.0.0" 0 0 1 1 0 1 127.0.0.1 29500 none 0 0 -
  expect_no_err RR_JOB_TOKEN
}

case_underscores() {
  rr --nproc_per_node=2 --nnodes=2:2 --node_rank=1 --master_addr=10.0.0.9 --master_port 2345 \
    --max_restarts=1 --grace_period=1 --rdzv_backend=static --rdzv-endpoint=h:1 \
    --rdzv_id=abc --tee=0 --no_python -- "$HELPER" "$T"
  expect_rc 0
  TOKEN_WANT=unset # --nnodes=2:2 is two nodes: no token of rrun's making
  expect_env "$T/env.2.0" 2 0 4 2 1 2 10.0.0.9 2345 abc 0 1 1
  expect_env "$T/env.3.0" 3 1 4 2 1 2 10.0.0.9 2345 abc 0 1 1
  expect_no_token_warning 10.0.0.9:2345
  expect_err "warning: ignoring --rdzv_backend=static"
  expect_err "warning: ignoring --rdzv-endpoint=h:1"
  # Arguments after the program are the program's, even when they look like rrun flags.
  rr -t 0 sh -c 'echo "$@"' sh --nproc-per-node 3 -- x
  expect_rc 0
  [ "$(cat "$T/out")" = "--nproc-per-node 3 -- x" ] || fail "program arguments changed"
}

case_standalone() {
  rr --standalone --nproc-per-node 2 "$HELPER" "$T" '0=bind:0'
  grep -q "finding a free port" "$T/err" && skip "no usable 127.0.0.1: $(cat "$T/err")"
  expect_rc 0
  local port uuid='^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$'
  port=$(cat "$T/port.0.0") # rank 0 could bind it: it was free
  # Never the default 29500, which a later job without --standalone would want.
  [ "$port" != 29500 ] && [ "$port" -ge 1024 ] && [ "$port" -le 65535 ] || fail "port $port"
  # Below the kernel's ephemeral range, where no outgoing connection can take it before rank 0
  # binds it (rrun.c's free_port says why).
  local eph
  eph=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$eph" -le 2048 ] || [ "$port" -lt "$eph" ] ||
    fail "port $port is in the ephemeral range (from $eph)"
  local id
  id=$(sed -n 's/^TORCHELASTIC_RUN_ID=//p' "$T/env.0.0")
  [[ $id =~ $uuid ]] || fail "standalone run id '$id' is not a random UUID, as torchrun's"
  expect_env "$T/env.1.0" 1 1 2 2 0 1 127.0.0.1 "$port" "$id" 0 0 1

  # --master-* are ignored (with a warning), --nnodes 2 is refused. 1023 is below every range
  # free_port picks from, so a chance pick cannot look like the flag's port.
  rr --standalone --master-port 1023 --master-addr 10.9.9.9 "$HELPER" "$T" '0=bind:0'
  expect_rc 0
  expect_err "ignoring --master-addr and --master-port"
  [ "$(cat "$T/port.0.0")" != 1023 ] || fail "--standalone used --master-port"

  # Two jobs at once: the second starts while the first's worker holds its port, and must
  # pick another. (Started together, both could pick one port before either bound it: 1 in
  # 16384, as for torchrun's own pick.)
  mkdir "$T/a" "$T/b"
  "$RRUN" --standalone "$HELPER" "$T/a" '0=bind:2000' >"$T/a/out" 2>"$T/a/err" &
  local pa=$!
  wait_for "$T/a/port.0.0"
  "$RRUN" --standalone "$HELPER" "$T/b" '0=bind:1000' >"$T/b/out" 2>"$T/b/err" &
  local pb=$!
  wait $pa || fail "first concurrent job failed: $(cat "$T/a/err")"
  wait $pb || fail "second concurrent job failed: $(cat "$T/b/err")"
  [ "$(cat "$T/a/port.0.0")" != "$(cat "$T/b/port.0.0")" ] ||
    fail "concurrent standalone jobs got the same port $(cat "$T/a/port.0.0")"
}

case_fail_stops_others() {
  # Rank 2 fails; the sleepers must be stopped at once, not after the 30 s grace period.
  rr --nproc-per-node 4 "$HELPER" "$T" '*=sleep' '2=exit:3:100'
  expect_rc 3
  expect_faster 10000
  local p2
  p2=$(cat "$T/pid.2.0")
  expect_err "rrun: rank 2 (local rank 2, pid $p2) failed: exit code 3"
  expect_err "rrun: stopping 3 other worker(s) (SIGTERM, then SIGKILL after 30 s)"
  expect_err "rrun: summary: 1 of 4 worker(s) failed, 3 stopped by rrun"
  expect_err "rrun:   rank 2 (local rank 2, pid $p2): exit code 3 (first failure)"
  [ "$(grep -c 'failed: ' "$T/err")" = 1 ] || fail "stopped workers reported as failures"
  local r
  for r in 0 1 3; do expect_content "$T/sig.$r.0" 15; done
  expect_gone "$T"/pid.*.0
}

case_keep_going() {
  # --keep-going (issue 26 item 4): rank 2 dies by SIGKILL; it is reported and the others run
  # to the end of their 1.5 s, unsignalled; the survivors exited 0, so rrun exits 0.
  # A port of its own each time: --keep-going tells the job's store of a death (issue 38.6),
  # and another job's store on the default 29500 must not be told.
  rr --master-port "$(job_port)" --nproc-per-node 4 --keep-going "$HELPER" "$T" '*=exit:0:1500' '2=raise:9:100'
  expect_rc 0
  expect_slower 1500
  local p2 r
  p2=$(cat "$T/pid.2.0")
  expect_err "rrun: rank 2 (local rank 2, pid $p2) failed: killed by signal SIGKILL (9)"
  expect_err "rrun: --keep-going: 3 other worker(s) keep running"
  expect_err "rrun: summary: 1 of 4 worker(s) failed, 0 stopped by rrun"
  expect_err "rrun: --keep-going: the job finished on the surviving worker(s); exit status 0"
  expect_no_err "stopping"
  for r in 0 1 3; do [ ! -e "$T/sig.$r.0" ] || fail "rank $r was signalled"; done
  expect_gone "$T"/pid.*.0
  # The same job without --keep-going: the death stops the others and is rrun's status.
  rr --master-port "$(job_port)" --nproc-per-node 4 --grace-period 5 "$HELPER" "$T" '*=exit:0:1500' '2=raise:9:100'
  expect_rc 137
  expect_err "rrun: stopping 3 other worker(s)"
  # A survivor that exits non-zero is the job's status, whatever the others did.
  rr --master-port "$(job_port)" --nproc-per-node 4 --keep-going "$HELPER" "$T" '*=exit:0:800' '1=raise:9:100' '3=exit:4:300'
  expect_rc 4
  expect_err "rrun: summary: 2 of 4 worker(s) failed, 0 stopped by rrun"
  # Every worker killed: no survivor, 128 + the first one's signal.
  rr --master-port "$(job_port)" --nproc-per-node 2 --keep-going "$HELPER" "$T" '0=raise:9:100' '1=raise:15:600'
  expect_rc 137
  # A crash is a bug, not a death survived: the survivors' success does not hide it.
  rr --master-port "$(job_port)" --nproc-per-node 4 --keep-going "$HELPER" "$T" '*=exit:0:800' '2=raise:11:100'
  expect_rc 139
  expect_err "rrun: rank 2 (local rank 2, pid $(cat "$T/pid.2.0")) failed: killed by signal SIGSEGV (11)"
  # A signal to rrun still stops everything.
  # rr clears the earlier jobs' pid files itself, but in the background: clear them here
  # first, or wait_for can see an old one that rr then removes ("timed out" at once).
  rm -f "$T"/pid.*
  rr --master-port "$(job_port)" --nproc-per-node 2 --keep-going --grace-period 5 "$HELPER" "$T" '*=sleep' &
  local rp=$!
  wait_for "$T/pid.0.0" "$T/pid.1.0"
  kill -TERM $rp
  wait $rp
  [ $? = 143 ] || fail "rrun --keep-going under SIGTERM: exit $?, expected 143"
}

case_grace_kill() {
  # Rank 1 ignores SIGTERM: it gets SIGKILL once the 1 s grace period is over.
  rr --nproc-per-node 2 --grace-period 1 "$HELPER" "$T" '0=exit:1' '1=ignoreterm'
  expect_rc 1
  expect_slower 1000
  expect_faster 8000
  expect_content "$T/sig.1.0" 15
  expect_err "stopping 1 other worker(s) (SIGTERM, then SIGKILL after 1 s)"
  expect_err "1 worker(s) still running 1 s after SIGTERM; sending SIGKILL"
  expect_gone "$T"/pid.*.0

  # RR_GRACE_PERIOD sets it too (fractions allowed); the flag wins over the variable.
  RR_GRACE_PERIOD=0.5 rr --nproc-per-node 2 "$HELPER" "$T" '0=exit:1' '1=ignoreterm'
  expect_rc 1
  expect_slower 500
  expect_faster 8000
  expect_err "SIGKILL after 0.5 s"
  RR_GRACE_PERIOD=100 rr --grace-period 0.2 --nproc-per-node 2 "$HELPER" "$T" '0=exit:1' \
    '1=ignoreterm'
  expect_rc 1
  expect_faster 8000
  expect_err "SIGKILL after 0.2 s"
  expect_gone "$T"/pid.*.0
}

# Stopping signals the worker's process group: what the worker started dies with it.
case_process_group() {
  local script='if [ "$RANK" = 0 ]; then
    while [ ! -s "$1/grandchild" ]; do sleep 0.05; done; exit 5
  fi
  sleep 30 & echo $! >"$1/grandchild.tmp"; mv "$1/grandchild.tmp" "$1/grandchild"; wait'
  rr --nproc-per-node 2 --grace-period 20 sh -c "$script" sh "$T"
  expect_rc 5
  expect_faster 10000
  local gc
  gc=$(cat "$T/grandchild") || fail "no grandchild pid"
  expect_dead "$gc" "the child of the stopped worker"
}

# rrun killed outright (SIGKILL, OOM): PR_SET_PDEATHSIG takes its workers down too.
case_rrun_killed() {
  "$RRUN" --nproc-per-node 2 "$HELPER" "$T" '*=sleep' >"$T/out" 2>"$T/err" &
  local pid=$! f
  wait_for "$T"/pid.{0,1}.0
  kill -s KILL $pid
  wait $pid
  for f in "$T"/pid.{0,1}.0; do expect_dead "$(cat "$f")" "a worker of the killed rrun"; done
}

# rrun killed outright: what a worker started (here a shell's background child) goes too,
# through the keeper (tools/rrun_keeper.c), not only the workers themselves.
case_rrun_killed_grandchild() {
  "$RRUN" --nproc-per-node 2 sh -c 'sleep 1000 & echo $! >"$1/gc.$RANK.tmp"
    mv "$1/gc.$RANK.tmp" "$1/gc.$RANK"; wait' sh "$T" >"$T/out" 2>"$T/err" &
  local pid=$! r
  wait_for "$T"/gc.{0,1}
  kill -s KILL $pid
  wait $pid
  for r in 0 1; do expect_dead "$(cat "$T/gc.$r")" "the child of rank $r of the killed rrun"; done
}

# Issue 22 item 3: a worker leaves a child in its process group and exits; the child exits
# too, and its group id is reused by an unrelated process (forced: in a fresh pid namespace,
# ns_last_pid = id - 1 makes the next fork get that id). When the job ends, successfully,
# the keeper must not SIGKILL the unrelated group that now has the old id.
case_keeper_pid_reuse() {
  [ "$(id -u)" = 0 ] || skip "needs root for a pid namespace"
  command -v unshare >/dev/null || skip "no unshare"
  unshare --pid --fork --mount-proc true 2>/dev/null || skip "cannot make a pid namespace"
  mkfifo "$T/go"
  # Rank 0: a child in its group that outlives it by 0.3 s. Rank 1: holds the job open
  # until the fifo says go, with a builtin read (no fork to disturb the pid order).
  local job='if [ "$RANK" = 0 ]; then
      sleep 0.3 & echo $! >"$1/leftover.tmp"; echo $$ >"$1/pgid.tmp"
      mv "$1/leftover.tmp" "$1/leftover"; mv "$1/pgid.tmp" "$1/pgid"; exit 0
    fi
    read -r line <"$1/go"; exit 0'
  # Runs as pid 1 of the namespace, so the leftover is reparented to it and reaped.
  local driver='RRUN=$1 T=$2 JOB=$3
    "$RRUN" --nproc-per-node 2 bash -c "$JOB" bash "$T" >"$T/out" 2>"$T/err" & rrun=$!
    for ((i = 0; i < 200; i++)); do [ -s "$T/leftover" ] && break; sleep 0.05; done
    pgid=$(cat "$T/pgid") left=$(cat "$T/leftover")
    for ((i = 0; i < 200; i++)); do [ -e "/proc/$left" ] || break; sleep 0.05; done
    [ -e "/proc/$left" ] && { echo "leftover $left did not end"; exit 1; }
    # The next process gets the freed id and makes it its own session and group.
    echo $((pgid - 1)) >/proc/sys/kernel/ns_last_pid
    setsid sleep 30 & other=$!
    [ "$other" = "$pgid" ] || { echo "SKIP: pid $other, not $pgid"; exit 77; }
    for ((i = 0; i < 200; i++)); do
      [ "$(awk "{print \$5}" "/proc/$other/stat")" = "$other" ] && break; sleep 0.01
    done
    echo go >"$T/go"
    wait $rrun; echo "rrun exit $?"
    sleep 0.5 # the keeper acts on rrun'"'"'s exit
    if [ -e "/proc/$other" ] && [ "$(awk "{print \$3}" "/proc/$other/stat")" != Z ]; then
      echo "unrelated process $other survived"; kill $other; exit 0
    fi
    echo "unrelated process $other (group $pgid) was killed"; exit 1'
  timeout -s KILL 30 unshare --pid --fork --mount-proc bash -c "$driver" driver "$RRUN" "$T" "$job" \
    >"$T/driver" 2>&1
  RC=$?
  cat "$T/driver"
  [ "$RC" != 77 ] || skip "$(cat "$T/driver")"
  grep -q "rrun exit 0" "$T/driver" || fail "the job did not succeed: $(cat "$T/driver")"
  [ "$RC" = 0 ] || fail "$(tail -1 "$T/driver")"
}

# Issue 22 item 5: with --tee and a reader that stopped reading, rrun must still act on a
# signal: forward it, and after the grace period SIGKILL, whatever it has left to write.
case_tee_stalled_reader() {
  mkfifo "$T/fifo"
  exec 7<>"$T/fifo" # a reader that never reads, holding the pipe open
  local t0 pid
  t0=$(now_ms)
  timeout -s KILL 30 "$RRUN" --nproc-per-node 2 --tee 3 --grace-period 2 \
    sh -c 'echo $$ >"$1/w.$RANK"; exec yes "rank $RANK"' sh "$T" >"$T/fifo" 2>"$T/err" &
  pid=$!
  wait_for "$T"/w.{0,1}
  sleep 1 # the fifo is full: rrun has more to write than it takes
  kill -s TERM $pid
  wait $pid
  RC=$?
  ELAPSED=$(($(now_ms) - t0))
  exec 7<&-
  expect_rc 143
  expect_faster 8000
  expect_err "rrun: received SIGTERM"
  expect_err "of rank 0's output"
  expect_dead "$(cat "$T/w.0")" "rank 0"
  expect_dead "$(cat "$T/w.1")" "rank 1"
}

# A worker frozen with SIGSTOP gets SIGCONT with its SIGTERM: stopping the job takes
# moments, not the 20 s grace period.
case_stopped_worker() {
  local t0 pid
  rm -f "$T"/pid.* "$T"/sig.*
  t0=$(now_ms)
  timeout -s KILL 30 "$RRUN" --nproc-per-node 2 --grace-period 20 "$HELPER" "$T" \
    '0=exit:1:500' '1=sleep' >"$T/out" 2>"$T/err" &
  pid=$!
  wait_for "$T"/pid.{0,1}.0
  kill -s STOP "$(cat "$T/pid.1.0")"
  wait $pid
  RC=$?
  ELAPSED=$(($(now_ms) - t0))
  expect_rc 1
  expect_faster 8000
  expect_content "$T/sig.1.0" 15
  expect_no_err "sending SIGKILL"
  expect_gone "$T"/pid.*.0
}

# Too few file descriptors for 8 ranks (ulimit -n 16): the job fails within seconds, and the
# ranks' errors say that the process serving the store (rank 0) ran out of descriptors,
# instead of the timeout blaming a rank that never got in.
case_fd_exhaustion() {
  [ -n "$ALLREDUCE" ] || fail "no all-reduce worker given"
  local t0
  t0=$(now_ms)
  (ulimit -n 16 && RR_TIMEOUT=60 timeout -s KILL 30 "$RRUN" --nproc-per-node 8 \
    --master-port "$(job_port)" "$ALLREDUCE") \
    >"$T/out" 2>"$T/err"
  RC=$?
  ELAPSED=$(($(now_ms) - t0))
  [ "$RC" != 0 ] || fail "the job succeeded with 16 descriptors per process"
  expect_faster 15000
  # The first rank to fail (the others are stopped, and may not get to say anything) names it.
  local first
  first=$(grep -m1 -E "rank [0-7]: init_process_group" "$T/err")
  # (Rank 0 itself may run out first, before the store does: "eventfd: Too many open files".)
  [[ $first == *"ran out of file descriptors: accept: Too many open files (it may open 16"* ||
     $first == *"rank 0: init_process_group: "*"Too many open files"* ]] ||
    fail "the first error does not say that rank 0 ran out of file descriptors: $first"
}

# A few more descriptors (ulimit -n 24): every rank gets into the store, and rank 0 runs out
# while setting up shared memory with its seven peers (memfd_create, socket, accept). rrun
# stops the others as soon as one fails, so rank 0 may never get to say so itself: the
# first error any rank prints must carry the cause, not "connection reset by the peer" or
# the network-namespace hint (issue 22, item 7). Three launches.
case_fd_exhaustion_setup() {
  [ -n "$ALLREDUCE" ] || fail "no all-reduce worker given"
  local i first
  for i in 1 2 3; do
    (ulimit -n 24 && RR_TIMEOUT=60 timeout -s KILL 30 "$RRUN" --nproc-per-node 8 \
      --master-port "$(job_port)" "$ALLREDUCE") \
      >"$T/out" 2>"$T/err"
    [ "$?" != 0 ] || fail "launch $i: the job succeeded with 24 descriptors per process"
    first=$(grep -m1 -E "rank [0-7]: init_process_group" "$T/err")
    [[ $first == *"Too many open files"* || $first == *"ran out of file descriptors"* ]] ||
      fail "launch $i: the first error does not name the descriptor limit: $first
$(grep -E "init_process_group|rrun:" "$T/err")"
  done
}

case_signalled() {
  rr --nproc-per-node 2 "$HELPER" "$T" '*=sleep' '1=raise:9'
  expect_rc 137
  expect_err "rank 1 (local rank 1, pid $(cat "$T/pid.1.0")) failed: killed by signal SIGKILL (9)"
  expect_content "$T/sig.0.0" 15
  rr --nproc-per-node 2 "$HELPER" "$T" '*=sleep' '0=raise:10'
  expect_rc 138
  expect_err "failed: killed by signal SIGUSR1 (10)"
  expect_gone "$T"/pid.*.0
}

case_exec_fail() {
  rr --nproc-per-node 2 "$T/no-such-program" --arg
  expect_rc 127
  expect_err "rrun: cannot run '$T/no-such-program': No such file or directory"
  expect_err "failed: exit code 127"
  rr rrun-test-no-such-program-on-path
  expect_rc 127
  expect_err "rrun: cannot run 'rrun-test-no-such-program-on-path': No such file or directory"
  touch "$T/not-executable"
  rr "$T/not-executable"
  expect_rc 127
  expect_err "rrun: cannot run '$T/not-executable': Permission denied"
}

# The four forwarded signals: every worker sees the signal, rrun exits 128 + its number.
case_signals() {
  set -m # background jobs keep SIGINT/SIGQUIT (bash ignores them for '&' without job control)
  local sig num d pid r
  for sig in TERM INT HUP QUIT; do
    num=$(kill -l "$sig")
    d=$T/$sig
    mkdir "$d"
    "$RRUN" --nproc-per-node 3 "$HELPER" "$d" '*=sleep' >"$d/out" 2>"$d/err" &
    pid=$!
    wait_for "$d"/pid.{0,1,2}.0
    kill -s "$sig" $pid
    wait_exit $pid
    cp "$d/err" "$T/err"
    expect_rc $((128 + num))
    expect_err "rrun: received SIG$sig; forwarding it to 3 worker(s)"
    for r in 0 1 2; do expect_content "$d/sig.$r.0" "$num"; done
    expect_gone "$d"/pid.*.0
  done

  # A signal rrun was started with ignored (nohup) stays ignored, for rrun and its workers.
  d=$T/ign
  mkdir "$d"
  (
    trap '' HUP
    exec "$RRUN" --nproc-per-node 2 "$HELPER" "$d" '*=sleep' >"$d/out" 2>"$d/err"
  ) &
  pid=$!
  wait_for "$d"/pid.{0,1}.0
  kill -s HUP $pid
  sleep 0.3
  kill -0 $pid 2>/dev/null || fail "rrun died of a SIGHUP it inherited as ignored"
  kill -s TERM $pid
  wait_exit $pid
  expect_rc 143
  for r in 0 1; do expect_content "$d/sig.$r.0" 15; done
}

# check_prefixed FILE KIND RANKS LINES BIG: every line of FILE is "[rankR]: " + one whole line
# that rank wrote, in order; BIG 'L's per rank in pieces; the unterminated last line is there.
check_prefixed() {
  awk -v kind="$2" -v ranks="$3" -v lines="$4" -v big="$5" '
    function bad(msg) { print FILENAME ":" NR ": " msg ": " substr($0, 1, 100); err = 1 }
    {
      if (!match($0, /^\[rank[0-9]+\]: /)) { bad("unprefixed"); next }
      r = substr($0, 6, RLENGTH - 8) + 0
      body = substr($0, RLENGTH + 1)
      alpha = kind == "out" ? "abcdefghijklmnopqrstuvwxyz" : "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
      if (body == sprintf("rank %d %s line %d %s", r, kind, n[r] + 0, alpha)) n[r]++
      else if (body == sprintf("rank %d %s partial", r, kind) && n[r] == lines) partial[r]++
      else if (body ~ /^L+$/ && n[r] == lines) ls[r] += length(body)
      else bad("garbled or out of order")
    }
    END {
      for (r = 0; r < ranks; r++) {
        if (n[r] != lines) { print "rank " r ": " n[r] + 0 " lines, expected " lines; err = 1 }
        if (partial[r] != 1) { print "rank " r ": partial last line missing"; err = 1 }
        if (ls[r] + 0 != big) { print "rank " r ": " ls[r] + 0 " of " big " L bytes"; err = 1 }
      }
      exit err
    }' "$1" >&2 || fail "$1 is not correctly prefixed"
}

case_tee() {
  rr --nproc-per-node 3 --tee 3 "$HELPER" "$T" '*=out:100'
  expect_rc 0
  check_prefixed "$T/out" out 3 100 200000
  grep -v '^rrun: warning: OMP_NUM_THREADS is unset' "$T/err" >"$T/err.workers"
  check_prefixed "$T/err.workers" err 3 100 0
}

case_tee_modes() {
  local r
  # --prefix is --tee 3.
  rr --nproc-per-node 2 --prefix "$HELPER" "$T" '*=out:5'
  expect_rc 0
  check_prefixed "$T/out" out 2 5 200000
  # --tee 1: stdout only; stderr is the workers' own.
  rr --nproc-per-node 2 --tee 1 "$HELPER" "$T" '*=out:5'
  expect_rc 0
  check_prefixed "$T/out" out 2 5 200000
  expect_no_err "[rank"
  expect_err "err partial"
  # --tee 2: stderr only.
  rr --nproc-per-node 2 --tee=2 "$HELPER" "$T" '*=out:5'
  expect_rc 0
  ! grep -q '^\[rank' "$T/out" || fail "--tee 2 prefixed stdout"
  grep -v '^rrun: warning: OMP_NUM_THREADS is unset' "$T/err" >"$T/err.workers"
  check_prefixed "$T/err.workers" err 2 5 0
  # No --tee: the worker writes to rrun's own stdout, byte for byte as when run directly.
  rr "$HELPER" "$T" '*=out:20'
  expect_rc 0
  mkdir "$T/direct"
  RANK=0 "$HELPER" "$T/direct" '*=out:20' >"$T/direct/out" 2>"$T/direct/err"
  cmp -s "$T/out" "$T/direct/out" || fail "stdout without --tee differs from a direct run"
  cmp -s "$T/err" "$T/direct/err" || fail "stderr without --tee differs from a direct run"
  # No pipe: the worker's stdout is the very file rrun was given.
  rr sh -c 'readlink /proc/self/fd/1'
  [ "$(cat "$T/out")" = "$T/out" ] || fail "worker stdout is $(cat "$T/out"), not $T/out"
}

# The worker exits but leaves a process flooding its --tee pipe: rrun still finishes.
case_leftover_writer() {
  local t0=$(now_ms)
  timeout -s KILL 20 "$RRUN" --tee 1 sh -c 'yes & sleep 0.3' >/dev/null 2>"$T/err"
  RC=$?
  ELAPSED=$(($(now_ms) - t0))
  expect_rc 0
  expect_faster 10000
}

case_no_zombies() {
  # Ranks 0 and 1 finish early; rrun must reap them while it still waits for rank 2.
  "$RRUN" --nproc-per-node 3 "$HELPER" "$T" '0=exit:0' '1=exit:0:100' '2=exit:0:3000' \
    >"$T/out" 2>"$T/err" &
  local pid=$!
  wait_for "$T"/pid.{0,1,2}.0
  sleep 0.8
  kill -0 $pid 2>/dev/null || fail "rrun finished before rank 2"
  local zombies
  zombies=$(ps -o pid=,stat= --ppid $pid | awk '$2 ~ /^Z/')
  [ -z "$zombies" ] || fail "rrun left zombie children: $zombies"
  [ "$(ps -o pid= --ppid $pid | wc -l)" = 1 ] || fail "rrun has $(ps --ppid $pid) children"
  expect_gone "$T/pid.0.0" "$T/pid.1.0"
  wait_exit $pid
  expect_rc 0
  expect_gone "$T"/pid.*.0
}

case_restart() {
  # Rank 1 fails on every attempt: one restart, then rrun gives up with its code.
  rr --nproc-per-node 2 --max-restarts 1 --grace-period 5 "$HELPER" "$T" '*=sleep' '1=exit:3'
  expect_rc 3
  local r a
  for a in 0 1; do
    for r in 0 1; do expect_env "$T/env.$r.$a" $r $r 2 2 0 1 127.0.0.1 29500 none $a 1 1; done
    expect_content "$T/sig.0.$a" 15
  done
  [ ! -e "$T/env.0.2" ] || fail "restarted twice with --max-restarts 1"
  [ "$(grep -c 'restarting the worker group (restart 1 of 1)' "$T/err")" = 1 ] ||
    fail "restart not announced once"
  [ "$(grep -c 'rank 1 (local rank 1, pid [0-9]*) failed: exit code 3' "$T/err")" = 2 ] ||
    fail "expected one failure per attempt"
  [ "$(token_of "$T/env.0.0")" = "$(token_of "$T/env.1.1")" ] || fail "token changed on restart"
  expect_gone "$T"/pid.*.*

  # Fails only on the first attempt: the restart succeeds and so does rrun.
  rr --nproc-per-node 2 --max-restarts 2 "$HELPER" "$T" '*=failfirst:4'
  expect_rc 0
  [ -e "$T/env.1.1" ] && [ ! -e "$T/env.0.2" ] || fail "expected exactly one restart"
  # Without --max-restarts: no restart.
  rr --nproc-per-node 2 "$HELPER" "$T" '*=failfirst:4'
  expect_rc 4
  [ ! -e "$T/env.0.1" ] || fail "restarted with --max-restarts 0"
  expect_no_err restarting
}

# expect_usage PHRASE ARGS...: exit 2, one line on stderr naming the problem and --help.
expect_usage() {
  local phrase=$1
  shift
  rr "$@"
  [ "$RC" = 2 ] || fail "rrun $* exited $RC, expected 2"
  [ "$(wc -l <"$T/err")" = 1 ] || fail "rrun $*: expected one line on stderr"
  expect_err "rrun: "
  expect_err "$phrase"
  expect_err "rrun --help"
  [ ! -s "$T/out" ] || fail "rrun $* wrote to stdout"
}

case_bad_flags() {
  expect_usage "unknown option '--bogus'" --bogus "$HELPER" "$T"
  expect_usage "unknown option '--nproc=2'" --nproc=2 "$HELPER" "$T"
  expect_usage "option '--nproc-per-node' needs a value" --nproc-per-node
  expect_usage "--nproc-per-node: expected a positive integer, got 'abc'" \
    --nproc-per-node abc "$HELPER"
  expect_usage "got '0'" --nproc_per_node=0 "$HELPER"
  expect_usage "got '2x'" --nnodes 2x "$HELPER"
  expect_usage "elastic ranges are not supported" --nnodes 1:4 "$HELPER"
  expect_usage "--node-rank 2 is out of range for --nnodes 2" --nnodes 2 --node-rank 2 "$HELPER"
  expect_usage "--master-port: expected an integer from 1 to 65535, got '70000'" \
    --master-port 70000 "$HELPER"
  expect_usage "--tee: expected an integer from 0 to 3, got '4'" --tee 4 "$HELPER"
  expect_usage "--bind-to: expected 'slice', 'core' or 'none', got 'socket'" --bind-to socket "$HELPER"
  RR_BIND_TO=socket expect_usage "RR_BIND_TO: expected 'slice', 'core' or 'none', got 'socket'" "$HELPER"
  expect_usage "--max-restarts" --max-restarts -1 "$HELPER"
  expect_usage "--grace-period: expected seconds" --grace-period -1 "$HELPER"
  expect_usage "--grace-period: expected seconds" --grace-period nan "$HELPER"
  expect_usage "option '--standalone' takes no value" --standalone=1 "$HELPER"
  expect_usage "cannot be used with --nnodes 2" --standalone --nnodes 2 "$HELPER"
  expect_usage "no program to run" --nproc-per-node 2
  expect_usage "no program to run" --nproc-per-node 2 --
  RR_GRACE_PERIOD=soon expect_usage "RR_GRACE_PERIOD: expected seconds" "$HELPER"

  rr --help
  expect_rc 0
  grep -q '^usage: rrun' "$T/out" || fail "--help has no usage line"
  grep -q 'RR_JOB_TOKEN' "$T/out" || fail "--help does not explain RR_JOB_TOKEN"
  rr --version
  expect_rc 0
  grep -q '^rrun (ringreduce) [0-9]' "$T/out" || fail "--version: $(cat "$T/out")"
}

# --bind-to on this machine: among the C CPUs rrun may use (here the CPUs this script may use,
# or the first two of them under taskset when there are more, so that ranks 2 and 3 wrap
# around), in package and core order: core gives local rank k the (k mod C)-th alone; slice,
# the default (also from RR_BIND_TO), gives one worker all C, and with C <= 2 each of n >= 2
# workers the (k mod C)-th CPU when n <= C or C divides n, and leaves them all unbound
# otherwise (n=3 on 2 CPUs); none leaves every worker rrun's CPUs. Bound workers get
# RR_HOST_CPUS=C (the library cannot see from a one-CPU affinity whether its host's ranks
# outnumber its cores); unbound ones none. The plan on larger and hyperthreaded machines is
# test_rrun_bind's (rrun_bind_plan).
expand_cpus() {
  local k out=()
  for k in ${1//,/ }; do
    if [[ $k == *-* ]]; then out+=($(seq "${k%-*}" "${k#*-}")); else out+=("$k"); fi
  done
  echo "${out[*]}"
}

case_bind_to() {
  local -a cpus run=() flag envs
  local want k got mode n c key v
  cpus=($(expand_cpus "$(awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status)"))
  [ ${#cpus[@]} -ge 1 ] || fail "cannot read this process's CPUs"
  if [ ${#cpus[@]} -gt 2 ] && command -v taskset >/dev/null; then
    cpus=("${cpus[0]}" "${cpus[1]}")
    run=(taskset -c "${cpus[0]},${cpus[1]}")
  fi
  # rrun's order for two CPUs or one: package, core (its lowest hyperthread), number (-1
  # where sysfs does not say)
  cpus=($(for k in "${cpus[@]}"; do
    key=$(for f in physical_package_id thread_siblings_list; do
      v=$(grep -o '^[0-9]*' "/sys/devices/system/cpu/cpu$k/topology/$f" 2>/dev/null)
      echo "${v:--1}"
    done)
    echo $key "$k"
  done | sort -n -k1,1 -k2,2 -k3,3 | awk '{ print $3 }'))
  c=${#cpus[@]}
  local show='{ awk "/^Cpus_allowed_list/ { print \$2 }" /proc/self/status
                echo "${RR_HOST_CPUS-unset}"; } >"$0/aff.$LOCAL_RANK"'
  for mode in core4 core2 slice4 slice3 slice2 slice1 none default env_none env_core; do
    rm -f "$T"/aff.*
    flag=()
    envs=()
    n=4
    case $mode in
      core4) flag=(--bind-to core) ;;
      core2) flag=(--bind-to core); n=2 ;;
      slice4) flag=(--bind-to slice) ;;
      slice3) flag=(--bind-to slice); n=3 ;;
      slice2) flag=(--bind-to slice); n=2 ;;
      slice1) flag=(--bind-to slice); n=1 ;;
      none) flag=(--bind-to none) ;;
      env_none) envs=(RR_BIND_TO=none) ;;
      env_core) envs=(RR_BIND_TO=none); flag=(--bind-to core) ;; # the flag wins
    esac
    timeout -s KILL 30 env "${envs[@]}" "${run[@]}" "$RRUN" --standalone --nproc-per-node $n \
      "${flag[@]}" sh -c "$show" "$T" >"$T/out" 2>"$T/err"
    RC=$?
    CASE="bind_to $mode"
    expect_rc 0
    for ((k = 0; k < n; k++)); do
      case $mode in
        core* | env_core) want="${cpus[$((k % c))]}" ;;
        slice* | default)
          if [ "$n" = 1 ]; then
            want=$(printf '%s\n' "${cpus[@]}" | sort -n | xargs)
          elif [ "$n" -le "$c" ] || [ $((n % c)) = 0 ]; then
            want="${cpus[$((k % c))]}"
          else
            want=unbound
          fi ;;
        *) want=unbound ;;
      esac
      got=$(cat "$T/aff.$k" 2>/dev/null) || fail "local rank $k wrote no aff.$k"
      if [ "$want" = unbound ]; then
        want="$("${run[@]}" awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status)
unset"
      else
        want="$want
$c"
        got="$(expand_cpus "$(head -1 <<<"$got")")
$(tail -1 <<<"$got")"
      fi
      [ "$got" = "$want" ] || fail "local rank $k: CPUs and RR_HOST_CPUS '$got', expected '$want'"
    done
  done
}

# Two nodes on this host: two rrun processes (--nnodes 2, --node-rank 0 and 1, 2 workers
# each) meet at one master port and all-reduce. Without RR_JOB_TOKEN each rrun once made its
# own token and the nodes never met; now both run without one and say so. Over shared memory
# (the default for ranks on one host), over TCP, and with a token exported on both nodes.
case_two_nodes_local() {
  [ -n "$ALLREDUCE" ] && [ -x "$ALLREDUCE" ] ||
    fail "rrun_allreduce not given or not built: '$ALLREDUCE' (4th argument)"
  # A rendezvous that cannot complete fails inside the 30 s limit of each rrun.
  export RR_TIMEOUT=15
  local mode port n r want tok
  local -a pid rc
  for mode in shm tcp token; do
    port=$("$ALLREDUCE" --free-port) || skip "no usable 127.0.0.1"
    mkdir "$T/$mode"
    for n in 0 1; do
      (
        [ "$mode" = tcp ] && export RR_TRANSPORT=tcp
        [ "$mode" = token ] && export RR_JOB_TOKEN=fedcba98765432100123456789abcdef
        exec timeout -s KILL 30 "$RRUN" --nnodes 2 --node-rank $n --nproc-per-node 2 \
          --master-addr 127.0.0.1 --master-port "$port" "$ALLREDUCE" \
          >"$T/$mode/out$n" 2>"$T/$mode/err$n"
      ) &
      pid[n]=$!
    done
    for n in 0 1; do
      wait "${pid[n]}"
      rc[n]=$?
    done
    for n in 0 1; do
      cp "$T/$mode/out$n" "$T/out"
      cp "$T/$mode/err$n" "$T/err"
      RC=${rc[n]}
      CASE="two_nodes_local $mode, node $n"
      expect_rc 0
      if [ "$mode" = token ]; then tok=set; else tok=unset; fi
      want="rank $((2 * n)) of 4: all_reduce ok, RR_JOB_TOKEN $tok
rank $((2 * n + 1)) of 4: all_reduce ok, RR_JOB_TOKEN $tok"
      [ "$(sort "$T/out")" = "$want" ] || fail "output is '$(cat "$T/out")', expected '$want'"
      if [ "$mode" = token ]; then
        expect_no_err RR_JOB_TOKEN
      else
        expect_no_token_warning "127.0.0.1:$port"
      fi
    done
  done
}

# A death during the group's set-up (issue 38 item 6): under --keep-going, rank DEAD of 4 dies
# (SIGKILL) 300 ms after it started, while the others wait in the rendezvous. RR_TIMEOUT=20:
# before rrun told the rendezvous they waited all of it ("timed out after 20.0 s waiting for
# rank 3 to join the rendezvous (3 of 4 arrived)"). Now every other rank must fail within
# seconds with a message naming the dead rank and how it died.
setup_death_run() { # DEAD WHEN REPLACE
  [ -n "$SETUP_DEATH" ] && [ -x "$SETUP_DEATH" ] ||
    fail "rrun_setup_death not given or not built: '$SETUP_DEATH' (5th argument)"
  export RR_TIMEOUT=20
  local -a rep=()
  [ "$3" = 0 ] || rep=(--replace "$3")
  rr --nproc-per-node 4 --keep-going "${rep[@]}" --master-port "$(job_port)" \
    "$SETUP_DEATH" "$1" 300 "$2"
  expect_faster 5000
  expect_no_err "timed out"
  expect_err "rrun: rank $1 (local rank $1, pid "
}
expect_ranks_name() { # DEAD TEXT: every rank but DEAD failed its init with TEXT in its error
  local r
  for r in 0 1 2 3; do
    [ "$r" = "$1" ] && continue
    grep -F "rank $r: rr_init_process_group: " "$T/err" | grep -qF "$2" ||
      fail "rank $r does not say '$2': $(grep -F "rank $r: " "$T/err")"
  done
}

# Rank 3 dies before it calls init. With --replace 1 the replacement takes its place before
# the group is formed (RR_RANK_GENERATION=1) and the job's all-reduce is exact.
case_setup_death() {
  local r want=""
  setup_death_run 3 before 0
  expect_rc 1
  expect_ranks_name 3 "rank 3 died before joining the rendezvous (killed by signal SIGKILL (9), rrun says)"
  setup_death_run 3 before 1
  expect_rc 0
  expect_err "rrun: --replace: starting a replacement for rank 3 in its place"
  for r in 0 1 2 3; do
    want+="rank $r of 4: all_reduce ok (generation $([ "$r" = 3 ] && echo 1 || echo 0))"$'\n'
  done
  [ "$(sort "$T/out")" = "${want%$'\n'}" ] || fail "output is '$(cat "$T/out")', expected '$want'"
}

# Rank 0, which serves the store, dies before it does: rrun answers at the store's address in
# its place, so the others, retrying to connect, hear why instead of retrying until their
# timeout. No replacement can take a store's place; with --replace 1 the newcomer started
# for rank 0 has nobody left to join once the others failed, and is stopped.
case_setup_death_rank0() {
  setup_death_run 0 before 0
  expect_rc 1
  expect_ranks_name 0 "rank 0, which served it, died (killed by signal SIGKILL (9), rrun says)"
  setup_death_run 0 before 1
  expect_rc 1
  expect_err "rrun: --replace: starting a replacement for rank 0 (RR_GROW_JOIN=1; 1 of 1)"
  expect_err "rrun: --replace: every other worker failed, so no group is left for the 1 replacement(s) to join; stopping them"
}

# Rank 3 dies after its record is in the store, at its first connection to another rank: the
# others wait for its connections (they used to until RR_TIMEOUT) and now fail naming it.
# It had taken its seat, so no replacement takes its place: with --replace 1 the newcomer is
# stopped as above. Over TCP and shared memory.
case_setup_death_published() {
  local t
  for t in tcp auto; do
    CASE="setup_death_published RR_TRANSPORT=$t"
    export RR_TRANSPORT=$t
    setup_death_run 3 published 0
    expect_rc 1
    expect_ranks_name 3 "rank 3 died during the group's set-up, after joining the rendezvous (killed by signal SIGKILL (9), rrun says)"
  done
  setup_death_run 3 published 1
  expect_rc 1
  expect_err "rrun: --replace: starting a replacement for rank 3 (RR_GROW_JOIN=1; 1 of 1)"
  expect_err "no group is left for the 1 replacement(s) to join; stopping them"
  unset RR_TRANSPORT
}

# Only the job token makes a notice rrun's word. Rank 0 of 2 started by hand waits for rank 1;
# a notice that rank 1 died, MAC'd with another token, is ignored (rank 0 times out as
# without it, and warns), and a process claiming to be rank 1's replacement
# (RR_RANK_GENERATION=1) without rrun's word is refused at once. With the job's token the
# same notice ends rank 0's wait at once.
case_setup_death_forged() {
  [ -n "$FORGE" ] && [ -x "$FORGE" ] ||
    fail "rrun_notice_forge not given or not built: '$FORGE' (6th argument)"
  local p0 rc1 t0
  export MASTER_ADDR=127.0.0.1 MASTER_PORT WORLD_SIZE=2 RR_TIMEOUT=1.5 \
    RR_JOB_TOKEN=00112233445566778899aabbccddeeff
  MASTER_PORT=$(job_port)
  t0=$(now_ms)
  RANK=0 "$SETUP_DEATH" 9 0 >"$T/out" 2>"$T/err" &
  p0=$!
  "$FORGE" 1 not-the-job-token "killed by a forger" || fail "the forger's notice was not written"
  RANK=1 RR_RANK_GENERATION=1 "$SETUP_DEATH" 9 0 >/dev/null 2>"$T/err1"
  rc1=$?
  wait $p0
  RC=$?
  ELAPSED=$(($(now_ms) - t0))
  expect_rc 1
  expect_slower 1400
  expect_err "timed out after 1.5 s waiting for rank 1 to join the rendezvous (1 of 2 arrived)"
  expect_err "ignoring a notice in the store that rank 1 died: it does not carry this job's token"
  [ "$rc1" = 1 ] && grep -qF "RR_RANK_GENERATION=1, but the store holds no word from rrun" \
    "$T/err1" || fail "a replacement without rrun's word: exit $rc1, $(cat "$T/err1")"
  # The same notice with the job's token: rrun's word, believed at once.
  MASTER_PORT=$(job_port)
  t0=$(now_ms)
  RANK=0 "$SETUP_DEATH" 9 0 >"$T/out" 2>"$T/err" &
  p0=$!
  "$FORGE" 1 "$RR_JOB_TOKEN" "killed by a test" || fail "the genuine notice was not written"
  wait $p0
  RC=$?
  ELAPSED=$(($(now_ms) - t0))
  expect_rc 1
  expect_faster 1400
  expect_err "rank 1 died before joining the rendezvous (killed by a test, rrun says)"
}

fn="case_$CASE"
declare -F "$fn" >/dev/null || { echo "unknown case '$CASE'" >&2; exit 1; }
"$fn"
echo "PASS($CASE)"
