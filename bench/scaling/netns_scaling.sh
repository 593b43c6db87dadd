#!/usr/bin/env bash
# Scaling on simulated hosts: does the ring's busbw stay at the link rate as hosts are
# added, while a parameter server (RR_ALGO=star) falls like 1/N?
#
# Each host is a network namespace with one veth link to a bridge in a "switch" namespace
# (nothing is added to the caller's namespace). Both directions of every host's link are
# shaped to --rate with tbf: the host side's egress (upload) and the bridge side's egress
# (download). With --delay, a netem child adds that one-way delay in each direction (when the
# kernel has sch_netem; otherwise the script says so and runs without one).
#
#   host i:  eth0 10.97.0.(i+1)/24 --veth-- h<i> on br0 (switch namespace)
#
# For every N in --hosts and every algorithm in --algos it starts one rrun per namespace
# (--nnodes N --node-rank i --master-addr 10.97.0.1 --nproc-per-node 1) running
# all_reduce_perf over TCP, takes busbw from rank 0's JSON (-J; -a 3: the slowest rank's
# time counts) and writes <out>/scaling.md, <out>/scaling.dat and
# <out>/scaling.png (gnuplot), with each run's output under <out>/raw/.
#
#   bench/scaling/netns_scaling.sh [--rate 1gbit] [--delay 0.1ms] [--size 64M] [--iters 3]
#       [--warmup 1] [--hosts "2 3 4 6 8"] [--algos "ring star"] [--bin build/bin]
#       [--out bench/scaling/results/DATE] [--burst BYTES] [--mtu 1500] [--sockbuf BYTES]
#       [--label TEXT] [--timeout S] [--check 1|0]
#
# Needs root, ip (iproute2) and tc; gnuplot for the plot (installed with apt-get when
# missing and possible). Namespaces and the bridge are removed on exit, also on failure or
# Ctrl-C. Exit status: 0 done, 1 a run failed, 77 cannot make namespaces here.
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

rate=1gbit delay=0.1ms size=64M iters=3 warmup=1 hosts="2 3 4 6 8" algos="ring star"
bin="$root/build/bin" out="" burst="" sockbuf="" label="" run_timeout=900 mtu=1500 check=1
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --algos) algos=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --burst) burst=$2; shift 2 ;;
    --mtu) mtu=$2; shift 2 ;;
    --check) check=$2; shift 2 ;;
    --sockbuf) sockbuf=$2; shift 2 ;;
    --label) label=$2; shift 2 ;;
    --timeout) run_timeout=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown option $1" >&2; usage 2 >&2 ;;
  esac
done

skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || skip "not root (network namespaces need CAP_SYS_ADMIN)"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
command -v tc >/dev/null 2>&1 || skip "no tc command (iproute2)"
command -v python3 >/dev/null 2>&1 || fail "python3 is needed to read the JSON results"
bin=$(cd "$bin" 2>/dev/null && pwd) || fail "no binary directory $bin"
perf="$bin/all_reduce_perf" rrun="$bin/rrun"
[ -x "$perf" ] && [ -x "$rrun" ] || fail "need $perf and $rrun (build first)"

# Rate in bits/s, from tc's syntax (bit kbit mbit gbit, SI as tc reads them).
rate_bps=$(python3 - "$rate" <<'EOF'
import re, sys
m = re.fullmatch(r'([0-9.]+)\s*([kmgt]?)bit', sys.argv[1].lower())
if not m: sys.exit(1)
print(int(float(m.group(1)) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9, 't': 1e12}[m.group(2)]))
EOF
) || fail "--rate must be like 100mbit or 1gbit, got $rate"
# Token bucket: 2 ms at the rate, at least 64 KiB. A smaller bucket costs bandwidth and CPU
# (at 1 Gbit/s with 62.5 KB, two bulk TCP streams, one each way, got 0.088-0.11 GB/s each
# and kept 70% of two cores busy; with 250 KB 0.1195 GB/s each, the TCP ceiling, and 9%).
# Over a transfer of S bytes the bucket can add at most burst/S to the measured rate.
[ -n "$burst" ] || burst=$(( rate_bps / 8 / 500 > 65536 ? rate_bps / 8 / 500 : 65536 ))

