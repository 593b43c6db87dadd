"""The C library through ctypes: finding libringreduce, the prototypes of what the Python
layer calls, and errors turned into RuntimeError with the library's own sentence.

Nothing here knows about torch; ringreduce/torch.py maps torch's calls onto these."""

import ctypes
import ctypes.util
import glob
import os

# rr_status values (include/ringreduce/ringreduce.h, RR_STATUS_MAP).
OK, INPROGRESS, EINVAL, ENOMEM, ESYS, ETIMEDOUT, EPEER = 0, 1, -1, -2, -3, -4, -5
EMISMATCH, EPROTO, EABORTED, ENOTSUP = -6, -7, -8, -9
ESTATE, EENV, EADDR, ECUDA, ENOTMEMBER, EREVOKED = -10, -11, -12, -13, -14, -15
# A call refused on its own arguments or this process's state: the group is still usable.
LOCAL_ERRORS = (EINVAL, ENOMEM, ENOTSUP, ESTATE, ENOTMEMBER)

# rr_dtype and rr_op, in the header's order.
INT8, UINT8, INT32, INT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64 = range(8)
SUM, PROD, MIN, MAX, AVG, BAND, BOR, BXOR = range(8)


def _candidates():
    env = os.environ.get("RINGREDUCE_LIBRARY")
    if env:
        return [env]  # an explicit choice is the only one tried
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "lib", "libringreduce.so*")))
    # The source tree: python/ringreduce -> the repository's build directories.
    root = os.path.dirname(os.path.dirname(here))
    for build in ("build", "build-test"):
        found += sorted(glob.glob(os.path.join(root, build, "libringreduce.so*")))
    system = ctypes.util.find_library("ringreduce")
    if system:
        found.append(system)
    return found


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ImportError(
        "ringreduce: cannot load libringreduce.so (set RINGREDUCE_LIBRARY to its path, or "
        "install the library: cmake --install build). Tried: " + ("; ".join(tried) or "nothing found"))


lib, path = _load()

c_pg = ctypes.c_void_p
c_work = ctypes.c_void_p
c_store = ctypes.c_void_p


class LaunchInfo(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int), ("world_size", ctypes.c_int),
                ("local_rank", ctypes.c_int), ("local_world_size", ctypes.c_int),
                ("master_addr", ctypes.c_char * 256), ("master_port", ctypes.c_int),
                ("source", ctypes.c_char * 32)]


class PgOptions(ctypes.Structure):
    _fields_ = [("init_method", ctypes.c_char_p), ("rank", ctypes.c_int),
                ("world_size", ctypes.c_int), ("timeout_ms", ctypes.c_int64),
                ("device", ctypes.c_int), ("group_key", ctypes.c_char_p)]


SET_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                          ctypes.c_size_t)
GET_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
                          ctypes.c_void_p)
ADD_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
                          ctypes.POINTER(ctypes.c_int64))
WAIT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                           ctypes.c_int, ctypes.c_int64)
CHECK_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                            ctypes.c_int, ctypes.POINTER(ctypes.c_int))
DEL_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                          ctypes.POINTER(ctypes.c_int))
FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class StoreCallbacks(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("set", SET_FN), ("get", GET_FN), ("add", ADD_FN),
                ("wait", WAIT_FN), ("check", CHECK_FN), ("del_", DEL_FN), ("free", FREE_FN)]


def _proto(name, restype, *argtypes):
    try:
        f = getattr(lib, name)
    except AttributeError:
        # An older library: the call fails when used, saying so, and the rest still works.
        def missing(*args):
            raise RuntimeError(f"ringreduce: {path} has no {name} (a library older than this "
                               "package; rebuild or reinstall it)")
        return missing
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_i, _sz, _p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
_pw = ctypes.POINTER(c_work)
last_error = _proto("rr_last_error", ctypes.c_char_p)
status_name = _proto("rr_status_name", ctypes.c_char_p, _i)
version = _proto("rr_version", ctypes.c_char_p)
init_process_group_on_store = _proto("rr_init_process_group_on_store", _i, ctypes.POINTER(c_pg),
                                     ctypes.POINTER(PgOptions), c_store)
destroy_process_group = _proto("rr_destroy_process_group", _i, c_pg)
process_exiting = _proto("rr_process_exiting", None)
launch_info_get = _proto("rr_launch_info_get", _i, ctypes.POINTER(LaunchInfo))
abort = _proto("rr_abort", _i, c_pg)
pg_revoke = _proto("rr_pg_revoke", _i, c_pg)
pg_shrink = _proto("rr_pg_shrink", _i, c_pg, _i, ctypes.POINTER(c_pg))
pg_grow = _proto("rr_pg_grow", _i, c_pg, ctypes.c_char_p, _i, ctypes.c_int64, _i,
                 ctypes.POINTER(c_pg))
pg_grow_pending = _proto("rr_pg_grow_pending", _i, c_pg, ctypes.c_char_p, ctypes.POINTER(_i))
pg_join = _proto("rr_pg_join", _i, ctypes.c_char_p, ctypes.POINTER(PgOptions),
                 ctypes.POINTER(c_pg))
