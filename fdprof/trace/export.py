"""A loaded trace as OpenTelemetry spans.

:class:`OtelView` is the one adapter from the trace model to OpenTelemetry spans: ``fdprof
export-otlp`` replays its spans to a collector (:func:`fdprof.probe.sdk.otel_replay.replay`),
and the OTLP JSON writer (:mod:`fdprof.trace.otlp`) writes them, with the markers that make the
file lossless. Its rules are the live export's (:mod:`fdprof.formats.otel`), so a replayed run
and a live one send the same spans: the same ids, parents, trace ids, resources and attributes.
Spans keep their recorded times.

A trace read from OTLP keeps what its file said about itself: each process's resource
(``service.name`` and all), and span kinds, scopes and statuses (attributes ``span.kind``,
``otel.scope.*``, ``otel.status_*`` in the model).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.formats.otel import (
    MASK64,
    OTLP_KINDS,
    OTLP_STATUS,
    SCOPE,
    SpanData,
    process_resource,
    root_trace_id,
    run_attributes,
    sync_event,
)
from fdprof.formats.records import PID_SHIFT
from fdprof.trace import conventions as C
from fdprof.trace.model import Trace, rows

#: the model's attributes that are OTLP fields, not span attributes
_FIELDS = (
    S.LINKS,
    S.SPAN_KIND,
    S.OTEL_SCOPE_NAME,
    S.OTEL_SCOPE_VERSION,
    S.OTEL_STATUS_CODE,
    S.OTEL_STATUS_DESCRIPTION,
)


def _first_positions(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row of each ``wanted`` id in ``ids`` (its first row if repeated), -1 where absent or 0."""
    if not len(ids):
        return np.full(len(wanted), -1)
    first = ~pd.Index(ids).duplicated()
    found = pd.Index(ids[first]).get_indexer(wanted)
    pos = np.where(found >= 0, np.flatnonzero(first)[np.maximum(found, 0)], -1)
    return np.where(wanted == 0, -1, pos)


