"""``fdprof export-otlp TRACE``: replay a recorded trace to an OTLP/HTTP collector."""

from __future__ import annotations

import argparse
from pathlib import Path

from fdprof.cli import load_trace
from fdprof.contracts import dumps, stamped, warnings_json
from fdprof.probe.sdk.otel_replay import DEFAULT_ENDPOINT, replay
from fdprof.trace.export import OtelView


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export-otlp",
        help="send a recorded trace to an OpenTelemetry collector with its real timestamps",
        description="Replays every span (with its attributes, sync events and links) over "
        "OTLP/HTTP protobuf, as `fdprof run --otlp-endpoint` would have sent it live: the same "
        "span and trace ids, parents and resources; a trace read from OTLP keeps its own "
        "service names, span kinds and scopes. Batches go through the OpenTelemetry SDK, "
        "which retries 429/502/503/504 with backoff (honouring Retry-After). Endpoint: "
        "--endpoint, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT, "
        f"else {DEFAULT_ENDPOINT}; OTEL_EXPORTER_OTLP_HEADERS, _COMPRESSION, _CERTIFICATE and "
        "OTEL_BSP_* apply (docs/probe.md). Spans that never ended (a killed process) are not "
        "sent. Exit 0: every span delivered; 2: a bad trace or setting, or spans the collector "
        "did not take (one line says how many and why).",
    )
    p.add_argument("trace", type=Path, help="run directory or trace file")
    p.add_argument(
        "--endpoint", default=None, help="collector base URL (adds /v1/traces); default: OTEL_*"
    )
    p.add_argument("--join", type=Path, default=None, help="run directory to join (nsys traces)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds one batch may take, retries included (default: OTEL_EXPORTER_OTLP_TIMEOUT, "
        "else 10)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    trace = load_trace(args, args.trace, args.join)
    done = replay(OtelView(trace), args.endpoint, args.timeout)
    if args.json:
        print(dumps(stamped("export-otlp", {
            "endpoint": done.url, "spans": done.delivered, "unended": done.unended,
            "warnings": warnings_json([(None, trace.warnings)])})))  # fmt: skip
    else:
        unended = f" ({done.unended} that never ended left out)" if done.unended else ""
        print(f"sent {done.delivered} spans to {done.url}{unended}")
    return 0
