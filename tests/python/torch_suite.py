"""torch's own distributed test suite on the "ringreduce" backend, compared with gloo.

    PYTHONPATH=python RINGREDUCE_LIBRARY=build/libringreduce.so OMP_NUM_THREADS=1 \
        <python> tests/python/torch_suite.py [--backend gloo|ringreduce|both] [-k PATTERN]
                 [--json OUT] [--timeout S] [--world N] [--keep-gates] [--start spawn] [--serial]
                 [--list]

The suite is the one torch runs on gloo (test/distributed/test_distributed_spawn.py): the
class DistributedTest._DistTestBase shipped in torch.testing._internal.distributed.
distributed_test, mixed with TestDistBackend (a MultiProcessTestCase: each test starts its
own ranks). It runs at world 2 with the file init method and TEMP_DIR in a temporary
directory, configured as torch's run_test.py does (BACKEND, WORLD_SIZE, TEMP_DIR,
INIT_METHOD), once with BACKEND=gloo and once with BACKEND=ringreduce, and the two are
compared (--backend both, the default).

How the suite is made to use ringreduce. It reads BACKEND once, at import, and keys features
on the name in two ways:
  - sets in DistTestCases.backend_feature: "ringreduce" joins those the backend serves
    (FEATURES: ddp, subgroup, plugin; gpu and cuda where the library was built with CUDA)
    before the suite is imported, in every process (this file is also the main module of
    the ranks, which configure themselves the same way);
  - decorators that compare BACKEND with a name ("Only gloo backend supports timeouts",
    require_backend({"gloo"}), ...). A test skipped by its decorators with BACKEND=ringreduce
    but not with BACKEND=gloo is "gated by name" (found by importing the suite under both
    names). By default gated tests run on ringreduce anyway (only the skip mark is taken
    off) and are listed as gated; --keep-gates leaves them skipped and not counted.
ALLOW (below) lists, with the reason, the tests that cannot pass under another name because
torch checks the name where no runner can change it (torch.distributed itself, or the
test's body).

Each test runs as torch runs it, in a fresh MultiProcessTestCase whose ranks are new
processes, with torch's own per-test timeout set to --timeout. torch starts them with
spawn: every rank imports torch and the suite again, 1-7 s each on this kind of machine.
By default they are forked from a forkserver that imported torch and the suite once, as
configured here, and never ran anything: the same fresh processes, given the environment
the test set up (as spawn gives it); --start spawn does exactly what torch does, and a
machine with a GPU always spawns (CUDA does not survive a fork). A worker process runs the
tests one after another; a watchdog here kills it when a test outlives the timeout by a
minute (reported as a hang) or finds it dead (a crash), and the rest go on in a new one.
Tests that ask (skip_if_lt_x_gpu, skip_if_no_gpu) for more GPUs than the machine has are
skipped before their ranks start, with the reason the ranks would give (--no-preskip).

Output: the tests that did not pass on each backend as they finish, then the comparison:
tests that pass on gloo and fail, hang or crash on ringreduce, with the first line of the
error; those of them ALLOW excuses; tests skipped on ringreduce only; the gated tests, by
gate, with both outcomes. --json writes all of it, with each failure's traceback and log.

Exit 0 when every test that passes on gloo passes on ringreduce, but for ALLOW (with one
backend: when none fails, but for ALLOW); 1 otherwise; 77 when this Python has no torch, or
no torch.distributed with gloo.

torch's test utilities import expecttest, which torch does not install: where it is
missing, a stand-in (unittest's TestCase) is used; the distributed suite uses none of it."""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

_HERE = os.path.abspath(__file__)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))
if os.environ.get("RINGREDUCE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(_ROOT, "python"))

_CONFIG_ENV = "RR_TORCH_SUITE_CONFIG"  # set in the worker (and so in its ranks)
WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "2")) if os.environ.get(_CONFIG_ENV) else 2
_MARK = "@@@ torch_suite"  # the worker's lines in its log that split it per test

