"""ringreduce from Python.

    import ringreduce.torch          # registers the "ringreduce" backend with torch
    torch.distributed.init_process_group("ringreduce")

The C library is loaded through ctypes (ringreduce/_lib.py); set RINGREDUCE_LIBRARY to use a
particular build of libringreduce.so."""

__version__ = "0.2.0"


def library_version():
    """The version of the libringreduce.so this package loaded."""
    from . import _lib
    return _lib.version().decode()


def library_path():
    """Where the loaded libringreduce.so is."""
    from . import _lib
    return _lib.path