get_rank = _proto("rr_get_rank", _i, c_pg)
get_world_size = _proto("rr_get_world_size", _i, c_pg)
get_global_rank = _proto("rr_get_global_rank", _i, c_pg, _i)
pg_set_cuda_stream = _proto("rr_pg_set_cuda_stream", _i, c_pg, _p)
cuda_built = _proto("rr_cuda_built", _i)
store_from_callbacks = _proto("rr_store_from_callbacks", _i, ctypes.POINTER(StoreCallbacks),
                              ctypes.c_int64, ctypes.POINTER(c_store))
store_value_set = _proto("rr_store_value_set", _i, _p, _p, _sz)
store_fail = _proto("rr_store_fail", _i, _i, ctypes.c_char_p)
store_free = _proto("rr_store_free", None, c_store)
all_reduce_async = _proto("rr_all_reduce_async", _i, c_pg, _p, _p, _sz, _i, _i, _pw)
broadcast_async = _proto("rr_broadcast_async", _i, c_pg, _p, _p, _sz, _i, _i, _pw)
reduce_async = _proto("rr_reduce_async", _i, c_pg, _p, _p, _sz, _i, _i, _i, _pw)
all_gather_async = _proto("rr_all_gather_async", _i, c_pg, _p, _p, _sz, _i, _pw)
reduce_scatter_async = _proto("rr_reduce_scatter_async", _i, c_pg, _p, _p, _sz, _i, _i, _pw)
barrier_async = _proto("rr_barrier_async", _i, c_pg, _pw)
send_async = _proto("rr_send_async", _i, c_pg, _p, _sz, _i, _i, _pw)
recv_async = _proto("rr_recv_async", _i, c_pg, _p, _sz, _i, _i, _pw)
sendrecv_async = _proto("rr_sendrecv_async", _i, c_pg, _p, _sz, _i, _p, _sz, _i, _i, _pw)
gather_async = _proto("rr_gather_async", _i, c_pg, _p, _p, _sz, _i, _i, _pw)
scatter_async = _proto("rr_scatter_async", _i, c_pg, _p, _p, _sz, _i, _i, _pw)
all_to_all_async = _proto("rr_all_to_all_async", _i, c_pg, _p, _p, _sz, _i, _pw)
_sizes = ctypes.POINTER(ctypes.c_size_t)
all_to_allv_async = _proto("rr_all_to_allv_async", _i, c_pg, _p, _sizes, _sizes, _p, _sizes,
                           _sizes, _i, _pw)
# The blocking forms: a call on an idle group runs on the caller's thread, no hand-off.
all_reduce = _proto("rr_all_reduce", _i, c_pg, _p, _p, _sz, _i, _i)
broadcast = _proto("rr_broadcast", _i, c_pg, _p, _p, _sz, _i, _i)
reduce = _proto("rr_reduce", _i, c_pg, _p, _p, _sz, _i, _i, _i)
all_gather = _proto("rr_all_gather", _i, c_pg, _p, _p, _sz, _i)
reduce_scatter = _proto("rr_reduce_scatter", _i, c_pg, _p, _p, _sz, _i, _i)
barrier = _proto("rr_barrier", _i, c_pg)
send = _proto("rr_send", _i, c_pg, _p, _sz, _i, _i)
recv = _proto("rr_recv", _i, c_pg, _p, _sz, _i, _i)
sendrecv = _proto("rr_sendrecv", _i, c_pg, _p, _sz, _i, _p, _sz, _i, _i)
gather = _proto("rr_gather", _i, c_pg, _p, _p, _sz, _i, _i)
scatter = _proto("rr_scatter", _i, c_pg, _p, _p, _sz, _i, _i)
all_to_all = _proto("rr_all_to_all", _i, c_pg, _p, _p, _sz, _i)
all_to_allv = _proto("rr_all_to_allv", _i, c_pg, _p, _sizes, _sizes, _p, _sizes, _sizes, _i)
# Keyed by id(): ctypes function pointers do not hash. Both live as long as this module.
BLOCKING = {id(a): b for a, b in (
    (all_reduce_async, all_reduce), (broadcast_async, broadcast), (reduce_async, reduce),
    (all_gather_async, all_gather), (reduce_scatter_async, reduce_scatter),
    (barrier_async, barrier), (send_async, send), (recv_async, recv),
    (sendrecv_async, sendrecv), (gather_async, gather), (scatter_async, scatter),
    (all_to_all_async, all_to_all), (all_to_allv_async, all_to_allv))}
work_wait = _proto("rr_work_wait", _i, c_work, ctypes.c_int64)
work_test = _proto("rr_work_test", _i, c_work)
work_error = _proto("rr_work_error", ctypes.c_char_p, c_work)
work_source = _proto("rr_work_source", _i, c_work)
ANY_SOURCE = -1  # RR_ANY_SOURCE
work_free = _proto("rr_work_free", None, c_work)


def error_text():
    """This thread's last error, as the library wrote it."""
    msg = last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status, what=None):
    """Raise RuntimeError with the library's message when status is an error."""
    if status < 0:
        name = status_name(status).decode()
        raise RuntimeError(f"ringreduce: {what + ': ' if what else ''}{error_text() or name} ({name})")
    return status
