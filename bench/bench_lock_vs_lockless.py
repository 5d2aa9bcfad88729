"""The baseline lock against the lockless engine, synchronous and asynchronous swap-in, measured
side by side: the gain, the baseline's ideal gain, and how much of the ideal each one reaches.

Each pair runs the three modes on one seed, in an order that rotates from pair to pair, so the
drift of a shared machine's load hits every mode alike. Per pair: the gain of a lockless mode is
its throughput over the baseline's, the ideal gain the baseline run's actual over ideal time
(its swaps and lock waits hidden under compute: ``fdprof.analysis.breakdown``), and
actual/ideal their quotient. Each is printed as a geometric mean over the pairs with its
Student-t 95% CI, as ``fdprof ab`` reports the gain.

``--device-async``: the same on the asynchronous engine (docs/engine.md), whose modes are the
baseline with its lock around the host call, the baseline synchronising before it unlocks,
the lockless engine and the lockless engine storing on fill; each mode's share of copy time
overlapped with compute on the device (the stream work) is printed too: the baseline's says
whether its lock excluded device work.

``--cache-manager v1``: the same on Cache Manager V1 (its swap-in is asynchronous by design, so
the modes are the baseline with the lock and the lockless engine).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from fdprof.analysis.breakdown import ideal_speedup, step_breakdown
from fdprof.analysis.device_time import device_overlap
from fdprof.analysis.stats import geometric_mean_ci
from fdprof.engine.config import EngineConfig
from fdprof.engine.launcher import run_engine
from fdprof.probe import ProbeConfig
from fdprof.trace import load

#: (label, settings); the first is the baseline
MODES = (("baseline ipc", {"kv_lock": "ipc"}),
         ("lockless sync", {"kv_lock": "none"}),
         ("lockless async", {"kv_lock": "none", "swap_in": "async"}))  # fmt: skip
ASYNC_MODES = (("baseline ipc", {"kv_lock": "ipc"}),
               ("baseline ipc sync-before-unlock", {"kv_lock": "ipc", "sync_before_unlock": True}),
               ("lockless", {"kv_lock": "none"}),
               ("lockless store-on-fill", {"kv_lock": "none", "store_on_fill": True}))  # fmt: skip
V1_MODES = (("V1 baseline ipc", {"kv_lock": "ipc"}), ("V1 lockless", {"kv_lock": "none"}))


def _ci(ratios: list[float], what: str) -> str:
    g = geometric_mean_ci(ratios, what)
    return f"{g.ratio:.3f} (95% CI {g.lo:.3f}-{g.hi:.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--workload", default="prefix-swap")
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--ep", action="store_true")
    ap.add_argument("--device-async", action="store_true", help="the asynchronous engine")
    ap.add_argument("--cache-manager", choices=("old", "v1"), default="old")
    args = ap.parse_args()
    base = EngineConfig(requests=args.requests, workload=args.workload, dp=args.dp, ep=args.ep,
                        device_async=args.device_async,
                        cache_manager=args.cache_manager)  # fmt: skip
    v1 = args.cache_manager == "v1"
    modes = ASYNC_MODES if args.device_async else V1_MODES if v1 else MODES
    tps: dict[str, list[float]] = {label: [] for label, _ in modes}
    overlap: dict[str, list[float]] = {label: [] for label, _ in modes}
    ideal: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            k = i % len(modes)
            line = []
            for label, settings in modes[k:] + modes[:k]:
                run_dir = Path(tmp) / f"{label.replace(' ', '-')}-{i}"
                cfg = base.with_(seed=i, **settings)
                r = run_engine(cfg, ProbeConfig(run_dir=str(run_dir)))
                assert r.integrity.mismatches == 0 == r.integrity.nan, f"{label} #{i}: bad KV"
                tps[label].append(r.tokens_per_s)
                trace = load(run_dir)
                if label == modes[0][0]:
                    ideal.append(ideal_speedup(step_breakdown(trace)))
                if args.device_async and (dev := device_overlap(trace.spans)) is not None:
                    overlap[label].append(dev.ratio)
                line.append(f"{label} {r.tokens_per_s:.1f} tok/s")
            print(f"pair {i}: " + ", ".join(line) + f"; baseline ideal {ideal[-1]:.3f}",
                  flush=True)  # fmt: skip
    baseline = tps[modes[0][0]]
    print(f"{base.workload}, {base.requests} requests, dp {base.dp}{' ep' if base.ep else ''}"
          f"{', device-async' if args.device_async else ''}{', Cache Manager V1' if v1 else ''}, "
          f"{args.pairs} pairs")  # fmt: skip
    print(f"ideal gain (baseline runs' actual / ideal time): {_ci(ideal, 'ideal')}")
    for label, _ in modes[1:]:
        gains = [n / b for n, b in zip(tps[label], baseline, strict=True)]
        reached = [g / x for g, x in zip(gains, ideal, strict=True)]
        print(f"{label}: gain {_ci(gains, 'gain')}, actual/ideal {_ci(reached, 'reached')}")
    if args.device_async:
        for label, _ in modes:
            shares = overlap[label]
            mean = sum(shares) / len(shares) if shares else float("nan")
            print(
                f"{label}: copy time overlapped with compute on the device, mean "
                f"{100 * mean:.1f}% (per run: {', '.join(f'{100 * x:.1f}%' for x in shares)})"
            )


if __name__ == "__main__":
    main()
