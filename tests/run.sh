#!/usr/bin/env bash
# The test command: install what is missing, build with warnings as errors, run every test
# (CTest; each test is its own process with a time limit).
#   --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan)
#   --tsan      ThreadSanitizer build (build-tsan), on the tests that exercise threads
# Long or special labels stay out: stress, soak (long; run with ctest -L), fuzz (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
dir=build-test
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DRR_WERROR=ON)
exclude='stress|soak|fuzz'
select=()
case "${1:-}" in
  --sanitize)
    dir=build-asan
    flags+=(-DRR_SANITIZE=address,undefined)
    # 64 MiB buffers under ASan add minutes and test no code the smaller sizes miss.
    exclude="large|netns|$exclude"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    ;;
  --tsan)
    dir=build-tsan
    flags+=(-DRR_SANITIZE=thread)
    exclude="large|netns|$exclude"
    # The threaded paths: async works and the worker, aborts and waits from other threads,
    # concurrent subgroups, the store's server thread, DDP's launches, and collectives.
    select=(-R '^(async_|pg_concurrent|pg_subgroups_w5|fault_(abort|wait_timeout|kill9|mismatch)|rel_(stress_sample|cause)|store\.|ddp\.(grads_w4|order|nosync_w2)|coll_(all_reduce|broadcast|reduce_scatter)_w[34]$|coll_all_reduce_rd_w5|wire|shm_(unit|coll_all_reduce_w4|coll_broadcast_w3|kill))')
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    ;;
  "") ;;
  *) echo "usage: $0 [--sanitize|--tsan]" >&2; exit 2 ;;
esac
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S . -B "$dir" "${flags[@]}" "${gen[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
ctest --test-dir "$dir" -j "$(nproc)" --output-on-failure -LE "$exclude" "${select[@]}"
