#!/usr/bin/env bash
# bench/compare: ringreduce against Open MPI, Gloo and a bare socket ring, in one run on this
# machine. float32 sum all-reduce, 8 B ... 256 MiB, world sizes 2 and 4.
#
#   bash bench/compare/run.sh            # installs what is missing, builds, runs, writes
#                                        # bench/compare/results/<date>/{table.md,busbw.png,...}
#
# Systems (one process per rank on this host; Open MPI is forced to its ob1 PML so that the
# BTL chosen is the one used — otherwise UCX may take over):
#   mpi-tcp         Open MPI, --mca btl tcp,self, default settings
#   mpi-tcp-tuned   the same with glibc's allocator tuned (-x MALLOC_MMAP_MAX_=0
#                   -x MALLOC_TRIM_THRESHOLD_=-1): Open MPI allocates a message-sized
#                   temporary per call, which glibc otherwise maps fresh above 32 MiB
#   mpi-tcp-tuned-algN   mpi-tcp-tuned with its allreduce algorithm forced to N (coll tuned's
#                   numbering: 1 linear, 2 nonoverlapping, 3 recursive doubling, 4 ring,
#                   5 segmented ring, 6 Rabenseifner); not in the default set
#   mpi-tcp-tuned-inplace, mpi-shm-tuned-inplace   the tuned systems with MPI_IN_PLACE, to set
#                   beside rr-tcp-inplace / rr-shm-inplace (torch's all_reduce is in place);
#                   not in the default set
#   mpi-shm         Open MPI, --mca btl vader,self (shared memory), default settings
#   mpi-shm-tuned   the same with the allocator tuned
#   gloo-ring, gloo-ring_chunked   Gloo's AllreduceRing / AllreduceRingChunked over its TCP
#                   transport (Debian libgloo-dev)
#   socket-ring     bench/compare/socket_ring.c: a bare TCP ring, no library
#   socket-ring-mt  the same with a sender thread beside the receiving one (SR_THREADS=1);
#                   the faster of the two is the ceiling for TCP
#   rr-tcp          ringreduce all_reduce_perf, RR_TRANSPORT=tcp, out of place
#   rr-shm          ringreduce all_reduce_perf, default transport (shared memory), out of place
#   rr-tcp-unbound, rr-shm-unbound   the same launched with rrun --bind-to none (rrun binds
#                   each worker to a share of the CPUs by default; not in the default set)
# Gloo and the socket rings are launched by rrun too, so they get its default binding; Open MPI
# gets mpirun's (bound to a core at np <= 2, unbound when oversubscribed).
# (ringreduce's in-place figures are kept as rr-tcp-inplace / rr-shm-inplace.)
#
# Method: for every round, world size and size group, every system runs once, one after the
# other, the order rotated each round, so drift on the machine hits all alike. Small sizes
# (8 B ... 128 KiB, x4) run as one group (1000 iterations each: a launch of 200 calls of a few
# µs is over within one scheduler period, and which ranks happen to share a core then decides
# its figure); 512 KiB and up one size per
# launch with fewer iterations (5 at 128 and 256 MiB); every group ROUNDS times (default 5:
# a median of 3 is decided by one launch), so latency is seen across launches too. The table
# shows the median, the spread of the rounds, and flags a round far from both its neighbours
# (stats.py). Each launch also records the 1-minute load average at its start and how much
# CPU other work on the machine used meanwhile (runs.log, last two fields of results.txt; the
# CPU figure counts interrupt time, so loopback TCP launches read a few % even on a quiet
# machine). Every harness times like nccl-tests
# (warm-up, barrier, back-to-back calls, mean per rank, max over ranks) and checks the sum.
#
# Environment: NPS ("2 4"), ROUNDS (5), SIZES_LARGE (the per-launch sizes), OUT (the result
# directory), BUILD (ringreduce build dir, default build-cmp; configured and built when
# missing), NO_INSTALL=1 (skip apt-get), ONLY_LARGE=1 (skip the small-size group: a rerun of
# the large sizes), SYSTEMS (a subset, space separated).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

