"""The "ringreduce" backend for torch.distributed.

    import ringreduce.torch
    torch.distributed.init_process_group("ringreduce")   # instead of "gloo"

Importing this module registers the backend. Each torch process group (the world, and every
new_group) gets a library group of its own, made by rendezvous through the store torch hands
the backend (its PrefixStore): no second port. The process group is a Python subclass of
torch's ProcessGroup, so the same code runs on torch 1.13 and 2.x without compiling against
torch (docs/torch.md says why, with measurements). It holds no algorithm: each call maps
torch's tensors and options onto one call of the C library, asynchronous, and returns a
Work whose wait() waits for that call.

Tensors must stay alive and untouched until their call completes (as with gloo); the
process group keeps them referenced until then. Non-contiguous tensors are copied to
contiguous ones and back. Errors raise RuntimeError with the library's sentence (which
rank, which call, why)."""

import collections
import ctypes
import datetime
import inspect
import queue
import threading
import weakref

import torch
import torch.distributed as dist

from . import _lib

BACKEND = "ringreduce"
_KEEP = 256  # completed works nobody waited for, kept in case a C++ caller still asks

# torch dtype -> library dtype. bool travels as uint8, for the ops that keep 0/1 (below).
_DTYPES = {
    torch.int8: _lib.INT8, torch.uint8: _lib.UINT8, torch.int32: _lib.INT32,
    torch.int64: _lib.INT64, torch.float16: _lib.FLOAT16, torch.bfloat16: _lib.BFLOAT16,
    torch.float32: _lib.FLOAT32, torch.float64: _lib.FLOAT64, torch.bool: _lib.UINT8,
}
_SUPPORTED = "float16, bfloat16, float32, float64, int8, uint8, int32, int64 and bool"

# torch's ReduceOp values are not ours: map each explicitly (compared with ==, as torch's
# ReduceOp objects are not plain ints on every version).
_OPS = [(dist.ReduceOp.SUM, _lib.SUM, "SUM"), (dist.ReduceOp.PRODUCT, _lib.PROD, "PRODUCT"),
        (dist.ReduceOp.MIN, _lib.MIN, "MIN"), (dist.ReduceOp.MAX, _lib.MAX, "MAX"),
        (dist.ReduceOp.BAND, _lib.BAND, "BAND"), (dist.ReduceOp.BOR, _lib.BOR, "BOR"),
        (dist.ReduceOp.BXOR, _lib.BXOR, "BXOR")]
if hasattr(dist.ReduceOp, "AVG"):
    _OPS.append((dist.ReduceOp.AVG, _lib.AVG, "AVG"))
# On 0/1 values these stay 0/1; SUM and AVG would not, so bool refuses them.
_BOOL_OPS = (_lib.PROD, _lib.MIN, _lib.MAX, _lib.BAND, _lib.BOR, _lib.BXOR)


def _dtype(t, what):
    d = _DTYPES.get(t.dtype)
    if d is None:
        raise RuntimeError(f"ringreduce: {what}: tensors of dtype {t.dtype} are not supported "
                           f"(supported: {_SUPPORTED})")
    return d


def _op(reduce_op, t, what):
    for theirs, ours, name in _OPS:
        if reduce_op == theirs:
            if t.dtype == torch.bool and ours not in _BOOL_OPS:
                raise RuntimeError(f"ringreduce: {what}: {name} of bool tensors is not supported "
                                   "(it would leave values other than 0 and 1; use MAX for "
                                   "'any' or MIN for 'all')")
            return ours
    raise RuntimeError(f"ringreduce: {what}: reduce op {reduce_op} is not supported (SUM, "
                       "PRODUCT, MIN, MAX, BAND, BOR, BXOR and AVG are; PREMUL_SUM is "
                       "NCCL's: scale the tensor and use SUM)")


