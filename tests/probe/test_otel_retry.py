"""What the specification asks of an OTLP exporter, against a real receiver that refuses:
429/502/503/504 retried with backoff (after ``Retry-After`` when given), other refusals not;
every span not delivered counted, the batch still in flight at shutdown too."""

from __future__ import annotations

import json
import logging
import re
import threading

import pytest
from otel_processes import SPANS, Scraper, run_processes
from otlp_receiver import Receiver

from fdprof import probe
from fdprof.errors import FdprofError
from fdprof.probe.sdk.otel_export import observers_for
from fdprof.probe.sdk.otel_replay import replay
from fdprof.trace import load
from fdprof.trace.export import OtelView


@pytest.fixture
def small_trace(tmp_path):
    """Three spans in one OTLP JSON line: one batch."""
    spans = [
        {
            "traceId": "0af7651916cd43dd8448eb211c80319c",
            "spanId": f"00f067aa0ba902b{i}",
            "name": "step",
            "startTimeUnixNano": str(1_700_000_000_000_000_000 + i),
            "endTimeUnixNano": str(1_700_000_000_000_000_100 + i),
        }
        for i in range(3)
    ]
    request = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}
    path = tmp_path / "small.otlp.json"
    path.write_text(json.dumps(request) + "\n")
    return load(path)


def test_429_502_503_504_are_retried_with_backoff_and_retry_after(small_trace):
    refusals = [(429, {"Retry-After": "1"}), (502, {}), (503, {"Retry-After": "0"}),
                (504, {"Retry-After": "0"})]  # fmt: skip
    with Receiver(refusals=refusals) as rx:
        done = replay(OtelView(small_trace), rx.endpoint)
        assert [status for _, status in rx.refused] == [429, 502, 503, 504]
        assert done.delivered == len(rx.spans()) == 3
        times = [t for t, _ in rx.refused] + rx.accepted_at
    waits = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert waits[0] >= 1.0  # Retry-After: 1
    assert waits[1] >= 2 * 0.8  # no Retry-After: exponential backoff (2 s, ±20 % jitter)


def test_other_refusals_are_not_retried_and_name_the_count(small_trace):
    with Receiver(refusals=[(400, {})]) as rx:
        with pytest.raises(FdprofError, match=r"3 of 3 spans not delivered \(.*400") as info:
            replay(OtelView(small_trace), rx.endpoint)
        assert len(rx.refused) == 1 and not rx.spans()
    assert "\n" not in str(info.value)


def test_the_batch_in_flight_at_shutdown_counts_as_dropped(tmp_path, monkeypatch, caplog):
    """No export before the end (a minute's schedule delay), and a collector slower than the
    shutdown budget: the one batch is still in flight when the run ends."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "300")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_TIMEOUT", "300")
    with Receiver(delay_s=2.0) as rx:
        config = probe.ProbeConfig(run_dir=str(tmp_path), otlp_endpoint=rx.endpoint, metrics_port=0)
        (obs,) = observers_for(config)
        run_processes(tmp_path, [obs])
        scraper = Scraper(obs.prometheus.port)
        scraper.start()
        stopped = threading.Thread(target=obs.stop, daemon=True)
        with caplog.at_level(logging.WARNING, logger="fdprof.probe.sdk.otel_export"):
            stopped.start()
            stopped.join(60)
        assert not stopped.is_alive()
        scraper.join(30)
    assert obs.stats["spans_built"] == SPANS
    assert obs.stats["spans_exported"] == 0 and obs.stats["spans_dropped"] == SPANS
    assert f"dropped {SPANS} of {SPANS} spans" in caplog.text
    dropped = re.search(r'fd_probe_dropped_total\{[^}]*sink="otlp"\} ([0-9.]+)', scraper.last)
    assert dropped and float(dropped.group(1)) == SPANS
