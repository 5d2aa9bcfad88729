"""Rolling a live run into the Parquet store: records become Parquet parts as the run goes.

Why: a run of hours writes 10^8 KV-block accesses per host-hour; reading its record files
whole afterwards needs the whole trace in one process. The roller follows every record file
of a run directory while the processes write it (:class:`fdprof.formats.tail.RecordTail`, off
the engine's hot path: the recorder stays as it is) and every ``roll_s`` seconds writes what
it has finished as one window of the store (:mod:`fdprof.trace.store`): the spans that ended,
their attributes and accesses, and the sync events. It holds only what is still open: spans
not ended yet (with their attributes), and sync events whose span has not ended (a sync
event's lane is its span's ``fd.lane``, known once the span is complete).

Each window goes through :func:`fdprof.trace.assemble.assemble`, the conventions every
reader applies, so a rolled store reads back as the native reader reads the run directory
(``tests/trace/test_roll.py`` compares them on real engine runs). What differs: rows come in
window order, and an attribute set on a span after it ended is kept, but its ``kv.*`` accesses
are not derived (the probe never does that).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.formats import records as R
from fdprof.formats.rundir import MANIFEST, RECORD_NAME
from fdprof.formats.tail import RecordTail
from fdprof.trace import attrs as A
from fdprof.trace.assemble import assemble, on_epoch
from fdprof.trace.attrs import AttrsBuilder
from fdprof.trace.model import TEXT, Trace, frame
from fdprof.trace.native import signed32
from fdprof.trace.store import StoreWriter

#: seconds between rolls of a live run
ROLL_S = 10.0
#: access buckets of a rolled store (fixed when it starts: a run's size is not known then)
BUCKETS = 16
#: ``epoch``: times on the epoch by the processes' anchors (the reader's rule); ``host``: the
#: host's own monotonic clock, the anchors kept beside (``meta["clock_anchors"]``) for a merge
#: of several hosts to weigh against the sync edges (:mod:`fdprof.trace.hosts`)
CLOCKS = ("epoch", "host")
#: windows for which an ended span's lane override and trace id stay known to late events
KEEP_WINDOWS = 2

_KINDS = {
    R.Kind.ATTR_INT: (A.INT, pa.int64()),
    R.Kind.ATTR_FLOAT: (A.FLOAT, pa.float64()),
    R.Kind.ATTR_STR: (A.STR, pa.string()),
    R.Kind.ATTR_INTS: (A.INTS, pa.list_(pa.int64())),
}


@dataclass
class _Span:
    parent: int
    name: str
    start: int
    tid: int
    trace_id: str | None = None
    end: int = -1
    #: (key, kind, value, record number)
    attrs: list[tuple[str, str, Any, int]] = field(default_factory=list)


@dataclass
class _Process:
    tail: RecordTail
    pid: int = 0
    role: str = ""
    dp_rank: int = -1
    tp_rank: int = -1
    header: R.FileHeader | None = None
    #: added to its monotonic times; set at the first roll (:meth:`Roller._clocks`)
    offset: int | None = None
    strings: dict[int, str] = field(default_factory=dict)
    open: dict[int, _Span] = field(default_factory=dict)
    ended: list[tuple[int, _Span]] = field(default_factory=list)
    #: (op, obj, seq, keyed, time, tid, span_id)
    syncs: list[tuple] = field(default_factory=list)
    #: attributes of spans already written: (span_id, key, kind, value, record number)
    late: list[tuple] = field(default_factory=list)
    threads: dict[int, str] = field(default_factory=dict)
    count: int = 0
    version: int = 2


class Roller:
    """Rolls the record files of ``run_dir`` into the store ``out`` (see the module doc).
    ``select(header)`` picks which files are this roller's (a host's, :mod:`fdprof.trace.hosts`);
    ``name`` tells its parts from other writers' of one store."""

    def __init__(
        self,
        run_dir: str | Path,
        out: str | Path,
        *,
        buckets: int = BUCKETS,
        name: str = "",
        select=None,
        clock: str = "epoch",
    ) -> None:
        if clock not in CLOCKS:
            raise FdprofError(f"clock {clock!r}: one of {', '.join(CLOCKS)}")
        self.run_dir = Path(run_dir)
        self.clock = clock
        self.writer = StoreWriter(Path(out), buckets, name)
        self.select = select
        self._procs: dict[Path, _Process] = {}
        self._skipped: set[Path] = set()
        self._window = 0
        self._warnings: list[str] = []
        self._common: int | None = None
        self._clocked = False
        #: span id -> (raw fd.lane or None, trace id) of spans written in recent windows
        self._recent: list[dict[int, tuple[str | None, str | None]]] = []
        self.rows = {"spans": 0, "syncs": 0, "accesses": 0}
        #: monotonic time of the last roll
        self.last_roll = time.monotonic()

    @property
    def windows(self) -> int:
        return self._window

    # -- reading --

    def poll(self) -> int:
        """Read what every record file gained; returns how many records."""
        for path in sorted(self.run_dir.glob("*.rec")):
            if path not in self._procs and path not in self._skipped:
                self._procs[path] = _Process(RecordTail(path))
        got = 0
        for path, proc in list(self._procs.items()):
            if proc.header is None and not self._start(path, proc):
                continue
            for kind, flags, tid, fields in proc.tail.poll():
                got += 1
                proc.count += 1
                self._record(proc, kind, flags, tid, fields)
        return got

    def _start(self, path: Path, proc: _Process) -> bool:
        header = proc.tail.read_header()
        if header is None:
            return False
        if self.select is not None and not self.select(header):
            proc.tail.close()
            del self._procs[path]
            self._skipped.add(path)
            return False
        proc.pid, proc.role = signed32(header.pid), header.role
        match = RECORD_NAME.match(path.name)
        proc.dp_rank = header.dp_rank if header.dp_rank >= 0 else (
            int(match["dp"]) if match else -1)  # fmt: skip
        proc.tp_rank = header.tp_rank
        proc.version = header.version
        proc.header = header
        return True

    def _record(self, proc: _Process, kind: int, flags: int, tid: int, fields: tuple) -> None:
        if kind == R.Kind.STRING:
            proc.strings[fields[0]] = fields[1]
        elif kind == R.Kind.SPAN_BEGIN:
            sid, parent, name_id, _, t0 = fields
            sid, parent = _signed(sid), _signed(parent)
            proc.open[sid] = _Span(parent, self._text(proc, name_id), t0, tid)
        elif kind == R.Kind.SPAN_END:
            sid, t1 = _signed(fields[0]), fields[1]
            span = proc.open.pop(sid, None)
            if span is not None:
                span.end = t1
                proc.ended.append((sid, span))
        elif kind in _KINDS:
            sid, key_id = _signed(fields[0]), fields[1]
            value: Any = fields[-1]
            if kind == R.Kind.ATTR_STR:
                value = self._text(proc, fields[2])
            elif kind == R.Kind.ATTR_INTS:
                value = list(fields[2])
            item = (self._text(proc, key_id), _KINDS[kind][0], value, proc.count)
            span = proc.open.get(sid)
            if span is not None:
                span.attrs.append(item)
            else:
                proc.late.append((sid, *item))
        elif kind == R.Kind.SYNC:
            sid, obj, op, seq, t = fields
            if op not in (R.SyncCode.RELEASE, R.SyncCode.ACQUIRE):
                raise FdprofError(f"{proc.tail.path}: a sync record's op is {op}")
            keyed = bool(R.sync_keyed(proc.version, np.array([flags]), np.array([seq]))[0])
            what = R.SyncCode(op).op
            proc.syncs.append((what, self._text(proc, obj), seq, keyed, t, tid, _signed(sid)))
        elif kind == R.Kind.THREAD_NAME:
            proc.threads[tid] = self._text(proc, fields[0])
        elif kind == R.Kind.CONTEXT:
            self._context(proc, flags, fields)

    def _context(self, proc: _Process, flags: int, fields: tuple) -> None:
        sid, trace_bytes, remote = _signed(fields[0]), fields[1], fields[2]
        span = proc.open.get(sid)
        if flags == R.CONTEXT_LINK:
            link = f"00-{bytes(trace_bytes).hex()}-{remote:016x}-01"
            if span is not None:
                span.attrs.append((S.LINKS, A.STRS, [link], -1))
            return
        if span is not None:
            span.trace_id = bytes(trace_bytes).hex()
            if span.parent == 0:
                span.parent = _signed(remote)

    def _clocks(self) -> list[_Process]:
        """The processes whose header is read, each with its clock offset: the reader's rule
        (:func:`fdprof.formats.records.epoch_offsets`: one host's processes share one offset)
        over those there at the first roll; a later one takes theirs if its anchor agrees."""
        procs = [p for p in self._procs.values() if p.header is not None]
        if self.clock == "host":
            for p in procs:
                p.offset = 0
            return procs
        if not self._clocked and procs:
            self._clocked = True
            offsets = R.epoch_offsets([p.header for p in procs])
            for p, off in zip(procs, offsets, strict=True):
                p.offset = off
            self._common = offsets[0] if len(set(offsets)) == 1 else None
        for p in procs:
            if p.offset is None:
                own = p.header.epoch_anchor_ns - p.header.mono_anchor_ns
                same = self._common is not None and abs(own - self._common) <= R.SAME_CLOCK_NS
                p.offset = self._common if same else own
        return procs

    @staticmethod
    def _text(proc: _Process, sid: int) -> str:
        text = proc.strings.get(sid)
        if text is None:
            raise FdprofError(f"record file of pid {proc.pid}: refers to an unknown string")
        return text

    # -- writing --

    def roll(self, final: bool = False) -> None:
        """Write what is finished as the next window; ``final``: everything (spans still
        open end at -1, as the reader reads a cut run)."""
        procs = self._clocks()
        if final:
            unended = 0
            for p in procs:
                unended += len(p.open)
                p.ended.extend(p.open.items())
                p.open = {}
            if unended:
                self._warnings.append(f"{unended} span(s) never ended (end = -1): a process "
                                      "was killed or cut")  # fmt: skip
        self.last_roll = time.monotonic()
        trace = self._window_trace(procs, final)
        if trace is None:
            if final or not self._window:
                self._manifest()
            return
        window = f"{self._window:08d}"
        self._window += 1
        self.writer.add_tables(trace.spans, trace.syncs, trace.accesses, window)
        self.writer.add_attrs(trace.attrs, window)
        for table in self.rows:
            self.rows[table] += len(getattr(trace, table))
        self._warnings += [w for w in trace.meta.get("warnings", []) if w not in self._warnings]
        self._manifest()

    def _window_trace(self, procs: list[_Process], final: bool) -> Trace | None:
        spans: list[tuple] = []  # (pid, role, offset, sid, span)
        syncs: list[tuple] = []
        late: list[tuple] = []
        for p in procs:
            ended = {sid for sid, _ in p.ended}
            spans += [(p, sid, s) for sid, s in p.ended]
            keep = []
            for e in p.syncs:  # a sync waits for its span to end
                if final or e[6] == 0 or e[6] in ended or e[6] not in p.open:
                    syncs.append((p, e))
                else:
                    keep.append(e)
            p.syncs, p.ended = keep, []
            late += [(p, *x) for x in p.late]
            p.late = []
        if not spans and not syncs and not late:
            return None
        recent = {k: v for window in self._recent for k, v in window.items()}
        open_ids = {sid: s for p in procs for sid, s in p.open.items()}
        trace = Trace(meta={"path": str(self.run_dir)})
        builder = AttrsBuilder()
        self._add_attrs(builder, [(sid, *a) for _, sid, s in spans for a in s.attrs])
        self._add_attrs(builder, [x[1:] for x in late])
        ids = np.array([sid for _, sid, _ in spans], np.int64)
        trace_ids = self._trace_ids(spans, open_ids, recent)
        columns = {
            "span_id": ids,
            "parent_id": np.array([s.parent for _, _, s in spans], np.int64),
            "name": np.array([s.name for _, _, s in spans], object),
            "start": self._times([(p, s.start) for p, _, s in spans]),
            "end": self._times([(p, s.end) for p, _, s in spans], unset=True),
            "pid": np.array([p.pid for p, _, _ in spans], np.int64),
            "tid": signed32(np.array([s.tid for _, _, s in spans], np.int64)),
            "role": np.array([p.role for p, _, _ in spans], object),
            "trace_id": pa.array(trace_ids, TEXT),
        }
        lanes = {sid: v[0] for sid, v in recent.items() if v[0] is not None}
        sync_cols = {
            "op": np.array([e[0] for _, e in syncs], object),
            "obj": np.array([e[1] for _, e in syncs], object),
            "seq": np.array([e[2] for _, e in syncs], np.int64),
            "keyed": np.array([e[3] for _, e in syncs], bool),
            "time": self._times([(p, e[4]) for p, e in syncs]),
            "pid": np.array([p.pid for p, _ in syncs], np.int64),
            "tid": signed32(np.array([e[5] for _, e in syncs], np.int64)),
            "span_id": np.array([e[6] for _, e in syncs], np.int64),
            # a span written in an earlier window gave its lane there
            "lane": np.array([lanes.get(e[6]) for _, e in syncs], object),
        }
        attrs = builder.build()
        assemble(trace, columns, attrs, sync_cols, self._processes(procs))
        # a late attribute's kv.* lists name a span written before: no accesses (module doc)
        trace.accesses = trace.accesses[trace.accesses["span_id"].isin(ids).to_numpy()]
        lane = trace.attr(S.LANE)
        own = dict(zip(lane.index.tolist(), lane.astype(object).tolist(), strict=True))
        self._recent.append({  # only what a late event could need: a lane or a trace id
            sid: (own.get(sid), tid) for sid, tid in zip(ids.tolist(), trace_ids, strict=True)
            if tid is not None or sid in own
        })  # fmt: skip
        self._recent = self._recent[-KEEP_WINDOWS:]
        return trace

    @staticmethod
    def _add_attrs(builder: AttrsBuilder, items: list[tuple]) -> None:
        """(span id, key, kind, value, record number) as typed parts, per (key, kind)."""
        groups: dict[tuple[str, str], list[tuple]] = {}
        for sid, key, kind, value, order in items:
            groups.setdefault((key, kind), []).append((sid, value, order))
        for (key, kind), rows in groups.items():
            if kind == A.STRS:  # links: every link record of a span, in order, one list
                merged: dict[int, list[str]] = {}
                for sid, value, _ in rows:
                    merged.setdefault(sid, []).extend(value)
                rows = [(sid, v, -1) for sid, v in merged.items()]
            values = pa.array([v for _, v, _ in rows], A.ARROW_TYPES[kind])
            order = np.array([o for _, _, o in rows], np.int64)
            builder.add(key, np.array([s for s, _, _ in rows], np.int64), values, kind, order)

    def _trace_ids(self, spans, open_ids, recent) -> list[str | None]:
        """A span's own trace id (a CONTEXT record), else its parent's, down the tree."""
        own = {sid: s.trace_id for _, sid, s in spans}
        parents = {sid: s.parent for _, sid, s in spans}

        def find(sid: int, depth: int = 0) -> str | None:
            if own.get(sid) is not None or depth > 64:
                return own.get(sid)
            parent = parents.get(sid, 0)
            if parent in own:
                return find(parent, depth + 1)
            if parent in open_ids:
                return open_ids[parent].trace_id
            return recent.get(parent, (None, None))[1]

        return [find(sid) for _, sid, _ in spans]

    @staticmethod
    def _times(pairs: list[tuple[_Process, int]], unset: bool = False) -> np.ndarray:
        if not pairs:
            return np.zeros(0, np.int64)
        t = np.array([x for _, x in pairs], np.int64)
        off = np.array([p.offset for p, _ in pairs], np.int64)
        if unset:
            return np.where(t < 0, -1, t + off)
        for value in np.unique(off).tolist():
            on_epoch(t[off == value], value, "record times")
        return t + off

    def _processes(self, procs: list[_Process]) -> dict[str, Any]:
        return {
            "pid": [p.pid for p in procs],
            "role": [p.role for p in procs],
            "name": [p.role for p in procs],
            "anchored": [self.clock == "epoch"] * len(procs),
            "dp_rank": [p.dp_rank for p in procs],
            "tp_rank": [p.tp_rank for p in procs],
        }

    def close(self) -> Path:
        """Read what is left, write it and the manifest: the store is complete."""
        self.poll()
        self.roll(final=True)
        for p in self._procs.values():
            p.tail.close()
        return self.writer.path

    def _manifest(self) -> None:
        """``store.json`` for what is written so far: a store rolled from a live run reads
        (up to its last window) while the run goes on."""
        procs = self._clocks()
        manifest = _run_manifest(self.run_dir)
        names = {int(x["pid"]): x.get("name") for x in manifest.get("processes") or []
                 if isinstance(x, dict) and isinstance(x.get("pid"), int)}  # fmt: skip
        processes = self._processes(procs)
        processes["name"] = [names.get(p.pid) or p.role for p in procs]
        meta: dict[str, Any] = {"format": "native", "path": str(self.run_dir)}
        meta |= {k: manifest[k] for k in ("config", "results", "status", "error") if k in manifest}
        meta["thread_names"] = {f"{p.pid}/{t}": n for p in procs for t, n in p.threads.items()}
        meta["epoch_anchors"] = {p.pid: p.header.epoch_anchor_ns for p in procs}
        if self.clock == "host":  # epoch - monotonic of each process: its anchor
            meta["clock_anchors"] = {
                p.pid: p.header.epoch_anchor_ns - p.header.mono_anchor_ns for p in procs
            }
        if self._warnings:
            meta["warnings"] = list(self._warnings)
        self.writer.finish(frame("processes", processes), meta)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _run_manifest(run_dir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((run_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


class RollObserver:
    """``fdprof run --parquet DIR``: a roller in the supervisor, beside the engine (a thread:
    the engine's processes are not touched)."""

    def __init__(
        self, out: str | Path, roll_s: float = ROLL_S, poll_s: float = 0.2, **roller: Any
    ) -> None:
        self.out = Path(out)
        #: the :class:`Roller`'s options (a host's: ``select``, ``name``, ``clock``)
        self.options = roller
        self.roll_s = roll_s
        self.poll_s = poll_s
        self.roller: Roller | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self, run_dir: Path, processes: list[dict]) -> None:
        self.roller = Roller(run_dir, self.out, **self.options)
        self._thread = threading.Thread(target=self._run, name="fdprof-roll", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.poll_s):
                self.roller.poll()
                if time.monotonic() - self.roller.last_roll >= self.roll_s:
                    self.roller.roll()
        except Exception as exc:  # reported at stop: the run itself goes on
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.roller is not None and self.error is None:
            try:
                self.roller.close()
            except (FdprofError, OSError) as exc:
                self.error = exc
        if self.error is not None:  # the run itself stands; its store does not
            print(f"fdprof: warning: rolling into {self.out} failed: {self.error}",
                  file=sys.stderr)  # fmt: skip


def run_finished(run_dir: Path) -> bool:
    """Whether ``run.json`` says the run is over (any status but ``running``)."""
    status = _run_manifest(Path(run_dir)).get("status")
    return status is not None and status != "running"


def refresh_meta(out: str | Path, run_dir: str | Path) -> None:
    """Put the run's final ``run.json`` (config, results, status) into a rolled store's
    metadata: the supervisor writes it after its observers have stopped."""
    from fdprof.trace import store

    out = Path(out)
    if not store.is_store(out):
        return
    doc = store.manifest(out)
    manifest = _run_manifest(Path(run_dir))
    for k in ("config", "results", "status", "error"):
        if k in manifest:
            doc["meta"][k] = manifest[k]
    store.write_manifest(out, doc)