def _one(tensors, what):
    if len(tensors) != 1:
        raise RuntimeError(f"ringreduce: {what}: one tensor per call (got {len(tensors)}); "
                           "several per process is the multi-device API, not supported")
    return tensors[0]


def _timeout_ms(timeout):
    if timeout is None:
        return 0
    ms = int(timeout.total_seconds() * 1000)
    return max(ms, 1) if timeout.total_seconds() > 0 else 0


class _Call:
    """One library call in flight: its handle, what must stay alive until it completes,
    what to do once it completed (copy results out of a contiguous staging tensor), and
    the tensors a future reports."""

    __slots__ = ("handle", "keep", "finish", "result", "lock", "done", "error", "what",
                 "__weakref__")

    def __init__(self, handle, keep, finish, result, what):
        self.handle, self.keep, self.finish, self.result, self.what = handle, keep, finish, result, what
        self.lock = threading.Lock()
        self.done = False
        self.error = None

    def complete(self, status):
        """Record the outcome once (idempotent); run the copy-out after a success."""
        with self.lock:
            if self.done:
                return
            if status < 0:
                msg = _lib.work_error(self.handle)
                msg = msg.decode("utf-8", "replace") if msg else _lib.status_name(status).decode()
                self.error = RuntimeError(f"ringreduce: {msg}")
            elif self.finish is not None:
                self.finish()
            self.keep = None
            self.done = True

    def __del__(self):
        if self.handle:
            _lib.work_free(self.handle)
            self.handle = None


def _settle(source, call):
    """Complete `source` with the call's tensors, or with its error object for
    _raise_or_pass to raise."""
    source.set_result(call.error if call.error is not None else call.result)


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
    """Completes futures: a thread that waits for calls in issue order (the library runs a
    group's calls in that order) and then sets each call's futures. Only calls someone asked
    a future of come here; a plain wait() needs no thread. Holds no reference to the process
    group, so that dropping the group frees it."""

    def __init__(self):
        self.q = queue.Queue()
        self.thread = None

    def add(self, call, fut):
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="ringreduce-futures", daemon=True)
            self.thread.start()
        self.q.put((call, fut))

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            call, fut = item
            call.complete(_lib.work_wait(call.handle, 0))  # the GIL is released while it waits
            _settle(fut, call)

    def stop(self):
        if self.thread is not None:
            self.q.put(None)
            self.thread.join()
            self.thread = None


class Work(dist._Work):
    """torch's Work for one call: wait() blocks until it completed (raising the library's
    error), get_future() gives a torch Future completed with the output tensors.

    torch's C++ code (DDP's construction checks, for one) calls a Python Work's methods
    through a trampoline that finds them only while the Python object lives, and it does not
    keep it alive: the process group does, until the call completed and someone waited for it
    or took its future (see ProcessGroupRingreduce._prune)."""

    def __init__(self, call, completer, device=None):
        super().__init__()
        self._call = call
        # A future that carries CUDA tensors must name their device (torch checks it when the
        # future completes); CPU futures name none.
        self._devices = [device] if device is not None and device.type == "cuda" else None
        self._completer = completer
        self._observed = False

    def wait(self, timeout=None):
        call = self._call
        if not call.done:
            call.complete(_lib.work_wait(call.handle, _timeout_ms(timeout)))
        self._observed = True
        if call.error is not None:
            raise call.error
        return True

    def is_completed(self):
        call = self._call
        if not call.done:
            st = _lib.work_test(call.handle)
            if st == _lib.INPROGRESS:
                return False
            call.complete(st)
        return True

    def is_success(self):
        return self.is_completed() and self._call.error is None

    def exception(self):
        return self._call.error if self.is_completed() else None

    def result(self):
        self.wait()
        return self._call.result

    def get_future(self):
        source = torch.futures.Future(devices=self._devices)
        fut = source.then(_raise_or_pass)
        call = self._call
        self._observed = True
        if self.is_completed():
            _settle(source, call)
        else:
            self._completer.add(call, source)
        return fut

    def synchronize(self):
        self.wait()


