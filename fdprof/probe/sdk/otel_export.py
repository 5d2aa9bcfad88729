"""The OpenTelemetry sink: an observer in the ``fdprof run`` supervisor that tails every engine
process's record file and exports spans (OTLP/HTTP protobuf) and metrics (OTLP and a
Prometheus scrape endpoint). The engine's hot path never touches OpenTelemetry, and a
process that crashes loses nothing it recorded.

Spans are built by :mod:`fdprof.probe.sdk.otel_spans` (the rules the replay follows too) and sent
through the SDK's batch processor and OTLP exporter (:mod:`fdprof.probe.sdk.otel_sink`); settings
come from :mod:`fdprof.settings` (``--otlp-endpoint`` over the ``OTEL_EXPORTER_OTLP_*``
variables; ``OTEL_SDK_DISABLED=true`` turns OTLP off; ``--metrics-port`` serves Prometheus).

Bounded: a full queue refuses spans rather than block the tailing; ``stop()`` gives the last
export at most ``OTEL_BSP_EXPORT_TIMEOUT`` ms. Every span not delivered is counted: on the
``fd.probe.dropped`` metric as it happens, in ``<run>/otel-export.json`` and, when there were
any, in one warning line with the exporter's last complaint.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import SpanContext

from fdprof import files, interrupts
from fdprof import metric_names as M
from fdprof import semconv as S
from fdprof import settings as env
from fdprof.formats import records as R
from fdprof.formats.otel import UNKNOWN, SpanData, process_resource
from fdprof.formats.tail import RecordTail
from fdprof.probe.config import ProbeConfig
from fdprof.probe.sdk.otel_metrics import OtelMetrics, Overlap, PromMetrics, observations
from fdprof.probe.sdk.otel_sink import (
    Delivery,
    ExportLog,
    SpanSink,
    metric_exporter,
    readable,
    sdk_resource,
    span_exporter,
)
from fdprof.probe.sdk.otel_spans import SpanBuilder
from fdprof.settings import OtelSettings

log = logging.getLogger(__name__)

#: written into the run directory at stop
STATS_FILE = "otel-export.json"
#: how long the tailing waits for every process's record header, to put all of them on one
#: clock as the reader does (processes that start later keep their own)
HEADER_WAIT_S = 5.0


#: the run's safety check at its end: run directory → count per ``finding``
#: (:class:`fdprof.metric_names.Finding`)
RunCheck = Callable[[Path], dict[str, int]]


class RunObserver(Protocol):
    def start(self, run_dir: Path, processes: list[dict]) -> None: ...
    def stop(self) -> None: ...


class _Process:
    """One tailed engine process: its file, span builder, metrics and labels."""

    def __init__(self, info: dict, tail: RecordTail) -> None:
        self.info = info
        self.tail = tail
        self.builder: SpanBuilder | None = None
        self.resource: Resource | None = None
        self.metrics: OtelMetrics | None = None
        self.labels: dict[str, str] = {}


class OtelExportObserver:
    """Tails record files during a run; exports spans and metrics. See the module docstring."""

    def __init__(
        self,
        probe_config: ProbeConfig,
        settings: OtelSettings,
        *,
        span_exporter: SpanExporter | None = None,
        metric_exporter_factory=None,
        prometheus_port: int | None = None,
        check_run: RunCheck | None = None,
        poll_s: float = 0.2,
    ) -> None:
        self._config = probe_config
        self._settings = settings
        self._span_exporter = span_exporter
        self._metric_exporter_factory = metric_exporter_factory
        self._prom_port = prometheus_port
        self._check_run = check_run
        self._poll_s = poll_s
        self._procs: list[_Process] = []
        self._offsets: dict[int, int] = {}
        self._run_dir: Path | None = None
        self._sink: SpanSink | None = None
        self.prometheus: PromMetrics | None = None
        self._overlap = Overlap()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drops_counted = 0
        self._drop_owner: _Process | None = None
        #: the metric exporters' complaints too stay off stderr while the run goes on
        self._log = ExportLog()
        self.stats: dict = {}

    # -- RunObserver --

    def start(self, run_dir: Path, processes: list[dict]) -> None:
        self._run_dir = Path(run_dir)
        if self._prom_port is not None:  # first: a port in use fails before anything started
            self.prometheus = PromMetrics(self._prom_port, self._config.metrics_host)
        self._log.install()
        if self._span_exporter is not None:
            self._sink = SpanSink(self._span_exporter, self._settings)
        for info in processes:
            record = Path(info.get("record") or "")
            if not record.is_absolute():
                record = Path(run_dir) / record
            self._procs.append(_Process(info, RecordTail(record)))
        engines = [p for p in self._procs if p.info.get("role") == S.ROLE_ENGINE]
        self._drop_owner = (engines or self._procs or [None])[0]
        if self.prometheus is not None:  # every series at 0 before the endpoint answers
            for proc in self._procs:
                if proc.info.get("role"):
                    self.prometheus.record(self._first_values(proc, self._labels(proc)))
            self.prometheus.serve()
        self._thread = threading.Thread(target=self._run, name="fdprof-otel-tail", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Read what is left, then flush within the shutdown budget; fills :attr:`stats`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._close_run()
        delivery = self._sink.close() if self._sink is not None else Delivery(0, 0, None)
        self._count_drops(delivery.dropped)
        budget_s = self._settings.metric_timeout_ms / 1000
        deadline = time.monotonic() + budget_s
        # providers flush in parallel so that a dead collector costs one budget, not one each
        flushers = [
            threading.Thread(target=p.metrics.shutdown, args=(budget_s,), daemon=True)
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
            self.prometheus.wait_for_scrape(self._settings.final_scrape_ms / 1000)
            self.prometheus.shutdown()
        self.stats = {
            "spans_built": self.stats.get("spans_built", 0),
            "spans_exported": delivery.delivered,
            "spans_dropped": delivery.dropped,
        }
        self._log.remove()
        if delivery.reason:
            self.stats["reason"] = delivery.reason
        if self._run_dir is not None:
            files.write_atomic(self._run_dir / STATS_FILE, json.dumps(self.stats) + "\n")
        if delivery.dropped:
            log.warning(
                "OpenTelemetry export dropped %d of %d spans (%s)",
                delivery.dropped,
                delivery.spans,
                delivery.reason,
            )

    def _close_run(self) -> None:
        """The run's own series, on its first engine process: the safety check's findings
        (every record is in by now; not on Ctrl-C or SIGTERM, which must end the command
        promptly) and the run marked as ended."""
        owner = self._drop_owner
        if owner is None or owner.builder is None:
            return
        obs = [(M.RUN_ACTIVE, 0.0, owner.labels)]
        check = self._check_run is not None and self._run_dir is not None
        if check and not interrupts.interrupted():
            try:
                counts = self._check_run(self._run_dir)
            except Exception as exc:  # the metrics must not fail the run they describe
                log.warning("the run's race check for its metrics failed: %s", exc)
            else:
                obs += [(M.HAZARDS, float(counts.get(finding, 0)), {**owner.labels,
                         "finding": finding}) for finding in M.Finding]  # fmt: skip
        self._record(owner, obs)

    # -- tailing --

    def _run(self) -> None:
        self._share_clock()
        while True:
            stopping = self._stop.wait(self._poll_s)
            for proc in self._procs:
                try:
                    self._drain(proc)
                except Exception:  # a bad file must not end the export of the others
                    log.exception("tailing %s failed", proc.tail.path)
            if self._sink is not None:
                self._count_drops(self._sink.failed)
            if stopping:
                return

    def _share_clock(self) -> None:
        """Once every process's header is there (or after :data:`HEADER_WAIT_S`), one clock
        offset per process by the reader's rule, so live and replayed spans share times."""
        deadline = time.monotonic() + HEADER_WAIT_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            if all(p.tail.read_header() is not None for p in self._procs):
                break
            self._stop.wait(0.02)
        # once more: a run that ends within one poll stops the wait with headers written unseen
        known = [(h.pid, h) for h in (p.tail.read_header() for p in self._procs) if h is not None]
        offsets = R.epoch_offsets([header for _, header in known])
        self._offsets = {pid: offset for (pid, _), offset in zip(known, offsets, strict=True)}

    def _count_drops(self, dropped: int) -> None:
        """Add spans not delivered since the last call to ``fd.probe.dropped``, on the series
        of the first engine process (once its records are open)."""
        owner = self._drop_owner
        if self._sink is None or owner is None or owner.builder is None:
            return
        new = dropped - self._drops_counted
        if new > 0:
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
        role = proc.info.get("role") or header.role
        attrs = process_resource(
            role,
            header.pid,
            int(proc.info.get("dp_rank", -1)),
            header.epoch_anchor_ns,
            self._config.resource,
            int(proc.info.get("tp_rank", header.tp_rank)),
        )
        resource = proc.resource = sdk_resource(attrs, self._settings)
        offset = self._offsets.get(header.pid, header.epoch_anchor_ns - header.mono_anchor_ns)
        proc.builder = SpanBuilder(attrs[S.SERVICE_INSTANCE_ID], header, offset)
        proc.labels = self._labels(proc, role)
        if self._metric_exporter_factory is not None:
            exporter = self._metric_exporter_factory()
            proc.metrics = OtelMetrics(resource, exporter, self._settings)
        self._record(proc, self._first_values(proc, proc.labels))

    def _labels(self, proc: _Process, role: str | None = None) -> dict[str, str]:
        """The labels of a process's series: from the launcher's account of it (known before
        its records open, so its series can exist from the first scrape), the role from its
        record header where that account has none."""
        return {
            "kv_lock": str(self._config.resource.get(S.KV_LOCK, UNKNOWN)),
            "dp_rank": str(int(proc.info.get("dp_rank", -1))),
            "role": role or proc.info["role"],
            "run": str(self._run_dir),
        }

    def _first_values(self, proc: _Process, labels: dict[str, str]) -> list:
        """Every counter at 0 for each label value known in advance, and each histogram's
        series declared (value None: no observation); the run's own series (marked active,
        its findings, spans dropped) on its first engine process only."""
        run_wide = (M.HAZARDS, M.DROPPED_RECORDS)
        obs = [
            zero
            for metric in M.ALL
            if metric.kind in ("counter", "histogram") and metric not in run_wide
            for zero in _zeros(metric, labels)
        ]
        if proc is self._drop_owner:
            obs.append((M.RUN_ACTIVE, 1.0, labels))
            if self._check_run is not None:
                obs += _zeros(M.HAZARDS, labels)
            obs += _zeros(M.DROPPED_RECORDS, labels)
        return obs

    def _emit(self, proc: _Process, data: SpanData) -> None:
        self.stats["spans_built"] = self.stats.get("spans_built", 0) + 1
        span = readable(data, proc.resource)
        if self._sink is not None:
            self._sink.emit(span)
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


