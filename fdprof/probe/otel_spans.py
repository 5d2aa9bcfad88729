"""Build OpenTelemetry spans from one process's records, off the hot path.

Spans keep the probe's own 64-bit ids, so a ``traceparent`` sent in a queue message, an NVTX
payload and the exported span all name the same span. Times are the recorded monotonic
times moved onto the epoch with the file's clock anchor. A span's trace is, in order: the
trace of a CONTEXT record naming its (remote) parent or its trace, its local parent's trace,
or a trace of its own derived from its id. Sync records become span events.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, TraceFlags

from fdprof import semconv as S
from fdprof.probe import records as R
from fdprof.probe.context import trace_id_for

SCOPE = InstrumentationScope("fdprof.probe")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_OPS = {R.SyncOp.RELEASE: "release", R.SyncOp.ACQUIRE: "acquire"}
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
    remote_parent: tuple[int, int] | None = None  # (trace id, span id)


def resource_for(process: dict, header: R.FileHeader, extra: dict[str, str]) -> Resource:
    """One process's resource: who it is (role, pid, DP rank) and the run's settings."""
    role = process.get("role") or header.role
    attrs = {
        "service.name": "fdprof-engine",
        "service.instance.id": f"{role}-{process.get('dp_rank', 0)}-{header.pid}",
        "process.pid": header.pid,
        S.ROLE: role,
        S.DP_RANK: str(process.get("dp_rank", 0)),
        **extra,
    }
    attrs.setdefault(S.KV_LOCK, "unknown")
    return Resource.create(attrs)


class SpanBuilder:
    """Consumes one process's records in order; :meth:`feed` returns the spans it completed."""

    def __init__(self, header: R.FileHeader, resource: Resource) -> None:
        self.resource = resource
        self.role = resource.attributes.get(S.ROLE, header.role)
        self._shift = header.epoch_anchor_ns - header.mono_anchor_ns
        self._version = header.version
        self._strings: dict[int, str] = {}
        self._threads: dict[int, str] = {}
        self._open: dict[int, _Open] = {}
        self._traces: OrderedDict[int, int] = OrderedDict()

    def feed(self, kind: int, flags: int, tid: int, f: tuple) -> ReadableSpan | None:
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
            self._attr(f[0], f[1], tuple(f[2]))
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
            attrs = {S.SYNC_OP: _OPS.get(op, str(op)), S.SYNC_OBJ: self._strings.get(obj_id, "?")}
            if R.sync_keyed(self._version, flags, seq):  # sync.seq present: keyed
                attrs[S.SYNC_SEQ] = seq
            span.events.append(Event(attrs[S.SYNC_OP], attrs, t + self._shift))

    def _context(self, flags: int, sid: int, trace_id: bytes, remote: int) -> None:
        span = self._open.get(sid)
        if span is None:
            return
        tid = int.from_bytes(trace_id, "big")
        if flags & R.CONTEXT_LINK:
            span.links.append(Link(SpanContext(tid, remote, True, _SAMPLED)))
        else:
            span.remote_parent = (tid, remote)

    def _trace_of(self, sid: int, span: _Open) -> int:
        if span.remote_parent is not None:
            return span.remote_parent[0]
        known = self._traces.get(span.parent)
        if known is None:
            parent = self._open.get(span.parent)
            if parent is not None:
                known = self._trace_of(span.parent, parent)
        if known is None:
            known = int.from_bytes(trace_id_for("fdprof-span", sid), "big")
        return known

    def _finish(self, sid: int, span: _Open, t1: int) -> ReadableSpan:
        trace = self._trace_of(sid, span)
        self._traces[sid] = trace
        if len(self._traces) > _REMEMBERED:
            self._traces.popitem(last=False)
        parent = None
        if span.remote_parent is not None and span.remote_parent[1]:
            parent = SpanContext(trace, span.remote_parent[1], True, _SAMPLED)
        elif span.parent:
            parent = SpanContext(trace, span.parent, False, _SAMPLED)
        attrs = {S.ROLE: self.role, "thread.id": span.tid, **span.attrs}
        if span.tid in self._threads:
            attrs["thread.name"] = self._threads[span.tid]
        return ReadableSpan(
            span.name,
            SpanContext(trace, sid, False, _SAMPLED),
            parent=parent,
            resource=self.resource,
            attributes=attrs,
            events=span.events,
            links=span.links,
            start_time=span.t0 + self._shift,
            end_time=t1 + self._shift,
            instrumentation_scope=SCOPE,
        )
