#!/usr/bin/env bash
# Tests of `cmake --install`: ringreduce installed into a fresh prefix is usable by a program
# that has never seen the source tree.
#
#   bash tests/test_install.sh MODE BUILD_DIR SOURCE_DIR CMAKE CC LIBDIR [SANITIZE]
#
# MODE cmake: tests/install/ is configured with find_package(ringreduce CONFIG) and
# CMAKE_PREFIX_PATH=prefix (and must be refused for the next major version). MODE pkgconfig:
# tests/install/consumer.c is compiled by hand with the flags pkg-config gives for
# PKG_CONFIG_PATH=prefix/LIBDIR/pkgconfig. Either way the consumer then runs as a 2-rank job
# under the installed rrun and checks an all-reduce and the version on every rank. Both modes
# first check the prefix's layout: headers, SONAME, package files, every *_perf tool.
#
# LD_LIBRARY_PATH is unset for all of it. The installed tools must find libringreduce through
# their RUNPATH ($ORIGIN/../lib) and the consumers through the rpath their build gives them
# (CMake adds one for an imported target; the pkg-config build passes -Wl,-rpath with the .pc's
# libdir, as a user of a non-system prefix would). With LD_LIBRARY_PATH=prefix/lib set
# instead, a tool installed without its RUNPATH would still pass, and an inherited value
# pointing at the build tree could hide a broken install.
#
# SANITIZE is the build's RR_SANITIZE: a sanitized libringreduce only loads into a program
# built with the same sanitizer, so the consumer gets the same -fsanitize flags.
# Exit 0 pass, 1 fail, 77 skip.
set -u

