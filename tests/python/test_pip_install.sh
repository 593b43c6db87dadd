#!/usr/bin/env bash
# The Python package as users install it: `pip install --no-build-isolation` of python/
# (a copy, so the source tree gets no build/ or egg-info), which builds the C library with
# CMake and packs it in; then a 2-rank all_reduce through the installed package alone (no
# PYTHONPATH into the tree, no RINGREDUCE_LIBRARY). Exit 77 without torch or pip.
#   test_pip_install.sh SOURCE_DIR PYTHON
set -euo pipefail
src=$1 py=$2
"$py" -c "import torch" 2>/dev/null || { echo "skipped: no torch for $py"; exit 77; }
"$py" -m pip --version >/dev/null 2>&1 || { echo "skipped: no pip for $py"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -r "$src/python" "$tmp/pkg"
rm -rf "$tmp/pkg/build" "$tmp/pkg"/*.egg-info
unset RINGREDUCE_LIBRARY PYTHONPATH
RINGREDUCE_SOURCE=$src "$py" -m pip install --no-build-isolation --no-deps --no-index \
  --target "$tmp/site" "$tmp/pkg" > "$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; exit 1; }
ls "$tmp/site/ringreduce/lib/libringreduce.so" >/dev/null
cd "$tmp"  # nothing of the source tree on the path
cat > check.py <<'PY'
import os, socket
import torch, torch.distributed as dist, torch.multiprocessing as mp

def rank_main(rank):
    import ringreduce.torch, ringreduce._lib as lib
    assert lib.path.startswith(os.environ["PYTHONPATH"]), f"rank {rank}: loaded {lib.path}"
    dist.init_process_group("ringreduce", rank=rank, world_size=2)
    g = torch.Generator().manual_seed(rank)
    t = torch.randint(-1000, 1000, (1000,), generator=g)
    want = sum(torch.randint(-1000, 1000, (1000,), generator=torch.Generator().manual_seed(r))
               for r in range(2))
    dist.all_reduce(t)
    assert torch.equal(t, want), f"rank {rank}: wrong sum"
    dist.destroy_process_group()

if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
    mp.spawn(rank_main, nprocs=2)
    import ringreduce._lib as lib
    print(f"installed package: {lib.path}: 2-rank all_reduce exact")
PY
PYTHONPATH=$tmp/site "$py" check.py
