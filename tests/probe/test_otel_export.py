"""The OpenTelemetry sink end to end with real processes: records tailed by the observer,
sent over OTLP/HTTP protobuf to a real receiver started here, and on a Prometheus endpoint."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

from otel_processes import N_REQ, SPANS, Scraper, run_processes, scrape
from otlp_receiver import Receiver, attrs
from schemas import validate

from fdprof import probe
from fdprof import settings as env
from fdprof.probe.sdk.otel_export import OtelExportObserver, observers_for
from tests.cli import fdprof


def test_spans_resources_links_and_metrics_over_otlp(tmp_path, impl, monkeypatch):
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100000")  # one export, at stop
    config = probe.ProbeConfig(
        run_dir=str(tmp_path), metrics_port=0, resource={"fd.kv_lock": "ipc"}
    )
    with Receiver() as rx:
        config = probe.ProbeConfig(**{**config.__dict__, "otlp_endpoint": rx.endpoint})
        (obs,) = observers_for(config)
        infos = run_processes(tmp_path, [obs])
        worker = 'dp_rank="0",kv_lock="ipc",role="worker"'
        tokens = f"fd_generated_tokens_total{{{worker}}} {3.0 * N_REQ}"
        text = _scrape_once_tailed(obs, tokens)
        openmetrics = scrape(obs.prometheus.port, "application/openmetrics-text; version=1.0.0")
        obs.stop()
        spans = rx.spans()
        metric_names = rx.metric_names()
    pids = {i["role"]: i["pid"] for i in infos}
    assert obs.stats["spans_dropped"] == 0
    assert obs.stats["spans_exported"] == len(spans) == SPANS
    by_role = {}
    for res, span in spans:
        by_role.setdefault(res["fd.role"], []).append((res, span))
        assert res["process.pid"] == pids[res["fd.role"]]
        assert res["service.instance.id"].startswith(f"{res['fd.role']}-0-{res['process.pid']}-")
        assert res["fd.kv_lock"] == "ipc" and res["service.name"] == "fdprof-engine"
    assert set(by_role) == {"engine", "transfer", "worker"}
    named = {}
    for _, s in spans:
        named.setdefault(s.name, []).append(s)
    swap = named["swap"][0]
    assert attrs(swap)["kv.gpu_read"] == [0, 10] and attrs(swap)["kv.cpu_write"] == [0]
    assert attrs(named["execute_model"][0])["kv.gpu_write"] == [1, 2, 3]
    issue_by_id = {s.span_id: s for s in named["issue_swap_task"]}
    req_by_id = {s.span_id: s for s in named["request"]}
    for s in named["swap"]:  # remote parent: the issuing span in the engine process
        parent = issue_by_id[s.parent_span_id]
        assert s.trace_id == parent.trace_id
        assert req_by_id[parent.parent_span_id].trace_id == s.trace_id  # one trace per request
    for s in named["execute_model"]:  # links, not parents, to the request it served
        assert not s.parent_span_id
        (link,) = s.links
        assert link.span_id in req_by_id and link.trace_id == req_by_id[link.span_id].trace_id
    assert len({s.trace_id for s in named["request"]}) == N_REQ
    issue = named["issue_swap_task"][0]
    assert [e.name for e in issue.events] == ["release"]
    assert {a.key: a.value.string_value for a in issue.events[0].attributes[:2]} == {
        "sync.op": "release",
        "sync.obj": "queue:swap",
    }
    for s in named["lock_wait"]:
        assert named["step"] and s.parent_span_id in {x.span_id for x in named["step"]}
    assert {"fd.swap.duration", "fd.execute_model.duration", "fd.step.duration"} <= metric_names
    assert {"fd.lock.wait", "fd.swapped_blocks", "fd.generated_tokens"} <= metric_names
    trace_ids = {s.trace_id.hex() for _, s in spans}
    exemplars = re.findall(
        r'fd_step_duration_seconds_bucket\{.*# \{span_id="(\w+)",trace_id="(\w+)"', openmetrics
    )
    assert exemplars and {t for _, t in exemplars} <= trace_ids
    assert {sid for sid, _ in exemplars} <= {s.span_id.hex() for s in named["step"]}
    assert 'fd_swap_overlap_seconds_total{dp_rank="0",kv_lock="ipc",role="engine"} 0.0' in text
    assert 'fd_probe_dropped_total{dp_rank="0",kv_lock="ipc",role="engine",sink="otlp"} 0.0' in text
    assert 'fd_swapped_blocks_total{direction="to_cpu",dp_rank="0",kv_lock="ipc",' in text
    assert tokens in text
    assert 'fd_lock_wait_seconds_count{dp_rank="0",holder="worker",kv_lock="ipc"' in text


def _scrape_once_tailed(obs, last: str, timeout_s: float = 60.0) -> str:
    """A scrape taken once the tailer has built every span and metered the last one (``last``
    is in the text): a loaded machine may take seconds to catch up."""
    deadline = time.monotonic() + timeout_s
    while obs.stats.get("spans_built", 0) < SPANS and time.monotonic() < deadline:
        time.sleep(0.05)
    text = scrape(obs.prometheus.port)
    while last not in text and time.monotonic() < deadline:
        time.sleep(0.05)
        text = scrape(obs.prometheus.port)
    return text


def _closed_port() -> str:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def _stop_in_thread(obs) -> bool:
    """stop() returns (the test fails, rather than hangs, if it does not)."""
    t = threading.Thread(target=obs.stop, daemon=True)
    t.start()
    t.join(120)
    return not t.is_alive()


def test_unreachable_endpoint_does_not_hang_and_counts_drops(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "2000")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    config = probe.ProbeConfig(run_dir=str(tmp_path), otlp_endpoint=_closed_port(), metrics_port=0)
    (obs,) = observers_for(config)
    run_processes(tmp_path, [obs])
    dropped = re.compile(r'fd_probe_dropped_total\{[^}]*role="engine",sink="otlp"\} ([0-9.]+)')
    live = 0.0
    for _ in range(600):  # drops show while the run goes on, not only at the end
        # the series exists once the tail thread has opened the engine's records
        found = dropped.search(scrape(obs.prometheus.port))
        live = float(found.group(1)) if found else 0.0
        if live > 0:
            break
        time.sleep(0.1)
    assert live > 0
    assert _stop_in_thread(obs)
    assert obs.stats["spans_exported"] == 0
    assert obs.stats["spans_dropped"] == obs.stats["spans_built"] == SPANS


def test_slow_collector_drops_instead_of_blocking(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "1000")
    with Receiver(delay_s=0.5) as rx:
        config = probe.ProbeConfig(run_dir=str(tmp_path), otlp_endpoint=rx.endpoint)
        (obs,) = observers_for(config)
        run_processes(tmp_path, [obs])
        assert _stop_in_thread(obs)
    stats = obs.stats
    assert stats["spans_dropped"] > 0
    assert stats["spans_exported"] + stats["spans_dropped"] == stats["spans_built"] == SPANS


def test_a_collecting_scraper_gets_the_final_counts(tmp_path):
    """Tailing only at stop (an hour between polls), every count reaches the endpoint after
    the run; stop() holds the endpoint open until the scraper has taken them."""
    config = probe.ProbeConfig(run_dir=str(tmp_path), metrics_port=0)
    obs = OtelExportObserver(config, env.otel(), prometheus_port=config.metrics_port, poll_s=3600)
    run_processes(tmp_path, [obs])
    scraper = Scraper(obs.prometheus.port)
    scraper.start()
    while not scraper.last:
        time.sleep(0.05)
    worker = 'dp_rank="0",kv_lock="unknown",role="worker"'
    assert f"fd_generated_tokens_total{{{worker}}} 0.0" in scraper.last  # from the start
    assert _stop_in_thread(obs)
    scraper.join(30)
    assert f"fd_generated_tokens_total{{{worker}}} {3.0 * N_REQ}" in scraper.last


def test_export_otlp_json_names_its_schema():
    """``export-otlp --json`` to a real receiver: the output validates against its schema."""
    lockless = Path(__file__).resolve().parents[2] / "traces" / "lockless"
    with Receiver() as rx:
        result = fdprof("export-otlp", lockless, "--endpoint", rx.endpoint, "--json")
        received = len(rx.spans())
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    validate("export-otlp", data)
    assert data["spans"] == received > 0
