"""The live export's decoder: one process's records, as they are written, into OpenTelemetry
spans (``fdprof run --otlp-endpoint``). It builds them by the rules every export follows
(:mod:`fdprof.formats.otel`), so the replay of the same records gives the same spans.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from fdprof import semconv as S
from fdprof.formats import records as R
from fdprof.formats.otel import MASK64, SpanData, root_trace_id, sync_event

#: finished spans whose trace ids are remembered for children that end after their parent
_REMEMBERED = 65536


@dataclass
class _Open:
    name: str
    parent: int
    t0: int
    tid: int
    attrs: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    links: list = field(default_factory=list)
    context: tuple[int, int] | None = None  # (trace id, remote span id) of a CONTEXT record


class SpanBuilder:
    """Consumes one process's records in order; :meth:`feed` returns the span a record
    completed. ``instance`` is the process's ``service.instance.id``; ``header`` its file's
    (the version says how a sync's keyed flag is written); ``offset_ns`` puts the monotonic
    times on the epoch."""

    def __init__(self, instance: str, header: R.FileHeader, offset_ns: int) -> None:
        self._instance = instance
        self._version = header.version
        self._shift = offset_ns
        self._strings: dict[int, str] = {}
        self._threads: dict[int, str] = {}
        self._open: dict[int, _Open] = {}
        self._traces: OrderedDict[int, int] = OrderedDict()

    def feed(self, kind: int, flags: int, tid: int, f: tuple) -> SpanData | None:
        if kind == R.Kind.STRING:
            self._strings[f[0]] = f[1]
        elif kind == R.Kind.SPAN_BEGIN:
            sid, parent, name_id, _, t0 = f
            self._open[sid] = _Open(self._strings.get(name_id, "?"), parent, t0, tid)
        elif kind == R.Kind.SPAN_END:
            span = self._open.pop(f[0], None)
            if span is not None:
                return self._finish(f[0], span, f[1])
        elif kind in (R.Kind.ATTR_INT, R.Kind.ATTR_FLOAT):
            self._attr(f[0], f[1], f[3])
        elif kind == R.Kind.ATTR_STR:
            self._attr(f[0], f[1], self._strings.get(f[2], ""))
        elif kind == R.Kind.ATTR_INTS:
            self._attr(f[0], f[1], list(f[2]))
        elif kind == R.Kind.SYNC:
            self._sync(flags, *f)
        elif kind == R.Kind.CONTEXT:
            self._context(flags, *f)
        elif kind == R.Kind.THREAD_NAME:
            self._threads[tid] = self._strings.get(f[0], "")
        return None

    def _attr(self, sid: int, key_id: int, value) -> None:
        span = self._open.get(sid)
        if span is not None:
            span.attrs[self._strings.get(key_id, "?")] = value

    def _sync(self, flags: int, sid: int, obj_id: int, op: int, seq: int, t: int) -> None:
        span = self._open.get(sid)
        if span is not None:
            obj = self._strings.get(obj_id, "?")
            keyed = R.sync_keyed(self._version, flags, seq)
            op_name = R.SyncCode(op).op if op in tuple(R.SyncCode) else str(op)
            span.events.append(sync_event(op_name, obj, seq if keyed else None, t + self._shift))

    def _context(self, flags: int, sid: int, trace_id: bytes, remote: int) -> None:
        span = self._open.get(sid)
        if span is None:
            return
        tid = int.from_bytes(trace_id, "big")
        if flags & R.CONTEXT_LINK:
            span.links.append((tid, remote & MASK64))
        else:
            span.context = (tid, remote)

    def _trace_of(self, sid: int, span: _Open) -> int:
        if span.context is not None:
            return span.context[0]
        known = self._traces.get(span.parent)
        if known is None:
            parent = self._open.get(span.parent)
            if parent is not None:
                return self._trace_of(span.parent, parent)
            return root_trace_id(self._instance, sid)
        return known

    def _finish(self, sid: int, span: _Open, t1: int) -> SpanData:
        trace = self._trace_of(sid, span)
        self._traces[sid] = trace
        if len(self._traces) > _REMEMBERED:
            self._traces.popitem(last=False)
        parent, remote = span.parent, False
        if not parent and span.context is not None and span.context[1]:
            parent, remote = span.context[1], True
        attrs = {**span.attrs, S.THREAD_ID: span.tid}
        if span.tid in self._threads:
            attrs[S.THREAD_NAME] = self._threads[span.tid]
        return SpanData(
            span.name,
            trace,
            sid & MASK64,
            parent & MASK64,
            remote,
            span.t0 + self._shift,
            t1 + self._shift,
            attrs,
            span.events,
            span.links,
        )
