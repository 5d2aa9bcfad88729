"""Reader of Chrome/Perfetto trace JSON (plain or gzip), including PyTorch-profiler traces.

Phases: ``X`` complete, ``B``/``E`` nested per thread, ``b``/``e`` async by (cat, id) on a lane
of their own, ``i``/``I``/``n``/``R`` instants (zero-length spans, or sync events when their
args carry ``sync.op``/``sync.obj``), ``s``/``t``/``f`` flows (sync edges: the start releases,
the end acquires object ``flow:<cat>`` with the flow id as sequence, each bound to a slice as
Chrome and Perfetto bind them, see :func:`_bind_flows`), ``M`` process and thread names, ``C``
counters (``meta["counters"]``). Timestamps are microseconds, read exactly (no
float rounding) into nanoseconds. ``args`` become typed attributes (:mod:`fdprof.trace.attrs`),
``cat`` the ``chrome.cat`` attribute. GPU work of PyTorch traces (categories in
:data:`DEVICE_CATS`) gets the lane ``<pid>/cuda:<device>/stream:<stream>`` of the host process
that owns the device (:func:`_device_owners`).

The ``fd.*`` args that :mod:`fdprof.trace.perfetto` writes (span ids, true thread, trace id)
restore the columns exactly, so native → Chrome → model loses nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fdprof import progress
from fdprof import semconv as S
from fdprof.errors import FdprofError, short
from fdprof.trace import conventions as C
from fdprof.trace import limits
from fdprof.trace.assemble import assemble, distinct
from fdprof.trace.attrs import STR, AttrsBuilder, small_tail
from fdprof.trace.chromescan import E_SPAN, E_SYNC, MERGE_EVENTS, Scanned, Scanner
from fdprof.trace.heap import mapped_large_blocks, release_freed
from fdprof.trace.jsonstream import Stream, open_text, plain, raw_position
from fdprof.trace.model import PROCESS_LABELS, PROCESS_SORT, THREAD_SORT, Trace, remap_ints

#: PyTorch-profiler categories of work that runs on a GPU stream
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})

_INSTANTS = frozenset("iInR")
_FLOWS = {
    "s": (S.SyncOp.RELEASE,),
    "t": (S.SyncOp.ACQUIRE, S.SyncOp.RELEASE),
    "f": (S.SyncOp.ACQUIRE,),
}
#: how a sync row is bound to a slice: not at all (its lane is given), to the slice enclosing
#: it on its track, or to the next slice to begin on it (a flow end without ``"bp":"e"``)
UNBOUND, ENCLOSING, NEXT = 0, 1, 2


def sniff(path: Path, head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"[", b"{")


def ns(value: Any) -> int:
    """Microseconds (int, or Decimal from the stream) to nanoseconds, exactly."""
    kind = type(value)
    if kind is int:
        return value * 1000
    if kind is Decimal:
        return int((value * 1000).to_integral_value())
    raise TypeError(f"expected a number of microseconds, got {value!r}")


def _ns_array(values: list) -> np.ndarray:
    if all(type(v) is int for v in values):
        return np.array(values, dtype=np.int64) * 1000
    return np.array([ns(v) for v in values], dtype=np.int64)


class _Builder:
    """Columns of spans, attributes and syncs, built a batch of events at a time.

    ``X`` events (most of any trace) are turned into columns with one comprehension per
    column; the others go through :meth:`event` in order, since ``B``/``E`` and ``b``/``e``
    pair up by stacks. Spans they open are queued and turned into columns the same way.
    """

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in _SPAN_COLS}
        self.rows = 0
        #: args as typed attributes, a part per key and batch: no Python value outlives its
        #: batch
        self.attrs = AttrsBuilder()
        #: this batch's sync events, a list per column; earlier batches' as arrays
        self.sync: dict[str, list] = {k: [] for k in _SYNC_COLS}
        self.sync_parts: dict[str, list[np.ndarray]] = {k: [] for k in _SYNC_COLS}
        self.counters: list[tuple[int, str, int, str, float]] = []
        self.ids: dict[Any, int] = {}
        #: flow id that is not an int -> sequence number, per category (no tuple per flow)
        self.flow_ids: dict[Any, dict[Any, int]] = {}
        self.flows = 0
        self.names: dict[str, str] = {}
        self.proc: dict[int, dict[str, Any]] = {}
        self.threads: dict[str, str] = {}
        #: how viewers lay processes and threads out (``M`` labels and sort indexes)
        self.display: dict[str, dict] = {}
        self.stacks: dict[tuple, list[int]] = {}
        self.pending: list[tuple[dict, int, int, str | None]] = []
        self.closes: list[tuple[int, int, dict | None]] = []
        self.auto = 0
        self.ignored: Counter[str] = Counter()
        self.unmatched_ends = 0
        #: pids of GPU work (a PyTorch trace's device "processes") and of everything else
        self.device_pids: set[int] = set()
        self.host_pids: set[int] = set()
        self.limits = limits.current()
        #: every span's process so far, to stop at the processes limit as soon as it is passed
        self.pids: set[int] = set()

    def ident(self, value: Any) -> int:
        """A pid or tid as int; names ("Traces", "") get stable negative ids."""
        if type(value) is int:
            return value
        if value is None:
            return 0
        if type(value) is not str:
            raise TypeError(f"a pid or tid should be an integer or a string, not {short(value)}")
        got = self.ids.get(value)
        if got is None:
            got = self.ids[value] = -1 - len(self.ids)
        return got

    def batch(self, events: list) -> None:
        complete, rest = [], []
        for ev in events:
            if type(ev) is not dict:
                raise TypeError(f"an event should be an object, not {short(ev)}")
            (complete if ev.get("ph") == "X" else rest).append(ev)
        if complete:
            start = _ns_array([ev["ts"] for ev in complete])
            dur = _ns_array([ev.get("dur") or 0 for ev in complete])
            self.spans(complete, start, start + dur, [None] * len(complete))
        for ev in rest:
            self.event(ev)
        if self.pending:
            evs, start, end, lanes = zip(*self.pending, strict=True)
            self.pending = []
            self.spans(list(evs), np.array(start, np.int64), np.array(end, np.int64), lanes)
        for key, values in self.sync.items():
            if values:
                self.sync_parts[key].append(np.array(values, dtype=_SYNC_COLS[key]))
                values.clear()
        self._join_small_parts()

    def fast_batch(self, scanned: Scanned, lo: int, hi: int) -> None:
        """What :meth:`batch` makes of events ``lo..hi-1`` of a piece the C scanner read
        (:mod:`fdprof.trace.chromescan`): its slices, then its sync instants."""
        c = scanned.c
        rows = scanned.rows(lo, hi, E_SPAN)
        if len(rows):
            sids = c["sid"][rows].copy()
            auto = np.flatnonzero(c["has_sid"][rows] == 0)
            sids[auto] = -(self.auto + 1 + np.arange(len(auto)))
            self.auto += len(auto)
            pid = c["pid"][rows]
            self.pids.update(pd.unique(pid).tolist())
            limits.check(len(self.pids), "processes", "processes in the trace")
            self.host_pids.update(pd.unique(pid).tolist())
            interned = scanned.interned(self.names)
            cols = self.cols
            cols["span_id"].append(sids)
            cols["parent_id"].append(c["parent"][rows].copy())
            cols["trace_id"].append(scanned.text(c["trace"][rows]))
            cols["start"].append(c["ts"][rows].copy())
            cols["end"].append(c["ts"][rows] + c["dur"][rows])
            cols["pid"].append(pid.copy())
            cols["tid"].append(c["tid"][rows].copy())
            cols["name"].append(interned[c["name"][rows]])
            cols["lane"].append(interned[c["lane"][rows]])
            cols["role"].append(scanned.text(c["role"][rows]))
            self.rows += len(rows)
            cat = c["cat"][rows]
            with_cat = np.flatnonzero((cat >= 0) & (scanned.text(cat) != ""))
            categories = scanned.arrow_text(cat[with_cat])
            self.attrs.add(S.CHROME_CATEGORY, sids[with_cat], categories, STR)
            for key, ids, values, kind in scanned.attributes(rows, sids):
                if kind:
                    self.attrs.add(key, ids, values, kind)
                else:
                    self.attrs.add_values(key, ids, values)
            limits.check(self.attrs.keys, "attr_keys", "distinct attribute keys")
        rows = scanned.rows(lo, hi, E_SYNC)
        if len(rows):
            interned = scanned.interned(self.names)
            ops = np.where(c["op"][rows] == 0, S.SyncOp.RELEASE, S.SyncOp.ACQUIRE)
            syncs = {"op": ops.astype(object),
                     "obj": interned[c["obj"][rows]], "seq": c["seq"][rows].copy(),
                     "keyed": c["keyed"][rows].astype(bool), "time": c["ts"][rows].copy(),
                     "pid": c["pid"][rows].copy(), "tid": c["tid"][rows].copy(),
                     "lane": scanned.text(c["lane"][rows]), "span_id": c["span"][rows].copy(),
                     "bind": np.full(len(rows), UNBOUND, dtype=np.int64)}  # fmt: skip
            for key, values in syncs.items():
                self.sync_parts[key].append(values)
        self._join_small_parts()

    def _join_small_parts(self) -> None:
        for parts in (*self.cols.values(), *self.sync_parts.values()):
            small = small_tail(parts, len)
            if small:
                parts[-small:] = [np.concatenate(parts[-small:])]

    def spans(self, evs: list[dict], start: np.ndarray, end: np.ndarray, lanes) -> None:
        args = [_args(ev) for ev in evs]
        sids = _ints([a.pop(S.SPAN_ID, None) for a in args], S.SPAN_ID)
        for i, sid in enumerate(sids):
            if sid is None:
                self.auto += 1
                sids[i] = -self.auto
        true_tids = [a.pop(S.TRUE_TID, None) for a in args]
        ident = self.ident
        pid = [ident(ev.get("pid")) for ev in evs]
        self.pids.update(pid)
        limits.check(len(self.pids), "processes", "processes in the trace")
        tid = [
            ident(ev.get("tid") if t is None else t) for ev, t in zip(evs, true_tids, strict=True)
        ]
        names = [ev.get("name", "") for ev in evs]
        if not all(type(n) is str for n in names):
            raise TypeError(f"name should be a string, not {short(_first_bad(names, str))}")
        cats = [ev.get("cat") for ev in evs]
        if not all(c is None or type(c) is str for c in cats):
            raise TypeError(f"cat should be a string, not {short(_first_bad(cats, str, None))}")
        intern = self.names.setdefault
        lanes = [
            a.pop(S.SPAN_LANE, None)
            or (_device_lane(a, p, t) if lane is None and c in DEVICE_CATS else lane)
            for a, lane, c, p, t in zip(args, lanes, cats, pid, tid, strict=True)
        ]
        for c, p in zip(cats, pid, strict=True):
            (self.device_pids if c in DEVICE_CATS else self.host_pids).add(p)
        _strings(lanes, S.SPAN_LANE)
        lanes = [lane if lane is None else intern(lane, lane) for lane in lanes]
        cols = self.cols
        cols["span_id"].append(np.array(sids, dtype=np.int64))
        parents = _ints([a.pop(S.PARENT_ID, 0) for a in args], S.PARENT_ID)
        cols["parent_id"].append(np.array(parents, dtype=np.int64))
        cols["trace_id"].append(
            np.array(_strings([a.pop(S.TRACE_ID, None) for a in args], S.TRACE_ID), dtype=object)
        )
        cols["start"].append(start)
        cols["end"].append(end)
        cols["pid"].append(np.array(pid, dtype=np.int64))
        cols["tid"].append(np.array(tid, dtype=np.int64))
        cols["name"].append(np.array([intern(n, n) for n in names], dtype=object))
        cols["lane"].append(np.array(lanes, dtype=object))
        cols["role"].append(
            np.array(_strings([a.pop(S.SPAN_ROLE, None) for a in args], S.SPAN_ROLE), dtype=object)
        )
        self.rows += len(evs)
        with_cat = [(sid, c) for sid, c in zip(sids, cats, strict=True) if c]
        self.attrs.add_values(
            S.CHROME_CATEGORY, [sid for sid, _ in with_cat], [c for _, c in with_cat]
        )
        self.add_args(sids, args)

    def add_args(self, sids: list[int], args: list[dict]) -> None:
        """Each span's args as attributes, typed a key at a time."""
        by_key: dict[str, tuple[list[int], list[Any]]] = {}
        depth = self.limits.depth
        for sid, a in zip(sids, args, strict=True):
            for key, value in a.items():
                if type(value) in _CONTAINERS and limits.nesting(value, depth):
                    raise limits.exceeded(f"args {short(key)} nests deeper than {depth} levels",
                                          "depth")  # fmt: skip
                got = by_key.get(key)
                if got is None:
                    got = by_key[key] = ([], [])
                got[0].append(sid)
                got[1].append(value)
        for key, (ids, values) in by_key.items():
            self.attrs.add_values(key, ids, values)
        limits.check(self.attrs.keys, "attr_keys", "distinct attribute keys")

    def add_sync(
        self,
        op: str,
        obj: str,
        seq: int,
        keyed: bool,
        ev: dict,
        span: int,
        lane: Any,
        bind: int = UNBOUND,
    ) -> None:
        s = self.sync
        s["bind"].append(bind)
        args = _args(ev)
        s["op"].append(op)
        s["obj"].append(self.names.setdefault(obj, obj))
        s["seq"].append(seq)
        s["keyed"].append(keyed)
        s["time"].append(ns(ev["ts"]))
        s["pid"].append(self.ident(ev.get("pid")))
        s["tid"].append(self.ident(args.get(S.TRUE_TID, ev.get("tid"))))
        s["lane"].append(lane)
        s["span_id"].append(span)

    def open(self, key: tuple, ev: dict, lane: str | None = None) -> None:
        self.stacks.setdefault(key, []).append(self.rows + len(self.pending))
        self.pending.append((ev, ns(ev["ts"]), -1, lane))

    def close(self, key: tuple, ev: dict) -> None:
        stack = self.stacks.get(key)
        if not stack:
            self.unmatched_ends += 1
            return
        self.closes.append((stack.pop(), ns(ev["ts"]), ev.get("args")))

    def event(self, ev: dict) -> None:
        ph = ev.get("ph")
        if type(ph) is not str:
            raise TypeError(f"ph should be a string, not {short(ph)}")
        args = _args(ev)
        if ph == "B":
            tid = args.get(S.TRUE_TID, ev.get("tid"))
            self.open((self.ident(ev.get("pid")), self.ident(tid)), ev)
        elif ph == "E":
            tid = args.pop(S.TRUE_TID, ev.get("tid"))
            self.close((self.ident(ev.get("pid")), self.ident(tid)), ev)
        elif ph in ("b", "e"):
            pid = self.ident(ev.get("pid"))
            key = (pid, _cat(ev), str(_flow_id(ev)))
            if ph == "b":
                self.open(key, ev, S.async_lane(pid, key[2]))
            else:
                self.close(key, ev)
        elif ph in _INSTANTS:
            self.instant(ev)
        elif ph in _FLOWS:
            if ev.get("cat") == S.SYNC_FLOW_CATEGORY:
                return
            cat, flow = _cat(ev), _flow_id(ev)
            if type(flow) is int and -(2**63) <= flow < 2**63:
                seq = flow  # the flow's own id: a conversion writes it back as it was
            else:  # "0x1f", {"local": ...}: numbered below zero in order of appearance
                ids = self.flow_ids.setdefault(cat, {})
                key = flow if isinstance(flow, str | int) else str(flow)
                seq = ids.get(key)
                if seq is None:
                    seq = ids[key] = -1 - self.flows
                    self.flows += 1
            args = ev.get("args") or {}
            span = args.get(S.SYNC_SPAN, 0)
            if type(span) is not int:
                raise TypeError(f"{S.SYNC_SPAN} should be an integer")
            if ev.get("bp") is not None and type(ev["bp"]) is not str:
                raise TypeError(f"bp should be a string, not {short(ev['bp'])}")
            bind = NEXT if ph == "f" and ev.get("bp") != "e" else ENCLOSING
            for op in _FLOWS[ph]:
                self.add_sync(
                    op, f"{S.FLOW_OBJ_PREFIX}{cat or ''}", seq, True, ev, span, None, bind
                )
        elif ph == "M":
            self.metadata(ev)
        elif ph == "C":
            pid = self.ident(ev.get("pid"))
            name = ev.get("name", "")
            if type(name) is not str:
                raise TypeError(f"a counter's name should be a string, not {short(name)}")
            for key, value in args.items():
                if type(value) not in (int, float, Decimal):
                    raise TypeError(f"counter {short(key)} should be a number, not {short(value)}")
                self.counters.append((pid, name, ns(ev["ts"]), key, float(value)))
        else:
            self.ignored[str(ph)] += 1

    def instant(self, ev: dict) -> None:
        args = _args(ev)
        if S.SYNC_OP in args or S.SYNC_OBJ in args:  # a sync event, or bad input
            op, obj, seq, keyed = C.sync_fields(
                args.get(S.SYNC_OP), args.get(S.SYNC_OBJ), args.get(S.SYNC_SEQ, C.NO_SEQ)
            )
            span = args.get(S.SYNC_SPAN, 0)
            if type(span) is not int:
                raise ValueError(f"{S.SYNC_SPAN} = {short(span)}: should be an integer span id")
            (lane,) = _strings([args.get(S.LANE)], S.LANE)
            self.add_sync(op, obj, seq, keyed, ev, span, lane)
            return
        t = ns(ev["ts"])
        self.pending.append((ev, t, t, None))

    def metadata(self, ev: dict) -> None:
        args = _args(ev)
        pid = self.ident(ev.get("pid"))
        if type(ev.get("name")) not in (str, type(None)):
            raise TypeError(f"a metadata event's name should be a string, not {short(ev['name'])}")
        _strings([args.get("name"), args.get(S.ROLE), args.get("labels")],
                 "a process or thread name, role or label")  # fmt: skip
        dp_rank = C.rank(args.get(S.DP_RANK), S.DP_RANK)
        tp_rank = C.rank(args.get(S.TP_RANK), S.TP_RANK)
        anchored = args.get(S.ANCHORED, False)
        if type(anchored) is not bool:
            raise TypeError(f"{S.ANCHORED} should be true or false, not {short(anchored)}")
        sort_index = args.get("sort_index")
        if sort_index is not None and type(sort_index) is not int:
            raise TypeError(f"sort_index should be an integer, not {short(sort_index)}")
        if ev.get("name") == "process_name":
            if pid not in self.proc:
                limits.check(len(self.proc) + 1, "processes", "processes named in the trace")
            proc = self.proc.setdefault(pid, {})
            proc["name"] = args.get("name") or ""
            proc["role"] = args.get(S.ROLE) or ""
            proc["anchored"] = anchored
            proc["dp_rank"], proc["tp_rank"] = dp_rank, tp_rank
        elif ev.get("name") == "thread_name":
            self.threads[f"{pid}/{self.ident(ev.get('tid'))}"] = args.get("name") or ""
        elif ev.get("name") == "process_labels" and args.get("labels") is not None:
            self.display.setdefault(PROCESS_LABELS, {})[pid] = args["labels"]
        elif ev.get("name") == "process_sort_index" and sort_index is not None:
            self.display.setdefault(PROCESS_SORT, {})[pid] = sort_index
        elif ev.get("name") == "thread_sort_index" and sort_index is not None:
            lane = f"{pid}/{self.ident(ev.get('tid'))}"
            self.display.setdefault(THREAD_SORT, {})[lane] = sort_index


