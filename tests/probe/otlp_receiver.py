"""A real OTLP/HTTP receiver for tests: decodes the protobuf wire format of what it is sent."""

from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


class Receiver:
    """``with Receiver() as r:`` serves on ``r.endpoint``; ``delay_s`` makes it a slow one."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.traces: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self.delay_s = delay_s
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                time.sleep(receiver.delay_s)
                if self.path == "/v1/traces":
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

    def metric_names(self) -> set[str]:
        return {
            m.name
            for req in self.metrics
            for rm in req.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attrs(span) -> dict:
    return {a.key: _value(a.value) for a in span.attributes}
