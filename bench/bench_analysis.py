"""Hazard detection and trace diff on synthetic engine traces of 10^5, 10^6, 10^7 accesses.

Each (analysis, size) runs in a fresh process, so peak memory is that analysis's own: build
the trace(s), then time ``find_hazards`` (a lockless run with a seeded fault),
``diff_traces`` (baseline vs that run), ``predict_races`` (the baseline, beside its own
``find_hazards``) or ``ownership`` (``find_hazards`` on a lockless run whose steps are also
requests holding, releasing and being handed their blocks, beside ``find_hazards`` on the same
run without those events: the ownership analysis is the difference) and sample the resident
set size meanwhile. Prints,
side by side, wall and CPU seconds, CPU µs per access, peak RSS, and the growth of CPU time
from one size to the next next to what n log n predicts. Usage:
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


def measure(accesses: int, what: str, every: int = 1) -> dict:
    """In this process: one size, one analysis (``hazards``, ``diff``, ``predict`` or
    ``ownership``, whose run has a new request every ``every`` steps)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the synthetic runs are a test fixture
    from synthetic import engine_trace

    from fdprof.analysis.diff import diff_traces
    from fdprof.analysis.hazards import find_hazards
    from fdprof.analysis.predict import predict_races

    steps = max(1, accesses // PER_STEP)
    fault = None if what == "ownership" else "no-wait-swap-in"
    new = engine_trace(steps, mode="lockless", seed=2, fault=fault, **SHAPE)
    out = {"accesses": len(new.accesses), "syncs": len(new.syncs), "spans": len(new.spans)}
    if what == "hazards":
        out["races"] = _timed(out, find_hazards, new).counts["races"]
    elif what == "predict":  # the baseline (with its lock): happens-before, then WCP beside it
        base = engine_trace(steps, mode="baseline", seed=1, **SHAPE)
        out.update(accesses=len(base.accesses), syncs=len(base.syncs))
        hb: dict = {}
        _timed(hb, find_hazards, base)
        out["predicted"] = _timed(out, predict_races, base).counts["predicted"]
        out["hb_cpu_s"] = hb["cpu_s"]
    elif what == "ownership":  # the same run with and without its ownership events
        owned = engine_trace(steps, mode="lockless", seed=2, ownership=True,
                             ownership_every=every, **SHAPE)  # fmt: skip
        plain: dict = {}
        _timed(plain, find_hazards, new)
        report = _timed(out, find_hazards, owned)
        out.update(accesses=len(new.accesses), events=len(owned.accesses) - len(new.accesses),
                   findings=report.counts["ownership"], hb_cpu_s=plain["cpu_s"])  # fmt: skip
    else:
        base = engine_trace(steps, mode="baseline", seed=1, **SHAPE)
        out["gain"] = _timed(out, diff_traces, base, new).throughput.ratio
    return out


def _timed(out: dict, fn, *args):
    """Run ``fn(*args)``; record wall and CPU seconds (the machine is shared: CPU time is the
    steadier of the two) and the peak RSS above the level at the start."""
    with PeakRSS() as mem:
        w0, c0 = time.perf_counter(), time.process_time()
        result = fn(*args)
        out["wall_s"] = time.perf_counter() - w0
        out["cpu_s"] = time.process_time() - c0
    out["mib"] = mem.mib
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--analyses", default="hazards,diff,predict,ownership",
                    help="predict: hazards --predict on the baseline, its CPU time over "
                    "plain hazards on the same trace; ownership: hazards on a run with "
                    "ownership events over the same run without them")  # fmt: skip
    ap.add_argument("--ownership-every", type=int, default=1,
                    help="ownership: every k-th step is a new request's (1: 1.7 events per "
                    "access, 10: 0.17, as a vLLM run)")  # fmt: skip
    ap.add_argument("--one", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--what", default="hazards", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(int(args.one), args.what, args.ownership_every)))
        return
    print(f"{'analysis':>8} {'accesses':>10} {'syncs':>8} {'wall s':>7} {'cpu s':>7} "
          f"{'us/acc':>7} {'peak MiB':>8} {'cpu growth':>10} {'n log n':>8}")  # fmt: skip
    for what in args.analyses.split(","):
        prev = None
        for size in (int(float(s)) for s in args.sizes.split(",")):
            cmd = [sys.executable, __file__, "--one", str(size), "--what", what,
                   "--ownership-every", str(args.ownership_every)]  # fmt: skip
            r = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True)
                           .stdout.strip().splitlines()[-1])  # fmt: skip
            n = r["accesses"]
            growth = expect = "-"
            if prev:
                growth = f"{r['cpu_s'] / prev['cpu_s']:.1f}x"
                expect = f"{n * math.log(n) / (prev['accesses'] * math.log(prev['accesses'])):.1f}x"
            print(f"{what:>8} {n:>10,} {r['syncs']:>8,} {r['wall_s']:>7.2f} {r['cpu_s']:>7.2f} "
                  f"{1e6 * r['cpu_s'] / n:>7.2f} {r['mib']:>8.0f} {growth:>10} {expect:>8}"
                  + (f"  predict/hazards cpu {r['cpu_s'] / r['hb_cpu_s']:.2f}x, "
                     f"{r['predicted']} predicted" if what == "predict" else "")
                  + (f"  with/without {r['events']:,} ownership events: cpu "
                     f"{r['cpu_s'] / r['hb_cpu_s']:.2f}x (+{r['cpu_s'] - r['hb_cpu_s']:.2f} s), "
                     f"{r['findings']} findings" if what == "ownership" else ""),
                  flush=True)  # fmt: skip
            prev = r


if __name__ == "__main__":
    main()