_CONTAINERS = (dict, list)


def _first_bad(values: list, *kinds: type | None) -> Any:
    """The first value whose type is none of `kinds` (None among them: a JSON null is allowed)."""
    allowed = tuple(type(None) if k is None else k for k in kinds)
    return next(v for v in values if type(v) not in allowed)


def _args(ev: dict) -> dict:
    """An event's args, an object (absent or null: none)."""
    args = ev.get("args")
    if args is None:
        return {}
    if type(args) is not dict:
        raise TypeError(f"args should be an object, not {short(args)}")
    return args


def _cat(ev: dict) -> str | None:
    cat = ev.get("cat")
    if cat is not None and type(cat) is not str:
        raise TypeError(f"cat should be a string, not {short(cat)}")
    return cat


def _flow_id(ev: dict) -> Any:
    flow = ev.get("id", ev.get("id2"))
    if type(flow) not in (int, str, type(None)):
        raise TypeError(f"id should be an integer or a string, not {short(flow)}")
    return flow


def _ints(values: list, key: str) -> list:
    """``values`` if each is an integer or None, else a TypeError."""
    for v in values:
        if v is not None and type(v) is not int:
            raise TypeError(f"{key} should be an integer, not {short(v)}")
    return values


def _strings(values: list, key: str) -> list:
    """``values`` if each is a string or None (a column of strings), else a TypeError."""
    for v in values:
        if v is not None and type(v) is not str:
            raise TypeError(f"{key} should be a string, not {short(v)}")
    return values


