"""What the torch tests share: skipping without torch, checks that name the rank, spawning
ranks with torch.multiprocessing, and a free port."""

import os
import socket
import sys

# The package from this source tree (python/), unless the test runs against an installed one.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.environ.get("RINGREDUCE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(_ROOT, "python"))


def torch_or_skip():
    """(torch, torch.distributed, torch.multiprocessing), or exit 77 saying why."""
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"skipped: no torch for {sys.executable} ({e}); on Debian: apt-get install "
              "python3-torch, and run /usr/bin/python3")
        sys.exit(77)
    if not dist.is_available():
        print("skipped: this torch has no torch.distributed")
        sys.exit(77)
    return torch, dist, mp


_rank = None


def check(cond, msg):
    if not cond:
        fail(msg)


def fail(msg):
    raise AssertionError(f"rank {_rank}: {msg}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, fn, args):
    global _rank
    _rank = rank
    fn(rank, *args)


def spawn(fn, world, args):
    """fn(rank, *args) in `world` processes; exit 1 (after their tracebacks) if any fails."""
    import torch.multiprocessing as mp
    try:
        mp.spawn(_entry, args=(fn, args), nprocs=world, join=True)
    except Exception as e:  # noqa: BLE001 (mp.spawn re-raises the first rank's failure)
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
