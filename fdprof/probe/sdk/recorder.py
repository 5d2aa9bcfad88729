"""The native recorder sink: fixed-layout records appended to a memory-mapped per-process file.

Writing into a shared file mapping means a record is in the page cache the moment it is
written: a process killed with SIGKILL or leaving through ``os._exit`` loses nothing that it
recorded, and the hot path makes no system call. The file grows in chunks; a record never
straddles a chunk, and a zero kind byte means "rest of this chunk unused". A record's payload
is written before its header, so a reader tailing the live file never sees half a record.

This is the pure-Python twin of the C extension ``fdprof.probe.sdk._recorder`` (same format, same
methods, same tests); :func:`open_recorder` picks one. Besides the low-level record writers,
both offer the handle methods (``begin``/``end``/``span``/``set_*``/``release``/``acquire``)
that :class:`fdprof.probe.sdk.recording.RecordingProbe` binds directly when the recorder is
its only sink.
"""

from __future__ import annotations

import array
import itertools
import mmap
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from fdprof import files, settings
from fdprof.formats import records as R
from fdprof.formats.records import CHUNK, PID_SHIFT

#: the record header's u16 length bounds a payload
MAX_PAYLOAD = 0xFFFF

#: bumped in a forked child: a recorder made before the fork shares the parent's mapping, so
#: in the child it records nothing (configure() the probe again there)
_fork_generation = 0


def _after_fork_in_child() -> None:
    global _fork_generation
    _fork_generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


