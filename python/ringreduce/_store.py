"""torch's store (the PrefixStore torch hands each process group) behind the library's store
callbacks, so that the library's rendezvous runs through it: no second port."""

import ctypes
import datetime

from . import _lib


class StoreBridge:
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
