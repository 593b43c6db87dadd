#!/usr/bin/env bash
# The README's PyTorch install lines, run as written, as a new user would: in a copy of the
# source tree (its tracked files only: a fresh clone), with HOME in a temporary folder so that
# ~/rr-torch1 and ~/rr-torch2 are new environments. The "readme-wheel" block (the wheel, built
# by pip through scikit-build-core and CMake) runs first, then the "readme-torchN" block
# (a new environment, the wheel installed, the tutorial under mp.spawn and a launcher). Then
# the installed package, not the source tree, must be what the example imported. Exit 77
# without what the blocks need.
#   test_readme_torch.sh 1|2 SOURCE_DIR
# PIP_CACHE_DIR, when set (tests/python.cmake: tools/torch_env.sh's cache), saves downloading
# scikit-build-core and torch's 2.5 GB of wheels again; pip still installs them (about a minute).
# SKBUILD_CMAKE_DEFINE=RR_CUDA=OFF (tests/python.cmake) builds the README's wheel without CUDA.
set -euo pipefail
v=$1 src=$2
if [ "$v" = 1 ]; then
  /usr/bin/python3 -c "import torch" 2>/dev/null || { echo "skipped: no Debian torch for /usr/bin/python3"; exit 77; }
fi
/usr/bin/python3 -c "import ensurepip" 2>/dev/null || { echo "skipped: no python3-venv"; exit 77; }
python3 -m pip --version >/dev/null 2>&1 || { echo "skipped: no pip for python3 (the wheel's line)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/home"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  # What a clone would hold, as it is in the working tree (uncommitted and new files
  # included, ignored ones not; a file deleted but not yet committed left out).
  (cd "$src" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
    xargs -0 cp --parents -t "$tmp/src")
else
  cp -r "$src/." "$tmp/src" && rm -rf "$tmp/src"/build*
fi
# The fenced block after each README marker, exactly.
: > "$tmp/lines.sh"
for block in readme-wheel "readme-torch$v"; do
  awk -v m="<!-- $block:" 'index($0, m) == 1 {on = 1; next}
    on && /^```sh/ {inb = 1; next} inb && /^```/ {exit} inb {print}' "$src/README.md" > "$tmp/block"
  [ -s "$tmp/block" ] || { echo "FAILED: no $block block in README.md"; exit 1; }
  echo "--- README block $block:"; cat "$tmp/block"; echo "---"
  cat "$tmp/block" >> "$tmp/lines.sh"
done
cd "$tmp/src"
env -u PYTHONPATH -u RINGREDUCE_LIBRARY -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE HOME="$tmp/home" \
  bash -euxo pipefail "$tmp/lines.sh" > "$tmp/out.log" 2>&1 || { tail -60 "$tmp/out.log"; echo "FAILED: the README's lines"; exit 1; }
tail -5 "$tmp/out.log"
env=$tmp/home/rr-torch$v
# The example would fall back to the source tree if the package did not import: prove it did.
lib=$(cd / && env -u PYTHONPATH -u RINGREDUCE_LIBRARY "$env/bin/python" -c \
  "import ringreduce, ringreduce.torch; print(ringreduce.library_path())")
case "$lib" in
  "$env"/*) ;;
  *) echo "FAILED: the installed package loaded $lib, not its own library"; exit 1 ;;
esac
grep -q "epoch 4: loss" "$tmp/out.log" || { echo "FAILED: no training output"; exit 1; }
echo "readme-torch$v: the README's lines ran as written; the package in $env loaded $lib"
