"""``fdprof diff BASE NEW``: two runs side by side, and where the time moved."""

from __future__ import annotations

import argparse
from pathlib import Path

from fdprof.analysis.diff import diff_traces
from fdprof.cli import load_trace
from fdprof.cli._report_options import add_report_arguments, emit
from fdprof.contracts import warnings_json
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
    result = diff_traces(base, new, args.step_name, labels=labels(args.base, args.new))
    emit(args, document(result),
         warnings_json([("base", base.warnings), ("new", new.warnings)]))  # fmt: skip
    return 0


def labels(base: Path, new: Path) -> tuple[str, str]:
    """The two traces' names: their file or directory names, with as many parent directories
    as it takes to tell them apart (``a/run`` and ``b/run``, not ``run`` twice)."""
    for depth in range(1, 4):
        pair = _label(base, depth), _label(new, depth)
        if pair[0] != pair[1]:
            return pair
    return _label(base, 1), _label(new, 1)


def _label(path: Path, depth: int = 1) -> str:
    parts = path.absolute().parts[-depth:] if depth > 1 else (path.name,)
    name = "/".join(parts)
    for ext in (".gz", ".json", ".sqlite"):
        name = name.removesuffix(ext)
    return name or str(path)
