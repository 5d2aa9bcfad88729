"""Lock (``--kv-lock ipc``) vs lockless (``none``) on the default workload, measured side by side.

Runs alternate (ipc, none, ipc, none, ...) so drift in the machine's load hits both modes alike;
each pair gives one ratio of throughputs, and the script prints the median ratio with its spread
and, as ``fdprof ab`` reports it, the geometric mean with its Student-t 95% CI.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from engine.config import EngineConfig
from engine.launcher import run_engine
from fdprof.analysis.stats import geometric_mean_ci
from fdprof.probe import ProbeConfig


def _run(kv_lock: str, seed: int, requests: int, root: Path) -> dict:
    cfg = EngineConfig(kv_lock=kv_lock, seed=seed, requests=requests)
    out = root / f"{kv_lock}-{seed}"
    return run_engine(cfg, ProbeConfig(run_dir=str(out))).to_json()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=48)
    args = ap.parse_args()
    ratios, tps = [], {"ipc": [], "none": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            pair = {m: _run(m, i, args.requests, Path(tmp)) for m in ("ipc", "none")}
            for m, r in pair.items():
                assert r["integrity"]["mismatches"] == 0, f"{m} run {i} corrupted KV"
                tps[m].append(r["tokens_per_s"])
            ratios.append(pair["none"]["tokens_per_s"] / pair["ipc"]["tokens_per_s"])
            print(
                f"pair {i}: ipc {pair['ipc']['tokens_per_s']:.1f} tok/s "
                f"({pair['ipc']['swaps']['blocks']} blocks swapped), "
                f"none {pair['none']['tokens_per_s']:.1f} tok/s "
                f"({pair['none']['swaps']['blocks']} blocks), ratio {ratios[-1]:.3f}",
                flush=True,
            )
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(
        f"lockless/lock throughput: median {statistics.median(ratios):.3f}, "
        f"min {min(ratios):.3f}, max {max(ratios):.3f}, IQR {q[0]:.3f}-{q[2]:.3f} "
        f"over {len(ratios)} alternating pairs"
    )
    if len(ratios) > 1:
        g = geometric_mean_ci(ratios, "geometric mean")
        print(f"geometric mean {g.ratio:.3f}, 95% CI [{g.lo:.3f}, {g.hi:.3f}] ({g.method})")
    print(
        f"tokens/s median: ipc {statistics.median(tps['ipc']):.1f}, "
        f"none {statistics.median(tps['none']):.1f}"
    )


if __name__ == "__main__":
    main()
