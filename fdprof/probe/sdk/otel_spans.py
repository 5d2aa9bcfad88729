"""fdprof's spans as OpenTelemetry spans: the one set of rules both exports follow, and the
decoder of one process's records into spans while the run goes on.

Two paths produce OpenTelemetry spans: the live export (``fdprof run --otlp-endpoint``) decodes
each process's records as they are written (:class:`SpanBuilder`); the replay (``fdprof
export-otlp``) adapts a loaded trace (:mod:`fdprof.trace.export`). Both build their resources,
trace ids, parents, attributes and events with the functions here, so the same records give the
same spans either way (a test checks it against a real OTLP/HTTP receiver):

- resource: :func:`process_resource` (``service.name`` ``fdprof-engine``, ``service.instance.id``
  naming the process of this run, ``process.pid``, ``fd.role``, ``fd.dp_rank`` as a string as
  the dashboards filter it, the run's ``fd.kv_lock`` and ``fd.workload``);
- trace id: a span's trace is the one its W3C context names (a request's, sent in a queue
  message), else its parent's, down the tree; a root span with none gets
  :func:`root_trace_id` of its process instance and its own id, so two runs never share one;
- parent: the local parent, else the remote one a context names (remote: another process);
- span attributes: the recorded ones, plus ``thread.id`` and, when known, ``thread.name``;
- sync records: span events named by their op (``release``/``acquire``) with ``sync.obj`` and,
  when keyed, ``sync.seq`` (:func:`sync_event`).

Spans keep the probe's own 64-bit ids, so a ``traceparent`` sent in a queue message, an NVTX
payload and the exported span all name the same span. Times are the recorded monotonic times
on the epoch, by the reader's own rule (:func:`fdprof.formats.records.epoch_offsets`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fdprof import semconv as S
from fdprof.formats import records as R

#: the instrumentation scope (name, version) of every span fdprof makes (live or replayed)
SCOPE = ("fdprof", "1")
#: ``service.name`` of fdprof's own processes (``OTEL_SERVICE_NAME`` replaces it)
DEFAULT_SERVICE = "fdprof-engine"
#: ``fd.kv_lock`` of a process whose run did not say
UNKNOWN = "unknown"
MASK64 = (1 << 64) - 1
_OPS = {R.SyncOp.RELEASE: S.RELEASE, R.SyncOp.ACQUIRE: S.ACQUIRE}
#: finished spans whose trace ids are remembered for children that end after their parent
_REMEMBERED = 65536


def instance_id(role: str, dp_rank: int, pid: int, epoch_anchor_ns: int | None) -> str:
    """``service.instance.id``: the process's role, DP rank and pid, and its record file's epoch
    anchor, which tells it apart from a process of another run that had the same pid."""
    base = f"{role}-{dp_rank}-{pid}"
    return base if epoch_anchor_ns is None else f"{base}-{epoch_anchor_ns}"


def process_resource(
    role: str,
    pid: int,
    dp_rank: int,
    epoch_anchor_ns: int | None,
    run: Mapping[str, Any],
    tp_rank: int = -1,
) -> dict[str, Any]:
    """The resource attributes of one of fdprof's processes; ``run`` holds the run's settings
    (``fd.kv_lock``, ``fd.workload``), as strings; ``tp_rank`` -1: unknown."""
    attrs: dict[str, Any] = {
        S.SERVICE_NAME: DEFAULT_SERVICE,
        S.SERVICE_INSTANCE_ID: instance_id(role, dp_rank, pid, epoch_anchor_ns),
        S.PROCESS_PID: pid,
        S.ROLE: role,
        S.DP_RANK: str(dp_rank),
        S.TP_RANK: str(tp_rank),
        S.KV_LOCK: UNKNOWN,
    }
    attrs.update({k: str(v) for k, v in run.items()})
    return attrs


def run_attributes(config: Mapping[str, Any]) -> dict[str, str]:
    """The run-wide resource attributes from a run's engine configuration (``run.json``)."""
    keys = {S.KV_LOCK: "kv_lock", S.WORKLOAD: "workload"}
    return {attr: str(config[key]) for attr, key in keys.items() if config.get(key) is not None}


def root_trace_id(instance: str, span_id: int) -> int:
    """The trace id of a root span that no context placed in a trace: 16 bytes of
    ``blake2b("fdprof-root/<instance>/" + span id, 8 bytes big-endian)``."""
    seed = _roots.get(instance)
    if seed is None:
        seed = _roots[instance] = hashlib.blake2b(f"fdprof-root/{instance}/".encode(),
                                                  digest_size=16)  # fmt: skip
    h = seed.copy()
    h.update((span_id & MASK64).to_bytes(8, "big"))
    return int.from_bytes(h.digest(), "big")


#: instance -> a hash of the root-trace prefix, copied for each root span
_roots: dict[str, Any] = {}


class Event(NamedTuple):
    name: str
    time: int
    attributes: dict[str, Any]


class SpanData(NamedTuple):
    """One finished span as both exports hand it on (ids unsigned 64-bit, times epoch ns);
    :func:`fdprof.probe.sdk.otel_sink.readable` makes the SDK's span of it, the OTLP JSON writer
    its line. No OpenTelemetry type: the trace model adapts to it without the SDK."""

    name: str
    trace_id: int
    span_id: int
    #: 0: none; ``parent_remote``: the parent is in another process
    parent_id: int
    parent_remote: bool
    start: int
    end: int
    attributes: dict[str, Any]
    events: list[Event]
    #: (trace id, span id) of each linked span
    links: list[tuple[int, int]]
    #: ``server``, ``client``, ``producer``, ``consumer``; None: internal
    kind: str | None = None
    #: (``OK`` or ``ERROR``, description); None: unset
    status: tuple[str, str | None] | None = None
    scope: tuple[str, str | None] = SCOPE


#: span kinds as OTLP numbers them (``Span.SpanKind``)
OTLP_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
#: status codes as OTLP numbers them (``Status.StatusCode``)
OTLP_STATUS = {"OK": 1, "ERROR": 2}


def sync_event(op: str, obj: str, seq: int | None, t: int, extra: Mapping[str, Any] = {}) -> Event:  # noqa: B006 (read only)
    """A sync record as a span event; ``seq`` None (unkeyed: pairs in time order) is left out."""
    attrs: dict[str, Any] = {S.SYNC_OP: op, S.SYNC_OBJ: obj}
    if seq is not None:
        attrs[S.SYNC_SEQ] = seq
    attrs.update(extra)
    return Event(op, t, attrs)


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
            op_name = _OPS.get(op, str(op))
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
