#!/usr/bin/env bash
# torch 2.x beside Debian's 1.13 for the tests: PyPI's torch, pinned below, in a virtual
# environment this checkout owns (build-venv/torch-VERSION, ignored by git), made from
# Debian's /usr/bin/python3 without the system's site packages, so the system Python is never
# touched. Reused while it still imports that version; downloads are cached in
# build-venv/pip-cache (the README's own install test reads the same cache). Prints the
# environment's python on stdout; progress on stderr.
#   RR_TORCH2_VERSION=2.15.0   another version (the pin moves with PyPI's newest)
# First install on a 2-core VM: ~80 s and 5.3 GB (torch's PyPI wheel brings CUDA's runtime
# libraries, ~3.5 GB, which the CPU tests load but never use).
set -euo pipefail
cd "$(dirname "$0")/.."
ver=${RR_TORCH2_VERSION:-2.15.0}
dir=$PWD/build-venv/torch-$ver
py=$dir/bin/python
check="import sys, torch, torch.distributed as d; sys.exit(torch.__version__.split('+')[0] != '$ver' or not d.is_available())"
if [ -x "$py" ] && "$py" -c "$check" 2>/dev/null; then
  echo "$py"
  exit 0
fi
start=$(date +%s)
echo "torch_env: installing torch $ver from PyPI into $dir (first time: a minute or two)" >&2
rm -rf "$dir"
/usr/bin/python3 -m venv "$dir" >&2
# numpy: torch 2.x warns at import without it.
PIP_CACHE_DIR=$PWD/build-venv/pip-cache "$dir/bin/pip" install -q --disable-pip-version-check \
  "torch==$ver" numpy >&2
"$py" -c "$check"
echo "torch_env: torch $ver ready in $(( $(date +%s) - start )) s" >&2
echo "$py"
