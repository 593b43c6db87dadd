#!/usr/bin/env bash
# The layering check: dependencies point one way,
#   common <- transport <- ring <- group <- ddp, sampler, tools, bench, examples, tests
#   common <- transport <- rendezvous <- group;   common <- cuda <- transport, ring, group
# (the CUDA IPC lanes and the ring's device reductions call the CUDA layer), and it checks
# them three ways, each failure naming the file, what it reached and the rule:
#   includes    a file may include only from the folders its own folder may see (rules)
#   interfaces  from a folder that declares its interface (interfaces), only those headers
#   calls       a library file may call only functions defined in the folders its folder may
#               see: each object file's undefined rr_/rr__ symbols against the folder whose
#               object defines them. This sees what a hand-written declaration hides from the
#               include check (a public function declared in ringreduce.h but defined in
#               ring/ is still a call into ring/). The programs above the library (tools,
#               bench, examples) link the whole of it and are checked by their includes only.
#
#   tools/check_layers.sh [ROOT [OBJDIR]]   check the tree at ROOT (default: this repository)
#       OBJDIR holds the library's object files as <file>.o (CMake's rr_objects.dir, which the
#       `layers` test passes); a missing or older object is compiled here instead. Without
#       OBJDIR every library file is compiled into a scratch folder (seconds: about 15 s on
#       two busy cores).
#   tools/check_layers.sh --selftest        plant a forbidden include, a private header and
#       forbidden calls in a scratch copy and make sure the check catches each one
set -euo pipefail

# folder: the folders its files may include from and call into ("ringreduce" is
# include/ringreduce/, the public headers).
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

# folder: the only headers of it that files of other folders may include. The shm, verbs and
# CUDA IPC transports are reached through the transport table, never by name.
interfaces() {
  cat <<'IFACES'
transport: transport/transport.h transport/comm.h transport/socket.h
IFACES
}

# The folders whose object files make the library (CMakeLists.txt's RR_LIB_SOURCES).
LIB_DIRS="common transport cuda ring rendezvous group ddp sampler"

check_includes() {
  local root=$1 bad=0
  declare -A allowed iface
  while IFS=: read -r dir deps; do allowed[$dir]=${deps# }; done < <(rules)
  while IFS=: read -r dir hdrs; do iface[$dir]=${hdrs# }; done < <(interfaces)
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
          echo "layers: $f:$line includes \"$inc\": $dir/ may include only: ${allowed[$dir]}"
          bad=1
          continue
          ;;
      esac
      if [ "$top" != "$dir" ] && [ -n "${iface[$top]:-}" ]; then
        case " ${iface[$top]} " in
          *" $inc "*) ;;
          *)
            echo "layers: $f:$line includes \"$inc\", private to $top/: other folders may" \
              "include only its interface: ${iface[$top]}"
            bad=1
            ;;
        esac
      fi
    done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$root/$f" || true)
  done < <(cd "$root" && find common transport cuda ring rendezvous group ddp sampler include tools \
             bench examples -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) \
             2>/dev/null | sort)
  return $bad
}

# Compile the library sources listed on stdin (paths under $1) into $2/<file>.o, as many at
# once as there are cores. Symbols are all that is wanted: no optimisation, no warnings. A
# file that does not compile here (the verbs transport without its header, say) is left out
# with a note on stderr: its calls go unchecked, and calls into it look undefined.
compile_objects() {
  local root=$1 out=$2
  # shellcheck disable=SC2016 # $0, $1 are the inner shell's
  xargs -r -P "$(nproc 2>/dev/null || echo 2)" -I{} sh -c '
    mkdir -p "$(dirname "$1/$2.o")"
    ${CC:-cc} -std=gnu11 -D_GNU_SOURCE -O0 -w -c -I"$0/include" -I"$0" -o "$1/$2.o" "$0/$2" 2>/dev/null ||
      echo "layers: note: $2 does not compile here; its calls are not checked" >&2' \
    "$root" "$out" {}
}

