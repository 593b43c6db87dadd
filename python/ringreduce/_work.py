"""Library calls in flight as torch sees them: _Call (one rr_work), Work (torch's handle for
one or more calls) and _Completer (the thread that completes futures).

Nothing here decides what to call; ringreduce/torch.py issues the calls and wraps them."""

import collections
import threading
import time

import torch
import torch.distributed as dist

from . import _lib
from ._tensors import _on_stream, _write_back


def _timeout_ms(timeout):
    """A torch timeout (timedelta, seconds or None) as the library's milliseconds: 0 means the
    group's own deadline (torch's C++ callers pass a zero timedelta for "no timeout")."""
    if timeout is None:
        return 0
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
    return max(int(seconds * 1000), 1) if seconds > 0 else 0


def call_error(status, text, what):
    """The RuntimeError a failed call raises: the library's sentence (which rank, which call,
    why), a timeout worded as torch's users and tests look for it (gloo and NCCL say "Timed
    out")."""
    msg = text or f"{what}: {_lib.status_name(status).decode()}"
    if status == _lib.ETIMEDOUT and "Timed out" not in msg:
        msg = f"Timed out waiting for the call to finish: {msg}"
    return RuntimeError(f"ringreduce: {msg}")


class _Call:
    """One library call: its handle, what must stay alive until it completes, and what to do
    once it completed (copy results out of a contiguous staging tensor). complete() records
    the outcome once, from whichever thread sees it first."""

    __slots__ = ("handle", "keep", "finish", "lock", "done", "error", "what", "memory",
                 "failures", "__weakref__")

    def __init__(self, handle, keep, finish, what, failures=None):
        self.handle, self.keep, self.finish, self.what = handle, keep, finish, what
        self.failures = failures  # the group's list of failures (errored()), if it keeps one
        self.lock = threading.Lock()
        self.done = False
        self.error = None
        # Where each tensor's memory was when the call started: the library reads and writes
        # there until it completes. torch gives a backend no way to pin that memory, so a
        # tensor resized (resize_, set_) meanwhile is found here, at completion, and named.
        self.memory = [(t, t.data_ptr()) for t in _tensors_in(keep)]

    def complete(self, status):
        with self.lock:
            if self.done:
                return
            moved = [t for t, ptr in self.memory if t.data_ptr() != ptr]
            if status < 0:
                msg = _lib.work_error(self.handle)
                self.error = call_error(status, msg.decode("utf-8", "replace") if msg else "",
                                        self.what)
                if self.failures is not None and status not in _lib.LOCAL_ERRORS \
                        and not self.failures:
                    self.failures.append(self.error)
            elif moved:
                self.error = RuntimeError(
                    f"ringreduce: {self.what}: a tensor of this call got new memory (resize_, "
                    "set_) while the call was in flight; the library wrote into the memory it "
                    "had when the call started, which the tensor no longer owns: the result is "
                    "lost (and, if that memory was freed, the process may be damaged). Leave a "
                    "tensor alone until its work has completed")
            elif self.finish is not None:
                # A copy-out that fails (torch refusing the copy) fails this call only: the
                # group and every later call go on.
                try:
                    _write_back(self.finish)
                except Exception as e:  # noqa: BLE001
                    self.error = RuntimeError(f"ringreduce: {self.what}: copying the result "
                                              f"into the caller's tensor failed: {e}")
            self.keep = None
            self.finish = None
            self.memory = ()
            self.done = True

    def poll(self):
        """True once complete (without waiting)."""
        if not self.done:
            st = _lib.work_test(self.handle)
            if st == _lib.INPROGRESS:
                return False
            self.complete(st)
        return True

    def __del__(self):
        # At interpreter exit the modules' names may already be None ("TypeError: 'NoneType'
        # object is not callable", seen on the first GPU run): the process is ending, and
        # the memory goes with it.
        free = getattr(_lib, "work_free", None)
        if self.handle and free is not None:
            free(self.handle)
            self.handle = None


def _tensors_in(keep):
    """The host and device tensors (strided) among what a call keeps alive."""
    if isinstance(keep, torch.Tensor):
        return [keep] if keep.layout == torch.strided else []
    if isinstance(keep, (list, tuple)):
        return [t for k in keep for t in _tensors_in(k)]
    return []


