"""The real check: a short engine run serves its metrics (``fdprof run --metrics-port``), a real
Prometheus scrapes them, and every PromQL query of every dashboard panel returns data.

A metric the probe renames, or a label it drops, leaves a panel empty and fails this test; so
does a latency panel whose series carry no ``trace_id`` exemplars (the link to Tempo). Panels
that may legitimately read zero (swap time overlapped under the lock, dropped spans) have
series from the start: the probe creates those counters at zero.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from fdprof import dashboards

#: wider than Grafana's 4 s minimum: an engine step observes a histogram less often than
#: the harness's metrics process does
WINDOW = "10s"


def _fdprof(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdprof", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_every_panel_query_returns_data_from_an_engine_run(
    prometheus, metrics_port, dead_endpoint, trace_id_label, tmp_path
):
    """The baseline engine (lock wait has data), its collector down (dropped spans have data)."""
    prom = prometheus([f"127.0.0.1:{metrics_port}"])
    start = time.time()
    run = _fdprof(
        "run",
        "--kv-lock",
        "ipc",
        "--seed",
        "6",
        "--metrics-port",
        str(metrics_port),
        "--otlp-endpoint",
        dead_endpoint,
        "--out",
        str(tmp_path / "run"),
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    queries = dashboards.promql(WINDOW)
    missing = prom.wait_for_data(queries, start, timeout_s=10)
    assert not missing, "no data for:\n" + "\n".join(map(str, missing))
    without = prom.without_exemplars([q for q in queries if q.exemplar], start, trace_id_label)
    assert not without, "no trace_id exemplars on:\n" + "\n".join(map(str, without))
