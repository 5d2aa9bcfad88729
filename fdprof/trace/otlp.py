"""OTLP JSON: the trace model as OpenTelemetry spans, and back.

Files are what the OpenTelemetry Collector's file exporter writes: one
``ExportTraceServiceRequest`` per line in the protobuf JSON mapping (hex trace and span ids,
64-bit integers as strings). One resource per process (``process.pid``, ``fd.role``,
``fd.dp_rank``); span attributes are the model's attributes, plus ``thread.id``; links are the
``fd.links`` traceparents. Sync events become span events named ``sync`` (``sync.op``, ``sync.obj``,
``sync.seq``, ``sync.span``, ``thread.id``, ``fd.lane``) on their span, or on a zero-length
carrier span per process when they belong to no span; the reader takes any event carrying
``sync.op`` or ``sync.obj`` as one (the probe's live export names them after the op), keyed
when it carries ``sync.seq``, and a bad one is bad input. The ``fd.*`` markers below let the
reader restore what OTLP cannot say (a span that never ended, a trace id the writer had to
invent), so native → OTLP → model loses nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fdprof.errors import FdprofError
from fdprof.trace import conventions as C
from fdprof.trace.assemble import assemble
from fdprof.trace.attrs import AttrsBuilder
from fdprof.trace.chrome import SPAN_LANE, SPAN_ROLE
from fdprof.trace.jsonstream import Stream, open_text
from fdprof.trace.model import Trace, rows

THREAD_ID = "thread.id"
PROCESS_PID = "process.pid"
SERVICE_NAME = "service.name"
PROCESS_NAME, PROCESS_ANCHORED = "fd.process_name", "fd.anchored"
UNENDED, SYNTHETIC_TRACE, CARRIER = "fd.unended", "fd.synthetic_trace", "fd.sync_carrier"
SYNC_EVENT, SYNC_SPAN = "sync", "sync.span"
SCOPE = {"name": "fdprof", "version": "1"}
#: spans per request (one line of the file, one POST of export-otlp)
BATCH = 2000

MASK64 = (1 << 64) - 1
_RESERVED = {THREAD_ID, SPAN_LANE, SPAN_ROLE, UNENDED, SYNTHETIC_TRACE, CARRIER}


def any_value(value: Any) -> dict[str, Any]:
    """A JSON value as an OTLP ``AnyValue`` (JSON mapping)."""
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": attributes(value)}}
    raise FdprofError(f"attribute value {value!r} has no OTLP type")


def from_any(value: Any) -> Any:
    """An OTLP ``AnyValue`` (JSON mapping) as a JSON value."""
    if not isinstance(value, dict):
        raise TypeError("an attribute value should be an object")
    if "stringValue" in value:
        return str(value["stringValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [from_any(v) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        return dict(_attr_pairs((value["kvlistValue"] or {}).get("values", [])))
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"]).hex()
    return None


def attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": any_value(v)} for k, v in values.items()]


def _attr_pairs(items: Any) -> Iterator[tuple[str, Any]]:
    if not isinstance(items, list):
        raise TypeError("attributes should be a list")
    for item in items:
        try:
            yield str(item["key"]), from_any(item.get("value", {}))
        except ValueError as exc:  # an intValue that is no integer: say which attribute
            raise ValueError(f"attribute {item['key']}: {exc}") from None


def _hex_id(value: int, width: int) -> str:
    return f"{value & ((1 << (4 * width)) - 1):0{width}x}"


def _synthetic_trace(pid: int) -> str:
    return hashlib.blake2b(f"fdprof/{pid}".encode(), digest_size=16).hexdigest()


def requests(trace: Trace, batch: int = BATCH) -> Iterator[dict[str, Any]]:
    """The trace as ``ExportTraceServiceRequest`` dicts (JSON mapping), ``batch`` spans each."""
    spans = trace.spans
    attrs_of = trace.attrs.by_span()
    events_of, carried = _sync_events(trace)
    procs = trace.processes.set_index("pid")
    role_of = dict(rows(trace.processes, ["pid", "role"]))
    lanes = C.thread_lanes(spans["pid"].to_numpy(), spans["tid"].to_numpy())
    trace_ids = spans["trace_id"].to_numpy(object, na_value=None)
    by_pid: dict[int, list[dict[str, Any]]] = {}
    cols = ["span_id", "parent_id", "name", "start", "end", "pid", "tid", "lane", "role"]
    for i, (sid, parent, name, start, end, pid, tid, lane, role) in enumerate(rows(spans, cols)):
        extra: dict[str, Any] = {THREAD_ID: tid}
        own = attrs_of.get(sid, {})
        if lane != lanes[i] and C.LANE not in own:
            extra[SPAN_LANE] = lane
        if pid in role_of and role != role_of[pid] and C.ROLE not in own:
            extra[SPAN_ROLE] = role
        if end < 0:
            extra[UNENDED] = True
        if trace_ids[i] is None:
            extra[SYNTHETIC_TRACE] = True
        by_pid.setdefault(pid, []).append(
            _span(
                sid,
                parent,
                name,
                start,
                max(end, start),
                trace_ids[i] or _synthetic_trace(pid),
                own,
                extra,
                events_of.get(sid, []),
            )
        )
    for pid, events in carried.items():
        by_pid.setdefault(pid, []).append(
            _span(
                0,
                0,
                "fdprof.syncs",
                events[0]["t"],
                events[0]["t"],
                _synthetic_trace(pid),
                {},
                {CARRIER: True, SYNTHETIC_TRACE: True},
                events,
            )
        )
    for pid in procs.index.tolist():
        by_pid.setdefault(pid, [])
    if not by_pid:
        yield {"resourceSpans": []}
    for pid, otel_spans in by_pid.items():
        resource = _resource(pid, procs)
        for lo in range(0, max(len(otel_spans), 1), batch):
            yield {
                "resourceSpans": [
                    {
                        "resource": {"attributes": resource},
                        "scopeSpans": [{"scope": SCOPE, "spans": otel_spans[lo : lo + batch]}],
                    }
                ]
            }


def _resource(pid: int, procs: pd.DataFrame) -> list[dict[str, Any]]:
    role = str(procs.at[pid, "role"]) if pid in procs.index else ""
    values: dict[str, Any] = {SERVICE_NAME: f"fdprof.{role or 'process'}", PROCESS_PID: pid}
    if pid in procs.index:
        values[C.ROLE] = role
        values[PROCESS_NAME] = str(procs.at[pid, "name"])
        values[PROCESS_ANCHORED] = bool(procs.at[pid, "anchored"])
        values[C.DP_RANK] = int(procs.at[pid, "dp_rank"])
    return attributes(values)


def _span(sid, parent, name, start, end, trace_id, own, extra, events) -> dict[str, Any]:
    values = {k: v for k, v in own.items() if k != C.LINKS} | extra
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": _hex_id(sid, 16),
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": attributes(values),
    }
    if parent:
        span["parentSpanId"] = _hex_id(parent, 16)
    if events:
        span["events"] = [
            {"timeUnixNano": str(e["t"]), "name": SYNC_EVENT, "attributes": e["attributes"]}
            for e in events
        ]
    links = own.get(C.LINKS)
    if links:
        span["links"] = [{"traceId": tp.split("-")[1], "spanId": tp.split("-")[2]} for tp in links]
    return span


def _sync_events(trace: Trace) -> tuple[dict[int, list], dict[int, list]]:
    """Sync events by owning span, and those with no span in this trace by process."""
    known = set(trace.spans["span_id"].tolist())
    pid_of = dict(zip(trace.spans["span_id"].tolist(), trace.spans["pid"].tolist(), strict=True))
    on_span: dict[int, list] = {}
    carried: dict[int, list] = {}
    cols = ["op", "obj", "seq", "keyed", "time", "pid", "tid", "lane", "span_id"]
    for op, obj, seq, keyed, t, pid, tid, lane, span in rows(trace.syncs, cols):
        values = {C.SYNC_OP: op, C.SYNC_OBJ: obj}
        if keyed:  # an unkeyed event has no sync.seq
            values[C.SYNC_SEQ] = seq
        values |= {SYNC_SPAN: span, PROCESS_PID: pid, THREAD_ID: tid, C.LANE: lane}
        event = {"t": t, "attributes": attributes(values)}
        if span in known and pid_of[span] == pid:
            on_span.setdefault(span, []).append(event)
        else:
            carried.setdefault(pid, []).append(event)
    return on_span, carried


def write(trace: Trace, path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as out:
        for request in requests(trace):
            out.write(json.dumps(request, separators=(",", ":"), ensure_ascii=False))
            out.write("\n")


def to_protobuf(request: dict[str, Any]) -> bytes:
    """A request dict (OTLP JSON mapping) as the protobuf bytes OTLP/HTTP sends."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    def b64(hex_id: str) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    for rs in request["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = b64(span[key])
                for link in span.get("links", []):
                    link["traceId"], link["spanId"] = b64(link["traceId"]), b64(link["spanId"])
    return ParseDict(request, ExportTraceServiceRequest()).SerializeToString()


