"""The OpenTelemetry sink: an observer in the ``fdprof run`` supervisor that tails every engine
process's record file and exports spans (OTLP/HTTP protobuf) and metrics (OTLP and a
Prometheus scrape endpoint). The engine's hot path never touches OpenTelemetry, and a
process that crashes loses nothing it recorded.

Settings: ``--otlp-endpoint`` (``ProbeConfig.otlp_endpoint``, a base URL such as
``http://localhost:4318``) wins over the standard ``OTEL_EXPORTER_OTLP_*`` variables, which
the OTLP exporters read themselves (endpoint, headers, timeout, compression).
``OTEL_SDK_DISABLED=true`` turns the OTLP export off; ``--metrics-port`` serves Prometheus.

Bounded: spans wait in a bounded queue for one export thread; when the collector is down or
slow the queue fills and further spans are dropped and counted, never waited for; ``stop()``
gives the export at most ``OTEL_BSP_EXPORT_TIMEOUT`` ms (default 5000) in all. The counts
(spans built, exported, dropped) go to ``<run>/otel-export.json`` and, when spans were
dropped, a warning on stderr.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Protocol

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanContext

from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.probe import metric_names as M
from fdprof.probe.config import ProbeConfig
from fdprof.probe.otel_metrics import OtelMetrics, Overlap, PromMetrics, observations
from fdprof.probe.otel_spans import SpanBuilder, resource_for
from fdprof.probe.tail import RecordTail

log = logging.getLogger(__name__)

ENV_DISABLED = "OTEL_SDK_DISABLED"
ENV_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
ENV_QUEUE = "OTEL_BSP_MAX_QUEUE_SIZE"
ENV_BATCH = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
ENV_SHUTDOWN = "OTEL_BSP_EXPORT_TIMEOUT"
ENV_METRIC_INTERVAL = "OTEL_METRIC_EXPORT_INTERVAL"
#: ms the Prometheus endpoint waits at the end for an active scraper to collect final counts
ENV_SCRAPE_WAIT = "FDPROF_METRICS_FINAL_SCRAPE_MS"
#: written into the run directory at stop
STATS_FILE = "otel-export.json"


def _env_int(name: str, default: int) -> int:
    """An integer setting from the environment; a bad value is a configuration error."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise FdprofError(f"{name}={raw!r} is not an integer") from None


class _FirstOfEach(logging.Filter):
    """Lets through the first record of each message template: a collector that is down
    makes the OTLP exporters log on every retry of every batch."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, object]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


class _QuietExporterLogs:
    """While installed, the OTLP exporters' log lines reach stderr once per kind."""

    LOGGER = "opentelemetry.exporter"

    def __init__(self) -> None:
        self._logger = logging.getLogger(self.LOGGER)
        self._handler = logging.StreamHandler()
        self._handler.addFilter(_FirstOfEach())
        self._propagate = self._logger.propagate

    def install(self) -> None:
        self._logger.addHandler(self._handler)
        self._logger.propagate = False

    def remove(self) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.propagate = self._propagate


class RunObserver(Protocol):
    def start(self, run_dir: Path, processes: list[dict]) -> None: ...
    def stop(self) -> None: ...


