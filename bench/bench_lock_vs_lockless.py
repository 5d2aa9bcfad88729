"""The baseline lock against the lockless engine, synchronous and asynchronous swap-in, measured
side by side: the gain, the baseline's ideal gain, and how much of the ideal each one reaches.

Each pair runs the three modes on one seed, in an order that rotates from pair to pair, so the
drift of a shared machine's load hits every mode alike. Per pair: the gain of a lockless mode is
its throughput over the baseline's, the ideal gain the baseline run's actual over ideal time
(its swaps and lock waits hidden under compute: ``fdprof.analysis.breakdown``), and
actual/ideal their quotient. Each is printed as a geometric mean over the pairs with its
Student-t 95% CI, as ``fdprof ab`` reports the gain.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from engine.config import EngineConfig
from engine.launcher import run_engine
from fdprof.analysis.breakdown import ideal_speedup, step_breakdown
from fdprof.analysis.stats import geometric_mean_ci
from fdprof.probe import ProbeConfig
from fdprof.trace import load

#: (label, lock mode, swap-in); the first is the baseline
MODES = (("baseline ipc", "ipc", "sync"), ("lockless sync", "none", "sync"),
         ("lockless async", "none", "async"))  # fmt: skip


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
    args = ap.parse_args()
    base = EngineConfig(requests=args.requests, workload=args.workload, dp=args.dp, ep=args.ep)
    tps: dict[str, list[float]] = {label: [] for label, _, _ in MODES}
    ideal: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            order = MODES[i % 3 :] + MODES[: i % 3]
            line = []
            for label, lock, swap_in in order:
                run_dir = Path(tmp) / f"{lock}-{swap_in}-{i}"
                cfg = base.with_(kv_lock=lock, swap_in=swap_in, seed=i)
                r = run_engine(cfg, ProbeConfig(run_dir=str(run_dir)))
                assert r.integrity.mismatches == 0 == r.integrity.nan, f"{label} #{i}: bad KV"
                tps[label].append(r.tokens_per_s)
                if lock == "ipc":
                    ideal.append(ideal_speedup(step_breakdown(load(run_dir))))
                line.append(f"{label} {r.tokens_per_s:.1f} tok/s")
            print(f"pair {i}: " + ", ".join(line) + f"; baseline ideal {ideal[-1]:.3f}",
                  flush=True)  # fmt: skip
    baseline = tps[MODES[0][0]]
    print(f"{base.workload}, {base.requests} requests, dp {base.dp}{' ep' if base.ep else ''}, "
          f"{args.pairs} pairs")  # fmt: skip
    print(f"ideal gain (baseline runs' actual / ideal time): {_ci(ideal, 'ideal')}")
    for label, _, _ in MODES[1:]:
        gains = [n / b for n, b in zip(tps[label], baseline, strict=True)]
        reached = [g / x for g, x in zip(gains, ideal, strict=True)]
        print(f"{label}: gain {_ci(gains, 'gain')}, actual/ideal {_ci(reached, 'reached')}")


if __name__ == "__main__":
    main()
