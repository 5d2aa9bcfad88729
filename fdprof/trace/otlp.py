"""OTLP JSON: the trace model as OpenTelemetry spans, and back.

Files are what the OpenTelemetry Collector's file exporter writes: one
``ExportTraceServiceRequest`` per line in the protobuf JSON mapping (hex trace and span ids,
64-bit integers as strings). The spans are :class:`fdprof.trace.export.OtelView`'s, the ones
``export-otlp`` sends: one resource per process (as the live export names it), span attributes
plus ``thread.id``, links from ``fd.links``, sync records as span events named by their op
(``sync.op``, ``sync.obj``, ``sync.seq``). The ``fd.*`` markers below let the reader restore
what OTLP cannot say (a span that never ended, a trace id the writer had to derive, sync events
of no span on a zero-length carrier span per process), so native → OTLP → model loses nothing.

Read back, a file keeps what it said about itself: each process's resource attributes
(``meta["resources"]``, which ``export-otlp`` sends again as they were), thread names, and
span kinds, scopes and statuses other than fdprof's own, as the attributes ``span.kind``,
``otel.scope.name``/``otel.scope.version`` and ``otel.status_code``/``otel.status_description``.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from fdprof import semconv as S
from fdprof.errors import FdprofError, short
from fdprof.formats.otel import OTLP_KINDS, OTLP_STATUS, SCOPE, SpanData
from fdprof.trace import conventions as C
from fdprof.trace import limits
from fdprof.trace.assemble import assemble
from fdprof.trace.attrs import AttrsBuilder
from fdprof.trace.jsonstream import Stream, open_text
from fdprof.trace.model import SYNC_COLUMNS, Trace, numpy_dtype, rows

#: spans per request (one line of the file)
BATCH = 2000
#: scopes whose spans are fdprof's own (no ``otel.scope.*`` attributes kept for them)
OWN_SCOPE = SCOPE[0]
#: OTLP's span kinds and status codes (numbers, or JSON enum names) -> ``span.kind`` (internal
#: and unspecified spans carry none) and ``otel.status_code``
_KINDS = {n: k for k, n in OTLP_KINDS.items() if k != "internal"} | {
    f"SPAN_KIND_{k.upper()}": k for k in OTLP_KINDS if k != "internal"
}
_STATUS_NAMES = {n: c for c, n in OTLP_STATUS.items()} | {
    f"STATUS_CODE_{c}": c for c in OTLP_STATUS
}

MASK64 = (1 << 64) - 1
#: attributes that fill a column (a pid, a name, a rank, a lane, a sync event's fields): never
#: bytes, which would read as their hex text
_COLUMN_KEYS = frozenset({
    S.PROCESS_PID, S.SERVICE_NAME, S.ROLE, S.DP_RANK, S.TP_RANK, S.THREAD_ID, S.THREAD_NAME,
    S.LANE, S.STEP_ID, S.SYNC_OP, S.SYNC_OBJ, S.SYNC_SEQ, S.PROCESS_NAME, S.ANCHORED,
    S.SPAN_LANE, S.SPAN_ROLE, S.SYNC_SPAN,
})  # fmt: skip
_RESERVED = {
    S.THREAD_ID,
    S.THREAD_NAME,
    S.SPAN_LANE,
    S.SPAN_ROLE,
    S.UNENDED,
    S.SYNTHETIC_TRACE,
    S.SYNC_CARRIER,
}
_FILE_ONLY = (S.PROCESS_NAME, S.ANCHORED)


def any_value(value: Any) -> dict[str, Any]:
    """A JSON value as an OTLP ``AnyValue`` (JSON mapping)."""
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": _double_json(value)}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": attributes(value)}}
    raise FdprofError(f"attribute value {value!r} has no OTLP type")


def from_any(value: Any, depth: int = 0) -> Any:
    """An OTLP ``AnyValue`` (JSON mapping) as a JSON value. ``depth``: how deep in arrays and
    kvlists it is (no deeper than the ``depth`` limit, :mod:`fdprof.trace.limits`)."""
    if type(value) is not dict:
        raise TypeError(f"an attribute value should be an object, not {short(value)}")
    if "stringValue" in value:
        return _typed(value["stringValue"], str, "stringValue")
    if "intValue" in value:
        return _int(value["intValue"], "intValue")
    if "doubleValue" in value:
        return _double(value["doubleValue"])
    if "boolValue" in value:
        return _typed(value["boolValue"], bool, "boolValue")
    if "arrayValue" in value or "kvlistValue" in value:
        limit = limits.current().depth
        if limit and depth >= limit:
            raise limits.exceeded(f"an attribute value nests deeper than {limit} levels", "depth")
    if "arrayValue" in value:
        values = _list(_object(value["arrayValue"], "arrayValue").get("values"), "values")
        return [from_any(v, depth + 1) for v in values]
    if "kvlistValue" in value:
        values = _object(value["kvlistValue"], "kvlistValue").get("values")
        return dict(_attr_pairs(values, depth + 1))
    if "bytesValue" in value:
        return base64.b64decode(_typed(value["bytesValue"], str, "bytesValue"), validate=True).hex()
    return None


#: the doubles the protobuf JSON mapping writes as strings, being no JSON numbers
_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _double(value: Any) -> float:
    """A ``doubleValue``: a JSON number, or a string as the protobuf JSON mapping allows
    (``"NaN"``, ``"Infinity"``, ``"-Infinity"`` or a number's digits); a number past a
    double's range is bad input, not infinity."""
    if type(value) is str and value in _SPECIAL_DOUBLES:
        return _SPECIAL_DOUBLES[value]
    if type(value) not in (int, float, Decimal, str):
        raise TypeError(f"doubleValue should be a number, not {short(value)}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"doubleValue {short(str(value))} is not a finite number")
    return out


def _double_json(value: float) -> float | str:
    """A double as the protobuf JSON mapping writes it: NaN and infinities as strings (JSON
    has no such numbers)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": any_value(v)} for k, v in values.items()]


def _attr_pairs(items: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    for item in _list(items, "attributes"):
        key = _typed(_object(item, "an attribute")["key"], str, "an attribute key")
        value = _object(item.get("value", {}), f"attribute {short(key)}")
        if key in _COLUMN_KEYS and "bytesValue" in value:
            raise TypeError(f"attribute {key} should be a string or an integer, not bytes")
        try:
            yield key, from_any(value, depth)
        except (TypeError, ValueError) as exc:  # say which attribute
            raise type(exc)(f"attribute {short(key)}: {exc}") from None


_KIND_NAMES = {str: "a string", int: "an integer", bool: "true or false", float: "a number"}


def _typed(value: Any, kind: type, what: str) -> Any:
    if type(value) is not kind:
        raise TypeError(f"{what} should be {_KIND_NAMES[kind]}, not {short(value)}")
    return value


def _object(value: Any, what: str) -> dict:
    """``value`` if it is an object; null means an empty one."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise TypeError(f"{what} should be an object, not {short(value)}")
    return value


def _list(value: Any, what: str) -> list:
    """``value`` if it is an array; null means an empty one."""
    if value is None:
        return []
    if type(value) is not list:
        raise TypeError(f"{what} should be an array, not {short(value)}")
    return value


def _text(value: Any, key: str) -> str:
    """A string attribute that fills a column (a role, a process or thread name)."""
    return _typed(value, str, f"attribute {key}")


def _int(value: Any, what: str) -> int:
    """An integer, or its decimal text (the JSON mapping writes 64-bit integers as strings)."""
    if type(value) is int:
        return value
    if type(value) is str and value.strip().lstrip("+-").isdecimal() and len(value) < 40:
        return int(value)
    raise TypeError(f"{what} should be an integer, not {short(value)}")


def _int64(value: Any, what: str) -> int:
    """An integer that a column holds: in int64's range (times, sequence numbers, ids)."""
    t = _int(value, what)
    if not -(2**63) <= t < 2**63:
        raise ValueError(f"{what} {t} does not fit int64")
    return t


def _attr_int(value: Any, key: str) -> int:
    """An attribute that fills an integer column (a pid, a thread id): an ``intValue`` in
    int64's range, not a string of digits or a double."""
    return _int64(_typed(value, int, f"attribute {key}"), f"attribute {key}")


def _time(value: Any, what: str) -> int:
    """A time: OTLP's are unsigned nanoseconds since the epoch, held in int64."""
    t = _int64(value, what)
    if t < 0:
        raise ValueError(f"{what} {t} is negative (OTLP times are unsigned)")
    return t


def write(trace: Trace, path: str | Path) -> None:
    """``trace`` as OTLP JSON, a line per ``BATCH`` spans of one process (and one for each
    process without spans, so that it is read back)."""
    from fdprof.trace.export import OtelView

    view = OtelView(trace, lossless=True)
    procs = {pid: (name, anchored) for pid, name, anchored in
             rows(trace.processes, ["pid", "name", "anchored"])}  # fmt: skip
    with Path(path).open("w", encoding="utf-8") as out:

        def line(pid: int, spans: list) -> None:
            values = dict(view.attributes[pid])
            if pid in procs:
                values[S.PROCESS_NAME], values[S.ANCHORED] = str(procs[pid][0]), procs[pid][1]
            scopes = []
            for (name, version), group in itertools.groupby(spans, key=lambda s: s.scope):
                meta = {"name": name, **({"version": version} if version else {})}
                scopes.append({"scope": meta, "spans": [_span_json(s) for s in group]})
            request = {
                "resourceSpans": [
                    {"resource": {"attributes": attributes(values)}, "scopeSpans": scopes}
                ]
            }
            out.write(json.dumps(request, separators=(",", ":"), ensure_ascii=False))
            out.write("\n")

        written = set()
        for pid, group in itertools.groupby(view.spans(), key=lambda item: item[0]):
            written.add(pid)
            spans = [span for _, span in group]
            for lo in range(0, len(spans), BATCH):
                line(pid, spans[lo : lo + BATCH])
        for pid in view.attributes:
            if pid not in written:
                line(pid, [])
        if not view.attributes:
            out.write('{"resourceSpans":[]}\n')


def _span_json(span: SpanData) -> dict[str, Any]:
    """One span in the OTLP JSON mapping."""
    out: dict[str, Any] = {
        "traceId": f"{span.trace_id:032x}",
        "spanId": f"{span.span_id:016x}",
        "name": span.name,
        "kind": OTLP_KINDS[span.kind or "internal"],
        "startTimeUnixNano": str(span.start),
        "endTimeUnixNano": str(span.end),
        "attributes": attributes(span.attributes),
    }
    if span.parent_id:
        out["parentSpanId"] = f"{span.parent_id:016x}"
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(e.time), "name": e.name, "attributes": attributes(e.attributes)}
            for e in span.events
        ]
    if span.links:
        out["links"] = [{"traceId": f"{t:032x}", "spanId": f"{s:016x}"} for t, s in span.links]
    if span.status is not None:
        out["status"] = {"code": OTLP_STATUS[span.status[0]]}
        if span.status[1]:
            out["status"]["message"] = span.status[1]
    return out


