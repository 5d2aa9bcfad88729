"""Metrics derived from finished spans, exported two ways: OTLP (one MeterProvider per engine
process, carrying that process's resource) and a Prometheus scrape endpoint.

Names and labels come from :mod:`fdprof.metric_names`, shared with the dashboards.
Every series carries ``kv_lock``, ``dp_rank`` and ``role`` as labels (``COMMON_LABELS``).
Histogram observations carry the span they measured as an exemplar (``trace_id``,
``span_id``), so a latency panel opens the very trace. The exporter
(:mod:`fdprof.probe.sdk.otel_export`) creates every counter at zero when a process's records open,
so a dashboard shows 0 rather than "no data" for what has not happened (yet).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext

from fdprof import metric_names as M
from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.settings import OtelSettings

#: histogram buckets in seconds, shared by both exports so their quantiles agree
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_NS = 1e-9
#: execute_model/swap intervals kept per DP rank for the overlap counter
_OVERLAP_WINDOW = 512

#: (metric, value, labels); value None declares a histogram's series without observing
Observation = tuple[M.Metric, float | None, dict[str, str]]


def observations(span: ReadableSpan, labels: dict[str, str]) -> list[Observation]:
    """What one finished span adds to the metrics."""
    attrs = span.attributes or {}
    seconds = (span.end_time - span.start_time) * _NS
    out = _by_name(span, attrs, seconds, labels)
    mismatches = attrs.get(S.KV_MISMATCHES)
    if mismatches:  # an integrity check, whatever span ran it
        out.append((M.KV_MISMATCHES, float(len(mismatches)), labels))
    return out


def _by_name(
    span: ReadableSpan, attrs: Any, seconds: float, labels: dict[str, str]
) -> list[Observation]:
    if span.name == S.SWAP:
        direction = str(attrs.get(S.SWAP_DIRECTION, "unknown"))
        blocks = attrs.get(S.SWAP_BLOCKS)
        if blocks is None:
            blocks = len(attrs.get(S.KV_GPU_READ, ()) or attrs.get(S.KV_GPU_WRITE, ()))
        by_dir = {**labels, "direction": direction}
        return [
            (M.SWAP_DURATION, seconds, by_dir),
            (M.SWAPPED_BLOCKS, float(blocks), by_dir),
            (M.SWAP_TIME, seconds, labels),
        ]
    if span.name == S.EXECUTE_MODEL:
        out: list[Observation] = [(M.EXECUTE_MODEL_DURATION, seconds, labels)]
        if S.BATCH_SIZE in attrs:  # one token per sequence per step
            out.append((M.GENERATED_TOKENS, float(attrs[S.BATCH_SIZE]), labels))
        return out
    if span.name == S.LOCK_WAIT:
        holder = str(attrs.get(S.LOCK_HOLDER, labels.get("role", "unknown")))
        return [(M.LOCK_WAIT, seconds, {**labels, "holder": holder})]
    if span.name == S.STEP:
        return [(M.STEP_DURATION, seconds, labels)]
    if span.name == S.REQUEST:
        return _request_latencies(span, attrs, seconds, labels)
    return []


def _request_latencies(
    span: ReadableSpan, attrs: Any, seconds: float, labels: dict[str, str]
) -> list[Observation]:
    """End-to-end latency; time to first token and per output token where the span says when
    its first token came (``fd.first_token_ns``, on the same epoch clock as the span)."""
    out: list[Observation] = [(M.REQUEST_DURATION, seconds, labels)]
    first = attrs.get(S.FIRST_TOKEN_NS)
    if not isinstance(first, int) or not span.start_time <= first <= span.end_time:
        return out
    out.append((M.TIME_TO_FIRST_TOKEN, (first - span.start_time) * _NS, labels))
    decode = attrs.get(S.OUTPUT_TOKENS)
    if isinstance(decode, int) and decode > 1:
        out.append((M.TIME_PER_OUTPUT_TOKEN, (span.end_time - first) * _NS / (decode - 1), labels))
    return out


class Overlap:
    """Swap time overlapped with ``execute_model`` of the same DP rank. Each pair of intervals
    counts once, when the second of the two is seen (processes are tailed independently)."""

    def __init__(self) -> None:
        self._swaps: dict[str, deque] = {}
        self._execs: dict[str, deque] = {}

    def add(self, span: ReadableSpan, dp_rank: str) -> float:
        """Seconds of overlap this span adds (0 for other span names)."""
        if span.name not in (S.SWAP, S.EXECUTE_MODEL):
            return 0.0
        mine, other = (
            (self._swaps, self._execs) if span.name == S.SWAP else (self._execs, self._swaps)
        )
        t0, t1 = span.start_time, span.end_time
        overlap = sum(max(0, min(t1, b) - max(t0, a)) for a, b in other.get(dp_rank, ()))
        mine.setdefault(dp_rank, deque(maxlen=_OVERLAP_WINDOW)).append((t0, t1))
        return overlap * _NS


def _label_names(metric: M.Metric) -> tuple[str, ...]:
    """The labels ``metric``'s series carry, in both exports: the common ones and its own
    (an observation's other keys, such as ``run`` on a per-span metric, are left off)."""
    return (*M.COMMON_LABELS, *metric.labels)


def _views() -> list[View]:
    return [
        View(
            instrument_name=m.otel_name,
            aggregation=ExplicitBucketHistogramAggregation(list(BUCKETS)),
        )
        for m in M.ALL
        if m.kind == "histogram"
    ]


class OtelMetrics:
    """One MeterProvider (and resource) for one engine process, exporting over OTLP."""

    def __init__(
        self, resource: Resource, exporter: MetricExporter, settings: OtelSettings
    ) -> None:
        reader = PeriodicExportingMetricReader(
            exporter,
            export_interval_millis=settings.metric_interval_ms,
            export_timeout_millis=settings.metric_timeout_ms,
        )
        self.provider = MeterProvider(
            metric_readers=[reader], resource=resource, views=_views(), shutdown_on_exit=False
        )
        meter = self.provider.get_meter("fdprof.probe")
        self._instruments = {}
        for m in M.ALL:
            create = {
                "histogram": meter.create_histogram,
                "counter": meter.create_counter,
                "gauge": meter.create_gauge,
            }[m.kind]
            self._instruments[m.otel_name] = create(
                m.otel_name, unit=m.unit, description=m.description
            )

    def record(self, obs: Iterable[Observation], span: SpanContext | None = None) -> None:
        """Record ``obs``; with ``span``, its histograms get the span as exemplar (the SDK
        takes exemplars from the current span, so it is made current meanwhile)."""
        token = None
        if span is not None:
            ctx = otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(span))
            token = otel_context.attach(ctx)
        try:
            for metric, value, labels in obs:
                if value is None:  # a histogram declared: OTLP has no series without a value
                    continue
                inst = self._instruments[metric.otel_name]
                attributes = {name: labels.get(name, "") for name in _label_names(metric)}
                if metric.kind == "counter":
                    inst.add(value, attributes)
                elif metric.kind == "gauge":
                    inst.set(value, attributes)
                else:
                    inst.record(value, attributes)
        finally:
            if token is not None:
                otel_context.detach(token)

    def shutdown(self, timeout_s: float) -> None:
        """Final collection and export, bounded by ``timeout_s``."""
        self.provider.shutdown(timeout_millis=timeout_s * 1000)


