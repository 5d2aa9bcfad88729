"""The Prometheus harness: a real Debian ``prometheus`` on a free loopback port, scraping
given targets every second into a temporary storage dir, stopped at teardown.

``start`` returns once Prometheus scrapes: it is "ready" seconds before its discovery
manager hands the scrape loops their targets (about 5 s), and a short engine run started in
that gap can finish unseen, leaving every ``rate()`` empty.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fdprof.dashboards import prometheus_api
from fdprof.dashboards.queries import Query

READY_TIMEOUT_S = 60
#: ``lastScrape`` of a target not scraped yet (Go's zero time)
NEVER_SCRAPED = "0001-01-01"
DATASOURCES = Path(__file__).resolve().parents[2] / "dashboards/provisioning/datasources"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen
    log: Path

    def empty(self, queries: list[Query], start: float) -> list[Query]:
        """The queries with no finite sample between ``start`` and now."""
        end = time.time()
        return [
            q
            for q in queries
            if not prometheus_api.finite_samples(
                prometheus_api.query_range(self.url, q.text, start, end)
            )
        ]

    def without_exemplars(self, queries: list[Query], start: float, label: str) -> list[Query]:
        """The queries with no exemplar carrying ``label`` between ``start`` and now."""
        end = time.time()
        return [
            q
            for q in queries
            if not any(
                label in exemplar["labels"]
                for found in prometheus_api.query_exemplars(self.url, q.text, start, end)
                for exemplar in found["exemplars"]
            )
        ]

    @staticmethod
    def wait(missing: Callable[[], list[Query]], timeout_s: float) -> list[Query]:
        """Poll ``missing()`` until it is empty; what it still returns at the deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = missing()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(1)

    def wait_for_data(self, queries: list[Query], start: float, timeout_s: float) -> list[Query]:
        """Poll until every query returns data; the ones still empty at the deadline."""
        return self.wait(lambda: self.empty(queries, start), timeout_s)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _config(targets: list[str]) -> str:
    listed = ", ".join(f'"{t}"' for t in targets)
    return (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: fdprof\n"
        f"    static_configs:\n      - targets: [{listed}]\n"
    )


def _wait_ready(server: Prometheus) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"prometheus exited: {server.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    server.stop()
    pytest.fail(f"prometheus not ready after {READY_TIMEOUT_S}s: {server.log.read_text()[-2000:]}")


def _wait_scraping(server: Prometheus, targets: list[str]) -> None:
    """Until every target has been scraped once (a target nobody serves yet is "down": fine)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        scraped = {
            t["labels"]["instance"]
            for t in prometheus_api.targets(server.url)
            if not t["lastScrape"].startswith(NEVER_SCRAPED)
        }
        if scraped >= set(targets):
            return
        time.sleep(0.2)
    server.stop()
    pytest.fail(f"prometheus never scraped {targets} in {READY_TIMEOUT_S}s")


@pytest.fixture
def metrics_port() -> int:
    """A free loopback port for the process whose metrics Prometheus scrapes."""
    return free_port()


@pytest.fixture
def trace_id_label() -> str:
    """The exemplar label that the provisioned Prometheus datasource links to Tempo."""
    (label,) = (
        link["name"]
        for source in yaml.safe_load((DATASOURCES / "fdprof.yaml").read_text())["datasources"]
        for link in source.get("jsonData", {}).get("exemplarTraceIdDestinations", [])
    )
    return label


@pytest.fixture
def dead_endpoint() -> str:
    """An OTLP/HTTP URL on a loopback port nobody listens on: a collector that is down."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator:
    """``start(targets) -> Prometheus``: a fresh server already scraping ``host:port`` targets."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            "prometheus is not installed (apt-get install prometheus; "
            "make test does as root: .ci/system-deps)"
        )
    started: list[Prometheus] = []

    def start(targets: list[str]) -> Prometheus:
        work = tmp_path / f"prometheus-{len(started)}"
        work.mkdir()
        config = work / "prometheus.yml"
        config.write_text(_config(targets))
        port = free_port()
        log = work / "prometheus.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={work / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--enable-feature=exemplar-storage",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        server = Prometheus(f"http://127.0.0.1:{port}", process, log)
        started.append(server)
        _wait_ready(server)
        _wait_scraping(server, targets)
        return server

    yield start
    for server in started:
        server.stop()
