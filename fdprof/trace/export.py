"""Replay a recorded trace to an OpenTelemetry collector over OTLP/HTTP (protobuf).

Spans keep their recorded start and end times, so a collector, Tempo or Jaeger shows the run as
it happened. The endpoint follows the OpenTelemetry conventions: a base URL gets ``/v1/traces``
appended; ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is used as is; ``OTEL_EXPORTER_OTLP_HEADERS``
(``k=v,k2=v2``) adds headers.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from dataclasses import dataclass

from fdprof.errors import FdprofError
from fdprof.trace import otlp
from fdprof.trace.model import Trace

DEFAULT_ENDPOINT = "http://localhost:4318"
TRACES_PATH = "/v1/traces"


def endpoint_url(endpoint: str | None = None) -> str:
    """The URL to POST traces to, from ``endpoint`` or the ``OTEL_*`` variables."""
    if endpoint is None:
        signal = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if signal:
            return signal
        endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_ENDPOINT
    endpoint = endpoint.rstrip("/")
    if not endpoint.startswith(("http://", "https://")):
        raise FdprofError(f"endpoint {endpoint!r} should be an http:// or https:// URL")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


def _headers() -> dict[str, str]:
    headers = {"Content-Type": "application/x-protobuf"}
    for item in os.environ.get("OTEL_EXPORTER_OTLP_HEADERS", "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            headers[urllib.request.unquote(key.strip())] = urllib.request.unquote(value.strip())
    return headers


@dataclass
class Exported:
    url: str
    requests: int
    spans: int


def export(trace: Trace, endpoint: str | None = None, timeout: float = 10.0) -> Exported:
    """POST every span of ``trace``; one clear :class:`FdprofError` if the collector refuses."""
    url = endpoint_url(endpoint)
    headers = _headers()
    sent = spans = 0
    for request in otlp.requests(trace):
        count = sum(len(ss["spans"]) for rs in request["resourceSpans"] for ss in rs["scopeSpans"])
        if not count:
            continue
        body = otlp.to_protobuf(request)
        post = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(post, timeout=timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise FdprofError(f"{url}: collector answered HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise FdprofError(f"{url}: cannot reach the collector ({reason})") from None
        sent += 1
        spans += count
    return Exported(url, sent, spans)
