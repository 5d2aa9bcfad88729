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
from enum import IntEnum

MAGIC = b"FDPROF1\n"
#: magic, pid, clock anchor (monotonic ns, epoch ns), role string (utf-8, 32 bytes, NUL padded)
FILE_HEADER = struct.Struct("<8sIqq32s")
RECORD_HEADER = struct.Struct("<BBHI")


class Kind(IntEnum):
    STRING = 1  # payload: id u32, utf-8 bytes
    SPAN_BEGIN = 2  # payload: span id u64, parent id u64, name id u32, pad u32, t0 i64
    SPAN_END = 3  # payload: span id u64, t1 i64
    ATTR_INT = 4  # payload: span id u64, key id u32, pad u32, value i64
    ATTR_FLOAT = 5  # payload: span id u64, key id u32, pad u32, value f64
    ATTR_STR = 6  # payload: span id u64, key id u32, value string id u32
    ATTR_INTS = 7  # payload: span id u64, key id u32, count u32, count × i32
    SYNC = 8  # payload: span id u64, obj id u32, op u32 (SyncOp), seq i64, t i64
    THREAD_NAME = 9  # payload: name string id u32
    CONTEXT = 10  # payload: span id u64, trace id 16 bytes, remote parent span id u64


class SyncOp(IntEnum):
    RELEASE = 1
    ACQUIRE = 2


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

#: sequence number meaning "none" (locks pair in time order)
NO_SEQ = -1