class _StoreBridge:
    """torch's store behind the library's store callbacks (rr_store_from_callbacks). Every
    callback catches everything: an exception must not cross back into C."""

    def __init__(self, store, timeout_ms):
        self.store = store

        def guard(fn):
            def wrapped(*args):
                try:
                    return fn(*args)
                except Exception as e:  # noqa: BLE001 (any failure is reported to the library)
                    text = str(e) or type(e).__name__
                    status = _lib.ETIMEDOUT if "imeout" in text or "timed out" in text else _lib.EPEER
                    return _lib.store_fail(status, f"torch's store: {text}".encode()[:900])
            return wrapped

        def cb_set(ctx, key, value, n):
            self.store.set(key.decode(), ctypes.string_at(value, n) if n else b"")
            return 0

        def cb_get(ctx, key, timeout_ms, out):
            k = key.decode()
            self.store.wait([k], datetime.timedelta(milliseconds=max(timeout_ms, 1)))
            v = self.store.get(k)
            return _lib.store_value_set(out, v, len(v))

        def cb_add(ctx, key, delta, result):
            result[0] = self.store.add(key.decode(), delta)
            return 0

        def cb_wait(ctx, keys, n, timeout_ms):
            names = [keys[i].decode() for i in range(n)]
            self.store.wait(names, datetime.timedelta(milliseconds=max(timeout_ms, 1)))
            return 0

        def cb_del(ctx, key, deleted):
            deleted[0] = 1 if self.store.delete_key(key.decode()) else 0
            return 0

        # The ctypes function objects must live as long as the library may call them.
        self._fns = (_lib.SET_FN(guard(cb_set)), _lib.GET_FN(guard(cb_get)),
                     _lib.ADD_FN(guard(cb_add)), _lib.WAIT_FN(guard(cb_wait)),
                     _lib.CHECK_FN(), _lib.DEL_FN(guard(cb_del)), _lib.FREE_FN())
        cb = _lib.StoreCallbacks(None, *self._fns)
        self.handle = _lib.c_store()
        _lib.check(_lib.store_from_callbacks(ctypes.byref(cb), timeout_ms, ctypes.byref(self.handle)),
                   "wrapping torch's store")

    def free(self):
        if self.handle:
            _lib.store_free(self.handle)
            self.handle = None


def _release(pg_handle, bridge, completer):
    """Destroy the library group (waiting for its calls), then the store bridge; once."""
    completer.stop()
    if pg_handle.value:
        _lib.destroy_process_group(pg_handle)
        pg_handle.value = None
    bridge.free()


def _contiguous(t):
    """(a contiguous tensor to hand to the library, a copy-back to run after a call that
    writes it, or None)."""
    if t.is_contiguous():
        return t, None
    c = t.contiguous()
    return c, (lambda: t.copy_(c))


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


