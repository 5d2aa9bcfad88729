"""``--metrics-port`` serves on loopback unless ``--metrics-host`` says otherwise: the socket's
own address, from the option through the capture plan to the bound server."""

from __future__ import annotations

import socket

import pytest

from fdprof.capture.plan import CapturePlan
from fdprof.cli import build_parser
from fdprof.cli._engine_options import capture_plan
from fdprof.probe.sdk.otel_export import observers_for

pytest.importorskip("prometheus_client")


def bound_address(argv: list[str], tmp_path) -> tuple[str, int]:
    args = build_parser().parse_args([*argv, "--out", str(tmp_path / "out")])
    plan: CapturePlan = capture_plan(args)
    (observer,) = observers_for(plan.probe_config(tmp_path, "none"))
    observer.start(tmp_path, [])
    try:
        return observer.prometheus._server.socket.getsockname()[:2]
    finally:
        observer.stop()


@pytest.mark.parametrize("command", ["run", "ab"])
def test_the_metrics_endpoint_binds_loopback_by_default(tmp_path, command, monkeypatch):
    monkeypatch.setenv("FDPROF_METRICS_FINAL_SCRAPE_MS", "0")
    host, port = bound_address([command, "--metrics-port", "0"], tmp_path)
    assert host == "127.0.0.1" and port > 0


def test_metrics_host_binds_where_it_says(tmp_path, monkeypatch):
    monkeypatch.setenv("FDPROF_METRICS_FINAL_SCRAPE_MS", "0")
    host, _ = bound_address(["run", "--metrics-port", "0", "--metrics-host", "0.0.0.0"], tmp_path)
    assert host == "0.0.0.0"


def test_the_default_is_not_reachable_from_another_interface(tmp_path, monkeypatch):
    """Nothing listens on the machine's other addresses (when it has one besides loopback)."""
    monkeypatch.setenv("FDPROF_METRICS_FINAL_SCRAPE_MS", "0")
    args = build_parser().parse_args(["run", "--metrics-port", "0", "--out", str(tmp_path)])
    (observer,) = observers_for(capture_plan(args).probe_config(tmp_path, "none"))
    observer.start(tmp_path, [])
    try:
        port = observer.prometheus.port
        try:
            other = socket.gethostbyname(socket.gethostname())
        except OSError:
            pytest.skip("no address besides loopback")
        if other.startswith("127."):
            pytest.skip("the host name resolves to loopback")
        with pytest.raises(OSError), socket.create_connection((other, port), timeout=5):
            pass
    finally:
        observer.stop()
