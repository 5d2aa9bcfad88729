"""``fdprof diff BASE NEW``: two runs side by side, and where the time moved."""

from __future__ import annotations

import argparse
from pathlib import Path

from fdprof.analysis.diff import diff_traces
from fdprof.cli import load_trace
from fdprof.cli._report_options import add_report_arguments, emit
from fdprof.report.tables import document


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "diff",
        help="compare two traces: throughput, latency, time moved",
        description="Throughput and step latency of NEW against BASE as ratios with 95% "
        "bootstrap CIs (steps resampled; for tokens/s within token-count classes, so the "
        "workload's prefill/decode mix is held fixed), time by span name and role, locks, "
        "swap time overlapped with execute_model, and each step's time split into compute, "
        "lock wait, swap blocking and idle. Any two traces fdprof loads.",
    )
    p.add_argument("base", type=Path, help="baseline run directory or trace file")
    p.add_argument("new", type=Path, help="run directory or trace file to compare")
    p.add_argument(
        "--step-name",
        default=None,
        help="spans named this (or starting with it, e.g. ProfilerStep#) are the steps; "
        "default: 'step' spans, else fd.step ids",
    )
    p.add_argument(
        "--join",
        nargs=2,
        type=Path,
        metavar=("BASE_RUN", "NEW_RUN"),
        default=None,
        help="run directories to join to BASE and NEW (nsys traces)",
    )
    add_report_arguments(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    joins = args.join or (None, None)
    base = load_trace(args, args.base, joins[0])
    new = load_trace(args, args.new, joins[1])
    result = diff_traces(base, new, args.step_name, labels=(_label(args.base), _label(args.new)))
    emit(args, document(result))
    return 0


def _label(path: Path) -> str:
    name = path.name
    for ext in (".gz", ".json", ".sqlite"):
        name = name.removesuffix(ext)
    return name or str(path)
