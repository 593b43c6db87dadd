#!/usr/bin/env bash
# The layering check: dependencies point one way,
#   common <- transport <- ring <- group <- ddp, sampler, tools, bench, examples, tests
#   common <- transport <- rendezvous <- group;   common <- cuda <- transport, ring, group
# (the CUDA IPC lanes and the ring's device memory call the CUDA layer), and it checks them
# these ways, each failure naming the file, what it reached and the rule:
#   includes    a file may include only from the folders its own folder may see (rules), or
#               a header its folder's allow-list names
#   interfaces  from a folder that declares its interface (interfaces), only those headers
#   calls       a library file may call only functions defined in the folders its folder may
#               see, the public API where its rule says `api`, and the symbols its folder's
#               allow-list names: each object file's undefined rr_/rr__ symbols against the
#               folder whose object defines them. This sees what a hand-written declaration
#               hides from the include check (a public function declared in ringreduce.h but
#               defined in ring/ is still a call into ring/). The programs above the library
#               (tools, bench, examples) link the whole of it and are checked by their
#               includes only.
#   order       inside ring/ and group/, calls between files point down a fixed order of the
#               folder's files (order): the dispatcher above the algorithms above the
#               primitives, the group's public calls above its queue above running a call;
#               files on one line are peers and call none of each other; a file the order
#               does not place fails until it is placed
#   callbacks   every function pointer a library header declares is either a table its own
#               folder fills (a transport, the CUDA calls, a memory of ring/mem.h) or one of
#               the sanctioned callbacks through which a folder below calls code above it
#               (transport's consume and check, ...): a new one fails until it is listed,
#               since calls through it are invisible to the checks above
#   dead        every internal function or variable (rr__) the library defines is used:
#               called from another object, named again in its own file, or named in the
#               tests, tools, benches, examples or Python
#   sockets     only the files sockets() lists may listen, accept or connect (their objects'
#               undefined symbols, SOCKET_CALLS): every lane between two ranks is made in
#               rendezvous/lanes.c, so a second lane-making path fails until it is listed
#   owned       what owned() gives one file alone (a field of a shared struct, a setting) no
#               other library file names: the comm's spin policy is transport/comm.c's
#
#   tools/check_layers.sh [ROOT [OBJDIR]]   check the tree at ROOT (default: this repository)
#       OBJDIR holds the library's object files as <file>.o (CMake's rr_objects.dir, which the
#       `layers` test passes); a missing or older object is compiled here instead. Without
#       OBJDIR every library file is compiled into a scratch folder (seconds: about 15 s on
#       two busy cores).
#   tools/check_layers.sh --selftest        plant a violation of each rule in a scratch copy
#       and make sure the check catches each one, and nothing before
set -euo pipefail

# folder: the folders its files may include from and call into ("ringreduce" is
# include/ringreduce/, the public headers; "api" the public functions, rr_*, wherever the
# library defines them).
rules() {
  cat <<'RULES'
common: common ringreduce
transport: common cuda transport ringreduce
cuda: common cuda ringreduce
ring: common cuda transport ring ringreduce
rendezvous: common transport rendezvous ringreduce
group: common transport ring rendezvous cuda group ringreduce
ddp: common ddp ringreduce api
sampler: common sampler ringreduce
include: ringreduce
tools: common transport ring rendezvous cuda group ddp sampler tools ringreduce
bench: common transport ring rendezvous cuda group ddp sampler bench ringreduce
examples: common cuda ddp sampler examples ringreduce
RULES
}

# folder: the headers and symbols of folders its rule does not name that it may still use,
# each named. The DDP wrapper sits on the public API, but it keeps its gradients on the GPU
# itself: the CUDA layer's memory, copies, events and its own kernels (cuda/ddp.cu), and the
# stream the group orders its calls on, which the public API does not give back.
allowlist() {
  cat <<'ALLOW'
ddp: cuda/cuda.h group/pg.h
ddp: rr__cuda_built rr__cuda_device_count rr__cuda_ptr_device rr__cuda_set_device
ddp: rr__cuda_restore_device rr__cuda_malloc rr__cuda_free rr__cuda_host_alloc
ddp: rr__cuda_host_free rr__cuda_memcpy_async rr__cuda_memcpy_sync rr__cuda_event_create
ddp: rr__cuda_event_destroy rr__cuda_event_record rr__cuda_event_sync
ddp: rr__cuda_stream_wait_event rr__cuda_ddp
ddp: rr__cuda_pg_stream
ALLOW
}