NPS=${NPS:-"2 4"}
ROUNDS=${ROUNDS:-5}
SIZES_SMALL="8 128K"                       # one launch: -b 8 -e 128K -f 4
SIZES_LARGE=${SIZES_LARGE:-"512K 2M 4M 8M 32M 128M 256M"}
SYSTEMS=${SYSTEMS:-"mpi-tcp mpi-tcp-tuned mpi-shm mpi-shm-tuned gloo-ring gloo-ring_chunked socket-ring socket-ring-mt rr-tcp rr-shm"}
BUILD=${BUILD:-build-cmp}
date_tag=$(date +%Y-%m-%d)
OUT=${OUT:-$here/results/$date_tag}
bin=$here/.bin                              # harness binaries (git-ignored, bench/compare/.gitignore)
mkdir -p "$OUT" "$bin"

log() { printf '[compare %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---------------------------------------------------------------------------------------
# 1. Packages (Debian/Ubuntu). Gloo: Debian ships libgloo-dev (headers + libgloo.so).
need=()
command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
[ -f /usr/include/gloo/allreduce_ring.h ] || need+=(libgloo-dev)
command -v gnuplot >/dev/null 2>&1 || need+=(gnuplot-nox)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ] && [ -z "${NO_INSTALL:-}" ]; then
  sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  log "installing: ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# ---------------------------------------------------------------------------------------
# 2. Builds: ringreduce (its own build dir) and our three harnesses.
if [ ! -x "$BUILD/bin/all_reduce_perf" ] || [ ! -x "$BUILD/bin/rrun" ]; then
  log "building ringreduce in $BUILD"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" -j2 --target all_reduce_perf rrun >/dev/null
fi
RRUN=$root/$BUILD/bin/rrun
PERF=$root/$BUILD/bin/all_reduce_perf
CFLAGS="-O2 -march=native -Wall -Wextra"
log "building harnesses in $bin"
gcc $CFLAGS -std=c11 -pthread -o "$bin/socket_ring" "$here/socket_ring.c"
mpicc $CFLAGS -std=c11 -D_POSIX_C_SOURCE=200809L -o "$bin/mpi_allreduce" "$here/mpi_allreduce.c"
g++ $CFLAGS -std=c++17 -o "$bin/gloo_allreduce" "$here/gloo_allreduce.cc" -lgloo -lpthread

# ---------------------------------------------------------------------------------------
# 3. The run.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca pml ob1)
TUNED=(-x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=-1)
results=$OUT/results.txt     # RESULT lines, each followed by its round
runlog=$OUT/runs.log         # every launch: the command, load average, anything else printed
if [ -n "${ONLY_LARGE:-}" ] && [ -s "$results" ]; then
  # A rerun of the large sizes: the earlier run's files are kept aside as results.runK.txt,
  # runs.runK.log, env.runK.txt; its small sizes are carried over, the large sizes come from
  # this run.
  k=1; while [ -e "$OUT/results.run$k.txt" ]; do k=$((k + 1)); done
  mv "$results" "$OUT/results.run$k.txt"
  mv "$runlog" "$OUT/runs.run$k.log"
  cp "$OUT/env.txt" "$OUT/env.run$k.txt"
  large_bytes=" "
  for s in $SIZES_LARGE; do large_bytes+="$(numfmt --from=iec "$s") "; done
  awk -v L="$large_bytes" '{ if (index(L, " " $4 " ") == 0) print }' \
    "$OUT/results.run$k.txt" >"$results"
  echo "# small sizes carried over from runs.run$k.log (and before); large sizes rerun below" >"$runlog"
else
  : >"$results"
  : >"$runlog"
fi

{
  echo "date: $(date -Is)"
  echo "host: $(hostname)  kernel: $(uname -r)"
  echo "cpu: $(nproc) x $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "memory: $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "os: $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "ringreduce: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)') build $BUILD"
  echo "open mpi: $(dpkg-query -W -f='${Version}' openmpi-bin 2>/dev/null)"
  echo "gloo: $(dpkg-query -W -f='${Version}' libgloo-dev 2>/dev/null)"
  echo "gcc: $(gcc -dumpfullversion)"
  echo "rounds: $ROUNDS  nps: $NPS  large sizes: $SIZES_LARGE${ONLY_LARGE:+ (rerun of the large sizes; small sizes from the run in the newest env.runK.txt)}"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/env.txt"