# DistTestCases.backend_feature sets the ringreduce backend joins. "gpu" and "cuda" only
# where the library was built with CUDA (the suite then runs its CUDA tests where GPUs are).
FEATURES = ["ddp", "subgroup", "plugin"]
FEATURES_CUDA = ["gpu", "cuda"]

# Tests that pass on gloo and cannot pass on a backend with another name, because torch
# checks the name: torch.distributed itself, or the test's own body (beyond the decorators
# that skip it, which this runner takes off: see "gated" above). Each entry:
# test -> (the torch versions it holds for, as a prefix of torch.__version__, "" for all;
#          the reason). A test that passes on gloo and fails on ringreduce for any other
# reason fails this run.
_MONITORED_113 = (
    "1.", "torch 1.13's dist.monitored_barrier() raises 'monitored_barrier is only "
    "implemented for GLOO backend.' when get_backend(group) != 'gloo' (torch 2 calls the "
    "backend's monitored_barrier instead)")
_NO_SYNC = (
    "", "the test body builds its model only under `if BACKEND == \"mpi\" or BACKEND == "
    "\"gloo\"` (or nccl): under any other name it fails with UnboundLocalError "
    "('ddp_model') before any collective")
ALLOW = {
    "test_monitored_barrier_gloo": _MONITORED_113,
    "test_monitored_barrier_gloo_subgroup": _MONITORED_113,
    "test_monitored_barrier_failure_order": _MONITORED_113,  # world >= 3
    "test_monitored_barrier_wait_all_ranks": _MONITORED_113,  # world >= 3
    "test_accumulate_gradients_no_sync": _NO_SYNC,
    "test_accumulate_gradients_no_sync_grad_is_view": _NO_SYNC,
    "test_accumulate_gradients_no_sync_allreduce_hook": _NO_SYNC,
    "test_accumulate_gradients_no_sync_allreduce_with_then_hook": _NO_SYNC,
}


def allowed(name, version):
    entry = ALLOW.get(name)
    return entry is not None and version.startswith(entry[0])


# ------------------------------------------------------------------------------------------
# The worker and the ranks it spawns: this module is their main module, and configures the
# suite at import (a spawned rank re-imports it before it unpickles its test).

def _stand_in_expecttest():
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import types
        import unittest
        m = types.ModuleType("expecttest")
        m.ACCEPT = False
        m.TestCase = unittest.TestCase
        sys.modules["expecttest"] = m


def _gpus_needed(fn, world):
    """How many GPUs torch's own decorators on a test ask for in the rank (skip_if_no_gpu,
    skip_if_lt_x_gpu), and whether they let it run on a machine with none (allow_cpu)."""
    need, cpu_ok = 0, False
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        code = getattr(fn, "__code__", None)
        if code is not None:
            q = getattr(code, "co_qualname", code.co_name)
            cells = dict(zip(code.co_freevars, [c.cell_contents for c in (fn.__closure__ or ())]))
            if q.startswith("skip_if_no_gpu."):
                need = max(need, world)
            elif q.startswith("skip_if_lt_x_gpu.") and isinstance(cells.get("x"), int):
                need = max(need, cells["x"])
                cpu_ok = cpu_ok or bool(cells.get("allow_cpu", False))
        fn = getattr(fn, "__wrapped__", None)
    return need, cpu_ok


def _error_line(text):
    """The first line of the exception a rank raised (or the runner's own), from unittest's
    text of an error: torch's RuntimeError 'Process N exited with error code 10 and
    exception:' carries each failed rank's traceback."""
    lines = text.splitlines()
    m = re.search(r"Expected (?:zero )?exit code \S* ?but got (-?\d+)", text)
    if m and "exited with error code" not in text:
        code = int(m.group(1))
        sig = ""
        if code < 0:
            try:
                sig = f" ({signal.Signals(-code).name})"
            except ValueError:
                pass
        return f"a rank exited with code {code}{sig}"
    found, in_tb = [], False
    for line in lines:
        if line.startswith("Traceback (most recent call last)"):
            in_tb = True
            continue
        if in_tb and line.strip() and not line.startswith((" ", "\t")):
            found.append(line.strip())
            in_tb = False
    useful = [f for f in found if not re.match(r"RuntimeError: Process \d+ exited with error code", f)]
    if useful:
        return useful[0][:300]
    for line in lines:
        if "timed out after" in line or "Timing out" in line:
            return line.strip()[:300]
    return (found[0] if found else (lines[-1] if lines else ""))[:300]


