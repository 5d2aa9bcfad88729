"""``fdprof hazards TRACE``: unordered KV-block accesses and broken locks; exit 0 safe (a
broken lock named), 1 unsafe, 2 error (:mod:`fdprof.analysis.verdicts`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fdprof.analysis.hazards import HazardReport, find_hazards
from fdprof.analysis.predict import predict_races
from fdprof.analysis.whatif import what_if_drop_lock
from fdprof.cli import SAFETY_RULE, add_dask_argument, load_trace
from fdprof.cli._report_options import add_report_arguments, emit
from fdprof.contracts import stamped, warnings_json
from fdprof.errors import FdprofError
from fdprof.report.tables import document

WHAT_IFS = ("drop-lock",)


def _on_dask(args: argparse.Namespace) -> tuple[HazardReport, int]:
    """The report, computed on Dask over the trace's store, and the store's first time."""
    from fdprof.analysis import distributed
    from fdprof.trace.store import first_time

    with (
        distributed.client_for(args.dask or None) as client,
        distributed.as_store(args.trace, lambda p: load_trace(args, p)) as path,
    ):
        return distributed.find_hazards(path, client, predict=args.predict), first_time(path)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "hazards",
        help="find KV-block accesses the recorded protocol does not order (happens-before)",
        description="Exit 0: safe, no race, no access outside its block's lifetime and no "
        "ownership finding (a broken lock, two holds of one lock at once on different lanes, is "
        "named in the verdict and its edges not taken as order; instrumentation gaps, e.g. "
        "sync_in_access_span, an acquire inside an access span of its lane, or "
        "wait_unsubmitted, a wait on jobs never submitted, are listed and never an exit 1); "
        "1: unsafe, races found (observed or latent), or an access outside its block's "
        "lifetime (used after the allocator's free, or freed while in use; where the trace "
        "records kv.*_alloc/kv.*_free), or an ownership finding (where the trace records "
        "kv.*_hold/kv.*_release), or with --what-if accesses that only the lock ordered; 2: bad "
        "input, or a trace without KV-block accesses (nothing to check is not clean); with "
        "--format json the error is a JSON object on stdout too.",
        epilog=SAFETY_RULE,
    )
    p.add_argument("trace", type=Path, help="run directory or trace file")
    p.add_argument(
        "--what-if",
        choices=WHAT_IFS,
        default=None,
        help="drop-lock: drop the lock's edges and report what becomes unordered",
    )
    p.add_argument(
        "--predict",
        action="store_true",
        help="also predict races by weak causal precedence (WCP): conflicting accesses only "
        "the chance order of a lock (lock:* objects) ordered, reported apart; they alone do not "
        "make the exit 1",
    )
    p.add_argument("--join", type=Path, default=None, help="run directory to join (nsys traces)")
    add_dask_argument(p)
    add_report_arguments(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.dask is not None:
        if args.what_if or args.join:
            raise FdprofError("--dask runs hazards and --predict; not --what-if or --join")
        report, origin = _on_dask(args)
        what_if, warned = None, []
    else:
        trace = load_trace(args, args.trace, args.join)
        origin, warned = trace.origin, trace.warnings
        what_if = what_if_drop_lock(trace) if args.what_if == "drop-lock" else None
        if args.predict:
            report = predict_races(trace)
        else:
            report = what_if.with_lock if what_if is not None else find_hazards(trace)
    if not report.accesses:
        raise FdprofError(
            f"{args.trace}: no KV-block accesses (kv.* span attributes) to check; an Nsight "
            "Systems export needs --join RUN_DIR, a foreign trace has none"
        )
    doc = document(report, origin)
    if what_if is not None:
        doc = doc.then(document(what_if), stamped("hazards", {
            **report.to_json(), "what_if_drop_lock": what_if.to_json()}))  # fmt: skip
    emit(args, doc, warnings_json([(None, warned)]))
    return 0 if report.clean and (what_if is None or what_if.safe) else 1