class Batch:
    """The calls one torch Work stands for. A call issued inside a coalescing block is issued
    only when the block ends (torch.py): until then `pending` is true and there is nothing to
    wait for. `stream`: for CUDA calls, the device and stream they were issued on
    (_tensors._issuing_stream), which their future is completed on (_settle)."""

    __slots__ = ("calls", "pending", "what", "stream")

    def __init__(self, calls, what, stream=None, pending=False):
        self.calls, self.what, self.stream, self.pending = calls, what, stream, pending

    def error(self):
        for c in self.calls:
            if c.error is not None:
                return c.error
        return None

    def done(self):
        return not self.pending and all(c.done for c in self.calls)

    def poll(self):
        return not self.pending and all([c.poll() for c in self.calls])

    def wait(self, timeout_ms):
        if self.pending:
            raise RuntimeError(f"ringreduce: {self.what}: waited for inside a coalescing block "
                               "(batch_isend_irecv, _coalescing_manager); its operations start "
                               "when the block ends: wait for the block's work instead")
        deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms else None
        for c in self.calls:
            if c.done:
                continue
            ms = 0
            if deadline is not None:
                ms = max(int((deadline - time.monotonic()) * 1000), 1)
            c.complete(_lib.work_wait(c.handle, ms))  # the GIL is released while it waits


def _settle(source, batch, result):
    """Complete `source` with the call's tensors, or with its error object for
    _raise_or_pass to raise. A CUDA future records its completion events on the stream
    current where set_result runs (torch's ivalue_inl.h, markCompleted), and its wait() and
    then() callbacks order their streams after those events only: so it runs with the
    call's issuing stream current, the one the library ordered after the result and the copy
    back ran on, not the current stream of the settler thread or of whoever asked for the
    future after the call completed."""
    err = batch.error()
    with _on_stream(batch.stream):
        source.set_result(err if err is not None else result)


def _raise_or_pass(source):
    """The callback between a call's source future and the future get_future() returns.

    torch.futures.Future.set_exception does not fail the future underneath: it stores the
    exception as the future's value and raises it only from Python's wait(). C++ readers
    such as DDP's reducer then take that value for the result (torch 1.13 crashes on it).
    An exception raised inside a then() callback does fail the child future in C++, so the
    error travels that way: to Python's wait(), to C++'s, and to callbacks chained after."""
    value = source.value()
    if isinstance(value, BaseException):
        raise value
    return value


class _Completer:
    """Completes futures. One thread waits for works in issue order (the library runs a
    group's calls in that order); settler threads then set each work's future, which runs
    the callbacks chained to it. A callback may itself start a call and wait for its future
    (PowerSGD's hook does): the settler it runs on is then busy, so a free one is started
    for the futures behind it, and the waiting thread is never the one blocked. Only works
    someone asked a future of come here; a plain wait() needs no thread. Holds no reference
    to the process group, so that dropping the group frees it. Nothing a future's callbacks
    do stops it."""

    MAX_SETTLERS = 16  # callbacks blocked at once before futures queue behind them

    def __init__(self):
        self.q = collections.deque()      # (batch, future, result) to wait for, in order
        self.ready = collections.deque()  # ... done, to settle
        self.cv = threading.Condition()
        self.waiter = None
        self.settlers = []
        self.idle = 0
        self.stopping = False

    def add(self, batch, fut, result):
        with self.cv:
            if self.waiter is None:
                self.stopping = False
                self.waiter = self._thread(self._wait_loop, "ringreduce-futures")
            self.q.append((batch, fut, result))
            self.cv.notify_all()

    @staticmethod
    def _thread(fn, name):
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        return t

    def _wait_loop(self):
        while True:
            with self.cv:
                while not self.q and not self.stopping:
                    self.cv.wait()
                if not self.q:
                    return
                item = self.q.popleft()
            try:
                item[0].wait(0)
            except RuntimeError:
                pass  # recorded in the batch's calls; _settle passes it on
            with self.cv:
                self.ready.append(item)
                if self.idle == 0 and len(self.settlers) < self.MAX_SETTLERS:
                    self.settlers.append(self._thread(self._settle_loop, "ringreduce-callbacks"))
                self.cv.notify_all()

    def _settle_loop(self):
        while True:
            with self.cv:
                self.idle += 1
                while not self.ready and not (self.stopping and self.waiter is None):
                    self.cv.wait()
                self.idle -= 1
                if not self.ready:
                    return
                batch, fut, result = self.ready.popleft()
            try:
                _settle(fut, batch, result)
            except Exception as e:  # noqa: BLE001 (torch refused the value: say so, go on)
                try:
                    fut.set_result(RuntimeError(f"ringreduce: {batch.what}: completing its "
                                                f"future failed: {e}"))
                except Exception:  # noqa: BLE001 (already completed)
                    pass

    def stop(self):
        """Let the threads finish the futures they hold, then end them."""
        with self.cv:
            waiter, self.waiter = self.waiter, None
            self.stopping = True
            self.cv.notify_all()
        me = threading.current_thread()
        if waiter is not None and waiter is not me:
            waiter.join()
        with self.cv:
            settlers, self.settlers = self.settlers, []
            self.cv.notify_all()
        for t in settlers:
            if t is not me:
                t.join()


