#!/bin/bash
B=${B:-build-cmp/bin}
out=${OUT:-.}/res2.txt; : > $out
cfgs=("base" "RR_SEG_BYTES=128K" "RR_SEG_BYTES=64K")
for round in $(seq 1 9); do
  for np in 2 4; do
    for c in "${cfgs[@]}"; do
      e=(); [ "$c" != base ] && e=("$c")
      r=$(env "${e[@]}" RR_TRANSPORT=tcp timeout 300 $B/rrun --standalone --nproc-per-node $np $B/all_reduce_perf -b 4M -e 256M -f 2 -n 10 -w 1 -a 3 -c 1 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {print $1, $8}' | tr '\n' ' ')
      echo "$round $np $c $r" >> $out
    done
  done
done
