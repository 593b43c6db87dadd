#!/usr/bin/env bash
# The test command: install what is missing, build with warnings as errors, run every test
# (CTest; each test is its own process with a time limit). Pass --sanitize to build with
# AddressSanitizer + UndefinedBehaviorSanitizer instead, in build-asan.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
dir=build-test
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DRR_WERROR=ON)
labels=()
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  flags+=(-DRR_SANITIZE=address,undefined)
  # 64 MiB buffers under ASan add minutes and test no code the smaller sizes miss.
  labels=(-LE large)
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S . -B "$dir" "${flags[@]}" "${gen[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
ctest --test-dir "$dir" -j "$(nproc)" --output-on-failure "${labels[@]}"