class Work(dist._Work):
    """torch's Work for one torch call (one or more library calls): wait() blocks until they
    completed (raising the library's error), get_future() gives a torch Future completed
    with the output tensors.

    torch 1.13's C++ code (DDP's construction checks, for one) calls a Python Work's methods
    through a trampoline that finds them only while the Python object lives, and it does not
    keep it alive: the process group does, until the call completed and someone waited for it
    or took its future (ProcessGroupRingreduce._prune). torch 2.x keeps it alive itself."""

    def __init__(self, batch, result, completer, device=None, source_rank=-1):
        super().__init__()
        self._batch = batch
        self._result = result
        # A future that carries CUDA tensors must name their device (torch checks it when the
        # future completes); CPU futures name none.
        self._devices = [device] if device is not None and device.type == "cuda" else None
        self._completer = completer
        self._observed = False
        self._source = source_rank
        self._default_timeout = None  # a call's own limit (barrier(timeout=...))

    def wait(self, timeout=None):
        b = self._batch
        if not b.calls and not b.pending:
            return True  # ran on the caller's thread, or nothing to run
        self._observed = True
        if not b.done():
            ms = _timeout_ms(timeout)
            b.wait(ms if ms or self._default_timeout is None else _timeout_ms(self._default_timeout))
        err = b.error()
        if err is not None:
            raise err
        return True

    def is_completed(self):
        return self._batch.poll()

    def is_success(self):
        return self.is_completed() and self._batch.error() is None

    def exception(self):
        return self._batch.error() if self.is_completed() else None

    def result(self):
        """The output tensors, as torch's C++ Work::result gives them: one list (a call
        whose outputs are a list of lists, all_gather of several tensors, answers through
        get_future() only, as gloo's does)."""
        self.wait()
        r = self._result
        if r and isinstance(r[0], (list, tuple)):
            raise RuntimeError("ringreduce: work result does not support list of lists (the "
                               "outputs of all_gather of several tensors, all_gather_coalesced): "
                               "use .get_future() and value()")
        return r

    def get_future(self):
        source = torch.futures.Future(devices=self._devices)
        fut = source.then(_raise_or_pass)
        self._observed = True
        if self._batch.poll():
            _settle(source, self._batch, self._result)
        else:
            self._completer.add(self._batch, source, self._result)
        return fut

    def get_future_result(self):
        """torch 2.x: a future completed with the work's WorkResult (SUCCESS, TIMEOUT or
        COMM_ERROR) instead of its tensors; it never fails."""
        results = getattr(torch._C._distributed_c10d, "WorkResult", None)
        if results is None:
            raise RuntimeError("ringreduce: get_future_result: this torch has no WorkResult")

        def outcome(fut):
            try:
                fut.wait()
                return results.SUCCESS
            except RuntimeError as e:
                return results.TIMEOUT if "Timed out" in str(e) else results.COMM_ERROR
        return self.get_future().then(outcome)

    def synchronize(self):
        self.wait()

    def block_current_stream(self):
        # CPU work has no stream to order: the caller's next step may read the results once
        # this returns.
        self.wait()

    def source_rank(self):
        """The sender of a receive (the group rank), once it completed; the library says whom
        a receive from any source took, by its global rank (_rank_of maps it back)."""
        self.wait()
        if self._source < 0 and self._batch.calls:
            self._source = self._rank_of(_lib.work_source(self._batch.calls[0].handle))
        return self._source

    _source_rank = source_rank
    _rank_of = staticmethod(lambda r: r)  # library global rank -> group rank (shrunk groups)
