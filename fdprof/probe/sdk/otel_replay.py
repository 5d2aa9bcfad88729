"""``fdprof export-otlp``: a loaded trace's spans sent to a collector through the SDK's batch
processor and OTLP exporter, the pipeline the live export uses (:mod:`fdprof.probe.sdk.otel_sink`).

The spans come as the trace model's OpenTelemetry view (:class:`fdprof.trace.export.OtelView`,
built by the caller): the SDK needs nothing of the trace model but that shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from fdprof import settings as env
from fdprof.errors import FdprofError
from fdprof.formats.otel import SpanData

#: where the replay sends when neither ``--endpoint`` nor ``OTEL_EXPORTER_OTLP_*`` says: a local
#: collector
DEFAULT_ENDPOINT = "http://localhost:4318"


class SpanSource(Protocol):
    """A trace's spans, one resource per process (pid)."""

    #: pid -> the process's resource attributes
    attributes: dict[int, dict[str, Any]]
    #: spans left out because they never ended (a process was killed)
    skipped: int

    def spans(self) -> Iterator[tuple[int, SpanData]]: ...

    def __len__(self) -> int: ...


@dataclass(frozen=True)
class Exported:
    url: str
    #: spans offered, and delivered (the collector said so)
    spans: int
    delivered: int
    #: spans left out because they never ended (a process was killed)
    unended: int


def replay(
    source: SpanSource, endpoint: str | None = None, timeout: float | None = None
) -> Exported:
    """Send every span of ``source`` through the SDK's batch processor and OTLP exporter
    (retries and backoff are the SDK's); the first batch the exporter gives up on ends the
    replay, and the spans not delivered are one :class:`FdprofError` naming how many. The
    OpenTelemetry SDK is imported here: the command that offers the replay loads without the
    ``otel`` extra."""
    from fdprof.probe.sdk.otel_sink import SpanSink, readable, sdk_resource, span_exporter

    settings = env.otel(endpoint, default_endpoint=DEFAULT_ENDPOINT)
    traces = settings.traces
    if timeout is not None:
        traces = dataclasses.replace(traces, timeout_s=timeout)
    resources = {pid: sdk_resource(attrs, settings) for pid, attrs in source.attributes.items()}
    sink = SpanSink(span_exporter(traces), settings)
    try:
        for pid, span in source.spans():
            if sink.failed:
                break
            sink.emit(readable(span, resources[pid]), wait=True)
    finally:
        delivery = sink.close(flush=True)
    if delivery.delivered < len(source):
        raise FdprofError(
            f"{traces.endpoint}: {len(source) - delivery.delivered} of {len(source)} spans not "
            f"delivered ({delivery.reason})"
        )
    return Exported(traces.endpoint, len(source), delivery.delivered, source.skipped)
