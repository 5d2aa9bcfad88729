"""A real OTLP/HTTP receiver for tests: decodes the protobuf wire format of what it is sent."""

from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


class Receiver:
    """``with Receiver() as r:`` serves on ``r.endpoint``; ``delay_s`` makes it a slow one.
    ``refusals`` are answers given to the first trace requests, in order, before any is
    taken: ``(status, headers)`` (a ``Retry-After`` header, say); :attr:`refused` records
    ``(time, status)`` of each."""

    def __init__(
        self, delay_s: float = 0.0, refusals: list[tuple[int, dict[str, str]]] = ()
    ) -> None:
        self.traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.delay_s = delay_s
        self.refusals = list(refusals)
        self.refused: list[tuple[float, int]] = []
        self.accepted_at: list[float] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                time.sleep(receiver.delay_s)
                if self.path == "/v1/traces" and receiver.refusals:
                    status, headers = receiver.refusals.pop(0)
                    receiver.refused.append((time.monotonic(), status))
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path == "/v1/traces":
                    receiver.accepted_at.append(time.monotonic())
                    msg = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    receiver.traces.append(msg)
                    reply = trace_service_pb2.ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    msg = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    receiver.metrics.append(msg)
                    reply = metrics_service_pb2.ExportMetricsServiceResponse()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = reply.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> list[tuple[dict, object]]:
        """``(resource attributes, span)`` for every span received."""
        out = []
        for req in self.traces:
            for rs in req.resource_spans:
                res = {a.key: _value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    out.extend((res, span) for span in ss.spans)
        return out

    def scoped_spans(self) -> list[tuple[dict, object, object]]:
        """``(resource attributes, scope, span)`` for every span received."""
        out = []
        for req in self.traces:
            for rs in req.resource_spans:
                res = {a.key: _value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    out.extend((res, ss.scope, span) for span in ss.spans)
        return out

    def metric_names(self) -> set[str]:
        return {
            m.name
            for req in self.metrics
            for rm in req.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }

    def last_values(self, name: str) -> dict[tuple, float]:
        """The latest value of a sum or gauge metric, per attribute set (sorted pairs)."""
        out = {}
        for req in self.metrics:
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.name != name:
                            continue
                        data = m.sum if m.HasField("sum") else m.gauge
                        for point in data.data_points:
                            key = tuple(sorted((a.key, _value(a.value)) for a in point.attributes))
                            out[key] = getattr(point, point.WhichOneof("value"))
        return out


def canonical(received: list[tuple[dict, object]]) -> set[tuple]:
    """Every received span as one hashable tuple of all it says: ids, parent, kind, flags,
    times, attributes, events, links and status, with its resource and scope."""

    def frozen(d: dict) -> tuple:
        return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in d.items()))

    out = set()
    for res, scope, span in received:
        out.add((
            span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), span.name,
            span.kind, span.flags, span.start_time_unix_nano, span.end_time_unix_nano,
            frozen(attrs(span)),
            tuple((e.name, e.time_unix_nano, frozen(attrs(e))) for e in span.events),
            tuple((lk.trace_id.hex(), lk.span_id.hex(), lk.flags) for lk in span.links),
            (span.status.code, span.status.message),
            frozen(res), (scope.name, scope.version),
        ))  # fmt: skip
    return out


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attrs(span) -> dict:
    return {a.key: _value(a.value) for a in span.attributes}
