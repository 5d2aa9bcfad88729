"""``fdprof ab``: the main job — baseline vs lockless, K interleaved runs each, with a report."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from fdprof.cli._engine_options import (
    add_capture_arguments,
    add_engine_arguments,
    capture_plan,
    engine_config,
)
from fdprof.errors import FdprofError

EXIT_CODES = """exit codes:
  0  safe: no race, no latent race, no integrity mismatch in any run of either mode
     (and, with --require-gain X, the gain's 95% CI lower bound is at least X)
  1  unsafe: races or corrupted KV blocks in some run (the report names the runs)
  2  bad input, or a run that crashed (named on stderr)
  3  --require-gain X not met (only when safe: 2 > 1 > 3 > 0)
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ab",
        help="A/B the KV lock: baseline vs lockless, K runs each, gain with a 95%% CI and a report",
        description="Run the baseline (--kv-lock ipc) and the lockless engine K times each, "
        "interleaved with the same seeds; report the throughput gain with its 95% CI, the ideal "
        "gain, hazards and integrity of every run, and the lock what-if. Writes report.md and a "
        "self-contained report.html into --out.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--runs", type=int, default=5, help="runs per mode (default 5)")
    add_engine_arguments(p, with_lock=False)
    p.add_argument("--out", required=True, type=Path, help="directory for runs and reports")
    p.add_argument(
        "--require-gain",
        type=float,
        default=None,
        metavar="X",
        help="exit 3 when the lower bound of the gain's 95%% CI is below X (e.g. 1.05)",
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    add_capture_arguments(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from fdprof.ab.session import run_ab
    from fdprof.report import ab_html, ab_markdown, ab_text
    from fdprof.report.progress import ProgressBar

    if args.require_gain is not None and not (
        math.isfinite(args.require_gain) and args.require_gain > 0
    ):
        raise FdprofError(f"--require-gain must be a positive number, got {args.require_gain}")
    if args.runs < 2:
        raise FdprofError("--runs must be at least 2 (a confidence interval needs repeats)")
    config = engine_config(args, kv_lock="none")
    out = args.out.resolve()
    progress = ProgressBar(sys.stderr, "runs")
    result = run_ab(config, args.runs, out, capture_plan(args), progress)
    result.require_gain = args.require_gain
    for name, render in (("report.md", ab_markdown.render), ("report.html", ab_html.render)):
        (out / name).write_text(render(result))
    result.report_files = {"html": str(out / "report.html"), "md": str(out / "report.md")}
    (out / "ab.json").write_text(json.dumps(result.to_json(), indent=2))
    print(json.dumps(result.to_json()) if args.json else ab_text.render(result), end="\n")
    return result.verdict.exit_code
