"""The "ringreduce" backend for torch.distributed.

(Over 800 lines: torch's ProcessGroup surface, every collective's call forms and futures, in
one class, as torch's own backends keep it.)

    import ringreduce.torch
    torch.distributed.init_process_group("ringreduce")   # instead of "gloo"

Importing this module registers the backend. Each torch process group (the world, and every
new_group) gets a library group of its own, made by rendezvous through the store torch hands
the backend (its PrefixStore): no second port. The process group is a Python subclass of
torch's ProcessGroup, so the same code runs on torch 1.13 and 2.x without compiling against
torch (docs/torch.md says why, with measurements). It holds no algorithm: each call maps
torch's tensors and options onto one asynchronous call of the C library (a few for the
coalesced forms) and returns a Work that waits for them (ringreduce/_work.py).

The group object also takes every form torch's ProcessGroup bindings take, as libraries and
torch's c10d tests call it directly (pg.allreduce(t), op=/root=/timeout= keywords, the flat
gather/scatter forms, several tensors where gloo takes them), checks its arguments before
anything is sent, and gives futures the values torch's C++ groups give.

Every spelling torch has used for a collective is served: 2.x's all_gather_single,
reduce_scatter_single, all_to_all_single, gather_single and their _coalesced forms, and
the _allgather_base, _reduce_scatter_base, alltoall_base, *_into_tensor_coalesced names
they replaced. Sends and receives inside a coalescing block (batch_isend_irecv) are issued
together when it ends, in an order that cannot deadlock (_p2p_order).

Tensors must stay alive and untouched until their call completes (as with gloo); the
process group keeps them referenced until then. Non-contiguous tensors are copied to
contiguous ones and back. Errors raise RuntimeError with the library's sentence (which
rank, which call, why).

(About 1,050 lines: one class, the ProcessGroup torch calls, whose methods are one map
from torch's names and call forms to the library's calls, each with its argument checks;
split, the map would be read in two files.)"""

import collections
import ctypes
import datetime
import inspect
import os
import weakref

import torch
import torch.distributed as dist

from . import _lib
from ._elastic import ElasticMixin, errored, grow, grow_pending, join, revoke, shrink  # noqa: F401
from ._p2p import _P2P, _p2p_order
from ._store import StoreBridge
from ._tensors import (_CPU, _SPARSE_CHECKED, _SUM, _alike, _bad, _caller_waits,  # noqa: F401
                       _contiguous, _issuing_stream, _listed, _local_reduce, _move_view, _one,
                       _op, _positional, _ptr, _reduce_view, _root, _stream_ordered, _writable,
                       _write_back)
from ._work import Batch, Work, _Call, _Completer, _timeout_ms, call_error

BACKEND = "ringreduce"
_KEEP = 256  # completed works nobody waited for, kept in case a C++ caller still asks

_DONE = Batch([], "a finished call")  # the batch of every call that ran on the caller's thread


# What stands in an options object's place in torch's keyword forms of a call, given
# positionally: a root (int), an op (ReduceOp; 2.x's members are RedOpType), a timeout.
_KEYWORD = (int, datetime.timedelta, dist.ReduceOp, type(dist.ReduceOp.SUM))


def _timed(work, opts, timeout):
    """A call's own time limit, torch's timeout= (or its options' timeout, where set: torch
    leaves it negative), as that work's wait limit; a wait past it fails the group, as any
    timeout in this library."""
    if work._batch is _DONE:
        return work  # ran on the caller's thread: nothing left to wait for
    t = getattr(opts, "timeout", None) if opts is not None else timeout
    if t is not None and t.total_seconds() > 0:
        work._default_timeout = t
    return work


_EXIT_HOOKED = []


def _say_exiting_first():
    """Once, after the first group's finalizer: an exit hook that tells the library the
    process is exiting, so that a group the program never destroyed, freed by its finalizer
    at exit, tells its peers "exited without destroying" and not "destroyed". atexit runs
    its hooks last in, first out, and weakref's own exit hook (which runs the finalizers) was
    registered when the first finalizer was made: this one, registered after it, runs first."""
    if not _EXIT_HOOKED:
        _EXIT_HOOKED.append(True)
        import atexit

        def exiting():
            try:
                _lib.process_exiting()
            except RuntimeError:  # a library older than rr_process_exiting: nothing to say
                pass
        atexit.register(exiting)


def _release(pg_handle, bridge, completer, abort=False):
    """Destroy the library group (waiting for its calls, or failing them at once after an
    abort), then the store bridge; once."""
    if abort and pg_handle.value:
        _lib.abort(pg_handle)
    completer.stop()
    if pg_handle.value:
        _lib.destroy_process_group(pg_handle)
        pg_handle.value = None
    if bridge is not None:  # a shrunk group has no store
        bridge.free()


