#!/bin/bash
# interleaved A/B of TCP knobs, 4M and 8M, np 2 and 4
B=${B:-build-cmp/bin}
out=${OUT:-.}/res.txt; : > $out
cfgs=("base" "RR_NSOCKS=4" "RR_SOCKBUF=16M" "RR_SEG_BYTES=1M" "RR_SEG_BYTES=64K" "RR_SLOTS=8")
for round in $(seq 1 15); do
  for np in 2 4; do
    for c in "${cfgs[@]}"; do
      e=(); [ "$c" != base ] && e=("$c")
      r=$(env "${e[@]}" RR_TRANSPORT=tcp timeout 120 $B/rrun --standalone --nproc-per-node $np $B/all_reduce_perf -b 4M -e 8M -f 2 -n 20 -w 2 -a 3 -c 1 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {print $1, $8}' | tr '\n' ' ')
      echo "$round $np $c $r" >> $out
    done
  done
done
