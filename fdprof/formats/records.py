"""The native record format: what every process appends to its own file.

One format is the contract between the probe (writer, in Python or C) and the trace reader.
A file is a fixed header followed by variable-length records, each an 8-byte record header
``<BBHI`` (kind, flags, payload length, native thread id) and its payload. Records are only
appended, so a file is readable up to its last complete record even after ``kill -9``:
the reader stops at the first record whose length runs past the end of the data written.

Names (span names, attribute keys, sync objects, string values) are interned: a STRING record
binds an id to UTF-8 text once per process, and later records carry only the id.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from enum import IntEnum
from typing import NamedTuple

import numpy as np

from fdprof import semconv as S

MAGIC = b"FDPROF2\n"
#: span ids are unique per run: ``pid << PID_SHIFT | counter`` (the recorder counts from 1)
PID_SHIFT = 40
#: device span ids are ``pid << PID_SHIFT | DEVICE_SPAN_BIT | n``: unique per run, and apart
#: from the ids the recorder hands out (it counts from 1 below this bit)
DEVICE_SPAN_BIT = 1 << (PID_SHIFT - 1)
#: files grow in chunks of this size; a record never straddles two
CHUNK = 1 << 20
#: magic, pid, clock anchor (monotonic ns, epoch ns), role string (utf-8, 32 bytes, NUL
#: padded), data- and tensor-parallel rank (-1: unknown)
FILE_HEADER = struct.Struct("<8sIqq32sii")
#: the first version's header: no ranks, and a sync's seq -1 meant "unkeyed" (no flag)
MAGIC_V1 = b"FDPROF1\n"
FILE_HEADER_V1 = struct.Struct("<8sIqq32s")
RECORD_HEADER = struct.Struct("<BBHI")
_HEADERS = {MAGIC: FILE_HEADER, MAGIC_V1: FILE_HEADER_V1}


class Kind(IntEnum):
    STRING = 1  # payload: id u32, utf-8 bytes
    SPAN_BEGIN = 2  # payload: span id u64, parent id u64, name id u32, pad u32, t0 i64
    SPAN_END = 3  # payload: span id u64, t1 i64
    ATTR_INT = 4  # payload: span id u64, key id u32, pad u32, value i64
    ATTR_FLOAT = 5  # payload: span id u64, key id u32, pad u32, value f64
    ATTR_STR = 6  # payload: span id u64, key id u32, value string id u32
    ATTR_INTS = 7  # payload: span id u64, key id u32, count u32, count × i32
    SYNC = 8  # payload: span id u64, obj id u32, op u32 (SyncCode), seq i64, t i64; flags below
    THREAD_NAME = 9  # payload: name string id u32
    CONTEXT = 10  # payload: span id u64, trace id 16 bytes, remote span id u64; flags below


class SyncCode(IntEnum):
    """A sync event's op as a SYNC record stores it."""

    RELEASE = 1
    ACQUIRE = 2

    @property
    def op(self) -> S.SyncOp:
        return S.SyncOp[self.name]


STRING = struct.Struct("<I")
SPAN_BEGIN = struct.Struct("<QQIIq")
SPAN_END = struct.Struct("<Qq")
ATTR_INT = struct.Struct("<QIIq")
ATTR_FLOAT = struct.Struct("<QIId")
ATTR_STR = struct.Struct("<QII")
ATTR_INTS = struct.Struct("<QII")
SYNC = struct.Struct("<QIIqq")
THREAD_NAME = struct.Struct("<I")
CONTEXT = struct.Struct("<Q16sQ")

#: CONTEXT record flags: the remote span is the span's parent, or one of its links
CONTEXT_PARENT = 0
CONTEXT_LINK = 1

#: SYNC record flag: the seq must be matched exactly (any int64, -1 included); without it the
#: event pairs in time order (locks) and its seq field is NO_SEQ
SYNC_KEYED = 1
#: the seq field of an unkeyed sync (and, in version 1 files, the only mark of one)
NO_SEQ = -1


_PAYLOADS = {
    Kind.SPAN_BEGIN: SPAN_BEGIN,
    Kind.SPAN_END: SPAN_END,
    Kind.ATTR_INT: ATTR_INT,
    Kind.ATTR_FLOAT: ATTR_FLOAT,
    Kind.ATTR_STR: ATTR_STR,
    Kind.SYNC: SYNC,
    Kind.THREAD_NAME: THREAD_NAME,
    Kind.CONTEXT: CONTEXT,
}


class FileHeader(NamedTuple):
    pid: int
    mono_anchor_ns: int
    epoch_anchor_ns: int
    role: str
    dp_rank: int = -1
    tp_rank: int = -1
    #: 1 or 2 (see :data:`MAGIC_V1`)
    version: int = 2
    #: where the records start
    size: int = FILE_HEADER.size


def pack_header(pid: int, mono_ns: int, epoch_ns: int, role: str, dp_rank: int,
                tp_rank: int) -> bytes:  # fmt: skip
    """The header of a new record file (this version)."""
    return FILE_HEADER.pack(MAGIC, pid & 0xFFFFFFFF, mono_ns, epoch_ns, role.encode()[:32],
                            dp_rank, tp_rank)  # fmt: skip


#: anchors (epoch - monotonic) closer than this are taken to be one host's clock
SAME_CLOCK_NS = 1_000_000


