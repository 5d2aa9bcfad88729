"""``fdprof roll RUN_DIR OUT``: a run directory's records into a Parquet store, as they come."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fdprof.cli import add_force_argument, claim_output
from fdprof.contracts import dumps, stamped
from fdprof.errors import FdprofError
from fdprof.trace import store
from fdprof.trace.roll import BUCKETS, ROLL_S, Roller, run_finished


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "roll",
        help="roll a run directory's record files into a Parquet store (live or finished)",
        description="Reads the record files of RUN_DIR (written by fdprof run, or by the vLLM "
        "plugin through FDPROF_RUN_DIR) and writes them into the Parquet store OUT window by "
        "window, holding only the spans still open: a run of hours never needs its whole trace "
        "in one process. With --follow it keeps reading while the processes write, every "
        "--roll-s seconds, until RUN_DIR's run.json says the run is over (or Ctrl-C / SIGTERM, "
        "which write what was read). Exit 0; 2 on bad input.",
    )
    p.add_argument("run_dir", type=Path, help="run directory (record files, run.json)")
    p.add_argument("out", type=Path, help="Parquet store to write (a new directory)")
    p.add_argument("--follow", action="store_true", help="follow a live run until it ends")
    p.add_argument("--roll-s", type=float, default=ROLL_S, metavar="S",
                   help="seconds between windows with --follow")  # fmt: skip
    p.add_argument("--buckets", type=int, default=BUCKETS,
                   help="access buckets (blocks %% N) of the store")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_force_argument(p, "OUT")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if not args.run_dir.is_dir():
        raise FdprofError(f"{args.run_dir}: not a run directory")
    claim_output(args.out, args.force)
    if not 1 <= args.buckets <= store.MAX_BUCKETS or args.roll_s <= 0:
        raise FdprofError("--buckets must be 1-256 and --roll-s above 0")
    roller = Roller(args.run_dir, args.out, buckets=args.buckets)
    try:
        roller.poll()
        while args.follow and not run_finished(args.run_dir):
            time.sleep(min(args.roll_s, 0.5))
            roller.poll()
            if time.monotonic() - roller.last_roll >= args.roll_s:
                roller.roll()
    finally:  # an interrupted follow still leaves a complete store of what was read
        roller.close()
    summary = {"output": str(args.out), "windows": roller.windows, **roller.rows}
    if args.json:
        print(dumps(stamped("roll", summary)))
    else:
        print(f"rolled {roller.rows['spans']} spans, {roller.rows['syncs']} syncs, "
              f"{roller.rows['accesses']} accesses into {args.out} "
              f"({roller.windows} windows)")  # fmt: skip
    return 0