def sniff(path: Path, head: bytes) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return start[:1] == b"{" and (
        b'"resourceSpans"' in start[:64] or b'"resource_spans"' in start[:64]
    )


def _id(value: Any) -> int:
    """A span id, hex (OTLP JSON) or base64 (protobuf JSON) of 8 bytes, as a signed 64-bit
    int."""
    if value is None or value == "":
        return 0
    raw = _id_bytes(value, 8)
    return int(np.uint64(int.from_bytes(raw, "big")).view(np.int64))


def _trace_id(value: Any) -> str | None:
    """A trace id (16 bytes) as 32 hex digits."""
    if value is None or value == "":
        return None
    return _id_bytes(value, 16).hex()


def _id_bytes(value: Any, size: int) -> bytes:
    """An id's ``size`` bytes: hex text (OTLP JSON: ``2 * size`` digits), else base64
    (protobuf JSON)."""
    if type(value) is not str:
        raise TypeError(f"an id should be a string, not {short(value)}")
    try:
        raw = bytes.fromhex(value) if len(value) == 2 * size else base64.b64decode(
            value, validate=True)  # fmt: skip
    except ValueError:
        raise TypeError(f"malformed id {short(value)}") from None
    if len(raw) != size:
        raise ValueError(f"id {short(value)} is {len(raw)} bytes, not {size}")
    return raw


