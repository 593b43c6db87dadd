#!/bin/bash
# Interleaved A/B of the segment size over shared memory (one host, RR_TRANSPORT auto):
# the default 256 KiB against 128 KiB (the TCP lead of 2026-11-28-tcp-seg), np 2 and 4.
B=${B:-build-cmp/bin}
out=${OUT:-.}/seg_shm.txt; : > $out
cfgs=("base" "RR_SEG_BYTES=128K")
for round in $(seq 1 ${ROUNDS:-7}); do
  for np in 2 4; do
    for c in "${cfgs[@]}"; do
      e=(); [ "$c" != base ] && e=("$c")
      r=$(env "${e[@]}" timeout 300 $B/rrun --standalone --nproc-per-node $np $B/all_reduce_perf -b 64K -e 256M -f 4 -n 10 -w 1 -a 3 -c 1 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {print $1, $8}' | tr '\n' ' ')
      echo "$round $np $c $r" >> $out
    done
  done
done
