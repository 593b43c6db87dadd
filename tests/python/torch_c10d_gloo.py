"""torch's own gloo process-group tests (test/distributed/test_c10d_gloo.py), run by hand on
gloo and with every gloo group made on ringreduce instead, and compared (issue 44).

    PYTHONPATH=python RINGREDUCE_LIBRARY=build/libringreduce.so OMP_NUM_THREADS=1 \\
        <python> tests/python/torch_c10d_gloo.py --tests DIR [--backend gloo|ringreduce|both]
                 [-k PATTERN] [--classes A,B] [--timeout S] [--json OUT]

DIR holds torch's test_c10d_gloo.py and test_c10d_common.py from the torch version under
test (a checkout of pytorch/pytorch's test/distributed, at that release's tag). torch does
not ship them in its wheel and nothing here fetches them, so this is not a CI test: the
repository's own tests/python/torch_pg_object.py covers what it found, in CI; docs/torch.md
gives the counts this printed.

With --backend ringreduce every gloo group is made on ringreduce, as the issue's reporter
did: a group the test builds itself, ProcessGroupGloo(store, rank, size, opts), becomes
ProcessGroupRingreduce(store, rank, size, the options' timeout), and init_process_group and
new_group with backend "gloo" get "ringreduce". Nothing else changes; torch's test code runs
as written (tests that check gloo's own objects fail, and docs/torch.md names them).

Each test class runs in a worker process of its own, which imports torch and the tests and
runs nothing else; a test's ranks are forked from it (torch spawns fresh interpreters: the
same processes, without importing torch again for every rank of every test).

Output: each test that did not pass, per backend, then those that pass on gloo and not on
ringreduce, and the counts per class. Exit 0 when every test that passes on gloo passes on
ringreduce, 1 otherwise, 77 without torch or the test files."""

import argparse
import json
import os
import re
import subprocess
import sys
import time

