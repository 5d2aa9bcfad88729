"""What starting the engine's processes costs: a fork server that imported torch once against
spawning an interpreter per process (multiprocessing's two start methods), side by side.

Each sample is a fresh Python process that makes ``--runs`` engine runs in a row (24
requests each, as ``fdprof run --requests 24``): the first pays for the start method's set-up
(the fork server importing the engine and torch; nothing for spawn), the later ones are what
the A/B's pairs, ``make regress`` and a test session pay per run. The arms alternate. CPU is
the sample process's, its children's and the fork server's children's (the engine processes
are the server's children, not the supervisor's), read from the kernel's accounting.

    python bench/bench_engine_start.py [--pairs 3] [--runs 3] [--requests 24]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ARMS = ("spawn", "forkserver")


def _own_cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def sample(arm: str, runs: int, requests: int) -> list[dict]:
    """``runs`` engine runs in this process with ``arm``'s start method."""
    import multiprocessing

    from fdprof.engine import launcher
    from fdprof.engine.config import EngineConfig
    from fdprof.probe import ProbeConfig

    if arm == "spawn":
        launcher._start_method = lambda: multiprocessing.get_context("spawn")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            before = _own_cpu_s() + launcher.ended_children_cpu_s()
            t0 = time.perf_counter()
            launcher.run_engine(EngineConfig(requests=requests, seed=i, kv_lock="none"),
                                ProbeConfig(run_dir=f"{tmp}/run-{i}"))  # fmt: skip
            wall = time.perf_counter() - t0
            after = _own_cpu_s() + launcher.ended_children_cpu_s()
            out.append({"wall_s": wall, "cpu_s": after - before})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--sample", choices=ARMS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sample:
        print(json.dumps(sample(args.sample, args.runs, args.requests)))
        return 0
    got: dict[str, list[list[dict]]] = {arm: [] for arm in ARMS}
    for pair in range(args.pairs):
        for arm in ARMS if pair % 2 == 0 else ARMS[::-1]:
            cmd = [sys.executable, __file__, "--sample", arm, "--runs", str(args.runs),
                   "--requests", str(args.requests)]  # fmt: skip
            got[arm].append(json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                                      check=True).stdout))  # fmt: skip
    print(f"{args.pairs} pairs, {args.runs} runs of {args.requests} requests per sample, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"{'':24} {'spawn':>16} {'forkserver':>16} {'ratio':>7}")
    for label, pick in (("first run", lambda s: s[:1]), ("later runs", lambda s: s[1:])):
        for key in ("wall_s", "cpu_s"):
            med = {arm: statistics.median(r[key] for s in got[arm] for r in pick(s))
                   for arm in ARMS}  # fmt: skip
            print(f"{label + ', ' + key[:-2]:24} {med['spawn']:14.2f} s {med['forkserver']:14.2f} s"
                  f" {med['forkserver'] / med['spawn']:7.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
