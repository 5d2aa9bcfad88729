"""Reader of native run directories: ``run.json`` plus one ``.rec`` record file per process.

Record files can hold tens of millions of records, so this reader does not build a Python
object per record: one tight loop finds where each record starts (records vary in length),
then every fixed-size kind is decoded at once by numpy through a byte-strided view of the
file. Only strings and the per-record offsets pass through Python; attribute values stay typed
from record to column (:mod:`fdprof.trace.attrs`), never passing through text.

Timestamps are ``time.monotonic_ns()``; each file's header anchors it to the epoch. Processes
of one run share the host's monotonic clock, so when their anchors agree (within
:data:`fdprof.formats.records.SAME_CLOCK_NS`) one common offset is applied: cross-process order
stays exactly as the monotonic clock saw it instead of being jittered by each anchor's own
measurement error (:func:`fdprof.formats.records.epoch_offsets`, the rule the live
OpenTelemetry export follows too).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from fdprof import files
from fdprof import semconv as S
from fdprof.errors import FdprofError, short
from fdprof.formats import records as R
from fdprof.formats.rundir import MANIFEST, RECORD_NAME, RUN_FORMAT
from fdprof.trace import attrs as A
from fdprof.trace import conventions as C
from fdprof.trace import limits, pyspy
from fdprof.trace.assemble import assemble, on_epoch
from fdprof.trace.attrs import AttrsBuilder
from fdprof.trace.jsonstream import file_kind, loads
from fdprof.trace.model import TEXT, Trace

MASK64 = (1 << 64) - 1

_NUMPY_CODES = {"B": "u1", "H": "u2", "I": "u4", "Q": "u8", "q": "i8", "d": "f8", "s": "V"}


def _dtype(layout: struct.Struct) -> np.dtype:
    """The packed numpy record type of a whole record: 8-byte header, then ``layout``."""
    fields = [("kind", "u1"), ("flags", "u1"), ("length", "<u2"), ("tid", "<u4")]
    for i, (count, code) in enumerate(re.findall(r"(\d*)([a-zA-Z])", layout.format[1:])):
        np_code = _NUMPY_CODES[code]
        fields.append((f"f{i}", f"V{count}" if np_code == "V" else f"<{np_code}"))
    dt = np.dtype(fields)
    assert dt.itemsize == R.RECORD_HEADER.size + layout.size
    return dt


_DTYPES = {
    kind: _dtype(layout)
    for kind, layout in (
        (R.Kind.SPAN_BEGIN, R.SPAN_BEGIN),
        (R.Kind.SPAN_END, R.SPAN_END),
        (R.Kind.ATTR_INT, R.ATTR_INT),
        (R.Kind.ATTR_FLOAT, R.ATTR_FLOAT),
        (R.Kind.ATTR_STR, R.ATTR_STR),
        (R.Kind.SYNC, R.SYNC),
        (R.Kind.THREAD_NAME, R.THREAD_NAME),
        (R.Kind.CONTEXT, R.CONTEXT),
        (R.Kind.ATTR_INTS, R.ATTR_INTS),  # the fixed part; the values follow
    )
}
_KNOWN = set(_DTYPES) | {R.Kind.STRING}
_CONTEXT_FLAGS = (R.CONTEXT_PARENT, R.CONTEXT_LINK)  # STRING records are decoded one by one
#: the fewest payload bytes of each kind: its fixed fields
_LEAST_PAYLOAD = {kind: dt.itemsize - R.RECORD_HEADER.size for kind, dt in _DTYPES.items()}
_LEAST_PAYLOAD[R.Kind.STRING] = R.STRING.size


@dataclass
class _File:
    """The decoded columns of one record file (times still monotonic)."""

    pid: int
    role: str
    offset_ns: int
    #: the file's header: its clock anchors also tell this process apart from any other
    header: R.FileHeader
    strings: dict[int, str] = field(default_factory=dict)
    spans: dict[str, np.ndarray | pa.Array] = field(default_factory=dict)
    #: typed attribute parts: (key, kind, span ids, values, record offsets)
    attrs: list[tuple[str, str, np.ndarray, pa.Array, np.ndarray]] = field(default_factory=list)
    syncs: dict[str, np.ndarray | pa.Array] = field(default_factory=dict)
    contexts: np.ndarray | None = None
    thread_names: dict[int, str] = field(default_factory=dict)
    unended: int = 0
    n_spans: int = 0
    n_syncs: int = 0

    def text(self, ids: np.ndarray, what: str, kind: pa.DataType = TEXT) -> pa.Array:
        """The strings of ``ids`` as an Arrow column, taken from one small table of this file's
        strings: no Python string (or pointer to one) per row. The table holds the strings the
        file defines, in id order, whatever their ids (an id may be anything up to 2^32)."""
        known = np.fromiter(self.strings, dtype=np.int64, count=len(self.strings))
        order = np.argsort(known)
        known = known[order]
        texts = list(self.strings.values())
        at = np.searchsorted(known, ids)
        if len(ids) and (
            (at >= len(known)).any() or (known[np.minimum(at, len(known) - 1)] != ids).any()
        ):
            raise FdprofError(f"record file of pid {self.pid}: {what} refers to an unknown string")
        return pa.array([texts[i] for i in order.tolist()], kind).take(at)


def _decode(path: Path, data: bytearray | None) -> _File | None:
    if data is None or not any(data[: len(R.MAGIC)]):
        return None
    try:
        header = R.read_header(data)
    except ValueError as exc:
        raise FdprofError(f"{path}: {exc}") from None
    out = _File(
        signed32(header.pid), header.role, header.epoch_anchor_ns - header.mono_anchor_ns, header
    )
    offs = R.record_offsets(data, header.size)
    raw = np.frombuffer(data, dtype=np.uint8)
    kinds = raw[offs]
    unknown = set(np.unique(kinds).tolist()) - _KNOWN
    if unknown:
        raise FdprofError(f"{path}: unknown record kind {min(unknown)} (not an fdprof/1 file?)")
    _check_lengths(path, offs, kinds, raw[offs + 2] | raw[offs + 3].astype(np.int64) << 8)

    def columns(kind: R.Kind, *names: str) -> list[np.ndarray]:
        """Compact copies of some fields of every ``kind`` record (no names: whole records).
        Copying whole records, whose field views kept them alive, raised a load's peak memory."""
        dt = _DTYPES[kind]
        view = np.ndarray((len(data) - dt.itemsize + 1,), dtype=dt, buffer=data, strides=(1,))
        at = offs[kinds == kind]
        return [view[name][at] for name in names] if names else [view[at]]

    for off in offs[kinds == R.Kind.STRING].tolist():
        length = data[off + 2] | data[off + 3] << 8
        (sid,) = R.STRING.unpack_from(data, off + 8)
        try:  # the probes write whole UTF-8 characters, a cut string included
            out.strings[sid] = data[off + 12 : off + 8 + length].decode()
        except UnicodeDecodeError:
            raise FdprofError(f"{path}: the STRING record at offset {off} is not UTF-8 "
                              "text") from None  # fmt: skip
    for what, rank in (("dp", header.dp_rank), ("tp", header.tp_rank)):
        if rank < -1:
            raise FdprofError(f"{path}: the header's {what} rank {rank} is not a rank (>= 0; "
                              "-1: unknown)")  # fmt: skip

    span_id, parent_id, name_id, start, tid = columns(
        R.Kind.SPAN_BEGIN, "f0", "f1", "f2", "f4", "tid"
    )
    span_id = span_id.view(np.int64)
    _unique_span_ids(path, span_id)
    end_id, end_t = columns(R.Kind.SPAN_END, "f0", "f1")
    ends = np.full(len(span_id), -1, dtype=np.int64)
    pos = pd.Index(span_id).get_indexer(end_id.view(np.int64))
    ends[pos[pos >= 0]] = on_epoch(end_t[pos >= 0], out.offset_ns, str(path))
    del end_id, end_t, pos
    out.unended = int((ends == -1).sum())
    out.spans = {
        "span_id": span_id,
        "parent_id": parent_id.view(np.int64),
        "name": out.text(name_id, "a span name"),
        "start": on_epoch(start, out.offset_ns, str(path)),
        "end": ends,
        "tid": signed32(tid),
    }
    out.n_spans = len(span_id)

    _decode_attrs(data, offs, kinds, columns, out)

    sync_span, obj, ops, seq, time, sync_tid, sync_flags = columns(
        R.Kind.SYNC, "f0", "f1", "f2", "f3", "f4", "tid", "flags"
    )
    bad_op = ~np.isin(ops, (R.SyncCode.RELEASE, R.SyncCode.ACQUIRE))
    if bad_op.any():
        raise FdprofError(
            f"{path}: a sync record's op is {int(ops[bad_op][0])}: should be "
            f"{R.SyncCode.RELEASE} ({R.SyncCode.RELEASE.op}) or {R.SyncCode.ACQUIRE} "
            f"({R.SyncCode.ACQUIRE.op})"
        )
    out.syncs = {
        "op": pa.array([code.op for code in R.SyncCode], TEXT).take(ops - R.SyncCode.RELEASE),
        "obj": out.text(obj, "a sync object"),
        "seq": seq,
        "keyed": R.sync_keyed(header.version, sync_flags, seq),
        "time": on_epoch(time, out.offset_ns, str(path)),
        "tid": signed32(sync_tid),
        "span_id": sync_span.view(np.int64),
    }
    out.n_syncs = len(ops)
    (out.contexts,) = columns(R.Kind.CONTEXT)
    strange = out.contexts["flags"][~np.isin(out.contexts["flags"], _CONTEXT_FLAGS)]
    if len(strange):
        raise FdprofError(f"{path}: a CONTEXT record's flags are {int(strange[0])}: should be "
                          f"{R.CONTEXT_PARENT} (parent) or {R.CONTEXT_LINK} (link)")  # fmt: skip
    name_tid, name_id = columns(R.Kind.THREAD_NAME, "tid", "f0")
    for thread, text in zip(
        name_tid.tolist(), out.text(name_id, "a thread name").to_pylist(), strict=True
    ):
        out.thread_names[thread] = text
    return out


