#!/usr/bin/env bash
# tools/ringreduce-view on broken traces: each mutation of a good trace (tests/data/view/
# ring4.jsonl) must end with exit status 1, a message naming the file, the line and what is
# wrong, and no page written; the good trace must give a page. usage: test_view_errors.sh VIEW DATA
set -euo pipefail
view=$1 good=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$view" "$good" -o "$dir/good.html" >/dev/null || fail "the good trace was refused"
[ -s "$dir/good.html" ] || fail "no page for the good trace"

# expect NAME 'MESSAGE PART': run the viewer on $dir/NAME.jsonl
expect() {
  local name=$1 want=$2 rc=0
  "$view" "$dir/$name.jsonl" -o "$dir/$name.html" >"$dir/$name.out" 2>"$dir/$name.err" || rc=$?
  [ "$rc" = 1 ] || fail "$name: exit status $rc, want 1 ($(cat "$dir/$name.err"))"
  grep -qF -- "$want" "$dir/$name.err" || fail "$name: message '$(cat "$dir/$name.err")', want '$want'"
  [ ! -e "$dir/$name.html" ] || fail "$name: a page was written despite the error"
  ls -A "$dir" | grep -q '^\.ringreduce-view\.' && fail "$name: a temporary file was left behind"
  echo "ok $name: $(cat "$dir/$name.err")"
}

# Mutations, made with the good file's lines (python: exact line surgery).
python3 - "$good" "$dir" <<'PY'
import json, sys
good, d = sys.argv[1], sys.argv[2]
lines = open(good).read().split("\n")[:-1]
def put(name, ls, end="\n"):
    open(f"{d}/{name}.jsonl", "w").write("\n".join(ls) + end)
put("cut_mid_line", lines[:-1] + [lines[-1][:40]], end="")       # a rank stopped while writing
put("cut_at_line", lines[:-3])                                    # the last records are gone
put("not_json", lines[:4] + [lines[4][:-5] + ",,}"] + lines[5:])  # line 5 broken
rec = json.loads(lines[2]); del rec["grank"]
put("no_field", lines[:2] + [json.dumps(rec)] + lines[3:])        # line 3 lacks grank
rec = json.loads(lines[0]); rec["n"] = "4"
put("bad_type", [json.dumps(rec)] + lines[1:])                    # line 1: n is a string
steps = [i for i, l in enumerate(lines) if '"ev":"step"' in l and '"rank":2,' in l]
put("lost_step", [l for i, l in enumerate(lines) if i != steps[2]])
put("two_runs", lines + lines)
put("empty", [], end="")
put("not_object", lines[:1] + ["[1, 2, 3]"] + lines[1:])         # line 2
# Rank 3's reduction says it received something rank 2 never sent.
i = next(i for i, l in enumerate(lines) if '"rank":3,' in l and '"step":1,' in l)
rec = json.loads(lines[i]); rec["recv"]["got"] = [999, 999]
put("wrong_value", lines[:i] + [json.dumps(rec)] + lines[i + 1:])
open(f"{d}/line_numbers.txt", "w").write(f"{steps[2] + 1} {i + 1}\n")
PY
read -r lost wrong <"$dir/line_numbers.txt"
expect cut_mid_line "cut_mid_line.jsonl:32: the last line has no end of line: the trace is truncated"
expect cut_at_line "no end record for all_reduce #0 (ring, 4 ranks): the trace stops early"
expect not_json "not_json.jsonl:5: not a JSON record (Expecting"
expect no_field "no_field.jsonl:3: field 'grank' is missing"
expect bad_type "bad_type.jsonl:1: field 'n' has a wrong value: \"4\""
expect lost_step "but its end record says 6: step records are missing"
expect two_runs "begins all_reduce #0 a second time"
expect empty "empty.jsonl: the file is empty"
expect not_object "not_object.jsonl:2: a record must be a JSON object"
expect wrong_value "wrong_value.jsonl:$wrong: received [999, 999] but the sender's record"
rc=0; "$view" "$dir/absent.jsonl" -o "$dir/absent.html" 2>"$dir/absent.err" || rc=$?
[ "$rc" = 1 ] && grep -qF "absent.jsonl: cannot read it: No such file or directory" "$dir/absent.err" \
  || fail "a missing file: status $rc, $(cat "$dir/absent.err")"
rc=0; "$view" "$good" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "no output named: status $rc, want 2 (usage)"
echo "view errors ok"
