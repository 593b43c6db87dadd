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
T=$(mktemp -d "${TMPDIR:-/tmp}/bench-test.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT RR_PERF_CORRUPT \
  NCCL_TESTS_MIN_BW RR_SOCKET_IFNAME

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
check_table() {
  awk -v tool="$1" -v n="$2" -v min="$3" -v max="$4" -v step="$5" -v mode="$6" \
    -v root="$7" -v check="$8" -v extra="${9:-0}" -v gbps="${10:-0}" '
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
  # The size nccl-tests prints for a nominal size: whole elements, and for all_gather and
  # reduce_scatter whole elements per rank; 0 when the size is skipped.
  function rounded(s, es,   c) {
    c = int(s / es / div)
    return c * div * es
  }
  # Rows of a (type, op) must be exactly the sizes min, next(min), ... <= max, skipping
  # sizes with no element; end_block checks that none is missing at the end.
  function end_block() {
    if (!inblock) return
    while (nom <= max && rounded(nom, bes) == 0 && nom != 0) nom = nextsize(nom)
    if (nom <= max) bad("missing the row of size " nom " (" btype " " bop ")")
  }
  # Tolerance of a time printed by nccl-tests format (7.2f / 7.1f / 7.0f).
  function tstep(t) { return t >= 10000 ? 0.5 : t >= 100 ? 0.05 : 0.005 }
  function check_half(t, alg, bus, wrong,   want) {
    if (t !~ /^[0-9.]+$/ || t <= 0) bad("time " t)
    want = size / (t * 1000)
    if (abs(alg - want) > 0.0051 + want * (tstep(t) / t) * 1.01) bad("algbw " alg " != size/time " want)
    if (abs(bus - alg * factor) > 0.0051 + 0.0051 * factor) bad("busbw " bus " != algbw*" factor)
    if (check && wrong != "0") bad("#wrong " wrong)
    if (!check && wrong != "N/A") bad("#wrong " wrong " with -c 0")
    bwsum += bus; bwn++
  }
  BEGIN {
    div = (tool == "all_gather" || tool == "reduce_scatter") ? n : 1
    if (tool == "all_reduce") factor = 2 * (n - 1) / n
    else if (tool == "all_gather" || tool == "reduce_scatter") factor = (n - 1) / n
    else factor = 1
    reduces = (tool == "all_reduce" || tool == "reduce_scatter" || tool == "reduce")
    rooted = (tool == "broadcast" || tool == "reduce")
    meta = "#                                                              out-of-place                       in-place          "
    names = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    units = "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       "
  }
  NR == 1 { if ($0 !~ ("^# nccl-tests style: " tool "_perf \\(ringreduce [0-9]+\\.[0-9]+\\.[0-9]+\\)$")) bad("title"); next }
  NR == 2 {
    want = sprintf("# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(%s) warmup iters: ", min, max, step, mode)
    if (index($0, want) != 1 || $0 !~ / iters: [0-9]+ agg iters: 1 validation: [0-9]+ graph: 0$/) bad("options line")
    next
  }
  NR == 3 || NR == 4 { if ($0 != (NR == 3 ? "#" : "# Using devices")) bad("header"); next }
  NR >= 5 && NR < 5 + n {
    # nccl-tests: "#  Rank %2d Group %2d Pid %6d on %10s device %2d [...]"
    if (index($0, sprintf("#  Rank %2d Group  0 Pid ", NR - 5)) != 1 ||
        $0 !~ /^#  Rank .. Group  0 Pid [ 0-9][ 0-9][ 0-9][ 0-9][ 0-9][0-9]+ on +[^ ]+ device [ 0-9][0-9]+ \[(cpu|cuda)\]$/)
      bad("rank line")
    next
  }
  NR == 5 + n { if ($0 != "#") bad("header"); next }
  NR == 6 + n { if (index($0, meta) != 1 || (!extra && $0 != meta)) bad("column meta line"); next }
  NR == 7 + n { if (index($0, names) != 1 || (!extra && $0 != names)) bad("column names"); next }
  NR == 8 + n { if (index($0, units) != 1 || (!extra && $0 != units)) bad("column units"); next }
  /^#/ {
    if (!rows) bad("no data rows")
    footer[++nf] = $0
    next
  }
  {
    if (nf) bad("data after the footer")
    if (NF != 13 + extra) bad(NF " columns, expected " 13 + extra)
    size = $1; type = $3; op = $4
    es = esize(type)
    if (!es) bad("type " type)
    if ($2 * es * div != size) bad("size != count * " es " * " div)
    if (reduces && op !~ /^(sum|prod|min|max|avg|band|bor|bxor)$/) bad("redop " op)
    if (!reduces && op != "none") bad("redop " op)
    if ($5 != (rooted ? root : -1)) bad("root " $5)
    if (!inblock || type != btype || op != bop) {
      end_block()
      inblock = 1; btype = type; bop = op; bes = es; nom = min
    }
    while (nom <= max && nom != 0 && rounded(nom, es) == 0) nom = nextsize(nom)
    if (nom > max) bad("row beyond maxbytes")
    if (size != rounded(nom, es)) bad("size " size ", expected " rounded(nom, es) " (nominal " nom ")")
    nom = nextsize(nom)
    check_half($6, $7, $8, $9)
    check_half($10, $11, $12, $13)
    if (gbps > 0) {
      for (i = 0; i < 2; i++)
        if (abs($(14 + i) - $(8 + 4 * i) * 800 / gbps) > 0.05 + 0.0051 * 800 / gbps) bad("%link")
    }
    rows++
  }
  END {
    if (failed) exit 1
    end_block()
    if (failed) exit 1
    if (!rows) { print "no data rows" > "/dev/stderr"; exit 1 }
    if (footer[1] != "# Out of bounds values : 0 OK") {
      print "footer: " footer[1] > "/dev/stderr"; exit 1
    }
    if (footer[2] !~ /^# Avg bus bandwidth    : [-+0-9.e]+ $/) { print "footer: " footer[2] > "/dev/stderr"; exit 1 }
    split(footer[2], f, ": ")
    if (abs(f[2] - bwsum / bwn) > 0.006 + 0.00001 * f[2]) { print "average busbw " f[2] " != " bwsum / bwn > "/dev/stderr"; exit 1 }
    if (footer[3] != "#") { print "footer: no closing #" > "/dev/stderr"; exit 1 }
    # The trailing section: only the sendrecv note, or the link line with --link-gbps.
    for (i = 4; i <= nf; i++)
      if (footer[i] != "#" && footer[i] !~ /^# (sendrecv in place|Link: )/) { print "unexpected: " footer[i] > "/dev/stderr"; exit 1 }
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
    ;;
  json)
    command -v python3 >/dev/null || { echo "SKIP: no python3" >&2; exit 77; }
    run 2 reduce_scatter -b 64 -e 65536 -f 4 -J "$T/r.json"
    expect_rc 0
    check_table reduce_scatter 2 64 65536 4 factor 0 1
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/r.json" || fail "invalid JSON"
    # The JSON holds the same rows as the table, with percentiles and the options.
    python3 - "$T/r.json" "$T/out" <<'EOF' || fail "JSON contents"
import json, sys
d = json.load(open(sys.argv[1]))
rows = [l.split() for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")]
assert d["tool"] == "reduce_scatter_perf" and d["status"] == "OK" and d["out_of_bounds"] == 0
assert d["options"]["nranks"] == 2 and d["options"]["minbytes"] == 64 and d["options"]["stepfactor"] == 4
assert len(d["ranks"]) == 2 and len(d["rows"]) == len(rows), (len(d["rows"]), len(rows))
for j, t in zip(d["rows"], rows):
    assert (j["size"], j["count"], j["type"], j["redop"]) == (int(t[0]), int(t[1]), t[2], t[3])
    for h, k in (("out_of_place", 5), ("in_place", 9)):
        x = j[h]
        assert abs(x["busbw_GBps"] - float(t[k + 2])) <= 0.0051 and x["wrong"] == 0
        assert 0 < x["p50_us"] <= x["p99_us"]
EOF
    # A file that cannot be written is a usage error on every rank.
    run 2 all_reduce -b 8 -e 8 -J "$T/no/such/dir/x.json"
    expect_rc 2
    expect_err "cannot write"
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
