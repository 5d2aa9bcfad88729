"""``fdprof run``: serve a workload with the engine and record it into a run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fdprof import files, settings
from fdprof import semconv as S
from fdprof.cli import add_force_argument, claim_output
from fdprof.cli._engine_options import (
    add_capture_arguments,
    add_engine_arguments,
    as_flags,
    capture_plan,
    engine_config,
)
from fdprof.contracts import dumps, stamped


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the engine and record a trace",
        description="Serve a workload with the multi-process engine (scheduler + cache manager, "
        "cache transfer process, worker) and record every swap, execute_model, lock and sync "
        "edge into a run directory. Exit 0 on success, 1 if a correct run (no --fault) found "
        "corrupted KV blocks, NaN/Inf, or (with --reference) tokens that differ from the "
        "reference run's, 2 on bad input or a crashed engine process (or --nsys without nsys "
        "on the PATH).",
    )
    add_engine_arguments(p)
    p.add_argument(
        "--reference",
        action="store_true",
        help="then serve the same seed without swaps (or fault) into OUT/reference and compare "
        "every request's tokens: they must be equal (exactly, on the CPU)",
    )
    p.add_argument("--out", required=True, type=Path, help="run directory to write")
    add_force_argument(p)
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    add_capture_arguments(p)
    p.add_argument(
        "--parquet",
        type=Path,
        default=None,
        metavar="DIR",
        help="also roll the records into a Parquet store at DIR as the run goes (every "
        "--roll-s seconds, in the supervisor: the engine's hot path is unchanged); every "
        "command reads DIR as a trace (docs/trace.md)",
    )
    p.add_argument("--roll-s", type=float, default=10.0, metavar="S", help="seconds between rolls")
    p.add_argument(
        "--nsys",
        action="store_true",
        help="run under Nsight Systems (nsys profile --trace=cuda,nvtx,osrt; nsys must be on "
        "the PATH) and join its SQLite export to the records by span id: RUN/nsys/",
    )
    p.set_defaults(func=handle)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _summary(r: dict) -> str:
    sw, integ, cache_manager = r["swaps"], r["integrity"], r["cache_manager"]
    return (
        f"kv_lock={r['kv_lock']} cache_manager={cache_manager} device={r['device']} "
        f"requests={r['requests']} "
        f"tokens={r['generated_tokens']} in {r['wall_s']:.2f}s ({r['tokens_per_s']:.1f} tok/s), "
        f"steps={r['steps']} (step p50 {_ms(r['step_ms']['p50'])}, p99 {_ms(r['step_ms']['p99'])}; "
        "one run: `fdprof ab` repeats runs for a CI)\n"
        f"swaps: {sw[S.TO_CPU]} {S.TO_CPU}, {sw[S.TO_GPU]} {S.TO_GPU}, {sw['blocks']} blocks; "
        f"integrity: {integ['blocks_checked']} blocks checked, {integ['mismatches']} mismatches, "
        f"{integ['nan']} NaN/Inf{_reference_line(r['reference'])}{_fault_line(r)}\n"
        f"trace: {r['trace']}"
    )


def _fault_line(r: dict) -> str:
    if not r["fault"]:
        return ""
    flags = as_flags(r["fault_modes"])
    turned_on = f" (it turned on {flags})" if flags else ""
    return f"\nfault: {r['fault']}{turned_on}"


def _reference_line(ref: dict | None) -> str:
    if ref is None:
        return ""
    if ref["equal"]:
        return f"\ntokens: equal to the reference run's ({ref['requests']} requests)"
    return (
        f"\ntokens: {len(ref['mismatched'])} of {ref['requests']} requests differ from the "
        f"reference run's ({ref['run']})"
    )


def intact(results: dict) -> bool:
    """No corrupted block, no NaN/Inf, and tokens equal to the reference where one ran."""
    ref = results["reference"]
    integ = results["integrity"]
    return integ["mismatches"] == 0 and integ["nan"] == 0 and (ref is None or ref["equal"])


def handle(args: argparse.Namespace) -> int:
    from fdprof.capture import nsys
    from fdprof.engine.launcher import run_engine
    from fdprof.report.progress import ProgressBar

    config = engine_config(args)
    run_dir = files.resolved(args.out)
    if args.nsys and not settings.nsys_inner():
        nsys.nsys_executable()  # without nsys: one line, and no directory made
    if not settings.nsys_inner():  # under nsys: the run that started it claimed the directory
        claim_output(run_dir, args.force)
    if args.nsys and not settings.nsys_inner():
        return nsys.run_under_nsys(args.argv, run_dir, args.json)
    capture = capture_plan(args)
    probe_config = capture.probe_config(run_dir, config.kv_lock)
    observers, env = capture.observers_and_env(probe_config)
    progress = None if args.json else ProgressBar(sys.stderr, "requests")
    results = run_engine(config, probe_config, observers, progress, env, args.reference)
    results = results.to_json()
    capture.finish(run_dir)
    print(dumps(stamped("run", results)) if args.json else _summary(results))
    return 0 if intact(results) or config.fault else 1