stamp=$(date +%Y-%m-%d)
[ -n "$out" ] || out="$here/results/$stamp"
mkdir -p "$out/raw" || fail "cannot make $out"
out=$(cd "$out" && pwd)

p="rrsc$$"             # unique per run: parallel runs never share a namespace name
sw="${p}sw"
made=()
pids=()
cleanup() {
  local pid ns
  # Every process left in one of our namespaces is ours (rrun, its worker, a probe): ask
  # once, then kill. (ip netns exec execs timeout, which leads its own process group; rrun
  # starts its worker in another, so killing the recorded pids alone would leave orphans.)
  for ns in "${made[@]}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -TERM 2>/dev/null; done
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done
  sleep 1
  for ns in "${made[@]}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null; done
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null; done
  wait 2>/dev/null
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

maxn=0
for n in $hosts; do [ "$n" -gt "$maxn" ] && maxn=$n; done
[ "$maxn" -ge 2 ] || fail "--hosts needs a size of at least 2"

# ---- the network: maxn hosts on one bridge; a run with N hosts uses hosts 0..N-1 ----
err=$(ip netns add "$sw" 2>&1) || skip "ip netns add failed: $err"
made+=("$sw")
ip -n "$sw" link set lo up || fail "switch lo"
ip -n "$sw" link add br0 type bridge || fail "bridge"
ip -n "$sw" link set br0 up || fail "bridge up"

# shape <ns> <dev>: tbf at the rate, and a netem delay under it when asked and possible.
netem_ok=1
shape() {
  local ns=$1 dev=$2
  # A queue of 20 ms at the rate: deep enough that TCP never sees a drop at these RTTs.
  tc -n "$ns" qdisc add dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" latency 20ms ||
    fail "tc tbf on $dev in $ns"
  if [ -n "$delay" ] && [ "$delay" != 0 ] && [ "$netem_ok" = 1 ]; then
    tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: netem delay "$delay" limit 100000 \
      2>/dev/null || netem_ok=0
  fi
}
for ((i = 0; i < maxn; i++)); do
  ns="${p}h$i"
  ip netns add "$ns" || fail "ip netns add $ns"
  made+=("$ns")
  ip -n "$ns" link set lo up || fail "lo up in $ns"
  ip link add eth0 netns "$ns" type veth peer name "h$i" netns "$sw" || fail "veth of $ns"
  ip -n "$ns" addr add "10.97.0.$((i + 1))/24" dev eth0 || fail "address in $ns"
  ip -n "$ns" link set eth0 mtu "$mtu" up || fail "eth0 up in $ns"
  ip -n "$sw" link set "h$i" mtu "$mtu" master br0 up || fail "bridge port h$i"
  shape "$ns" eth0      # upload: host -> bridge
  shape "$sw" "h$i"     # download: bridge -> host
done
if [ -n "$delay" ] && [ "$delay" != 0 ] && [ "$netem_ok" = 0 ]; then
  echo "note: sch_netem is not available in this kernel ($(uname -r)): no added delay"
  delay_note="none (sch_netem is not available in kernel $(uname -r))"
  for ((i = 0; i < maxn; i++)); do   # the first host may have got one before netem failed
    tc -n "${p}h$i" qdisc del dev eth0 parent 1:1 2>/dev/null
    tc -n "$sw" qdisc del dev "h$i" parent 1:1 2>/dev/null
  done
elif [ -n "$delay" ] && [ "$delay" != 0 ]; then
  delay_note="$delay each way (netem under tbf)"
else
  delay_note="none"
fi
# The bridge forwards at once (no STP); still, wait until every host reaches host 0.
for ((i = 1; i < maxn; i++)); do
  command -v ping >/dev/null 2>&1 || break
  ok=0
  for t in 1 2 3 4 5 6 7 8 9 10; do
    if ip netns exec "${p}h$i" ping -c1 -W1 10.97.0.1 >/dev/null 2>&1; then ok=1; break; fi
  done
  [ "$ok" = 1 ] || fail "host $i cannot reach 10.97.0.1"
done
# Round trip host 1 -> host 0 and back: the median of 200 one-byte TCP ping-pongs.
ip netns exec "${p}h0" python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.97.0.1", 29612)); s.listen(1); s.settimeout(10); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while c.recv(1): c.sendall(b"y")' 2>/dev/null &
pids+=($!)
rtt=$(ip netns exec "${p}h1" python3 -c '
import socket, time
for t in range(50):
    try: c = socket.create_connection(("10.97.0.1", 29612)); break
    except OSError: time.sleep(0.1)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
v = []
for i in range(200):
    t = time.perf_counter(); c.sendall(b"x"); c.recv(1); v.append(time.perf_counter() - t)
print("%.3f" % (1e3 * sorted(v)[100]))' 2>/dev/null)
wait "${pids[@]}" 2>/dev/null
pids=()
echo "network: $maxn hosts, every link $rate both ways (tbf burst $burst B, MTU $mtu), delay: $delay_note, TCP round trip ${rtt:-?} ms"

# ---- the runs ----
# Busy and total jiffies of the whole machine (user nice system irq softirq / + idle iowait).
cpu_busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
export RR_JOB_TOKEN
RR_JOB_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
results="$out/runs.tsv"
printf 'n\talgo\tsize\toop_us\toop_busbw\tip_us\tip_busbw\tcpu_pct\tranks_cores\tsoftirqd_cores\n' >"$results"
# CPU seconds (user + system) of the ksoftirqd threads: network work deferred from interrupts.
softirqd_ticks() {
  local f t=0
  for f in /proc/[0-9]*/stat; do
    case "$(cat "$f" 2>/dev/null)" in *"(ksoftirqd/"*) t=$((t + $(awk '{print $14 + $15}' "$f"))) ;; esac
  done
  echo "$t"
}
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -f "%U %S")
rc=0
for n in $hosts; do
  for algo in $algos; do
    tag="n${n}_$algo"
    echo "== N=$n RR_ALGO=$algo: all_reduce_perf -b $size -e $size -n $iters -w $warmup"
    read -r b0 t0 < <(cpu_busy)
    s0=$(softirqd_ticks) w0=$(date +%s.%N)
    pids=()
    rm -f "$out/raw/$tag.json" # -J never overwrites: a rerun into $out would write .json.0
    for ((i = 0; i < n; i++)); do
      # One host per namespace; RR_HOSTID and RR_TRANSPORT=tcp make sure no pair of ranks
      # takes shared memory although all run on this one machine.
      ip netns exec "${p}h$i" env RR_ALGO="$algo" RR_TRANSPORT=tcp RR_HOSTID="$p-host$i" \
        ${sockbuf:+RR_SOCKBUF=$sockbuf} RR_TIMEOUT=$((run_timeout - 30)) \
        timeout -s KILL "$run_timeout" ${timer[@]+"${timer[@]}" -o "$out/raw/$tag.host$i.cpu"} \
        "$rrun" --nnodes "$n" --node-rank "$i" \
        --master-addr 10.97.0.1 --master-port 29611 --nproc-per-node 1 \
        "$perf" -b "$size" -e "$size" -n "$iters" -w "$warmup" -a 3 -c "$check" \
        -J "$out/raw/$tag.json" >"$out/raw/$tag.host$i.txt" 2>&1 &
      pids+=($!)
    done
    bad=0
    for ((i = 0; i < n; i++)); do wait "${pids[$i]}" || { bad=1; echo "  host $i failed" >&2; }; done
    pids=()
    read -r b1 t1 < <(cpu_busy)
    s1=$(softirqd_ticks) w1=$(date +%s.%N)
    # Cores kept busy on average: by this run's ranks (user + system of rrun and its worker)
    # and by ksoftirqd; the rest of "CPU busy" is interrupt work in other contexts or other
    # programs on the machine.
    rcores=$(cat "$out"/raw/"$tag".host*.cpu 2>/dev/null | awk -v w0="$w0" -v w1="$w1" \
      '$1 ~ /^[0-9.]+$/ {t += $1 + $2} END {if (w1 > w0) printf "%.2f", t / (w1 - w0); else print "-"}')
    scores=$(awk -v a="$s0" -v b="$s1" -v w0="$w0" -v w1="$w1" -v hz="$hz" \
      'BEGIN {x = 0; if (w1 > w0) x = (b - a) / hz / (w1 - w0); printf "%.2f", x}')    cpu=$(awk -v a="$b0" -v b="$b1" -v c="$t0" -v d="$t1" 'BEGIN{x = 0; if (d > c) x = 100 * (b - a) / (d - c); printf "%.0f", x}')
    if [ "$bad" = 1 ] || [ ! -s "$out/raw/$tag.json" ]; then
      rc=1
      tail -n 5 "$out"/raw/"$tag".host*.txt >&2
      printf '%s\t%s\t-\t-\t-\t-\t-\t%s\t%s\t%s\n' "$n" "$algo" "$cpu" "$rcores" "$scores" >>"$results"
      continue
    fi
    python3 - "$root/bench" "$out/raw/$tag.json" "$n" "$algo" "$cpu" "$rcores" "$scores" >>"$results" <<'EOF' || rc=1
