#!/usr/bin/env bash
# all_reduce_perf over InfiniBand between two hosts, with the bus bandwidth set against the
# link rate the port reports (ibv_query_port, as logged by transport/ib/dev.c). Written for
# a real RDMA cluster; it has never run on one (docs/ib.md): here it ran only on the fake
# verbs library, two "nodes" on one machine.
#
# On each of the two hosts, the same build in the same place:
#   bench/ib/run.sh --node-rank 0 --master-addr HOST0 [--nproc-per-node 1] [--bin build/bin]
#   bench/ib/run.sh --node-rank 1 --master-addr HOST0 ...
# Node 0 writes <out>/summary.md (one row per size: busbw, and busbw as a share of the link),
# <out>/all_reduce.json (all_reduce_perf -J) and keeps every rank's RR_DEBUG=INFO log there.
#
# RR_TRANSPORT=ib: every pair over verbs, or the job fails naming the rank without a port
# (use --nproc-per-node 1 to measure the link alone: ranks on one host would use verbs too,
# through the NIC's loopback). Other RR_* variables (RR_IB_HCA, RR_IB_GID_INDEX,
# RR_SEG_BYTES, RR_SLOTS) pass through.
set -euo pipefail

node_rank="" master="" nproc=1 port=29500
bin="$(cd "$(dirname "$0")/../.." && pwd)/build/bin"
out="bench/ib/results/$(date -u +%Y%m%d-%H%M%S)"
minb=1M maxb=1G
while [ $# -gt 0 ]; do
  case "$1" in
    --node-rank) node_rank=$2; shift 2 ;;
    --master-addr) master=$2; shift 2 ;;
    --master-port) port=$2; shift 2 ;;
    --nproc-per-node) nproc=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --minbytes) minb=$2; shift 2 ;;
    --maxbytes) maxb=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$node_rank" ] && [ -n "$master" ] || { echo "need --node-rank and --master-addr" >&2; exit 2; }
[ -x "$bin/rrun" ] && [ -x "$bin/all_reduce_perf" ] || { echo "no rrun/all_reduce_perf in $bin (--bin)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

export RR_TRANSPORT=ib RR_DEBUG=INFO RR_DEBUG_SUBSYS=INIT
export RR_DEBUG_FILE="$out/rr.%h.%p.log"
# Every rank gets -J (the options must match: rank 0 alone writes the file).
json=(-J "$out/all_reduce.json")
rm -f "$out/all_reduce.json" # -J never overwrites: a rerun into $out would write .json.0
"$bin/rrun" --nnodes 2 --node-rank "$node_rank" --nproc-per-node "$nproc" \
  --master-addr "$master" --master-port "$port" \
  "$bin/all_reduce_perf" -b "$minb" -e "$maxb" -f 2 -n 20 -w 5 -c 1 "${json[@]}" | tee "$out/node$node_rank.txt"
[ "$node_rank" = 0 ] || exit 0

# The link: "ib: using <dev> port <p> (<kind>, ..., MTU <m>, <rate> Gbit/s)" from each rank.
python3 - "$out" "$(cd "$(dirname "$0")/.." && pwd)" <<'PY'
import glob, re, sys
out = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import perf_json  # bench/perf_json.py: nccl-tests' JSON document
rates, ports = [], set()
for f in glob.glob(out + "/rr.*.log"):
    for line in open(f, errors="replace"):
        m = re.search(r"ib: using (\S+) port (\d+) \(([^,]+),.*MTU (\d+), ([0-9.]+) Gbit/s\)", line)
        if m:
            ports.add(f"{m.group(1)}:{m.group(2)} {m.group(3)} MTU {m.group(4)}")
            rates.append(float(m.group(5)))
        if "ib: not used" in line:
            print("a rank found no usable port:", line.strip())
d = perf_json.load(out + "/all_reduce.json")
link = min(rates) / 8 if rates else 0.0  # GB/s, signalling rate of the slowest port
rows = d["results"]
with open(out + "/summary.md", "w") as s:
    s.write(f"# all_reduce over ib, {len(d['config']['devices'])} ranks\n\n")
    s.write(f"ports: {', '.join(sorted(ports)) or '?'}; link {link * 8:.1f} Gbit/s = {link:.2f} GB/s "
            "(signalling rate: data rate is lower by the line encoding, 64b/66b from FDR on)\n\n")
    s.write("| bytes | time out-of-place (us) | busbw (GB/s) | of link |\n|---|---|---|---|\n")
    for r in rows:
        o = perf_json.half(r)
        bw = o.busbw
        s.write(f"| {r['size']} | {o.time_us:.1f} | {bw:.2f} | "
                f"{(100 * bw / link) if link else 0:.0f}% |\n")
print(open(out + "/summary.md").read())
PY
