#!/usr/bin/env bash
# Tests of the *_perf tools (bench/), one case per run so CTest times each alone:
#
#   bash tests/test_bench.sh RRUN BINDIR CASE
#
# Every case runs a tool under the real launcher (rrun --standalone: a free port, so cases
# may run in parallel) and checks its output against nccl-tests' format and arithmetic with
# check_table below: header and footer lines, column counts, #wrong, the size sequence,
# algbw = size / time and busbw = algbw * factor within print rounding, the footer's average.
# Exit 0 pass, 1 fail, 77 skip.
set -u

RRUN=${1:?usage: test_bench.sh RRUN BINDIR CASE}
BIN=${2:?}
CASE=${3:?}
[ -x "$RRUN" ] || { echo "rrun not built: $RRUN" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")" && pwd) # tests/: test_bench_json.py; ../bench: perf_json.py
T=$(mktemp -d "${TMPDIR:-/tmp}/bench-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT RR_PERF_CORRUPT \
  NCCL_TESTS_MIN_BW RR_SOCKET_IFNAME NCCL_TESTS_ALLTOALLV_SPREAD NCCL_TESTS_ALLTOALLV_MATRIX_FILE \
  NCCL_TESTS_ALLTOALLV_MATRIX_SCALE

fail() {
  echo "FAIL($CASE): $*" >&2
  for f in "$T/out" "$T/err"; do
    [ -s "$f" ] && { echo "--- $f:"; head -c 6000 "$f"; echo; }
  done >&2
  exit 1
}

# run NPROC TOOL ARGS...: output in $T/out and $T/err, exit status in RC.
run() {
  local n=$1 tool=$2
  shift 2
  [ -x "$BIN/${tool}_perf" ] || fail "not built: $BIN/${tool}_perf"
  # A hang fails the case well before CTest's limit.
  timeout -s KILL 100 "$RRUN" --standalone --nproc-per-node "$n" "$BIN/${tool}_perf" "$@" \
    >"$T/out" 2>"$T/err"
  RC=$?
}
expect_rc() { [ "$RC" = "$1" ] || fail "exit status $RC, expected $1"; }
expect_out() { grep -qF -- "$1" "$T/out" || fail "stdout lacks: $1"; }
expect_err() { grep -qF -- "$1" "$T/err" || fail "stderr lacks: $1"; }

# check_table TOOL NRANKS MIN MAX STEP MODE ROOT CHECK [EXTRA_COLS [LINK_GBPS]]
# MODE is factor or bytes (-f or -i); CHECK 1 expects #wrong 0, 0 expects N/A. Sizes are
# bytes as printed by the header (the tool's own parse of K/M/G is checked there too).
# Optional environment: ITER=1 (-I 1: per-iteration columns after each half), TS=1 (-S 1:
# a timestamp after them), TLABEL=cputime (-C 1), CYCLES=N (-N N: every block N times),
# UNALIGN=N (-u N).
check_table() {
  awk -v tool="$1" -v n="$2" -v min="$3" -v max="$4" -v step="$5" -v mode="$6" \
    -v root="$7" -v check="$8" -v extra="${9:-0}" -v gbps="${10:-0}" -v iter="${ITER:-0}" \
    -v ts="${TS:-0}" -v tlabel="${TLABEL:-time}" -v cycles="${CYCLES:-1}" \
    -v unalign="${UNALIGN:-0}" '
  function bad(msg) { print "line " NR ": " msg ": " $0 > "/dev/stderr"; failed = 1; exit 1 }
  function abs(x) { return x < 0 ? -x : x }
  function esize(t) {
    if (t == "int8" || t == "uint8") return 1
    if (t == "half" || t == "bfloat16") return 2
    if (t == "int32" || t == "float") return 4
    if (t == "int64" || t == "double") return 8
    return 0
  }
  function nextsize(s) {
    if (mode == "factor") return s == 0 ? 1 : s * step
    return s + step
  }
  # The size nccl-tests prints for a nominal size: whole elements, and for the tools that
  # split the buffer in n blocks whole elements per rank (alltoall, gather, scatter: whole
  # 16-byte chunks per rank); 0 when the size is skipped.
  function rounded(s, es,   c) {
    c = int(s / es / div)
    if (align) c -= c % (16 / es)
    return c * div * es
  }
  # Rows of a (type, op) must be exactly the sizes min, next(min), ... <= max, skipping
  # sizes with no element; end_block checks that none is missing at the end.
  function end_block() {
    if (!inblock) return
    while (nom <= max && rounded(nom, bes) == 0 && nom != 0) nom = nextsize(nom)
    if (nom <= max) bad("missing the row of size " nom " (" btype " " bop ")")
    blocks++
  }
  # Half a unit of the last printed digit: the rounding of nccl-tests 2.19 numbers (2, 1 or
  # 0 decimals as they fit the column, else an exponent).
  function tol(x,   d) {
    if (x ~ /e/) return abs(x) * 0.051
    d = index(x, ".")
    return d ? 0.5 * 10 ^ -(length(x) - d) * 1.01 : 0.51
  }
  function check_half(t, alg, bus, wrong,   want) {
    if (t !~ /^[0-9.e+]+$/ || t <= 0) bad("time " t)
    want = size / (t * 1000)
    if (abs(alg - want) > tol(alg) + want * (tol(t) / t)) bad("algbw " alg " != size/time " want)
    if (abs(bus - alg * factor) > tol(bus) + tol(alg) * factor) bad("busbw " bus " != algbw*" factor)
    if (check && wrong != "0") bad("#wrong " wrong)
    if (!check && wrong != "N/A") bad("#wrong " wrong " with -c 0")
    bwsum += bus; bwn++
  }
  # The columns where nccl-tests 2.19 prints them (util.cu), for parsers that cut by
  # position: a half is "  %7s  %6s  %6s  %6g", or "    N/A" for #wrong unchecked.
  function half_text(c,   w) {
    w = $(c + 3) == "N/A" ? "    N/A" : sprintf("  %6s", $(c + 3))
    return sprintf("  %7s  %6s  %6s", $c, $(c + 1), $(c + 2)) w
  }
  function layout(   want, c) {
    want = sprintf("%12s  %12s  %8s  %6s  %6s", $1, $2, $3, $4, $5) half_text(6)
    if (iter) want = want sprintf("  %7s  %7s  %7s  %7s", $10, $11, $12, $13)
    c = iter ? 14 : 10
    want = want half_text(c)
    if (iter) want = want sprintf("  %7s  %7s  %7s  %7s", $18, $19, $20, $21)
    if (ts) want = want sprintf("%21s", $(c + (iter ? 8 : 4)) " " $(c + (iter ? 9 : 5)))
    if (index($0, want) != 1) bad("columns not where nccl-tests prints them: want \"" want "\"")
  }
  # -I: i_min <= i_p99 <= i_max, and a coefficient of variation.
  function check_iter(mn, mx, p99, cv) {
    if (!(mn > 0 && mn <= p99 + tol(p99) && p99 <= mx + tol(mx) && cv >= 0)) bad("per-iteration columns " mn " " mx " " p99 " " cv)
  }
  BEGIN {
    split4 = (tool == "all_gather" || tool == "reduce_scatter" || tool == "alltoall" ||
              tool == "gather" || tool == "scatter")
    div = split4 ? n : 1
    align = (tool == "alltoall" || tool == "gather" || tool == "scatter")
    # alltoallv: sizes follow its traffic pattern (test_bench_json.py computes them); here
    # only that they grow from -b to -e, and the arithmetic.
    v = (tool == "alltoallv")
    if (tool == "all_reduce") factor = 2 * (n - 1) / n
    else if (split4 || v) factor = (n - 1) / n
    else factor = 1
    reduces = (tool == "all_reduce" || tool == "reduce_scatter" || tool == "reduce")
    rooted = (tool == "broadcast" || tool == "reduce" || tool == "gather" || tool == "scatter")
    # nccl-tests 2.19 column headers (util.cu writeResultHeader), -I and -S variants.
    tsl = ts ? sprintf("%19s", "timestamp") : ""
    tsu = ts ? sprintf("%19s", "%Y-%m-%d %H:%M:%S") : ""
    if (iter) {
      meta = sprintf("# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                                in-place (+ per-iteration)", "", "", "", "", "")
      names = sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %s",
        "size", "count", "type", "redop", "root", tlabel, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%",
        tlabel, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", tsl)
      units = sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %s",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)",
        "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", tsu)
    } else {
      meta = "#                                                              out-of-place                       in-place          "
      names = sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s", "size", "count", "type",
        "redop", "root", tlabel, "algbw", "busbw", "#wrong", tlabel, "algbw", "busbw", "#wrong", tsl)
      units = sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s", "(B)", "(elements)", "", "",
        "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", tsu)
    }
    ncols = 13 + (iter ? 8 : 0) + (ts ? 2 : 0) + extra
    h = 0
  }
  NR == 1 && /^# Writing JSON output to / { h = 1; next }
  NR == h + 1 { if ($0 !~ ("^# nccl-tests style: " tool "_perf \\(ringreduce [0-9]+\\.[0-9]+\\.[0-9]+\\)$")) bad("title"); next }
  NR == h + 2 { if ($0 != "# Collective test starting: " tool "_perf") bad("starting line"); next }
  NR == h + 3 {
    want = sprintf("# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(%s) warmup iters: ", min, max, step, mode)
    if (index($0, want) != 1 || $0 !~ (" iters: [0-9]+ agg iters: 1 validation: [0-9]+ graph: 0 unalign: " unalign "$")) bad("options line")
    phase = "opts"; next
  }
  phase == "opts" {
    if ($0 == "#") { phase = "devices"; next }
    if ($0 !~ /^# (Blocking Enabled|Per-Iteration Report): .* $/) bad("header line")
    if (/Per-Iteration/) seen_iter = 1
    next
  }
  phase == "devices" {
    if ($0 != "# Using devices") bad("header")
    phase = "ranks"; r0 = NR + 1; next
  }
  phase == "ranks" && NR < r0 + n {
    # nccl-tests: "#  Rank %2d Group %2d Pid %6d on %10s device %2d [...]"
    if (index($0, sprintf("#  Rank %2d Group  0 Pid ", NR - r0)) != 1 ||
        $0 !~ /^#  Rank .. Group  0 Pid [ 0-9][ 0-9][ 0-9][ 0-9][ 0-9][0-9]+ on +[^ ]+ device [ 0-9][0-9]+ \[(cpu|cuda)\]$/)
      bad("rank line")
    next
  }
  phase == "ranks" {
    # "#", then only the tool own notes ("# alltoallv: ...", "# Reducing maxBytes ..."),
    # then the three column lines.
    if ($0 == "#") { prev_hash = 1; next }
    if (index($0, "#   ") == 1 && index($0, "out-of-place")) {
      if (!prev_hash) bad("no # before the column header")
      if (index($0, meta) != 1 || (!extra && $0 != meta)) bad("column meta line")
      phase = "names"; next
    }
    if ($0 !~ /^# [a-zA-Z]/) bad("header line")
    prev_hash = 0; next
  }
  phase == "names" { if (index($0, names) != 1 || (!extra && $0 != names)) bad("column names"); phase = "units"; next }
  phase == "units" { if (index($0, units) != 1 || (!extra && $0 != units)) bad("column units"); phase = "rows"; next }
  /^#/ {
    if (!rows) bad("no data rows")
    footer[++nf] = $0
    next
  }
  {
    if (nf) bad("data after the footer")
    if (NF != ncols) bad(NF " columns, expected " ncols)
    size = $1; type = $3; op = $4
    es = esize(type)
    if (!es) bad("type " type)
    if (!v && $2 * es * div != size) bad("size != count * " es " * " div)
    if (reduces && op !~ /^(sum|prod|min|max|avg|band|bor|bxor)$/) bad("redop " op)
    if (!reduces && op != "none") bad("redop " op)
    if ($5 != (rooted ? root : -1)) bad("root " $5)
    if (v) {
      if (size > max || (inblock && type == btype && size <= last && (!cycles || cycles == 1))) bad("alltoallv size order")
      if (!inblock || type != btype || size <= last) blocks++
      inblock = 1; btype = type; last = size
    } else {
      if (!inblock || type != btype || op != bop || nom > max) {
        end_block()
        inblock = 1; btype = type; bop = op; bes = es; nom = min
      }
      while (nom <= max && nom != 0 && rounded(nom, es) == 0) nom = nextsize(nom)
      if (nom > max) bad("row beyond maxbytes")
      if (size != rounded(nom, es)) bad("size " size ", expected " rounded(nom, es) " (nominal " nom ")")
      nom = nextsize(nom)
    }
    i2 = iter ? 14 : 10
    layout()
    check_half($6, $7, $8, $9)
    check_half($i2, $(i2 + 1), $(i2 + 2), $(i2 + 3))
    if (iter) { check_iter($10, $11, $12, $13); check_iter($18, $19, $20, $21) }
    if (ts && !($(i2 + 8) ~ /^20[0-9][0-9]-[01][0-9]-[0-3][0-9]$/ && $(i2 + 9) ~ /^[0-2][0-9]:[0-5][0-9]:[0-6][0-9]$/)) bad("timestamp")
    x = 13 + (iter ? 8 : 0) + (ts ? 2 : 0)  # the first extra column is x + 1
    if (gbps > 0) {
      for (i = 0; i < 2; i++)
        if (abs($(x + 1 + i) - $(8 + (i2 - 6) * i) * 800 / gbps) > 0.05 + 0.0051 * 800 / gbps) bad("%link")
    }
    rows++
  }
  END {
    if (failed) exit 1
    if (!v) end_block()
    if (failed) exit 1
    if (!rows) { print "no data rows" > "/dev/stderr"; exit 1 }
    if (iter != seen_iter) { print "Per-Iteration Report line " (iter ? "missing" : "unexpected") > "/dev/stderr"; exit 1 }
    if (blocks % cycles) { print blocks " blocks of rows, not a multiple of " cycles " cycles" > "/dev/stderr"; exit 1 }
    if (footer[1] != "# Out of bounds values : 0 OK") {
      print "footer: " footer[1] > "/dev/stderr"; exit 1
    }
    if (footer[2] !~ /^# Avg bus bandwidth    : [-+0-9.e]+ $/) { print "footer: " footer[2] > "/dev/stderr"; exit 1 }
    split(footer[2], f, ": ")
    if (abs(f[2] - bwsum / bwn) > 0.006 + 0.00001 * f[2]) { print "average busbw " f[2] " != " bwsum / bwn > "/dev/stderr"; exit 1 }
    if (footer[3] != "#" || footer[4] != "# Collective test concluded: " tool "_perf" || footer[5] != "#") {
      print "footer: no concluding lines" > "/dev/stderr"; exit 1
    }
    # The trailing section: only the in-place notes, or the link line with --link-gbps.
    for (i = 6; i <= nf; i++)
      if (footer[i] != "#" && footer[i] !~ /^# ((sendrecv|alltoall|alltoallv) in place|Link: )/) { print "unexpected: " footer[i] > "/dev/stderr"; exit 1 }
    print rows " rows checked"
  }' "$T/out" || fail "table check (${1}, ${2} ranks)"
}

# Each tool at a world size, with a small range: exit 0, a well-formed table, #wrong 0.
sweep() { # TOOL NPROC MIN MAX STEP MODE ROOT
  local flag=-f
  [ "$6" = bytes ] && flag=-i
  run "$2" "$1" -b "$3" -e "$4" "$flag" "$5" -r "$7"
  expect_rc 0
  check_table "$1" "$2" "$3" "$4" "$5" "$6" "$7" 1
}

case $CASE in
  ar_np1 | ar_np2 | ar_np3 | ar_np4) sweep all_reduce "${CASE#ar_np}" 8 4194304 4 factor 0 ;;
  ag_np3) sweep all_gather 3 8 1048576 4 factor 0 ;;
  rs_np3) sweep reduce_scatter 3 8 1048576 4 factor 0 ;;
  bc_np3) sweep broadcast 3 1000 21000 4000 bytes 1 ;; # -i, and a root other than 0
  red_np3) sweep reduce 3 8 1048576 4 factor 2 ;;
  sr_np3)
    sweep sendrecv 3 8 1048576 4 factor 0
    expect_out "# sendrecv in place:"
    ;;
  types_ar | types_rs)
    tool=all_reduce
    [ "$CASE" = types_rs ] && tool=reduce_scatter
    # Every dtype x op: 8 x 5 blocks of rows, each checked element by element.
    run 3 $tool -b 8 -e 4096 -f 8 -d all -o all -n 2 -w 1
    expect_rc 0
    check_table $tool 3 8 4096 8 factor 0 1
    for t in int8 uint8 int32 int64 half float double bfloat16; do
      for o in sum prod max min avg; do
        grep -Eq "^ +[0-9]+ +[0-9]+ +$t +$o " "$T/out" || fail "no rows of $t $o"
      done
    done
    ;;
  types_bcast)
    run 2 broadcast -b 8 -e 4096 -f 8 -d all -n 2 -w 1 -r 1
    expect_rc 0
    check_table broadcast 2 8 4096 8 factor 1 1
    ;;
  nocheck)
    run 2 all_reduce -b 8 -e 65536 -f 4 -c 0
    expect_rc 0
    check_table all_reduce 2 8 65536 4 factor 0 0
    expect_out "validation: 0 graph: 0"
    ;;
  bad_flags)
    # Each is a usage error: exit 2, a message naming the problem, no table.
    while IFS='|' read -r tool args msg; do
      # shellcheck disable=SC2086
      run 2 "$tool" $args
      expect_rc 2
      expect_err "$msg"
      ! grep -q "size" "$T/out" || fail "a table was printed for: $args"
    done <<'EOF'
