"""Reader of NVTX capture files (``nvtx-<pid>.cap``, written by ``fdprof/capture/nvtx_inject.c``).

Start/end ranges pair by range id (they may end on another thread), push/pop ranges by
thread and domain. A range whose int64 payload is set keeps it as its span id: that is the
probe's span id, so these spans join to a native run's records. Marks in category ``sync``
(``"release queue:swap"``, payload = sequence number) become sync events.

The format (little-endian): a 64-byte header ``FDNVTX1\\n``, pid u32, ppid u32, monotonic and
epoch anchors i64, capacity u64, dropped u64; then records of an 8-byte header (kind u8,
flags u8, payload length u16, thread id u32) and a payload. A zero kind ends the data: the
rest of the file was never written (the file is sized up front).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.formats.rundir import MANIFEST
from fdprof.trace import conventions as C
from fdprof.trace.attrs import Attrs, AttrsBuilder
from fdprof.trace.jsonstream import loads
from fdprof.trace.model import SCHEMAS, Trace, frame

MAGIC = b"FDNVTX1\n"
FILE_HEADER = struct.Struct("<8sIIqqQQ")
HEADER_SIZE = 64
RECORD_HEADER = struct.Struct("<BBHI")
EVENT = struct.Struct("<QQqIiQIIQ")
END = struct.Struct("<Qq")
SUFFIX = ".cap"
#: subdirectory of a run directory where ``fdprof run --nvtx-capture`` puts the files
RUN_SUBDIR = "nvtx"

DOMAIN, STRING, CATEGORY, THREAD_NAME, START, PUSH, MARK, RANGE_END, POP = range(1, 10)
PAYLOAD_UINT64, PAYLOAD_INT64, PAYLOAD_DOUBLE = 1, 2, 3
MESSAGE_ASCII, MESSAGE_REGISTERED = 1, 3


@dataclass
class CaptureFile:
    """One process's capture, decoded."""

    pid: int
    ppid: int
    mono_anchor: int
    epoch_anchor: int
    dropped: int
    #: bytes in use: header plus complete records
    used: int = HEADER_SIZE
    records: list[tuple[int, int, bytes]] = field(default_factory=list)  # (kind, tid, payload)