class ProcessGroupRingreduce(ElasticMixin, dist.ProcessGroup):
    """A torch process group on one ringreduce group (revoke, errored, shrink: _elastic.py)."""

    # What torch asks of a group's backend (this object serves every device it serves):
    # batch_isend_irecv and _coalescing_manager coalesce through it, split_group splits it.
    supports_coalescing = True
    supports_splitting = True
    # torch 2.x's collective time estimator and in-place reconfiguration are C++ backend
    # features: say no, so torch refuses them in its own words.
    _supports_time_estimate = False
    supports_reconfigure = False

    def __init__(self, store, rank, size, timeout, adopt=None, key=None, global_ranks=None):
        """adopt: rr_pg_shrink's group; key: what names this group among all that set up
        through the same store (_group_key); global_ranks: its members' default-group ranks."""
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._key = key
        self._global_ranks = list(global_ranks) if global_ranks is not None else list(range(size))
        self._store, self._timeout = store, timeout
        ms = _timeout_ms(timeout) or 30 * 60 * 1000
        self._bridge = StoreBridge(store, ms) if adopt is None else None
        self._errors = []  # the first failure of the group (errored())
        self._completer = _Completer()
        self._pending = collections.deque()  # works not yet let go of, oldest first
        self._coalescing = None  # inside a coalescing block: [deferred p2p, works issued]
        self._names = {"name": "", "desc": ""}
        self._pg = _lib.c_pg(adopt)
        opts = _lib.PgOptions(None, rank, size, ms, -1, key.encode() if key else None)
        st = 0 if adopt else _lib.init_process_group_on_store(
            ctypes.byref(self._pg), ctypes.byref(opts), self._bridge.handle)
        if st < 0:
            msg = _lib.error_text()
            self._bridge.free()
            raise RuntimeError(f"ringreduce: {msg}")
        # Freed when torch drops the group (1.13) or calls shutdown() (2.x), and at exit.
        self._finalizer = weakref.finalize(self, _release, self._pg, self._bridge, self._completer)
        _say_exiting_first()

    # ---- what torch asks of a group ------------------------------------------------------

    def getBackendName(self):
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def name(self):
        return BACKEND

    # torch 2.x names every group (_set_group_name) and reads the name back through the C++
    # ProcessGroup, which a Python group has no backend to answer for: keep it here.
    @property
    def group_name(self):
        return self._names["name"]

    def _set_group_name(self, name):
        self._names["name"] = name

    @property
    def group_desc(self):
        return self._names["desc"]

    def _set_group_desc(self, desc):
        self._names["desc"] = desc

    @property
    def _device_types(self):
        """The devices this group serves (torch 2.x: object collectives pick theirs from it,
        monitored_barrier and split_group require cpu in it)."""
        return [torch.device(d) for d in _DEVICES]

    def get_group_store(self):
        return self._store

    def _get_backend(self, device=None):
        """torch 2.x asks a group for its backend per device (coalescing, splitting): this
        object is both."""
        return self

    def split_group(self, ranks, timeout=None, opts=None, group_name=None, group_desc=None,
                    device_types=None):
        """torch 2.x's split_group: a new group of the parent's ranks `ranks` (group ranks),
        made by the members only, through the parent's store under the new group's name;
        None on the others."""
        if self._rank not in ranks:
            return None
        name = group_name or f"split:{sorted(ranks)}"
        store = dist.PrefixStore(f"ringreduce-split/{name}/", self._store)
        members = [self._global_ranks[r] for r in sorted(ranks)]
        key = _group_key(f"{self._key or 'w'}/split/{name}", members)
        pg = ProcessGroupRingreduce(store, sorted(ranks).index(self._rank), len(ranks),
                                    timeout or self._timeout, key=key, global_ranks=members)
        pg._set_group_name(name)
        pg._set_group_desc(group_desc or f"{self.group_desc}:split")
        return pg

    def eager_connect_single_device(self, device=None):
        """torch 2.x with init_process_group(device_id=...): connect now. The library group
        connected every peer when it was made."""

    def shutdown(self):
        """Wait for the group's calls, then free it (2.x's destroy_process_group calls this)."""
        self._finalizer()

    def abort(self):
        """Fail every pending and running call at once (on the peers too), then free."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _release(self._pg, self._bridge, self._completer, abort=True)

    def _prune(self):
        """Let go of works that completed and were waited for (or gave a future), oldest
        first; one never looked at is kept a while longer (a C++ caller may still ask), up to
        _KEEP of them."""
        p = self._pending
        while p:
            w = p[0]
            if not w._batch.poll():
                break
            if not w._observed and len(p) <= _KEEP:
                break
            p.popleft()

    # ---- issuing calls ----------------------------------------------------------------------

    def _live(self, what):
        if not self._pg.value:
            raise RuntimeError(f"ringreduce: {what}: the process group was shut down or aborted")

    def _issue(self, what, fn, args, keep, finish=None):
        """One asynchronous library call; raises if the library refuses it."""
        h = _lib.c_work()
        st = fn(self._pg, *args, ctypes.byref(h))
        if st < 0:
            raise self._failed(st, RuntimeError(f"ringreduce: {_lib.error_text() or what}"))
        return _Call(h, keep, finish, what, self._errors)

    def _wrap(self, batch, result, device=None, source=-1):
        work = Work(batch, result, self._completer, device, source)
        self._pending.append(work)
        if self._coalescing is not None:
            self._coalescing[1].append(batch)
        return work

    def _cuda_stream(self, device, what):
        if device is not None and device.type == "cuda":
            stream = torch.cuda.current_stream(device).cuda_stream
            _lib.check(_lib.pg_set_cuda_stream(self._pg, ctypes.c_void_p(stream)), what)

    def _start(self, what, fn, args, keep, result, finish=None, device=None, sync=False):
        """Issue one library call and wrap it as a Work: asynchronous, or, when the caller
        waits at once for host tensors (_caller_waits), run here and now."""
        self._live(what)
        self._prune()
        if sync and self._coalescing is None and (device is None or device.type == "cpu"):
            st = _lib.BLOCKING[id(fn)](self._pg, *args)
            if st < 0:
                raise self._failed(st, call_error(st, _lib.error_text(), what))
            if finish is not None:
                _write_back(finish)
            # Done already: nothing to keep alive (torch holds it while it waits).
            return Work(_DONE, result, self._completer, device)
        self._cuda_stream(device, what)
        c = self._issue(what, fn, args, keep, _stream_ordered(finish, device))
        return self._wrap(Batch([c], what, _issuing_stream(device)), result, device)

    def _start_many(self, what, calls, result, device=None):
        """Issue several library calls (fn, args, keep, finish) as one Work."""
        self._live(what)
        self._prune()
        self._cuda_stream(device, what)
        issued = [self._issue(what, fn, args, keep, _stream_ordered(finish, device))
                  for fn, args, keep, finish in calls]
        return self._wrap(Batch(issued, what, _issuing_stream(device)), result, device)

    def _check_device(self, tensors, what):
        if len(tensors) == 1 and tensors[0].is_cpu and tensors[0].layout == torch.strided:
            return _CPU  # the common case, checked in a fraction of the general loop's time
        dev = tensors[0].device
        for t in tensors:
            if t.device != dev:
                raise RuntimeError(f"ringreduce: {what}: tensors on {dev} and {t.device} in one call")
            if t.device.type not in _DEVICES:
                raise RuntimeError(f"ringreduce: {what}: tensors on {t.device} are not supported "
                                   f"by {_lib.path} (it serves {' and '.join(_DEVICES)}; cuda "
                                   "needs a library configured with -DRR_CUDA=ON)")
            if t.layout != torch.strided:
                raise RuntimeError(f"ringreduce: {what}: {t.layout} tensors are not supported "
                                   "here (all_reduce takes sparse COO tensors)")
        return dev

    # ---- coalescing (batch_isend_irecv, _coalescing_manager) -------------------------------

    def _start_coalescing(self, device=None):
        """Begin a block: sends and receives wait for its end; other calls run as usual and
        the block's work covers them too. Never raises: torch has already marked the group
        as coalescing when it calls this."""
        if self._coalescing is not None:
            self._flush_p2p()  # a block left without its end (an exception inside it)
        self._coalescing = ([], [])

    def _end_coalescing(self, device=None):
        """End the block: issue its sends and receives, and return one work for everything
        issued in it (1.13 passes the block's works instead of a device: ignored)."""
        if self._coalescing is None:
            return self._wrap(Batch([], "coalesced block"), [])
        self._flush_p2p()
        _, batches = self._coalescing
        self._coalescing = None
        calls = [c for b in batches for c in b.calls]
        return self._wrap(Batch(calls, "coalesced block"), [])

    def _flush_p2p(self):
        deferred = list(self._coalescing[0])
        if not deferred:
            return
        del self._coalescing[0][:]
        for step in _p2p_order(self._rank, deferred):
            dev = step[-1].buf.device  # device buffers: on the stream current at the block's end
            self._cuda_stream(dev, "coalesced block")
            if step[0] == "sendrecv":
                s, r = step[1], step[2]
                c = self._issue("sendrecv", _lib.sendrecv_async,
                                (_ptr(s.buf), s.buf.numel(), self._lr(s.peer), _ptr(r.buf),
                                 r.buf.numel(), self._lr(r.peer), s.ldtype), (s.keep, r.keep),
                                _stream_ordered(r.finish, dev))
                for op in (s, r):
                    op.batch.calls, op.batch.pending = [c], False
                    op.batch.stream = _issuing_stream(dev)
                self._coalescing[1].append(s.batch)
            else:
                op = step[1]
                if op.kind == "send":
                    c = self._issue("send", _lib.send_async,
                                    (_ptr(op.buf), op.buf.numel(), op.ldtype,
                                     self._lr(op.peer)), op.keep)
                else:
                    c = self._issue("recv", _lib.recv_async,
                                    (_ptr(op.buf), op.buf.numel(), op.ldtype,
                                     self._lr(op.peer)), op.keep,
                                    _stream_ordered(op.finish, dev))
                op.batch.calls, op.batch.pending = [c], False
                op.batch.stream = _issuing_stream(dev)
                self._coalescing[1].append(op.batch)

    def _p2p(self, kind, tensors, peer, what):
        t = _one(tensors, what)
        dev = self._check_device([t], what)
        self._live(what)
        if not 0 <= peer < self._size or peer == self._rank:
            raise RuntimeError(f"ringreduce: {what}: peer {peer} is not another rank of this "
                               f"group of {self._size} (this is rank {self._rank})")
        if kind == "send":
            buf, finish = t.contiguous(), None
        else:
            buf, finish = _contiguous(t, what)
        # Any dtype travels (_move_view). Messages match in order per pair; tags are not sent.
        data, ld = _move_view(buf)
        if self._coalescing is not None:
            self._prune()
            b = Batch([], what, pending=True)
            self._coalescing[0].append(_P2P(kind, data, ld, peer, (t, buf), finish, b))
            work = Work(b, tensors, self._completer, dev, peer)
            self._pending.append(work)
            return work
        fn = _lib.send_async if kind == "send" else _lib.recv_async
        work = self._start(what, fn, (_ptr(data), data.numel(), ld, self._lr(peer)), (t, buf),
                           tensors, finish, dev, sync=_caller_waits(None, 2))
        work._source = peer
        return work

    # ---- collectives --------------------------------------------------------------------
    #
    # Each takes every form torch's ProcessGroup bindings take: the options object, or
    # torch's keywords in its place (op=, root=, timeout=, also positionally), and one
    # tensor wherever a list of them goes. Arguments are checked before anything is sent,
    # gloo's checks with gloo's words for them, naming the argument. A work's result and
    # future value are what torch's C++ groups give: the list of output tensors (one list
    # for all_gather and gather of one input, as gloo; the list of lists for several).

    def allreduce(self, tensors, opts=None, *args, op=None, timeout=None):
        what = "all_reduce"
        if isinstance(opts, _KEYWORD):  # allreduce(tensor, op, timeout)
            (op, timeout), opts = _positional(what, (opts,) + args, op, timeout), None
        op_in = opts.reduceOp if opts is not None else (_SUM if op is None else op)
        ts = [tensors] if isinstance(tensors, torch.Tensor) else tensors
        if len(ts) == 1 and not ts[0].is_sparse:  # the common case
            t = ts[0]
            dev = self._check_device(ts, what)
            op = _op(op_in, t, what)
            buf, back = _contiguous(t, what)
            r, d = _reduce_view(buf, what)
            return _timed(self._start(what, _lib.all_reduce_async,
                                      (_ptr(r), _ptr(r), r.numel(), d, op), (t, buf), ts, back,
                                      dev, sync=_caller_waits(opts, 1)), opts, timeout)
        ts = list(ts)
        if not ts:
            raise _bad(what, "requires non-empty tensor list (tensors)")
        if any(t.is_sparse for t in ts):
            return self._sparse_allreduce(ts, op_in)  # all sparse, or refused there
        # Several tensors of this process (gloo's multi-input form): every one of them gets
        # the reduction of all of them on every rank, reduced here first, then as one.
        _alike(what, ts, "tensors")
        dev = self._check_device(ts, what)
        op = _op(op_in, ts[0], what)
        for t in ts:
            _writable(t, what)
        flat = _local_reduce(ts, op)
        r, d = _reduce_view(flat, what)

        def back():
            for t in ts:
                t.copy_(flat)
        return _timed(self._start(what, _lib.all_reduce_async,
                                  (_ptr(r), _ptr(r), r.numel(), d, op), (ts, flat), ts, back,
                                  dev, sync=_caller_waits(opts, 1)), opts, timeout)

    def allreduce_coalesced(self, tensors, opts=None):
        what = "all_reduce_coalesced"
        tensors = _listed(tensors)
        if not tensors:
            raise _bad(what, "requires non-empty tensor list (tensors)")
        for i, t in enumerate(tensors):
            if t.layout != tensors[0].layout:
                raise _bad(what, f"invalid tensor layout at index {i}: tensors[{i}] is "
                                 f"{t.layout}, tensors[0] {tensors[0].layout}")
        for i, t in enumerate(tensors):
            if t.dtype != tensors[0].dtype:
                raise _bad(what, f"tensors must all have the same type: tensors[{i}] is "
                                 f"{t.dtype}, tensors[0] {tensors[0].dtype}")
        if tensors[0].layout != torch.strided:
            raise _bad(what, f"unsupported layout {tensors[0].layout}: dense tensors only "
                             "(all_reduce takes a sparse tensor)")
        dev = self._check_device(tensors, what)
        for t in tensors:
            _writable(t, what)
        op = _op(opts.reduceOp if opts is not None else _SUM, tensors[0], what)
        flat = torch.cat([t.reshape(-1) for t in tensors])
        r, d = _reduce_view(flat, what)

        def back():
            o = 0
            for t in tensors:
                n = t.numel()
                t.copy_(flat[o:o + n].view_as(t))
                o += n
        return self._start(what, _lib.all_reduce_async, (_ptr(r), _ptr(r), r.numel(), d, op),
                           (tensors, flat), tensors, back, dev,
                           sync=_caller_waits(opts, 1))

    def _sparse_allreduce(self, tensors, op_in):
        """A sparse COO all_reduce, as gloo does it: every rank's indices and values gathered,
        then summed locally (the same sum, in the same order, on every rank). SUM only.
        Several tensors of this process are summed here first; each gets the result."""
        what = "all_reduce (sparse)"
        for i, x in enumerate(tensors):
            if x.layout != tensors[0].layout:
                raise _bad(what, f"invalid tensor layout: tensors[{i}] is {x.layout}, "
                                 f"tensors[0] {tensors[0].layout}: all sparse or all dense")
            if x.shape != tensors[0].shape:
                raise _bad(what, f"invalid tensor size: tensors[{i}] has shape "
                                 f"{list(x.shape)}, not {list(tensors[0].shape)}")
        if op_in != dist.ReduceOp.SUM:
            raise _bad(what, f"unsupported reduction operation {op_in} (op): only SUM is "
                             "defined for sparse tensors")
        t = tensors[0]
        for x in tensors[1:]:
            t = t + x
        self._check_device([t.coalesce().values()], what)
        c = t.coalesce()
        idx, val = c.indices().contiguous(), c.values().contiguous()
        n = self._size
        counts = torch.zeros(n, dtype=torch.int64)
        self._allgather_base(counts, torch.tensor([idx.shape[1]], dtype=torch.int64)).wait()
        most = int(counts.max())
        pi = idx.new_zeros((idx.shape[0], most))
        pi[:, :idx.shape[1]] = idx
        pv = val.new_zeros((most,) + tuple(val.shape[1:]))
        pv[:idx.shape[1]] = val
        gi = idx.new_empty((n,) + tuple(pi.shape))
        gv = val.new_empty((n,) + tuple(pv.shape))
        self._allgather_base(gi, pi.contiguous()).wait()
        self._allgather_base(gv, pv.contiguous()).wait()
        parts_i = [gi[r][:, :int(counts[r])] for r in range(n)]
        parts_v = [gv[r][:int(counts[r])] for r in range(n)]
        total = torch.sparse_coo_tensor(torch.cat(parts_i, 1), torch.cat(parts_v), t.shape,
                                        dtype=t.dtype, **_SPARSE_CHECKED).coalesce()
        for x in tensors:
            x.copy_(total)
        return self._wrap(Batch([], what), list(tensors))

    def broadcast(self, tensors, opts=None, *args, root=None, timeout=None):
        what = "broadcast"
        if isinstance(opts, _KEYWORD):  # broadcast(tensor, root, timeout)
            (root, timeout), opts = _positional(what, (opts,) + args, root, timeout), None
        ts = _listed(tensors)
        if opts is not None:
            root = _root(what, opts.rootRank, self._size, "opts.rootRank")
            at = opts.rootTensor
        else:
            root, at = _root(what, 0 if root is None else root, self._size, "root"), 0
        if not 0 <= at < len(ts):
            raise _bad(what, f"invalid root tensor {at} (opts.rootTensor): the call has "
                             f"{len(ts)} tensor(s)")
        t = ts[at]
        if len(ts) > 1:
            _alike(what, ts, "tensors")
        dev = self._check_device(ts, what)
        buf, back = _contiguous(t, what)
        if len(ts) > 1:
            # gloo's multi-input form: the root's tensors[rootTensor] into every tensor.
            others = [x for x in ts if x is not t]
            for x in others:
                _writable(x, what)

            own = back

            def back():
                if own is not None:
                    own()
                for x in others:
                    x.copy_(buf.view_as(x))
        b, d = _move_view(buf)
        return _timed(self._start(what, _lib.broadcast_async,
                                  (_ptr(b), _ptr(b), b.numel(), d, self._lr(root)),
                                  (ts, buf), ts, back, dev, sync=_caller_waits(opts, 1)),
                      opts, timeout)

    def reduce(self, tensors, opts=None, *args, root=None, op=None, timeout=None):
        what = "reduce"
        if isinstance(opts, _KEYWORD):  # reduce(tensor, root, op, timeout)
            (root, op, timeout), opts = _positional(what, (opts,) + args, root, op, timeout), None
        if opts is not None:
            root = _root(what, opts.rootRank, self._size, "opts.rootRank")
            if opts.rootTensor != 0:
                raise _bad(what, f"invalid root tensor {opts.rootTensor} (opts.rootTensor): "
                                 "one tensor per call, index 0")
            op_in = opts.reduceOp
        else:
            root = _root(what, 0 if root is None else root, self._size, "root")
            op_in = _SUM if op is None else op
        t = _one(tensors, what)
        dev = self._check_device([t], what)
        op = _op(op_in, t, what)
        buf, back = _contiguous(t, what)
        r, d = _reduce_view(buf, what)
        # torch reduces in place: the root's tensor gets the result, the others keep theirs.
        return _timed(self._start(what, _lib.reduce_async,
                                  (_ptr(r), _ptr(r), r.numel(), d, op, self._lr(root)),
                                  (t, buf), [t], back if self._rank == root else None, dev,
                                  sync=_caller_waits(opts, 1)), opts, timeout)

    def _allgather_call(self, out, inp, what):
        """(fn, args, keep, copy-back) of an all_gather of `inp` into the flat `out`."""
        if out.dtype != inp.dtype or out.numel() != inp.numel() * self._size:
            raise RuntimeError(f"ringreduce: {what}: the output must have {self._size} x "
                               f"{inp.numel()} elements of {inp.dtype} (has {out.numel()} "
                               f"of {out.dtype})")
        o, back = _contiguous(out, what)
        i, d = _move_view(inp.contiguous())
        ob, _ = _move_view(o)
        return _lib.all_gather_async, (_ptr(i), _ptr(ob), i.numel(), d), (out, o, i), back

    def _allgather_base(self, output, input, opts=None):
        what = "all_gather_into_tensor"
        dev = self._check_device([output, input], what)
        fn, args, keep, back = self._allgather_call(output, input, what)
        return self._start(what, fn, args, keep, [output], back, dev, sync=_caller_waits(opts, 1))

    all_gather_single = _allgather_base  # torch 2.x's name

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        what = "all_gather_into_tensor_coalesced"
        if len(outputs) != len(inputs):
            raise RuntimeError(f"ringreduce: {what}: {len(outputs)} outputs for {len(inputs)} inputs")
        if not inputs:
            return self._wrap(Batch([], what), [])
        dev = self._check_device(list(outputs) + list(inputs), what)
        return self._start_many(what, [self._allgather_call(o, i, what)
                                       for o, i in zip(outputs, inputs)], list(outputs), dev)

    allgather_into_tensor_coalesced = all_gather_single_coalesced  # the name before 2.x's

    def allgather(self, output_tensors, input_tensors, opts=None, timeout=None):
        what = "all_gather"
        if isinstance(opts, datetime.timedelta):
            timeout, opts = opts, None  # allgather(outputs, tensor, timeout)
        if isinstance(input_tensors, torch.Tensor):
            # allgather(outputs, tensor): one flat list of outputs, the future's value.
            ins, out_lists = [input_tensors], [list(output_tensors)]
        else:
            ins, out_lists = list(input_tensors), [list(o) for o in output_tensors]
        n, k = self._size, len(ins)
        if not ins:
            raise _bad(what, "requires non-empty input tensor list (input_tensors)")
        if len(out_lists) != k:
            raise _bad(what, f"requires input/output tensor lists to have the same length "
                             f"({len(out_lists)} output lists for {k} inputs)")
        for j, outs in enumerate(out_lists):
            if len(outs) != n * k:
                raise _bad(what, f"invalid output tensor list: output_tensors[{j}] has "
                                 f"{len(outs)} tensors, not {n * k} (world size x inputs)")
        _alike(what, ins, "input_tensors")
        for j, outs in enumerate(out_lists):
            for i, o in enumerate(outs):
                if o.dtype != ins[0].dtype:
                    raise _bad(what, f"invalid tensor type: output_tensors[{j}][{i}] is "
                                     f"{o.dtype}, the input {ins[0].dtype}")
                if o.numel() != ins[0].numel():
                    raise _bad(what, f"invalid tensor size: output_tensors[{j}][{i}] has "
                                     f"{o.numel()} elements, the input {ins[0].numel()}")
        every = [o for outs in out_lists for o in outs]
        dev = self._check_device(ins + every, what)
        for o in every:
            _writable(o, what)
        inp = ins[0].contiguous() if k == 1 else torch.cat([i.reshape(-1) for i in ins])
        m = ins[0].numel()  # the elements of one input; rank r's input i is block r * k + i
        flat = torch.empty(n * k * m, dtype=inp.dtype, device=inp.device)
        (ib, d), (fb, _) = _move_view(inp), _move_view(flat)

        def back():
            for outs in out_lists:
                for b, o in enumerate(outs):
                    o.copy_(flat[b * m:(b + 1) * m].view_as(o))
        value = out_lists[0] if k == 1 else out_lists
        return _timed(self._start(what, _lib.all_gather_async,
                                  (_ptr(ib), _ptr(fb), ib.numel(), d), (inp, flat, every), value,
                                  back, dev, sync=_caller_waits(opts, 1)), opts, timeout)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """output_lists[r][i] gets rank r's input_list[i]: one all_gather per input."""
        what = "all_gather_coalesced"
        n = self._size
        if not input_list:
            raise _bad(what, "requires non-empty input tensor list (input_list)")
        if len(output_lists) != n:
            raise _bad(what, f"output lists should be equal to world size: output_lists has "
                             f"{len(output_lists)}, the group {n} ranks")
        for r, ol in enumerate(output_lists):
            if len(ol) != len(input_list):
                raise _bad(what, f"invalid output size: output_lists[{r}] has {len(ol)} "
                                 f"tensors, input_list {len(input_list)}")
        for i, inp in enumerate(input_list):
            for r in range(n):
                o = output_lists[r][i]
                if o.dtype != inp.dtype:
                    raise _bad(what, f"invalid tensor type at index {i}: output_lists[{r}][{i}] "
                                     f"is {o.dtype}, input_list[{i}] {inp.dtype}")
                if o.numel() != inp.numel():
                    raise _bad(what, f"invalid size of output tensor at index {i}: "
                                     f"output_lists[{r}][{i}] has {o.numel()} elements, "
                                     f"input_list[{i}] {inp.numel()}")
                _writable(o, what)
        dev = self._check_device(list(input_list) + [o for ol in output_lists for o in ol], what)
        calls = []
        for i, inp in enumerate(input_list):
            inp = inp.contiguous()
            outs = [output_lists[r][i] for r in range(n)]
            flat = torch.empty(n * inp.numel(), dtype=inp.dtype, device=inp.device)

            def back(flat=flat, outs=outs, m=inp.numel()):
                for r, o in enumerate(outs):
                    o.copy_(flat[r * m:(r + 1) * m].view_as(o))
            (ib, d), (fb, _) = _move_view(inp), _move_view(flat)
            calls.append((_lib.all_gather_async, (_ptr(ib), _ptr(fb), ib.numel(), d),
                          (inp, flat, outs), back))
        return self._start_many(what, calls, output_lists, dev)

    def _reduce_scatter_call(self, output, input, op_in, what):
        if output.dtype != input.dtype or input.numel() != output.numel() * self._size:
            raise RuntimeError(f"ringreduce: {what}: the input must have {self._size} x "
                               f"{output.numel()} elements of {output.dtype} (has "
                               f"{input.numel()} of {input.dtype})")
        op = _op(op_in, output, what)
        out, back = _contiguous(output, what)
        o, d = _reduce_view(out, what)
        i, _ = _reduce_view(input.contiguous(), what)
        return (_lib.reduce_scatter_async, (_ptr(i), _ptr(o), o.numel(), d, op),
                (output, out, i), back)

    def _reduce_scatter_base(self, output, input, opts=None):
        what = "reduce_scatter_tensor"
        dev = self._check_device([output, input], what)
        fn, args, keep, back = self._reduce_scatter_call(
            output, input, opts.reduceOp if opts is not None else _SUM, what)
        return self._start(what, fn, args, keep, [output], back, dev,
                           sync=_caller_waits(opts, 1))

    reduce_scatter_single = _reduce_scatter_base  # torch 2.x's name

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        what = "reduce_scatter_tensor_coalesced"
        if len(outputs) != len(inputs):
            raise RuntimeError(f"ringreduce: {what}: {len(outputs)} outputs for {len(inputs)} inputs")
        if not inputs:
            return self._wrap(Batch([], what), [])
        dev = self._check_device(list(outputs) + list(inputs), what)
        op_in = opts.reduceOp if opts is not None else _SUM
        calls = [self._reduce_scatter_call(o, i, op_in, what) for o, i in zip(outputs, inputs)]
        return self._start_many(what, calls, list(outputs), dev)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced  # the name before 2.x's

    def reduce_scatter(self, output_tensors, input_tensors, opts=None, *args, op=None,
                       timeout=None):
        """Rank r's output gets the reduction of every rank's input r. The inputs may differ
        in size, each like its rank's output (torch 2.x's uneven reduce_scatter): then one
        reduce per rank, to that rank."""
        what = "reduce_scatter"
        if isinstance(opts, _KEYWORD):  # (output, inputs, op, timeout)
            (op, timeout), opts = _positional(what, (opts,) + args, op, timeout), None
        op_in = opts.reduceOp if opts is not None else (_SUM if op is None else op)
        if isinstance(output_tensors, torch.Tensor):  # reduce_scatter(output, inputs)
            out, ins = output_tensors, list(input_tensors)
        else:
            out = _one(output_tensors, what, "output_tensors")
            ins = list(_one(input_tensors, what, "input_tensors"))
        if len(ins) != self._size:
            raise _bad(what, f"invalid input tensor list: {len(ins)} input tensors for a group "
                             f"of {self._size}")
        for r, i in enumerate(ins):
            if i.dtype != out.dtype:
                raise _bad(what, f"invalid tensor type: input {r} is {i.dtype}, the output "
                                 f"{out.dtype}")
        dev = self._check_device([out] + ins, what)
        if all(i.numel() == out.numel() for i in ins):
            flat = torch.cat([i.reshape(-1) for i in ins]) if ins else out.new_empty(0)
            fn, args, keep, back = self._reduce_scatter_call(out, flat, op_in, what)
            return _timed(self._start(what, fn, args, keep, [out], back, dev,
                                      sync=_caller_waits(opts, 1)), opts, timeout)
        if ins[self._rank].numel() != out.numel():
            raise _bad(what, f"invalid tensor size: the output has {out.numel()} elements, "
                             f"input {self._rank} (this rank's) {ins[self._rank].numel()}: "
                             "each input is like its rank's output")
        op = _op(op_in, out, what)
        o, back = _contiguous(out, what)
        ob, d = _reduce_view(o, what)
        calls = []
        for r, i in enumerate(ins):
            ib, _ = _reduce_view(i.contiguous(), what)
            mine = r == self._rank
            calls.append((_lib.reduce_async, (_ptr(ib), _ptr(ob) if mine else None, ib.numel(),
                                              d, op, self._lr(r)),
                          (i, ib, out, o) if mine else (i, ib), back if mine else None))
        return _timed(self._start_many(what, calls, [out], dev), opts, timeout)

    def barrier(self, opts=None, timeout=None):
        what = "barrier"
        if isinstance(opts, datetime.timedelta):
            timeout, opts = opts, None  # barrier(timeout)
        self._live(what)
        work = self._start(what, _lib.barrier_async, (), None, [], sync=_caller_waits(opts, 1))
        # torch 2.x's barrier(timeout=...): this call's own limit (unset: negative).
        return _timed(work, opts, timeout)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """gloo's monitored barrier: every rank reports to rank 0, which names the ranks that
        did not arrive within the timeout (the first, or all with wait_all_ranks), then
        releases the others. A rank that misses the deadline fails the group, as any timeout
        does in this library (rr_work_wait). Uses the group's messages (tags are not sent,
        so it must not interleave with the caller's own sends to or receives from rank 0)."""
        import time
        if not hasattr(timeout, "total_seconds"):  # an options object (BarrierOptions)
            timeout = getattr(timeout, "timeout", None)
        ms = int(timeout.total_seconds() * 1000) if timeout is not None else 30 * 60 * 1000
        self._live("monitored_barrier")
        token = torch.zeros(1, dtype=torch.uint8)
        if self._rank != 0:
            self.send([token], 0).wait()
            try:
                self.recv([token], 0).wait(datetime.timedelta(milliseconds=max(ms, 1)))
            except RuntimeError as e:
                raise RuntimeError(f"ringreduce: Rank {self._rank} successfully reached "
                                   "monitoredBarrier, but received errors while waiting for "
                                   f"send/recv from rank 0: {e}") from None
            return True
        if ms <= 0:
            raise RuntimeError("ringreduce: Rank 0 timed out in monitoredBarrier after 0 ms")
        deadline = time.monotonic() + ms / 1000
        works = [(r, self.recv([torch.zeros(1, dtype=torch.uint8)], r)) for r in range(1, self._size)]
        failed, why = [], ""
        for r, w in works:
            left = deadline - time.monotonic()
            try:
                if failed and not wait_all_ranks:
                    break
                w.wait(datetime.timedelta(seconds=max(left, 0.001)))
            except RuntimeError as e:
                failed.append(r)
                why = why or str(e)
        if failed:
            who = (f"Ranks {', '.join(map(str, failed))}" if len(failed) > 1 else f"Rank {failed[0]}")
            raise RuntimeError(f"ringreduce: {who} failed to pass monitoredBarrier in {ms} ms "
                               f"({why})")
        for r in range(1, self._size):
            self.send([token], r).wait()
        return True

    def send(self, tensors, dst, tag=0):
        return self._p2p("send", tensors, dst, "send")

    def recv(self, tensors, src, tag=0):
        return self._p2p("recv", tensors, src, "recv")

    def recv_anysource(self, tensors, tag=0):
        """The next message any other rank sends to this one (torch's recv(src=None)); the
        work's source_rank() names the sender. Issued at once, also inside a coalescing
        block (it pairs with no particular send)."""
        what = "recv from any rank"
        t = _one(tensors, what)
        dev = self._check_device([t], what)
        if dev.type != "cpu":
            raise RuntimeError(f"ringreduce: {what}: host tensors only (the library refuses "
                               "device buffers for a receive from any rank)")
        buf, finish = _contiguous(t, what)
        data, ld = _move_view(buf)
        work = self._start(what, _lib.recv_async, (_ptr(data), data.numel(), ld, _lib.ANY_SOURCE),
                           (t, buf), tensors, finish, dev)
        work._rank_of = self._group_rank  # the library names the sender by its global rank
        return work

    def gather(self, output_tensors, input_tensors, opts=None, *args, root=None, timeout=None):
        what = "gather"
        if isinstance(opts, _KEYWORD):  # (outputs, tensor, root, timeout)
            (root, timeout), opts = _positional(what, (opts,) + args, root, timeout), None
        root = _root(what, opts.rootRank if opts is not None else (root or 0), self._size,
                     "opts.rootRank" if opts is not None else "root")
        if isinstance(input_tensors, torch.Tensor):
            # gather(outputs, tensor, root): one flat list of outputs, empty off the root.
            ins = [input_tensors]
            out_lists = [list(output_tensors)] if self._rank == root or output_tensors else []
        else:
            ins, out_lists = list(input_tensors), [list(o) for o in output_tensors]
        if len(ins) != 1:
            raise _bad(what, f"requires a single-element input tensor list (input_tensors has "
                             f"{len(ins)})")
        inp = ins[0].contiguous()
        dev = self._check_device([inp], what)
        if self._rank != root:
            if out_lists:
                raise _bad(what, f"requires empty output on non-root (output_tensors: rank "
                                 f"{self._rank} is not the root, {root})")
            ib, d = _move_view(inp)
            return _timed(self._start(what, _lib.gather_async,
                                      (_ptr(ib), None, ib.numel(), d, self._lr(root)), (inp,),
                                      [], None, dev, sync=_caller_waits(opts, 1)), opts, timeout)
        if len(out_lists) != 1:
            raise _bad(what, f"requires a single-element output list at the root "
                             f"(output_tensors has {len(out_lists)})")
        outs = out_lists[0]
        if len(outs) != self._size:
            raise _bad(what, f"Incorrect output list size {len(outs)}. Output list size should "
                             f"be {self._size} (output_tensors[0]: one tensor per rank)")
        for i, o in enumerate(outs):
            if o.dtype != inp.dtype:
                raise _bad(what, f"invalid tensor type: output_tensors[0][{i}] is {o.dtype}, "
                                 f"the input {inp.dtype}")
            if o.numel() != inp.numel():
                raise _bad(what, f"invalid tensor size: output_tensors[0][{i}] has "
                                 f"{o.numel()} elements, the input {inp.numel()}")
            _writable(o, what)
        self._check_device([inp] + outs, what)
        flat = torch.empty(self._size * inp.numel(), dtype=inp.dtype, device=inp.device)

        def back():
            for i, o in enumerate(outs):
                o.copy_(flat[i * inp.numel():(i + 1) * inp.numel()].view_as(o))
        ib, d = _move_view(inp)
        return _timed(self._start(what, _lib.gather_async,
                                  (_ptr(ib), _ptr(flat), ib.numel(), d, self._lr(root)),
                                  (inp, flat, outs), outs, back, dev, sync=_caller_waits(opts, 1)),
                      opts, timeout)

    def gather_single(self, output, input, opts=None):
        """torch 2.x's gather into one flat tensor on the root (gather_into_tensor)."""
        what = "gather_into_tensor"
        root = opts.rootRank if opts is not None else 0
        dev = self._check_device([input], what)
        inp, d = _move_view(input.contiguous())
        out, back, ob = None, None, None
        if self._rank == root:
            if output.dtype != input.dtype or output.numel() != input.numel() * self._size:
                raise RuntimeError(f"ringreduce: {what}: the root's output must have "
                                   f"{self._size} x {input.numel()} elements of {input.dtype}")
            out, back = _contiguous(output, what)
            ob, _ = _move_view(out)
        return self._start(what, _lib.gather_async,
                           (_ptr(inp), _ptr(ob) if ob is not None else None, inp.numel(), d,
                            self._lr(root)), (output, out, inp), [output], back, dev,
                           sync=_caller_waits(opts, 1))

    def scatter(self, output_tensors, input_tensors, opts=None, *args, root=None, timeout=None):
        what = "scatter"
        if isinstance(opts, _KEYWORD):  # (output, inputs, root, timeout)
            (root, timeout), opts = _positional(what, (opts,) + args, root, timeout), None
        root = _root(what, opts.rootRank if opts is not None else (root or 0), self._size,
                     "opts.rootRank" if opts is not None else "root")
        if isinstance(output_tensors, torch.Tensor):
            # scatter(output, inputs, root): one flat list of inputs, empty off the root.
            outs = [output_tensors]
            in_lists = [list(input_tensors)] if self._rank == root or input_tensors else []
        else:
            outs, in_lists = list(output_tensors), [list(i) for i in input_tensors]
        if len(outs) != 1:
            raise _bad(what, f"requires a single-element output tensor list (output_tensors "
                             f"has {len(outs)})")
        out = outs[0]
        dev = self._check_device([out], what)
        if self._rank == root:
            if len(in_lists) != 1:
                raise _bad(what, f"requires a single-element input list at the root "
                                 f"(input_tensors has {len(in_lists)})")
            ins = in_lists[0]
            if len(ins) != self._size:
                raise _bad(what, f"Incorrect input list size {len(ins)}. Input list size should "
                                 f"be {self._size} (input_tensors[0]: one tensor per rank)")
            for i, x in enumerate(ins):
                if x.dtype != out.dtype:
                    raise _bad(what, f"invalid tensor type: input_tensors[0][{i}] is {x.dtype}, "
                                     f"the output {out.dtype}")
                if x.numel() != out.numel():
                    raise _bad(what, f"invalid tensor size: input_tensors[0][{i}] has "
                                     f"{x.numel()} elements, the output {out.numel()}")
            self._check_device([out] + ins, what)
            flat = torch.cat([x.reshape(-1) for x in ins])
        else:
            if in_lists:
                raise _bad(what, f"requires empty input on non-root (input_tensors: rank "
                                 f"{self._rank} is not the root, {root})")
            flat = None
        o, back = _contiguous(out, what)
        ob, d = _move_view(o)
        return _timed(self._start(what, _lib.scatter_async,
                                  (_ptr(flat) if flat is not None else None, _ptr(ob), ob.numel(),
                                   d, self._lr(root)), (flat, o, out), [out], back, dev,
                                  sync=_caller_waits(opts, 1)), opts, timeout)

    def _alltoallv(self, what, out, inp, out_counts, in_counts, back, keep, result, dev):
        """All-to-all with per-rank counts in elements of out's dtype (in bytes when the
        library has no such dtype)."""
        n = self._size
        (ob, d), (ib, _) = _move_view(out), _move_view(inp)
        es = out.element_size() if d == _lib.UINT8 and out.dtype != torch.uint8 else 1
        sc = (ctypes.c_size_t * n)(*[c * es for c in in_counts])
        rc = (ctypes.c_size_t * n)(*[c * es for c in out_counts])
        sd = (ctypes.c_size_t * n)(*[sum(in_counts[:i]) * es for i in range(n)])
        rd = (ctypes.c_size_t * n)(*[sum(out_counts[:i]) * es for i in range(n)])
        return self._start(what, _lib.all_to_allv_async, (_ptr(ib), sc, sd, _ptr(ob), rc, rd, d),
                           keep + (sc, rc, sd, rd, ob, ib), result, back, dev)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None,
                      timeout=None):
        what = "all_to_all_single"
        if isinstance(opts, datetime.timedelta):
            timeout, opts = opts, None  # alltoall_base(output, input, splits, splits, timeout)
        dev = self._check_device([output, input], what)
        if output.dtype != input.dtype:
            raise RuntimeError(f"ringreduce: {what}: input {input.dtype}, output {output.dtype}")
        out, back = _contiguous(output, what)
        inp = input.contiguous()
        n = self._size
        if not output_split_sizes and not input_split_sizes:
            if inp.numel() % n or out.numel() != inp.numel():
                raise RuntimeError(f"ringreduce: {what}: {inp.numel()} elements do not split "
                                   f"evenly over {n} ranks")
            (ib, d), (ob, _) = _move_view(inp), _move_view(out)
            return _timed(self._start(what, _lib.all_to_all_async,
                                      (_ptr(ib), _ptr(ob), ib.numel() // n, d), (output, out, inp),
                                      [output], back, dev, sync=_caller_waits(opts, 1)),
                          opts, timeout)

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
        return _timed(self._alltoallv(what, out, inp, counts(out, output_split_sizes),
                                      counts(inp, input_split_sizes), back, (output, out, inp),
                                      [output], dev), opts, timeout)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None,
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes or [],
                                  input_split_sizes or [], opts)

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
        for t in output_tensors:
            _writable(t, what)
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


