"""Traces from every source as one model: :func:`load` is the entry point every command uses.

A reader is a ``(sniff, read)`` pair in :data:`READERS`: ``sniff(path, head)`` looks at the
path and the first bytes of its content (decompressed when gzip) and says whether ``read(path)``
understands it. The first reader that claims a path reads it, so the format is picked by
content, not by file name. Adding a reader is one line in :data:`READERS`.
"""

from __future__ import annotations

import gzip
import os
import sqlite3
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from fdprof import settings
from fdprof.errors import FdprofError
from fdprof.trace import (
    chrome,
    native,
    native_writer,
    nsys,
    nvtx_capture,
    otlp,
    perfetto,
    store,
)
from fdprof.trace.join import join as join_run
from fdprof.trace.jsonstream import open_regular
from fdprof.trace.merge import merge
from fdprof.trace.model import Trace

# Arrow's default allocator (mimalloc) keeps what it frees: at the peak of loading a PyTorch
# trace it held 30 MiB beyond the 26 MiB of tables loaded (83 MiB against 52 with the system
# allocator, which gives large frees back). A choice made with ARROW_DEFAULT_MEMORY_POOL stays.
if not settings.is_set(settings.ARROW_MEMORY_POOL):
    pa.set_memory_pool(pa.system_memory_pool())

Sniff = Callable[[Path, bytes], bool]
Read = Callable[[Path], Trace]

#: formats whose ranges carry span ids, so ``load(..., join=RUN_DIR)`` applies
JOINABLE = ("nsys", "nvtx-capture")

#: how many leading bytes a sniffer sees
HEAD_BYTES = 4096

READERS: list[tuple[Sniff, Read]] = [
    (store.sniff, store.read),  # a directory: before the native reader, which takes any
    (nvtx_capture.sniff, nvtx_capture.read),
    (native.sniff, native.read),
    (nsys.sniff, nsys.read),
    (otlp.sniff, otlp.read),
    (chrome.sniff, chrome.read),
]

Write = Callable[[Trace, Path], None]

#: output format -> writer
WRITERS: dict[str, Write] = {
    "native": native_writer.write,
    "perfetto": perfetto.write,
    "otlp-json": otlp.write,
    "parquet": store.write,
}

__all__ = ["READERS", "WRITERS", "Trace", "head", "load", "merge", "output_format", "save"]


def head(path: Path, size: int = HEAD_BYTES) -> bytes:
    """The first ``size`` bytes of ``path``'s content, gunzipped if it is gzip; ``b""`` for a
    directory. A truncated gzip still yields what could be decompressed."""
    if path.is_dir():
        return b""
    try:
        with open_regular(path) as f:
            raw = f.read(size)
            if raw[:2] != b"\x1f\x8b":
                return raw
            f.seek(0)
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = b""
            while len(out) < size:
                chunk = f.read(1 << 16)
                if not chunk:
                    break
                out += inflater.decompress(chunk, size - len(out))
            return out
    except (OSError, zlib.error, gzip.BadGzipFile) as exc:
        raise FdprofError(f"{path}: cannot read ({exc})") from None


#: what a reader may raise on malformed bytes it did not anticipate: still one line, exit 2
_MALFORMED = (
    sqlite3.DatabaseError,
    UnicodeDecodeError,
    struct.error,
    ValueError,
    OverflowError,
    EOFError,
    zlib.error,
    OSError,
)


def _read(read: Read, path: Path) -> Trace:
    try:
        return read(path)
    except _MALFORMED as exc:
        what = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        kind = read.__module__.rsplit(".", 1)[-1]
        raise FdprofError(f"{path}: malformed input for the {kind} reader ({what})") from None


def load(path: str | Path, join: str | Path | None = None) -> Trace:
    """Read the trace at ``path`` with the reader its content calls for, validated.

    ``join``: a native run directory whose records complete an Nsight Systems trace's NVTX
    ranges (matched by the span id each range carries as its payload).
    """
    path = Path(path)
    try:
        os.stat(path)
    except OSError as exc:  # missing, a loop of symbolic links, a directory not searchable
        raise FdprofError(f"{path}: {(exc.strerror or 'cannot be read').lower()}") from None
    first = head(path)
    for sniff, read in READERS:
        if sniff(path, first):
            trace = _read(read, path)
            break
    else:
        raise FdprofError(
            f"{path}: not a trace fdprof can read (expected a native run directory, "
            "Chrome/Perfetto JSON, an Nsight Systems SQLite export, OTLP JSON or a Parquet store)"
        )
    if join is not None:
        if trace.meta.get("format") not in JOINABLE:
            raise FdprofError(f"{path}: --join applies to an Nsight Systems export or NVTX capture")
        run = load(join)
        if run.meta.get("format") != "native":
            raise FdprofError(f"{join}: --join needs a native run directory")
        trace = join_run(trace, run)
    return trace.validate()


def output_format(path: Path) -> str:
    """The format an output path's name asks for: ``*.parquet`` a Parquet store,
    ``*.otlp.json``/``*.jsonl`` OTLP JSON, ``*.json``/``*.json.gz`` Perfetto, a directory or
    a name without suffix a native run."""
    name = path.name.lower()
    if name.endswith(".parquet") or store.is_store(path):
        return "parquet"
    if name.endswith((".otlp.json", ".jsonl")):
        return "otlp-json"
    if name.endswith((".json", ".json.gz")):
        return "perfetto"
    if path.is_dir() or not path.suffix:
        return "native"
    raise FdprofError(f"{path}: cannot tell the output format from the name; pass --to")


def save(trace: Trace, path: str | Path, to: str | None = None) -> str:
    """Write ``trace`` to ``path`` in format ``to`` (default: from the name); returns it."""
    path = Path(path)
    to = to or output_format(path)
    if to not in WRITERS:
        raise FdprofError(f"unknown output format {to!r} (one of {', '.join(WRITERS)})")
    try:
        WRITERS[to](trace, path)
    except OSError as exc:
        raise FdprofError(f"{path}: cannot write ({exc.strerror or exc})") from None
    return to
