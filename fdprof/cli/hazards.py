"""``fdprof hazards TRACE``: unordered KV-block accesses and broken locks; exit 0 clean,
1 hazards, 2 error."""

from __future__ import annotations

import argparse
from pathlib import Path

from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.predict import predict_races
from fdprof.analysis.whatif import what_if_drop_lock
from fdprof.cli import load_trace
from fdprof.cli._report_options import add_report_arguments, emit
from fdprof.errors import FdprofError
from fdprof.report.tables import document

WHAT_IFS = ("drop-lock",)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "hazards",
        help="find KV-block accesses the recorded protocol does not order (happens-before)",
        description="Exit 0: no race; 1: races found, or a broken lock (two holds of one lock "
        "at once on different lanes: its edges are then not taken as order), or an access "
        "outside its block's lifetime (used after the allocator's free, or freed while in use; "
        "where the trace records kv.*_alloc/kv.*_free), or an ownership finding (a block handed "
        "out, freed or written while another request holds it, used without a hold or after "
        "its content was reused, freed under a transfer, a reference count below zero or "
        "leaked; where the trace records kv.*_hold/kv.*_release), or with "
        "--what-if accesses that only the lock ordered; 2: bad input, or a trace without "
        "KV-block accesses (nothing to check is not clean); with --format json the error is "
        "a JSON object on stdout too.",
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
    add_report_arguments(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    trace = load_trace(args, args.trace, args.join)
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
    doc = document(report)
    if what_if is not None:
        doc = doc.then(document(what_if), {**report.to_json(),
                                           "what_if_drop_lock": what_if.to_json()})  # fmt: skip
    emit(args, doc)
    return 0 if report.clean and (what_if is None or what_if.safe) else 1
