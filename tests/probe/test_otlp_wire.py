"""fdprof's OTLP encoder writes the message the SDK's encoder builds: parsed, the two requests
are equal, over every kind of value, event, link, parent, kind, status, scope and resource."""

from __future__ import annotations

import random

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from fdprof.probe.sdk import otlp_wire
from fdprof.probe.sdk.otel_sink import ProcessResource

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
VALUES = [
    "kernel", "", "ünïcode ✓", True, False, 0, 1, -1, 7, 1023, 1025, 2**62, -(2**63), 2**31,
    0.0, 0.25, -3.5e300, b"\x00\xff", None, [1, 2, 3], [512, 1, 1], ["a", "b"], [True, 0],
    [[1], [2, 3]], [], {"k": "v", "n": 2}, {}, [1.5, "x", None],
]  # fmt: skip
SCOPES = [
    InstrumentationScope("fdprof", "1"),
    InstrumentationScope("vllm.entrypoints", "0.32.0", "https://schema/1", {"a": 1}),
    InstrumentationScope("other"),
    None,
]
RESOURCES = [
    ProcessResource({"service.name": "fdprof-engine", "process.pid": 12, "fd.dp_rank": "0"}),
    Resource({"service.name": "vllm"}, "https://schema/r"),
    Resource({}),
]


def _span(rng: random.Random) -> ReadableSpan:
    trace = rng.getrandbits(128) or 1

    def attrs(n: int) -> dict:
        return {f"k{rng.randrange(40)}": rng.choice(VALUES) for _ in range(n)}

    parent = None
    if rng.random() < 0.7:
        parent = SpanContext(trace, rng.getrandbits(64) or 1, rng.random() < 0.5, SAMPLED)
    state = TraceState([("vendor", "x")]) if rng.random() < 0.1 else None
    links = [
        Link(SpanContext(rng.getrandbits(128) or 1, rng.getrandbits(64) or 1,
                         rng.random() < 0.5, SAMPLED), attrs(rng.randrange(2)))
        for _ in range(rng.randrange(3))
    ]  # fmt: skip
    events = [
        Event(rng.choice(["release", "acquire", ""]), attrs(rng.randrange(3)), rng.getrandbits(63))
        for _ in range(rng.randrange(3))
    ]
    statuses = [Status(StatusCode.UNSET), Status(StatusCode.OK),
                Status(StatusCode.ERROR, "timed out"), Status(StatusCode.ERROR)]  # fmt: skip
    status = rng.choice(statuses)
    start = rng.getrandbits(62)
    return ReadableSpan(
        rng.choice(["execute_model", "swap", "", "aten::mm"]),
        SpanContext(trace, rng.getrandbits(64) or 1, False, SAMPLED, trace_state=state),
        parent=parent,
        resource=rng.choice(RESOURCES),
        attributes=attrs(rng.randrange(12)),
        events=events,
        links=links,
        kind=rng.choice(list(SpanKind)),
        status=status,
        start_time=start,
        end_time=start + rng.randrange(10**9),
        instrumentation_scope=rng.choice(SCOPES),
    )


def test_the_same_message_as_the_sdk_encoder():
    rng = random.Random(7)
    spans = [_span(rng) for _ in range(600)]
    for lo in range(0, len(spans), 100):
        batch = spans[lo : lo + 100]
        ours = ExportTraceServiceRequest.FromString(otlp_wire.encode(batch))
        assert ours == encode_spans(batch)


def test_a_cached_value_is_not_confused_with_an_equal_one_of_another_type():
    rng = random.Random(1)
    base = _span(rng)
    spans = [
        ReadableSpan("s", base.context, resource=RESOURCES[0], attributes={"v": value},
                     instrumentation_scope=SCOPES[0], start_time=1, end_time=2)
        for value in (True, 1, 1.0, False, 0, [1], [True], "1")
    ]  # fmt: skip
    assert ExportTraceServiceRequest.FromString(otlp_wire.encode(spans)) == encode_spans(spans)