def epoch_offsets(headers: list[FileHeader]) -> list[int]:
    """What to add to each file's monotonic times to put them on the epoch. Processes of one
    run share the host's monotonic clock, so when their anchors agree (within
    :data:`SAME_CLOCK_NS`) they get one common offset, and cross-process order stays exactly
    as the monotonic clock saw it instead of being jittered by each anchor's own measurement
    error. The one rule for the trace reader and the live OpenTelemetry export alike."""
    own = [h.epoch_anchor_ns - h.mono_anchor_ns for h in headers]
    if not own or max(own) - min(own) > SAME_CLOCK_NS:
        return own
    ordered = sorted(own)
    mid = len(ordered) // 2
    # the median in integers: a float64 one is off by up to 2^7 ns at today's epoch
    common = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2
    return [common] * len(own)


def read_header(data: bytes | memoryview) -> FileHeader:
    """The header of a record file of either version; ``ValueError`` if ``data`` is not one."""
    layout = _HEADERS.get(bytes(data[:8]))
    if layout is None or len(data) < layout.size:
        raise ValueError("not an fdprof record file (bad magic)")
    if layout is FILE_HEADER_V1:
        _, pid, mono, epoch, role = layout.unpack_from(data, 0)
        return FileHeader(pid, mono, epoch, role.rstrip(b"\0").decode(), version=1,
                          size=layout.size)  # fmt: skip
    _, pid, mono, epoch, role, dp, tp = layout.unpack_from(data, 0)
    return FileHeader(pid, mono, epoch, role.rstrip(b"\0").decode(), dp, tp, 2, layout.size)


def records_start(data: bytes | memoryview) -> int:
    """Where the records of ``data`` start; its length when it is cut inside the header (no
    records yet); ``ValueError`` if it is not a record file."""
    layout = _HEADERS.get(bytes(data[:8]))
    if layout is None and len(data) >= 8:
        raise ValueError("not an fdprof record file (bad magic)")
    return len(data) if layout is None or len(data) < layout.size else layout.size


def sync_keyed(version: int, flags: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Whether each SYNC record is keyed: its flag, or in version 1 files a seq other than -1."""
    if version == 1:
        return np.asarray(seq) != NO_SEQ
    return (np.asarray(flags) & SYNC_KEYED) != 0


def iter_records(
    data: bytes | memoryview, offset: int | None = None, chunk: int = CHUNK
) -> Iterator[tuple[int, int, int, tuple, int]]:
    """Yield ``(kind, flags, tid, fields, next_offset)`` for each complete record from ``offset``.

    STRING fields are ``(id, text)``; ATTR_INTS fields are ``(span_id, key_id, values)``.
    Stops at the end of the data or at a record cut short, so a file still being written, or
    one whose writer was killed, reads up to its last complete record. A zero kind is the unused
    tail of a chunk (see :mod:`fdprof.probe.sdk.recorder`): reading resumes at the next chunk.
    ``offset`` None: after the file's header.
    """
    if offset is None:
        offset = records_start(data)
    size = len(data)
    head = RECORD_HEADER.size
    while offset + head <= size:
        kind, flags, length, tid = RECORD_HEADER.unpack_from(data, offset)
        if kind == 0:
            offset = (offset // chunk + 1) * chunk
            continue
        end = offset + head + length
        if end > size:
            return
        body = offset + head
        if kind == Kind.STRING:
            (sid,) = STRING.unpack_from(data, body)
            fields: tuple = (sid, bytes(data[body + STRING.size : end]).decode())
        elif kind == Kind.ATTR_INTS:
            span_id, key_id, count = ATTR_INTS.unpack_from(data, body)
            start = body + ATTR_INTS.size
            fields = (span_id, key_id, list(memoryview(data)[start : start + 4 * count].cast("i")))
        else:
            layout = _PAYLOADS.get(kind)
            if layout is None:
                raise ValueError(f"unknown record kind {kind} at offset {offset}")
            fields = layout.unpack_from(data, body)
        yield kind, flags, tid, fields, end
        offset = end


def record_offsets(data: bytes, start: int | None = None) -> np.ndarray:
    """Offsets (int64) of the complete records of ``data``, framed as :func:`iter_records`
    frames them (``start`` None: after the file's header). The walk is serial (records vary in
    length), so it runs in C (``fdprof.formats._records``) where that is built; this loop is its
    reference twin."""
    if start is None:
        start = records_start(data)
    if _c_offsets is not None:
        return np.frombuffer(_c_offsets(data, start, CHUNK), dtype=np.int64)
    return _python_offsets(data, start)


def _python_offsets(data: bytes, start: int) -> np.ndarray:
    offs = array("q")
    append = offs.append
    size = len(data)
    off = start
    while off + RECORD_HEADER.size <= size:
        if data[off] == 0:
            off = (off // CHUNK + 1) * CHUNK
            continue
        end = off + RECORD_HEADER.size + (data[off + 2] | data[off + 3] << 8)
        if end > size:
            break
        append(off)
        off = end
    return np.frombuffer(offs, dtype=np.int64)


try:
    from fdprof.formats._records import offsets as _c_offsets
except ImportError:  # a source checkout not built: the Python walk, same result
    _c_offsets = None
