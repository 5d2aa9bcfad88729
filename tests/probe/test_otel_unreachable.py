"""``fdprof run --otlp-endpoint`` with nothing listening: the run finishes (bounded shutdown)
and says how many spans it dropped."""

from __future__ import annotations

import json
import socket

import pytest

from fdprof.probe.sdk.otel_export import STATS_FILE
from tests.cli import fdprof

pytestmark = pytest.mark.slow


def test_unreachable_endpoint_does_not_hang_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "2000")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    result = fdprof("run", "--requests", 24, "--kv-lock", "ipc", "--otlp-endpoint",
                    f"http://127.0.0.1:{port}", "--json", "--out", tmp_path / "run")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["generated_tokens"] > 0
    stats = json.loads((tmp_path / "run" / STATS_FILE).read_text())
    assert stats["spans_exported"] == 0
    assert stats["spans_dropped"] == stats["spans_built"] > 0
    n = stats["spans_dropped"]
    (line,) = [line for line in result.stderr.splitlines() if "OpenTelemetry" in line]
    assert f"dropped {n} of {n} spans" in line and "Transient error" not in result.stderr