# Calls: each library object's undefined rr_ symbols, against the folder of the object that
# defines them. $2: the object folder, or "" to compile everything in a scratch folder.
check_calls() {
  local root=$1 objdir=$2 scratch rc=0
  command -v nm >/dev/null || { echo "layers: nm (binutils) is needed to check calls"; return 1; }
  scratch=$(mktemp -d)
  local f o pairs=$scratch/pairs
  : >"$pairs"
  # shellcheck disable=SC2086 # LIB_DIRS is a word list
  while IFS= read -r f; do
    o=${objdir:+$objdir/$f.o}
    if [ -n "$o" ] && [ -f "$o" ] && ! [ "$root/$f" -nt "$o" ]; then
      echo "$o $f" >>"$pairs"
    elif [ -z "$objdir" ] || [ -f "$o" ]; then
      # No object folder, or a stale object in it: compile the file here. A missing object
      # is a file this build leaves out (transport/ib/ without verbs, the .cu without CUDA).
      [[ $f == *.c ]] && echo "$f" >>"$scratch/compile"
    fi
  done < <(cd "$root" && find $LIB_DIRS -type f \( -name '*.c' -o -name '*.cu' \) 2>/dev/null | sort)
  if [ -s "$scratch/compile" ]; then
    compile_objects "$root" "$scratch/obj" <"$scratch/compile"
    while IFS= read -r f; do
      [ -f "$scratch/obj/$f.o" ] && echo "$scratch/obj/$f.o $f" >>"$pairs"
    done <"$scratch/compile"
  fi
  if ! [ -s "$pairs" ]; then
    echo "layers: no object files to check calls in"
    rm -rf "$scratch"
    return 1
  fi
  # One nm for all objects; -A prefixes each line with the object, -P keeps it parseable:
  # "<object>: <symbol> <type> ...", type U for an undefined symbol.
  cut -d' ' -f1 "$pairs" | xargs nm -A -P -g >"$scratch/nm" 2>/dev/null || true
  awk -v rules="$(rules)" '
    BEGIN {
      n = split(rules, lines, "\n")
      for (i = 1; i <= n; i++) {
        split(lines[i], kv, ":")
        sub(/^ /, "", kv[2])
        allowed[kv[1]] = kv[2]
      }
    }
    FNR == NR { src[$1] = $2; next }   # the pairs: object -> source
    {
      obj = $1; sub(/:$/, "", obj)
      sym = $2; type = $3
      if (!(obj in src) || sym !~ /^rr_/) next
      if (type ~ /^[Uwv]$/) { uses[++nu] = src[obj] " " sym; next }  # w, v: weak, undefined
      # A definition: the folder is the source path up to its first slash.
      f = src[obj]; d = f; sub(/\/.*/, "", d)
      if (!(sym in def)) { def[sym] = f; defdir[sym] = d }
    }
    END {
      bad = 0
      for (i = 1; i <= nu; i++) {
        split(uses[i], u, " ")
        f = u[1]; sym = u[2]; d = f; sub(/\/.*/, "", d)
        if (!(sym in def) || index(" " allowed[d] " ", " " defdir[sym] " ")) continue
        key = f " " sym
        if (key in seen) continue
        seen[key] = 1
        may = allowed[d]; gsub(/ ?ringreduce/, "", may)   # headers only: no code of its own
        printf "layers: %s calls %s, defined in %s/ (%s): %s/ may call into only: %s\n", \
          f, sym, defdir[sym], def[sym], d, may
        bad = 1
      }
      exit bad
    }' "$pairs" "$scratch/nm" || rc=1
  rm -rf "$scratch"
  return $rc
}

check() {
  local root=$1 objdir=${2:-} bad=0
  check_includes "$root" || bad=1
  check_calls "$root" "$objdir" || bad=1
  return $bad
}

if [ "${1:-}" = "--selftest" ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir "$tmp/src" "$tmp/obj"
  for d in common transport cuda ring rendezvous group include; do
    cp -r "$here/$d" "$tmp/src/$d"
  done
  # Calls are checked on the objects of a few files compiled here (the rest of the copy has
  # none, so only these count): the two callers planted in below, and the files defining what
  # they call. Compiling the whole library would take much longer.
  (cd "$tmp/src" && ls transport/tcp.c cuda/runtime.c ring/op.c common/*.c group/*.c) |
    compile_objects "$tmp/src" "$tmp/obj"
  before=$(check "$tmp/src" "$tmp/obj" 2>&1 || true)
  # Two calls the include check cannot see: the TCP transport calling up into the ring with a
  # hand-written declaration, and the CUDA layer calling the group through the public header.
  printf 'void rr__reduce();
void rr__selftest_tcp(void) { rr__reduce(0, 0, 0, 0, 0, 0, 0); }
' \
    >>"$tmp/src/transport/tcp.c"
  printf 'int rr__selftest_cu(const rr_pg *pg) { return rr_get_world_size(pg); }
' \
    >>"$tmp/src/cuda/runtime.c"
  printf '%s\n' transport/tcp.c cuda/runtime.c | compile_objects "$tmp/src" "$tmp/obj"
  # And three includes: the transport including the ring, the ring the group, the group the
  # shm transport's private header.
  printf '#include "ring/coll.h"\n' >>"$tmp/src/transport/transport.c"
  printf '#include "group/pg.h"\n' >>"$tmp/src/ring/pipe.c"
  printf '#include "transport/shm.h"\n' >>"$tmp/src/group/pg.c"
  after=$(check "$tmp/src" "$tmp/obj" 2>&1 || true)
  echo "$after" | grep -E 'transport/t[a-z]*\.c|ring/pipe\.c|group/pg\.c|cuda/runtime\.c' |
    sed 's/^/  /'
  want=(
    'transport/transport.c:[0-9]+ includes "ring/coll.h"'
    'ring/pipe.c:[0-9]+ includes "group/pg.h"'
    'group/pg.c:[0-9]+ includes "transport/shm.h", private to transport/'
    'transport/tcp.c calls rr__reduce, defined in ring/ \(ring/op.c\)'
    'cuda/runtime.c calls rr_get_world_size, defined in group/'
  )
  if grep -q ' calls ' <<<"$before"; then
    echo "layers selftest: calls reported before anything was planted:"
    echo "$before"
    exit 1
  fi
  for w in "${want[@]}"; do
    if grep -qE "$w" <<<"$before"; then
      echo "layers selftest: reported before anything was planted: $w"
      exit 1
    fi
    grep -qE "$w" <<<"$after" || { echo "layers selftest: not caught: $w"; exit 1; }
  done
  echo "layers selftest: the 3 planted includes and 2 planted calls were caught"
  exit 0
fi

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if check "$root" "${2:-}"; then
  echo "layers: every include and every call follows the layering"
else
  exit 1
fi