def _group_key(name, members):
    """What names a group among every group that sets up through the same store: torchrun's
    restart attempt (torch 2.x hands a restarted attempt the first one's store, keys and
    all), the group's name, and its members' global ranks (torch numbers groups per process,
    so one name can stand for different groups on different ranks: new_subgroups(group=)).
    The library binds its store keys, record MACs and greeting proofs to it (rr_pg_options
    group_key), so two groups never pair their ranks, whoever rewrites the store."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"torch/{attempt}/{name}/" + ",".join(str(r) for r in members)


def _create(*args, **kwargs):
    """The creator torch calls for each group, registered with extended_api: (backend
    options, pg options), the options carrying the group's name (group_id) and its members'
    global ranks (empty for the default group). The plain form (store, rank, size, timeout)
    is served too, for a caller that has nothing more to say."""
    if len(args) == 2 and hasattr(args[0], "store"):
        o = args[0]
        members = list(getattr(o, "global_ranks_in_group", None) or range(o.group_size))
        key = _group_key(getattr(o, "group_id", "") or "default", members)
        return ProcessGroupRingreduce(o.store, o.group_rank, o.group_size, o.timeout, key=key,
                                      global_ranks=members)
    store, rank, size, timeout = args[:4]
    return ProcessGroupRingreduce(store, rank, size, timeout)


def _devices():
    """The devices this library serves: cpu, and cuda when it was built with CUDA."""
    try:
        return ["cpu", "cuda"] if _lib.cuda_built() else ["cpu"]
    except RuntimeError:  # a library older than rr_cuda_built: it says nothing, assume cpu
        return ["cpu"]


_DEVICES = _devices()


def _launcher_env():
    """Under srun (or mpirun) without torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT filled in from the launcher's, as the
    library's env:// reads them (rr_launch_info_get: under srun the master is the step's
    first node and the port comes from the job and step ids), so that torch's own env://,
    which knows only its own names, works there. Nothing is changed when RANK is set, when
    no launcher is seen, or when the library cannot tell (torch then says what is missing);
    a variable already set is kept."""
    env = os.environ
    if env.get("RANK") or not (env.get("SLURM_PROCID") or env.get("OMPI_COMM_WORLD_RANK")):
        return
    info = _lib.LaunchInfo()
    try:
        if _lib.launch_info_get(ctypes.byref(info)) != 0:
            return
    except RuntimeError:  # a library older than rr_launch_info_get
        return
    found = {"RANK": info.rank, "WORLD_SIZE": info.world_size, "LOCAL_RANK": info.local_rank,
             "LOCAL_WORLD_SIZE": info.local_world_size,
             "MASTER_ADDR": info.master_addr.decode(), "MASTER_PORT": info.master_port}
    for k, v in found.items():
        if not env.get(k) and v != -1:
            env[k] = str(v)


_launcher_env()


def _register():
    # Importing twice (or under two names) must not register twice: torch refuses that.
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}) or hasattr(dist.Backend, BACKEND.upper()):
        return
    # torch 2.x attaches its flight recorder (a C++ hook keyed on the C++ group's name) to
    # every group that names a device and does not record itself; a Python group has no C++
    # name to key it on, and the library names whom a stuck call waits for on its own.
    recorders = getattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if isinstance(recorders, set):
        recorders.add(BACKEND)
    params = inspect.signature(dist.Backend.register_backend).parameters
    # extended_api (1.13 and 2.x): the creator is told the group's name and members.
    if "devices" in params:  # 2.x: say which devices this backend serves
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=_DEVICES)
    else:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True)


_register()
