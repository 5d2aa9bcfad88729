"""Reader of native run directories: ``run.json`` plus one ``.rec`` record file per process.

Record files can hold tens of millions of records, so this reader does not build a Python
object per record: one tight loop finds where each record starts (records vary in length),
then every fixed-size kind is decoded at once by numpy through a byte-strided view of the
file. Only strings and the per-record offsets pass through Python; attribute values stay typed
from record to column (:mod:`fdprof.trace.attrs`), never passing through text.

Timestamps are ``time.monotonic_ns()``; each file's header anchors it to the epoch. Processes
of one run share the host's monotonic clock, so when their anchors agree (within
:data:`SAME_CLOCK_NS`) one common offset is applied: cross-process order stays exactly as the
monotonic clock saw it instead of being jittered by each anchor's own measurement error
(:func:`fdprof.probe.records.epoch_offsets`, the rule the live OpenTelemetry export follows too).
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from fdprof.errors import FdprofError
from fdprof.probe import records as R
from fdprof.trace import attrs as A
from fdprof.trace import conventions as C
from fdprof.trace.assemble import assemble
from fdprof.trace.attrs import AttrsBuilder
from fdprof.trace.model import TEXT, Trace

MANIFEST = "run.json"
RUN_FORMAT = "fdprof-run/1"
#: anchors (epoch - monotonic) closer than this are taken to be one host's clock
SAME_CLOCK_NS = R.SAME_CLOCK_NS

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
_KNOWN = set(_DTYPES) | {R.Kind.STRING}  # STRING records are decoded one by one


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
        strings: no Python string (or pointer to one) per row."""
        lookup: list[str | None] = [None] * (max(self.strings, default=0) + 1)
        for sid, text in self.strings.items():
            lookup[sid] = text
        used = np.unique(ids).tolist()
        if used and (used[-1] >= len(lookup) or any(lookup[i] is None for i in used)):
            raise FdprofError(f"record file of pid {self.pid}: {what} refers to an unknown string")
        return pa.array(lookup, kind).take(ids)


def _decode(path: Path) -> _File | None:
    data = path.read_bytes()
    if not data.strip(b"\0"):
        return None
    try:
        header = R.read_header(data)
    except ValueError as exc:
        raise FdprofError(f"{path}: {exc}") from None
    out = _File(header.pid, header.role, header.epoch_anchor_ns - header.mono_anchor_ns, header)
    offs = R.record_offsets(data, header.size)
    kinds = np.frombuffer(data, dtype=np.uint8)[offs]
    unknown = set(np.unique(kinds).tolist()) - _KNOWN
    if unknown:
        raise FdprofError(f"{path}: unknown record kind {min(unknown)} (not an fdprof/1 file?)")

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
        out.strings[sid] = data[off + 12 : off + 8 + length].decode(errors="replace")

    span_id, parent_id, name_id, start, tid = columns(
        R.Kind.SPAN_BEGIN, "f0", "f1", "f2", "f4", "tid"
    )
    span_id = span_id.view(np.int64)
    end_id, end_t = columns(R.Kind.SPAN_END, "f0", "f1")
    ends = np.full(len(span_id), -1, dtype=np.int64)
    pos = pd.Index(span_id).get_indexer(end_id.view(np.int64))
    ends[pos[pos >= 0]] = end_t[pos >= 0] + out.offset_ns
    del end_id, end_t, pos
    out.unended = int((ends == -1).sum())
    out.spans = {
        "span_id": span_id,
        "parent_id": parent_id.view(np.int64),
        "name": out.text(name_id, "a span name"),
        "start": start + out.offset_ns,
        "end": ends,
        "tid": tid.astype(np.int64),
    }
    out.n_spans = len(span_id)

    _decode_attrs(data, offs, kinds, columns, out)

    sync_span, obj, ops, seq, time, sync_tid, sync_flags = columns(
        R.Kind.SYNC, "f0", "f1", "f2", "f3", "f4", "tid", "flags"
    )
    bad_op = ~np.isin(ops, (R.SyncOp.RELEASE, R.SyncOp.ACQUIRE))
    if bad_op.any():
        raise FdprofError(
            f"{path}: a sync record's op is {int(ops[bad_op][0])}: should be "
            f"{R.SyncOp.RELEASE} (release) or {R.SyncOp.ACQUIRE} (acquire)"
        )
    out.syncs = {
        "op": pa.array(["release", "acquire"], TEXT).take(ops - R.SyncOp.RELEASE),
        "obj": out.text(obj, "a sync object"),
        "seq": seq,
        "keyed": R.sync_keyed(header.version, sync_flags, seq),
        "time": time + out.offset_ns,
        "tid": sync_tid.astype(np.int64),
        "span_id": sync_span.view(np.int64),
    }
    out.n_syncs = len(ops)
    (out.contexts,) = columns(R.Kind.CONTEXT)
    name_tid, name_id = columns(R.Kind.THREAD_NAME, "tid", "f0")
    for thread, text in zip(
        name_tid.tolist(), out.text(name_id, "a thread name").to_pylist(), strict=True
    ):
        out.thread_names[thread] = text
    return out


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