_HERE = os.path.abspath(__file__)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
if os.environ.get("RINGREDUCE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(_ROOT, "python"))
sys.path.insert(0, os.path.dirname(_HERE))

# The classes of test_c10d_gloo.py that run on a machine without a GPU, in the order.
CLASSES = ["ProcessGroupGlooTest", "DistributedDataParallelTest", "CommTest",
           "GlooProcessGroupWithDispatchedCollectivesTests", "ReducerTest", "LargeCommTest",
           "TimeoutTest", "RendezvousEnvTest"]
_MARK = "@@@ c10d_gloo"


def _substitute():
    """Every gloo group made on ringreduce (the issue's reporter's substitution)."""
    import datetime

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from ringreduce.torch import ProcessGroupRingreduce

    real = dist.ProcessGroupGloo

    class GlooOnRingreduce:
        """Stands where the tests call ProcessGroupGloo(store, rank, size, opts); the
        class's own helpers (the options, create_device) stay gloo's."""
        _Options = real._Options
        create_device = staticmethod(real.create_device)
        create_default_device = staticmethod(real.create_default_device)

        def __new__(cls, store, rank, size, opts=None):
            t = getattr(opts, "_timeout", opts)
            if not isinstance(t, datetime.timedelta):
                t = datetime.timedelta(seconds=float(t) if t is not None else 1800)
            return ProcessGroupRingreduce(store, rank, size, t)

    def swapped(fn):
        def call(*args, **kwargs):
            if args and isinstance(args[0], str) and args[0].lower() == "gloo":
                args = ("ringreduce",) + args[1:]
            if str(kwargs.get("backend", "")).lower() == "gloo":
                kwargs["backend"] = "ringreduce"
            return fn(*args, **kwargs)
        return call

    dist.ProcessGroupGloo = GlooOnRingreduce
    for name in ("init_process_group", "new_group"):
        f = swapped(getattr(c10d, name))
        setattr(c10d, name, f)
        setattr(dist, name, f)


def _worker(tests_dir, backend, cls_name, pattern, timeout):
    """Run one class of torch's tests here; print one marked line per test."""
    import types
    import unittest
    try:
        import expecttest  # noqa: F401
    except ImportError:  # torch's test utilities import it; torch does not install it
        m = types.ModuleType("expecttest")
        m.ACCEPT, m.TestCase = False, unittest.TestCase
        sys.modules["expecttest"] = m
    sys.argv = sys.argv[:1]  # torch's common_utils parses sys.argv at import
    sys.path.insert(0, tests_dir)
    import torch
    from torch.testing._internal import common_distributed as cd
    if backend == "ringreduce":
        import ringreduce.torch  # noqa: F401
        _substitute()
    cd.TIMEOUT_DEFAULT = timeout
    for k in list(cd.TIMEOUT_OVERRIDE):
        cd.TIMEOUT_OVERRIDE[k] = timeout

    def fork_ranks(self):
        self._start_processes(torch.multiprocessing.get_context("fork").Process)
    cd.MultiProcessTestCase._spawn_processes = fork_ranks

    import test_c10d_gloo
    cls = getattr(test_c10d_gloo, cls_name)
    loader = unittest.TestLoader()
    names = [n for n in loader.getTestCaseNames(cls) if not pattern or re.search(pattern, n)]

    class Result(unittest.TextTestResult):
        def _say(self, test, status, text=""):
            print(f"{_MARK} {json.dumps([test._testMethodName, status, text])}", flush=True)

        def addSuccess(self, test):
            super().addSuccess(test)
            self._say(test, "pass")

        def addFailure(self, test, err):
            super().addFailure(test, err)
            self._say(test, "fail", self._exc_info_to_string(err, test))

        def addError(self, test, err):
            super().addError(test, err)
            self._say(test, "fail", self._exc_info_to_string(err, test))

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            self._say(test, "skip", reason)

    suite = unittest.TestSuite(cls(n) for n in names)
    unittest.TextTestRunner(stream=sys.stderr, resultclass=Result, verbosity=0).run(suite)


def _first_line(text):
    from torch_suite import _error_line
    return _error_line(text)


def _run_class(args, backend, cls_name):
    cmd = [sys.executable, _HERE, "--worker", backend, cls_name, "--tests", args.tests,
           "--timeout", str(args.timeout)] + (["-k", args.k] if args.k else [])
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith(_MARK):
            name, status, text = json.loads(line[len(_MARK) + 1:])
            out[name] = (status, text)
    if p.returncode != 0 and not out:
        out["(the class)"] = ("fail", p.stdout[-4000:])
    print(f"  {backend} {cls_name}: " + ", ".join(
        f"{sum(1 for s, _ in out.values() if s == k)} {k}" for k in ("pass", "fail", "skip"))
        + f" ({time.monotonic() - t0:.0f} s)", flush=True)
    for name, (status, text) in sorted(out.items()):
        if status == "fail":
            print(f"    FAIL {name}: {_first_line(text)}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", help="directory with test_c10d_gloo.py and test_c10d_common.py")
    ap.add_argument("--backend", default="both", choices=["gloo", "ringreduce", "both"])
    ap.add_argument("-k", help="only tests whose name matches this regular expression")
    ap.add_argument("--classes", default=",".join(CLASSES))
    ap.add_argument("--timeout", type=int, default=120, help="torch's per-test limit, s")
    ap.add_argument("--json", help="write every outcome, with each failure's text, here")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return _worker(os.path.abspath(args.tests), args.worker[0], args.worker[1], args.k,
                       args.timeout)
    try:
        import torch
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("no torch.distributed with gloo")
    except ImportError as e:
        print(f"skipped: {e}")
        return 77
    if not args.tests or not all(os.path.exists(os.path.join(args.tests, f)) for f in
                                 ("test_c10d_gloo.py", "test_c10d_common.py")):
        print("skipped: --tests DIR must hold torch's test_c10d_gloo.py and test_c10d_common.py")
        return 77
    args.tests = os.path.abspath(args.tests)
    backends = ["gloo", "ringreduce"] if args.backend == "both" else [args.backend]
    print(f"torch {torch.__version__}: torch's test_c10d_gloo.py on {' and '.join(backends)}")
    results = {b: {} for b in backends}
    for cls_name in args.classes.split(","):
        for b in backends:
            results[b][cls_name] = _run_class(args, b, cls_name)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if len(backends) == 1:
        return 1 if any(s == "fail" for c in results[backends[0]].values()
                        for s, _ in c.values()) else 0
    print("\nper class: tests that pass on gloo, and of them on ringreduce")
    lost = []
    for cls_name in args.classes.split(","):
        g, r = results["gloo"][cls_name], results["ringreduce"][cls_name]
        passing = [n for n, (s, _) in g.items() if s == "pass"]
        ok = [n for n in passing if r.get(n, ("fail",))[0] == "pass"]
        print(f"  {cls_name}: {len(ok)} of {len(passing)}")
        lost += [(cls_name, n, _first_line(r.get(n, ("fail", "not run"))[1]))
                 for n in passing if n not in ok]
    if lost:
        print("\npass on gloo, not on ringreduce:")
        for cls_name, n, why in lost:
            print(f"  {cls_name}.{n}: {why}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
