"""Where a CUDA call's copy back runs (ringreduce/_tensors.py, _stream_ordered), checked
without a GPU: torch.cuda's current_stream, device and stream are replaced here by recorders,
so what is checked is the wrapper's logic, not CUDA's ordering (tests/python/torch_cuda.py
checks that, on a GPU machine only).

    python3 tests/python/torch_stream_order.py

The stream is the one current on the call's device when the finish is wrapped (the call's
issue), not when it runs; it runs with that device and stream current, on another thread
too; host calls' finishes (and none) come back untouched."""

import contextlib
import os
import sys
import threading
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

torch, dist, mp = common.torch_or_skip()
from ringreduce import _tensors  # noqa: E402

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
    print("torch_stream_order: a CUDA call's copy back runs on its issuing stream and device, "
          "from any thread; host finishes untouched")


if __name__ == "__main__":
    main()