class PromMetrics:
    """The same metrics on a Prometheus scrape endpoint (``--metrics-port``)."""

    def __init__(self, port: int, addr: str = "127.0.0.1") -> None:
        import prometheus_client as pc
        from prometheus_client.exposition import ThreadingWSGIServer

        self.registry = pc.CollectorRegistry(auto_describe=True)
        self._metrics = {}
        for m in M.ALL:
            labels = _label_names(m)
            if m.kind == "histogram":
                metric = pc.Histogram(
                    m.prom_name, m.description, labels, registry=self.registry, buckets=BUCKETS
                )
            elif m.kind == "gauge":
                metric = pc.Gauge(m.prom_name, m.description, labels, registry=self.registry)
            else:
                metric = pc.Counter(m.prom_name, m.description, labels, registry=self.registry)
            self._metrics[m.otel_name] = (metric, labels)
        self._exposition = pc.make_wsgi_app(self.registry)
        self._final_armed = False
        self._final_served = threading.Event()
        try:
            self._server = make_server(addr, port, self._app, ThreadingWSGIServer, _QuietHandler)
        except OSError as exc:
            raise FdprofError(
                f"cannot serve metrics on {addr} port {port}: {exc.strerror}"
            ) from None
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fdprof-metrics", daemon=True
        )
        self.port = self._server.server_address[1]

    def serve(self) -> None:
        """Answer scrapes (the port is bound from the start; a scrape before this waits in
        the listen queue, so the first one answered already sees the series recorded before)."""
        if not self._thread.is_alive():
            self._thread.start()

    def _app(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        """The exposition app; notes whether a scrape that began after
        :meth:`wait_for_scrape` armed (so it collected the final counts) has been written."""
        final = self._final_armed  # read before the registry is collected
        body = self._exposition(environ, start_response)
        return _OnClose(body, self._final_served.set if final else None)

    def record(self, obs: Iterable[Observation], span: SpanContext | None = None) -> None:
        exemplar = None
        if span is not None:
            exemplar = {"trace_id": f"{span.trace_id:032x}", "span_id": f"{span.span_id:016x}"}
        for metric, value, labels in obs:
            prom, names = self._metrics[metric.otel_name]
            child = prom.labels(*(labels.get(n, "") for n in names))
            if value is None:  # declared: its series exist, empty, until observed
                continue
            if metric.kind == "histogram":
                child.observe(value, exemplar)
            elif metric.kind == "gauge":
                child.set(value)
            else:
                child.inc(value)

    def wait_for_scrape(self, timeout_s: float) -> None:
        """Give the scraper up to ``timeout_s`` for one more scrape, begun after this call and
        written out in full, so the run's final counts (the last steps, the findings, spans
        dropped at shutdown) are seen before the endpoint goes: a short run would otherwise
        end between two scrapes unseen, or before the first (a run of a few seconds can end
        before a new target's first scrape; so the wait does not depend on one having come)."""
        if timeout_s > 0:
            self._final_armed = True
            self._final_served.wait(timeout_s)

    def shutdown(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


class _OnClose:
    """A WSGI response body that calls ``on_close`` once the server has written all of it
    (the server calls ``close()`` after the last chunk)."""

    def __init__(self, body: Iterable[bytes], on_close: Callable[[], None] | None) -> None:
        self._body = body
        self._on_close = on_close

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on stderr."""

    def log_message(self, format: str, *args: object) -> None:
        pass
