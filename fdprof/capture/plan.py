"""What to record and export beside a run: the probe's sinks, exporters and samplers.

One plan serves ``fdprof run`` (one run directory) and ``fdprof ab`` (many): it makes each run's
probe configuration, the observers the supervisor runs beside the engine, and the environment
the engine's processes need.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fdprof import semconv as S
from fdprof import settings
from fdprof.probe import ProbeConfig


@dataclass(frozen=True)
class CapturePlan:
    """The capture options; defaults: the native recorder only (plus ``OTEL_*`` if set)."""

    otlp_endpoint: str | None = None
    metrics_port: int | None = None
    nvtx: bool = False
    py_spy: bool = False
    workload: str = ""
    #: running under Nsight Systems (``fdprof run --nsys``): NVTX on, nsys is the NVTX tool
    nsys: bool = False
    #: the address ``--metrics-port`` binds
    metrics_host: str = "127.0.0.1"
    #: ``--parquet DIR``: roll the records into a Parquet store as the run goes
    parquet: Path | None = None
    #: seconds between rolls (``--roll-s``)
    roll_s: float = 10.0

    def probe_config(self, run_dir: Path, kv_lock: str) -> ProbeConfig:
        return ProbeConfig(
            run_dir=str(run_dir),
            nvtx=self.nvtx or self.nsys,
            otlp_endpoint=self.otlp_endpoint,
            metrics_port=self.metrics_port,
            metrics_host=self.metrics_host,
            resource={S.KV_LOCK: kv_lock, S.WORKLOAD: self.workload},
        )

    def observers_and_env(self, probe_config: ProbeConfig) -> tuple[list, dict[str, str]]:
        """Observers the supervisor runs beside the engine, and env vars for its children."""
        from fdprof.capture.nvtx import injection_env
        from fdprof.capture.pyspy import PySpyObserver

        run_dir = Path(probe_config.run_dir)
        observers = _otel_observers(probe_config)
        if self.py_spy:
            observers.append(PySpyObserver(run_dir))
        if self.parquet is not None:
            from fdprof.trace.roll import RollObserver

            observers.append(RollObserver(self.parquet, self.roll_s))
        return observers, (injection_env(run_dir) if self.nvtx else {})

    def finish(self, run_dir: Path) -> None:
        if self.parquet is not None:  # the run's results, written after the observers stopped
            from fdprof.trace.roll import refresh_meta

            refresh_meta(self.parquet, run_dir)
        if self.nvtx:
            from fdprof.capture.nvtx import trim

            trim(run_dir)


def _otel_observers(probe_config: ProbeConfig) -> list:
    """The OpenTelemetry observers, from the ``otel`` extra: a run that asks for none (no
    endpoint, no metrics port, no ``OTEL_EXPORTER_OTLP_*``) runs without the extra installed."""
    try:
        from fdprof.probe.sdk.otel_export import observers_for
    except ModuleNotFoundError:
        asked = probe_config.otlp_endpoint or probe_config.metrics_port is not None
        if asked or settings.otlp_asked():
            raise
        return []
    from fdprof.capture.safety import hazard_counts

    return list(observers_for(probe_config, hazard_counts))
