"""The regression suite of the KV lock question (``make regress``; ``--short`` in ``make test``).

Why: FastDeploy's lock was added for NaNs under DP+EP and removed without a test of that
setup, and its concurrency now lives in Cache Manager V1. This suite runs every lock mode on
the old path and on V1, DP=2 with EP, and TP=2, over seeds and workloads that swap in both
directions at once, and checks each run four ways: the hazard detector finds no race (and no
lifetime or ownership finding), no block mismatches its fingerprint, no value is NaN/Inf, and every
request's tokens equal a reference run of the same seed without swaps. The detector's
broken-lock alarm (two holds of one lock at once, on two lanes) is counted per run too: the
corrected lock (``ipc-per-thread``) must never set it off; the baseline's (``ipc``) may, as
FastDeploy's lock did not exclude either. Each seeded fault (the old path's, the asynchronous
engine's and the zoo of the field's fixed bugs on V1, each under the pressure its reproduction
needs) must still be flagged (a race, a corrupted block or a changed token). A summary table is
printed, with the suite's wall and CPU time; exit 0 when everything holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from fdprof import semconv as S
from fdprof.analysis.hazards import find_hazards
from fdprof.engine.config import FAULT_PRESSURE, EngineConfig
from fdprof.engine.launcher import ended_children_cpu_s, run_engine
from fdprof.engine.reference import compare_tokens, reference_config
from fdprof.engine.results import RunResults
from fdprof.probe import ProbeConfig
from fdprof.semconv import CacheManagerMode, Fault, LockMode, SwapIn
from fdprof.trace import load
from fdprof.trace.model import Trace


@dataclass(frozen=True)
class Case:
    """One configuration of the suite, run once per seed."""

    name: str
    config: EngineConfig
    seeds: tuple[int, ...]

    @property
    def faulty(self) -> bool:
        return self.config.fault is not None


@dataclass
class Outcome:
    case: Case
    seed: int
    results: RunResults
    races: int
    #: pairs of holds of one lock that overlapped on two lanes (the lock did not exclude)
    broken_locks: int
    #: pairs of a swap-out and a swap-in in flight at once in one transfer process
    both_ways: int
    #: accesses outside their block's lifetime (use after free, freed while in use)
    lifetime: int = 0
    #: ownership findings (blocks handed out or freed while held, reads after reuse, ...)
    ownership: int = 0

    @property
    def mismatches(self) -> int:
        return self.results.integrity.mismatches

    @property
    def nan(self) -> int:
        return self.results.integrity.nan

    @property
    def tokens_equal(self) -> bool:
        return self.results.reference is not None and self.results.reference.equal

    @property
    def flagged(self) -> bool:
        """Something is wrong with this run by any of the four checks."""
        return bool(
            self.races or self.lifetime or self.ownership or self.mismatches or self.nan
            or not self.tokens_equal
        )  # fmt: skip

    @property
    def passed(self) -> bool:
        if self.case.faulty:
            return self.flagged
        # the corrected lock must exclude; the baseline's need not (it did not in FastDeploy)
        lock_ok = self.case.config.kv_lock != LockMode.IPC_PER_THREAD or self.broken_locks == 0
        return lock_ok and not self.flagged


def cases(short: bool = False, requests: int | None = None) -> list[Case]:
    """The suite: every lock mode (and the asynchronous swap-in) on both workloads, DP=2 with
    EP and TP=2 on the heavy one, the asynchronous engine; Cache Manager V1 with and without
    the lock on both workloads, on nested prefixes with a transfer chunk that is not the block
    size, under DP=2 with EP and TP=2; each seeded fault under its pressure. ``short``: one
    seed of six cases."""
    n = requests or (16 if short else 32)
    base = EngineConfig(requests=n, workload="swap-heavy")
    v1 = base.with_(cache_manager=CacheManagerMode.V1)
    if short:
        return [
            Case("ipc", base.with_(kv_lock=LockMode.IPC), (0,)),
            Case("none async", base.with_(kv_lock=LockMode.NONE, swap_in=SwapIn.ASYNC), (0,)),
            Case(
                "dp2-ep ipc", base.with_(kv_lock=LockMode.IPC, dp=2, ep=True, requests=2 * n), (0,)
            ),
            Case("tp2 ipc", base.with_(kv_lock=LockMode.IPC, tp=2), (0,)),
            Case("v1 none", v1, (0,)),
            Case("fault no-wait-swap-in", base.with_(fault=Fault.NO_WAIT_SWAP_IN), (0,)),
        ]
    seeds = (0, 1)
    out = []
    for workload in ("prefix-swap", "swap-heavy"):
        for lock in LockMode:
            out.append(Case(f"{lock} {workload}", base.with_(kv_lock=lock, workload=workload),
                            seeds))  # fmt: skip
        out.append(Case(f"none async {workload}",
                        base.with_(workload=workload, swap_in=SwapIn.ASYNC), seeds))  # fmt: skip
        for lock in (LockMode.IPC, LockMode.NONE):
            out.append(Case(f"v1 {lock} {workload}", v1.with_(kv_lock=lock, workload=workload),
                            seeds))  # fmt: skip
    out.append(Case("v1 none nested-prefix chunk 24",
                    v1.with_(workload="nested-prefix", chunk_tokens=24), seeds))  # fmt: skip
    for lock in (LockMode.IPC, LockMode.NONE):
        ep = base.with_(kv_lock=lock, dp=2, ep=True, requests=2 * n)  # as many per group
        for name, cfg in ((f"dp2-ep {lock}", ep), (f"tp2 {lock}", base.with_(kv_lock=lock, tp=2))):
            out.append(Case(name, cfg, (0,)))
            out.append(Case(f"v1 {name}", cfg.with_(cache_manager=CacheManagerMode.V1), (0,)))
    for lock in (LockMode.IPC, LockMode.NONE):
        out.append(Case(f"device-async {lock}", base.with_(kv_lock=lock, device_async=True),
                        (0,)))  # fmt: skip
    out.append(Case("device-async none store-on-fill",
                    base.with_(device_async=True, store_on_fill=True), (0,)))  # fmt: skip
    for fault in Fault:  # each turns on the modes it needs; under its reproduction's pressure
        cfg = base.with_(
            fault=fault, **{"workload": "prefix-swap", **FAULT_PRESSURE.get(fault, {})}
        )
        out.append(Case(f"fault {fault}", cfg, (0,)))
    return out


def swaps_both_ways(trace: Trace) -> int:
    """Pairs of a to_cpu and a to_gpu ``swap`` span overlapping in time in one process."""
    spans = trace.spans[(trace.spans["name"].astype(str) == S.SWAP) & (trace.spans["end"] != -1)]
    direction = trace.attr(S.SWAP_DIRECTION).reindex(spans["span_id"]).to_numpy(dtype=object)
    pairs = 0
    for pid in np.unique(spans["pid"].to_numpy()):
        mine = (spans["pid"] == pid).to_numpy()
        start, end = spans["start"].to_numpy()[mine], spans["end"].to_numpy()[mine]
        out = direction[mine] == S.TO_CPU
        for i in np.flatnonzero(out):
            pairs += int(((start[~out] < end[i]) & (end[~out] > start[i])).sum())
    return pairs


class Suite:
    def __init__(self, root: Path, log=print) -> None:
        self.root = root
        self.log = log
        self._references: dict[EngineConfig, RunResults] = {}

    def reference(self, cfg: EngineConfig) -> RunResults:
        """The reference run of ``cfg`` (one per seed and parallel layout, shared by modes)."""
        key = reference_config(cfg)
        if key not in self._references:
            n = len(self._references)
            run_dir = self.root / "references" / f"{n}-seed{cfg.seed}"
            self._references[key] = run_engine(key, ProbeConfig(run_dir=str(run_dir)))
        return self._references[key]

    def run(self, case: Case, seed: int) -> Outcome:
        cfg = case.config.with_(seed=seed)
        run_dir = self.root / case.name.replace(" ", "_") / f"seed{seed}"
        results = run_engine(cfg, ProbeConfig(run_dir=str(run_dir)))
        ref = self.reference(cfg)
        check = compare_tokens(results.outputs, ref, Path(ref.trace))
        results = replace(results, reference=check)
        trace = load(run_dir)
        counts = find_hazards(trace).counts
        out = Outcome(case, seed, results, counts["races"], counts["broken_locks"],
                      swaps_both_ways(trace), counts["lifetime"], counts["ownership"])  # fmt: skip
        self.log(
            f"{case.name:<32} seed {seed}: {results.swaps.to_cpu}/{results.swaps.to_gpu} swaps, "
            f"{out.both_ways} both ways at once, {out.races} races, {out.lifetime} lifetime "
            f"violations, {out.ownership} ownership findings, {out.broken_locks} broken-lock "
            f"pairs, {out.mismatches} mismatches, "
            f"{out.nan} NaN/Inf, tokens "
            f"{'=' if out.tokens_equal else '!='} reference"
            f"{'' if out.passed else '  FAILED'}"
        )
        return out

    def run_all(self, suite: list[Case]) -> list[Outcome]:
        return [self.run(case, seed) for case in suite for seed in case.seeds]


@dataclass
class Row:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)

    def cells(self) -> list[str]:
        o = self.outcomes
        equal = sum(x.tokens_equal for x in o)
        return [
            self.name,
            str(len(o)),
            str(sum(x.races for x in o)),
            str(sum(x.lifetime for x in o)),
            str(sum(x.ownership for x in o)),
            f"{sum(x.broken_locks > 0 for x in o)}/{len(o)}",
            str(sum(x.mismatches for x in o)),
            str(sum(x.nan for x in o)),
            f"{equal}/{len(o)}",
            str(sum(x.both_ways for x in o)),
            ("flagged" if all(x.flagged for x in o) else "NOT FLAGGED")
            if o[0].case.faulty
            else ("pass" if all(x.passed for x in o) else "FAIL"),
        ]


HEADER = ["case", "runs", "races", "lifetime", "ownership", "broken lock", "mismatches",
          "NaN/Inf", "tokens = ref", "swaps both ways at once", "verdict"]  # fmt: skip


def summary(outcomes: list[Outcome]) -> str:
    """The summary table (Markdown)."""
    rows: dict[str, Row] = {}
    for o in outcomes:
        rows.setdefault(o.case.name, Row(o.case.name)).outcomes.append(o)
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows.values()]
    clean = [o for o in outcomes if not o.case.faulty]
    total = (
        f"{len(outcomes)} runs ({len(clean)} correct, {len(outcomes) - len(clean)} seeded "
        f"faults): {sum(o.races for o in clean)} races, "
        f"{sum(o.lifetime for o in clean)} lifetime violations, "
        f"{sum(o.ownership for o in clean)} ownership findings, "
        f"{sum(o.mismatches for o in clean)} mismatches, {sum(o.nan for o in clean)} NaN/Inf, "
        f"{sum(o.tokens_equal for o in clean)}/{len(clean)} token-equal to the reference; "
        f"faults flagged {sum(o.flagged for o in outcomes if o.case.faulty)}/"
        f"{len(outcomes) - len(clean)}"
    )
    return "\n".join([*lines, "", total])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fdprof.regress", description=__doc__)
    ap.add_argument("--short", action="store_true", help="one seed of six cases (make test)")
    ap.add_argument("--out", type=Path, default=Path("out/regress"), help="run directories")
    ap.add_argument("--requests", type=int, default=None, help="requests per run")
    args = ap.parse_args(argv)
    wall0, cpu0 = time.monotonic(), _cpu_s()
    outcomes = Suite(args.out).run_all(cases(args.short, args.requests))
    print(summary(outcomes))
    wall, cpu = time.monotonic() - wall0, _cpu_s() - cpu0
    print(f"wall {wall / 60:.1f} min, CPU {cpu / 60:.1f} min (this process and the engine "
          f"processes it ran)")  # fmt: skip
    return 0 if all(o.passed for o in outcomes) else 1


def _cpu_s() -> float:
    """CPU seconds of this process and of the engine processes it ran that have ended."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + ended_children_cpu_s()


if __name__ == "__main__":
    sys.exit(main())