class _Reader:
    def __init__(self) -> None:
        self.spans: dict[str, list] = {
            k: [] for k in ("span_id", "parent_id", "name", "start", "end", "pid", "tid")
        } | {"role": [], "trace_id": [], "lane": []}
        self.attrs = AttrsBuilder()
        #: this request's attribute values by key, typed when the request is done
        self.pending: dict[str, tuple[list[int], list[Any]]] = {}
        self.syncs: dict[str, list] = {k: [] for k in SYNC_COLUMNS}
        self.procs: dict[int, dict[str, Any]] = {}
        #: pid -> the resource's attributes, as the file gave them (less the file-only ones)
        self.resources: dict[int, dict[str, Any]] = {}
        self.thread_names: dict[str, str] = {}
        #: resources without process.pid, by their attributes -> a negative pid each
        self.anonymous: dict[str, int] = {}

    def request(self, request: Any) -> None:
        request = _typed(request, dict, "a request")
        resource_spans = request.get("resourceSpans", request.get("resource_spans"))
        for rs in _list(resource_spans, "resourceSpans"):
            rs = _object(rs, "a resourceSpans entry")
            res = dict(_attr_pairs(_object(rs.get("resource"), "resource").get("attributes")))
            pid = res.get(S.PROCESS_PID)
            if pid is None:  # a resource that names no process: one of its own per resource
                key = json.dumps(res, sort_keys=True, default=str)
                pid = self.anonymous.setdefault(key, -1 - len(self.anonymous))
            pid = _attr_int(pid, S.PROCESS_PID)
            role = _text(res.get(S.ROLE, res.get(S.SERVICE_NAME, "")), S.ROLE)
            if pid not in self.procs:
                limits.check(len(self.procs) + 1, "processes", "processes (resources)")
                anchored = res.get(S.ANCHORED, False)
                self.procs[pid] = {
                    "role": role,
                    "name": _text(
                        res.get(S.PROCESS_NAME, res.get(S.SERVICE_NAME, str(pid))), S.PROCESS_NAME
                    ),  # fmt: skip
                    "anchored": _typed(anchored, bool, f"resource attribute {S.ANCHORED}"),
                    "dp_rank": C.rank(res.get(S.DP_RANK), S.DP_RANK),
                    "tp_rank": C.rank(res.get(S.TP_RANK), S.TP_RANK),
                }
                self.resources[pid] = {k: v for k, v in res.items() if k not in _FILE_ONLY}
            for ss in _list(rs.get("scopeSpans", rs.get("scope_spans")), "scopeSpans"):
                ss = _object(ss, "a scopeSpans entry")
                scope = _scope_attrs(ss.get("scope"))
                for span in _list(ss.get("spans"), "spans"):
                    self.span(_object(span, "a span"), pid, role, scope)
        for key, (ids, values) in self.pending.items():
            self.attrs.add_values(key, ids, values)
        self.pending = {}
        limits.check(self.attrs.keys, "attr_keys", "distinct attribute keys")

    def span(self, span: dict, pid: int, role: str, scope: dict[str, Any]) -> None:
        values = dict(_attr_pairs(span.get("attributes")))
        sid = _id(span.get("spanId"))
        tid = _attr_int(values.get(S.THREAD_ID, 0), S.THREAD_ID)
        for marker in (S.SYNC_CARRIER, S.UNENDED, S.SYNTHETIC_TRACE):
            _typed(values.get(marker, False), bool, f"attribute {marker}")
        if values.pop(S.SYNC_CARRIER, False):
            sid = 0
        else:
            start = _time(span["startTimeUnixNano"], "startTimeUnixNano")
            s = self.spans
            s["span_id"].append(sid)
            s["parent_id"].append(_id(span.get("parentSpanId")))
            s["name"].append(_typed(span.get("name", ""), str, "a span's name"))
            s["start"].append(start)
            end = -1 if values.get(S.UNENDED) else _time(span["endTimeUnixNano"], "endTimeUnixNano")
            s["end"].append(end)
            s["pid"].append(pid)
            s["tid"].append(tid)
            s["role"].append(_typed(values.get(S.SPAN_ROLE, role), str, S.SPAN_ROLE))
            lane = values.get(S.SPAN_LANE)
            s["lane"].append(lane if lane is None else _typed(lane, str, S.SPAN_LANE))
            synthetic = values.get(S.SYNTHETIC_TRACE)
            s["trace_id"].append(None if synthetic else _trace_id(span.get("traceId")))
            if S.THREAD_NAME in values:
                self.thread_names[f"{pid}/{tid}"] = _text(values[S.THREAD_NAME], S.THREAD_NAME)
            for key, value in (values | scope | _kind_and_status(span)).items():
                if key not in _RESERVED:
                    self.attr(sid, key, value)
            links = [
                f"00-{_trace_id(link.get('traceId'))}-{_id(link.get('spanId')) & MASK64:016x}-01"
                for link in (_object(x, "a link") for x in _list(span.get("links"), "links"))
            ]
            if links:
                self.attr(sid, S.LINKS, links)
        for event in _list(span.get("events"), "events"):
            self.event(_object(event, "an event"), sid, pid, tid)

    def attr(self, sid: int, key: str, value: Any) -> None:
        got = self.pending.get(key)
        if got is None:
            got = self.pending[key] = ([], [])
        got[0].append(sid)
        got[1].append(value)

    def event(self, event: dict, sid: int, pid: int, tid: int) -> None:
        values = dict(_attr_pairs(event.get("attributes")))
        if S.SYNC_OP not in values and S.SYNC_OBJ not in values:
            return  # not a sync event
        op, obj, seq, keyed = C.sync_fields(
            values.get(S.SYNC_OP), values.get(S.SYNC_OBJ), values.get(S.SYNC_SEQ, C.NO_SEQ)
        )
        s = self.syncs
        s["op"].append(op)
        s["obj"].append(obj)
        s["seq"].append(seq)
        s["keyed"].append(keyed)
        s["time"].append(_time(event.get("timeUnixNano"), "timeUnixNano"))
        s["pid"].append(_attr_int(values.get(S.PROCESS_PID, pid), S.PROCESS_PID))
        s["tid"].append(_attr_int(values.get(S.THREAD_ID, tid), S.THREAD_ID))
        lane = values.get(S.LANE)
        s["lane"].append(lane if lane is None else _typed(lane, str, S.LANE))
        s["span_id"].append(_attr_int(values.get(S.SYNC_SPAN, sid), S.SYNC_SPAN))


