"""Writer of native run directories: a trace from any source as ``run.json`` + ``.rec`` files.

Each process's spans, attributes and syncs become the records the probe would have written
(:mod:`fdprof.formats.records`), with a clock anchor of (0, 0): timestamps are stored on the
trace's own timebase. What records cannot hold is kept as attributes: a lane or role that
differs from the thread's becomes ``fd.lane`` / ``fd.role``; a value that is not an int, a
float, a string or a list of int32 is stored as its JSON text in a string attribute.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.formats import records as R
from fdprof.formats.rundir import MANIFEST, RUN_FORMAT, record_file_name
from fdprof.trace import conventions as C
from fdprof.trace.attrs import to_json
from fdprof.trace.model import Trace, rows

MASK64 = (1 << 64) - 1
#: pids and tids are stored in 32 bits; negative ones (a foreign trace's named or synthetic
#: threads) as their two's complement, read back signed (:func:`fdprof.trace.native.signed32`)
MASK32 = (1 << 32) - 1
I32 = (-(2**31), 2**31 - 1)


class _File:
    """Records of one process, with its string table."""

    def __init__(self, pid: int, role: str, dp_rank: int, tp_rank: int) -> None:
        if not -(2**31) <= pid < 2**31:
            raise FdprofError(f"process id {pid} does not fit a native record (32 bits)")
        self.parts = [R.pack_header(pid, 0, 0, role, dp_rank, tp_rank)]
        self.strings: dict[str, int] = {}

    def record(self, kind: int, tid: int, payload: bytes, flags: int = 0) -> None:
        if len(payload) > 0xFFFF:
            raise FdprofError("a value is too long for a native record (64 KiB)")
        if not -(2**31) <= tid < 2**31:
            raise FdprofError(f"thread id {tid} does not fit a native record (32 bits)")
        self.parts.append(R.RECORD_HEADER.pack(kind, flags, len(payload), tid & MASK32) + payload)

    def intern(self, text: str, tid: int) -> int:
        sid = self.strings.get(text)
        if sid is None:
            sid = self.strings[text] = len(self.strings) + 1
            self.record(R.Kind.STRING, tid, R.STRING.pack(sid) + text.encode())
        return sid

    def attr(self, tid: int, span: int, key: str, value: Any) -> None:
        span &= MASK64
        k = self.intern(key, tid)
        if type(value) is int and -(2**63) <= value < 2**63:
            self.record(R.Kind.ATTR_INT, tid, R.ATTR_INT.pack(span, k, 0, value))
        elif type(value) is float:
            self.record(R.Kind.ATTR_FLOAT, tid, R.ATTR_FLOAT.pack(span, k, 0, value))
        elif (
            type(value) is list
            and value
            and all(type(v) is int and I32[0] <= v <= I32[1] for v in value)
        ) or (type(value) is list and not value and key in S.KV_ACCESS_KEYS):
            ints = np.array(value, dtype="<i4").tobytes()
            self.record(R.Kind.ATTR_INTS, tid, R.ATTR_INTS.pack(span, k, len(value)) + ints)
        else:
            s = value if type(value) is str else to_json(value)
            self.record(R.Kind.ATTR_STR, tid, R.ATTR_STR.pack(span, k, self.intern(s, tid)))


def write(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` as a run directory at ``path``; on failure nothing is left behind (no
    half-written run, no empty directory)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise FdprofError(f"{out}: exists and is not a directory")
    if (out / MANIFEST).exists() or any(out.glob("*.rec")):
        raise FdprofError(f"{out}: already holds a run; write to a new directory")
    created = not out.exists()
    written: list[Path] = []
    try:
        files = _records(trace)
        out.mkdir(parents=True, exist_ok=True)
        _write_files(trace, out, files, written)
    except BaseException:
        for f in written:
            f.unlink(missing_ok=True)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def _records(trace: Trace) -> dict[int, _File]:
    """Every process's records, in memory: nothing is written before all of them encode."""
    procs = trace.processes.set_index("pid")
    role_of = dict(rows(trace.processes, ["pid", "role"]))
    spans = trace.spans
    lanes = C.thread_lanes(spans["pid"].to_numpy(), spans["tid"].to_numpy())
    files: dict[int, _File] = {}

    def file_of(pid: int) -> _File:
        if pid not in files:
            known = pid in procs.index
            role = str(procs.at[pid, "role"]) if known else ""
            dp_rank = int(procs.at[pid, "dp_rank"]) if known else -1
            tp_rank = int(procs.at[pid, "tp_rank"]) if known else -1
            files[pid] = _File(pid, role, dp_rank, tp_rank)
        return files[pid]

    attr_groups = trace.attrs.by_span()
    trace_ids = spans["trace_id"].to_numpy(object, na_value=None)
    cols = ["span_id", "parent_id", "name", "start", "end", "pid", "tid", "lane", "role"]
    for i, (sid, parent, name, start, end, pid, tid, lane, role) in enumerate(rows(spans, cols)):
        f = file_of(pid)
        n = f.intern(name, tid)
        f.record(
            R.Kind.SPAN_BEGIN, tid, R.SPAN_BEGIN.pack(sid & MASK64, parent & MASK64, n, 0, start)
        )
        own = attr_groups.get(sid, {})
        for key, value in own.items():
            if key == S.LINKS:
                for tp in value:
                    _, trace_hex, span_hex, _ = tp.split("-")
                    payload = R.CONTEXT.pack(
                        sid & MASK64, bytes.fromhex(trace_hex), int(span_hex, 16)
                    )
                    f.record(R.Kind.CONTEXT, tid, payload, R.CONTEXT_LINK)
            else:
                f.attr(tid, sid, key, value)
        if lane != lanes[i] and S.LANE not in own:
            f.attr(tid, sid, S.LANE, lane)
        if pid in role_of and role != role_of[pid] and S.ROLE not in own:
            f.attr(tid, sid, S.ROLE, role)
        if trace_ids[i] is not None:
            payload = R.CONTEXT.pack(sid & MASK64, bytes.fromhex(trace_ids[i]), parent & MASK64)
            f.record(R.Kind.CONTEXT, tid, payload, R.CONTEXT_PARENT)
        if end >= 0:
            f.record(R.Kind.SPAN_END, tid, R.SPAN_END.pack(sid & MASK64, end))
    ops = {code.op: code for code in R.SyncCode}
    sync_cols = ["op", "obj", "seq", "keyed", "time", "pid", "tid", "span_id"]
    for op, obj, seq, keyed, t, pid, tid, span in rows(trace.syncs, sync_cols):
        f = file_of(pid)
        o = f.intern(obj, tid)
        payload = R.SYNC.pack(span & MASK64, o, ops[op], seq if keyed else R.NO_SEQ, t)
        f.record(R.Kind.SYNC, tid, payload, R.SYNC_KEYED if keyed else 0)
    for pid in procs.index.tolist():
        file_of(pid)
    return files


def _write_files(trace: Trace, out: Path, files: dict[int, _File], written: list[Path]) -> None:
    procs = trace.processes.set_index("pid")
    processes = []
    for pid, f in files.items():
        role = str(procs.at[pid, "role"]) if pid in procs.index else ""
        rank = int(procs.at[pid, "dp_rank"]) if pid in procs.index else -1
        tp_rank = int(procs.at[pid, "tp_rank"]) if pid in procs.index else -1
        record = record_file_name(role or "process", max(rank, 0), pid)
        written.append(out / record)
        (out / record).write_bytes(b"".join(f.parts))
        name = str(procs.at[pid, "name"]) if pid in procs.index else role
        processes.append(
            {
                "pid": pid,
                "role": role,
                "name": name,
                "dp_rank": rank,
                "tp_rank": tp_rank,
                "record": record,
                "exitcode": 0,
            }
        )
    manifest = {
        "format": RUN_FORMAT,
        "config": trace.meta.get("config", {}),
        "status": "ok",
        "processes": processes,
        "results": trace.meta.get("results", {}),
        "error": None,
        "source": {"format": trace.meta.get("format"), "path": trace.meta.get("path")},
    }
    written.append(out / MANIFEST)
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, default=str))
