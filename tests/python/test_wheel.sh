#!/usr/bin/env bash
# The release path of the Python package: `python -m build` makes the sdist from a copy of the
# tree (its tracked and new files, as a clone has them) and then the wheel from that sdist
# alone, scikit-build-core driving CMake (pyproject.toml, python/CMakeLists.txt). Then the
# wheel is checked: its name and version, every file it must hold and nothing else, rrun
# executable among its scripts, and the library needing nothing at run time but the C
# library (ldd), with libibverbs and libcuda named only for dlopen. The wheel is left in
# OUT_DIR for test_pip_install.sh, which installs it where no build tool is.
#   test_wheel.sh SOURCE_DIR OUT_DIR
# The backend comes from a virtual environment this checkout owns, build-venv/wheel-tools
# (scikit-build-core and build, pinned; downloads cached in build-venv/pip-cache, as
# tools/torch_env.sh's are), so the build itself is offline (--no-isolation). Exit 77 where
# that environment cannot be made (no python3-venv, or offline before the first download).
set -euo pipefail
src=$(cd "$1" && pwd) out=$2
skbuild=${RR_SKBUILD_VERSION:-1.1.2} pybuild=${RR_PYBUILD_VERSION:-1.6.1}
tools=$src/build-venv/wheel-tools
tpy=$tools/bin/python
have_tools() {
  [ -x "$tpy" ] && "$tpy" -c "import importlib.metadata as m, sys
sys.exit(m.version('scikit-build-core') != '$skbuild' or m.version('build') != '$pybuild')" 2>/dev/null
}
if ! have_tools; then
  /usr/bin/python3 -c "import ensurepip" 2>/dev/null || { echo "skipped: no python3-venv"; exit 77; }
  rm -rf "$tools"
  /usr/bin/python3 -m venv "$tools"
  PIP_CACHE_DIR=$src/build-venv/pip-cache "$tools/bin/pip" install -q --disable-pip-version-check \
    "scikit-build-core==$skbuild" "build==$pybuild" ||
    { rm -rf "$tools"
      echo "skipped: cannot install scikit-build-core $skbuild and build $pybuild (offline?)"
      exit 77; }
fi

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/dist" "$tmp/whl"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$src" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
    xargs -0 cp --parents -t "$tmp/src")
else
  cp -r "$src/." "$tmp/src" && rm -rf "$tmp/src"/build*
fi

start=$(date +%s)
# No CMAKE_ARGS or SKBUILD_* from the caller's environment: the wheel as the sdist makes it.
env -u CMAKE_ARGS -u SKBUILD_CMAKE_ARGS -u SKBUILD_CMAKE_DEFINE -u CMAKE_BUILD_PARALLEL_LEVEL \
  "$tpy" -m build --no-isolation --outdir "$tmp/dist" "$tmp/src" > "$tmp/build.log" 2>&1 ||
  { tail -60 "$tmp/build.log"; echo "FAILED: python -m build (sdist, then the wheel from it)"; exit 1; }
echo "sdist and wheel built in $(( $(date +%s) - start )) s"

# The version: include/ringreduce/version.h's, the same as the package's __version__.
ver=$(awk '/^#define RR_VERSION_(MAJOR|MINOR|PATCH) /{v = v (v == "" ? "" : ".") $3} END{print v}' \
  "$src/include/ringreduce/version.h")
pyver=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$src/python/ringreduce/__init__.py")
[ "$ver" = "$pyver" ] ||
  { echo "FAILED: version.h says $ver, python/ringreduce/__init__.py $pyver"; exit 1; }
sdist=$tmp/dist/ringreduce-$ver.tar.gz
wheel=$tmp/dist/ringreduce-$ver-py3-none-linux_$(uname -m).whl
ls "$tmp/dist"
[ -f "$sdist" ] || { echo "FAILED: no $sdist"; exit 1; }
[ -f "$wheel" ] || { echo "FAILED: no $wheel"; exit 1; }
grep -q "Building wheel from sdist" "$tmp/build.log" ||
  { echo "FAILED: the wheel was not built from the sdist"; exit 1; }
echo "sdist $(du -k "$sdist" | cut -f1) KiB, wheel $(du -k "$wheel" | cut -f1) KiB"

# Every file, and nothing else: the package's Python files as the tree has them, the library,
# rrun (mode 755, which pip keeps), and the metadata with the license.
(cd "$tmp/src/python" && find ringreduce -name '*.py') > "$tmp/want"
{ echo ringreduce/lib/libringreduce.so; echo "ringreduce-$ver.data/scripts/rrun"
  for f in METADATA WHEEL RECORD licenses/LICENSE; do echo "ringreduce-$ver.dist-info/$f"; done
} >> "$tmp/want"
"$tpy" - "$wheel" "$tmp/whl" > "$tmp/have" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for i in z.infolist():
        print(i.filename)
        if i.filename.endswith("/scripts/rrun") and not (i.external_attr >> 16) & 0o111:
            sys.exit(f"{i.filename} is not executable in the wheel")
    z.extractall(sys.argv[2])
PY
if ! diff <(sort "$tmp/want") <(sort "$tmp/have"); then
  echo "FAILED: the wheel's files differ from the list above ('<' missing, '>' not expected)"; exit 1
fi
for f in ringreduce/__init__.py ringreduce/torch.py ringreduce/_lib.py; do
  cmp "$src/python/$f" "$tmp/whl/$f" || { echo "FAILED: $f differs from the tree's"; exit 1; }
done
grep -qx "Version: $ver" "$tmp/whl/ringreduce-$ver.dist-info/METADATA"
grep -qx "License-Expression: BSD-3-Clause" "$tmp/whl/ringreduce-$ver.dist-info/METADATA"

# What the library needs at run time: ldd's list, every line of it the C library's.
lib=$tmp/whl/ringreduce/lib/libringreduce.so
echo "--- ldd ringreduce/lib/libringreduce.so ($(du -k "$lib" | cut -f1) KiB)"
ldd "$lib" | tee "$tmp/ldd"
echo "---"
libc='linux-vdso\.so\.1|lib(c|m|pthread|dl|rt)\.so\.[0-9]+ =>|/lib(64)?/ld-linux[-a-z0-9_.]*\.so\.[0-9]+'
bad=$(grep -vE "^\s*($libc)" "$tmp/ldd" || true)
[ -z "$bad" ] || { echo "FAILED: the library needs more than the C library: $bad"; exit 1; }
ldd "$tmp/whl/ringreduce-$ver.data/scripts/rrun" | grep -q "not found" &&
  { echo "FAILED: rrun lacks a library"; exit 1; }
# libibverbs (transport/ib) and, in a CUDA build, the driver are opened by name when needed.
cuda=$("$tpy" -c "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).rr_cuda_built())" "$lib")
grep -aq 'libibverbs\.so\.1' "$lib" ||
  { echo "FAILED: no libibverbs.so.1 to dlopen in the library"; exit 1; }
if [ "$cuda" = 1 ]; then
  grep -aq 'libcuda\.so\.1' "$lib" || { echo "FAILED: a CUDA build names no libcuda.so.1"; exit 1; }
  echo "built with CUDA (static runtime inside; libcuda.so.1 and libibverbs.so.1 are dlopen()ed)"
else
  echo "built without CUDA (libibverbs.so.1 is dlopen()ed)"
fi
mkdir -p "$out"
rm -f "$out"/ringreduce-*.whl
cp "$wheel" "$out/"
echo "wheel: $out/$(basename "$wheel")"
