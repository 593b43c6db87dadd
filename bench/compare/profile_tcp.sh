#!/usr/bin/env bash
# bench/compare/profile_tcp.sh: where the time of a TCP all-reduce goes, per call and per rank,
# for ringreduce (RR_TRANSPORT=tcp), the two bare socket rings and Open MPI tuned (issue 27).
#
#   bash bench/compare/profile_tcp.sh            # NP=2 SIZE=256M; after bench/compare/run.sh
#   NP=4 bash bench/compare/profile_tcp.sh       # (it uses run.sh's builds: build-cmp, .bin)
#
# Each system runs twice, with N1 and N2 timed calls (5 and 25), every rank under `perf stat`
# (system calls entered, context switches, migrations, CPU time in user and kernel mode); the
# difference of the two runs divided by the calls between them is the cost of one call,
# without start-up, data fill and checks. all_reduce_perf runs its -n calls twice (out of
# place, then in place), which the division counts. Then one `perf record -e cpu-clock` of
# each system's rank 0 (N2 calls) gives the share of its samples per symbol; the data fill
# of the harnesses is listed, so it can be set aside. Prints a table; raw files under $OUT.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
NP=${NP:-2}
SIZE=${SIZE:-256M}
N1=${N1:-5}
N2=${N2:-25}
SYSTEMS=${SYSTEMS:-"socket-ring socket-ring-mt rr-tcp mpi-tcp-tuned"}
BUILD=${BUILD:-build-cmp}
OUT=${OUT:-$(mktemp -d /tmp/profile_tcp.XXXXXX)}
mkdir -p "$OUT"
bin=$here/.bin
for f in "$bin/socket_ring" "$bin/mpi_allreduce" "$BUILD/bin/all_reduce_perf" "$BUILD/bin/rrun"; do
  [ -x "$f" ] || { echo "missing $f: run bench/compare/run.sh first" >&2; exit 1; }
done
command -v perf >/dev/null || { echo "perf not installed (linux-perf)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EVENTS=raw_syscalls:sys_enter,context-switches,cpu-migrations,task-clock,user_time,system_time

# one launch: system, calls, the per-rank tool (a command prefix reading $RANK)
launch() {
  local sys=$1 n=$2 tool=$3 h="-b $SIZE -e $SIZE -n $2 -w 1"
  local port=$((20000 + RANDOM % 12000))
  case $sys in
    socket-ring|socket-ring-mt)
      local t=0; [ "$sys" = socket-ring-mt ] && t=1
      "$BUILD/bin/rrun" --standalone --nproc-per-node "$NP" sh -c \
        "SR_THREADS=$t SR_PORT=$port exec $tool $bin/socket_ring $h";;
    rr-tcp)
      RR_TRANSPORT=tcp "$BUILD/bin/rrun" --standalone --nproc-per-node "$NP" sh -c \
        "exec $tool $BUILD/bin/all_reduce_perf $h -a 3 -c 0";;
    mpi-tcp-tuned)
      mpirun --allow-run-as-root --oversubscribe --mca pml ob1 -np "$NP" --mca btl tcp,self \
        -x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=-1 sh -c \
        "RANK=\$OMPI_COMM_WORLD_RANK; exec $tool $bin/mpi_allreduce $h";;
    *) echo "unknown system $sys" >&2; return 1;;
  esac >"$OUT/$sys.$n.log" 2>&1
}

for sys in $SYSTEMS; do
  for n in "$N1" "$N2"; do
    launch "$sys" "$n" "perf stat -x, -e $EVENTS -o $OUT/\$RANK.$sys.$n.stat"
  done
  launch "$sys" "$N2" "perf record -q -e cpu-clock -o $OUT/\$RANK.$sys.data"
  perf report -q -i "$OUT/0.$sys.data" --no-children --sort sym --percent-limit 2 \
    --stdio 2>/dev/null | sed 's/ \+/ /g' >"$OUT/$sys.report" || true
done

python3 - "$OUT" "$NP" "$N1" "$N2" "$SIZE" $SYSTEMS <<'PY'
import sys
out, np_, n1, n2, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
systems = sys.argv[6:]

def read(path):
    d = {}
    for line in open(path):
        p = line.strip().split(",")
        if len(p) > 3 and not line.startswith("#"):
            try:
                d[p[2]] = float(p[0])
            except ValueError:
                pass
    return d

print(f"np={np_}, {size} float32 sum, per call per rank (mean over ranks; "
      f"perf stat of {n2} calls minus {n1})\n")
print("| system | CPU ms | of it kernel ms | system calls | context switches | migrations |")
print("|---|---|---|---|---|---|")
for s in systems:
    calls = (n2 - n1) * (2 if s == "rr-tcp" else 1)  # all_reduce_perf: out of place + in place
    tot = {}
    for r in range(np_):
        a, b = read(f"{out}/{r}.{s}.{n1}.stat"), read(f"{out}/{r}.{s}.{n2}.stat")
        for k in b:
            tot[k] = tot.get(k, 0.0) + (b[k] - a.get(k, 0.0)) / calls / np_
    print(f"| {s} | {tot.get('task-clock', 0):.1f} | {tot.get('system_time', 0) / 1e6:.1f} | "
          f"{tot.get('raw_syscalls:sys_enter', 0):.0f} | {tot.get('context-switches', 0):.0f} | "
          f"{tot.get('cpu-migrations', 0):.1f} |")
print()
for s in systems:
    print(f"rank 0 of {s}, share of cpu-clock samples (>= 2%):")
    try:
        print(open(f"{out}/{s}.report").read().rstrip() or "  (no samples)")
    except OSError:
        print("  (no report)")
    print()
print(f"raw: {out}")
PY
