"""One path to OpenTelemetry: the live export of a run (records tailed while three real
processes write them) and the replay of the same records (``export-otlp``), directly or through
an OTLP JSON file, send the same spans to a real OTLP/HTTP receiver; a foreign OTLP file keeps
its service names, span kinds and scopes when sent again."""

from __future__ import annotations

import json
import shutil

import pytest
from otel_processes import SPANS, run_processes
from otlp_receiver import Receiver, attrs, canonical

from fdprof import probe
from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.formats import records as R
from fdprof.formats.rundir import write_run_manifest
from fdprof.probe.sdk.otel_export import observers_for
from fdprof.probe.sdk.otel_replay import replay
from fdprof.trace import load, otlp
from fdprof.trace.export import OtelView

CONFIG = {"kv_lock": "ipc", "workload": "prefix-swap"}
RESOURCE = {S.KV_LOCK: CONFIG["kv_lock"], S.WORKLOAD: CONFIG["workload"]}


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    """A run exported live, its run directory, and what the receiver got."""
    run_dir = tmp_path_factory.mktemp("live")
    with Receiver() as rx:
        config = probe.ProbeConfig(run_dir=str(run_dir), otlp_endpoint=rx.endpoint,
                                   resource=RESOURCE)  # fmt: skip
        (obs,) = observers_for(config)
        infos = run_processes(run_dir, [obs])
        obs.stop()
        received = rx.scoped_spans()
    write_run_manifest(run_dir, status="ok", config=CONFIG, processes=infos)
    assert obs.stats["spans_exported"] == len(received) == SPANS
    return run_dir, received


def _replayed(trace) -> list:
    with Receiver() as rx:
        done = replay(OtelView(trace), rx.endpoint)
        received = rx.scoped_spans()
    assert done.delivered == done.spans == len(received)
    return received


def test_replay_sends_the_spans_the_live_export_sent(live_run):
    run_dir, live = live_run
    trace = load(run_dir)
    replayed = _replayed(trace)
    assert canonical(replayed) == canonical(live)  # ids, parents, times, attributes, resources
    by_name = {}
    for res, _, span in live:
        by_name.setdefault(span.name, []).append((res, span))
        assert res[S.KV_LOCK] == "ipc" and res[S.DP_RANK] == "0"
        assert res[S.SERVICE_NAME] == "fdprof-engine"
    # no made-up trace per process: a span without context is its own trace's root
    roots = {span.trace_id for _, span in by_name["execute_model"]}
    assert len(roots) == len(by_name["execute_model"])
    # the replay's times are the trace's
    starts = dict(zip(trace.spans["span_id"], trace.spans["start"], strict=True))
    for _, _, span in replayed:
        sid = int.from_bytes(span.span_id, "big", signed=True)
        assert span.start_time_unix_nano == starts[sid]


def test_an_otlp_file_of_the_run_sends_the_same_spans_again(live_run, tmp_path):
    run_dir, live = live_run
    path = tmp_path / "run.otlp.json"
    otlp.write(load(run_dir), path)
    assert canonical(_replayed(load(path))) == canonical(live)


def _spread_anchors(run_dir, processes: list[dict]) -> None:
    """Give each record file an epoch anchor some µs from the others (within one host's
    clock), as anchors measured one after another are: own offsets and the shared one differ."""
    for k, info in enumerate(processes):
        path = run_dir / info["record"]
        with open(path, "r+b") as f:
            fields = list(R.FILE_HEADER.unpack(f.read(R.FILE_HEADER.size)))
            fields[3] += 3_000 * k  # epoch anchor
            f.seek(0)
            f.write(R.FILE_HEADER.pack(*fields))


def test_a_run_over_before_the_tail_looked_still_shares_one_clock(live_run, tmp_path):
    """The live export stopped before its first poll (a run shorter than one poll) puts the
    processes on the reader's one clock all the same: it reads every header at the end."""
    run_dir, _ = live_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    processes = json.loads((copy / "run.json").read_text())["processes"]
    _spread_anchors(copy, processes)
    with Receiver() as rx:
        config = probe.ProbeConfig(run_dir=str(copy), otlp_endpoint=rx.endpoint,
                                   resource=RESOURCE)  # fmt: skip
        (obs,) = observers_for(config)
        obs._stop.set()  # the run is over before the tail thread starts
        obs.start(copy, processes)
        obs.stop()
        live = rx.scoped_spans()
    assert len(live) == SPANS
    assert canonical(_replayed(load(copy))) == canonical(live)


def test_a_foreign_otlp_file_keeps_its_services_kinds_and_scopes(tmp_path):
    def span(sid: str, kind, parent: str | None = None, **extra) -> dict:
        out = {
            "traceId": "0af7651916cd43dd8448eb211c80319c",
            "spanId": sid,
            "name": f"span {sid[-1]}",
            "kind": kind,
            "startTimeUnixNano": "1700000000000000000",
            "endTimeUnixNano": "1700000000500000000",
            "attributes": [{"key": "http.route", "value": {"stringValue": "/v1/completions"}}],
            **extra,
        }
        if parent:
            out["parentSpanId"] = parent
        return out

    request = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "service.name", "value": {"stringValue": "vllm-frontend"}},
                        {"key": "host.name", "value": {"stringValue": "gpu-7"}},
                    ]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "vllm.entrypoints", "version": "0.32.0"},
                        "spans": [
                            span("00f067aa0ba902b7", 2),
                            span(
                                "00f067aa0ba902b8",
                                "SPAN_KIND_CLIENT",
                                "00f067aa0ba902b7",
                                status={"code": 2, "message": "upstream timed out"},
                            ),
                        ],  # fmt: skip
                    },
                    {"scope": {"name": "other"}, "spans": [span("00f067aa0ba902b9", 1)]},
                ],
            }
        ]
    }
    path = tmp_path / "foreign.otlp.json"
    path.write_text(json.dumps(request) + "\n")
    received = _replayed(load(path))
    by_id = {s.span_id.hex(): (res, scope, s) for res, scope, s in received}
    assert len(by_id) == 3
    for res, _, s in by_id.values():
        assert res == {"service.name": "vllm-frontend", "host.name": "gpu-7"}
        assert s.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
        assert attrs(s)["http.route"] == "/v1/completions"
        assert not {S.SPAN_KIND, S.OTEL_SCOPE_NAME, S.OTEL_STATUS_CODE} & set(attrs(s))
    _, scope, server = by_id["00f067aa0ba902b7"]
    assert server.kind == 2 and (scope.name, scope.version) == ("vllm.entrypoints", "0.32.0")
    _, scope, client = by_id["00f067aa0ba902b8"]
    assert client.kind == 3 and client.parent_span_id.hex() == "00f067aa0ba902b7"
    assert (client.status.code, client.status.message) == (2, "upstream timed out")
    _, scope, internal = by_id["00f067aa0ba902b9"]
    assert internal.kind == 1 and scope.name == "other"
    # and through a file of ours, the same again
    again = tmp_path / "again.otlp.json"
    otlp.write(load(path), again)
    assert canonical(_replayed(load(again))) == canonical(received)


def test_nothing_listening_is_one_line_with_the_count(live_run):
    run_dir, _ = live_run
    with pytest.raises(FdprofError, match=rf"{SPANS} of {SPANS} spans not delivered") as info:
        replay(OtelView(load(run_dir)), "http://127.0.0.1:9", timeout=1)
    assert "\n" not in str(info.value)
