import json

import pytest
from roundtrip import assert_same

from fdprof.errors import FdprofError
from fdprof.trace import load, otlp


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
    assert attrs == {
        "gen_ai.usage.prompt_tokens": 12,
        "ratio": 0.25,
        "ok": True,
        "tags": ["a"],
        "otel.scope.name": "x",  # not fdprof's scope: kept, so a re-export keeps it
    }
    assert trace.meta["resources"] == {-1: {"service.name": "vllm"}}
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