all_reduce|--bogus|unknown option '--bogus'
all_reduce|-q 1|unknown option '-q'
all_reduce|-d float7|unknown datatype 'float7'
all_reduce|-o mean|unknown op 'mean'
all_reduce|-b 1X|invalid size '1X'
all_reduce|-b 1M -e 1K|minbytes 1048576 is larger than maxbytes 1024
all_reduce|-n 0|invalid value '0' for -n
all_reduce|-a 7|invalid value '7' for -a
all_reduce|-f 2 -b|option '-b' needs a value
all_reduce|-d float -o band|op band needs an integer datatype
all_reduce|-I 2|invalid value '2' for -I
all_reduce|-K 1|-K 1 needs -I 1
all_reduce|-I 1 -n 4 -K 4|-K 4 leaves no iteration of -n 4
all_reduce|-z 4|invalid value '4' for -z
all_reduce|-u -1|invalid value '-1' for -u
all_reduce|-J out.txt|-J out.txt: the file name must end in .json
all_reduce|-M 1|invalid value '1' for -M
all_reduce|-D 1|invalid value '1' for -D
all_reduce|-R 2|invalid value '2' for -R
all_reduce|-x 0|invalid value '0' for -x
all_reduce|-b 8 -e 64 extra|unexpected argument 'extra'
broadcast|-r 5 -b 8 -e 8|root 5 is out of range
sendrecv|--split|--split applies to all_reduce_perf only
EOF
    run 1 sendrecv -b 8 -e 8
    expect_rc 2
    expect_err "needs at least 2 ranks"
    ;;
  help)
    run 1 all_reduce -h
    expect_rc 0
    expect_out "-b, --minbytes"
    expect_out "--split"
    expect_out "-I, --per_iter_timing"
    expect_out "-J, --output_file FILE.json"
    ;;
  json)
    # -J: nccl-tests 2.19's document (version 3), one result per table row, the figures of
    # the table (test_bench_json.py), never overwriting a file, and bench/'s reader of it.
    command -v python3 >/dev/null || { echo "SKIP: no python3" >&2; exit 77; }
    args=(-b 64 -e 65536 -f 4 -J "$T/r.json")
    run 2 reduce_scatter "${args[@]}"
    expect_rc 0
    [ "$(head -n 1 "$T/out")" = "# Writing JSON output to $T/r.json" ] || fail "no 'Writing JSON' line"
    check_table reduce_scatter 2 64 65536 4 factor 0 1
    python3 "$HERE/test_bench_json.py" "$T/r.json" "$T/out" 2 0.5 --args "${args[@]}" ||
      fail "JSON contents"
    # bench/compare's RESULT lines come from this JSON: both halves of every row, the
    # table's sizes and #wrong.
    python3 "$HERE/../bench/perf_json.py" results rr-x 2 "$T/r.json" >"$T/res" || fail "perf_json.py"
    awk '!/^#/ { print "RESULT rr-x 2 " $1 " " $9; print "RESULT rr-x-inplace 2 " $1 " " $13 }' \
      "$T/out" >"$T/want"
    awk '{ print $1, $2, $3, $4, $7 }' "$T/res" | cmp -s - "$T/want" || fail "perf_json.py results"
    # As nccl-tests: an existing file is kept, FILE.json.0 written instead, and named.
    cp "$T/r.json" "$T/r.keep"
    run 1 all_reduce -b 8 -e 8 -n 2 -J "$T/r.json"
    expect_rc 0
    [ "$(head -n 1 "$T/out")" = "# Writing JSON output to $T/r.json.0" ] || fail "no .0 file named"
    cmp -s "$T/r.json" "$T/r.keep" || fail "the existing file was overwritten"
    python3 "$HERE/test_bench_json.py" "$T/r.json.0" "$T/out" 1 0 || fail "JSON contents (.0)"
    # A file that cannot be written is a usage error on every rank.
    run 2 all_reduce -b 8 -e 8 -J "$T/no/such/dir/x.json"
    expect_rc 2
    expect_err "cannot write"
    ;;
  per_iter)
    # -I 1 -K 2: the per-iteration columns after each half, and the JSON's summaries and
    # times (22 summarised: p50, p95 and p99 are different elements, and differ from the
    # nearest-rank p50); -S 1 the timestamp, -C 1 the cputime label, -z 1 a barrier after
    # each call.
    command -v python3 >/dev/null || { echo "SKIP: no python3" >&2; exit 77; }
    run 3 all_reduce -b 8 -e 65536 -f 8 -n 24 -w 1 -I 1 -K 2 -S 1 -C 1 -z 1 -J "$T/i.json"
    expect_rc 0
    expect_out "# Per-Iteration Report: host clock timing; i_* uses max over process rows; summary skips first 2 iterations "
    expect_out "# Blocking Enabled: wait and barrier after each inner iteration (-m) "
    ITER=1 TS=1 TLABEL=cputime check_table all_reduce 3 8 65536 8 factor 0 1
    python3 "$HERE/test_bench_json.py" "$T/i.json" "$T/out" 3 1.3333333333333333 --iter 2 \
      --cputime || fail "JSON contents (-I)"
    # One rank: no per-process rows.
    run 1 all_gather -b 64 -e 256 -f 4 -n 3 -I 1 -J "$T/i1.json"
    expect_rc 0
    ITER=1 check_table all_gather 1 64 256 4 factor 0 1
    python3 "$HERE/test_bench_json.py" "$T/i1.json" "$T/out" 1 0 --iter 0 || fail "JSON (-I, 1 rank)"
    ;;
  alltoallv)
    # nccl-tests' alltoallv_perf: its generated pattern (spread 1, 0) and a traffic matrix,
    # sizes as nccl-tests computes them (test_bench_json.py), #wrong 0; a corrupted element
    # must show.
    command -v python3 >/dev/null || { echo "SKIP: no python3" >&2; exit 77; }
    run 4 alltoallv -b 64 -e 1M -f 4 -n 4 -w 1 -J "$T/v.json"
    expect_rc 0
    expect_out "# alltoallv: generated pattern, spread 1.000"
    check_table alltoallv 4 64 1048576 4 factor -1 1
    python3 "$HERE/test_bench_json.py" "$T/v.json" "$T/out" 4 0.75 --a2av 1 || fail "JSON (spread 1)"
    NCCL_TESTS_ALLTOALLV_SPREAD=0 run 3 alltoallv -b 100 -e 4000 -i 1300 -d all -n 2 -w 1 -J "$T/v0.json"
    expect_rc 0
    check_table alltoallv 3 100 4000 1300 bytes -1 1
    python3 "$HERE/test_bench_json.py" "$T/v0.json" "$T/out" 3 0.6666666666666666 --a2av 0 ||
      fail "JSON (spread 0)"
    printf '100 200 150 7\n50 100 75 7\n300 150 200 7\n1 1 1 1\n' >"$T/m.txt"
    NCCL_TESTS_ALLTOALLV_MATRIX_FILE=$T/m.txt run 3 alltoallv -b 4K -e 4K -d double -n 2 -J "$T/vm.json"
    expect_rc 0
    check_table alltoallv 3 4096 4096 1048576 bytes -1 1
    python3 "$HERE/test_bench_json.py" "$T/vm.json" "$T/out" 3 0.6666666666666666 --matrix "$T/m.txt" ||
      fail "JSON (matrix)"
    NCCL_TESTS_ALLTOALLV_MATRIX_FILE=$T/m.txt run 3 alltoallv -b 4K -e 8K
    expect_rc 2
    expect_err "give -b and -e the same value"
    NCCL_TESTS_ALLTOALLV_MATRIX_FILE=$T/m.txt run 3 alltoallv -b 256 -e 256
    expect_rc 2
    expect_err "-e must be at least 624 bytes"
    RR_PERF_CORRUPT=2 run 4 alltoallv -b 1K -e 4K -f 4 -n 2 -w 0
    [ "$RC" != 0 ] || fail "exit status 0 with a corrupted result"
    awk '!/^#/ { r++; w = $9 + $13; if ((r == 1) != (w == 1)) exit 1 }' "$T/out" ||
      fail "#wrong not exactly 1 in the first row"
    ;;
  more_tools)
    # nccl-tests' alltoall_perf, gather_perf, scatter_perf: 16-byte blocks per rank, roots.
    sweep alltoall 3 8 1048576 8 factor 0
    expect_out "# alltoall in place:"
    sweep gather 3 8 1048576 8 factor 2
    sweep scatter 4 100 20000 6000 bytes 1
    ;;
  cycles)
    # -N 2: the sweep twice; -z 3: a barrier after each call, outside the time; -u 3: both
    # buffers 3 elements off their alignment.
    run 2 broadcast -b 1K -e 16K -f 4 -n 4 -r 1 -N 2 -z 3 -u 3
    expect_rc 0
    expect_out "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier "
    CYCLES=2 UNALIGN=3 check_table broadcast 2 1024 16384 4 factor 1 1
    [ "$(grep -c '^ ' "$T/out")" = 6 ] || fail "not 2 cycles of 3 rows"
    ;;
  extras)
    # --link-gbps 10 (2 columns), --percentiles (4), --split (3), after the standard 13.
    run 4 all_reduce -b 8 -e 1048576 -f 8 --split --percentiles --link-gbps 10
    expect_rc 0
    check_table all_reduce 4 8 1048576 8 factor 0 1 9 10
    awk '!/^#/ { if ($16 > $17 || $18 > $19) { print "p50 > p99: " $0; exit 1 }
                 if ($2 >= 4 && ($20 !~ /^[0-9.]+$/ || $22 != "0")) { print "split: " $0; exit 1 }
                 if ($2 < 4 && ($20 != "N/A" || $22 != "N/A")) { print "split: " $0; exit 1 } }' \
      "$T/out" >&2 || fail "extra columns"
    expect_out "# Link: 10 Gbit/s (from --link-gbps)"
    ;;
  corrupt)
    # The checking itself must be able to fail: one flipped element on rank 1 is one wrong
    # element in the first row, "FAILED", and a non-zero exit.
    RR_PERF_CORRUPT=1 run 3 all_reduce -b 8 -e 4096 -f 8
    [ "$RC" != 0 ] || fail "exit status 0 with a corrupted result"
    awk '!/^#/ { r++; w = $9 + $13; if ((r == 1) != (w == 1)) exit 1 }' "$T/out" ||
      fail "#wrong not exactly 1 in the first row"
    expect_out "# Out of bounds values : 1 FAILED"
    ;;
  *) fail "unknown case" ;;
esac
echo "PASS($CASE)"
