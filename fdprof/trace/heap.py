"""Hand freed heap memory back to the system between the phases of a load.

A Chrome load frees a batch's Python objects and the per-batch column parts as it goes; glibc
keeps most of that freed memory in its arenas, in holes the next phase's larger arrays do not
fit, so the process grows past what is alive. ``malloc_trim(0)`` between the phases returns it
(on the real PyTorch traces about 2 MiB of a ~50 MiB peak, BENCHMARKS.md).

The larger cause is glibc's *dynamic* mmap threshold: once a large block is freed, blocks up to
that size come from the heap, and a load's many mid-sized temporaries (per-batch parts, flow
binding's arrays) leave holes there that stay resident. :func:`mapped_large_blocks` keeps the
threshold at 128 KiB while a Chrome load builds its columns and frames, so each such block is a
mapping of its own that goes back when freed (peak 2.05× → 1.85× the tables on the real
PyTorch traces, BENCHMARKS.md). Not while events are decoded (their churn reuses heap pages:
mapping every block there made the load ~30 % slower), nor for native loads (10^6 spans:
~1.7× slower). ``MALLOC_MMAP_THRESHOLD_`` set by the user wins. No-ops where the C library is
not glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections.abc import Iterator

from fdprof import settings

_M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
_SMALL_THRESHOLD = 128 * 1024  # glibc's starting value
_LARGE_THRESHOLD = 32 * 1024 * 1024  # the most the dynamic threshold grows to (64-bit glibc)


def _libc_function(name: str, *argtypes):
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


_TRIM = _libc_function("malloc_trim", ctypes.c_size_t)
_MALLOPT = _libc_function("mallopt", ctypes.c_int, ctypes.c_int)


@contextlib.contextmanager
def mapped_large_blocks() -> Iterator[None]:
    """Within: blocks of 128 KiB and more are mappings of their own, returned when freed. After:
    the threshold at the dynamic one's ceiling (glibc cannot return to dynamic mode), so later
    work keeps reusing heap pages as it would have."""
    if _MALLOPT is None or settings.is_set(settings.MALLOC_MMAP_THRESHOLD):
        yield
        return
    _MALLOPT(_M_MMAP_THRESHOLD, _SMALL_THRESHOLD)
    try:
        yield
    finally:
        _MALLOPT(_M_MMAP_THRESHOLD, _LARGE_THRESHOLD)


def release_freed() -> None:
    """Return the heap's free memory to the system (glibc), else nothing."""
    if _TRIM is not None:
        _TRIM(0)