def _check_lengths(path: Path, offs: np.ndarray, kinds: np.ndarray, lengths: np.ndarray) -> None:
    """Every record at least as long as its kind's fixed fields: a shorter one (a length edited,
    a count running past the end of the file) would have them read from the next record, or
    from past the end of the data."""
    for kind, least in _LEAST_PAYLOAD.items():
        cut = np.flatnonzero((kinds == kind) & (lengths < least))
        if len(cut):
            length, at = int(lengths[cut[0]]), int(offs[cut[0]])
            raise FdprofError(
                f"{path}: a {R.Kind(kind).name} record of {length} bytes at offset {at}, "
                f"shorter than its {least} bytes of fields"
            )


def _decode_attrs(data: bytes, offs: np.ndarray, kinds: np.ndarray, columns, out: _File) -> None:
    """Attribute records as typed parts, one per (key, record kind): ints, floats and int lists
    straight from the record bytes, strings from the file's string table; each part keeps the
    records' offsets, so a key set twice on a span keeps the later record's value."""
    list_offs = offs[kinds == R.Kind.ATTR_INTS]
    list_span, list_key, counts, lengths = columns(R.Kind.ATTR_INTS, "f0", "f1", "f2", "length")
    if (lengths != R.ATTR_INTS.size + 4 * counts.astype(np.int64)).any():
        raise FdprofError(f"record file of pid {out.pid}: an int-list attribute record's count "
                          "does not match its length")  # fmt: skip
    int_span, int_key, int_value = columns(R.Kind.ATTR_INT, "f0", "f1", "f3")
    float_span, float_key, float_value = columns(R.Kind.ATTR_FLOAT, "f0", "f1", "f3")
    str_span, str_key, str_value = columns(R.Kind.ATTR_STR, "f0", "f1", "f2")
    parts = [
        (A.INT, offs[kinds == R.Kind.ATTR_INT], int_span, int_key, pa.array(int_value)),
        (A.FLOAT, offs[kinds == R.Kind.ATTR_FLOAT], float_span, float_key, pa.array(float_value)),
        (A.STR, offs[kinds == R.Kind.ATTR_STR], str_span, str_key,
         out.text(str_value, "a string attribute", A.ARROW_TYPES[A.STR])),
        (A.INTS, list_offs, list_span, list_key, _int_lists(data, list_offs, counts)),
    ]  # fmt: skip
    for kind, order, span, key, values in parts:
        if not len(span):
            continue
        span = span.view(np.int64)
        key = key.astype(np.int64)
        ids = np.unique(key)
        for key_id, name in zip(ids.tolist(), out.text(ids, "an attribute key").to_pylist(),
                                strict=True):  # fmt: skip
            if len(ids) == 1:
                out.attrs.append((name, kind, span, values, order))
                continue
            rows = np.flatnonzero(key == key_id)
            out.attrs.append((name, kind, span[rows], values.take(pa.array(rows)), order[rows]))


