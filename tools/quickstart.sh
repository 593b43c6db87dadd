#!/usr/bin/env bash
# Quick start: install what is missing, build, and run the main job: an all-reduce bandwidth
# sweep (8 B .. 256 MiB) with 4 ranks on this machine under the rrun launcher, printing the
# nccl-tests table. Extra arguments go to all_reduce_perf (e.g. -d half -o max).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${gen[@]}" >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
NP="${NP:-4}"
echo "+ build/bin/rrun --nproc-per-node $NP build/bin/all_reduce_perf -b 8 -e 256M -f 4 $*"
exec build/bin/rrun --nproc-per-node "$NP" build/bin/all_reduce_perf -b 8 -e 256M -f 4 "$@"