import sys
sys.path.insert(0, sys.argv[1])
import perf_json  # bench/perf_json.py: nccl-tests' JSON document
a = sys.argv[2:]
j = perf_json.load(a[0])
r = j["results"][-1]
o, i = perf_json.half(r), perf_json.half(r, True)
if o.wrong or i.wrong or not perf_json.ok(j):
    sys.exit("wrong results in " + a[0])
print("\t".join([a[1], a[2], str(r["size"]), "%.0f" % o.time_us, "%.5f" % o.busbw,
                 "%.0f" % i.time_us, "%.5f" % i.busbw, a[3], a[4], a[5]]))
EOF
    tail -n 1 "$results" | awk -F'\t' '{printf "   busbw %s GB/s out of place, %s in place; machine CPU busy %s%%, ranks %s cores, ksoftirqd %s\n", $5, $7, $8, $9, $10}'
  done
done

# ---- the report ----
if ! command -v gnuplot >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "installing gnuplot-nox for the plot"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnuplot-nox >/dev/null 2>&1 ||
    echo "note: could not install gnuplot; no plot"
fi
RRSC_MTU=$mtu python3 - "$results" "$out" "$rate" "$rate_bps" "$delay_note" "$burst" "$size" "$iters" \
  "$warmup" "${rtt:-?}" "$label" "$*" <<'EOF' || rc=1
