"""Spans out to an OTLP/HTTP collector through the SDK's own pipeline, counted: the live export
and the replay both send through a :class:`SpanSink`.

The SDK does the work the specification asks for: ``BatchSpanProcessor`` batches spans in a
bounded queue on its own thread; ``OTLPSpanExporter`` encodes them as protobuf, retries 429,
502, 503 and 504 with exponential backoff (or after the ``Retry-After`` the collector gave),
and gives up at its timeout. What the SDK does not do, the sink adds:

- every span that was not delivered is counted, whatever the reason (the queue was full, the
  collector refused, the batch was still in flight at shutdown): ``total - delivered``;
- a producer that must not lose spans (the replay) waits for room in the queue instead of
  overflowing it; one that must never wait (the live export) has its span refused and counted
  when the queue is full;
- the exporters' log lines are kept, not printed; the last one is the reason the report gives,
  in one line, for the spans not delivered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from fdprof import semconv as S
from fdprof.formats.otel import DEFAULT_SERVICE, SpanData
from fdprof.settings import OtelSettings, OtlpSignal

log = logging.getLogger(__name__)
#: the OTLP exporters' loggers (and the SDK's batch processor), whose lines the sink keeps
EXPORTER_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk._shared_internal")


SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_KINDS = {
    None: SpanKind.INTERNAL,
    "server": SpanKind.SERVER,
    "client": SpanKind.CLIENT,
    "producer": SpanKind.PRODUCER,
    "consumer": SpanKind.CONSUMER,
}
_STATUS = {"OK": StatusCode.OK, "ERROR": StatusCode.ERROR}


class ProcessResource(Resource):
    """A resource hashed once: the OTLP encoder hashes a span's resource for every span it
    encodes, and the SDK's hash serialises all the attributes to JSON each time."""

    def __init__(self, attributes: Mapping[str, Any]) -> None:
        super().__init__(dict(attributes))
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return super().__eq__(other)


def sdk_resource(attrs: Mapping[str, Any], settings: OtelSettings) -> ProcessResource:
    """The exported resource: ``attrs`` over ``OTEL_RESOURCE_ATTRIBUTES``, and
    ``OTEL_SERVICE_NAME`` in place of fdprof's default service name (a foreign trace keeps its
    own)."""
    merged = {**settings.resource, **attrs}
    if settings.service_name and merged.get(S.SERVICE_NAME) == DEFAULT_SERVICE:
        merged[S.SERVICE_NAME] = settings.service_name
    return ProcessResource(merged)


_scopes: dict[tuple[str, str | None], InstrumentationScope] = {}


def readable(span: SpanData, resource: Resource) -> ReadableSpan:
    """The SDK's span of ``span``."""
    scope = _scopes.get(span.scope)
    if scope is None:
        scope = _scopes[span.scope] = InstrumentationScope(*span.scope)
    parent = None
    if span.parent_id:
        parent = SpanContext(span.trace_id, span.parent_id, span.parent_remote, SAMPLED)
    extra = {}
    if span.status is not None:
        extra["status"] = Status(_STATUS[span.status[0]], span.status[1])
    return ReadableSpan(
        span.name,
        SpanContext(span.trace_id, span.span_id, False, SAMPLED),
        parent=parent,
        resource=resource,
        attributes=span.attributes,
        events=[Event(e.name, e.attributes, e.time) for e in span.events],
        links=[Link(SpanContext(t, s, True, SAMPLED)) for t, s in span.links],
        kind=_KINDS[span.kind],
        start_time=span.start,
        end_time=span.end,
        instrumentation_scope=scope,
        **extra,
    )


def _options(signal: OtlpSignal) -> dict:
    """Every OTLP/HTTP exporter setting, passed explicitly (:mod:`fdprof.settings` read them)."""
    from opentelemetry.exporter.otlp.proto.http import Compression

    return {
        "endpoint": signal.endpoint,
        "certificate_file": signal.certificate,
        "client_key_file": signal.client_key,
        "client_certificate_file": signal.client_certificate,
        "headers": signal.headers,
        "timeout": signal.timeout_s,
        "compression": Compression(signal.compression),
    }


def span_exporter(signal: OtlpSignal) -> SpanExporter:
    """The SDK's OTLP/HTTP span exporter, encoding with :mod:`fdprof.probe.sdk.otlp_wire`."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from fdprof.probe.sdk import otlp_wire

    class Exporter(OTLPSpanExporter):
        """``OTLPSpanExporter`` as it is (endpoint, headers, TLS, compression, timeout, the
        retries with backoff and ``Retry-After``), but for the encoding of a batch: the same
        message, written by :func:`fdprof.probe.sdk.otlp_wire.encode` in a third of the time. The
        SDK's HTTP client does the sending (``_client``: tests pin what it does)."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            if self._shutdown:
                return SpanExportResult.FAILURE
            result = self._client.export(otlp_wire.encode(spans))
            return SpanExportResult.SUCCESS if result.success else SpanExportResult.FAILURE

    return Exporter(**_options(signal))