def _int_lists(data: bytes, offs: np.ndarray, counts: np.ndarray) -> pa.ListArray:
    """Each ATTR_INTS record's values as one list<int64> column, gathered in numpy rather than
    one Python list per record."""
    counts = counts.astype(np.int64)
    ends = np.cumsum(counts)
    first = offs + R.RECORD_HEADER.size + R.ATTR_INTS.size  # byte offset of each first value
    position = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - counts, counts)
    at = np.repeat(first, counts) + 4 * position
    # an int32 at every byte offset (stride 1): records, and so values, are not aligned
    ints = np.ndarray((max(len(data) - 3, 0),), dtype="<i4", buffer=data, strides=(1,))
    offsets = pa.array(np.concatenate([[0], ends]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(ints[at].astype(np.int64)))


def _unique_span_ids(path: Path, span_id: np.ndarray) -> None:
    ids, counts = np.unique(span_id, return_counts=True)
    if len(ids) != len(span_id):
        twice = int(ids[counts > 1][0])
        raise FdprofError(f"{path}: {int((counts > 1).sum()):,} span id(s) begin more than once "
                          f"(e.g. {twice & MASK64:#x}): not one process's records")  # fmt: skip


def _manifest(path: Path, trace: Trace) -> dict[str, Any]:
    manifest_path = path / MANIFEST
    if not os.path.lexists(manifest_path):
        trace.warn(f"{path}: no {MANIFEST} (run manifest); reading the .rec files alone",
                   "no_manifest")  # fmt: skip
        return {}
    size = limits.current().event_size
    data = _read_inside(path, MANIFEST, size + 1 if size else None)
    if size and len(data) > size:
        raise limits.exceeded(f"{manifest_path}: larger than the maximum event size", "event_size")
    try:
        manifest = loads(data)
    except ValueError as exc:  # not UTF-8, not JSON
        raise FdprofError(f"{manifest_path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise FdprofError(f"{manifest_path}: nested deeper than JSON decoding allows") from None
    if not isinstance(manifest, dict) or manifest.get("format") != RUN_FORMAT:
        raise FdprofError(f"{manifest_path}: not an {RUN_FORMAT} manifest")
    limits.check_depth(manifest, str(manifest_path))
    _check_manifest(manifest_path, manifest)
    status = manifest.get("status")
    if status != "ok":
        trace.warn(f"run status is {status!r}: records are read up to each process's last one",
                   "run_not_ok")  # fmt: skip
    return manifest


#: manifest fields and the types they may have (None: absent or null)
_MANIFEST_TYPES = {"status": str, "config": dict, "results": dict, "error": str, "processes": list}
_PROCESS_TYPES = {"pid": int, "record": str, "role": str, "name": str, "dp_rank": int,
                  "tp_rank": int, "exitcode": int}  # fmt: skip


def _check_manifest(where: Path, manifest: dict[str, Any]) -> None:
    """Each field the reader uses of the type it needs; one line naming the first that is
    not."""
    for key, kind in _MANIFEST_TYPES.items():
        if manifest.get(key) is not None and type(manifest[key]) is not kind:
            raise FdprofError(f"{where}: {key!r} should be {_NAMES[kind]}, not "
                              f"{short(manifest[key])}")  # fmt: skip
    procs = manifest.get("processes") or []
    limits.check(len(procs), "processes", f"{where}: processes declared")
    for i, proc in enumerate(procs):
        if type(proc) is not dict:
            raise FdprofError(f"{where}: processes[{i}] should be an object, not {short(proc)}")
        for key, kind in _PROCESS_TYPES.items():
            if proc.get(key) is not None and type(proc[key]) is not kind:
                raise FdprofError(f"{where}: processes[{i}].{key} should be {_NAMES[kind]}, not "
                                  f"{short(proc[key])}")  # fmt: skip
        for key in ("dp_rank", "tp_rank"):
            if proc.get(key) is not None and not -1 <= proc[key] < 1 << 31:
                raise FdprofError(f"{where}: processes[{i}].{key} {proc[key]} is not a rank "
                                  "(>= 0; -1: unknown)")  # fmt: skip
        # a record header's 32-bit pid: negative ones are a converted foreign trace's
        # synthetic processes (native_writer)
        if proc.get("pid") is not None and not -(1 << 31) <= proc["pid"] < 1 << 31:
            raise FdprofError(f"{where}: processes[{i}].pid {proc['pid']} is not a process id")


_NAMES = {str: "a string", dict: "an object", list: "a list", int: "an integer"}


def _record_paths(
    path: Path, manifest: dict[str, Any], trace: Trace
) -> list[tuple[Path, int, str]]:
    """The manifest's record files, with the pid each should hold (-1: any) and who says so,
    when it names them (others in the directory are not this run's: warned about, not read),
    else every ``*.rec``. A name must be a file of this directory: no ``..``, no absolute
    path."""
    paths = sorted(path.glob("*.rec"))
    named: list[tuple[Path, int, str]] = []
    for i, proc in enumerate(manifest.get("processes") or []):
        record = proc.get("record")
        if not record:
            continue
        if record in (".", "..") or "/" in record or "\\" in record or "\0" in record:
            raise FdprofError(f"{path / MANIFEST}: processes[{i}].record {short(record)} is not "
                              "a file name in the run directory")  # fmt: skip
        pid = proc["pid"] if proc.get("pid") is not None else -1
        named.append((path / record, pid, f"{MANIFEST} says"))
        if not os.path.lexists(path / record):
            trace.warn(f"process {proc.get('pid')}: record file {record} is missing",
                       "missing_record")  # fmt: skip
    if not named:  # the probe names files <role>-<dp rank>-<pid>.rec
        return [(p, _pid_in_name(p), "its name says") for p in paths] or _no_records(path)
    names = {p for p, _, _ in named}
    strangers = [p.name for p in paths if p not in names]
    if strangers:
        trace.warn(f"not read, not in {MANIFEST}: {', '.join(strangers)}", "stray_record",
                   len(strangers))  # fmt: skip
    return [n for n in named if os.path.lexists(n[0])] or _no_records(path)


def _pid_in_name(path: Path) -> int:
    match = RECORD_NAME.match(path.name)
    return int(match["pid"]) if match else -1


def _no_records(path: Path):
    raise FdprofError(f"{path}: no .rec record files (not an fdprof run directory?)")


def _read_inside(run: Path, name: str, most: int | None = None) -> bytearray:
    """The bytes of the file ``name`` of run directory ``run``, if it is a regular file there:
    not a symbolic link out of the directory (a record file of another run, ``/etc/shadow``),
    a FIFO (a read would block for ever) or a device (``/dev/zero``: it never ends). Holes
    (:func:`_read_chunks`) are skipped; at most ``most`` bytes."""
    path = run / name
    real = files.resolved(path)
    if real.parent != files.resolved(run):
        raise FdprofError(f"{path}: a symbolic link out of the run directory (to {real}); only "
                          "the run's own files are read")  # fmt: skip
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FdprofError(f"{path}: cannot open ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FdprofError(f"{path}: not a regular file ({file_kind(info.st_mode)})")
        return _read_chunks(fd, info.st_size if most is None else min(info.st_size, most))
    finally:
        os.close(fd)


def _read_chunks(fd: int, size: int) -> bytearray:
    """The first ``size`` bytes of a file, less the :data:`R.CHUNK`-sized chunks that are holes
    only (a chunk is never shared by two records, so dropping a whole chunk of zeros changes no
    record's framing): a sparse file of 8 GiB holding one chunk costs one chunk of memory."""
    starts: list[int] = []
    pos = 0
    while pos < size:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole from here
                break
            starts.extend(range(pos, size, R.CHUNK))  # no SEEK_DATA here: every chunk
            break
        start = pos - pos % R.CHUNK
        if start >= size:
            break
        starts.append(start)
        pos = start + R.CHUNK
    out = bytearray(sum(min(R.CHUNK, size - s) for s in starts))
    view = memoryview(out)
    at = 0
    for start in starts:
        n = min(R.CHUNK, size - start)
        got = os.preadv(fd, [view[at : at + n]], start)
        at += got
        if got < n:  # the file shrank while read: what was there
            break
    del view
    del out[at:]
    return out


def sniff(path: Path, head: bytes) -> bool:
    return path.is_dir()


def read(path: Path) -> Trace:
    """The trace of a run directory; a run whose processes were killed reads up to their
    last complete record, with a warning for each span left open."""
    trace = Trace(meta={"format": "native", "path": str(path)})
    if not os.path.lexists(path / MANIFEST) and not any(path.glob("*.rec")):
        raise FdprofError(f"{path}: neither {MANIFEST} nor .rec files (not an fdprof run)")
    manifest = _manifest(path, trace)
    for k in ("config", "results", "status", "error"):
        if k in manifest:
            trace.meta[k] = manifest[k]
    records = _record_paths(path, manifest, trace)
    limits.check(len(records), "processes", f"{path}: record files")
    files = []
    for rec, pid, said in records:
        f = _decode(rec, _read_inside(path, rec.name))
        if f is None:
            continue
        if pid >= 0 and f.pid != pid:
            raise FdprofError(f"{rec}: holds the records of pid {f.pid}, but {said} pid {pid}: "
                              "not this run's file")  # fmt: skip
        files.append(f)
    if not files:
        raise FdprofError(f"{path}: every record file is empty")
    _unique_span_ids(path, np.concatenate([f.spans["span_id"] for f in files]))
    _share_clock(files)
    by_pid = {
        p["pid"]: p for p in manifest.get("processes") or [] if isinstance(p, dict) and "pid" in p
    }
    _build(trace, files, by_pid)
    samples = pyspy.read(path, {f.pid: f.offset_ns for f in files})
    if samples is not None:
        trace.meta["pyspy"] = samples
    return trace


def _share_clock(files: list[_File]) -> None:
    """Put every file on one offset when all anchors read the same host clock (module doc)."""
    for f, offset in zip(files, R.epoch_offsets([f.header for f in files]), strict=True):
        shift = offset - f.offset_ns
        if not shift:
            continue
        where = f"process {f.pid}"
        f.spans["start"] = on_epoch(f.spans["start"], shift, where)
        f.spans["end"] = on_epoch(f.spans["end"], shift, where, unset=True)
        f.syncs["time"] = on_epoch(f.syncs["time"], shift, where)
        f.offset_ns = offset


def _build(trace: Trace, files: list[_File], by_pid: dict[int, dict[str, Any]]) -> None:
    def cat(table: str, name: str) -> np.ndarray | pa.Array:
        """One column of every file, each file's part dropped as soon as it is copied."""
        parts = [getattr(f, table).pop(name) for f in files]
        if isinstance(parts[0], pa.Array):
            return pa.concat_arrays(parts)
        return np.concatenate(parts)

    def per_file(table: str, value) -> np.ndarray | pa.Array:
        """A column holding each file's ``value`` on each of its rows (strings as Arrow)."""
        values = [value(f) for f in files]
        which = np.repeat(np.arange(len(files)), [getattr(f, f"n_{table}") for f in files])
        if isinstance(values[0], str):
            return pa.array(values, TEXT).take(which)
        return np.array(values, dtype=np.int64)[which]

    roles = {f.pid: by_pid.get(f.pid, {}).get("role") or f.role for f in files}
    span_id = cat("spans", "span_id")
    parent_id = cat("spans", "parent_id")
    trace_id = np.full(len(span_id), None, dtype=object)
    links = _contexts(files, span_id, parent_id, trace_id)
    builder = AttrsBuilder()
    for f in files:
        for key, kind, ids, values, order in f.attrs:
            builder.add(key, ids, values, kind, order)
        f.attrs.clear()  # the per-file parts, so they are not alive beside the columns
    if links:
        links_array = pa.array([tps for _, tps in links], A.ARROW_TYPES[A.STRS])
        builder.add(S.LINKS, np.array([sid for sid, _ in links], np.int64), links_array, A.STRS)
    spans = {
        "span_id": span_id,
        "parent_id": parent_id,
        "name": cat("spans", "name"),
        "start": cat("spans", "start"),
        "end": cat("spans", "end"),
        "pid": per_file("spans", lambda f: f.pid),
        "tid": cat("spans", "tid"),
        "role": per_file("spans", lambda f: roles[f.pid]),
        "trace_id": pa.array(_inherit(span_id, parent_id, trace_id), TEXT),
    }
    syncs = {k: cat("syncs", k) for k in ("op", "obj", "seq", "keyed", "time", "tid", "span_id")}
    syncs["pid"] = per_file("syncs", lambda f: f.pid)
    processes = {
        "pid": [f.pid for f in files],
        "role": [roles[f.pid] for f in files],
        "name": [by_pid.get(f.pid, {}).get("name") or roles[f.pid] for f in files],
        "anchored": [True] * len(files),
        # the manifest's ranks where it has them, else the record file's header's
        "dp_rank": [
            _rank(by_pid.get(f.pid, {}).get("dp_rank"), f.header.dp_rank, "dp_rank") for f in files
        ],
        "tp_rank": [
            _rank(by_pid.get(f.pid, {}).get("tp_rank"), f.header.tp_rank, "tp_rank") for f in files
        ],
    }
    assemble(trace, spans, builder.build(), syncs, processes)
    trace.meta["thread_names"] = {
        f"{f.pid}/{tid}": name for f in files for tid, name in f.thread_names.items()
    }
    #: pid -> its file's epoch anchor: with the pid, it names one process of one run
    trace.meta["epoch_anchors"] = {f.pid: f.header.epoch_anchor_ns for f in files}
    unended = sum(f.unended for f in files)
    if unended:
        trace.warn(f"{unended} span(s) never ended (end = -1): a process was killed or cut",
                   "unended_span", unended)  # fmt: skip


def _rank(manifest: Any, header: int, key: str) -> int:
    got = C.rank(manifest, f"{MANIFEST} {key}")
    return got if got >= 0 else header


def _contexts(
    files: list[_File], span_id: np.ndarray, parent_id: np.ndarray, trace_id: np.ndarray
) -> list[tuple[int, list[str]]]:
    """Apply CONTEXT records: a remote parent sets ``trace_id`` (and ``parent_id`` when the
    span has no local parent); links become the ``fd.links`` attribute (traceparents)."""
    index = pd.Index(span_id)
    links: dict[int, list[str]] = {}
    for f in files:
        for rec in f.contexts.tolist():
            sid, tid_bytes, remote = rec[4], rec[5], rec[6]
            sid = int(np.uint64(sid).view(np.int64))
            if rec[1] == R.CONTEXT_LINK:
                links.setdefault(sid, []).append(f"00-{bytes(tid_bytes).hex()}-{remote:016x}-01")
                continue
            pos = index.get_indexer([sid])[0]
            if pos < 0:
                continue
            trace_id[pos] = bytes(tid_bytes).hex()
            if parent_id[pos] == 0:
                parent_id[pos] = np.uint64(remote).view(np.int64)
    return list(links.items())


def _inherit(span_id: np.ndarray, parent_id: np.ndarray, trace_id: np.ndarray) -> np.ndarray:
    """Children without their own trace id take their parent's, down the tree."""
    if np.equal(trace_id, None).all():
        return trace_id
    index = pd.Index(span_id)
    parent_pos = index.get_indexer(parent_id)
    for _ in range(64):
        missing = np.flatnonzero(np.equal(trace_id, None) & (parent_pos >= 0))
        fill = trace_id[parent_pos[missing]]
        known = ~np.equal(fill, None)
        if not known.any():
            break
        trace_id[missing[known]] = fill[known]
    return trace_id


def signed32(ids):
    """Record pids and tids (unsigned 32 bits) as the signed ids they were written from: a
    foreign trace's synthetic negative ids round-trip (Linux ids stay below 2**22)."""
    if isinstance(ids, int):
        return ids - (1 << 32) if ids >= 1 << 31 else ids
    return np.asarray(ids).astype(np.uint32).view(np.int32).astype(np.int64)
