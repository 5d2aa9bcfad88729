"""``fdprof convert IN OUT``: any readable trace into native, Perfetto, OTLP JSON or a Parquet
store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fdprof.cli import load_trace
from fdprof.trace import WRITERS, save


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "convert",
        help="convert a trace: native run directory, Perfetto JSON, OTLP JSON, Parquet store",
        description="Reads any TRACE fdprof reads (picked by content) and writes it as --to; "
        "without --to, OUT's name decides: *.otlp.json or *.jsonl OTLP JSON, *.json or "
        "*.json.gz Perfetto, *.parquet a Parquet store (a directory every command reads, "
        "docs/trace.md), another directory native.",
    )
    p.add_argument("input", type=Path, help="run directory or trace file")
    p.add_argument("output", type=Path, help="file or directory to write")
    p.add_argument("--to", choices=sorted(WRITERS), default=None, help="output format")
    p.add_argument("--join", type=Path, default=None, help="run directory to join (nsys traces)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    trace = load_trace(args, args.input, args.join)
    to = save(trace, args.output, args.to)
    summary = {
        "output": str(args.output),
        "format": to,
        "spans": len(trace.spans),
        "syncs": len(trace.syncs),
        "accesses": len(trace.accesses),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"wrote {summary['spans']} spans, {summary['syncs']} syncs to {args.output} ({to})")
    return 0