def _manifest(path: Path, trace: Trace) -> dict[str, Any]:
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        trace.warn(f"{path}: no {MANIFEST} (run manifest); reading the .rec files alone")
        return {}
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FdprofError(f"{manifest_path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != RUN_FORMAT:
        raise FdprofError(f"{manifest_path}: not an {RUN_FORMAT} manifest")
    if not isinstance(manifest.get("processes", []), list):
        raise FdprofError(f"{manifest_path}: 'processes' should be a list")
    status = manifest.get("status")
    if status != "ok":
        trace.warn(f"run status is {status!r}: records are read up to each process's last one")
    return manifest


def _record_paths(path: Path, manifest: dict[str, Any], trace: Trace) -> list[Path]:
    """The manifest's record files when it names them (others in the directory are not this
    run's: warned about, not read), else every ``*.rec``."""
    paths = sorted(path.glob("*.rec"))
    named = []
    for proc in manifest.get("processes", []):
        record = proc.get("record") if isinstance(proc, dict) else None
        if not record:
            continue
        named.append(path / record)
        if not (path / record).exists():
            trace.warn(f"process {proc.get('pid')}: record file {record} is missing")
    if named:
        strangers = [p.name for p in paths if p not in named]
        if strangers:
            trace.warn(f"not read, not in {MANIFEST}: {', '.join(strangers)}")
        paths = [p for p in named if p.exists()]
    if not paths:
        raise FdprofError(f"{path}: no .rec record files (not an fdprof run directory?)")
    return paths


def sniff(path: Path, head: bytes) -> bool:
    return path.is_dir()


def read(path: Path) -> Trace:
    """The trace of a run directory; a run whose processes were killed reads up to their
    last complete record, with a warning for each span left open."""
    trace = Trace(meta={"format": "native", "path": str(path)})
    if not (path / MANIFEST).exists() and not any(path.glob("*.rec")):
        raise FdprofError(f"{path}: neither {MANIFEST} nor .rec files (not an fdprof run)")
    manifest = _manifest(path, trace)
    for k in ("config", "results", "status", "error"):
        if k in manifest:
            trace.meta[k] = manifest[k]
    files = [f for f in (_decode(p) for p in _record_paths(path, manifest, trace)) if f]
    if not files:
        raise FdprofError(f"{path}: every record file is empty")
    _share_clock(files)
    by_pid = {
        p["pid"]: p for p in manifest.get("processes", []) if isinstance(p, dict) and "pid" in p
    }
    _build(trace, files, by_pid)
    return trace


def _share_clock(files: list[_File]) -> None:
    """Put every file on one offset when all anchors read the same host clock (module doc)."""
    for f, offset in zip(files, R.epoch_offsets([f.header for f in files]), strict=True):
        shift = offset - f.offset_ns
        if not shift:
            continue
        f.spans["start"] = f.spans["start"] + shift
        f.spans["end"] = np.where(f.spans["end"] == -1, -1, f.spans["end"] + shift)
        f.syncs["time"] = f.syncs["time"] + shift
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
        builder.add(C.LINKS, np.array([sid for sid, _ in links], np.int64), links_array, A.STRS)
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
        "dp_rank": [_rank(by_pid.get(f.pid, {}).get("dp_rank"), f.header.dp_rank) for f in files],
        "tp_rank": [_rank(by_pid.get(f.pid, {}).get("tp_rank"), f.header.tp_rank) for f in files],
    }
    assemble(trace, spans, builder.build(), syncs, processes)
    trace.meta["thread_names"] = {
        f"{f.pid}/{tid}": name for f in files for tid, name in f.thread_names.items()
    }
    #: pid -> its file's epoch anchor: with the pid, it names one process of one run
    trace.meta["epoch_anchors"] = {f.pid: f.header.epoch_anchor_ns for f in files}
    unended = sum(f.unended for f in files)
    if unended:
        trace.warn(f"{unended} span(s) never ended (end = -1): a process was killed or cut")


def _rank(manifest: Any, header: int) -> int:
    got = C.rank(manifest)
    return got if got >= 0 else max(header, -1)


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