def _zeros(metric: M.Metric, labels: dict[str, str]) -> list:
    """``metric`` at 0 (a counter) or declared (a histogram: None, no observation) for every
    combination of its labels' known values; nothing for a histogram with a label whose
    values are not known up front."""
    known = [name for name in metric.labels if name in M.KNOWN_VALUES]
    if metric.kind == "histogram" and len(known) < len(metric.labels):
        return []
    value = None if metric.kind == "histogram" else 0.0
    return [
        (metric, value, {**labels, **dict(zip(known, values, strict=True))})
        for values in itertools.product(*(M.KNOWN_VALUES[name] for name in known))
    ]


def observers_for(
    probe_config: ProbeConfig, check_run: RunCheck | None = None
) -> list[RunObserver]:
    """The observers ``fdprof run`` starts for ``--otlp-endpoint`` / ``OTEL_*`` and
    ``--metrics-port``; an empty list when neither is asked for. ``check_run``, if given, is
    the run's safety check, run once every record is in; its findings become ``fd.hazards``."""
    settings = env.otel(probe_config.otlp_endpoint)
    otlp = not settings.disabled and settings.traces.endpoint is not None
    if not otlp and probe_config.metrics_port is None:
        return []
    spans = metric_factory = None
    if otlp:
        spans = span_exporter(settings.traces)

        def metric_factory():
            return metric_exporter(settings.metrics)

    return [
        OtelExportObserver(
            probe_config,
            settings,
            span_exporter=spans,
            metric_exporter_factory=metric_factory,
            prometheus_port=probe_config.metrics_port,
            check_run=check_run,
        )
    ]