if os.environ.get(_CONFIG_ENV):
    with open(os.environ[_CONFIG_ENV]) as _f:
        _CFG = json.load(_f)
    # torch's common_utils parses sys.argv at import; give it nothing of ours.
    sys.argv = sys.argv[:1]
    _stand_in_expecttest()
    import unittest

    import torch
    import torch.distributed as dist
    if _CFG["backend"] == "ringreduce":
        import ringreduce.torch  # noqa: F401  (registers the backend)
    from torch.testing._internal import common_distributed as _cd
    for _feat in _CFG["features"]:
        _cd.DistTestCases.backend_feature.setdefault(_feat, set()).add(_CFG["backend"])
    # torch's per-test timeout (MultiProcessTestCase._join_processes reads these per test).
    _cd.TIMEOUT_DEFAULT = _CFG["timeout"]
    for _k in list(_cd.TIMEOUT_OVERRIDE):
        _cd.TIMEOUT_OVERRIDE[_k] = _CFG["timeout"]
    from torch.testing._internal.distributed import distributed_test as _dt

    # torch 1.13 runs the suite with DDP + ReplicatedTensor on (TestDistBackend._run), whose
    # module does not import on Python 3.11 (a dataclass with a mutable default, fixed in
    # torch 2): every DDP test would fail on gloo as on ringreduce. Run DDP plainly there.
    NOTES = []
    try:
        from torch.nn.parallel import _replicated_tensor_ddp_utils as _rt
    except ImportError:
        _rt = None
    if _rt is not None:
        try:
            import torch.distributed._shard.replicated_tensor  # noqa: F401
        except Exception as e:  # noqa: BLE001 (ValueError on 3.11; anything means unusable)
            _rt._set_ddp_with_replicated_tensor = lambda value: None
            NOTES.append("DDP + ReplicatedTensor left off (torch.distributed._shard does not "
                         f"import here: {str(e)[:120]})")

    # Take the skip mark off the tests gated by name only (found by the driver).
    for _name in _CFG.get("ungate", []):
        _fn = getattr(_dt.DistributedTest._DistTestBase, _name, None)
        while _fn is not None:
            _fn.__dict__.pop("__unittest_skip__", None)
            _fn.__dict__.pop("__unittest_skip_why__", None)
            _inner = getattr(_fn, "__wrapped__", None)
            if getattr(getattr(_fn, "__code__", None), "co_name", "") == "skip_wrapper":
                setattr(_dt.DistributedTest._DistTestBase, _name, _inner)  # unittest.skipIf's
            _fn = _inner

    class TorchSuite(_dt.TestDistBackend, _dt.DistributedTest._DistTestBase):
        """test_distributed_spawn.py's TestDistBackendWithSpawn."""

        def setUp(self):
            super().setUp()  # a fresh TEMP_DIR and INIT_METHOD in os.environ, for this test
            if _START != "spawn":
                # A forked rank has the forkserver's environment: hand it this test's, as
                # spawn would (TEMP_DIR and INIT_METHOD are new for each test).
                with open(self.file_name + ".env", "w") as f:
                    json.dump(dict(os.environ), f)
            self._spawn_processes()
            torch.backends.cudnn.flags(allow_tf32=False).__enter__()

        def tearDown(self):
            super().tearDown()
            try:
                os.unlink(self.file_name + ".env")
            except OSError:
                pass

        def _spawn_processes(self):
            if _START == "spawn":
                return super()._spawn_processes()
            self._start_processes(torch.multiprocessing.get_context(_START).Process)

        @classmethod
        def _run(cls, rank, test_name, file_name, pipe, **kwargs):
            env = file_name + ".env"
            if _START != "spawn" and os.path.exists(env):
                with open(env) as f:
                    environ = json.load(f)
                os.environ.clear()
                os.environ.update(environ)
                # What the suite reads from the environment at import.
                _dt.INIT_METHOD = os.environ.get("INIT_METHOD", "env://")
            return super()._run(rank, test_name, file_name, pipe, **kwargs)

        # In a rank: note why a test skipped itself (the parent only sees exit code 86).
        def run_test(self, test_name, parent_pipe):
            fn = getattr(self, test_name)

            def noting():
                try:
                    return fn()
                except unittest.SkipTest as e:
                    try:
                        with open(os.path.join(os.environ["TEMP_DIR"], f"skip.{self.rank}"), "w") as f:
                            f.write(str(e))
                    except OSError:
                        pass
                    raise
            setattr(self, test_name, noting)
            return super().run_test(test_name, parent_pipe)

        # In the parent: give that reason instead of torch's "look at subprocess log".
        def _check_return_codes(self, *args, **kwargs):
            try:
                return super()._check_return_codes(*args, **kwargs)
            except unittest.SkipTest as e:
                for r in range(WORLD_SIZE):
                    p = os.path.join(os.environ.get("TEMP_DIR", "/nonexistent"), f"skip.{r}")
                    if os.path.exists(p):
                        with open(p) as f:
                            raise unittest.SkipTest(f"in the rank: {f.read()}") from None
                raise e

    def _decorator_skips():
        """{test: the reason its decorators skip it, or None}."""
        out = {}
        for name in sorted(dir(TorchSuite)):
            if name.startswith("test"):
                fn = getattr(TorchSuite, name)
                out[name] = getattr(fn, "__unittest_skip_why__", None) if getattr(
                    fn, "__unittest_skip__", False) else None
        return out

    def _orphan_watch():
        """End this worker and its ranks (its process group) if the driver is gone."""
        import threading
        parent = os.getppid()

        def watch():
            while True:
                time.sleep(2)
                if os.getppid() != parent:
                    os.killpg(0, signal.SIGKILL)
        threading.Thread(target=watch, daemon=True).start()

    # How a test starts its ranks. torch's suite spawns them (a fresh interpreter imports
    # torch and the suite, 1-5 s a rank); a forkserver that imported them once forks each
    # rank instead, as fresh (nothing initialized). Not where a GPU is: the server has asked
    # CUDA for its devices, and a forked rank could not use CUDA after that.
    _START = _CFG.get("start", "spawn")
    if _START != "spawn" and torch.cuda.is_available():
        _START = "spawn"

    def _worker_main():
        _orphan_watch()
        if _START == "forkserver":
            # The server imports this file under its own name, and so torch and the suite,
            # configured as here. (Preloading "__main__" does nothing on Python 3.11.)
            import multiprocessing
            os.environ["PYTHONPATH"] = os.pathsep.join(  # the server's sys.path (3.11)
                [os.path.dirname(_HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
            multiprocessing.set_forkserver_preload([os.path.splitext(os.path.basename(_HERE))[0]])
        out = open(_CFG["results"], "a", buffering=1)
        err = sys.stderr
        n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0

        def emit(**kw):
            out.write(json.dumps(kw) + "\n")
            out.flush()

        class Result(unittest.TestResult):
            def startTest(self, test):
                super().startTest(test)
                self.t0 = time.monotonic()
                self.outcome = ("pass", "", "")
                name = test.id().split(".")[-1]
                err.write(f"\n{_MARK} start {name} {time.time():.3f}\n")
                err.flush()
                emit(event="start", test=name)

            def _set(self, status, text, detail=None):
                self.outcome = (status, detail if detail is not None else _error_line(text), text)

            def addError(self, test, exc):
                super().addError(test, exc)
                text = self._exc_info_to_string(exc, test)
                hung = "timed out after" in text and "exited with error code" not in text
                self._set("hang" if hung else "fail", text)

            def addFailure(self, test, exc):
                super().addFailure(test, exc)
                self._set("fail", self._exc_info_to_string(exc, test))

            def addSkip(self, test, reason):
                super().addSkip(test, reason)
                self._set("skip", "", reason)

            def addUnexpectedSuccess(self, test):
                super().addUnexpectedSuccess(test)
                self._set("fail", "", "unexpected success")

            def stopTest(self, test):
                name = test.id().split(".")[-1]
                status, detail, text = self.outcome
                emit(event="end", test=name, status=status, detail=detail,
                     seconds=round(time.monotonic() - self.t0, 2), text=text[-6000:])
                err.write(f"\n{_MARK} end {name} {status} {time.time():.3f}\n")
                err.flush()
                super().stopTest(test)

        result = Result()
        for name in _CFG["tests"]:
            fn = getattr(TorchSuite, name)
            need, cpu_ok = _gpus_needed(fn, WORLD_SIZE)
            if (_CFG.get("preskip", True) and need > n_gpus and not (cpu_ok and n_gpus == 0)
                    and not getattr(fn, "__unittest_skip__", False)):  # that one costs nothing
                emit(event="start", test=name)
                emit(event="end", test=name, status="skip", seconds=0.0, text="",
                     detail=f"needs {need} GPUs, the machine has {n_gpus} (skipped before "
                            "spawning its ranks, as they would skip themselves)")
                continue
            TorchSuite(name).run(result)
        emit(event="done")

# ------------------------------------------------------------------------------------------
# The driver.


def _log(msg):
    print(msg, flush=True)


def _env_for(backend, cfg_path, tmp):
    """The environment torch's run_test.py gives the suite, and this runner's config."""
    env = dict(os.environ)
    env.update({
        _CONFIG_ENV: cfg_path,
        "BACKEND": backend,
        "WORLD_SIZE": str(WORLD_SIZE),
        "TEMP_DIR": tmp,  # torch's setUp makes a fresh one per test (under TMPDIR)
        "INIT_METHOD": "file://" + os.path.join(tmp, "init_file"),  # idem, per test
        "TMPDIR": tmp,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (os.path.join(_ROOT, "python"),
                                                  os.environ.get("PYTHONPATH")) if p),
    })
    env.pop("TORCH_DISTRIBUTED_DEBUG", None)
    return env


def _write_cfg(work, backend, **kw):
    path = os.path.join(work, f"config-{backend}-{int(time.time() * 1000)}.json")
    with open(path, "w") as f:
        json.dump(dict(backend=backend, **kw), f)
    return path


def _list(py, work, backend, features):
    """[torch version, {test: decorator skip reason or None}, notes] as the suite sees
    BACKEND."""
    tmp = tempfile.mkdtemp(prefix=f"list-{backend}-", dir=work)
    cfg = _write_cfg(work, backend, features=features, timeout=60, results=os.devnull, tests=[])
    code = ("import json, runpy, sys; g = runpy.run_path(sys.argv[1], run_name='torch_suite_list');"
            " import torch; print('@@@' + json.dumps([torch.__version__, g['_decorator_skips'](), g['NOTES']]))")
    p = subprocess.run([py, "-c", code, _HERE], env=_env_for(backend, cfg, tmp),
                       capture_output=True, text=True, timeout=300)
    for line in p.stdout.splitlines():
        if line.startswith("@@@"):
            return json.loads(line[3:])
    raise RuntimeError(f"listing the suite with BACKEND={backend} failed:\n{p.stderr[-3000:]}")


def _split_log(path):
    """{test: what the worker and its ranks printed during it}."""
    out, cur, buf = {}, None, []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith(_MARK + " start "):
                    cur, buf = line.split()[3], []
                elif line.startswith(_MARK + " end "):
                    if cur:
                        out[cur] = "".join(buf)
                    cur = None
                elif cur:
                    buf.append(line)
        if cur:
            out[cur] = "".join(buf)
    except OSError:
        pass
    return out


def _crash_line(log):
    for pat in (r"terminate called.*", r"what\(\):.*", r"Segmentation fault.*", r"Fatal Python error.*",
                r"^\w*Error: .*"):
        m = re.search(pat, log, re.M)
        if m:
            return m.group(0).strip()[:300]
    return "the worker died"


def _run_backend(py, work, backend, tests, features, ungate, timeout, preskip, start):
    """Run `tests` on one backend; ({test: result}, seconds). A worker runs them in order;
    when one outlives the timeout (plus grace) or the worker dies, that test is reported and
    the rest go on in a new worker."""
    results, todo = {}, list(tests)
    log_path = os.path.join(work, f"{backend}.log")
    grace = 60
    t_start = time.monotonic()
    while todo:
        tmp = tempfile.mkdtemp(prefix=f"{backend}-", dir=work)
        res_path = os.path.join(tmp, "results.jsonl")
        cfg = _write_cfg(work, backend, features=features, ungate=ungate, timeout=timeout,
                         results=res_path, tests=todo, preskip=preskip, start=start)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([py, _HERE], env=_env_for(backend, cfg, tmp), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        cur, cur_t0, done, pos, started = None, None, False, 0, False
        while True:
            exited = proc.poll() is not None
            try:
                with open(res_path) as f:
                    f.seek(pos)
                    chunk = f.read()
            except FileNotFoundError:
                chunk = ""
            cut = chunk.rfind("\n") + 1  # whole lines only
            pos += cut
            for line in chunk[:cut].splitlines():
                ev = json.loads(line)
                if ev["event"] == "start":
                    cur, cur_t0, started = ev["test"], time.monotonic(), True
                elif ev["event"] == "end":
                    r = {k: ev[k] for k in ("status", "detail", "seconds", "text")}
                    results[ev["test"]] = r
                    todo.remove(ev["test"])
                    if r["status"] not in ("pass", "skip"):
                        _log(f"  {backend}: {ev['test']}: {r['status'].upper()} "
                             f"({r['seconds']:.0f} s): {r['detail']}")
                    cur = None
                elif ev["event"] == "done":
                    done = True
            if done or exited:
                break
            if cur is not None and time.monotonic() - cur_t0 > timeout + grace:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                results[cur] = {"status": "hang", "seconds": round(time.monotonic() - cur_t0, 1),
                                "detail": f"no result after {timeout + grace} s: its worker was killed",
                                "text": ""}
                _log(f"  {backend}: {cur}: HANG (worker killed after {timeout + grace} s)")
                todo.remove(cur)
                cur = None
                break
            time.sleep(0.2)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:  # the worker if still there, and the ranks and helpers it left behind
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        if done:
            break
        if cur is not None:
            logs = _split_log(log_path)
            results[cur] = {"status": "crash", "seconds": round(time.monotonic() - cur_t0, 1),
                            "detail": f"{_crash_line(logs.get(cur, ''))} (worker exit {proc.returncode})",
                            "text": logs.get(cur, "")[-6000:]}
            _log(f"  {backend}: {cur}: CRASH: {results[cur]['detail']}")
            todo.remove(cur)
        elif not started and todo:
            with open(log_path, errors="replace") as f:
                tail = f.read()[-3000:]
            raise RuntimeError(f"the {backend} worker exited {proc.returncode} before its first "
                               f"test:\n{tail}")
    logs = _split_log(log_path)
    for name, r in results.items():
        if r["status"] not in ("pass", "skip") and logs.get(name):
            r["log"] = logs[name][-4000:]
    return results, time.monotonic() - t_start


def _counts(res):
    c = {}
    for r in res.values():
        c[r["status"]] = c.get(r["status"], 0) + 1
    return ", ".join(f"{v} {k}" for k, v in sorted(c.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("gloo", "ringreduce", "both"), default="both")
    ap.add_argument("-k", dest="patterns", action="append", default=[],
                    help="run only tests whose name matches this regular expression (repeatable)")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--world", type=int, default=2,
                    help="ranks per test (default 2; torch's CI runs gloo at 3 without 2 GPUs, "
                         "which also runs the *_group tests)")
    ap.add_argument("--timeout", type=int, default=90,
                    help="seconds a test may take before it counts as a hang (default 90; "
                         "the suite's process groups time out after 60)")
    ap.add_argument("--keep-gates", action="store_true",
                    help="leave the tests the suite reserves for gloo by name skipped on ringreduce")
    ap.add_argument("--no-preskip", action="store_true",
                    help="spawn the ranks of tests that need more GPUs than the machine has")
    ap.add_argument("--start", choices=("forkserver", "spawn"), default="forkserver",
                    help="how a test starts its ranks: spawn, as torch's own runner does, or "
                         "forked from a server that imported torch and the suite once (the "
                         "default: the same fresh ranks, much sooner; spawn where a GPU is)")
    ap.add_argument("--compare-with", metavar="JSON",
                    help="with --backend ringreduce: take gloo's results from this earlier --json")
    ap.add_argument("--serial", action="store_true",
                    help="with both backends: run gloo's tests, then ringreduce's (by default "
                         "their workers run at the same time)")
    ap.add_argument("--list", action="store_true", help="list the selected tests and exit")
    ap.add_argument("--workdir", help="keep the logs here (default: a temporary directory, removed)")
    args = ap.parse_args()

    global WORLD_SIZE
    WORLD_SIZE = args.world
    py = sys.executable
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"skipped: no torch for {py} ({e})")
        return 77
    if not dist.is_available() or not dist.is_gloo_available():
        print(f"skipped: torch {torch.__version__} for {py} has no torch.distributed with gloo")
        return 77
    version = torch.__version__
    features = list(FEATURES)
    if args.backend != "gloo":
        try:
            from ringreduce import _lib
            if _lib.cuda_built():
                features += FEATURES_CUDA
        except (ImportError, RuntimeError, AttributeError, OSError) as e:
            print(f"FAILED: cannot load the ringreduce package or library: {e}")
            return 1

    import shutil
    work = args.workdir or tempfile.mkdtemp(prefix="torch_suite.")
    os.makedirs(work, exist_ok=True)
    try:
        return _drive(args, py, version, features, work)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def _drive(args, py, version, features, work):
    t0 = time.monotonic()
    _, gloo_skips, notes = _list(py, work, "gloo", [])
    rr_skips = None
    if args.backend != "gloo":
        _, rr_skips, _ = _list(py, work, "ringreduce", features)
    names = sorted(gloo_skips)
    if args.patterns:
        names = [n for n in names if any(re.search(p, n) for p in args.patterns)]
    gated = {}
    if rr_skips is not None:
        gated = {n: rr_skips[n] for n in names if rr_skips.get(n) and not gloo_skips.get(n)}
    _log(f"torch {version} ({py}), world {WORLD_SIZE}: {len(names)} tests"
         + ("" if rr_skips is None else
            f"; ringreduce declares {', '.join(features)}; {len(gated)} gated by name on "
            f"ringreduce{' (left skipped)' if args.keep_gates else ' (run anyway)'}")
         + f"; listing took {time.monotonic() - t0:.0f} s")
    for n in notes:
        _log(f"note: {n}")
    if args.list:
        for n in names:
            why = gated.get(n)
            print(n + (f"   [gated on ringreduce: {why}]" if why else ""))
        return 0

    report = {"torch": version, "python": py, "world_size": WORLD_SIZE, "timeout": args.timeout,
              "features": features, "gated": gated, "notes": notes, "start": args.start,
              "allow": {k: v[1] for k, v in ALLOW.items() if version.startswith(v[0])},
              "backends": {}}
    backends = ["gloo", "ringreduce"] if args.backend == "both" else [args.backend]

    def run_one(b):
        _log(f"{b}: running {len(names)} tests")
        res, secs = _run_backend(py, work, b, names,
                                 features if b == "ringreduce" else [],
                                 [] if (b == "gloo" or args.keep_gates) else sorted(gated),
                                 args.timeout, not args.no_preskip, args.start)
        _log(f"{b}: {_counts(res)} in {secs:.0f} s")
        return res, secs

    # The two backends' workers run side by side (--serial: one after the other): a test's
    # ranks spend most of their time waiting on each other and on torch's polling, so one
    # worker leaves the machine 60-70% idle (measured in CI, 2026-11-28). Each worker has
    # its own log, config and temporary directories, and every test its own file rendezvous.
    if args.serial or len(backends) == 1:
        outcomes = [run_one(b) for b in backends]
    else:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(len(backends)) as pool:
            outcomes = list(pool.map(run_one, backends))
    for b, (res, secs) in zip(backends, outcomes):
        report["backends"][b] = {"seconds": round(secs, 1), "tests": res}

    gloo = report["backends"].get("gloo", {}).get("tests")
    if gloo is None and args.compare_with:
        with open(args.compare_with) as f:
            gloo = json.load(f)["backends"]["gloo"]["tests"]
    rc = 0
    if "ringreduce" in report["backends"] and gloo is not None:
        rr = report["backends"]["ringreduce"]["tests"]
        broken, allowed_fail, by_name = [], [], []
        for n in names:
            g, r = gloo.get(n), rr.get(n)
            if not g or g["status"] != "pass" or not r or r["status"] == "pass":
                continue
            if r["status"] == "skip" and n in gated:  # --keep-gates: listed below
                by_name.append(n)
            elif allowed(n, version):
                allowed_fail.append(n)
            else:
                broken.append(n)
        skipped_only = [n for n in names if rr.get(n, {}).get("status") == "skip"
                        and gloo.get(n, {}).get("status") != "skip"]
        report["comparison"] = {"fail_on_ringreduce": broken, "allowed": allowed_fail,
                                "skipped_only_on_ringreduce": skipped_only}
        _log(f"\n== torch {version}, world {WORLD_SIZE}: pass on gloo, not on ringreduce: {len(broken)}")
        for n in broken:
            r = rr[n]
            _log(f"  {n}: {r['status'].upper()} ({r['seconds']:.0f} s): {r['detail']}"
                 + ("  [gated by name, run anyway]" if n in gated else ""))
        _log(f"== pass on gloo, not on ringreduce, allowed (torch keys them on the name gloo): "
             f"{len(allowed_fail)}")
        for n in allowed_fail:
            _log(f"  {n}: {rr[n]['status'].upper()}: {rr[n]['detail'][:120]}")
            _log(f"      why allowed: {ALLOW[n][1]}")
        _log(f"== skipped on ringreduce only: {len(skipped_only)}")
        for n in skipped_only:
            _log(f"  {n}: {rr[n]['detail']}" + ("  [gated by name]" if n in gated else ""))
        if gated:
            _log(f"== gated by name (the suite skips them on any backend but the ones it names): "
                 f"{len(gated)}, {'left skipped' if args.keep_gates else 'run anyway'} on ringreduce")
            reasons = {}
            for n in sorted(gated):
                reasons.setdefault(gated[n], []).append(n)
            for why, tests in reasons.items():
                ran = [n for n in tests if gloo.get(n, {}).get("status") == "pass"]
                _log(f"  '{why}': {len(tests)}" + (f", {len(tests) - len(ran)} not passing on gloo "
                                                   "either" if len(ran) < len(tests) else ""))
                for n in ran:
                    _log(f"    {n}: ringreduce {rr.get(n, {}).get('status', '-')}")
        rc = 1 if broken else 0
    else:
        for b, data in report["backends"].items():
            bad = [n for n, r in data["tests"].items()
                   if r["status"] not in ("pass", "skip") and not (b == "ringreduce" and allowed(n, version))]
            rc = rc or (1 if bad else 0)
    for b, data in report["backends"].items():
        _log(f"{b}: {_counts(data['tests'])} in {data['seconds']:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    _log(f"{'FAILED' if rc else 'passed'} (torch {version}, total {time.monotonic() - t0:.0f} s)")
    return rc


if __name__ == "__main__":
    if os.environ.get(_CONFIG_ENV):
        _worker_main()
    else:
        sys.exit(main())