class SpanQueue:
    """Bounded queue + one export thread. Never blocks the producer: a full queue drops."""

    def __init__(self, exporter: SpanExporter, max_queue: int, batch: int) -> None:
        self._exporter = exporter
        self._queue: deque[ReadableSpan] = deque()
        self._max = max_queue
        self._batch = batch
        self._cond = threading.Condition()
        self._closing = False
        self.exported = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="fdprof-otlp-export", daemon=True)
        self._thread.start()

    def put(self, span: ReadableSpan) -> None:
        with self._cond:
            if len(self._queue) >= self._max:
                self.dropped += 1
                return
            self._queue.append(span)
            if len(self._queue) >= self._batch:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._closing:
                    self._cond.wait(0.5)
                if not self._queue and self._closing:
                    return
                n = min(self._batch, len(self._queue))
                batch = [self._queue.popleft() for _ in range(n)]
            if not batch:
                continue
            try:
                ok = self._exporter.export(batch) == SpanExportResult.SUCCESS
            except Exception:  # instrumentation never breaks the run: count, log, go on
                log.exception("OTLP span export raised")
                ok = False
            with self._cond:
                if ok:
                    self.exported += len(batch)
                else:
                    self.dropped += len(batch)

    def close(self, timeout_s: float) -> None:
        """Flush what fits in ``timeout_s``; whatever is left is dropped and counted."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout_s)
        self._exporter.shutdown()  # interrupts a retry back-off still in progress
        self._thread.join(1.0)
        with self._cond:
            self.dropped += len(self._queue)
            self._queue.clear()


class _Process:
    """One tailed engine process: its file, span builder, metrics and labels."""

    def __init__(self, info: dict, tail: RecordTail) -> None:
        self.info = info
        self.tail = tail
        self.builder: SpanBuilder | None = None
        self.metrics: OtelMetrics | None = None
        self.labels: dict[str, str] = {}


class OtelExportObserver:
    """Tails record files during a run; exports spans and metrics. See the module docstring."""

    def __init__(
        self,
        probe_config: ProbeConfig,
        *,
        span_exporter: SpanExporter | None = None,
        metric_exporter_factory=None,
        prometheus_port: int | None = None,
        poll_s: float = 0.2,
    ) -> None:
        self._config = probe_config
        self._span_exporter = span_exporter
        self._metric_exporter_factory = metric_exporter_factory
        self._prom_port = prometheus_port
        self._poll_s = poll_s
        self._queue_size = _env_int(ENV_QUEUE, 8192)
        self._batch = _env_int(ENV_BATCH, 512)
        self._shutdown_s = _env_int(ENV_SHUTDOWN, 5000) / 1000
        self._metric_interval_s = _env_int(ENV_METRIC_INTERVAL, 5000) / 1000
        self._procs: list[_Process] = []
        self._run_dir: Path | None = None
        self._queue: SpanQueue | None = None
        self.prometheus: PromMetrics | None = None
        self._overlap = Overlap()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drops_counted = 0
        self._drop_owner: _Process | None = None
        self._quiet = _QuietExporterLogs()
        self._scrape_wait_s = _env_int(ENV_SCRAPE_WAIT, 3000) / 1000
        self.stats: dict[str, int] = {}

    # -- RunObserver --

    def start(self, run_dir: Path, processes: list[dict]) -> None:
        self._run_dir = Path(run_dir)
        if self._prom_port is not None:  # first: a port in use fails before anything started
            self.prometheus = PromMetrics(self._prom_port)
        self._quiet.install()
        if self._span_exporter is not None:
            self._queue = SpanQueue(self._span_exporter, self._queue_size, self._batch)
        for info in processes:
            record = Path(info.get("record") or "")
            if not record.is_absolute():
                record = Path(run_dir) / record
            self._procs.append(_Process(info, RecordTail(record)))
        engines = [p for p in self._procs if p.info.get("role") == "engine"]
        self._drop_owner = (engines or self._procs or [None])[0]
        self._thread = threading.Thread(target=self._run, name="fdprof-otel-tail", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Read what is left, then flush within the shutdown budget; fills :attr:`stats`."""
        deadline = time.monotonic() + self._shutdown_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._queue is not None:
            self._queue.close(max(0.1, deadline - time.monotonic()))
        dropped = self._queue.dropped if self._queue is not None else 0
        self._count_drops()
        # providers flush in parallel so that a dead collector costs one budget, not one each
        flushers = [
            threading.Thread(target=p.metrics.shutdown, args=(self._shutdown_s,), daemon=True)
            for p in self._procs
            if p.metrics is not None
        ]
        for t in flushers:
            t.start()
        for t in flushers:
            t.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            proc.tail.close()
        if self.prometheus is not None:
            self.prometheus.wait_for_scrape(self._scrape_wait_s)
            self.prometheus.shutdown()
        self.stats = {
            "spans_built": self.stats.get("spans_built", 0),
            "spans_exported": self._queue.exported if self._queue is not None else 0,
            "spans_dropped": dropped,
        }
        self._quiet.remove()
        if self._run_dir is not None:
            (self._run_dir / STATS_FILE).write_text(json.dumps(self.stats) + "\n")
        if dropped:
            log.warning("OpenTelemetry export dropped %d spans (collector down or slow)", dropped)

    # -- tailing --

    def _run(self) -> None:
        while True:
            stopping = self._stop.is_set()
            for proc in self._procs:
                try:
                    self._drain(proc)
                except Exception:  # a bad file must not end the export of the others
                    log.exception("tailing %s failed", proc.tail.path)
            self._count_drops()
            if stopping:
                return
            self._stop.wait(self._poll_s)

    def _count_drops(self) -> None:
        """Add spans the exporter dropped since the last call to ``fd.probe.dropped``, on the
        series of the first engine process (once its records are open)."""
        owner = self._drop_owner
        if self._queue is None or owner is None or owner.builder is None:
            return
        new = self._queue.dropped - self._drops_counted
        if new:
            self._drops_counted += new
            self._record(owner, [(M.DROPPED_RECORDS, float(new), {**owner.labels, "sink": "otlp"})])

    def _drain(self, proc: _Process) -> None:
        for kind, flags, tid, fields in proc.tail.poll():
            if proc.builder is None:
                self._open(proc)
            span = proc.builder.feed(kind, flags, tid, fields)
            if span is not None:
                self._emit(proc, span)

    def _open(self, proc: _Process) -> None:
        header = proc.tail.header
        extra = {k: str(v) for k, v in self._config.resource.items()}
        resource = resource_for(proc.info, header, extra)
        proc.builder = SpanBuilder(header, resource)
        attrs = resource.attributes
        proc.labels = {
            "kv_lock": str(attrs.get(S.KV_LOCK, "unknown")),
            "dp_rank": str(attrs.get(S.DP_RANK, "0")),
            "role": str(attrs.get(S.ROLE, "")),
        }
        if self._metric_exporter_factory is not None:
            exporter = self._metric_exporter_factory()
            proc.metrics = OtelMetrics(resource, exporter, self._metric_interval_s)
        zeros = [(M.SWAP_OVERLAP, 0.0, proc.labels)]
        if self._queue is not None and proc is self._drop_owner:
            zeros.append((M.DROPPED_RECORDS, 0.0, {**proc.labels, "sink": "otlp"}))
        self._record(proc, zeros)

    def _emit(self, proc: _Process, span: ReadableSpan) -> None:
        self.stats["spans_built"] = self.stats.get("spans_built", 0) + 1
        if self._queue is not None:
            self._queue.put(span)
        obs = observations(span, proc.labels)
        overlap = self._overlap.add(span, proc.labels["dp_rank"])
        if overlap:
            obs.append((M.SWAP_OVERLAP, overlap, proc.labels))
        self._record(proc, obs, span.context)

    def _record(self, proc: _Process, obs: list, span: SpanContext | None = None) -> None:
        if proc.metrics is not None:
            proc.metrics.record(obs, span)
        if self.prometheus is not None:
            self.prometheus.record(obs, span)


