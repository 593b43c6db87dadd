#!/usr/bin/env bash
# The layering check: dependencies point one way,
#   common <- transport <- ring <- group <- ddp, sampler, tools, bench, examples, tests
#   common <- transport <- rendezvous <- group;   common <- cuda <- transport, ring, group
# (the CUDA IPC lanes and the ring's device reductions call the CUDA layer)
# and a file may include only the folders its own folder may see (below). A lower layer
# that includes a higher one fails the check, naming the file, the line and the rule.
#   tools/check_layers.sh [ROOT]     check the tree at ROOT (default: this repository)
#   tools/check_layers.sh --selftest plant a forbidden include in a scratch copy of the
#                                    rules' folders and make sure the check catches it
set -euo pipefail

# folder: the folders its files may include from ("ringreduce" is include/ringreduce/,
# the public headers).
rules() {
  cat <<'RULES'
common: common ringreduce
transport: common cuda transport ringreduce
cuda: common cuda ringreduce
ring: common cuda transport ring ringreduce
rendezvous: common transport rendezvous ringreduce
group: common transport ring rendezvous cuda group ringreduce
ddp: common transport ring rendezvous cuda group ddp ringreduce
sampler: common sampler ringreduce
include: ringreduce
tools: common transport ring rendezvous cuda group ddp sampler tools ringreduce
bench: common transport ring rendezvous cuda group ddp sampler bench ringreduce
examples: common cuda ddp sampler examples ringreduce
RULES
}

check() {
  local root=$1 bad=0
  declare -A allowed
  while IFS=: read -r dir deps; do allowed[$dir]=" $deps "; done < <(rules)
  local f dir line inc top
  while IFS= read -r f; do
    dir=${f%%/*}
    [ -n "${allowed[$dir]:-}" ] || continue
    while IFS=: read -r line inc; do
      # #include "top/..." -> top; includes without a folder are the file's neighbours.
      inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"$inc")
      [[ $inc == */* ]] || continue
      top=${inc%%/*}
      case " ${allowed[$dir]} " in
        *" $top "*) ;;
        *)
          echo "layers: $f:$line includes \"$inc\": $dir/ may include only:${allowed[$dir]}"
          bad=1
          ;;
      esac
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$root/$f" || true)
  done < <(cd "$root" && find common transport cuda ring rendezvous group ddp sampler include tools \
             bench examples -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
             2>/dev/null | sort)
  return $bad
}

if [ "${1:-}" = "--selftest" ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for d in common transport ring group; do cp -r "$here/$d" "$tmp/$d"; done
  check "$tmp" >/dev/null || { echo "layers selftest: the clean copy already fails"; exit 1; }
  # A transport that reaches up into the ring, and the ring into the group: both must fail.
  printf '#include "ring/coll.h"\n' >> "$tmp/transport/transport.c"
  printf '#include "group/pg.h"\n' >> "$tmp/ring/pipe.c"
  out=$(check "$tmp" || true)
  grep -q 'transport/transport.c:.*"ring/coll.h"' <<<"$out" &&
    grep -q 'ring/pipe.c:.*"group/pg.h"' <<<"$out" ||
    { echo "layers selftest: a forbidden include went unnoticed"; echo "$out"; exit 1; }
  echo "layers selftest: both planted includes were caught"
  exit 0
fi

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if check "$root"; then
  echo "layers: every include follows the layering"
else
  exit 1
fi
