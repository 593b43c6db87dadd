"""How torch's tensors, dtypes, reduce ops and calls map onto the library's arguments: the
dtype and op tables, the views a call hands the library (contiguous, real pairs for complex,
bytes for dtypes the library has no type for), the refusals, and whether torch waits for a
call at once. Nothing here issues a call (ringreduce/torch.py does)."""

import contextlib
import ctypes
import os
import sys
import warnings

import torch
import torch.distributed as dist

from . import _lib

# torch dtype -> library dtype, for reductions. bool travels as uint8, for the ops that keep
# 0/1 (below); complex as its real and imaginary parts, for SUM and AVG.
_DTYPES = {
    torch.int8: _lib.INT8, torch.uint8: _lib.UINT8, torch.int32: _lib.INT32,
    torch.int64: _lib.INT64, torch.float16: _lib.FLOAT16, torch.bfloat16: _lib.BFLOAT16,
    torch.float32: _lib.FLOAT32, torch.float64: _lib.FLOAT64, torch.bool: _lib.UINT8,
}
_COMPLEX = {torch.complex64: _lib.FLOAT32, torch.complex128: _lib.FLOAT64}
_SUPPORTED = ("float16, bfloat16, float32, float64, int8, uint8, int32, int64, bool, and "
              "complex64/complex128 for SUM and AVG")

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


def _sparse_checked():
    """torch 2.x warns unless a sparse tensor's invariant checks are chosen; 1.13 has no such
    choice. The probe itself made torch 2.11 warn ("Sparse invariant checks are implicitly
    disabled", once per process, at import: seen on the first GPU run), so its warnings are
    not shown."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.sparse_coo_tensor([[0]], [0.0], (1,), check_invariants=True)
        return {"check_invariants": True}
    except TypeError:
        return {}


_SPARSE_CHECKED = _sparse_checked()


_SUM = dist.ReduceOp.SUM
_CPU = torch.device("cpu")


def _op(reduce_op, t, what):
    if reduce_op == _SUM and t.dtype != torch.bool:
        return _lib.SUM  # the common case first
    for theirs, ours, name in _OPS:
        if reduce_op == theirs:
            if t.dtype == torch.bool and ours not in _BOOL_OPS:
                raise RuntimeError(f"ringreduce: {what}: {name} of bool tensors is not supported "
                                   "(it would leave values other than 0 and 1; use MAX for "
                                   "'any' or MIN for 'all')")
            if t.is_complex() and ours not in (_lib.SUM, _lib.AVG):
                raise RuntimeError(f"ringreduce: {what}: {name} of complex tensors is not "
                                   "defined part by part (SUM and AVG are)")
            return ours
    raise RuntimeError(f"ringreduce: {what}: reduce op {reduce_op} is not supported (SUM, "
                       "PRODUCT, MIN, MAX, BAND, BOR, BXOR and AVG are; PREMUL_SUM is "
                       "NCCL's: scale the tensor and use SUM)")


def _reduce_view(t, what):
    """(a tensor to reduce, its library dtype): complex as its real and imaginary parts."""
    d = _DTYPES.get(t.dtype)
    if d is not None:
        return t, d
    d = _COMPLEX.get(t.dtype)
    if d is not None:
        return torch.view_as_real(t), d
    raise RuntimeError(f"ringreduce: {what}: tensors of dtype {t.dtype} are not supported "
                       f"(supported: {_SUPPORTED})")


def _bytes(t):
    """A contiguous tensor's data as uint8."""
    return t.reshape(-1).view(torch.uint8) if t.dtype != torch.uint8 else t.reshape(-1)


def _move_view(t):
    """(a contiguous tensor, its library dtype) for calls that only move data: any dtype
    travels, as its bytes when the library has no such type (the ranks' calls are then
    compared by size in bytes rather than by dtype)."""
    d = _DTYPES.get(t.dtype)
    return (t.reshape(-1), d) if d is not None else (_bytes(t), _lib.UINT8)


def _listed(tensors):
    """A call's tensors as a list: torch's bindings take one tensor wherever they take a list
    of them (pg.allreduce(t), pg.broadcast(t, root=...))."""
    return [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)


def _one(tensors, what, arg="tensors"):
    """The one tensor of a call that takes one per process (a tensor, or a list of one)."""
    if isinstance(tensors, torch.Tensor):
        return tensors
    if len(tensors) != 1:
        raise RuntimeError(f"ringreduce: {what}: requires a single-element tensor list ({arg} "
                           f"has {len(tensors)}): one tensor per process (only all_reduce, "
                           "broadcast and all_gather take several, as gloo)")
    return tensors[0]


def _positional(what, values, *given):
    """torch's keywords of a call (op, root, timeout: `given`, in the binding's order) where
    their leading values came positionally, in the options object's place."""
    if len(values) > len(given):
        raise TypeError(f"ringreduce: {what}: {len(values)} positional values for "
                        f"{len(given)} keywords")
    return tuple(values) + tuple(given[len(values):])


def _bad(what, text):
    """The error of a call refused for its arguments, before anything is sent."""
    return RuntimeError(f"ringreduce: {what}: {text}")


def _root(what, root, size, arg):
    """A root rank that names a rank of the group."""
    if not isinstance(root, int) or not 0 <= root < size:
        raise _bad(what, f"invalid root rank {root} ({arg}): a group of {size} has ranks 0 to "
                         f"{size - 1}")
    return root


