#!/usr/bin/env bash
# Build the libFuzzer harnesses with clang (the main build is gcc) and run one, or all.
#
#   tests/fuzz/run.sh <harness|all> <seconds> [libFuzzer flags...]
#   tests/fuzz/run.sh --build-only
#   tests/fuzz/run.sh --coverage <harness>    line coverage of the corpus (llvm-cov)
#
# harness: wire, ctl_stream, store_server, store_client (see tests/fuzz/README.md).
# The library is compiled once per build folder ($RR_FUZZ_BUILD, default build-rel-fuzz)
# with -fsanitize=fuzzer-no-link,address,undefined and rebuilt when a source changes.
# The working corpus grows in $RR_FUZZ_BUILD/corpus/<harness> (seeded from
# tests/fuzz/corpus/<harness>); crashes land in $RR_FUZZ_BUILD/artifacts/<harness>/ and
# the log in $RR_FUZZ_BUILD/logs/<harness>.log. Exit 0 when no crash was found, 1 when one
# was (the crash input's path is printed), 77 when clang or libFuzzer is missing.
# Long runs: run it under `nice`; RR_FUZZ_JOBS is not used (one process per harness).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
harnesses=(wire ctl_stream store_server store_client)
build=${RR_FUZZ_BUILD:-$root/build-rel-fuzz}
CC=${RR_FUZZ_CC:-clang}