MODE=${1:?usage: test_install.sh MODE BUILD_DIR SOURCE_DIR CMAKE CC LIBDIR [SANITIZE]}
BUILD=${2:?}
SRC=${3:?}
CMAKE=${4:?}
CC=${5:?}
LIBDIR=${6:?}
SANITIZE=${7:-}
case "$MODE" in cmake | pkgconfig) ;; *) echo "unknown mode $MODE" >&2; exit 2 ;; esac
T=$(mktemp -d "${TMPDIR:-/tmp}/rr-install-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
P=$(cd "$T" && pwd -P)/prefix

unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH RANK LOCAL_RANK WORLD_SIZE \
  LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT RR_JOB_TOKEN

fail() {
  echo "FAIL(install.$MODE): $*" >&2
  for f in "$T"/*.log; do
    [ -s "$f" ] && { echo "--- $f:"; tail -c 4000 "$f"; echo; }
  done >&2
  exit 1
}
skip() { echo "SKIP(install.$MODE): $*" >&2; exit 77; }

# An absolute CMAKE_INSTALL_LIBDIR stays put whatever --prefix says: installing would write
# outside the temporary prefix.
case "$LIBDIR" in /*) skip "CMAKE_INSTALL_LIBDIR is absolute ($LIBDIR)" ;; esac
LIB=$P/$LIBDIR

# The version as the source header states it; everything installed must agree with it.
ver() { sed -n "s/^#define RR_VERSION_$1 \([0-9][0-9]*\)$/\1/p" "$SRC/include/ringreduce/version.h"; }
MAJOR=$(ver MAJOR) MINOR=$(ver MINOR) PATCH=$(ver PATCH)
[ -n "$MAJOR" ] && [ -n "$MINOR" ] && [ -n "$PATCH" ] || fail "no version in version.h"
VERSION=$MAJOR.$MINOR.$PATCH

"$CMAKE" --install "$BUILD" --prefix "$P" > "$T/install.log" 2>&1 ||
  fail "cmake --install $BUILD --prefix $P failed"

# loads EXE: the libringreduce that EXE would load, as $so.$MAJOR would be spelt if it is
# that one (ldd prints $ORIGIN expanded but not normalised: prefix/bin/../lib).
loads() {
  local f
  f=$(ldd "$1" | sed -n 's/.*libringreduce[^ ]* => \(.*\) (0x.*/\1/p; s/.*libringreduce.*not found.*/not found/p')
  [ -n "$f" ] && [ "$f" != "not found" ] || { echo "$f"; return 0; }
  f=$(cd "$(dirname "$f")" 2> /dev/null && pwd -P)/${f##*/} && echo "$f"
}

# --- the prefix's layout ---------------------------------------------------------------------
for h in "$SRC"/include/ringreduce/*.h; do
  cmp -s "$h" "$P/include/ringreduce/${h##*/}" || fail "header ${h##*/} not installed as is"
done
so=$LIB/libringreduce.so
[ -f "$so.$VERSION" ] || fail "no $so.$VERSION"
soname=$(readelf -d "$so.$VERSION" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libringreduce.so.$MAJOR" ] || fail "SONAME is '$soname', want libringreduce.so.$MAJOR"
[ -L "$so.$MAJOR" ] && [ -L "$so" ] || fail "$so.$MAJOR or $so is not a symlink"
# With CUDA the runtime is linked into the library, so its users need no CUDA at all.
ldd "$so" | grep -i cuda && fail "libringreduce depends on a CUDA library (see above)"
for f in ringreduceConfig.cmake ringreduceConfigVersion.cmake ringreduceTargets.cmake; do
  [ -f "$LIB/cmake/ringreduce/$f" ] || fail "no $LIB/cmake/ringreduce/$f"
done
[ -f "$LIB/pkgconfig/ringreduce.pc" ] || fail "no $LIB/pkgconfig/ringreduce.pc"
[ -x "$P/bin/rrun" ] || fail "rrun not installed"
tools=0
# The *_perf programs bench/ defines (each target has a CMakeFiles/<name>.dir, whatever the
# generator); bin/ also holds the test programs, which stay uninstalled.
for d in "$BUILD"/bench/CMakeFiles/*_perf.dir; do
  t=$BUILD/bin/$(basename "$d" .dir)
  [ -x "$t" ] || fail "bench/ defines ${t##*/} but $t is not built"
  tools=$((tools + 1))
  it=$P/bin/${t##*/}
  [ -x "$it" ] || fail "${t##*/} not installed"
  # A tool that links the library must get the installed one, through its RUNPATH.
  if ldd "$t" | grep -q libringreduce; then
    got=$(loads "$it")
    [ "$got" = "$so.$MAJOR" ] || fail "${t##*/} installed loads libringreduce from '$got'"
  fi
done
[ "$tools" -gt 0 ] || fail "no *_perf tool in $BUILD/bench to compare with"

# --- build the consumer ----------------------------------------------------------------------
cflags="-Wall -Wextra -Werror"
[ -n "$SANITIZE" ] && cflags+=" -fsanitize=$SANITIZE -fno-omit-frame-pointer"
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
if [ "$MODE" = cmake ]; then
  consumer_cmake() { # BUILD_DIR WANT_VERSION
    "$CMAKE" -S "$SRC/tests/install" -B "$1" "${gen[@]}" -DCMAKE_PREFIX_PATH="$P" \
      -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$cflags" -DRR_WANT_VERSION="$2" \
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
  }
  consumer_cmake "$T/build" "$MAJOR.$MINOR" > "$T/configure.log" 2>&1 ||
    fail "configuring the consumer against $P failed"
  found=$(sed -n 's/^ringreduce_DIR:PATH=//p' "$T/build/CMakeCache.txt")
  [ "$found" = "$LIB/cmake/ringreduce" ] || fail "find_package found '$found', not the prefix"
  "$CMAKE" --build "$T/build" > "$T/build.log" 2>&1 || fail "building the consumer failed"
  exe=$T/build/consumer
  # SameMajorVersion: asking for the next major version must be refused.
  consumer_cmake "$T/build-next" "$((MAJOR + 1)).0" > "$T/next.log" 2>&1 &&
    fail "find_package(ringreduce $((MAJOR + 1)).0) accepted version $VERSION"
  grep -q "compatible with requested version" "$T/next.log" ||
    fail "find_package(ringreduce $((MAJOR + 1)).0) failed, but not on the version"
  rm -f "$T/next.log"
else
  command -v pkg-config >/dev/null 2>&1 || skip "pkg-config not installed (tools/deps.sh installs it)"
  export PKG_CONFIG_PATH=$LIB/pkgconfig
  got=$(pkg-config --modversion ringreduce 2> "$T/pkgconfig.log") ||
    fail "pkg-config cannot read ringreduce.pc"
  [ "$got" = "$VERSION" ] || fail "ringreduce.pc says version $got, want $VERSION"
  [ "$(pkg-config --variable=prefix ringreduce)" = "$P" ] ||
    fail "ringreduce.pc's prefix is $(pkg-config --variable=prefix ringreduce), not $P"
  static=$(pkg-config --static --libs ringreduce)
  for l in -lringreduce -lpthread -lm; do
    [[ " $static " == *" $l "* ]] || fail "pkg-config --static --libs gives '$static': no $l"
  done
  read -ra pc_cflags <<< "$(pkg-config --cflags ringreduce)"
  read -ra pc_libs <<< "$(pkg-config --libs ringreduce)"
  read -ra extra <<< "$cflags"
  exe=$T/consumer
  "$CC" "${extra[@]}" "${pc_cflags[@]}" "$SRC/tests/install/consumer.c" -o "$exe" \
    "${pc_libs[@]}" "-Wl,-rpath,$(pkg-config --variable=libdir ringreduce)" \
    > "$T/build.log" 2>&1 || fail "compiling the consumer with pkg-config's flags failed"
fi
got=$(loads "$exe")
[ "$got" = "$so.$MAJOR" ] || fail "the consumer loads libringreduce from '$got', not the prefix"

# --- run it ----------------------------------------------------------------------------------
(cd "$T" && "$P/bin/rrun" --standalone --nproc-per-node 2 "$exe") > "$T/run.log" 2>&1 ||
  fail "the consumer failed under the installed rrun"
for r in 0 1; do
  grep -qx "consumer rank $r of 2: version $VERSION, all_reduce ok" "$T/run.log" ||
    fail "rank $r did not report success"
done
echo "install.$MODE: ok ($VERSION installed in a fresh prefix; consumer ran on 2 ranks)"
exit 0
