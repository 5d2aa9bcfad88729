"""A loaded trace as OpenTelemetry spans, and its replay to a collector over OTLP/HTTP.

:class:`OtelView` is the one adapter from the trace model to OpenTelemetry spans: ``fdprof
export-otlp`` sends its spans through the SDK's batch processor and OTLP exporter
(:mod:`fdprof.probe.otel_sink`), and the OTLP JSON writer (:mod:`fdprof.trace.otlp`) writes
them, with the markers that make the file lossless. Its rules are the live export's
(:mod:`fdprof.probe.otel_spans`), so a replayed run and a live one send the same spans: the
same ids, parents, trace ids, resources and attributes. Spans keep their recorded times.

A trace read from OTLP keeps what its file said about itself: each process's resource
(``service.name`` and all), and span kinds, scopes and statuses (attributes ``span.kind``,
``otel.scope.*``, ``otel.status_*`` in the model).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof import settings as env
from fdprof.errors import FdprofError
from fdprof.probe.otel_spans import (
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
from fdprof.probe.recorder import PID_SHIFT
from fdprof.trace import conventions as C
from fdprof.trace.chrome import SPAN_LANE, SPAN_ROLE
from fdprof.trace.model import Trace, rows
from fdprof.trace.otlp import CARRIER, CARRIER_NAME, SYNC_SPAN, SYNTHETIC_TRACE, UNENDED

DEFAULT_ENDPOINT = "http://localhost:4318"
#: the model's attributes that are OTLP fields, not span attributes
_FIELDS = (
    C.LINKS,
    S.SPAN_KIND,
    S.OTEL_SCOPE_NAME,
    S.OTEL_SCOPE_VERSION,
    S.OTEL_STATUS_CODE,
    S.OTEL_STATUS_DESCRIPTION,
)


def _first_positions(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row of each ``wanted`` id in ``ids`` (its first row if repeated), -1 where absent or 0."""
    first = ~pd.Index(ids).duplicated()
    found = pd.Index(ids[first]).get_indexer(wanted)
    pos = np.where(found >= 0, np.flatnonzero(first)[np.maximum(found, 0)], -1)
    return np.where(wanted == 0, -1, pos)


