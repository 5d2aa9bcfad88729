"""From the first scrape, every metric the dashboards query is there: a real ``fdprof run
--metrics-port`` (no OTLP sink) is scraped as soon as its endpoint answers, and each metric a
panel or annotation queries has its series, counters for every label value known up front.
``fd_probe_dropped_total`` was exported only with an OTLP sink, so the overview's panel read
"No data" under ``--metrics-port`` alone."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from fdprof import dashboards
from fdprof import metric_names as M

#: a hang guard, not a timing threshold
STARTUP_S = 240


def _queried() -> list[M.Metric]:
    """The metrics some dashboard query names (a histogram by its _bucket/_sum/_count)."""
    text = "\n".join(q.text for q in dashboards.promql("30s", "10m"))
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text))
    return [
        m
        for m in M.ALL
        if names & {m.prom_name, *(m.prom_name + s for s in ("_bucket", "_sum", "_count"))}
    ]


def _series(exposition: str) -> set[tuple[str, frozenset]]:
    """(name, labels) of every sample in a Prometheus text exposition."""
    out = set()
    for line in exposition.splitlines():
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ", line)
        if match and not line.startswith("#"):
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match[2] or ""))
            out.add((match[1], labels))
    return out


def _first_scrape(port: int, run: subprocess.Popen) -> str:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline and run.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                return r.read().decode()
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.01)
    raise AssertionError(f"the endpoint never answered (run exit {run.poll()})")


@pytest.mark.slow
def test_every_queried_metric_is_there_from_the_first_scrape(metrics_port, tmp_path):
    cmd = [sys.executable, "-m", "fdprof", "run", "--kv-lock", "none", "--requests", "8",
           "--metrics-port", str(metrics_port), "--out", str(tmp_path / "run")]  # fmt: skip
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        series = _series(_first_scrape(metrics_port, run))
    finally:
        _, err = run.communicate(timeout=STARTUP_S)
    assert run.returncode == 0, err[-2000:]
    queried = _queried()
    assert M.DROPPED_RECORDS in queried and M.HAZARDS in queried
    names = {name for name, _ in series}
    for metric in queried:
        exposed = metric.prom_name + ("_count" if metric.kind == "histogram" else "")
        assert exposed in names, f"{metric.prom_name}: not in the first scrape"
        if metric.kind != "counter":
            continue
        known = [label for label in metric.labels if label in M.KNOWN_VALUES]
        for values in itertools.product(*(M.KNOWN_VALUES[label] for label in known)):
            wanted = set(zip(known, values, strict=True))
            assert any(name == exposed and wanted <= labels for name, labels in series), (
                f"{metric.prom_name}{dict(wanted)}: not in the first scrape"
            )
