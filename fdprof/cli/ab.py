"""``fdprof ab``: an A/B with a verdict — the built-in lock A/B, or any two shell commands."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from fdprof import files
from fdprof.cli import SAFETY_RULE, add_force_argument
from fdprof.cli._engine_options import (
    add_capture_arguments,
    add_engine_arguments,
    capture_plan,
    engine_config,
)
from fdprof.cli._report_options import add_report_arguments, emit
from fdprof.errors import FdprofError
from fdprof.semconv import LockMode

#: what the built-in A/B's two modes differ in
COMPARES = ("kv-lock", "cache-manager")

EXIT_CODES = f"""exit codes:
  0  safe: every run of either mode safe, as fdprof hazards judges it, and no integrity
     mismatch (and, with --require-gain X, the gain's 95% CI lower bound is at least X); a
     mode whose lock did not exclude is named in the verdict (BROKEN LOCK)
  1  unsafe: races, a block used outside its lifetime, an ownership finding, or corrupted
     KV blocks in some run
     (the report names the runs)
  2  bad input, or a run that crashed, failed or left no trace (named on stderr)
  3  --require-gain X not met (only when safe: 2 > 1 > 3 > 0)

{SAFETY_RULE}

any engine: each run of CMD gets its own directory in FDPROF_RUN_DIR (every process calls
fdprof.probe.sdk.configure_from_env) and its pair index in FDPROF_AB_PAIR (0, 1, ...: seed the
workload with it, so pairs match); its stdout and stderr go to RUN_DIR/stdout.log, stderr.log.
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ab",
        help="A/B with a verdict: the KV lock (baseline vs lockless), Cache Manager V1 vs the "
        "old path, or any two commands, "
        "K interleaved runs each, gain with a 95%% CI, hazards, a report",
        description="Run two modes K times each, ABBA-interleaved: the built-in engine with "
        "the KV lock (--kv-lock ipc) and without it (on the old path or, with --cache-manager "
        "v1, on Cache Manager V1), the old path against V1 (--compare cache-manager), or "
        "--baseline CMD and --candidate CMD. "
        "Throughput and step latency come from each run's trace; the report gives the gain "
        "with its 95% CI, the ideal gain, serving latency, hazards and integrity of every "
        "run, and the lock what-if on the built-in baseline. Writes report.md, report.html "
        "(one offline file), ab.json and each run's Perfetto JSON into --out.",
        epilog=EXIT_CODES,
    )
    p.add_argument("--runs", type=int, default=5, help="runs per mode (default 5)")
    p.add_argument(
        "--baseline",
        metavar="CMD",
        default=None,
        help="shell command of the baseline mode (any engine; with --candidate)",
    )
    p.add_argument(
        "--candidate",
        metavar="CMD",
        default=None,
        help="shell command of the candidate mode, compared with --baseline",
    )
    p.add_argument(
        "--names",
        nargs=2,
        metavar=("BASE", "NEW"),
        default=None,
        help="how the report names the two commands (default: baseline, candidate)",
    )
    p.add_argument("--require-gain", type=float, default=None, metavar="X",
                   help="exit 3 when the lower bound of the gain's 95%% CI is below X "
                   "(e.g. 1.05)")  # fmt: skip
    p.add_argument("--out", required=True, type=Path, help="directory for runs and reports")
    add_force_argument(p)
    add_report_arguments(p, out_file=False)
    group = p.add_argument_group("built-in A/B (ignored with --baseline/--candidate)")
    group.add_argument(
        "--compare",
        choices=COMPARES,
        default="kv-lock",
        help="what the two modes differ in. kv-lock (default): the KV lock (--kv-lock ipc) "
        "against lockless, on the --cache-manager given (old by default; v1: Cache Manager "
        "V1's lock A/B); cache-manager: the old path against Cache Manager V1, both lockless",
    )
    add_engine_arguments(group, with_lock=False)
    add_capture_arguments(group)
    p.set_defaults(func=handle)


def arms(args: argparse.Namespace):
    from fdprof.ab.arms import CommandArm
    from fdprof.ab.session import BASELINE, CANDIDATE, cache_manager_arms, lock_arms

    if (args.baseline is None) != (args.candidate is None):
        raise FdprofError("--baseline and --candidate go together")
    if args.baseline is None:
        if args.names is not None:
            raise FdprofError("--names names the commands of --baseline/--candidate")
        built_in = lock_arms if args.compare == "kv-lock" else cache_manager_arms
        return built_in(engine_config(args, kv_lock=LockMode.NONE), capture_plan(args))
    names = args.names or ("baseline", "candidate")
    if names[0] == names[1]:
        raise FdprofError("--names: the two modes need different names")
    return (CommandArm(BASELINE, names[0], args.baseline),
            CommandArm(CANDIDATE, names[1], args.candidate))  # fmt: skip


def handle(args: argparse.Namespace) -> int:
    from fdprof.ab.session import run_session
    from fdprof.report.ab import build
    from fdprof.report.progress import ProgressBar
    from fdprof.report.render import write

    if args.require_gain is not None and not (math.isfinite(args.require_gain)
                                              and args.require_gain > 0):  # fmt: skip
        raise FdprofError(f"--require-gain must be a positive number, got {args.require_gain}")
    if args.runs < 2:
        raise FdprofError("--runs must be at least 2 (a confidence interval needs repeats)")
    out = files.make_dir(files.resolved(args.out))
    with files.DirectoryLock(out):  # a second ab on the same --out refuses, touching nothing
        files.claim_output(out, args.force)
        result = run_session(arms(args), args.runs, out, ProgressBar(sys.stderr, "runs"))
        result.require_gain = args.require_gain
        reports = {"md": out / "report.md", "html": out / "report.html", "json": out / "ab.json"}
        result.report_files = {fmt: str(path) for fmt, path in reports.items()}
        doc = build(result)
        for fmt, path in reports.items():
            write(doc, path, fmt)
    emit(args, doc)
    if args.format == "text":
        print("  ".join(f"{fmt}: {path}" for fmt, path in reports.items()))
    return result.verdict.exit_code
