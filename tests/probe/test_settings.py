"""The settings fdprof reads from the environment (fdprof/settings.py): precedence as the
OpenTelemetry specification gives it, and a bad value as one line naming the variable."""

from __future__ import annotations

import pytest

from fdprof import probe
from fdprof import settings as env
from fdprof.errors import FdprofError
from fdprof.probe.sdk.otel_export import observers_for


def test_endpoints_follow_the_specification():
    none = env.otel(env={})
    assert none.traces.endpoint is None and none.metrics.endpoint is None
    assert env.otel(default_endpoint="http://localhost:4318", env={}).traces.endpoint == (
        "http://localhost:4318/v1/traces"
    )
    shared = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    both = env.otel(env=shared)
    assert both.traces.endpoint == "http://collector:4318/v1/traces"
    assert both.metrics.endpoint == "http://collector:4318/v1/metrics"
    own = {**shared, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:1/custom"}
    assert env.otel(env=own).traces.endpoint == "http://x:1/custom"  # used as it is
    assert env.otel(env=own).metrics.endpoint == "http://collector:4318/v1/metrics"
    given = env.otel("http://y:2", env=own)  # a command-line base URL wins
    assert (given.traces.endpoint, given.metrics.endpoint) == (
        "http://y:2/v1/traces",
        "http://y:2/v1/metrics",
    )
    assert env.otel("http://y:2/v1/traces", env={}).traces.endpoint == "http://y:2/v1/traces"


def test_per_signal_options_over_shared_ones():
    values = {
        "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b,x=1",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "api-key=traces",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "3",
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "7.5",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "GZIP",
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": "/etc/ca.pem",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=lab,team=kv",
        "OTEL_SERVICE_NAME": "fd-bench",
        "OTEL_BSP_MAX_QUEUE_SIZE": "100",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10",
    }
    s = env.otel(env=values)
    assert s.traces.headers == {"api-key": "traces"}
    assert s.metrics.headers == {"api-key": "a b", "x": "1"}
    assert (s.traces.timeout_s, s.metrics.timeout_s) == (3.0, 7.5)
    assert s.traces.compression == s.metrics.compression == "gzip"
    assert (s.traces.certificate, s.metrics.certificate) == ("/etc/ca.pem", None)
    assert s.resource == {"deployment.environment": "lab", "team": "kv"}
    assert s.service_name == "fd-bench"
    assert (s.max_queue_size, s.max_export_batch_size) == (100, 10)
    assert (s.export_timeout_ms, s.schedule_delay_ms, s.final_scrape_ms) == (5000, 5000, 3000)


@pytest.mark.parametrize(
    "values, named",
    [
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "lots"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
        ({"OTEL_BSP_EXPORT_TIMEOUT": "-1"}, "OTEL_BSP_EXPORT_TIMEOUT"),
        ({"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "9000"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
        ({"OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, "COMPRESSION"),
        ({"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(values, named):
    with pytest.raises(FdprofError, match=named) as info:
        env.otel(env=values)
    assert "\n" not in str(info.value)


def test_fdprof_settings():
    assert env.run_dir({}) is None and env.run_dir({"FDPROF_RUN_DIR": " /r "}) == "/r"
    assert env.python_recorder({"FDPROF_RECORDER": "python"})
    assert not env.python_recorder({"FDPROF_RECORDER": "c"}) and not env.python_recorder({})
    assert env.otlp_asked({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not env.otlp_asked({"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_HEADERS": " "})
    assert env.python_kernels({"FDPROF_KERNELS": "python"}) and not env.python_kernels({})
    assert env.dask_scheduler({"DASK_SCHEDULER_ADDRESS": " tcp://s:8786 "}) == "tcp://s:8786"
    assert env.dask_scheduler({"DASK_SCHEDULER_ADDRESS": " "}) is None


def test_observers_from_the_environment(monkeypatch):
    config = probe.ProbeConfig(run_dir="x")
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    assert observers_for(config) == []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    assert len(observers_for(config)) == 1
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert observers_for(config) == []
