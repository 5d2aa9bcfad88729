import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from roundtrip import assert_same

from fdprof.errors import FdprofError
from fdprof.trace import load, otlp
from fdprof.trace.export import endpoint_url, export


def test_native_to_otlp_round_trip(engine_run, tmp_path):
    native = load(engine_run)
    out = tmp_path / "run.otlp.json"
    otlp.write(native, out)
    lines = out.read_text().splitlines()
    first = json.loads(lines[0])
    span = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
    assert span["startTimeUnixNano"].isdigit()
    back = load(out)
    assert_same(native, back, ("spans", "accesses", "syncs", "attrs", "processes"))


def test_reads_collector_style_file_written_by_others(tmp_path):
    """Base64 ids (protobuf JSON), int values as numbers, a resource without process.pid."""
    request = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "x"},
                        "spans": [
                            {
                                "traceId": "AAECAwQFBgcICQoLDA0ODw==",
                                "spanId": "AAAAAAAAAAE=",
                                "name": "llm_request",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": 1700000000500000000,
                                "attributes": [
                                    {
                                        "key": "gen_ai.usage.prompt_tokens",
                                        "value": {"intValue": 12},
                                    },
                                    {"key": "ratio", "value": {"doubleValue": 0.25}},
                                    {"key": "ok", "value": {"boolValue": True}},
                                    {
                                        "key": "tags",
                                        "value": {"arrayValue": {"values": [{"stringValue": "a"}]}},
                                    },
                                ],
                                "status": {},
                            }
                        ],
                    }
                ],
            }
        ]
    }
    path = tmp_path / "collector.json"
    path.write_text(json.dumps(request) + "\n" + json.dumps(request).replace("AAE=", "AAI=") + "\n")
    trace = load(path)
    assert trace.meta["format"] == "otlp-json"
    assert trace.spans["span_id"].tolist() == [1, 2]
    assert trace.spans["trace_id"].tolist() == ["000102030405060708090a0b0c0d0e0f"] * 2
    assert (trace.spans["end"] - trace.spans["start"]).tolist() == [500_000_000] * 2
    attrs = {k: trace.attr(k)[1] for k in trace.attrs}
    assert attrs == {"gen_ai.usage.prompt_tokens": 12, "ratio": 0.25, "ok": True, "tags": ["a"]}
    assert [str(trace.attr(k).dtype) for k in ("gen_ai.usage.prompt_tokens", "ok")] == [
        "int64",
        "bool",
    ]
    assert trace.processes["role"].tolist() == ["vllm"]


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "a"}]}]}]}', "startTimeUnixNano"),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": 5, '
            '"startTimeUnixNano": "1", "endTimeUnixNano": "2", "attributes": 3}]}]}]}',
            "request 0",
        ),
        ('{"resourceSpans": [', "truncated"),
    ],
)
def test_bad_otlp_is_one_line(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(FdprofError, match=message) as info:
        load(path)
    assert "\n" not in str(info.value)


class _Receiver(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.received.append((self.path, self.headers["Content-Type"], request))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Receiver.received
    server.shutdown()
    server.server_close()


def test_export_replays_real_timestamps_to_a_real_receiver(engine_run, receiver):
    url, received = receiver
    trace = load(engine_run)
    done = export(trace, url)
    assert done.spans == len(trace.spans) + sum(1 for _ in []) or done.spans >= len(trace.spans)
    spans = [
        span
        for path, ctype, req in received
        for rs in req.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    assert all(path == "/v1/traces" for path, _, _ in received)
    assert {ctype for _, ctype, _ in received} == {"application/x-protobuf"}
    real = [s for s in spans if s.name != "fdprof.syncs"]
    assert len(real) == len(trace.spans)
    by_id = {int.from_bytes(s.span_id, "big"): s for s in real}
    for sid, start, end in trace.spans[["span_id", "start", "end"]].itertuples(index=False):
        assert by_id[sid].start_time_unix_nano == start
        assert by_id[sid].end_time_unix_nano == end
    events = [e for s in spans for e in s.events if e.name == "sync"]
    assert len(events) == len(trace.syncs)


def test_export_to_nothing_listening_is_one_line(engine_run):
    with pytest.raises(FdprofError, match="cannot reach the collector"):
        export(load(engine_run), "http://127.0.0.1:9", timeout=2)


def test_endpoint_follows_otel_variables(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert endpoint_url() == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://x:1/custom")
    assert endpoint_url() == "http://x:1/custom"
    assert endpoint_url("http://y:2") == "http://y:2/v1/traces"
    with pytest.raises(FdprofError):
        endpoint_url("collector:4318")