import os, platform, subprocess, sys, time
res, out, rate, bps, delay, burst, size, iters, warmup, rtt, label, _ = sys.argv[1:13]
bps = int(bps)
link = bps / 8 / 1e9                       # GB/s, as busbw is counted
# The most TCP can carry through a shaper that counts whole Ethernet frames: MTU - 52 bytes
# of payload (IP, TCP and timestamps) per MTU + 14-byte frame: 1448 / 1514 at MTU 1500.
mtu = int(os.environ.get("RRSC_MTU", "1500"))
ceil = link * (mtu - 52) / (mtu + 14)
rows = {}
for line in open(res).read().splitlines()[1:]:
    f = line.split("\t")
    rows.setdefault(int(f[0]), {})[f[1]] = f
ns = sorted(rows)
def bw(n, a, col=4):
    f = rows[n].get(a)
    return float(f[col]) if f and f[col] != "-" else None
def fmt(x, p=4): return "-" if x is None else "%.*f" % (p, x)
def pct(x): return "-" if x is None else "%.1f%%" % (100 * x / link)
cpu_model = ""
try:
    for l in open("/proc/cpuinfo"):
        if l.startswith("model name"): cpu_model = l.split(":", 1)[1].strip(); break
except OSError: pass
date = time.strftime("%Y-%m-%d %H:%M %Z")
md = []
md.append("# Ring vs parameter server on simulated hosts%s\n" % (" — " + label if label else ""))
md.append("%s, %s, %d cores (%s), kernel %s.\n" % (date, platform.node(), os.cpu_count(), cpu_model, platform.release()))
md.append("One rank per network namespace; every host's link shaped to **%s** in both directions "
          "(tbf, burst %s B); added delay: %s; TCP round trip %s ms (median, one byte each way). `all_reduce_perf -b %s -e %s -n %s -w %s -a 3` "
          "(float sum; the slowest rank's mean time counts), RR_TRANSPORT=tcp. "
          "busbw = algbw · 2(N−1)/N, out of place (in place in brackets). Link rate %.4f GB/s; "
          "at MTU %d the TCP ceiling (%d B of payload per %d B frame) is %.4f GB/s = %.1f%% of it.\n"
          % (rate, burst, delay, rtt, size, size, iters, warmup, link, mtu, mtu - 52, mtu + 14,
             ceil, 100 * ceil / link))
