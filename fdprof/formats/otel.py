"""fdprof's spans as OpenTelemetry spans: the one set of rules every export follows.

Two paths produce OpenTelemetry spans: the live export (``fdprof run --otlp-endpoint``, the
probe's SDK) decodes each process's records as they are written
(:class:`fdprof.probe.sdk.otel_spans.SpanBuilder`); the replay (``fdprof export-otlp``) and the
OTLP JSON writer adapt a loaded trace (:class:`fdprof.trace.export.OtelView`). Both build
their resources, trace ids, parents, attributes and events with the functions here, and hand
on :class:`SpanData`, so the same records give the same spans either way (a test checks it
against a real OTLP/HTTP receiver):

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
on the epoch, by the reader's own rule (:func:`fdprof.formats.records.epoch_offsets`). No
OpenTelemetry type here: the trace model adapts to these without the SDK.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, NamedTuple

from fdprof import semconv as S

#: the instrumentation scope (name, version) of every span fdprof makes (live or replayed)
SCOPE = ("fdprof", "1")
#: ``service.name`` of fdprof's own processes (``OTEL_SERVICE_NAME`` replaces it)
DEFAULT_SERVICE = "fdprof-engine"
#: ``fd.kv_lock`` of a process whose run did not say
UNKNOWN = "unknown"
MASK64 = (1 << 64) - 1


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
