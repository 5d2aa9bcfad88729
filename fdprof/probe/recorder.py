"""The native recorder sink: fixed-layout records appended to a memory-mapped per-process file.

Writing into a shared file mapping means a record is in the page cache the moment it is
written: a process killed with SIGKILL or leaving through ``os._exit`` loses nothing that it
recorded, and the hot path makes no system call. The file grows in chunks; a record never
straddles a chunk, and a zero kind byte means "rest of this chunk unused".
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from pathlib import Path

from fdprof.probe import records as R

CHUNK = 1 << 20


class Recorder:
    """Appends records for one process. Thread-safe; one instance per process."""

    def __init__(self, path: str | os.PathLike, role: str) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._lock = threading.Lock()
        self._maps: list[mmap.mmap] = []
        self._buf: mmap.mmap | None = None
        self._off = 0
        self._base = 0
        self._strings: dict[str, int] = {}
        self._threads_named: set[int] = set()
        self.records = 0
        self._grow()
        header = R.FILE_HEADER.pack(
            R.MAGIC, os.getpid(), time.monotonic_ns(), time.time_ns(), role.encode()[:32]
        )
        self._buf[: len(header)] = header
        self._off = len(header)

    def _grow(self) -> None:
        self._base = len(self._maps) * CHUNK
        os.ftruncate(self._fd, self._base + CHUNK)
        self._buf = mmap.mmap(self._fd, CHUNK, offset=self._base)
        self._maps.append(self._buf)
        self._off = 0

    def _reserve(self, size: int) -> int:
        """Offset in the current chunk for ``size`` bytes; call with the lock held."""
        if self._off + size > CHUNK:
            self._grow()
        off = self._off
        self._off = off + size
        self.records += 1
        return off

    def _put(self, kind: int, layout, *fields, flags: int = 0) -> None:
        size = R.RECORD_HEADER.size + layout.size
        with self._lock:
            off = self._reserve(size)
            buf = self._buf
            R.RECORD_HEADER.pack_into(buf, off, kind, flags, layout.size, threading.get_native_id())
            layout.pack_into(buf, off + R.RECORD_HEADER.size, *fields)

    def intern(self, text: str) -> int:
        """Id of ``text`` in this file; writes its STRING record the first time."""
        sid = self._strings.get(text)
        if sid is not None:
            return sid
        data = text.encode()
        with self._lock:
            sid = self._strings.get(text)
            if sid is not None:
                return sid
            sid = len(self._strings) + 1
            size = R.RECORD_HEADER.size + R.STRING.size + len(data)
            off = self._reserve(size)
            R.RECORD_HEADER.pack_into(
                self._buf,
                off,
                R.Kind.STRING,
                0,
                R.STRING.size + len(data),
                threading.get_native_id(),
            )
            R.STRING.pack_into(self._buf, off + R.RECORD_HEADER.size, sid)
            start = off + R.RECORD_HEADER.size + R.STRING.size
            self._buf[start : start + len(data)] = data
            self._strings[text] = sid
        return sid

    def name_thread(self, name: str) -> None:
        self._put(R.Kind.THREAD_NAME, R.THREAD_NAME, self.intern(name))

    def span_begin(self, span_id: int, parent_id: int, name_id: int, t0: int) -> None:
        self._put(R.Kind.SPAN_BEGIN, R.SPAN_BEGIN, span_id, parent_id, name_id, 0, t0)

    def span_end(self, span_id: int, t1: int) -> None:
        self._put(R.Kind.SPAN_END, R.SPAN_END, span_id, t1)

    def attr_int(self, span_id: int, key_id: int, value: int) -> None:
        self._put(R.Kind.ATTR_INT, R.ATTR_INT, span_id, key_id, 0, value)

    def attr_float(self, span_id: int, key_id: int, value: float) -> None:
        self._put(R.Kind.ATTR_FLOAT, R.ATTR_FLOAT, span_id, key_id, 0, value)

    def attr_str(self, span_id: int, key_id: int, value: str) -> None:
        self._put(R.Kind.ATTR_STR, R.ATTR_STR, span_id, key_id, self.intern(value))

    def attr_ints(self, span_id: int, key_id: int, values) -> None:
        data = bytes(memoryview(_as_i32(values)).cast("B"))
        size = R.RECORD_HEADER.size + R.ATTR_INTS.size + len(data)
        with self._lock:
            off = self._reserve(size)
            buf = self._buf
            R.RECORD_HEADER.pack_into(
                buf,
                off,
                R.Kind.ATTR_INTS,
                0,
                size - R.RECORD_HEADER.size,
                threading.get_native_id(),
            )
            R.ATTR_INTS.pack_into(buf, off + R.RECORD_HEADER.size, span_id, key_id, len(data) // 4)
            start = off + R.RECORD_HEADER.size + R.ATTR_INTS.size
            buf[start : start + len(data)] = data

    def sync(self, span_id: int, obj_id: int, op: int, seq: int, t: int) -> None:
        self._put(R.Kind.SYNC, R.SYNC, span_id, obj_id, op, seq, t)

    def context(self, span_id: int, trace_id: bytes, remote_span: int, link: bool) -> None:
        flags = R.CONTEXT_LINK if link else R.CONTEXT_PARENT
        self._put(R.Kind.CONTEXT, R.CONTEXT, span_id, trace_id, remote_span, flags=flags)

    def close(self) -> None:
        """Unmap and trim the file to the bytes written."""
        with self._lock:
            if self._buf is None:
                return
            used = self._base + self._off
            for m in self._maps:
                m.close()
            self._maps.clear()
            self._buf = None
            os.ftruncate(self._fd, used)
            os.close(self._fd)


def _as_i32(values):
    import array

    if isinstance(values, array.array) and values.typecode == "i":
        return values
    return array.array("i", values)
