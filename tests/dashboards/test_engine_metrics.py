"""The real check: two short engine runs, one after the other, serve their metrics (``fdprof
run --metrics-port``) on one port, a real Prometheus scrapes them, and every PromQL query of
every dashboard panel and annotation returns data — the lock vs lockless ratio included.

A metric the probe renames, or a label it drops, leaves a panel empty and fails this test; so
does a latency panel whose series carry no ``trace_id`` exemplars (the link to Tempo). Panels
that may legitimately read zero (swap time overlapped under the lock, dropped spans, the
safety row of a correct run) have series from the start: the probe creates counters at zero.
The candidate run has a seeded protocol bug, so the safety row must show exactly what
``fdprof hazards`` finds in its records.
"""

from __future__ import annotations

import json
import time

import pytest

from fdprof import dashboards
from fdprof.dashboards import overview, prometheus_api
from tests.cli import fdprof

#: wider than Grafana's 4 s minimum: an engine step observes a histogram less often than
#: the harness's metrics process does
WINDOW = "10s"
#: the dashboard's time range: both runs lie within it
RANGE = "10m"


def _last_values(prom, query, start: float) -> dict[tuple, float]:
    """Each series' last sample of ``query`` between ``start`` and now, by its labels."""
    result = prometheus_api.query_range(prom.url, query.text, start, time.time())
    return {
        tuple(sorted(series["metric"].items())): float(series["values"][-1][1]) for series in result
    }


def _hazards(run_dir) -> dict[str, int]:
    """What ``fdprof hazards --json`` finds in a run, by the metric's ``finding`` values."""
    counts = json.loads(fdprof("hazards", "--json", run_dir).stdout)["counts"]
    return {"race": counts["overlaps"], "latent_race": counts["latent"],
            "lifetime": counts["lifetime"], "broken_lock": counts["broken_locks"]}  # fmt: skip


@pytest.mark.slow
def test_every_panel_query_returns_data_from_two_engine_runs(
    prometheus, metrics_port, dead_endpoint, trace_id_label, tmp_path
):
    """The baseline (lock wait has data), its collector down (dropped spans have data), then
    the lockless engine with a seeded bug (races and mismatches have data)."""
    prom = prometheus([f"127.0.0.1:{metrics_port}"])
    start = time.time()
    runs = {
        overview.BASELINE: ("--otlp-endpoint", dead_endpoint),
        overview.CANDIDATE: ("--fault", "no-wait-swap-in"),
    }
    results = {}
    for kv_lock, extra in runs.items():
        out = tmp_path / kv_lock
        run = fdprof("run", "--kv-lock", kv_lock, "--seed", "6", "--json", "--metrics-port",
                     metrics_port, "--out", out, *extra)  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        results[kv_lock] = json.loads(run.stdout)
    queries = dashboards.promql(WINDOW, RANGE)
    missing = prom.wait_for_data(queries, start, timeout_s=10)
    assert not missing, "no data for:\n" + "\n".join(map(str, missing))
    without = prom.without_exemplars([q for q in queries if q.exemplar], start, trace_id_label)
    assert not without, "no trace_id exemplars on:\n" + "\n".join(map(str, without))

    by_panel = {q.panel: q for q in queries}
    found = _last_values(prom, by_panel["Races and lifetime violations"], start)
    shown: dict[str, dict[str, float]] = {}
    for labels, value in found.items():
        labels = dict(labels)
        shown.setdefault(labels["kv_lock"], {})[labels["finding"]] = value
    assert shown == {mode: _hazards(tmp_path / mode) for mode in runs}
    assert shown[overview.CANDIDATE]["race"] > 0, "the seeded bug no longer races"
    mismatches = _last_values(prom, by_panel["Integrity mismatches"], start)
    assert {dict(k)["kv_lock"]: v for k, v in mismatches.items()} == {
        mode: r["integrity"]["mismatches"] for mode, r in results.items()
    }
    runs_seen = _last_values(prom, by_panel["Runs by kv_lock"], start)
    assert sorted(runs_seen.values()) == [1, 1]
