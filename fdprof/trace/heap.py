"""Hand freed heap memory back to the system between the phases of a load.

A Chrome load frees a batch's Python objects and the per-batch column parts as it goes; glibc
keeps most of that freed memory in its arenas, in holes the next phase's larger arrays do not
fit, so the process grows past what is alive. ``malloc_trim(0)`` between the phases returns it
(on the real PyTorch traces about 2 MiB of a ~50 MiB peak, BENCHMARKS.md). A no-op where the
C library has no ``malloc_trim`` (not glibc).
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _trim()


def release_freed() -> None:
    """Return the heap's free memory to the system (glibc), else nothing."""
    if _TRIM is not None:
        _TRIM(0)