md.append("| N | ring busbw (GB/s) | star busbw (GB/s) | link rate (GB/s) | ring % of link | star % of link | star ideal: ceiling / N | ring: machine busy, ranks, ksoftirqd | star: machine busy, ranks, ksoftirqd |")
md.append("|---|---|---|---|---|---|---|---|---|")
for n in ns:
    r, s = bw(n, "ring"), bw(n, "star")
    ri, si = bw(n, "ring", 6), bw(n, "star", 6)
    def cpu(a):
        f = rows[n].get(a)
        return "%s%%, %s, %s" % (f[7], f[8], f[9]) if f else "-"
    md.append("| %d | %s (%s) | %s (%s) | %.4f | %s | %s | %.4f | %s | %s |" % (
        n, fmt(r), fmt(ri), fmt(s), fmt(si), link, pct(r), pct(s), ceil / n, cpu("ring"), cpu("star")))
md.append("")
md.append("CPU: over each whole run (set-up, warm-up and result checks included): the machine's "
          "busy share of all %d cores (/proc/stat; other programs count too), and the cores kept "
          "busy on average by the run's ranks (user + system time) and by ksoftirqd (network work "
          "deferred from interrupts)." % os.cpu_count())
md.append("Raw outputs: `raw/` (each host's stdout, rank 0's JSON); data: `scaling.dat`; plot: `scaling.png`.\n")
open(os.path.join(out, "scaling.md"), "w").write("\n".join(md) + "\n")
with open(os.path.join(out, "scaling.dat"), "w") as d:
    d.write("# N ring_busbw star_busbw link ceiling star_ideal\n")
    for n in ns:
        d.write("%d %s %s %.6f %.6f %.6f\n" % (n, fmt(bw(n, "ring"), 6).replace("-", "NaN"),
                fmt(bw(n, "star"), 6).replace("-", "NaN"), link, ceil, ceil / n))
gp = """set terminal pngcairo size 900,560 font ',11'
set output '%s'
set title 'all-reduce busbw on simulated hosts: every link %s, %s per rank'
set xlabel 'hosts (N)'
set ylabel 'busbw (GB/s)'
set xrange [1.5:%d.5]
set xtics (%s)
set yrange [0:%f]
set key center right
set grid
plot '%s' u 1:4 w l lw 2 dt 2 lc rgb '#555555' t 'link rate', \\
     '' u 1:5 w l lw 1 dt 3 lc rgb '#555555' t 'TCP ceiling (%%.1f%%%% of link)', \\
     '' u 1:6 w l lw 1 dt 4 lc rgb '#d62728' t 'star ideal: ceiling / N', \\
     '' u 1:2 w lp lw 2 pt 7 lc rgb '#1f77b4' t 'ring (RR\\_ALGO=ring)', \\
     '' u 1:3 w lp lw 2 pt 5 lc rgb '#d62728' t 'star / parameter server (RR\\_ALGO=star)'
""" % (os.path.join(out, "scaling.png"), rate, size, max(ns), ",".join(str(n) for n in ns),
       link * 1.15, os.path.join(out, "scaling.dat"))
gp = gp % (100 * ceil / link)
open(os.path.join(out, "scaling.gp"), "w").write(gp)
try:
    subprocess.run(["gnuplot", os.path.join(out, "scaling.gp")], check=True)
except (OSError, subprocess.CalledProcessError) as e:
    print("note: no plot (%s)" % e)
print("\n".join(md))
EOF
echo "wrote $out/scaling.md, $out/scaling.png"
exit "$rc"