if [ $# -lt 1 ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
if ! command -v "$CC" >/dev/null 2>&1; then
  echo "fuzz: $CC not found: skipped (install clang to fuzz)"
  exit 77
fi
mkdir -p "$build"/obj "$build"/bin "$build"/logs
probe="$build/probe"
if ! echo 'int LLVMFuzzerTestOneInput(const unsigned char*d,unsigned long n){(void)d;(void)n;return 0;}' |
    "$CC" -x c -fsanitize=fuzzer,address,undefined - -o "$probe" 2>/dev/null; then
  echo "fuzz: $CC cannot link -fsanitize=fuzzer (libFuzzer missing): skipped"
  exit 77
fi

cflags=(-std=gnu11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Werror
        -Wno-unused-parameter -I"$root/include" -I"$root"
        -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all)

# The library: rebuilt (under a lock: several harnesses may start at once) when any
# source or header is newer than the archive.
build_lib() {
  local lib="$build/libringreduce_fuzz.a"
  exec 9>"$build/.lock"
  flock 9
  if [ -f "$lib" ] && [ -z "$(find common cuda transport ring rendezvous include -newer "$lib" \
        \( -name '*.c' -o -name '*.h' \) -print -quit)" ]; then
    flock -u 9
    return 0
  fi
  echo "fuzz: building the library with $CC (sanitizers + coverage) in $build"
  rm -f "$build"/obj/*.o
  # cuda/*.c: the ring reaches the CUDA layer (device buffers); built without CUDA, its
  # table is absent and every entry answers "no CUDA", as in a CPU-only library.
  local srcs=(common/*.c cuda/*.c transport/*.c ring/*.c rendezvous/*.c)
  printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc)" -I{} sh -c \
    'o="$1/obj/$(echo "$2" | tr / _).o"; shift 2; exec "$@" -c "$0" -o "$o"' {} "$build" {} \
    "$CC" "${cflags[@]}"
  rm -f "$lib"
  ar rcs "$lib" "$build"/obj/*.o
  # Seed generator and harnesses depend on the library: rebuild them too.
  rm -f "$build"/bin/*
  flock -u 9
}

build_harness() {
  local h=$1
  local exe="$build/bin/fuzz_$h"
  exec 9>"$build/.lock"
  flock 9
  if [ ! -x "$exe" ] || [ "tests/fuzz/fuzz_$h.c" -nt "$exe" ]; then
    "$CC" "${cflags[@]/fuzzer-no-link/fuzzer}" "tests/fuzz/fuzz_$h.c" \
      "$build/libringreduce_fuzz.a" -lpthread -lm -o "$exe"
  fi
  if [ ! -x "$build/bin/make_seeds" ] || [ tests/fuzz/make_seeds.c -nt "$build/bin/make_seeds" ]; then
    "$CC" "${cflags[@]}" tests/fuzz/make_seeds.c "$build/libringreduce_fuzz.a" -lpthread -lm \
      -o "$build/bin/make_seeds"
  fi
  flock -u 9
}

# Line coverage reached by the committed corpus plus the working corpus: the library and
# the harness built with clang's source-based coverage (no sanitizers), run once per input
# through replay.c, reported for the files the harness targets.
coverage() {
  local h=$1 cov="$build/cov" prof
  command -v llvm-profdata >/dev/null 2>&1 || command -v llvm-profdata-14 >/dev/null 2>&1 ||
    { echo "fuzz: llvm-profdata not found: skipped"; exit 77; }
  local pd=llvm-profdata lc=llvm-cov
  command -v $pd >/dev/null 2>&1 || pd=llvm-profdata-14
  command -v $lc >/dev/null 2>&1 || lc=llvm-cov-14
  mkdir -p "$cov"
  local ccf=(-std=gnu11 -D_GNU_SOURCE -g -O0 -I"$root/include" -I"$root"
             -fprofile-instr-generate -fcoverage-mapping)
  "$CC" "${ccf[@]}" common/*.c cuda/*.c transport/*.c ring/*.c rendezvous/*.c "tests/fuzz/fuzz_$h.c" tests/fuzz/replay.c \
    -lpthread -lm -o "$cov/cov_$h"
  prof="$cov/$h.profraw"
  rm -f "$prof"
  LLVM_PROFILE_FILE="$prof" "$cov/cov_$h" "$root/tests/fuzz/corpus/$h" "$build/corpus/$h" \
    "$root/tests/fuzz/crashes/$h" >/dev/null
  "$pd" merge -sparse "$prof" -o "$cov/$h.profdata"
  local files
  case $h in
    wire) files="ring/hdr.c transport/ctl.c rendezvous/hello.c" ;;
    ctl_stream) files="transport/comm.c transport/ctl.c" ;;
    *) files="rendezvous/store_server.c rendezvous/store_client.c" ;;
  esac
  # shellcheck disable=SC2086
  "$lc" report "$cov/cov_$h" -instr-profile="$cov/$h.profdata" $files
}
if [ "$1" = "--coverage" ]; then
  [ $# -ge 2 ] || { echo "usage: $0 --coverage <harness>"; exit 2; }
  coverage "$2"
  exit 0
fi

build_lib
if [ "$1" = "--build-only" ]; then
  for h in "${harnesses[@]}"; do build_harness "$h"; done
  echo "fuzz: harnesses in $build/bin"
  exit 0
fi
[ $# -ge 2 ] || { echo "usage: $0 <harness|all> <seconds> [libFuzzer flags]"; exit 2; }
which=$1 secs=$2
shift 2
if [ "$which" = all ]; then
  rc=0
  for h in "${harnesses[@]}"; do "$0" "$h" "$secs" "$@" || rc=1; done
  exit $rc
fi
case " ${harnesses[*]} " in
  *" $which "*) ;;
  *) echo "fuzz: unknown harness '$which' (one of: ${harnesses[*]} all)"; exit 2 ;;
esac
build_harness "$which"

corpus="$build/corpus/$which"
art="$build/artifacts/$which"
log="$build/logs/$which.log"
mkdir -p "$corpus" "$art"
seeds="$root/tests/fuzz/corpus/$which"
if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
  "$build/bin/make_seeds" "$build/seeds"
  seeds="$build/seeds/$which"
fi
# Earlier crashes stay in the corpus's way: replay them first (they must pass now).
crashes="$root/tests/fuzz/crashes/$which"
[ -d "$crashes" ] || crashes=
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "fuzz: $which for $secs s (log: $log)"
set +e
"$build/bin/fuzz_$which" -max_total_time="$secs" -print_final_stats=1 -timeout=30 \
  -rss_limit_mb=2048 -artifact_prefix="$art/" "$@" "$corpus" "$seeds" ${crashes:+"$crashes"} \
  >"$log" 2>&1
rc=$?
set -e
execs=$(grep -a 'stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1)
cov=$(grep -aE '^#[0-9]+' "$log" | tail -1 | grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' || true)
echo "fuzz: $which: exit $rc, ${execs:-?} executions in $secs s, ${cov:-no coverage line}"
if [ $rc -ne 0 ]; then
  echo "fuzz: $which FOUND A PROBLEM; last lines of $log:"
  tail -40 "$log"
  ls -1 "$art" 2>/dev/null | sed "s|^|fuzz: crash input: $art/|"
  exit 1
fi
exit 0
