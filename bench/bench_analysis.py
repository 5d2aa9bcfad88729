"""Hazard detection and trace diff on synthetic engine traces of 10^5, 10^6, 10^7 accesses.

Each size runs in a fresh process (so peak memory is that analysis's own): build the trace,
then time ``find_hazards`` and ``diff_traces`` (baseline vs lockless of the same size) and
sample the resident set size during each. Prints, side by side, the time per access and the
growth from one size to the next next to what n log n predicts. Usage:
``python bench/bench_analysis.py [--sizes 1e5,1e6,1e7]``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: accesses per step: 64 reads + 8 writes (execute_model) + 2 x 12 (swap-in copy)
SHAPE = {"blocks_per_step": 64, "writes_per_step": 8, "swap_blocks": 12}
PER_STEP = 64 + 8 + 2 * 12


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class PeakRSS:
    """Peak resident set size above the level at entry, sampled every 2 ms."""

    def __enter__(self) -> PeakRSS:
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def mib(self) -> float:
        return (self.peak - self.base) / 2**20


def measure(accesses: int) -> dict:
    """In this process: one size, one run of each analysis."""
    sys.path.insert(0, str(ROOT))
    from fdprof.analysis.diff import diff_traces
    from fdprof.analysis.hazards import find_hazards
    from fdprof.analysis.synthetic import engine_trace

    steps = max(1, accesses // PER_STEP)
    base = engine_trace(steps, mode="baseline", seed=1, **SHAPE)
    new = engine_trace(steps, mode="lockless", seed=2, fault="no-wait-swap-in", **SHAPE)
    out = {"accesses": len(new.accesses), "syncs": len(new.syncs), "spans": len(new.spans)}
    report = _timed(out, "hazards", find_hazards, new)
    out["races"] = report.counts["races"]
    _timed(out, "diff", diff_traces, base, new)
    return out


def _timed(out: dict, name: str, fn, *args):
    """Run ``fn(*args)``; record wall and CPU seconds (the machine is shared: CPU time is the
    steadier of the two) and the peak RSS above the level at the start."""
    with PeakRSS() as mem:
        w0, c0 = time.perf_counter(), time.process_time()
        result = fn(*args)
        out[f"{name}_s"] = time.perf_counter() - w0
        out[f"{name}_cpu"] = time.process_time() - c0
    out[f"{name}_mib"] = mem.mib
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--one", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(int(args.one))))
        return
    rows = []
    for size in (int(float(s)) for s in args.sizes.split(",")):
        r = subprocess.run([sys.executable, __file__, "--one", str(size)], capture_output=True,
                           text=True, check=True)  # fmt: skip
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    print(
        f"{'accesses':>10} {'syncs':>9} {'hazards s':>10} {'us/access':>10} {'MiB':>7} "
        f"{'growth':>7} {'nlogn':>7} {'diff s':>8} {'MiB':>7} {'growth':>7} {'races':>6}"
    )
    prev = None
    for r in rows:
        n = r["accesses"]
        if prev:
            expect = n * math.log(n) / (prev["accesses"] * math.log(prev["accesses"]))
            g_h = f"{r['hazards_s'] / prev['hazards_s']:.1f}x"
            g_d = f"{r['diff_s'] / prev['diff_s']:.1f}x"
            g_e = f"{expect:.1f}x"
        else:
            g_h = g_d = g_e = "-"
        print(
            f"{n:>10,} {r['syncs']:>9,} {r['hazards_s']:>10.2f} "
            f"{1e6 * r['hazards_s'] / n:>10.2f} {r['hazards_mib']:>7.0f} {g_h:>7} {g_e:>7} "
            f"{r['diff_s']:>8.2f} {r['diff_mib']:>7.0f} {g_d:>7} {r['races']:>6}"
        )
        prev = r


if __name__ == "__main__":
    main()
