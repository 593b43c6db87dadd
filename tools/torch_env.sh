#!/usr/bin/env bash
# torch 2.x beside Debian's 1.13 for the tests: PyPI's torch, pinned below, in a virtual
# environment this checkout owns (build-venv/torch-VERSION, ignored by git), made from
# Debian's /usr/bin/python3 without the system's site packages, so the system Python is never
# touched. Reused while it still imports that version; downloads are cached in
# build-venv/pip-cache (the README's own install test reads the same cache). Prints the
# environment's python on stdout; progress on stderr. torchft (pinned) goes into the same
# environment for torch2.torchft_elastic.
#   RR_TORCH2_VERSION=2.15.0   another version (the pin moves with PyPI's newest)
#   RR_TORCHFT_VERSION=0.2.0   another torchft; RR_TORCHFT=0: none
#   --path                     print where that python is (or will be) and install nothing
#                              (tests/run.sh configures with it while the install runs)
# First install on a 2-core VM: ~80 s and 5.3 GB (torch's PyPI wheel brings CUDA's runtime
# libraries, ~3.5 GB, which the CPU tests load but never use).
set -euo pipefail
cd "$(dirname "$0")/.."
ver=${RR_TORCH2_VERSION:-2.15.0}
dir=$PWD/build-venv/torch-$ver
py=$dir/bin/python
if [ "${1:-}" = --path ]; then echo "$py"; exit 0; fi
check="import sys, torch, torch.distributed as d; sys.exit(torch.__version__.split('+')[0] != '$ver' or not d.is_available())"
pip_in() { PIP_CACHE_DIR=$PWD/build-venv/pip-cache "$dir/bin/pip" install -q --disable-pip-version-check "$@" >&2; }
if ! { [ -x "$py" ] && "$py" -c "$check" 2>/dev/null; }; then
  start=$(date +%s)
  echo "torch_env: installing torch $ver from PyPI into $dir (first time: a minute or two)" >&2
  rm -rf "$dir"
  /usr/bin/python3 -m venv "$dir" >&2
  # numpy: torch 2.x warns at import without it.
  pip_in "torch==$ver" numpy
  "$py" -c "$check"
  echo "torch_env: torch $ver ready in $(( $(date +%s) - start )) s" >&2
fi
# torchft (its Manager on ringreduce: torch2.torchft_elastic), pinned, beside that torch: its
# only requirement pip could touch, torch>=2.7, is already met, so torch stays as installed.
# RR_TORCHFT=0 leaves it out (the test then skips); a failed install only warns.
tft=${RR_TORCHFT_VERSION:-0.2.0}
if [ "${RR_TORCHFT:-1}" != 0 ] &&
   ! "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('torchft') != '$tft')" 2>/dev/null; then
  echo "torch_env: installing torchft $tft into $dir" >&2
  pip_in "torchft==$tft" || echo "torch_env: warning: torchft $tft did not install; torch2.torchft_elastic will skip" >&2
  "$py" -c "import torch; assert torch.__version__.split('+')[0] == '$ver'" ||
    { echo "torch_env: installing torchft changed torch" >&2; exit 1; }
fi
echo "$py"
