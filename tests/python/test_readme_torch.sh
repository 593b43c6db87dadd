#!/usr/bin/env bash
# The README's PyTorch install lines, run as written, as a new user would: in a copy of the
# source tree (its tracked files only: a fresh clone), with HOME in a temporary folder so that
# ~/rr-torch1 and ~/rr-torch2 are new environments. Then the installed package, not the source
# tree, must be what the example imported. Exit 77 without what the block needs.
#   test_readme_torch.sh 1|2 SOURCE_DIR
# PIP_CACHE_DIR, when set (tests/python.cmake: tools/torch_env.sh's cache), saves downloading
# torch's 2.5 GB of wheels again; pip still installs them (about a minute).
set -euo pipefail
v=$1 src=$2
if [ "$v" = 1 ]; then
  /usr/bin/python3 -c "import torch" 2>/dev/null || { echo "skipped: no Debian torch for /usr/bin/python3"; exit 77; }
fi
/usr/bin/python3 -c "import ensurepip" 2>/dev/null || { echo "skipped: no python3-venv"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/home"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  # What a clone would hold, as it is in the working tree (uncommitted and new files
  # included, ignored ones not).
  (cd "$src" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tmp/src")
else
  cp -r "$src/." "$tmp/src" && rm -rf "$tmp/src"/build*
fi
# The fenced block after the README's "readme-torchN" marker, exactly.
awk -v m="<!-- readme-torch$v:" 'index($0, m) == 1 {on = 1; next}
  on && /^```sh/ {inb = 1; next} inb && /^```/ {exit} inb {print}' "$src/README.md" > "$tmp/lines.sh"
[ -s "$tmp/lines.sh" ] || { echo "FAILED: no readme-torch$v block in README.md"; exit 1; }
echo "--- README block readme-torch$v:"; cat "$tmp/lines.sh"; echo "---"
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
