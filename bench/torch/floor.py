"""What one dist.all_reduce costs torch itself, before any backend moves a byte.

    PYTHONPATH=python RINGREDUCE_LIBRARY=build-bench/libringreduce.so \
        /usr/bin/python3 bench/torch/floor.py        # torch 1.13; or the torch 2.x python

One process, world 1, float32 in place, 8 B and 1 MiB; microseconds per call, the least of
5 repeats of back-to-back calls (timeit), so that scheduling noise drops out. Contenders:

  null-python   a Python ProcessGroup that does nothing and returns a finished Work: the
                floor of any backend written in Python (the route ringreduce takes);
  fake-c++      torch's own C++ FakeProcessGroup (2.x: "fake" backend), which also does
                nothing: the floor of any backend written in C++ (the route a C++
                extension would take);
  ringreduce    the backend (world 1: the library's call returns at once after its checks);
  C call        the library's blocking rr_all_reduce on that same group through ctypes,
                without torch: what ringreduce adds is its row minus this one.
  gloo          torch's gloo at world 1, for scale.

bench/torch/run.sh runs it for each torch; docs/torch.md ("What the Python layer costs")
reads it."""
import datetime
import json
import os
import sys
import timeit

import torch
import torch.distributed as dist


def per_call(fn, n):
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


class NullWork(dist._Work if hasattr(dist, "_Work") else object):
    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True


class NullPG(dist.ProcessGroup):
    """Answers every all_reduce with a finished Work and touches nothing."""

    def __init__(self, rank, size):
        super().__init__(rank, size)

    def allreduce(self, tensors, opts=None):
        return NullWork()

    def getBackendName(self):
        return "nullpy"


def make_null(*args):
    if len(args) == 2 and hasattr(args[0], "store"):  # 2.x, the options form
        return NullPG(args[0].group_rank, args[0].group_size)
    return NullPG(args[1], args[2])


def measure(backend, sizes, out, **init):
    os.environ["MASTER_PORT"] = str(int(os.environ["MASTER_PORT"]) + 1)
    dist.init_process_group(backend, rank=0, world_size=1, **init)
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        n = 20000 if nbytes <= 4096 else 5000
        for _ in range(200):
            dist.all_reduce(t)
        out.append({"contender": backend, "bytes": nbytes,
                    "us": round(per_call(lambda: dist.all_reduce(t), n), 2)})
        if backend == "ringreduce":
            from ringreduce import _lib
            import ringreduce.torch as rt
            pg, p = dist.group.WORLD._pg, rt._ptr(t)
            out.append({"contender": "C call", "bytes": nbytes, "us": round(per_call(
                lambda: _lib.all_reduce(pg, p, p, t.numel(), _lib.FLOAT32, _lib.SUM), n), 2)})
    dist.destroy_process_group()


def main():
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 20000))
    sizes = [8, 1 << 20]
    out = []
    try:
        dist.Backend.register_backend("nullpy", make_null, devices=["cpu"])
    except TypeError:  # 1.13: no device list
        dist.Backend.register_backend("nullpy", make_null)
    import ringreduce.torch  # noqa: F401
    measure("nullpy", sizes, out)
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore
        measure("fake", sizes, out, store=FakeStore())
    except (ImportError, RuntimeError, ValueError) as e:
        print("fake-c++: not in torch %s (%s)" % (torch.__version__, e), file=sys.stderr)
    measure("ringreduce", sizes, out)
    measure("gloo", sizes, out)
    names = {"nullpy": "null-python", "fake": "fake-c++"}
    print("torch %s, world 1, us per dist.all_reduce (float32, in place)" % torch.__version__)
    print("| contender | 8 B | 1 MiB |\n|---|---:|---:|")
    rows = {}
    for r in out:
        rows.setdefault(names.get(r["contender"], r["contender"]), {})[r["bytes"]] = r["us"]
    for k, v in rows.items():
        print("| %s | %.2f | %.2f |" % (k, v[8], v[1 << 20]))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "a") as f:
            for r in out:
                f.write(json.dumps(dict(r, torch=torch.__version__,
                                        date=datetime.datetime.now(datetime.timezone.utc).isoformat())) + "\n")


if __name__ == "__main__":
    main()
