"""What the torch tests share: skipping without torch, checks that name the rank, spawning
ranks with torch.multiprocessing, and a free port."""

import os
import socket
import sys
import time

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


PORT_RANGE = (20000, 32768)  # below the kernel's ephemeral range (32768-60999 by default)
# Never picked: where jobs started as the README writes them take their port unprobed (rrun's
# and torchrun's default 29500, examples/torch_digits.py's 29400 + pid % 1000; tests/test_port.h).
README_PORTS = range(29400, 30400)


def free_port():
    """A port for a job's rendezvous, below the ephemeral range: a port the kernel hands out
    for port 0 is also where other tests' outgoing connections take their local ports, and one
    of them can take it before rank 0 binds it (tests/test_port.h says more). The probe bind
    refuses ports already bound; jobs that still meet "Address already in use" retry
    (port_clash)."""
    import random
    rnd = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(256):
        port = rnd.randrange(*PORT_RANGE)
        if port in README_PORTS:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {PORT_RANGE}")


def port_clash(text):
    """Whether a job's output says its rendezvous port was taken by someone else between
    free_port and the bind: the harness's race, not the code under test; run it again."""
    return "Address already in use" in text or "EADDRINUSE" in text


def _entry(rank, fn, args):
    global _rank
    _rank = rank
    fn(rank, *args)


def spawn(fn, world, args, start_method=None):
    """fn(rank, *args) in `world` processes; exit 1 (after their tracebacks) if any fails.

    The ranks are forked from this process, which has imported torch but run nothing
    (no group, no tensor work, no threads), instead of started afresh as mp.spawn does: each
    fresh interpreter imports torch again (2.7 s of CPU for torch 2.15, 1 s for 1.13, far
    more on a loaded machine), most of a small test's time. What the ranks run is the same;
    the users' way, mp.spawn in the script, is what torch_tutorial.py's spawn case runs.
    RR_TEST_START_METHOD=spawn goes back to fresh interpreters; start_method="spawn" is for
    a parent that has touched CUDA (a forked child cannot use it)."""
    import torch.multiprocessing as mp
    method = start_method or os.environ.get("RR_TEST_START_METHOD", "fork")
    try:
        mp.start_processes(_entry, args=(fn, args), nprocs=world, join=True, start_method=method)
    except Exception as e:  # noqa: BLE001 (mp.spawn re-raises the first rank's failure)
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