def read_file(path: Path) -> CaptureFile:
    """Decode one file up to its first unwritten record (mapped: the zero tail is not read)."""
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size < HEADER_SIZE:
            raise FdprofError(f"{path}: not an NVTX capture file (too short)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[:8] != MAGIC:
                raise FdprofError(f"{path}: not an NVTX capture file (bad magic)")
            _, pid, ppid, mono, epoch, _cap, dropped = FILE_HEADER.unpack_from(data, 0)
            cap = CaptureFile(pid, ppid, mono, epoch, dropped)
            off = HEADER_SIZE
            head = RECORD_HEADER.size
            while off + head <= len(data):
                kind, _flags, length, tid = RECORD_HEADER.unpack_from(data, off)
                end = off + head + length
                if kind == 0 or end > len(data):
                    break
                cap.records.append((kind, tid, data[off + head : end]))
                off = end
            cap.used = off
    return cap


def capture_files(path: str | Path) -> list[Path]:
    """The capture files at ``path``: one file, a folder of them, or a run dir's ``nvtx/``."""
    p = Path(path)
    if p.is_file():
        return [p]
    for folder in (p / RUN_SUBDIR, p):
        files = sorted(folder.glob(f"nvtx-*{SUFFIX}")) if folder.is_dir() else []
        if files:
            return files
    raise FdprofError(f"{path}: no NVTX capture files (nvtx-<pid>{SUFFIX})")


def sniff(path: Path, head: bytes) -> bool:
    """For :data:`fdprof.trace.READERS`: a capture file, or a folder of them (a run
    directory itself is left to the native reader; point at its ``nvtx/`` folder)."""
    if head:
        return head.startswith(MAGIC)
    return Path(path).is_dir() and any(Path(path).glob(f"nvtx-*{SUFFIX}"))


def read(path: Path) -> Trace:
    return read_nvtx_capture(path)


def _text(payload: bytes, start: int) -> str:
    return payload[start:].decode(errors="replace")


def _processes(path: Path) -> dict[int, dict]:
    """``pid -> process entry`` from a ``run.json`` at or above the capture folder."""
    for folder in (path, path.parent, path.parent.parent):
        manifest = folder / MANIFEST
        if manifest.is_file():
            try:
                doc = loads(manifest.read_text())
            except (OSError, ValueError):
                return {}
            procs = doc.get("processes") if isinstance(doc, dict) else None
            # labels only: entries that are not what the native reader checks are skipped
            return {p["pid"]: p for p in procs or [] if isinstance(p, dict)
                    and type(p.get("pid")) is int}  # fmt: skip
    return {}


def read_nvtx_capture(path: str | Path) -> Trace:
    files = capture_files(path)
    caps = [read_file(f) for f in files]
    procs = _processes(Path(path) if Path(path).is_dir() else Path(path).parent)
    strings: dict[int, str] = {}
    domains: dict[int, str] = {0: ""}
    categories: dict[tuple[int, int], str] = {}
    for cap in caps:  # names first: a forked child uses handles its parent registered
        for kind, _tid, p in cap.records:
            if kind == DOMAIN:
                domains[struct.unpack_from("<Q", p)[0]] = _text(p, 8)
            elif kind == STRING:
                strings[struct.unpack_from("<Q", p)[0]] = _text(p, 16)
            elif kind == CATEGORY:
                dom, cat, _ = struct.unpack_from("<QII", p)
                categories[(dom, cat)] = _text(p, 16)
    spans: dict[str, list] = defaultdict(list)
    attrs: dict[str, tuple[list[int], list[str]]] = defaultdict(lambda: ([], []))
    syncs: dict[str, list] = defaultdict(list)
    thread_names: dict[int, str] = {}
    for cap in caps:
        role = str(procs.get(cap.pid, {}).get("role", ""))
        shift = cap.epoch_anchor - cap.mono_anchor
        for ev in _ranges(cap):
            rid, dom, t0, t1, tid, cat, ptype, payload, msg = ev
            text = _message(msg, strings)
            category = categories.get((dom, cat), str(cat) if cat else "")
            if ptype in (PAYLOAD_INT64, PAYLOAD_UINT64) and payload:
                sid = payload if payload < 1 << 63 else payload - (1 << 64)
            else:
                sid = rid
            spans["span_id"].append(sid)
            spans["parent_id"].append(0)
            spans["name"].append(text)
            spans["start"].append(t0 + shift)
            spans["end"].append(t1 + shift if t1 >= 0 else -1)
            spans["pid"].append(cap.pid)
            spans["tid"].append(tid)
            spans["lane"].append(f"{cap.pid}/{tid}")
            spans["role"].append(role)
            spans["step"].append(-1)
            spans["trace_id"].append("")
            for k, v in (("nvtx.domain", domains.get(dom, "")), ("nvtx.category", category)):
                attrs[k][0].append(sid)
                attrs[k][1].append(v)
        for kind, tid, p in cap.records:
            if kind == THREAD_NAME:
                thread_names[struct.unpack_from("<I", p)[0]] = _text(p, 8)
            if kind != MARK:
                continue
            _, dom, t, cat, ptype, payload, mtype, _, mhandle = EVENT.unpack_from(p)
            if categories.get((dom, cat)) != S.CATEGORY_SYNC:
                continue
            op, _, obj = _message((mtype, mhandle, p[EVENT.size :]), strings).partition(" ")
            syncs["op"].append(op)
            syncs["obj"].append(obj)
            keyed = ptype in (PAYLOAD_INT64, PAYLOAD_UINT64)  # a lock's mark has no payload
            seq = payload - (1 << 64) if payload >= 1 << 63 else payload
            syncs["seq"].append(seq if keyed else -1)
            syncs["keyed"].append(keyed)
            syncs["time"].append(t + shift)
            syncs["pid"].append(cap.pid)
            syncs["tid"].append(tid)
            syncs["lane"].append(f"{cap.pid}/{tid}")
            syncs["span_id"].append(0)
    trace = Trace(
        spans=frame("spans", _columns(spans, "spans")),
        syncs=frame("syncs", _columns(syncs, "syncs")),
        attrs=_typed(attrs),
        processes=frame(
            "processes",
            {
                "pid": [c.pid for c in caps],
                "role": [str(procs.get(c.pid, {}).get("role", "")) for c in caps],
                "name": [str(procs.get(c.pid, {}).get("name", "")) for c in caps],
                "anchored": [True for _ in caps],
                "dp_rank": [C.rank(procs.get(c.pid, {}).get("dp_rank"), S.DP_RANK) for c in caps],
                "tp_rank": [C.rank(procs.get(c.pid, {}).get("tp_rank"), S.TP_RANK) for c in caps],
            },
        ),
        meta={
            "format": "nvtx-capture",
            "path": str(path),
            "dropped": sum(c.dropped for c in caps),
            "thread_names": thread_names,
        },
    )
    for cap in caps:
        if cap.dropped:
            trace.warn(f"pid {cap.pid}: {cap.dropped} NVTX events dropped (capture file full)",
                       "nvtx_dropped", cap.dropped)  # fmt: skip
    return trace.validate()


def _typed(values: dict[str, tuple[list[int], list[str]]]) -> Attrs:
    builder = AttrsBuilder()
    for key, (ids, texts) in values.items():
        builder.add_values(key, ids, texts)
    return builder.build()


def _columns(data: dict[str, list], table: str) -> dict[str, list]:
    return {c: data.get(c, []) for c in SCHEMAS[table]}


def _message(msg: tuple[int, int, bytes], strings: dict[int, str]) -> str:
    mtype, handle, inline = msg
    if mtype == MESSAGE_REGISTERED:
        return strings.get(handle, f"<string {handle:#x}>")
    return inline.decode(errors="replace")


def _ranges(cap: CaptureFile) -> Iterator[tuple]:
    """``(range id, domain, t0, t1, tid, category, payload type, payload, message)`` per range;
    ``t1`` is -1 for a range that never ended."""
    open_start: dict[int, tuple] = {}
    stacks: dict[tuple[int, int], list[tuple]] = defaultdict(list)
    pushes = 0
    for kind, tid, p in cap.records:
        if kind in (START, PUSH):
            rid, dom, t, cat, ptype, payload, mtype, _, mhandle = EVENT.unpack_from(p)
            ev = (dom, t, tid, cat, ptype, payload, (mtype, mhandle, p[EVENT.size :]))
            if kind == START:
                open_start[rid] = ev
            else:
                pushes += 1
                stacks[(tid, dom)].append(((cap.pid << 32) | (1 << 31) | pushes, *ev))
        elif kind == RANGE_END:
            rid, t1 = END.unpack_from(p)
            ev = open_start.pop(rid, None)
            if ev is not None:
                dom, t0, stid, cat, ptype, payload, msg = ev
                yield rid, dom, t0, t1, stid, cat, ptype, payload, msg
        elif kind == POP:
            dom, t1 = END.unpack_from(p)
            stack = stacks.get((tid, dom))
            if stack:
                rid, dom, t0, stid, cat, ptype, payload, msg = stack.pop()
                yield rid, dom, t0, t1, stid, cat, ptype, payload, msg
    for rid, (dom, t0, tid, cat, ptype, payload, msg) in open_start.items():
        yield rid, dom, t0, -1, tid, cat, ptype, payload, msg
    for stack in stacks.values():
        for rid, dom, t0, tid, cat, ptype, payload, msg in stack:
            yield rid, dom, t0, -1, tid, cat, ptype, payload, msg