# Disturbance: busy CPU ticks of the whole machine, and those of this script's finished
# children (every launch is waited for, so its ranks' CPU time lands in our cutime/cstime).
HZ=$(getconf CLK_TCK)
busy_ticks() { awk '/^cpu /{ print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
child_ticks() { awk '{ print $16 + $17 }' /proc/$$/stat; }

# iterations and warm-up per size (the same for every system)
iters_for() { case $1 in 8|128K) echo 1000;; 512K|2M) echo 50;; 4M|8M) echo 20;; 32M) echo 10;; *) echo 5;; esac; }
warm_for() { case $1 in 8|128K) echo 20;; 512K|2M|4M|8M) echo 2;; *) echo 1;; esac; }

# one launch: system np minsize maxsize round
launch() {
  local sys=$1 np=$2 b=$3 e=$4 round=$5 n w out rc=0
  n=$(iters_for "$b"); w=$(warm_for "$b")
  local h=(-b "$b" -e "$e" -f 4 -n "$n" -w "$w")
  local cmd=()
  case $sys in
    mpi-tcp) cmd=("${MPIRUN[@]}" -np "$np" --mca btl tcp,self "$bin/mpi_allreduce" "${h[@]}" -s "$sys");;
    mpi-tcp-tuned) cmd=("${MPIRUN[@]}" -np "$np" --mca btl tcp,self "${TUNED[@]}" "$bin/mpi_allreduce" "${h[@]}" -s "$sys");;
    mpi-tcp-tuned-inplace) cmd=("${MPIRUN[@]}" -np "$np" --mca btl tcp,self "${TUNED[@]}" "$bin/mpi_allreduce" "${h[@]}" -I -s "$sys");;
    mpi-shm-tuned-inplace) cmd=("${MPIRUN[@]}" -np "$np" --mca btl vader,self "${TUNED[@]}" "$bin/mpi_allreduce" "${h[@]}" -I -s "$sys");;
    mpi-tcp-tuned-alg[0-9]*)
      cmd=("${MPIRUN[@]}" -np "$np" --mca btl tcp,self "${TUNED[@]}" --mca coll_tuned_use_dynamic_rules 1
           --mca coll_tuned_allreduce_algorithm "${sys#mpi-tcp-tuned-alg}" "$bin/mpi_allreduce" "${h[@]}" -s "$sys");;
    mpi-shm) cmd=("${MPIRUN[@]}" -np "$np" --mca btl vader,self "$bin/mpi_allreduce" "${h[@]}" -s "$sys");;
    mpi-shm-tuned) cmd=("${MPIRUN[@]}" -np "$np" --mca btl vader,self "${TUNED[@]}" "$bin/mpi_allreduce" "${h[@]}" -s "$sys");;
    gloo-ring|gloo-ring_chunked)
      local store; store=$(mktemp -d /tmp/gloo-store.XXXXXX)
      cmd=("$RRUN" --standalone --nproc-per-node "$np" env GLOO_STORE="$store" "$bin/gloo_allreduce" -a "${sys#gloo-}" "${h[@]}");;
    socket-ring|socket-ring-mt)
      cmd=("$RRUN" --standalone --nproc-per-node "$np" env SR_THREADS=$([ "$sys" = socket-ring-mt ] && echo 1 || echo 0)
           SR_PORT=$((20000 + RANDOM % 20000)) "$bin/socket_ring" "${h[@]}");;
    rr-tcp) cmd=("$RRUN" --standalone --nproc-per-node "$np" env RR_TRANSPORT=tcp "$PERF" "${h[@]}" -a 3 -c 1);;
    rr-shm) cmd=("$RRUN" --standalone --nproc-per-node "$np" "$PERF" "${h[@]}" -a 3 -c 1);;
    rr-tcp-unbound) cmd=("$RRUN" --standalone --nproc-per-node "$np" --bind-to none env RR_TRANSPORT=tcp "$PERF" "${h[@]}" -a 3 -c 1);;
    rr-shm-unbound) cmd=("$RRUN" --standalone --nproc-per-node "$np" --bind-to none "$PERF" "${h[@]}" -a 3 -c 1);;
    *) log "unknown system $sys"; return 1;;
  esac
  # ringreduce's tools write their figures as JSON too (-J, nccl-tests' document), which is
  # read instead of their table; the files stay in json/ beside the results.
  local json=
  if [[ $sys == rr-* ]]; then
    mkdir -p "$OUT/json"
    json=$OUT/json/round$round.np$np.$sys.$b.json
    rm -f "$json" # -J never overwrites: it would write $json.0 instead
    cmd+=(-J "$json")
  fi
  echo "## round $round np $np $sys $b..$e  load $(cut -d' ' -f1 /proc/loadavg)  $(date +%T)" >>"$runlog"
  echo "\$ ${cmd[*]//$root\//}" >>"$runlog"
  local b0 c0 t0 b1 c1 t1 other load
  load=$(cut -d' ' -f1 /proc/loadavg)
  b0=$(busy_ticks); c0=$(child_ticks); t0=$(date +%s%N)
  out=$(timeout 600 "${cmd[@]}" 2>&1) || rc=$?
  b1=$(busy_ticks); c1=$(child_ticks); t1=$(date +%s%N)
  # CPU used by anything but this launch, as % of the machine during it (0: a quiet machine)
  other=$(awk -v b=$((b1 - b0)) -v c=$((c1 - c0)) -v w=$((t1 - t0)) -v n="$(nproc)" -v hz="$HZ" \
    'BEGIN { o = (b - c) / hz / (w / 1e9 * n) * 100; if (o < 0) o = 0; printf "%.0f", o }')
  echo "other CPU during this launch: $other%" >>"$runlog"
  [ -n "${store:-}" ] && rm -rf "$store"
  if [[ $sys == rr-* ]]; then
    # The JSON -> RESULT lines (out of place, and in place as <sys>-inplace); the table is
    # left out of runs.log (the JSON has it all), anything else the run printed is kept.
    local res=""
    if [ -s "$json" ]; then
      res=$(python3 "$root/bench/perf_json.py" results "$sys" "$np" "$json" 2>&1) || true
    fi
    out=$(awk '/^#/ || /^ *[0-9]+ +[0-9]+ / { next } { print }' <<<"$out")
    out+=$'\n'"$res"
  fi
  grep -v '^RESULT' <<<"$out" | grep -v 'OMP_NUM_THREADS' >>"$runlog" || true
  grep '^RESULT' <<<"$out" | sed "s/\$/ $round $other $load/" >>"$results" || true
  if [ $rc -ne 0 ]; then
    echo "!! exit status $rc" >>"$runlog"
    log "$sys np=$np $b..$e failed (status $rc), see $runlog"
  fi
  return 0
}

read -r -a systems <<<"$SYSTEMS"
ns=${#systems[@]}
start=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
  for np in $NPS; do
    groups=()
    # every group every round (the small sizes too: issue 27 asks how latency moves between
    # launches)
    if [ -z "${ONLY_LARGE:-}" ]; then groups+=("8:128K"); fi
    for s in $SIZES_LARGE; do groups+=("$s:$s"); done
    for g in "${groups[@]}"; do
      b=${g%%:*}; e=${g##*:}
      log "round $round/$ROUNDS np=$np size $b${e:+..$e}"
      for k in $(seq 0 $((ns - 1))); do
        launch "${systems[$(((k + round - 1) % ns))]}" "$np" "$b" "$e" "$round"
      done
    done
  done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)  duration: $(( $(date +%s) - start )) s" >>"$OUT/env.txt"

# ---------------------------------------------------------------------------------------
# 4. Table and plot.
python3 "$here/table.py" "$OUT"
(cd "$OUT" && gnuplot busbw.gp) || log "gnuplot failed; busbw.png not made"
rm -f "$OUT"/busbw_*.dat.tmp
cat "$OUT/table.md"
log "done in $(( $(date +%s) - start )) s: $OUT/table.md, $OUT/busbw.png"
