#!/usr/bin/env bash
# The sampler against torch, live: make fresh golden vectors with real torch (a different
# case seed than the committed file, so new cases) and compare every rank of every case.
# Skips (77) when the system interpreter has no torch (Debian: apt-get install python3-torch;
# it installs into /usr/bin/python3, not a pyenv/venv python3 that may come first on PATH).
#   test_sampler_live.sh TEST_SAMPLER_BINARY GENERATOR_SCRIPT
set -euo pipefail
bin=$1 gen=$2
py=/usr/bin/python3
if ! [ -x "$py" ] || ! "$py" -c 'import torch' >/dev/null 2>&1; then
  echo "SKIP: $py cannot import torch (apt-get install python3-torch)"
  exit 77
fi
seed=$(( ${RR_TEST_SEED:-$(date +%s) % 100000} ))
echo "live torch comparison: case seed $seed (set RR_TEST_SEED to replay)"
tmp=$(mktemp /tmp/rr_sampler_live.XXXXXX)
trap 'rm -f "$tmp"' EXIT
"$py" "$gen" --cases 120 --seed "$seed" > "$tmp"
"$bin" golden "$tmp"