_SPAN_COLS = (
    "span_id",
    "parent_id",
    "name",
    "start",
    "end",
    "pid",
    "tid",
    "trace_id",
    "lane",
    "role",
)
#: sync column -> dtype of its arrays (``bind``: how a flow event binds to a slice)
_SYNC_COLS = {"op": object, "obj": object, "seq": np.int64, "keyed": bool, "time": np.int64,
              "pid": np.int64, "tid": np.int64, "lane": object, "span_id": np.int64,
              "bind": np.int64}  # fmt: skip
BATCH = 1 << 14


def _batches(stream: Stream, meta: dict[str, Any]):
    """Batches of trace events of either Chrome form (a bare array, or traceEvents in an
    object): lists of decoded events, and the C scanner's columns (:class:`Scanned`) where it
    read runs of pieces."""
    scanner = Scanner()
    if stream.peek() == "[":
        yield from _merged(stream.batches(allow_unterminated=True, scan=scanner.feed), scanner)
        return
    found = False
    for key in stream.members():
        if key == "traceEvents":
            found = True
            yield from _merged(stream.batches(scan=scanner.feed), scanner)
        else:
            value = stream.value()
            if key in ("distributedInfo", "displayTimeUnit", "schemaVersion", "otherData"):
                limits.check_depth(value, f"{meta['path']}: {key}")
                meta[key] = plain(value)
    if not found:
        raise FdprofError(f"{meta['path']}: not a Chrome trace (no traceEvents array)")
    if not stream.at_end():
        raise stream.error("unexpected data after the trace object")


