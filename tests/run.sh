#!/usr/bin/env bash
# The test command: install what is missing, build with warnings as errors, run every test
# (CTest; each test is its own process with a time limit).
#   --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan)
#   --tsan      ThreadSanitizer build (build-tsan), on nearly every test (see below)
# Long or special labels stay out: stress, soak (long; run with ctest -L), fuzz (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
RR_DEPS_TORCH=1 RR_DEPS_VIEW=1 RR_DEPS_SLURM=1 RR_DEPS_FORMAT=1 bash tools/deps.sh
dir=build-test
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DRR_WERROR=ON)
exclude='stress|soak|fuzz'
select=()
case "${1:-}" in
  --sanitize)
    dir=build-asan
    flags+=(-DRR_SANITIZE=address,undefined)
    # 64 MiB buffers under ASan add minutes and test no code the smaller sizes miss.
    # torch: the sanitized library cannot be loaded into an uninstrumented Python without
    # preloading the runtime, and the C paths those tests reach are the ones the C tests
    # already run under the sanitizers.
    # view: tools/ringreduce-view (Python) and its page in Chromium test no C code; the C
    # code they start from (RR_TRACE=<file>) runs in view_trace, which stays in.
    # layout: scripts that read the tree (layering, format, the GPU commands' dry run); they
    # run no sanitized code and find nothing a second time (~20 s a stage).
    exclude="large|netns|torch|view|layout|$exclude"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    ;;
  --tsan)
    dir=build-tsan
    flags+=(-DRR_SANITIZE=thread)
    exclude="large|netns|torch|view|layout|$exclude"  # view, layout: as for --sanitize
    # The whole suite but: the collective matrix at 6-8 ranks, and its plain cases at 4-5
    # (each rank is its own process with the same threads at any world size; the plain
    # cases at 2-3 and the lanes/star/small/rd/ring variants at 2-5 cover the odd and
    # power-of-two paths), op.* (single-threaded arithmetic, near its 60 s limit under
    # TSan), cudafake.kernel (arithmetic too, ~50 s under TSan; the fake's ordering is what
    # the other cudafake tests check there), rel_soak_5k (its RSS bound measures TSan's shadow
    # memory, not the library), ddp.train_elastic at 8 ranks (its 4-rank twins run the same
    # threads) and rel_junk_notoken (rel_junk_token runs the same attacker and rank threads;
    # the two differ in what the store and setup accept, not in threading).
    # 11-13 min on a slow 2-core machine; see docs/reliability.md, "ThreadSanitizer".
    plain='(all_reduce|reduce_scatter|all_gather|broadcast|reduce|gather|scatter|all_to_all|all_to_allv|sendrecv|barrier)'
    # The ib matrix likewise keeps its 2-3 rank and tiny-ring cases (its 4-8 rank ones add
    # two minutes under TSan and no thread the smaller worlds lack).
    select=(-E "^((shm_)?coll_[a-z_]+_w[678]|(shm_)?coll_${plain}_w[45]|ib_coll_[a-z_]+_w[458]|op\..*|cudafake\.kernel|rel_soak_5k|ddp\.train_elastic_w8_[a-z]+|rel_junk_notoken)\$")
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    ;;
  "")
    # The torch tests run on Debian's torch 1.13 (/usr/bin/python3) and on PyPI's newest 2.x,
    # installed once into build-venv/ (tools/torch_env.sh; ~80 s the first time, mostly
    # downloading and unpacking: it runs while the library builds, and must be done first).
    flags+=(-DRR_TORCH2_PYTHON="$(bash tools/torch_env.sh --path)")
    # In a process group of its own (setsid execs in place: $! is the group's leader), so
    # that a failed build kills pip with it, not only the shell running tools/torch_env.sh;
    # a half-made environment is redone next time.
    torch_log=$(mktemp); setsid bash tools/torch_env.sh > /dev/null 2> "$torch_log" & torch_pid=$!
    trap 'kill -- -"$torch_pid" 2>/dev/null || true; rm -f "$torch_log"' EXIT
    ;;
  *) echo "usage: $0 [--sanitize|--tsan]" >&2; exit 2 ;;
esac
# Under a sanitizer the collective matrix runs one dtype of each element size and two ops per
# reduction (tests/test_coll.c, lean_dtype): over half of each sanitizer stage was the full
# matrix, whose every dtype and op the plain stage runs.
if [ -n "${1:-}" ]; then export RR_TEST_MATRIX=lean; fi
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S . -B "$dir" "${flags[@]}" "${gen[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
if [ -n "${torch_pid:-}" ]; then
  torch_rc=0; wait "$torch_pid" || torch_rc=$?
  trap - EXIT
  cat "$torch_log" >&2; rm -f "$torch_log"
  [ "$torch_rc" -eq 0 ] || { echo "tests/run.sh: tools/torch_env.sh failed ($torch_rc)" >&2; exit "$torch_rc"; }
fi
ctest --test-dir "$dir" -j "$(nproc)" --output-on-failure -LE "$exclude" "${select[@]}"
