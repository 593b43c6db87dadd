#!/usr/bin/env bash
# Every C, C++ and CUDA file the repository tracks is as clang-format leaves it under the
# tree's .clang-format (tests/layout.cmake runs it as `format`). The version is pinned to
# clang-format 14, Debian's: another major version formats some constructs differently, and
# a check that passes on one machine and fails on the next is worse than none.
#   tools/check_format.sh [SRC]     list the files that differ; exit 1 if any
#   tools/check_format.sh --fix     format them in place (before a commit)
# The one whole-tree format is listed in .git-blame-ignore-revs (git blame skips it with
# `git config blame.ignoreRevsFile .git-blame-ignore-revs`).
set -euo pipefail
fix=0
if [ "${1:-}" = --fix ]; then fix=1; shift; fi
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src"
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null 2>&1 && "$c" --version | grep -q 'version 14\.'; then cf=$c; break; fi
done
if [ -z "$cf" ]; then
  echo "check_format: clang-format 14 not found (tools/deps.sh installs it with RR_DEPS_FORMAT=1)" >&2
  exit 2
fi
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check_format: $src is not a git checkout (the files checked are the tracked ones)" >&2
  exit 2
fi
bad=()
while IFS= read -r f; do
  [ -f "$f" ] || continue
  if [ $fix = 1 ]; then "$cf" -i --style=file "$f"; continue; fi
  "$cf" --style=file "$f" | cmp -s - "$f" || bad+=("$f")
done < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cc' '*.cpp')
[ $fix = 1 ] && exit 0
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} file(s) differ from .clang-format; run tools/check_format.sh --fix:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format: every tracked C/C++/CUDA file is formatted"