def _scope_attrs(scope: Any) -> dict[str, Any]:
    """``otel.scope.*`` for a scope that is not fdprof's own."""
    scope = _object(scope, "a scope")
    name = _typed(scope.get("name") or "", str, "a scope's name")
    version = _typed(scope.get("version") or "", str, "a scope's version")
    if not name or name == OWN_SCOPE or name.startswith(OWN_SCOPE + "."):
        return {}
    return {S.OTEL_SCOPE_NAME: name} | ({S.OTEL_SCOPE_VERSION: version} if version else {})


#: OTLP's span kinds: unspecified (0), internal (1) and the others :data:`_KINDS` names
_NO_KIND = {0, 1, "SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL"}


def _kind_and_status(span: dict) -> dict[str, Any]:
    """``span.kind`` when not internal, ``otel.status_*`` when set; a kind or status code
    OTLP does not have is bad input."""
    out: dict[str, Any] = {}
    kind = span.get("kind")
    if kind is not None and type(kind) in (int, str) and kind in _KINDS:
        out[S.SPAN_KIND] = _KINDS[kind]
    elif kind is not None and not (type(kind) in (int, str) and kind in _NO_KIND):
        raise ValueError(f"a span's kind {short(kind)} is not one of OTLP's span kinds")
    status = _object(span.get("status"), "a span's status")
    code = status.get("code")
    if code in (0, "STATUS_CODE_UNSET") and type(code) is not bool:
        code = None
    if code is not None and not (type(code) in (int, str) and code in _STATUS_NAMES):
        raise ValueError(f"a span's status code {short(code)} is not one of OTLP's")
    if code is not None:
        out[S.OTEL_STATUS_CODE] = _STATUS_NAMES[code]
    message = _typed(status.get("message") or "", str, "a span's status message")
    if code is not None and message:
        out[S.OTEL_STATUS_DESCRIPTION] = message
    return out


