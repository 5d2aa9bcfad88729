"""The real check: a short engine run serves its metrics (``fdprof run --metrics-port``), a real
Prometheus scrapes them, and every PromQL query of every dashboard panel returns data.

A metric the probe renames, or a label it drops, leaves a panel empty and fails this test.
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
#: panels whose series the probe does not export yet, asked of the probe's owner: the overlap
#: counter appears only once some swap overlapped (never under the lock), and the OTLP sink's
#: dropped counter only at shutdown, after the last scrape. Reported as XFAIL until fixed; any
#: other empty panel fails.
#: Nor does it attach trace-id exemplars to its histograms yet: also XFAIL until it does.
AWAITING_PROBE = {"Swap time overlapped with execute_model", "Dropped spans/s by sink"}


def _fdprof(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdprof", *args], capture_output=True, text=True, timeout=timeout
    )


def _run_serves_metrics() -> bool:
    help_text = _fdprof("run", "--help", timeout=60)
    return help_text.returncode == 0 and "--metrics-port" in help_text.stdout


@pytest.mark.slow
@pytest.mark.skipif(not _run_serves_metrics(), reason="fdprof run --metrics-port not built yet")
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
    broken = [q for q in missing if q.panel not in AWAITING_PROBE]
    assert not broken, "no data for:\n" + "\n".join(map(str, broken))
    pending = sorted({q.panel for q in missing})

    exemplars = prom.without_exemplars([q for q in queries if q.exemplar], start, trace_id_label)
    pending += [f"exemplars on {q.panel}" for q in exemplars]
    if pending:
        pytest.xfail("awaiting the probe: " + ", ".join(pending))