# folder: the only headers of it that files of other folders may include. The shm, verbs and
# CUDA IPC transports are reached through the transport table, never by name.
interfaces() {
  cat <<'IFACES'
transport: transport/transport.h transport/comm.h transport/socket.h
IFACES
}

# folder: its files, one line per level, the top first ("folder+:" goes on with the level
# above). A file may call into files on lower levels only (docs/layout.md, "Folders").
order() {
  cat <<'ORDER'
ring: coll.c
ring: all_reduce.c all_reduce_rd.c all_reduce_star.c reduce_scatter.c all_gather.c
ring+: broadcast.c reduce.c gather.c scatter.c all_to_all.c barrier.c sendrecv.c
ring: pipe.c
ring: pipe_dev.c
ring: trace.c
ring: prims.c
ring: hdr.c op.c
ring: kind.c
group: spawn.c grow.c elastic.c
group: pg.c
group: api.c
group: work.c
group: run.c
group: direct.c
group: ipc.c
group: staging.c
group: device.c
ORDER
}

# The function pointers of the library's headers, by the struct that holds them.
#   table: struct   a table of functions its own folder fills and calls down through
#   callback: struct.field   a call up: a folder below calls code above it through the field
#       (who fills it and why); the checks above cannot see these calls, so each is named
pointers() {
  cat <<'PTRS'
table: rr__transport
table: rr__ibv
table: rr__cuda_api
table: rr__store_ops
table: rr__mem
callback: rr__req.consume        ring/pipe.c: reduce a segment out of the transport's memory
callback: rr__sniff.check        ring/prims.c: a waiting call checks the headers it peeks at
callback: rr__comm.on_revoke     group/pg.c: a revoked comm reaches its group's subgroups
callback: rr__fork_hook.prepare  transport/comm.c: a comm's state around fork()
callback: rr__fork_hook.parent   transport/comm.c: a comm's state around fork()
callback: rr__fork_hook.child    transport/comm.c: a comm's state around fork()
PTRS
}

