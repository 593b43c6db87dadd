#!/usr/bin/env bash
# The wheel as a user installs it (tests/python/test_wheel.sh built it from the sdist): into a
# new virtual environment, by pip, where no build tool can be found and, run as root, with no
# network either (a network namespace of its own with only loopback up); then a 2-rank
# all_reduce under torch.multiprocessing.spawn and another under the rrun that the wheel put
# in the environment's bin/, each rank loading the library from the environment. Exit 77
# without torch for PYTHON, without python3-venv, or without a wheel.
#   test_pip_install.sh WHEEL_DIR PYTHON
# PYTHON names the torch: Debian's /usr/bin/python3 (1.13) or tools/torch_env.sh's (PyPI's
# 2.x). The environment is made from /usr/bin/python3 without the system's packages, and a
# .pth file adds the one directory that torch is imported from (for Debian's torch, what
# --system-site-packages would give; the same rule for both).
set -euo pipefail
dir=$1 py=$2
"$py" -c "import torch" 2>/dev/null || { echo "skipped: no torch for $py"; exit 77; }
/usr/bin/python3 -c "import ensurepip" 2>/dev/null || { echo "skipped: no python3-venv"; exit 77; }
wheel=$(ls "$dir"/ringreduce-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || { echo "skipped: no wheel in $dir (tests/python/test_wheel.sh made none)"; exit 77; }
same='import sys; print("%d.%d" % sys.version_info[:2])'
[ "$("$py" -c "$same")" = "$(/usr/bin/python3 -c "$same")" ] ||
  { echo "skipped: $py is not /usr/bin/python3's version"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/home" "$tmp/run"
/usr/bin/python3 -m venv "$tmp/env"
site=$("$tmp/env/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$py" -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))" > "$site/torch_dir.pth"

# clean CMD...: CMD from the environment's bin/ alone, with nothing of this shell's variables.
netns=()
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && unshare -n true 2>/dev/null; then
  netns=(unshare -n sh -c 'ip link set lo up && exec "$@"' sh)
fi
clean() {
  "${netns[@]}" env -i HOME="$tmp/home" PATH="$tmp/env/bin" LANG=C.UTF-8 TMPDIR="$tmp/run" \
    OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 "$@"
}
cat > "$tmp/check.py" <<'PY'
import os, shutil, socket, sys

def rank_main(rank, world):
    import torch, torch.distributed as dist
    import ringreduce, ringreduce.torch
    lib = ringreduce.library_path()
    assert lib.startswith(sys.prefix + os.sep), f"rank {rank}: loaded {lib}, not the environment's"
    dist.init_process_group("ringreduce", rank=rank, world_size=world)
    t = torch.arange(1000, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(t)
    want = torch.arange(1000, dtype=torch.float64) * sum(r + 1 for r in range(world))
    assert torch.equal(t, want), f"rank {rank}: wrong sum"
    dist.destroy_process_group()
    if rank == 0:
        print(f"{sys.argv[1]}: 2-rank all_reduce exact, torch {torch.__version__}, {lib}")

if __name__ == "__main__":
    if sys.argv[1] == "tools":
        found = {t: shutil.which(t) for t in
                 ("cc", "gcc", "c++", "g++", "clang", "ld", "make", "ninja", "cmake", "nvcc")}
        found = {t: p for t, p in found.items() if p}
        assert not found, f"build tools on PATH: {found}"
        print("PATH:", os.environ["PATH"], "- no compiler, linker, make, ninja, cmake or nvcc")
    elif sys.argv[1] == "spawn":
        import torch.multiprocessing as mp
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
        mp.spawn(rank_main, args=(2,), nprocs=2)
    else:  # under rrun: env://
        rank_main(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
PY
if [ ${#netns[@]} -gt 0 ]; then echo "in a network namespace with only loopback"; fi
clean python "$tmp/check.py" tools
clean pip install --no-index --no-deps --disable-pip-version-check "$wheel" > "$tmp/pip.log" 2>&1 ||
  { cat "$tmp/pip.log"; echo "FAILED: pip install $wheel"; exit 1; }
tail -1 "$tmp/pip.log"
[ -x "$tmp/env/bin/rrun" ] || { echo "FAILED: no rrun in the environment's bin/"; exit 1; }
clean rrun --version
cd "$tmp/run"  # nothing of the source tree near
clean python "$tmp/check.py" spawn
clean rrun --standalone --nproc-per-node 2 python "$tmp/check.py" rrun