def read(path: Path) -> Trace:
    trace = Trace(meta={"format": "otlp-json", "path": str(path)})
    reader = _Reader()
    index = 0
    with open_text(path) as f:
        stream = Stream(f, str(path))
        try:
            while not stream.at_end():
                reader.request(stream.value())
                index += 1
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
            raise FdprofError(f"{path}: request {index}: {what}") from None
        except FdprofError as exc:
            if str(exc).startswith(f"{path}:"):  # the stream's own errors say where
                raise
            raise FdprofError(f"{path}: request {index}: {exc}") from None
    procs = sorted(reader.procs)
    spans = {
        k: np.array(v, dtype=object if k in ("name", "role", "trace_id", "lane") else np.int64)
        for k, v in reader.spans.items()
    }
    syncs = {k: np.array(v, dtype=numpy_dtype("syncs", k)) for k, v in reader.syncs.items()}
    processes = {
        "pid": procs,
        "role": [reader.procs[p]["role"] for p in procs],
        "name": [reader.procs[p]["name"] for p in procs],
        "anchored": [reader.procs[p]["anchored"] for p in procs],
        "dp_rank": [reader.procs[p]["dp_rank"] for p in procs],
        "tp_rank": [reader.procs[p]["tp_rank"] for p in procs],
    }
    trace = assemble(trace, spans, reader.attrs.build(), syncs, processes)
    trace.meta["resources"] = reader.resources
    if reader.thread_names:
        trace.meta["thread_names"] = reader.thread_names
    return trace