def _merged(batches: Iterator[Any], scanner: Scanner) -> Iterator[Any]:
    """The decoded batches, and what the scanner read between them, taken every
    MERGE_EVENTS events (a piece it read is a True in ``batches``)."""
    for batch in batches:
        if batch is True:
            if len(scanner) >= MERGE_EVENTS:
                yield scanner.take()
            continue
        if len(scanner):
            yield scanner.take()
        yield batch
    if len(scanner):
        yield scanner.take()


def read(path: Path) -> Trace:
    trace = Trace(meta={"format": "chrome", "path": str(path)})
    b = _Builder()
    first = last = 0
    with open_text(path) as f, progress.bar(path.stat().st_size, f"reading {path.name}") as shown:
        stream = Stream(f, str(path))
        for events in _batches(stream, trace.meta):
            step = MERGE_EVENTS if isinstance(events, Scanned) else BATCH
            for lo in range(0, len(events), step):
                hi = min(lo + step, len(events))
                last = first + hi - lo - 1
                try:
                    if isinstance(events, Scanned):
                        b.fast_batch(events, lo, hi)
                    else:
                        b.batch(events[lo:hi])
                except (TypeError, ValueError, KeyError, ArithmeticError) as exc:
                    what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
                    if isinstance(exc, OverflowError):
                        what = f"a number does not fit int64 ({what})"
                    raise FdprofError(f"{path}: events {first}-{last}: {what}") from None
                except FdprofError as exc:  # a limit: said where
                    raise FdprofError(f"{path}: events {first}-{last}: {exc}") from None
                first += hi - lo
            shown.update(raw_position(f) - shown.n)
    release_freed()  # the decoded batches' objects: freed, but glibc keeps them
    with mapped_large_blocks():  # the columns and frames: no holes left resident (.heap)
        return _finish(trace, b)


