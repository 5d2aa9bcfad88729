"""OpenTelemetry from a real engine run (``fdprof run --otlp-endpoint``): a real OTLP/HTTP
receiver started here decodes the protobuf; an unreachable endpoint does not hang the run."""

from __future__ import annotations

import json

import pytest
from otlp_receiver import Receiver, attrs, canonical

from fdprof.analysis.hazards import find_hazards
from fdprof.probe.sdk.otel_export import STATS_FILE
from fdprof.probe.sdk.otel_replay import replay
from fdprof.trace import load
from fdprof.trace.export import OtelView
from tests.cli import fdprof

pytestmark = pytest.mark.slow


def test_engine_spans_and_metrics_reach_a_real_receiver(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "500")
    with Receiver() as rx:
        run = fdprof("run", "--requests", 24, "--kv-lock", "ipc", "--otlp-endpoint", rx.endpoint,
                     "--json", "--out", tmp_path / "run")  # fmt: skip
        assert run.returncode == 0, run.stderr
        results = json.loads(run.stdout)
        spans = rx.spans()
        live = canonical(rx.scoped_spans())
        metric_names = rx.metric_names()
        hazards = rx.last_values("fd.hazards")
        mismatches = rx.last_values("fd.kv.mismatches")
        active = rx.last_values("fd.run.active")
    with Receiver() as rx:  # the replay of the run's records sends the very same spans
        replay(OtelView(load(tmp_path / "run")), rx.endpoint)
        assert canonical(rx.scoped_spans()) == live
    assert results["swaps"]["to_cpu"] > 0
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    pids = {p["pid"]: p["role"] for p in manifest["processes"]}
    roles_seen = {}
    for res, span in spans:
        assert res["fd.kv_lock"] == "ipc" and res["fd.role"] == pids[res["process.pid"]]
        assert f"-{res['process.pid']}-" in res["service.instance.id"]
        roles_seen.setdefault(res["fd.role"], set()).add(span.name)
    assert set(roles_seen) == set(pids.values())
    assert "swap" in roles_seen["transfer"] and "execute_model" in roles_seen["worker"]
    by_id = {s.span_id: s for _, s in spans}
    swaps = [s for _, s in spans if s.name == "swap"]
    for s in swaps:  # child of the cache manager's issue_swap_task, across processes
        parent = by_id[s.parent_span_id]
        assert parent.name == "issue_swap_task" and parent.trace_id == s.trace_id
        a = attrs(s)
        assert ("kv.gpu_read" in a and "kv.cpu_write" in a) or (
            "kv.cpu_read" in a and "kv.gpu_write" in a
        )
    execs = [s for _, s in spans if s.name == "execute_model"]
    assert all("kv.gpu_write" in attrs(s) for s in execs)
    steps = [s for _, s in spans if s.name == "step"]
    for served in (execs, steps):  # both link to the requests they served
        linked = [link for s in served for link in s.links]
        assert linked and all(by_id[lk.span_id].name == "request" for lk in linked)
        assert all(by_id[lk.span_id].trace_id == lk.trace_id for lk in linked)
    assert {"fd.swap.duration", "fd.execute_model.duration", "fd.step.duration"} <= metric_names
    assert {"fd.generated_tokens", "fd.swapped_blocks", "fd.lock.wait"} <= metric_names
    assert {"gen_ai.server.time_to_first_token", "gen_ai.server.time_per_output_token",
            "gen_ai.server.request.duration"} <= metric_names  # fmt: skip
    # the run's safety at its end, on the run's own series: a correct run races nowhere; the
    # ipc lock's failures to exclude (threads of one process share it) are counted as found
    run = str((tmp_path / "run").resolve())
    broken = len(find_hazards(load(tmp_path / "run")).broken_locks)
    assert {dict(k)["finding"]: v for k, v in hazards.items()} == {
        "race": 0, "latent_race": 0, "lifetime": 0, "broken_lock": broken}  # fmt: skip
    assert all(dict(k)["run"] == run for k in [*hazards, *mismatches, *active])
    assert sum(mismatches.values()) == results["integrity"]["mismatches"] == 0
    assert list(active.values()) == [0]  # the run has ended
    stats = json.loads((tmp_path / "run" / STATS_FILE).read_text())
    assert stats["spans_dropped"] == 0 and stats["spans_exported"] == len(spans)
