"""``fdprof merge HOST... --out DIR``: several hosts' traces on one timebase."""

from __future__ import annotations

import argparse
from pathlib import Path

from fdprof.cli import add_force_argument, claim_output, load_trace
from fdprof.contracts import dumps, stamped
from fdprof.trace import save
from fdprof.trace.hosts import ANCHOR_ERROR_NS, host_inputs, merge_hosts


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "merge",
        help="merge several hosts' traces on one timebase (offsets from cross-host sync edges)",
        description="Each HOST is one host's trace (any format), or a receiving endpoint: a "
        "directory of host=NAME Parquet stores (fdprof run --parquet per host, "
        "fdprof.trace.hosts). Estimates each host's clock offset from the cross-host sync edges "
        "(a keyed release on one host, its acquire on another: collectives, messages) and the "
        "clock anchors, with the interval every edge allows and the bound of the estimate; "
        "raises clock alarms where the edges contradict each other or a host's anchor "
        "disagrees with them (docs/trace.md, 'Many hosts'). Writes the merged trace as a "
        "Parquet store, which hazards and diff read. Exit 0; 1 on a clock alarm; 2 on bad input.",
    )
    p.add_argument("hosts", nargs="+", type=Path, help="hosts' traces, or an endpoint directory")
    p.add_argument("--out", required=True, type=Path, help="Parquet store to write")
    p.add_argument(
        "--anchor-error-ns",
        type=int,
        default=ANCHOR_ERROR_NS,
        metavar="NS",
        help="how far a host's clock anchor may be from what the edges allow before it is an "
        "alarm (its wall clock's synchronisation error)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_force_argument(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    inputs = host_inputs(args.hosts)
    traces = {host: load_trace(args, path) for host, path in inputs.items()}
    merged = merge_hosts(traces, args.anchor_error_ns)
    claim_output(args.out, args.force)
    save(merged.trace, args.out, "parquet")
    out = {"output": str(args.out), **merged.to_json()}
    if args.json:
        print(dumps(stamped("merge", out)))
    else:
        for h in merged.hosts:
            at = "-" if h.offset_ns is None else f"{h.offset_ns:+,} ns"
            bound = "" if h.bound_ns is None else f" ± {h.bound_ns:,} ns"
            print(f"{h.host}: {at}{bound} ({h.basis}, {h.edges} edges)")
        for a in merged.alarms:
            print(f"clock alarm ({a['kind']}): {a['detail']}")
        print(f"merged {len(inputs)} hosts into {args.out} (reference {merged.reference})")
    return 1 if merged.alarms else 0
