"""Regenerate the reference traces (``make traces``): real runs of the engine, seed 0.

One run directory per case: the baseline and the lockless engine on the default workload, and
the lockless engine with each seeded protocol bug. ``fdprof diff`` and ``fdprof hazards`` are
meant to be tried on them right after install; the tests check what each must show.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from fdprof import semconv as S
from fdprof.engine.config import EngineConfig
from fdprof.engine.launcher import run_engine
from fdprof.probe import ProbeConfig

HERE = Path(__file__).resolve().parent
#: the reference traces: the engine as ``fdprof run`` runs it with these settings, seed 0
#: (tests/test_reference_traces.py checks that each still matches what the engine records);
#: the old path's host-protocol faults (the asynchronous engine's, V1's zoo and the ownership
#: faults are reproduced by make regress and the tests, not kept as reference traces)
REFERENCE_FAULTS = (S.Fault.NO_WAIT_SWAP_IN, S.Fault.FREE_BEFORE_SWAP_OUT, S.Fault.ACK_BEFORE_COPY)
CASES: dict[str, EngineConfig] = {
    "baseline": EngineConfig(kv_lock=S.LockMode.IPC),
    "lockless": EngineConfig(kv_lock=S.LockMode.NONE),
    **{f"fault-{f}": EngineConfig(kv_lock=S.LockMode.NONE, fault=f) for f in REFERENCE_FAULTS},
}


def main() -> int:
    for name, config in CASES.items():
        run_dir = HERE / name
        shutil.rmtree(run_dir, ignore_errors=True)
        results = run_engine(
            config, ProbeConfig(run_dir=str(run_dir), resource={S.KV_LOCK: config.kv_lock})
        )
        print(
            f"{name:<28} {results.tokens_per_s:7.1f} tok/s  swaps "
            f"{results.swaps.to_cpu}/{results.swaps.to_gpu}  integrity mismatches "
            f"{results.integrity.mismatches}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