def _roles(given: np.ndarray, pids: np.ndarray, role_of: dict[int, str]) -> np.ndarray:
    """Each span's role: its own where the writer recorded one, else its process's."""
    return np.where(np.equal(given, None), pd.Series(pids).map(role_of).to_numpy(object), given)


def _device_lane(args: dict, pid: int, tid: int) -> str:
    """A PyTorch GPU event's stream, not yet scoped by process: the ``device`` and ``stream``
    args where Kineto gives them, else the event's pid and tid (which it sets to them)."""
    device, stream = args.get("device"), args.get("stream")
    for key, value in (("device", device), ("stream", stream)):
        if value is not None and (type(value) is not int or value < 0):
            raise TypeError(f"a GPU event's {key} should be an integer >= 0, not {short(value)}")
    return (f"{S.DEVICE_CUDA}:{pid if device is None else device}"
            f"/stream:{tid if stream is None else stream}")  # fmt: skip


def _device_owners(b: _Builder, syncs: dict[str, np.ndarray], pids: np.ndarray) -> dict[int, int]:
    """Device pid -> the host process whose streams they are. A PyTorch trace gives each GPU
    a "process" of its own (pid = device index), so the device's lanes are scoped by the one
    host process of the trace; with several, by the process whose flows launch onto it (the
    most flow starts); else by the device pid itself."""
    devices = sorted(b.device_pids)
    hosts = sorted(p for p in b.host_pids - b.device_pids if p >= 0)
    if not devices:
        return {}
    if len(hosts) == 1:
        return dict.fromkeys(devices, hosts[0])
    flows = syncs["bind"] != UNBOUND
    if not flows.any():
        return {}
    f = pd.DataFrame({"op": syncs["op"][flows], "obj": syncs["obj"][flows],
                      "seq": syncs["seq"][flows], "pid": syncs["pid"][flows]})  # fmt: skip
    rel = f[f["op"] == S.SyncOp.RELEASE].drop_duplicates(["obj", "seq"])
    acq = f[(f["op"] == S.SyncOp.ACQUIRE) & f["pid"].isin(devices)]
    pairs = acq.merge(rel, on=["obj", "seq"], suffixes=("_dev", "_host"))
    pairs = pairs[pairs["pid_host"].isin(hosts)]
    if pairs.empty:
        return {}
    top = pairs.groupby("pid_dev")["pid_host"].agg(lambda v: v.value_counts().index[0])
    return {int(k): int(v) for k, v in top.items()}


