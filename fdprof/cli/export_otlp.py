"""``fdprof export-otlp TRACE``: replay a recorded trace to an OTLP/HTTP collector."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fdprof.cli import load_trace
from fdprof.trace.export import export


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export-otlp",
        help="send a recorded trace to an OpenTelemetry collector with its real timestamps",
        description="Replays every span (with its attributes, sync events and links) over "
        "OTLP/HTTP protobuf. Endpoint: --endpoint, else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "else OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318.",
    )
    p.add_argument("trace", type=Path, help="run directory or trace file")
    p.add_argument("--endpoint", default=None, help="collector base URL (adds /v1/traces)")
    p.add_argument("--join", type=Path, default=None, help="run directory to join (nsys traces)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    trace = load_trace(args, args.trace, args.join)
    done = export(trace, args.endpoint, args.timeout)
    if args.json:
        print(json.dumps({"endpoint": done.url, "requests": done.requests, "spans": done.spans}))
    else:
        print(f"sent {done.spans} spans in {done.requests} requests to {done.url}")
    return 0
