"""Where a CUDA call's copy back runs (ringreduce/_tensors.py, _stream_ordered), checked
without a GPU: torch.cuda's current_stream, device and stream are replaced here by recorders,
so what is checked is the wrapper's logic, not CUDA's ordering (tests/python/torch_cuda.py
checks that, on a GPU machine only).

    python3 tests/python/torch_stream_order.py

The stream is the one current on the call's device when the finish is wrapped (the call's
issue), not when it runs; it runs with that device and stream current, on another thread
too; host calls' finishes (and none) come back untouched.

A CUDA call's future is completed (set_result, which records the future's CUDA events on the
stream current on the completing thread) with the same device and stream current, after the
copy back: from the futures threads when the call completes later, and from the caller's
thread when the call had completed before get_future()."""

import contextlib
import os
import sys
import threading
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

torch, dist, mp = common.torch_or_skip()
from ringreduce import _lib, _tensors, _work  # noqa: E402

current = {"stream": "issuing"}  # what torch.cuda.current_stream answers now
active = {"device": None, "stream": None}


def current_stream(device):
    return ("stream", str(device), current["stream"])


@contextlib.contextmanager
def setting(key, value):
    before = active[key]
    active[key] = value
    try:
        yield
    finally:
        active[key] = before


class FakeCall:
    """A library call as Batch sees it, completed when `gate` opens (library-side wait)."""

    def __init__(self, finish):
        self.finish, self.done, self.error, self.handle = finish, False, None, None
        self.gate = threading.Event()

    def poll(self):
        return self.done

    def complete(self, status):
        if not self.done:
            self.finish()
            self.done = True


def recording_future(ran):
    """torch.futures.Future with set_result recorded where it runs: a CUDA future records its
    completion events on the stream current there (ATen's ivalue_inl.h, markCompleted)."""

    class Future:
        def __init__(self, devices=None):
            self.devices = devices

        def set_result(self, value):
            ran.append(("set_result", active["device"], active["stream"]))

        def then(self, fn):
            return self
    return Future


def future_order(ran, settled_first):
    """A CUDA all_reduce's future, asked for before (the futures threads complete it) or
    after (the caller's thread does) the call completed, with another stream current by
    then: the copy back and set_result must both run on the issuing stream, in that order."""
    dev = torch.device("cuda", 1)
    current["stream"] = "issuing"

    def copy_back():
        ran.append(("copy back", active["device"], active["stream"]))
    call = FakeCall(_tensors._stream_ordered(copy_back, dev))
    batch = _work.Batch([call], "all_reduce", _tensors._issuing_stream(dev))
    completer = _work._Completer()
    work = _work.Work(batch, ["t"], completer, dev)
    current["stream"] = "another, current when the future is completed"

    def library_wait(handle, ms):
        call.gate.wait()
        return 0
    with mock.patch.object(_lib, "work_wait", library_wait):
        if settled_first:
            call.complete(0)
            work.get_future()
        else:
            work.get_future()
            call.gate.set()
        completer.stop()
    return ran


def main():
    ran = []

    def finish():
        ran.append((threading.current_thread().name, active["device"], active["stream"]))

    cpu = torch.device("cpu")
    common.check(_tensors._stream_ordered(finish, cpu) is finish, "a host finish was wrapped")
    common.check(_tensors._stream_ordered(finish, None) is finish, "a finish without device")
    common.check(_tensors._stream_ordered(None, torch.device("cuda", 1)) is None, "no finish")
    with mock.patch.object(torch.cuda, "current_stream", current_stream), \
            mock.patch.object(torch.cuda, "device", lambda d: setting("device", str(d))), \
            mock.patch.object(torch.cuda, "stream", lambda s: setting("stream", s)):
        dev = torch.device("cuda", 1)
        wrapped = _tensors._stream_ordered(finish, dev)
        current["stream"] = "another, current when the copy runs"
        t = threading.Thread(target=wrapped, name="futures")
        t.start()
        t.join()
        wrapped()
    want = ("stream", "cuda:1", "issuing")
    common.check(ran == [("futures", "cuda:1", want), ("MainThread", "cuda:1", want)],
                 f"the copy back ran as {ran}; want on cuda:1, on stream {want}, from either "
                 "thread")
    common.check(active == {"device": None, "stream": None}, f"left behind: {active}")

    for settled_first in (False, True):
        ran = []
        with mock.patch.object(torch.cuda, "current_stream", current_stream), \
                mock.patch.object(torch.cuda, "device", lambda d: setting("device", str(d))), \
                mock.patch.object(torch.cuda, "stream", lambda s: setting("stream", s)), \
                mock.patch.object(torch.futures, "Future", recording_future(ran)):
            future_order(ran, settled_first)
        common.check(ran == [("copy back", "cuda:1", want), ("set_result", "cuda:1", want)],
                     f"the future (asked for {'after' if settled_first else 'before'} the call "
                     f"completed) was completed as {ran}; want the copy back, then set_result, "
                     f"both on cuda:1 and stream {want}")
        common.check(active == {"device": None, "stream": None}, f"left behind: {active}")
    print("torch_stream_order: a CUDA call's copy back runs on its issuing stream and device, "
          "from any thread, and its future is completed there after it; host finishes "
          "untouched")


if __name__ == "__main__":
    main()