def _bind_flows(spans: dict[str, np.ndarray], syncs: dict[str, np.ndarray]) -> int:
    """Flow events bound to slices as Chrome and Perfetto bind them, in place; returns how many
    were dropped for lacking the other end of their flow (nothing to order).

    A flow start or step binds to the slice enclosing it on its track, an end with
    ``"bp":"e"`` too, any other end to the next slice to begin on the track (one the fdprof
    writer names by ``sync.span`` is that span). A bound event takes the slice's lane; an
    acquire bound to a slice on a lane of its own (a device stream, an async track) moves to
    the slice's start, the slice being one piece of work the flow started: the ``ac2g`` flow
    from ``cudaLaunchKernel`` to its kernel orders the kernel after the launch. On a host
    thread program order is time order, so an acquire stays at its time there, as does an
    event no slice holds."""
    bind = syncs.pop("bind")
    flows = np.flatnonzero(bind != UNBOUND)
    if not len(flows):
        return 0
    is_acq = syncs["op"][flows] == S.SyncOp.ACQUIRE
    pairs = pd.DataFrame({"obj": syncs["obj"][flows], "seq": syncs["seq"][flows],
                          "acq": is_acq})  # fmt: skip
    ends = pairs.groupby(["obj", "seq"])["acq"].transform("nunique").to_numpy()
    if (ends < 2).any():
        keep = np.ones(len(bind), dtype=bool)
        keep[flows[ends < 2]] = False
        for key in syncs:
            syncs[key] = syncs[key][keep]
        bind = bind[keep]
        flows = np.flatnonzero(bind != UNBOUND)
        is_acq = syncs["op"][flows] == S.SyncOp.ACQUIRE
    row = _bound_slices(spans, syncs, flows, bind[flows])
    bound = row >= 0
    at, rows = flows[bound], row[bound]
    syncs["lane"][at] = spans["lane"][rows]
    syncs["span_id"][at] = spans["span_id"][rows]
    own_lane = np.equal(spans["lane"][np.maximum(row, 0)], None)
    acquires = bound & is_acq & ~own_lane
    syncs["time"][flows[acquires]] = spans["start"][row[acquires]]
    return int((ends < 2).sum())