def _signal_endpoint(base: str | None, env_specific: str, path: str) -> str | None:
    """The URL for one signal: ``--otlp-endpoint`` + path, else the exporter's own env."""
    if base:
        return base.rstrip("/") + path
    if os.environ.get(env_specific) or os.environ.get(ENV_ENDPOINT):
        return None  # the exporter reads OTEL_EXPORTER_OTLP_* itself
    return ""


def observers_for(probe_config: ProbeConfig) -> list[RunObserver]:
    """The observers ``fdprof run`` starts for ``--otlp-endpoint`` / ``OTEL_*`` and
    ``--metrics-port``; an empty list when neither is asked for."""
    disabled = os.environ.get(ENV_DISABLED, "").strip().lower() == "true"
    traces = _signal_endpoint(probe_config.otlp_endpoint, ENV_TRACES_ENDPOINT, "/v1/traces")
    metrics = _signal_endpoint(probe_config.otlp_endpoint, ENV_METRICS_ENDPOINT, "/v1/metrics")
    otlp = not disabled and traces != ""
    if not otlp and probe_config.metrics_port is None:
        return []
    span_exporter = metric_factory = None
    if otlp:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter(endpoint=traces)

        def metric_factory():
            return OTLPMetricExporter(endpoint=metrics)

    return [
        OtelExportObserver(
            probe_config,
            span_exporter=span_exporter,
            metric_exporter_factory=metric_factory,
            prometheus_port=probe_config.metrics_port,
        )
    ]