class OtelView:
    """``trace``'s spans as OpenTelemetry spans (:class:`~fdprof.formats.otel.SpanData`, no
    SDK needed), in process order, and each process's resource attributes. ``lossless`` adds
    what only a file needs to be read back as it was: spans that never ended (marked), sync
    events with their thread and lane, and carrier spans for sync events that belong to no
    span."""

    def __init__(self, trace: Trace, lossless: bool = False) -> None:
        self.trace = trace
        self.lossless = lossless
        procs = trace.processes
        self._role_of = dict(rows(procs, ["pid", "role"]))
        known = trace.meta.get("resources") or {}
        anchors = trace.meta.get("epoch_anchors") or {}
        run = run_attributes(trace.meta.get("config") or {})
        pids = sorted(set(procs["pid"].tolist()) | set(trace.spans["pid"].tolist()))
        dp_of = dict(rows(procs, ["pid", "dp_rank"]))
        tp_of = dict(rows(procs, ["pid", "tp_rank"]))
        #: pid -> resource attributes (the file's own for a trace read from OTLP)
        self.attributes: dict[int, dict[str, Any]] = {}
        for pid in pids:
            own = known.get(pid, known.get(str(pid)))
            if own is None:
                role = str(self._role_of.get(pid) or "")
                own = process_resource(role, pid, int(dp_of.get(pid, -1)), anchors.get(pid), run,
                                       int(tp_of.get(pid, -1)))  # fmt: skip
            self.attributes[pid] = dict(own)
        unended = trace.spans["end"].to_numpy() < 0
        #: spans the view leaves out: those that never ended (the live export never sees them)
        self.skipped = 0 if lossless else int(unended.sum())

    def __len__(self) -> int:
        return len(self.trace.spans) - self.skipped

    def instance(self, pid: int) -> str:
        """The process's ``service.instance.id`` (root trace ids derive from it)."""
        return str(self.attributes[pid].get(S.SERVICE_INSTANCE_ID) or f"pid-{pid}")

    def _trace_ids(self, order: np.ndarray) -> list[int]:
        """Each span's trace, rows in ``order``: its own,
        else its nearest ancestor's, else one derived from its root's process instance and id."""
        spans = self.trace.spans
        own = spans["trace_id"].to_numpy(object, na_value=None)[order]
        sid = spans["span_id"].to_numpy()[order]
        pid = spans["pid"].to_numpy()[order]
        pos = _first_positions(sid, spans["parent_id"].to_numpy()[order])
        known = ~np.equal(own, None) & (own != "")  # "" (NVTX captures): no trace id
        top = np.where(known | (pos < 0), np.arange(len(sid)), pos)
        for _ in range(64):  # pointer doubling: the root (or known ancestor) of every span
            up = top[top]
            if np.array_equal(up, top):
                break
            top = up
        cache: dict[int, int] = {}
        out = []
        for t in top.tolist():
            value = cache.get(t)
            if value is None:
                if known[t]:
                    value = int(own[t], 16)
                else:
                    value = root_trace_id(self.instance(int(pid[t])), int(sid[t]))
                cache[t] = value
            out.append(value)
        return out

    def _remote(self, rows_: np.ndarray) -> list[bool]:
        """Whether each span's parent is in another process: the parent's row says, else, in a
        native trace, the pid in the parent's id (``pid << PID_SHIFT | counter``)."""
        spans = self.trace.spans
        pids = spans["pid"].to_numpy()
        pid, parent = pids[rows_], spans["parent_id"].to_numpy()[rows_]
        pos = _first_positions(spans["span_id"].to_numpy(), parent)
        row = pos >= 0
        other = np.zeros(len(pid), dtype=bool)
        other[row] = pids[pos[row]] != pid[row]
        if self.trace.meta.get("format") == "native":
            missing = ~row & (parent != 0)
            other[missing] = (parent[missing] >> PID_SHIFT) != pid[missing]
        return other.tolist()

    def _attrs(self) -> dict[int, dict[str, Any]]:
        """``span id -> {key: value}``, a fresh dict per span (the caller adds to them)."""
        out: dict[int, dict[str, Any]] = {}
        for key, column in self.trace.attrs.items():
            for sid, value in zip(column.span_id.tolist(), column.python(), strict=True):
                got = out.get(sid)
                if got is None:
                    out[sid] = {key: value}
                else:
                    got[key] = value
        return out

    def _events(self) -> tuple[dict[int, list], dict[int, list]]:
        """Sync events by owning span, and (lossless) those of no span here, by process."""
        spans, syncs = self.trace.spans, self.trace.syncs
        on_span: dict[int, list] = {}
        carried: dict[int, list] = {}
        owner = _first_positions(spans["span_id"].to_numpy(), syncs["span_id"].to_numpy())
        owned = owner >= 0
        owned[owned] = spans["pid"].to_numpy()[owner[owned]] == syncs["pid"].to_numpy()[owned]
        take = np.ones(len(owned), dtype=bool) if self.lossless else owned
        cols = ["op", "obj", "seq", "keyed", "time", "pid", "tid", "lane", "span_id"]
        for own, (op, obj, seq, keyed, t, pid, tid, lane, span) in zip(
            owned[take].tolist(), rows(syncs[take], cols), strict=True
        ):
            extra: dict[str, Any] = {}
            if self.lossless:
                extra[S.THREAD_ID] = tid
                if lane is not None:
                    extra[S.LANE] = lane
                if not own:
                    extra.update({S.SYNC_SPAN: span, S.PROCESS_PID: pid})
            event = sync_event(op, obj, seq if keyed else None, t, extra)
            (on_span.setdefault(span, []) if own else carried.setdefault(pid, [])).append(event)
        return on_span, carried

    def spans(self) -> Iterator[tuple[int, SpanData]]:
        """``(pid, span)`` for every span, a process's spans together; the carriers (lossless)
        come last."""
        trace = self.trace
        rows_ = np.argsort(trace.spans["pid"].to_numpy(), kind="stable")
        picked = trace.spans.iloc[rows_]
        cols = ["span_id", "parent_id", "name", "start", "end", "pid", "tid", "lane", "role"]
        columns = [picked[c].tolist() for c in cols]
        thread_lanes = C.thread_lanes(picked["pid"].to_numpy(), picked["tid"].to_numpy()).tolist()
        trace_ids = self._trace_ids(rows_)
        remote = self._remote(rows_)
        own_trace = picked["trace_id"].to_numpy(object, na_value=None).tolist()
        attrs_of = self._attrs()
        events_of, carried = self._events()
        names = self._thread_names()
        role_of, lossless = self._role_of, self.lossless
        for i, (sid, parent, name, start, end, pid, tid, lane, role) in enumerate(
            zip(*columns, strict=True)
        ):
            if end < 0 and not lossless:
                continue
            attrs = attrs_of.pop(sid, None) or {}
            fields = {k: attrs.pop(k) for k in _FIELDS if k in attrs}
            attrs[S.THREAD_ID] = tid
            thread_name = names.get((pid, tid))
            if thread_name is not None:
                attrs[S.THREAD_NAME] = thread_name
            if lane != thread_lanes[i] and S.LANE not in attrs:
                attrs[S.SPAN_LANE] = lane
            if role != role_of.get(pid, role) and S.ROLE not in attrs:
                attrs[S.SPAN_ROLE] = role
            if lossless:
                if end < 0:
                    attrs[S.UNENDED] = True
                if own_trace[i] is None:
                    attrs[S.SYNTHETIC_TRACE] = True
            events = events_of.get(sid, [])
            end = max(end, start)
            yield pid, _span_data(name, trace_ids[i], sid, parent, remote[i], start, end, attrs,
                                  events, fields)  # fmt: skip
        for pid, events in carried.items():
            t = events[0].time
            trace_id = root_trace_id(self.instance(pid), 0)
            attrs = {S.SYNC_CARRIER: True, S.SYNTHETIC_TRACE: True}
            yield pid, SpanData(S.SYNC_CARRIER_NAME, trace_id, 0, 0, False, t, t, attrs, events, [])

    def _thread_names(self) -> dict[tuple[int, int], str]:
        names = {}
        for key, name in (self.trace.meta.get("thread_names") or {}).items():
            pid, _, tid = str(key).partition("/")
            if pid.lstrip("-").isdigit() and tid.lstrip("-").isdigit():
                names[int(pid), int(tid)] = name
        return names


def _span_data(name, trace, sid, parent, remote, start, end, attrs, events, fields) -> SpanData:
    """A row's span; ``fields`` are the model's attributes that are OTLP fields (links, kind,
    scope, status)."""
    links = [
        (int(tp.split("-")[1], 16), int(tp.split("-")[2], 16)) for tp in fields.get(S.LINKS) or ()
    ]
    status = None
    if fields.get(S.OTEL_STATUS_CODE) in OTLP_STATUS:
        status = (fields[S.OTEL_STATUS_CODE], fields.get(S.OTEL_STATUS_DESCRIPTION))
    scope = SCOPE
    if fields.get(S.OTEL_SCOPE_NAME) is not None:
        scope = (str(fields[S.OTEL_SCOPE_NAME]), fields.get(S.OTEL_SCOPE_VERSION))
    kind = fields.get(S.SPAN_KIND)
    kind = kind if kind in OTLP_KINDS and kind != "internal" else None
    return SpanData(name, trace, sid & MASK64, parent & MASK64, remote, start, end, attrs,
                    events, links, kind, status, scope)  # fmt: skip