class OtelView:
    """``trace``'s spans as OpenTelemetry spans (:class:`~fdprof.probe.otel_spans.SpanData`, no
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
        attrs = self.attributes[pid]
        return str(attrs.get(S.SERVICE_INSTANCE_ID) or f"pid-{pid}")

    def _trace_ids(self, order: np.ndarray) -> list[int]:
        """Each span's trace (module :mod:`fdprof.probe.otel_spans`): its own, else its nearest
        ancestor's, else one derived from its root's process instance and id."""
        spans = self.trace.spans
        sid = spans["span_id"].to_numpy()[order]
        pid = spans["pid"].to_numpy()[order]
        own = spans["trace_id"].to_numpy(object, na_value=None)[order]
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

    def _remote(self, order: np.ndarray) -> np.ndarray:
        """Whether each span's parent is in another process: the parent's row says, else, in a
        native trace, the pid in the parent's id (``pid << PID_SHIFT | counter``)."""
        spans = self.trace.spans
        pid = spans["pid"].to_numpy()[order]
        parent = spans["parent_id"].to_numpy()[order]
        pos = _first_positions(spans["span_id"].to_numpy()[order], parent)
        row = pos >= 0
        other = np.zeros(len(pid), dtype=bool)
        other[row] = pid[pos[row]] != pid[row]
        if self.trace.meta.get("format") == "native":
            missing = ~row & (parent != 0)
            other[missing] = (parent[missing] >> PID_SHIFT) != pid[missing]
        return other

    def _events(self) -> tuple[dict[int, list], dict[int, list]]:
        """Sync events by owning span, and (lossless) those of no span here, by process."""
        spans = self.trace.spans
        pid_of = dict(zip(spans["span_id"].tolist(), spans["pid"].tolist(), strict=True))
        on_span: dict[int, list] = {}
        carried: dict[int, list] = {}
        cols = ["op", "obj", "seq", "keyed", "time", "pid", "tid", "lane", "span_id"]
        for op, obj, seq, keyed, t, pid, tid, lane, span in rows(self.trace.syncs, cols):
            owned = pid_of.get(span) == pid
            if not owned and not self.lossless:
                continue
            extra: dict[str, Any] = {}
            if self.lossless:
                extra[S.THREAD_ID] = tid
                if lane is not None:
                    extra[C.LANE] = lane
                if not owned:
                    extra.update({SYNC_SPAN: span, S.PROCESS_PID: pid})
            event = sync_event(op, obj, seq if keyed else None, t, extra)
            (on_span.setdefault(span, []) if owned else carried.setdefault(pid, [])).append(event)
        return on_span, carried

    def spans(self) -> Iterator[tuple[int, SpanData]]:
        """``(pid, span)`` for every span, a process's spans together."""
        trace = self.trace
        spans = trace.spans
        order = np.argsort(spans["pid"].to_numpy(), kind="stable")
        trace_ids = self._trace_ids(order)
        remote = self._remote(order).tolist()
        own_trace = spans["trace_id"].to_numpy(object, na_value=None)[order].tolist()
        attrs_of = trace.attrs.by_span()
        events_of, carried = self._events()
        names = trace.meta.get("thread_names") or {}
        lanes = C.thread_lanes(spans["pid"].to_numpy()[order], spans["tid"].to_numpy()[order])
        cols = ["span_id", "parent_id", "name", "start", "end", "pid", "tid", "lane", "role"]
        picked = spans.iloc[order]
        for i, (sid, parent, name, start, end, pid, tid, lane, role) in enumerate(
            rows(picked, cols)
        ):
            if end < 0 and not self.lossless:
                continue
            own = attrs_of.get(sid, {})
            attrs = {k: v for k, v in own.items() if k not in _FIELDS}
            attrs[S.THREAD_ID] = tid
            thread_name = names.get(f"{pid}/{tid}")
            if thread_name is not None:
                attrs[S.THREAD_NAME] = thread_name
            if lane != lanes[i] and C.LANE not in own:
                attrs[SPAN_LANE] = lane
            if pid in self._role_of and role != self._role_of[pid] and C.ROLE not in own:
                attrs[SPAN_ROLE] = role
            if self.lossless:
                if end < 0:
                    attrs[UNENDED] = True
                if own_trace[i] is None:
                    attrs[SYNTHETIC_TRACE] = True
            links = [
                (int(tp.split("-")[1], 16), int(tp.split("-")[2], 16))
                for tp in own.get(C.LINKS) or ()
            ]
            status = None
            if own.get(S.OTEL_STATUS_CODE) in OTLP_STATUS:
                status = (own[S.OTEL_STATUS_CODE], own.get(S.OTEL_STATUS_DESCRIPTION))
            scope = SCOPE
            if own.get(S.OTEL_SCOPE_NAME) is not None:
                scope = (str(own[S.OTEL_SCOPE_NAME]), own.get(S.OTEL_SCOPE_VERSION))
            kind = own.get(S.SPAN_KIND)
            yield (
                pid,
                SpanData(
                    name,
                    trace_ids[i],
                    sid & MASK64,
                    parent & MASK64,
                    remote[i],
                    start,
                    max(end, start),
                    attrs,
                    events_of.get(sid, []),
                    links,
                    kind if kind in OTLP_KINDS and kind != "internal" else None,
                    status,
                    scope,
                ),
            )
        for pid, events in carried.items():
            t = events[0].time
            yield (
                pid,
                SpanData(
                    CARRIER_NAME,
                    root_trace_id(self.instance(pid), 0),
                    0,
                    0,
                    False,
                    t,
                    t,
                    {CARRIER: True, SYNTHETIC_TRACE: True},
                    events,
                    [],
                ),
            )


@dataclass(frozen=True)
class Exported:
    url: str
    #: spans offered, and delivered (the collector said so)
    spans: int
    delivered: int
    #: spans left out because they never ended (a process was killed)
    unended: int


def export(trace: Trace, endpoint: str | None = None, timeout: float | None = None) -> Exported:
    """Send every span of ``trace`` through the SDK's batch processor and OTLP exporter
    (retries and backoff are the SDK's); the first batch the exporter gives up on ends the
    replay, and the spans not delivered are one :class:`FdprofError` naming how many."""
    from fdprof.probe.otel_sink import SpanSink, readable, sdk_resource, span_exporter

    settings = env.otel(endpoint, default_endpoint=DEFAULT_ENDPOINT)
    traces = settings.traces
    if timeout is not None:
        traces = dataclasses.replace(traces, timeout_s=timeout)
    view = OtelView(trace)
    resources = {pid: sdk_resource(attrs, settings) for pid, attrs in view.attributes.items()}
    sink = SpanSink(span_exporter(traces), settings)
    try:
        for pid, span in view.spans():
            if sink.failed:
                break
            sink.emit(readable(span, resources[pid]), wait=True)
    finally:
        delivery = sink.close(flush=True)
    if delivery.delivered < len(view):
        raise FdprofError(
            f"{traces.endpoint}: {len(view) - delivery.delivered} of {len(view)} spans not "
            f"delivered ({delivery.reason})"
        )
    return Exported(traces.endpoint, len(view), delivery.delivered, view.skipped)
