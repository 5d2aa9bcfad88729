"""``fdprof convert IN OUT``: any readable trace into native, Perfetto, OTLP JSON or a Parquet
store."""

from __future__ import annotations

import argparse
from pathlib import Path

from fdprof.cli import add_force_argument, claim_output, load_trace
from fdprof.contracts import dumps, schema, warnings_json
from fdprof.trace import WRITERS, output_format, save


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
    add_force_argument(p, "a directory OUT (native)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    trace = load_trace(args, args.input, args.join)
    if (args.to or output_format(args.output)) == "native" and args.output.is_dir():
        claim_output(args.output, args.force)
    to = save(trace, args.output, args.to)
    summary = {
        "schema": schema("convert"),
        "output": str(args.output),
        "format": to,
        "spans": len(trace.spans),
        "syncs": len(trace.syncs),
        "accesses": len(trace.accesses),
        "warnings": warnings_json([(None, trace.warnings)]),
    }
    if args.json:
        print(dumps(summary))
    else:
        print(f"wrote {summary['spans']} spans, {summary['syncs']} syncs to {args.output} ({to})")
    return 0