def _bound_slices(
    spans: dict[str, np.ndarray], syncs: dict[str, np.ndarray], flows: np.ndarray, how: np.ndarray
) -> np.ndarray:
    """The span row each flow event binds to (-1: none); see :func:`_bind_flows`."""
    out = np.full(len(flows), -1, dtype=np.int64)
    named = np.flatnonzero(syncs["span_id"][flows] != 0)
    if len(named):  # only the fdprof writer names spans: no index of them for others' traces
        by_id = pd.Index(spans["span_id"]).get_indexer(syncs["span_id"][flows[named]])
        out[named[by_id >= 0]] = by_id[by_id >= 0]
        del by_id
    todo = np.flatnonzero(out < 0)
    if not len(todo) or not len(spans["start"]):
        return out
    # one key per (pid, tid) track, one rank per instant: (track, time) as one sortable int
    pid = np.concatenate([spans["pid"], syncs["pid"][flows[todo]]])
    tid = np.concatenate([spans["tid"], syncs["tid"][flows[todo]]])
    track = _track_ranks(pid, tid)
    del pid, tid
    times, rank = np.unique(
        np.concatenate([spans["start"], syncs["time"][flows[todo]]]), return_inverse=True
    )
    key = track.astype(np.int64)
    key *= len(times) + 1
    key += rank.ravel()
    del times, rank  # each (n + flows) int64: freed before the sort below
    n = len(spans["start"])
    span_key, flow_key, flow_track = key[:n], key[n:], track[n:]
    order = np.argsort(span_key, kind="stable")
    sorted_key = span_key[order]
    ts = syncs["time"][flows[todo]]
    nxt = how[todo] == NEXT
    # next: the first slice of the track at or after the event
    at = np.searchsorted(sorted_key, flow_key[nxt], "left")
    ok = at < n
    cand = order[np.minimum(at, n - 1)]
    ok &= track[cand] == flow_track[nxt]
    out[todo[nxt][ok]] = cand[ok]
    # enclosing: the last slice of the track begun at or before it that still runs (parents
    # of a slice that ended first are a few rows further back)
    enc = np.flatnonzero(~nxt)
    at = np.searchsorted(sorted_key, flow_key[enc], "right") - 1
    for _ in range(_ENCLOSING_DEPTH):
        if not len(enc):
            break
        valid = at >= 0
        cand = order[np.maximum(at, 0)]
        valid &= track[cand] == flow_track[enc]
        ends = spans["end"][cand]  # -1: never ended, so encloses all after its start
        hit = valid & ((ends < 0) | (ends >= ts[enc]))
        out[todo[enc[hit]]] = cand[hit]
        retry = valid & ~hit
        enc, at = enc[retry], at[retry] - 1
    return out