def _alike(what, tensors, arg):
    """Every tensor of a list like the first: one dtype, one shape."""
    ref = tensors[0]
    for i, t in enumerate(tensors):
        if t.dtype != ref.dtype:
            raise _bad(what, f"invalid tensor type: {arg}[{i}] is {t.dtype}, not {ref.dtype}")
        if t.shape != ref.shape:
            raise _bad(what, f"invalid tensor size: {arg}[{i}] has shape {list(t.shape)}, not "
                             f"{list(ref.shape)}")


# Several tensors of one process reduced into one before the call (all_reduce of a list):
# the library op -> an in-place torch op on the running result.
_LOCAL = {
    _lib.SUM: torch.Tensor.add_, _lib.AVG: torch.Tensor.add_, _lib.PROD: torch.Tensor.mul_,
    _lib.MIN: lambda a, b: torch.minimum(a, b, out=a),
    _lib.MAX: lambda a, b: torch.maximum(a, b, out=a),
    _lib.BAND: torch.Tensor.bitwise_and_, _lib.BOR: torch.Tensor.bitwise_or_,
    _lib.BXOR: torch.Tensor.bitwise_xor_,
}


def _local_reduce(tensors, op):
    """A new contiguous tensor holding this process's tensors reduced by the library op `op`
    (AVG sums them: the library divides by the world size), in list order."""
    out = tensors[0].clone(memory_format=torch.contiguous_format)
    step = _LOCAL[op]
    for t in tensors[1:]:
        step(out, t)
    return out


def _write_back(finish):
    """Run a call's copy of its result into the caller's tensors as the library writes into
    them: a raw write, unseen by autograd, allowed into inference tensors (made under
    torch.inference_mode(), which the thread that completes the call is not in)."""
    with torch.inference_mode():
        finish()


def _overlaps(t):
    """Whether a tensor's elements may share memory (an expand()ed view): writing a result
    into it cannot give every element its own value. Dimensions sorted by stride must each
    step past the whole of the smaller ones."""
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1)
    extent = 1
    for st, sz in dims:
        if st < extent:
            return True
        extent = st * sz
    return False


def _writable(t, what):
    if _overlaps(t):
        raise RuntimeError(f"ringreduce: {what}: the output tensor overlaps itself (shape "
                           f"{tuple(t.shape)}, strides {tuple(t.stride())}, e.g. from expand()): "
                           "its elements cannot each receive their own result; pass a "
                           "tensor that owns its elements (.contiguous() or .clone())")


def _contiguous(t, what=None):
    """(a contiguous tensor to hand to the library, a copy-back to run after a call that
    writes it, or None). With `what`, t is an output and must not overlap itself."""
    if t.is_contiguous():
        return t, None
    if what is not None:
        _writable(t, what)
    c = t.contiguous()
    return c, (lambda: t.copy_(c))


def _issuing_stream(device):
    """(device, its current stream) for a CUDA call issued now, or None for a host call: the
    stream the library orders the call's result on (rr_pg_set_cuda_stream, in torch.py)."""
    if device is None or device.type != "cuda":
        return None
    return device, torch.cuda.current_stream(device)


@contextlib.contextmanager
def _on_stream(issued):
    """With a CUDA call's issuing device and stream (_issuing_stream) current, on whatever
    thread this runs; nothing for a host call."""
    if issued is None:
        yield
        return
    device, stream = issued
    with torch.cuda.device(device), torch.cuda.stream(stream):
        yield


def _stream_ordered(finish, device):
    """A CUDA call's finish (the copy of a contiguous temporary's result into the caller's
    tensors) made to run on the stream the call is issued on, the current one now, with its
    device current. That is the stream the library orders after the result: rr_work_wait
    makes it wait for the result's event, and rr_work_test reports completion only once that
    event passed. The finish may run on another thread (the futures thread, in
    ringreduce/_work.py) whose current device and stream are not the caller's: there a bare
    copy would be ordered with none of the caller's later work, and could run on another
    device. Host calls' finishes are returned as they are."""
    if finish is None:
        return None
    issued = _issuing_stream(device)
    if issued is None:
        return finish

    def on_stream():
        with _on_stream(issued):
            finish()
    return on_stream


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


# torch's functions that call a group method and wait for its work before returning, when
# their own async_op is False (or, for send/recv, always).
_C10D = os.path.normcase(dist.distributed_c10d.__file__)
_ALWAYS_WAIT = frozenset(("send", "recv"))


def _caller_waits(opts, depth):
    """Whether torch will wait for this call's work as soon as the group returns it: then the
    call runs on the caller's thread (the library's blocking form), with no hand-off to the
    group's thread, which costs tens of microseconds on a busy machine. torch 2.x says so in
    the options (asyncOp); 1.13 does not, and its Python functions keep it in their local
    `async_op`, read here from the caller's frame (`depth` frames up). Anything else, C++
    callers (DDP) included, is taken as asynchronous."""
    a = getattr(opts, "asyncOp", None)
    if a is not None:
        return not a
    try:
        f = sys._getframe(depth + 1)
    except ValueError:
        return False
    code = f.f_code
    if os.path.normcase(code.co_filename) != _C10D:
        return False
    if code.co_name in _ALWAYS_WAIT:
        return True
    return f.f_locals.get("async_op", True) is False