# Who may open connections between processes, each file with its reason: the calls in
# SOCKET_CALLS are in no other library object. Every lane between two ranks of a group is
# made in rendezvous/lanes.c (init and subgroups through the bootstrap, a growth, a shrink):
# a file that listens, accepts or connects beside it fails until it is listed here.
SOCKET_CALLS="listen accept accept4 connect rr__sock_listen rr__sock_connect"
sockets() {
  cat <<'SOCKETS'
transport/socket.c          the calls themselves (an address's listener, a connect retried)
transport/shm_setup.c       the shared-memory lane's UNIX socket, which passes its memfd
rendezvous/lanes.c          every lane between two ranks of a group
rendezvous/store_server.c   the TCP store's listener
rendezvous/store_client.c   the TCP store's clients
group/grow.c                the growth's port (the knock) and the newcomer's knock
group/spawn.c               rr_spawn's store port, held for rank 0
SOCKETS
}

# What one file owns, though the names are visible to others (a field of a struct in a
# shared header, a setting every file could read): a regular expression (grep -E, on the
# code without its comments) that no other library file may match, and why.
owned() {
  cat <<'OWNED'
transport/comm.c (->|\.)spin\.                       the comm's spin state, rr__comm.spin
transport/comm.c ->(spin_us|spin_yield|host_cpus)\b  the spin settings: decided where the wait is
OWNED
}

# The folders whose object files make the library (CMakeLists.txt's RR_LIB_SOURCES), and the
# folders beyond them that may use its internal functions (linking the internal library).
LIB_DIRS="common transport cuda ring rendezvous group ddp sampler"
USER_DIRS="tests tools bench examples python"

check_includes() {
  local root=$1 bad=0
  declare -A allowed iface extra
  while IFS=: read -r dir deps; do allowed[$dir]=${deps# }; done < <(rules)
  while IFS=: read -r dir hdrs; do iface[$dir]=${hdrs# }; done < <(interfaces)
  while IFS=: read -r dir names; do extra[$dir]="${extra[$dir]:-} ${names# }"; done < <(allowlist)
  local f dir line inc top named
  while IFS= read -r f; do
    dir=${f%%/*}
    [ -n "${allowed[$dir]:-}" ] || continue
    while IFS=: read -r line inc; do
      # #include "top/..." -> top; includes without a folder are the file's neighbours.
      inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"$inc")
      [[ $inc == */* ]] || continue
      top=${inc%%/*}
      case " ${allowed[$dir]} ${extra[$dir]:-} " in
        *" $top "* | *" $inc "*) ;;
        *)
          named=$(grep -o '[a-z_]*/[a-z_]*\.h' <<<"${extra[$dir]:-}" | xargs)
          echo "layers: $f:$line includes \"$inc\": $dir/ may include only:" \
            "${allowed[$dir]}${named:+ (and, named: $named)}"
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

# The library's objects and their symbols, into $3: `pairs` ("<object> <source>" lines) and
# `nm` (one nm -A -P -g over all of them: "<object>: <symbol> <type> ...", type U for an
# undefined symbol). $2: the object folder, or "" to compile everything in $3/obj.
objects() {
  local root=$1 objdir=$2 scratch=$3 f o
  command -v nm >/dev/null || { echo "layers: nm (binutils) is needed to check calls"; return 1; }
  : >"$scratch/pairs"
  : >"$scratch/compile"
  # shellcheck disable=SC2086 # LIB_DIRS is a word list
  while IFS= read -r f; do
    o=${objdir:+$objdir/$f.o}
    if [ -n "$o" ] && [ -f "$o" ] && ! [ "$root/$f" -nt "$o" ]; then
      echo "$o $f" >>"$scratch/pairs"
    elif [ -z "$objdir" ] || [ -f "$o" ]; then
      # No object folder, or a stale object in it: compile the file here. A missing object
      # is a file this build leaves out (transport/ib/ without verbs, the .cu without CUDA).
      [[ $f == *.c ]] && echo "$f" >>"$scratch/compile"
    fi
  done < <(cd "$root" && find $LIB_DIRS -type f \( -name '*.c' -o -name '*.cu' \) 2>/dev/null | sort)
  if [ -s "$scratch/compile" ]; then
    compile_objects "$root" "$scratch/obj" <"$scratch/compile"
    while IFS= read -r f; do
      [ -f "$scratch/obj/$f.o" ] && echo "$scratch/obj/$f.o $f" >>"$scratch/pairs"
    done <"$scratch/compile"
  fi
  if ! [ -s "$scratch/pairs" ]; then
    echo "layers: no object files to check calls in"
    return 1
  fi
  cut -d' ' -f1 "$scratch/pairs" | xargs nm -A -P -g >"$scratch/nm" 2>/dev/null || true
}

# Calls between folders: each library object's undefined rr_ symbols, against the folder of
# the object that defines them.
check_calls() {
  local scratch=$1
  awk -v rules="$(rules)" -v allow="$(allowlist)" '
    BEGIN {
      n = split(rules, lines, "\n")
      for (i = 1; i <= n; i++) {
        split(lines[i], kv, ":")
        sub(/^ /, "", kv[2])
        allowed[kv[1]] = kv[2]
      }
      n = split(allow, lines, "\n")
      for (i = 1; i <= n; i++) {
        split(lines[i], kv, ":")
        m = split(kv[2], names, " ")
        for (j = 1; j <= m; j++) named[kv[1] " " names[j]] = 1
        if (m) allowlisted[kv[1]] = 1
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
        if (sym ~ /^rr_[^_]/ && index(" " allowed[d] " ", " api ")) continue   # public
        if ((d " " sym) in named) continue
        key = f " " sym
        if (key in seen) continue
        seen[key] = 1
        may = allowed[d]; gsub(/ ?ringreduce/, "", may)   # headers only: no code of its own
        sub(/ api$/, " (and the public API)", may); sub(/ api /, " ", may)
        printf "layers: %s calls %s, defined in %s/ (%s): %s/ may call into only: %s%s\n", \
          f, sym, defdir[sym], def[sym], d, may, \
          (d in allowlisted ? " and the symbols its allow-list names" : "")
        bad = 1
      }
      exit bad
    }' "$scratch/pairs" "$scratch/nm"
}

# Calls inside a folder with an order: from a file into one on a lower line only.
check_order() {
  local scratch=$1
  awk -v order="$(order)" '
    BEGIN {
      n = split(order, lines, "\n")
      for (i = 1; i <= n; i++) {
        split(lines[i], kv, ":")
        d = kv[1]
        if (sub(/\+$/, "", d) == 0) level[d]++
        m = split(kv[2], files, " ")
        for (j = 1; j <= m; j++) at[d "/" files[j]] = level[d]
        ordered[d] = 1
      }
    }
    FNR == NR { src[$1] = $2; next }
    {
      obj = $1; sub(/:$/, "", obj)
      sym = $2; type = $3
      if (!(obj in src) || sym !~ /^rr_/) next
      if (type ~ /^[Uwv]$/) { uses[++nu] = src[obj] " " sym; next }
      if (!(sym in def)) def[sym] = src[obj]
    }
    END {
      bad = 0
      for (f in src) {
        s = src[f]; d = s; sub(/\/.*/, "", d)
        if ((d in ordered) && !(s in at) && s ~ /\.c$/ && !(s in unplaced)) {
          unplaced[s] = 1
          printf "layers: %s is not in the order of %s/ (tools/check_layers.sh, order()): " \
            "place it on the line of its level\n", s, d
          bad = 1
        }
      }
      for (i = 1; i <= nu; i++) {
        split(uses[i], u, " ")
        f = u[1]; sym = u[2]; d = f; sub(/\/.*/, "", d)
        if (!(d in ordered) || !(sym in def)) continue
        g = def[sym]; e = g; sub(/\/.*/, "", e)
        if (e != d || g == f || !(f in at) || !(g in at)) continue
        if (at[g] > at[f]) continue
        key = f " " sym
        if (key in seen) continue
        seen[key] = 1
        printf "layers: %s calls %s, defined in %s: %s\n", f, sym, g, \
          at[g] == at[f] ? "files on one level of " d "/ call none of each other" \
                         : "a call up the order of " d "/ (tools/check_layers.sh, order())"
        bad = 1
      }
      exit bad
    }' "$scratch/pairs" "$scratch/nm"
}

# Function pointers in the library's headers: each in a listed table or a sanctioned
# callback. A struct's fields are those between its "struct name {" line and the next line
# that starts with "}".
check_pointers() {
  local root=$1
  # shellcheck disable=SC2086,SC2016 # LIB_DIRS is a word list; the $s are awk's
  (cd "$root" && find $LIB_DIRS -type f -name '*.h' | sort | xargs awk '
    FNR == 1 { name = "" }
    /^(typedef )?struct [A-Za-z_0-9]+ \{/ {
      name = $0; sub(/^(typedef )?struct /, "", name); sub(/ .*/, "", name)
    }
    /^}/ { name = "" }
    /\(\*[ ]*[A-Za-z_0-9]+\)[ ]*\(/ {
      f = $0; sub(/.*\(\*[ ]*/, "", f); sub(/\).*/, "", f)
      printf "%s:%d %s %s\n", FILENAME, FNR, (name == "" ? "-" : name), f
    }') | awk -v ptrs="$(pointers)" '
    BEGIN {
      n = split(ptrs, lines, "\n")
      for (i = 1; i <= n; i++) {
        split(lines[i], w, " ")
        if (w[1] == "table:") table[w[2]] = 1
        else if (w[1] == "callback:") cb[w[2]] = 1
      }
    }
    {
      where = $1; s = $2; f = $3
      if ((s in table) || ((s "." f) in cb)) next
      if (s == "-")
        printf "layers: %s declares a function pointer %s outside a struct: calls through " \
          "it are invisible to the checks; make it a field of a listed table or callback\n", \
          where, f
      else
        printf "layers: %s declares %s.%s, a function pointer the checks cannot follow: " \
          "list its struct as its folder'"'"'s table, or the field as a sanctioned callback " \
          "(tools/check_layers.sh, pointers())\n", where, s, f
      bad = 1
    }
    END { exit bad }'
}

# Internal symbols nothing uses. A symbol no other object references may still be used in
# its own file (a global called only there), in a library file not compiled here (the verbs
# transport without its header, the kernels without nvcc), or only by the tests and tools
# that link the internal library: it is dead when its name appears nowhere else, comments
# and declarations in headers aside.
check_dead() {
  local root=$1 scratch=$2
  awk 'FNR == NR { src[$1] = $2; next }
    {
      obj = $1; sub(/:$/, "", obj)
      if (!(obj in src) || $2 !~ /^rr__/) next
      if ($3 ~ /^[Uwv]$/) used[$2] = 1
      else if ($3 ~ /^[TDBRGS]$/ && !($2 in def)) def[$2] = src[obj]
    }
    END { for (s in def) if (!(s in used)) print s, def[s] }' "$scratch/pairs" "$scratch/nm" |
    sort >"$scratch/unref"
  local sym file u n alive bad=0
  while read -r sym file; do
    alive=0
    # shellcheck disable=SC2086 # LIB_DIRS is a word list
    while IFS= read -r u; do
      # The preprocessor strips the comments (-fpreprocessed: nothing else is expanded); a
      # compiler that cannot leaves them in.
      n=$( (cd "$root" && { ${CC:-cc} -x c -fpreprocessed -dD -E -P "$u" 2>/dev/null ||
        cat "$u"; }) | grep -cw -- "$sym") || n=0
      if [ "$u" != "$file" ] && [ "$n" -gt 0 ] || [ "$n" -gt 1 ]; then
        alive=1
        break
      fi
    done < <(cd "$root" && grep -rlw --include='*.c' --include='*.cu' -- "$sym" $LIB_DIRS \
               2>/dev/null)
    # shellcheck disable=SC2086 # USER_DIRS is a word list
    # (This script names the selftest's planted symbols: it does not count.)
    [ $alive = 1 ] || ! (cd "$root" && grep -rqw --include='*.c' --include='*.h' --include='*.cc' \
      --include='*.cu' --include='*.py' --include='*.sh' --exclude=check_layers.sh -- "$sym" \
      $USER_DIRS 2>/dev/null) || alive=1
    [ $alive = 1 ] && continue
    echo "layers: $file defines $sym, which nothing uses: delete it (dead code)"
    bad=1
  done <"$scratch/unref"
  return $bad
}

# Socket calls outside the files sockets() lists: each library object's undefined symbols.
check_sockets() {
  local scratch=$1
  awk -v calls="$SOCKET_CALLS" -v list="$(sockets)" '
    BEGIN {
      n = split(calls, c, " ")
      for (i = 1; i <= n; i++) call[c[i]] = 1
      n = split(list, lines, "\n")
      for (i = 1; i <= n; i++) { split(lines[i], w, " "); ok[w[1]] = 1 }
    }
    FNR == NR { src[$1] = $2; next }
    {
      obj = $1; sub(/:$/, "", obj)
      if (!(obj in src) || !($2 in call) || $3 !~ /^[Uwv]$/ || (src[obj] in ok)) next
      key = src[obj] " " $2
      if (key in seen) next
      seen[key] = 1
      printf "layers: %s calls %s: only the files of sockets() (tools/check_layers.sh) open " \
        "connections; the lanes between ranks are made in rendezvous/lanes.c\n", src[obj], $2
      bad = 1
    }
    END { exit bad }' "$scratch/pairs" "$scratch/nm"
}

# Names that one file owns (owned()), matched in the other library files' code.
check_owned() {
  local root=$1 bad=0 owner re why f line
  while read -r owner re why; do
    [ -n "$owner" ] || continue
    # shellcheck disable=SC2086 # LIB_DIRS is a word list
    while IFS= read -r f; do
      [ "$f" = "$owner" ] && continue
      # The comments stripped as in check_dead: a comment may name what the code may not.
      line=$( (cd "$root" && { ${CC:-cc} -x c -fpreprocessed -dD -E -P "$f" 2>/dev/null ||
        cat "$f"; }) | grep -E -m1 -- "$re") || continue
      echo "layers: $f names $(grep -oE -m1 -- "$re" <<<"$line"), which is $owner's alone ($why)"
      bad=1
    done < <(cd "$root" && grep -rlE --include='*.c' --include='*.h' --include='*.cu' -- "$re" \
               $LIB_DIRS 2>/dev/null | sort)
  done < <(owned)
  return $bad
}

check() {
  local root=$1 objdir=${2:-} bad=0 scratch
  check_includes "$root" || bad=1
  check_pointers "$root" || bad=1
  check_owned "$root" || bad=1
  scratch=$(mktemp -d)
  if objects "$root" "$objdir" "$scratch"; then
    check_calls "$scratch" || bad=1
    check_sockets "$scratch" || bad=1
    check_order "$scratch" || bad=1
    check_dead "$root" "$scratch" || bad=1
  else
    bad=1
  fi
  rm -rf "$scratch"
  return $bad
}

if [ "${1:-}" = "--selftest" ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir "$tmp/src" "$tmp/obj"
  for d in common transport cuda ring rendezvous group ddp sampler include $USER_DIRS; do
    [ -d "$here/$d" ] && cp -r "$here/$d" "$tmp/src/$d"
  done
  # Calls are checked on the objects of a few files compiled here (the rest of the copy has
  # none, so only these count): the callers planted in below, and the files defining what
  # they call. Compiling the whole library would take much longer. (The dead-code check
  # finds the uses of the others by their names.)
  (cd "$tmp/src" && ls transport/tcp.c cuda/runtime.c ring/op.c ring/prims.c ring/barrier.c \
     ring/coll.c ring/all_reduce.c ring/all_gather.c ddp/check.c common/*.c group/*.c \
     rendezvous/bootstrap.c) |
    compile_objects "$tmp/src" "$tmp/obj"
  before=$(check "$tmp/src" "$tmp/obj" 2>&1 | grep -v '^layers: note:' || true)
  # Calls the include check cannot see: the TCP transport calling up into the ring with a
  # hand-written declaration, the CUDA layer calling the group through the public header.
  printf 'void rr__reduce();
void rr__selftest_tcp(void) { rr__reduce(0, 0, 0, 0, 0, 0, 0); }
' >>"$tmp/src/transport/tcp.c"
  printf 'int rr__selftest_cu(const rr_pg *pg) { return rr_get_world_size(pg); }
' >>"$tmp/src/cuda/runtime.c"
  # Calls against the order: the primitives calling an algorithm, an algorithm its peer, the
  # group's device staging calling back up into its queue; and a file no order places.
  printf 'int rr__all_reduce_ring(rr__coll *c);
int rr__selftest_up(rr__coll *c) { return rr__all_reduce_ring(c); }
' >>"$tmp/src/ring/prims.c"
  printf 'int rr__selftest_peer(rr__coll *c) { return rr__all_gather_ring(c); }
' >>"$tmp/src/ring/barrier.c"
  printf 'int rr__selftest_back(rr_pg *pg) { return rr__pg_submit(pg, NULL, NULL); }
' >>"$tmp/src/group/staging.c"
  printf '#include "ring/algo.h"
int rr__selftest_new(rr__coll *c) { return rr__barrier_dissem(c); }
' >"$tmp/src/ring/selftest_new.c"
  # The DDP wrapper calling the CUDA layer beyond its allow-list, and including the ring.
  printf 'int rr__selftest_ddp(void) { return rr__cuda_stream_sync(0); }
' >>"$tmp/src/ddp/check.c"
  printf '#include "ring/coll.h"\n' >>"$tmp/src/ddp/ddp_host.h"
  # An internal function nobody calls.
  printf 'int rr__selftest_dead(void) { return 0; }
' >>"$tmp/src/common/util.c"
  printf 'int rr__selftest_dead_ring(void) { return 1; }
' >>"$tmp/src/ring/op.c"
  # Lanes made beside rendezvous/lanes.c: the shrink listening again, the bootstrap connecting
  # itself; and the comm's spin policy decided or run outside the comm (owned()).
  printf 'int listen(int fd, int backlog);
int rr__selftest_listen(int fd) { return listen(fd, 1); }
' >>"$tmp/src/group/elastic.c"
  printf 'int rr__selftest_dial(const rr__addr *a, int *fd) { return rr__sock_connect(a, 0, fd); }
int rr__selftest_yield(void) { return (int)rr__params_get()->spin_yield; }
' >>"$tmp/src/rendezvous/bootstrap.c"
  printf 'int rr__selftest_spin(rr__comm *cm) { return cm->spin.skip; }
' >>"$tmp/src/ring/prims.c"
  # A new callback: a function pointer in the comm that nothing lists.
  sed -i 's|^typedef struct rr__comm {|&\n  void (*selftest_hook)(void *ctx);|' \
    "$tmp/src/transport/comm.h"
  printf '%s\n' transport/tcp.c cuda/runtime.c ring/prims.c ring/barrier.c group/staging.c \
    ring/selftest_new.c ddp/check.c common/util.c ring/op.c group/elastic.c \
    rendezvous/bootstrap.c | compile_objects "$tmp/src" "$tmp/obj"
  # And three includes: the transport including the ring, the ring the group, the group the
  # shm transport's private header.
  printf '#include "ring/coll.h"\n' >>"$tmp/src/transport/transport.c"
  printf '#include "group/pg.h"\n' >>"$tmp/src/ring/pipe.c"
  printf '#include "transport/shm.h"\n' >>"$tmp/src/group/pg.c"
  after=$(check "$tmp/src" "$tmp/obj" 2>&1 || true)
  grep -v '^layers: note:' <<<"$after" | sed 's/^/  /'
  want=(
    'transport/transport.c:[0-9]+ includes "ring/coll.h"'
    'ring/pipe.c:[0-9]+ includes "group/pg.h"'
    'group/pg.c:[0-9]+ includes "transport/shm.h", private to transport/'
    'ddp/ddp_host.h:[0-9]+ includes "ring/coll.h": ddp/ may include only'
    'transport/tcp.c calls rr__reduce, defined in ring/ \(ring/op.c\)'
    'cuda/runtime.c calls rr_get_world_size, defined in group/'
    'ddp/check.c calls rr__cuda_stream_sync, defined in cuda/'
    'ring/prims.c calls rr__all_reduce_ring, defined in ring/all_reduce.c: a call up the order'
    'ring/barrier.c calls rr__all_gather_ring, defined in ring/all_gather.c: files on one level'
    'group/staging.c calls rr__pg_submit, defined in group/work.c: a call up the order'
    'ring/selftest_new.c is not in the order of ring/'
    'transport/comm.h:[0-9]+ declares rr__comm.selftest_hook, a function pointer'
    'common/util.c defines rr__selftest_dead, which nothing uses'
    'ring/op.c defines rr__selftest_dead_ring, which nothing uses'
    'group/elastic.c calls listen: only the files of sockets\(\)'
    'rendezvous/bootstrap.c calls rr__sock_connect: only the files of sockets\(\)'
    'ring/prims.c names ->spin\., which is transport/comm.c.s alone'
    'rendezvous/bootstrap.c names ->spin_yield, which is transport/comm.c.s alone'
  )
  if [ -n "$before" ]; then
    echo "layers selftest: reported before anything was planted:"
    echo "$before"
    exit 1
  fi
  for w in "${want[@]}"; do
    grep -qE "$w" <<<"$after" || { echo "layers selftest: not caught: $w"; exit 1; }
  done
  echo "layers selftest: all ${#want[@]} planted violations were caught (4 includes, 3 calls" \
    "between folders, 4 against the order, 1 callback, 2 dead symbols, 2 connections made" \
    "beside the lanes, 2 names of the comm's spin policy outside it)"
  exit 0
fi

root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
if check "$root" "${2:-}"; then
  echo "layers: every include, call, callback and symbol follows the layering"
else
  exit 1
fi