def _track_ranks(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Each row's rank among the distinct (pid, tid) pairs in lexicographic order, from one
    int64 key of the two columns' own ranks (what ``np.unique(..., axis=0)`` gives, without
    its structured copies of the rows: the peak of a Chrome load was there)."""
    tids, tid_rank = np.unique(tid, return_inverse=True)
    key = np.unique(pid, return_inverse=True)[1].astype(np.int64)
    key *= len(tids)
    key += tid_rank
    return np.unique(key, return_inverse=True)[1].ravel()


#: how many earlier slices of a track are tried for one enclosing a flow event
_ENCLOSING_DEPTH = 32


def _finish(trace: Trace, b: _Builder) -> Trace:
    b.flow_ids.clear()  # the stream is read: no flow needs its sequence number any more
    b.stacks.clear()

    def cat(name: str, dtype) -> np.ndarray:
        parts = b.cols.pop(name)  # each batch's part freed once joined
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    span_id = cat("span_id", np.int64)
    end = cat("end", np.int64)
    if b.closes:
        rows = np.array([c[0] for c in b.closes], dtype=np.int64)
        end[rows] = [c[1] for c in b.closes]
        closing = [(int(span_id[row]), a) for row, _, a in b.closes if a]
        b.add_args([sid for sid, _ in closing], [a for _, a in closing])
    explicit = span_id[span_id > 0]
    base = int(explicit.max()) if len(explicit) else 0
    span_id[span_id < 0] = base - span_id[span_id < 0]
    b.attrs.renumber(lambda ids: np.subtract(base, ids, out=ids, where=ids < 0))
    attrs = b.attrs.build()
    if not distinct(span_id):
        raise FdprofError(f"{trace.meta['path']}: two spans share one {S.SPAN_ID}")
    pids = cat("pid", np.int64)
    names = {v: str(k) for k, v in b.ids.items()}
    syncs = {
        k: np.concatenate(v) if v else np.zeros(0, _SYNC_COLS[k]) for k, v in b.sync_parts.items()
    }
    seen = np.sort(pd.unique(np.concatenate([pids, syncs["pid"]])))
    limits.check(len(seen), "processes", f"{trace.meta['path']}: processes in the trace")
    procs = sorted(set(seen.tolist()) | set(b.proc))  # not a Python int per row
    role_of = {p: b.proc.get(p, {}).get("role", "") for p in procs}
    spans = {
        "span_id": span_id,
        "parent_id": cat("parent_id", np.int64),
        "name": cat("name", object),
        "start": cat("start", np.int64),
        "end": end,
        "pid": pids,
        "tid": cat("tid", np.int64),
        "role": _roles(cat("role", object), pids, role_of),
        "trace_id": cat("trace_id", object),
        "lane": cat("lane", object),
    }
    owners = _device_owners(b, syncs, pids)
    spans["lane"] = C.scope_lanes(
        spans["lane"], remap_ints(pids, list(owners), list(owners.values()))
    )
    unpaired = _bind_flows(spans, syncs)
    if unpaired:
        trace.warn(f"{unpaired} flow event(s) without the other end of their flow were ignored",
                   "unpaired_flow", unpaired)  # fmt: skip
    release_freed()  # the per-batch parts and flow binding's temporaries, before the frames
    processes = {
        "pid": procs,
        "role": [role_of[p] for p in procs],
        "name": [b.proc.get(p, {}).get("name") or names.get(p, str(p)) for p in procs],
        "anchored": [b.proc.get(p, {}).get("anchored", False) for p in procs],
        "dp_rank": [b.proc.get(p, {}).get("dp_rank", -1) for p in procs],
        "tp_rank": [b.proc.get(p, {}).get("tp_rank", -1) for p in procs],
    }
    assemble(trace, spans, attrs, syncs, processes)
    trace.meta["thread_names"] = b.threads
    if b.display:
        trace.meta["display"] = b.display
    if b.counters:
        trace.meta["counters"] = pd.DataFrame(
            b.counters, columns=["pid", "name", "time", "key", "value"]
        )
    open_spans = int((spans["end"] == -1).sum())
    if open_spans:
        trace.warn(f"{open_spans} span(s) begun (B/b) but never ended: end = -1", "unended_span",
                   open_spans)  # fmt: skip
    if b.unmatched_ends:
        trace.warn(f"{b.unmatched_ends} end event(s) (E/e) without a begin were ignored",
                   "unmatched_end", b.unmatched_ends)  # fmt: skip
    if b.ignored:
        phases = ", ".join(f"{short(ph)} ×{n}" for ph, n in sorted(b.ignored.items()))
        trace.warn(f"ignored events of unsupported phases: {phases}", "unsupported_phase",
                   sum(b.ignored.values()))  # fmt: skip
    return trace