class ProcessGroupRingreduce(dist.ProcessGroup):
    """A torch process group on one ringreduce group."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        ms = _timeout_ms(timeout) or 30 * 60 * 1000
        self._bridge = _StoreBridge(store, ms)
        self._completer = _Completer()
        self._pending = collections.deque()  # works not yet let go of, oldest first
        self._pg = _lib.c_pg()
        opts = _lib.PgOptions(None, rank, size, ms, -1)
        st = _lib.init_process_group_on_store(ctypes.byref(self._pg), ctypes.byref(opts),
                                              self._bridge.handle)
        if st < 0:
            msg = _lib.error_text()
            self._bridge.free()
            raise RuntimeError(f"ringreduce: {msg}")
        # Freed when torch drops the group (1.13) or calls shutdown() (2.x), and at exit.
        self._finalizer = weakref.finalize(self, _release, self._pg, self._bridge, self._completer)

    # ---- plumbing -------------------------------------------------------------------------

    def getBackendName(self):
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def name(self):
        return BACKEND

    def shutdown(self):
        self._finalizer()

    def abort(self):
        if self._pg.value:
            _lib.abort(self._pg)
        self._finalizer()

    def _prune(self):
        """Let go of works that completed and were waited for (or gave a future), oldest
        first; one never looked at is kept a while longer (a C++ caller may still ask), up to
        _KEEP of them."""
        p = self._pending
        while p:
            w = p[0]
            if not w._call.done:
                st = _lib.work_test(w._call.handle)
                if st == _lib.INPROGRESS:
                    break
                w._call.complete(st)
            if not w._observed and len(p) <= _KEEP:
                break
            p.popleft()

    def _start(self, what, fn, args, keep, result, finish=None, device=None):
        """Issue one asynchronous library call and wrap it as a Work."""
        if not self._pg.value:
            raise RuntimeError(f"ringreduce: {what}: the process group was destroyed")
        self._prune()
        if device is not None and device.type == "cuda":
            stream = torch.cuda.current_stream(device).cuda_stream
            _lib.check(_lib.pg_set_cuda_stream(self._pg, ctypes.c_void_p(stream)), what)
        h = _lib.c_work()
        st = fn(self._pg, *args, ctypes.byref(h))
        if st < 0:
            raise RuntimeError(f"ringreduce: {_lib.error_text() or what}")
        work = Work(_Call(h, keep, finish, result, what), self._completer, device)
        self._pending.append(work)
        return work

    def _check_device(self, tensors, what):
        dev = tensors[0].device
        for t in tensors:
            if t.device != dev:
                raise RuntimeError(f"ringreduce: {what}: tensors on {dev} and {t.device} in one call")
            if t.device.type not in _DEVICES:
                raise RuntimeError(f"ringreduce: {what}: tensors on {t.device} are not supported "
                                   f"by {_lib.path} (it serves {' and '.join(_DEVICES)}; cuda "
                                   "needs a library configured with -DRR_CUDA=ON)")
        return dev

    # ---- collectives --------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        what = "all_reduce"
        t = _one(tensors, what)
        dev = self._check_device([t], what)
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, t, what)
        buf, back = _contiguous(t)
        return self._start(what, _lib.all_reduce_async,
                           (_ptr(buf), _ptr(buf), buf.numel(), _dtype(t, what), op),
                           (t, buf), tensors, back, dev)

    def allreduce_coalesced(self, tensors, opts=None):
        what = "all_reduce_coalesced"
        if not tensors:
            raise RuntimeError(f"ringreduce: {what}: no tensors")
        dev = self._check_device(tensors, what)
        for t in tensors[1:]:
            if t.dtype != tensors[0].dtype:
                raise RuntimeError(f"ringreduce: {what}: tensors of one dtype only")
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, tensors[0], what)
        flat = torch.cat([t.reshape(-1) for t in tensors])

        def back():
            o = 0
            for t in tensors:
                n = t.numel()
                t.copy_(flat[o:o + n].view_as(t))
                o += n
        return self._start(what, _lib.all_reduce_async,
                           (_ptr(flat), _ptr(flat), flat.numel(), _dtype(flat, what), op),
                           (tensors, flat), tensors, back, dev)

    def broadcast(self, tensors, opts=None):
        what = "broadcast"
        t = _one(tensors, what)
        dev = self._check_device([t], what)
        root = opts.rootRank if opts is not None else 0
        buf, back = _contiguous(t)
        return self._start(what, _lib.broadcast_async,
                           (_ptr(buf), _ptr(buf), buf.numel(), _dtype(t, what), root),
                           (t, buf), tensors, back, dev)

    def reduce(self, tensors, opts=None):
        what = "reduce"
        t = _one(tensors, what)
        dev = self._check_device([t], what)
        root = opts.rootRank if opts is not None else 0
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, t, what)
        buf, back = _contiguous(t)
        # torch reduces in place: the root's tensor gets the result, the others keep theirs.
        return self._start(what, _lib.reduce_async,
                           (_ptr(buf), _ptr(buf), buf.numel(), _dtype(t, what), op, root),
                           (t, buf), tensors, back if self._rank == root else None, dev)

    def _allgather_base(self, output, input, opts=None):
        what = "all_gather_into_tensor"
        dev = self._check_device([output, input], what)
        if output.dtype != input.dtype or output.numel() != input.numel() * self._size:
            raise RuntimeError(f"ringreduce: {what}: the output must have {self._size} x "
                               f"{input.numel()} elements of {input.dtype} (has {output.numel()} "
                               f"of {output.dtype})")
        out, back = _contiguous(output)
        inp = input.contiguous()
        return self._start(what, _lib.all_gather_async,
                           (_ptr(inp), _ptr(out), inp.numel(), _dtype(inp, what)),
                           (output, out, inp), [output], back, dev)

    def allgather(self, output_tensors, input_tensors, opts=None):
        what = "all_gather"
        inp = _one(input_tensors, what).contiguous()
        outs = _one(output_tensors, what)
        if len(outs) != self._size:
            raise RuntimeError(f"ringreduce: {what}: {len(outs)} output tensors for a group of "
                               f"{self._size}")
        dev = self._check_device([inp] + list(outs), what)
        for o in outs:
            if o.numel() != inp.numel() or o.dtype != inp.dtype:
                raise RuntimeError(f"ringreduce: {what}: every output must be like the input "
                                   f"({inp.numel()} x {inp.dtype})")
        flat = torch.empty(self._size * inp.numel(), dtype=inp.dtype, device=inp.device)

        def back():
            for i, o in enumerate(outs):
                o.copy_(flat[i * inp.numel():(i + 1) * inp.numel()].view_as(o))
        return self._start(what, _lib.all_gather_async,
                           (_ptr(inp), _ptr(flat), inp.numel(), _dtype(inp, what)),
                           (inp, flat, outs), output_tensors, back, dev)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        raise RuntimeError("ringreduce: all_gather_coalesced is not supported (call all_gather "
                           "per tensor, or all_gather_into_tensor on a flat tensor)")

    def _reduce_scatter_base(self, output, input, opts=None):
        what = "reduce_scatter_tensor"
        dev = self._check_device([output, input], what)
        if output.dtype != input.dtype or input.numel() != output.numel() * self._size:
            raise RuntimeError(f"ringreduce: {what}: the input must have {self._size} x "
                               f"{output.numel()} elements of {output.dtype} (has "
                               f"{input.numel()} of {input.dtype})")
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, output, what)
        out, back = _contiguous(output)
        inp = input.contiguous()
        return self._start(what, _lib.reduce_scatter_async,
                           (_ptr(inp), _ptr(out), out.numel(), _dtype(out, what), op),
                           (output, out, inp), [output], back, dev)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        what = "reduce_scatter"
        out = _one(output_tensors, what)
        ins = _one(input_tensors, what)
        if len(ins) != self._size:
            raise RuntimeError(f"ringreduce: {what}: {len(ins)} input tensors for a group of "
                               f"{self._size}")
        dev = self._check_device([out] + list(ins), what)
        for i in ins:
            if i.numel() != out.numel() or i.dtype != out.dtype:
                raise RuntimeError(f"ringreduce: {what}: every input must be like the output "
                                   f"({out.numel()} x {out.dtype})")
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, out, what)
        flat = torch.cat([i.reshape(-1) for i in ins]) if ins else out.new_empty(0)
        o, back = _contiguous(out)
        return self._start(what, _lib.reduce_scatter_async,
                           (_ptr(flat), _ptr(o), o.numel(), _dtype(o, what), op),
                           (flat, o, out), output_tensors, back, dev)

    def barrier(self, opts=None):
        return self._start("barrier", _lib.barrier_async, (), None, [])

    def send(self, tensors, dst, tag=0):
        what = "send"
        t = _one(tensors, what).contiguous()
        dev = self._check_device([t], what)
        # No tags in the library: messages between a pair are matched in the order sent.
        return self._start(what, _lib.send_async, (_ptr(t), t.numel(), _dtype(t, what), dst),
                           t, tensors, None, dev)

    def recv(self, tensors, src, tag=0):
        what = "recv"
        t = _one(tensors, what)
        dev = self._check_device([t], what)
        buf, back = _contiguous(t)
        return self._start(what, _lib.recv_async, (_ptr(buf), buf.numel(), _dtype(t, what), src),
                           (t, buf), tensors, back, dev)

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("ringreduce: recv from any source is not supported: name the source "
                           "rank (messages between two ranks arrive in the order sent)")

    def gather(self, output_tensors, input_tensors, opts=None):
        what = "gather"
        inp = _one(input_tensors, what).contiguous()
        root = opts.rootRank if opts is not None else 0
        dev = self._check_device([inp], what)
        outs = output_tensors[0] if self._rank == root else []
        if self._rank == root:
            if len(output_tensors) != 1 or len(outs) != self._size:
                raise RuntimeError(f"ringreduce: {what}: the root needs one list of {self._size} "
                                   "output tensors")
            for o in outs:
                if o.numel() != inp.numel() or o.dtype != inp.dtype:
                    raise RuntimeError(f"ringreduce: {what}: every output must be like the "
                                       f"input ({inp.numel()} x {inp.dtype})")
            flat = torch.empty(self._size * inp.numel(), dtype=inp.dtype, device=inp.device)

            def back():
                for i, o in enumerate(outs):
                    o.copy_(flat[i * inp.numel():(i + 1) * inp.numel()].view_as(o))
        else:
            flat, back = None, None
        return self._start(what, _lib.gather_async,
                           (_ptr(inp), _ptr(flat) if flat is not None else None, inp.numel(),
                            _dtype(inp, what), root),
                           (inp, flat, outs), output_tensors, back, dev)

    def scatter(self, output_tensors, input_tensors, opts=None):
        what = "scatter"
        out = _one(output_tensors, what)
        root = opts.rootRank if opts is not None else 0
        dev = self._check_device([out], what)
        if self._rank == root:
            if len(input_tensors) != 1 or len(input_tensors[0]) != self._size:
                raise RuntimeError(f"ringreduce: {what}: the root needs one list of {self._size} "
                                   "input tensors")
            for i in input_tensors[0]:
                if i.numel() != out.numel() or i.dtype != out.dtype:
                    raise RuntimeError(f"ringreduce: {what}: every input must be like the "
                                       f"output ({out.numel()} x {out.dtype})")
            flat = torch.cat([i.reshape(-1) for i in input_tensors[0]])
        else:
            flat = None
        o, back = _contiguous(out)
        return self._start(what, _lib.scatter_async,
                           (_ptr(flat) if flat is not None else None, _ptr(o), o.numel(),
                            _dtype(o, what), root),
                           (flat, o, out), output_tensors, back, dev)

    def _alltoallv(self, what, out, inp, out_counts, in_counts, back, keep, result, dev):
        n = self._size
        sc = (ctypes.c_size_t * n)(*in_counts)
        rc = (ctypes.c_size_t * n)(*out_counts)
        sd = (ctypes.c_size_t * n)(*[sum(in_counts[:i]) for i in range(n)])
        rd = (ctypes.c_size_t * n)(*[sum(out_counts[:i]) for i in range(n)])
        return self._start(what, _lib.all_to_allv_async,
                           (_ptr(inp), sc, sd, _ptr(out), rc, rd, _dtype(out, what)),
                           keep + (sc, rc, sd, rd), result, back, dev)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        what = "all_to_all_single"
        dev = self._check_device([output, input], what)
        if output.dtype != input.dtype:
            raise RuntimeError(f"ringreduce: {what}: input {input.dtype}, output {output.dtype}")
        out, back = _contiguous(output)
        inp = input.contiguous()
        n = self._size
        if not output_split_sizes and not input_split_sizes:
            if inp.numel() % n or out.numel() != inp.numel():
                raise RuntimeError(f"ringreduce: {what}: {inp.numel()} elements do not split "
                                   f"evenly over {n} ranks")
            return self._start(what, _lib.all_to_all_async,
                               (_ptr(inp), _ptr(out), inp.numel() // n, _dtype(inp, what)),
                               (output, out, inp), [output], back, dev)
        # Splits are along the first dimension: rows of size numel / shape[0].
        def counts(t, splits):
            if not splits:
                if t.shape[0] % n:
                    raise RuntimeError(f"ringreduce: {what}: {t.shape[0]} rows do not split "
                                       f"evenly over {n} ranks")
                splits = [t.shape[0] // n] * n
            if len(splits) != n or sum(splits) != (t.shape[0] if t.dim() else 1):
                raise RuntimeError(f"ringreduce: {what}: split sizes {list(splits)} do not fit "
                                   f"{t.shape[0]} rows over {n} ranks")
            row = t.numel() // t.shape[0] if t.shape[0] else 0
            return [s * row for s in splits]
        return self._alltoallv(what, out, inp, counts(out, output_split_sizes),
                               counts(inp, input_split_sizes), back, (output, out, inp),
                               [output], dev)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        what = "all_to_all"
        n = self._size
        if len(output_tensors) != n or len(input_tensors) != n:
            raise RuntimeError(f"ringreduce: {what}: {len(input_tensors)} inputs and "
                               f"{len(output_tensors)} outputs for a group of {n}")
        dev = self._check_device(list(output_tensors) + list(input_tensors), what)
        dtypes = {t.dtype for t in list(output_tensors) + list(input_tensors)}
        if len(dtypes) != 1:
            raise RuntimeError(f"ringreduce: {what}: tensors of one dtype only")
        inp = torch.cat([t.reshape(-1) for t in input_tensors])
        out = torch.empty(sum(t.numel() for t in output_tensors), dtype=inp.dtype, device=inp.device)

        def back():
            o = 0
            for t in output_tensors:
                t.copy_(out[o:o + t.numel()].view_as(t))
                o += t.numel()
        return self._alltoallv(what, out, inp, [t.numel() for t in output_tensors],
                               [t.numel() for t in input_tensors], back,
                               (out, inp, output_tensors), output_tensors, dev)

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        # Every wait in the library already names the rank it waits for when it times out.
        return self.barrier().wait()


def _create(*args, **kwargs):
    """The creator torch calls for each group: (store, rank, size, timeout) in 1.13 and 2.x,
    or (backend options, pg options) with extended_api."""
    if len(args) == 2 and hasattr(args[0], "store"):
        o = args[0]
        return ProcessGroupRingreduce(o.store, o.group_rank, o.group_size, o.timeout)
    store, rank, size, timeout = args[:4]
    return ProcessGroupRingreduce(store, rank, size, timeout)


def _devices():
    """The devices this library serves: cpu, and cuda when it was built with CUDA."""
    try:
        return ["cpu", "cuda"] if _lib.cuda_built() else ["cpu"]
    except RuntimeError:  # a library older than rr_cuda_built: it says nothing, assume cpu
        return ["cpu"]


_DEVICES = _devices()


def _register():
    # Importing twice (or under two names) must not register twice: torch refuses that.
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}) or hasattr(dist.Backend, BACKEND.upper()):
        return
    params = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in params:  # 2.x: say which devices this backend serves
        dist.Backend.register_backend(BACKEND, _create, devices=_DEVICES)
    else:
        dist.Backend.register_backend(BACKEND, _create)


_register()
