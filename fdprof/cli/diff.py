"""``fdprof diff BASE NEW``: two runs side by side, and where the time moved."""

from __future__ import annotations

import argparse
from pathlib import Path

from fdprof.analysis.diff import diff_summaries, diff_traces
from fdprof.cli import add_dask_argument, load_trace
from fdprof.cli._report_options import add_report_arguments, emit
from fdprof.contracts import warnings_json
from fdprof.errors import FdprofError
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
    add_dask_argument(p)
    add_report_arguments(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    names = labels(args.base, args.new)
    if args.dask is not None:
        if args.join:
            raise FdprofError("--dask reads the traces as they are: convert an nsys export "
                              "joined to its run first (fdprof convert --join)")  # fmt: skip
        result, warned = _on_dask(args, names), []
    else:
        joins = args.join or (None, None)
        base = load_trace(args, args.base, joins[0])
        new = load_trace(args, args.new, joins[1])
        result = diff_traces(base, new, args.step_name, labels=names)
        warned = [("base", base.warnings), ("new", new.warnings)]
    emit(args, document(result), warnings_json(warned))
    return 0


def _on_dask(args: argparse.Namespace, names: tuple[str, str]):
    from fdprof.analysis import distributed
    from fdprof.analysis.distributed_diff import summarize_store

    def read(p):
        return load_trace(args, p)

    with distributed.client_for(args.dask or None) as client:
        summaries = []
        for path, label in zip((args.base, args.new), names, strict=True):
            with distributed.as_store(path, read) as store_path:
                summaries.append(summarize_store(store_path, client, label, args.step_name))
    return diff_summaries(*summaries)


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
