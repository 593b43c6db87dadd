#!/usr/bin/env bash
# A/B two builds of ringreduce on this machine: the same all_reduce_perf runs through each
# build's rrun, interleaved (A then B, B then A on alternate rounds) so that drift on the
# machine hits both alike; prints the median out-of-place time per case and the ratio B/A.
#   bench/ab.sh BUILD_A BUILD_B        (build dirs holding bin/rrun and bin/all_reduce_perf)
# Knobs: ROUNDS=5, NPS="2 4", TRANSPORTS="shm tcp", SIZES="8 8K 1M 64M".
set -euo pipefail
a=$1 b=$2
rounds=${ROUNDS:-5}
nps=${NPS:-2 4}
transports=${TRANSPORTS:-shm tcp}
sizes=${SIZES:-8 8K 1M 64M}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bytes() {
  case $1 in *K) echo $(( ${1%K} * 1024 ));; *M) echo $(( ${1%M} * 1048576 ));; *) echo "$1";; esac
}
iters() { local n; n=$(bytes "$1"); if [ "$n" -ge 16777216 ]; then echo 5; elif [ "$n" -ge 1048576 ]; then echo 50; else echo 500; fi; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
once() { # build np transport size -> out-of-place time in us, read from the tool's JSON
  local build=$1 np=$2 tr=$3 s=$4 env=() json
  [ "$tr" = tcp ] && env=(RR_TRANSPORT=tcp)
  # A new name for each run: -J never overwrites a file. (perf_json.py also reads the JSON
  # of builds from before nccl-tests' document, so an older build A works.)
  json=$(mktemp -u "$tmp/run.XXXXXXXX").json
  env "${env[@]}" timeout 300 "$build/bin/rrun" --standalone --nproc-per-node "$np" \
    "$build/bin/all_reduce_perf" -b "$s" -e "$s" -n "$(iters "$s")" -w 5 -c 0 -J "$json" \
    >"$json.log" 2>&1 || { cat "$json.log" >&2; return 1; }
  python3 "$here/perf_json.py" time "$json"
}
printf '%-4s %-4s %-6s %12s %12s %8s\n' np tr size "A us" "B us" "B/A"
for np in $nps; do for tr in $transports; do for s in $sizes; do
  for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="a b"; else order="b a"; fi
    for w in $order; do
      build=$a; [ "$w" = b ] && build=$b
      t=$(once "$build" "$np" "$tr" "$s"); echo "$t" >> "$tmp/$np.$tr.$s.$w"
    done
  done
  ma=$(sort -g "$tmp/$np.$tr.$s.a" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  mb=$(sort -g "$tmp/$np.$tr.$s.b" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  printf '%-4s %-4s %-6s %12s %12s %8.3f\n' "$np" "$tr" "$s" "$ma" "$mb" "$(awk -v x="$ma" -v y="$mb" 'BEGIN{print y/x}')"
done; done; done