def sniff(path: Path, head: bytes) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    return start[:1] == b"{" and (
        b'"resourceSpans"' in start[:64] or b'"resource_spans"' in start[:64]
    )


def _id(value: Any, width: int) -> int:
    """A hex (OTLP JSON) or base64 (protobuf JSON) id as a signed 64-bit int (span) or hex."""
    if not isinstance(value, str) or not value:
        return 0
    try:
        raw = bytes.fromhex(value) if len(value) == 2 * width else base64.b64decode(value)
    except ValueError:
        raise TypeError(f"malformed id {value!r}") from None
    return int(np.uint64(int.from_bytes(raw[-8:], "big")).view(np.int64))


def _trace_id(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return value.lower() if len(value) == 32 else base64.b64decode(value).hex()


class _Reader:
    def __init__(self) -> None:
        self.spans: dict[str, list] = {
            k: [] for k in ("span_id", "parent_id", "name", "start", "end", "pid", "tid")
        } | {"role": [], "trace_id": [], "lane": []}
        self.attrs = AttrsBuilder()
        #: this request's attribute values by key, typed when the request is done
        self.pending: dict[str, tuple[list[int], list[Any]]] = {}
        self.syncs: dict[str, list] = {
            k: [] for k in ("op", "obj", "seq", "keyed", "time", "pid", "tid", "lane", "span_id")
        }
        self.procs: dict[int, dict[str, Any]] = {}
        #: resources without process.pid, by their attributes -> a negative pid each
        self.anonymous: dict[str, int] = {}

    def request(self, request: Any) -> None:
        if not isinstance(request, dict):
            raise TypeError("a request should be an object")
        for rs in request.get("resourceSpans", request.get("resource_spans", [])):
            res = dict(_attr_pairs((rs.get("resource") or {}).get("attributes", [])))
            pid = res.get(PROCESS_PID)
            if type(pid) is not int:
                key = json.dumps(res, sort_keys=True, default=str)
                pid = self.anonymous.setdefault(key, -1 - len(self.anonymous))
            role = str(res.get(C.ROLE, res.get(SERVICE_NAME, "")))
            self.procs.setdefault(
                pid,
                {
                    "role": role,
                    "name": str(res.get(PROCESS_NAME, res.get(SERVICE_NAME, pid))),
                    "anchored": bool(res.get(PROCESS_ANCHORED, False)),
                    "dp_rank": C.dp_rank(res.get(C.DP_RANK)),
                },
            )
            for ss in rs.get("scopeSpans", rs.get("scope_spans", [])):
                for span in ss.get("spans", []):
                    self.span(span, pid, role)
        for key, (ids, values) in self.pending.items():
            self.attrs.add_values(key, ids, values)
        self.pending = {}

    def span(self, span: dict, pid: int, role: str) -> None:
        values = dict(_attr_pairs(span.get("attributes", [])))
        sid = _id(span.get("spanId"), 8)
        if values.pop(CARRIER, False):
            sid = 0
        else:
            start = int(span["startTimeUnixNano"])
            s = self.spans
            s["span_id"].append(sid)
            s["parent_id"].append(_id(span.get("parentSpanId"), 8))
            s["name"].append(str(span.get("name", "")))
            s["start"].append(start)
            s["end"].append(-1 if values.get(UNENDED) else int(span["endTimeUnixNano"]))
            s["pid"].append(pid)
            s["tid"].append(int(values.get(THREAD_ID, 0)))
            s["role"].append(values.get(SPAN_ROLE, role))
            s["lane"].append(values.get(SPAN_LANE))
            synthetic = values.get(SYNTHETIC_TRACE)
            s["trace_id"].append(None if synthetic else _trace_id(span.get("traceId")))
            for key, value in values.items():
                if key not in _RESERVED:
                    self.attr(sid, key, value)
            links = [
                f"00-{_trace_id(link.get('traceId'))}-{_id(link.get('spanId'), 8) & MASK64:016x}-01"
                for link in span.get("links", [])
            ]
            if links:
                self.attr(sid, C.LINKS, links)
        for event in span.get("events", []):
            self.event(event, sid, pid)

    def attr(self, sid: int, key: str, value: Any) -> None:
        got = self.pending.get(key)
        if got is None:
            got = self.pending[key] = ([], [])
        got[0].append(sid)
        got[1].append(value)

    def event(self, event: dict, sid: int, pid: int) -> None:
        values = dict(_attr_pairs(event.get("attributes", [])))
        if C.SYNC_OP not in values and C.SYNC_OBJ not in values:
            return  # not a sync event
        op, obj, seq, keyed = C.sync_fields(
            values.get(C.SYNC_OP), values.get(C.SYNC_OBJ), values.get(C.SYNC_SEQ, C.NO_SEQ)
        )
        s = self.syncs
        s["op"].append(op)
        s["obj"].append(obj)
        s["seq"].append(seq)
        s["keyed"].append(keyed)
        s["time"].append(int(event["timeUnixNano"]))
        s["pid"].append(int(values.get(PROCESS_PID, pid)))
        s["tid"].append(int(values.get(THREAD_ID, 0)))
        s["lane"].append(values.get(C.LANE))
        s["span_id"].append(int(values.get(SYNC_SPAN, sid)))


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
    procs = sorted(reader.procs)
    spans = {
        k: np.array(v, dtype=object if k in ("name", "role", "trace_id", "lane") else np.int64)
        for k, v in reader.spans.items()
    }
    syncs = {
        k: np.array(v, dtype=object if k in ("op", "obj", "lane") else bool if k == "keyed"
                    else np.int64)
        for k, v in reader.syncs.items()
    }  # fmt: skip
    processes = {
        "pid": procs,
        "role": [reader.procs[p]["role"] for p in procs],
        "name": [reader.procs[p]["name"] for p in procs],
        "anchored": [reader.procs[p]["anchored"] for p in procs],
        "dp_rank": [reader.procs[p]["dp_rank"] for p in procs],
    }
    return assemble(trace, spans, reader.attrs.build(), syncs, processes)