def metric_exporter(signal: OtlpSignal):
    """The SDK's OTLP/HTTP metric exporter."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(**_options(signal))


class ExportLog(logging.Handler):
    """While installed, the exporters' log lines stop here; :attr:`last` is the latest."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None
        self._saved: list[tuple[logging.Logger, bool]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage()

    def install(self) -> None:
        for name in EXPORTER_LOGGERS:
            logger = logging.getLogger(name)
            self._saved.append((logger, logger.propagate))
            logger.addHandler(self)
            logger.propagate = False

    def remove(self) -> None:
        for logger, propagate in self._saved:
            logger.removeHandler(self)
            logger.propagate = propagate
        self._saved.clear()


class _Counted(SpanExporter):
    """The wrapped exporter, counting what it delivered and what it gave up on."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self.cond = threading.Condition()
        self.delivered = 0
        self.failed = 0
        self._shut = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            ok = self._inner.export(spans) == SpanExportResult.SUCCESS
        except Exception:  # instrumentation never breaks the run: counted, reported
            log.exception("OTLP span export raised")
            ok = False
        with self.cond:
            if ok:
                self.delivered += len(spans)
            else:
                self.failed += len(spans)
            self.cond.notify_all()
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        """Once (the processor calls it again after the sink did): ends a retry's backoff."""
        with self.cond:
            if self._shut:
                return
            self._shut = True
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


@dataclass(frozen=True)
class Delivery:
    """What became of the spans given to a sink."""

    spans: int
    delivered: int
    #: the exporter's last complaint, when spans were not delivered
    reason: str | None

    @property
    def dropped(self) -> int:
        return self.spans - self.delivered


class SpanSink:
    """``BatchSpanProcessor`` + a counted exporter, sized by the ``OTEL_BSP_*`` settings."""

    def __init__(self, exporter: SpanExporter, settings: OtelSettings) -> None:
        self._counted = _Counted(exporter)
        self._max_queue = settings.max_queue_size
        self._budget_s = settings.export_timeout_ms / 1000
        self._log = ExportLog()
        self._log.install()
        self._processor = BatchSpanProcessor(
            self._counted,
            max_queue_size=settings.max_queue_size,
            schedule_delay_millis=settings.schedule_delay_ms,
            max_export_batch_size=settings.max_export_batch_size,
            export_timeout_millis=settings.export_timeout_ms,
        )
        self.given = 0  # spans handed to the processor
        self.refused = 0  # spans refused because its queue was full
        self._closed = False

    def _in_processor(self) -> int:
        """Spans queued or in an export: never more than the queue holds, so the processor
        itself never drops one uncounted."""
        return self.given - self._counted.delivered - self._counted.failed

    def emit(self, span: ReadableSpan, wait: bool = False) -> None:
        """Queue ``span``; when the queue is full, wait for room (``wait``) or refuse it."""
        c = self._counted
        with c.cond:
            if wait:
                c.cond.wait_for(lambda: self._in_processor() < self._max_queue)
            elif self._in_processor() >= self._max_queue:
                self.refused += 1
                return
            self.given += 1
        self._processor.on_end(span)

    @property
    def failed(self) -> int:
        """Spans not delivered so far (refused, or given up on by the exporter)."""
        return self.refused + self._counted.failed

    def close(self, flush: bool = False) -> Delivery:
        """End the export: ``flush`` sends all that is queued however long it takes (the
        replay; the exporter's own timeout bounds each batch), else within the
        ``OTEL_BSP_EXPORT_TIMEOUT`` budget, after which a retry still waiting is cut short and
        what was not sent is counted as dropped."""
        if not self._closed:
            self._closed = True
            if flush:
                self._processor.force_flush()
            done = threading.Thread(target=self._processor.shutdown, daemon=True)
            done.start()
            done.join(self._budget_s)
            if done.is_alive():
                self._counted.shutdown()
                done.join(1.0)
            self._log.remove()
        return self.delivery()

    def delivery(self) -> Delivery:
        c = self._counted
        with c.cond:
            spans, delivered = self.given + self.refused, c.delivered
        reason = None
        if delivered < spans:
            reason = self._log.last or ("the queue was full" if self.refused else "shut down")
        return Delivery(spans, delivered, reason)