class Recorder:
    """Appends records for one process. Thread-safe; one instance per process."""

    def __init__(
        self,
        path: str | os.PathLike,
        role: str,
        dp_rank: int = -1,
        tp_rank: int = -1,
        mode: int = 0o600,
    ) -> None:
        self.path = Path(path)
        # a new file: a link planted under the name is removed, never followed
        self._fd = files.create_new(self.path, mode)
        self._lock = threading.Lock()
        self._maps: list[mmap.mmap] = []
        self._buf: mmap.mmap | None = None
        self._off = 0
        self._base = 0
        self._strings: dict[str, int] = {}
        self._handles: dict[object, int] = {}
        self._ids = itertools.count((os.getpid() << PID_SHIFT) + 1)
        self._generation = _fork_generation
        self.records = 0
        self._grow()
        header = R.pack_header(
            os.getpid(), time.monotonic_ns(), time.time_ns(), role, dp_rank, tp_rank
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

    def _write(self, kind: int, layout, fields: tuple, tail: bytes = b"", flags: int = 0) -> None:
        """One record: payload (fixed ``layout`` fields, then ``tail``) first, header last."""
        with self._lock:
            self._emit(kind, layout, fields, tail, flags)

    def _emit(self, kind: int, layout, fields: tuple, tail: bytes, flags: int) -> None:
        """:meth:`_write` with the lock held."""
        if self._buf is None:
            raise ValueError("recorder is closed")
        if self._generation != _fork_generation:
            return
        length = layout.size + len(tail)
        off = self._reserve(R.RECORD_HEADER.size + length)
        buf = self._buf
        body = off + R.RECORD_HEADER.size
        layout.pack_into(buf, body, *fields)
        if tail:
            buf[body + layout.size : body + length] = tail
        # kind byte last: struct packs field by field, so the header must not go in one call
        header = R.RECORD_HEADER.pack(kind, flags, length, threading.get_native_id())
        buf[off + 1 : off + R.RECORD_HEADER.size] = header[1:]
        buf[off] = kind

    def _put(self, kind: int, layout, *fields, flags: int = 0) -> None:
        self._write(kind, layout, fields, flags=flags)

    def intern(self, text: str) -> int:
        """Id of ``text`` in this file; writes its STRING record the first time."""
        sid = self._strings.get(text)
        if sid is not None:
            return sid
        data = _truncate_utf8(text.encode(), MAX_PAYLOAD - R.STRING.size)
        with self._lock:
            sid = self._strings.get(text)
            if sid is not None:
                return sid
            sid = len(self._strings) + 1
            self._emit(R.Kind.STRING, R.STRING, (sid,), data, 0)
            self._strings[text] = sid
        return sid

    def handle_id(self, handle) -> int:
        """Id of a ``Name``/``Key``/``Obj`` handle's text, cached per handle object."""
        iid = self._handles.get(handle)
        if iid is None:
            iid = self._handles[handle] = self.intern(handle.text)
        return iid

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

    def attr_ints(self, span_id: int, key_id: int, values: Sequence[int]) -> None:
        ints = _as_i32(values)[:_MAX_INTS]
        self._write(R.Kind.ATTR_INTS, R.ATTR_INTS, (span_id, key_id, len(ints)), ints.tobytes())

    def sync(self, span_id: int, obj_id: int, op: int, seq: int, t: int, keyed: bool) -> None:
        """A sync event; ``keyed``: ``seq`` must be matched exactly (else it is ignored)."""
        flags = R.SYNC_KEYED if keyed else 0
        self._put(R.Kind.SYNC, R.SYNC, span_id, obj_id, op, seq if keyed else R.NO_SEQ, t,
                  flags=flags)  # fmt: skip

    def context(self, span_id: int, trace_id: bytes, remote_span: int, link: bool) -> None:
        flags = R.CONTEXT_LINK if link else R.CONTEXT_PARENT
        self._put(R.Kind.CONTEXT, R.CONTEXT, span_id, trace_id, remote_span, flags=flags)

    # -- handle methods: what Probe binds directly when the recorder is its only sink --

    def begin(self, name, parent: int = 0) -> int:
        """Start a span named by handle ``name`` (it may end on another thread); its id."""
        sid = next(self._ids)
        self.span_begin(sid, parent, self.handle_id(name), time.monotonic_ns())
        return sid

    def end(self, sid: int) -> None:
        self.span_end(sid, time.monotonic_ns())

    def span(self, name, parent: int = 0) -> SpanScope:
        return SpanScope(self, name, parent)

    def set_int(self, sid: int, key, value: int) -> None:
        self.attr_int(sid, self.handle_id(key), value)

    def set_float(self, sid: int, key, value: float) -> None:
        self.attr_float(sid, self.handle_id(key), value)

    def set_str(self, sid: int, key, value: str) -> None:
        self.attr_str(sid, self.handle_id(key), value)

    def set_ints(self, sid: int, key, values: Sequence[int]) -> None:
        self.attr_ints(sid, self.handle_id(key), values)

    def release(self, obj, seq: int | None = None, sid: int = 0) -> None:
        """Release ``obj``; with a ``seq`` only the acquire of that seq pairs with it."""
        self._sync_now(R.SyncCode.RELEASE, obj, seq, sid)

    def acquire(self, obj, seq: int | None = None, sid: int = 0) -> None:
        self._sync_now(R.SyncCode.ACQUIRE, obj, seq, sid)

    def _sync_now(self, op: int, obj, seq: int | None, sid: int) -> None:
        keyed = seq is not None
        self.sync(sid, self.handle_id(obj), op, seq if keyed else R.NO_SEQ, time.monotonic_ns(),
                  keyed)  # fmt: skip

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


class SpanScope:
    """``with x.span(name) as sid:`` over anything with ``begin``/``end`` (the recorder, the
    SDK's probe); a class, not a generator: half the cost."""

    __slots__ = ("_rec", "_name", "_parent", "_sid")

    def __init__(self, rec, name, parent: int) -> None:
        self._rec = rec
        self._name = name
        self._parent = parent

    def __enter__(self) -> int:
        self._sid = self._rec.begin(self._name, self._parent)
        return self._sid

    def __exit__(self, *exc) -> bool:
        self._rec.end(self._sid)
        return False


_MAX_INTS = (MAX_PAYLOAD - R.ATTR_INTS.size) // 4


def _as_i32(values) -> array.array:
    if isinstance(values, array.array) and values.typecode == "i":
        return values
    return array.array("i", values)


def _truncate_utf8(data: bytes, limit: int) -> bytes:
    """``data`` cut to at most ``limit`` bytes on a character boundary."""
    if len(data) <= limit:
        return data
    return data[:limit].decode(errors="ignore").encode()


def open_recorder(path: str | os.PathLike, role: str, dp_rank: int = -1, tp_rank: int = -1):
    """The C recorder where it is built (unless ``FDPROF_RECORDER=python``), else this twin.
    ``dp_rank``/``tp_rank`` (-1: unknown) go to the file's header: they scope the process's
    KV pools for the analyses. Both make the file new (as :func:`fdprof.files.create_new`:
    what had the name before is removed, a symbolic link never followed), mode
    ``FDPROF_FILE_MODE``."""
    mode = settings.file_mode()
    if not settings.python_recorder():
        try:
            from fdprof.probe.sdk._recorder import Recorder as CRecorder
        except ImportError:
            pass
        else:
            return CRecorder(path, role, dp_rank, tp_rank, mode)
    return Recorder(path, role, dp_rank, tp_rank, mode)
