#!/usr/bin/env bash
# Pack a results directory's raw files (per-run logs, per-host outputs, JSON, the raw RESULT
# lines) into one raw.tar.xz beside what a reader opens (table.md, scaling.md, the plots and
# their data, env*.txt, runs.tsv, the scripts), so that a run kept in the tree is a handful
# of files, not a hundred. Unpack with `tar xf raw.tar.xz` in that directory. The archive is
# reproducible (sorted names, fixed owner and time). Files named in FILES_KEPT stay out.
#   bench/pack_results.sh DIR [FILES_KEPT...]
set -euo pipefail
dir=${1:?usage: pack_results.sh DIR [FILES_KEPT...]}
shift
cd "$dir"
keep() { # keep FILE KEPT...: whether FILE stays out of the archive
  local f=$1 k
  shift
  case $f in *.md|*.png|*.gp|*.dat|*.sh|*.py|runs.tsv|env*.txt|raw.tar.xz) return 0 ;; esac
  for k in "$@"; do [ "$f" = "$k" ] && return 0; done
  return 1
}
mapfile -t all < <(find . -type f -printf '%P\n' | LC_ALL=C sort)
pack=()
for f in "${all[@]}"; do keep "$f" "$@" || pack+=("$f"); done
[ ${#pack[@]} -gt 0 ] || { echo "pack_results: nothing to pack in $dir"; exit 0; }
[ ! -e raw.tar.xz ] || { echo "pack_results: $dir/raw.tar.xz exists already" >&2; exit 1; }
tar --sort=name --mtime='2026-01-01 00:00Z' --owner=0 --group=0 --numeric-owner \
  -cJf raw.tar.xz "${pack[@]}"
rm -f "${pack[@]}"
find . -type d -empty -delete
echo "pack_results: ${#pack[@]} file(s) of $dir into raw.tar.xz"
