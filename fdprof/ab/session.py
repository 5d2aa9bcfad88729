"""An A/B session: two modes, K runs each, interleaved, judged from their traces.

Runs are paired by index and alternate which mode goes first (ABBA), so drift of a noisy
machine hits both modes alike; the gain is the geometric mean of the pairs' throughput ratios
with a Student-t CI over the pairs (few units: see :mod:`fdprof.analysis.stats`). Every run is
also checked (hazards, integrity; the lock what-if on modes that ask for it). The same session
serves ``fdprof ab --baseline CMD --candidate CMD``, the built-in lock A/B (:func:`lock_arms`)
and Cache Manager V1 against the old path (:func:`cache_manager_arms`); the result is plain
data that :mod:`fdprof.report.ab` turns into a report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fdprof import files
from fdprof.ab.arms import Arm, EngineArm
from fdprof.ab.runs import UNITS, RunOutcome, analyse_run
from fdprof.ab.verdict import RunSafety, Verdict, merge_kinds
from fdprof.analysis import python_time
from fdprof.analysis.breakdown import PARTS, ideal_speedup
from fdprof.analysis.serving import SERVING
from fdprof.analysis.stats import (
    DifferenceCI,
    RatioCI,
    bootstrap_ci,
    geometric_mean_ci,
    paired_difference_ci,
    spread,
)
from fdprof.capture.plan import CapturePlan
from fdprof.errors import FdprofError
from fdprof.semconv import CacheManagerMode, LockMode, SwapIn

BASELINE, CANDIDATE = "baseline", "candidate"
PERCENTILES = (50, 90, 99)

Progress = Callable[[int, int, str], None]


@dataclass
class ABResult:
    arms: tuple[Arm, Arm]
    runs: list[RunOutcome]
    unit: str
    gain: RatioCI
    ideal: RatioCI
    out_dir: Path
    #: ``--require-gain``: the least acceptable lower bound of the gain's CI
    require_gain: float | None = None
    report_files: dict[str, str] = field(default_factory=dict)

    @property
    def labels(self) -> tuple[str, str]:
        return self.arms[0].label, self.arms[1].label

    @property
    def modes(self) -> tuple[str, str]:
        return self.arms[0].key, self.arms[1].key

    def of(self, mode: str) -> list[RunOutcome]:
        return [r for r in self.runs if r.mode == mode]

    def throughput(self, mode: str) -> list[float]:
        return [r.throughput[self.unit] for r in self.of(mode)]

    def step_ms(self, mode: str) -> np.ndarray:
        return np.concatenate([r.step_ms for r in self.of(mode)])

    def requests(self, mode: str) -> pd.DataFrame:
        return pd.concat([r.requests for r in self.of(mode)], ignore_index=True)

    def _pairs(self) -> list[tuple[RunOutcome, RunOutcome]]:
        base = {r.index: r for r in self.of(self.modes[0])}
        new = {r.index: r for r in self.of(self.modes[1])}
        return [(base[i], new[i]) for i in sorted(base)]

    def _part_ms(self, run: RunOutcome) -> pd.Series:
        """Mean ms per step that did work, by part (``fdprof diff``'s steps)."""
        return run.working[list(PARTS)].mean() / 1e6

    def empty_steps(self, mode: str) -> dict[str, float | int | None]:
        """Steps that scheduled no tokens over the mode's runs: count, total ms, share of the
        step time."""
        runs = [r.empty_steps for r in self.of(mode)]
        total = sum(float(r.breakdown["duration"].sum()) for r in self.of(mode))
        ns = sum(r["total_ns"] for r in runs)
        return {"count": sum(r["count"] for r in runs), "total_ms": ns / 1e6,
                "share": ns / total if total else None}  # fmt: skip

    def breakdown_ms(self, mode: str) -> dict[str, float]:
        """Mean ms per step in each part, every run weighing the same (as in the gain)."""
        runs = pd.DataFrame([self._part_ms(r) for r in self.of(mode)])
        return {part: float(runs[part].mean()) for part in PARTS}

    def swap_overlap(self, mode: str) -> dict[str, float | None]:
        """Mean share of swap time overlapped with compute on host and on device lanes, every
        run weighing the same; None for a side no run measured. A baseline whose device side
        is above zero did not exclude device work."""
        out: dict[str, float | None] = {}
        for side in ("host", "device"):
            known = [r.swap_overlap.get(side) for r in self.of(mode)]
            known = [v for v in known if v is not None]
            out[side] = float(np.mean(known)) if known else None
        return out

    def device_breakdown_ms(self, mode: str) -> dict[str, float] | None:
        """Mean ms per step of each device part over the runs that have device spans."""
        parts = [r.device_breakdown for r in self.of(mode) if r.device_breakdown is not None]
        if not parts:
            return None
        return {p: float(np.mean([b[p] for b in parts])) / 1e6 for p in parts[0]}

    def breakdown_change(self) -> dict[str, DifferenceCI]:
        """Per part, candidate minus baseline mean ms per step over the pairs (as the gain):
        which part the gain came from, with its uncertainty."""
        pairs = [(self._part_ms(b), self._part_ms(n)) for b, n in self._pairs()]
        return {
            part: paired_difference_ci([n[part] for _, n in pairs], [b[part] for b, _ in pairs])
            for part in PARTS
        }

    def serving(self, mode: str, metric: str) -> dict[int, RatioCI] | None:
        """Percentiles of a serving metric over every request of the mode (ms), each with a
        bootstrap CI over the requests; None when the traces do not carry it."""
        values = self.requests(mode)[metric].dropna().to_numpy(float)
        if len(values) < 2:
            return None
        return {q: bootstrap_ci(values, _percentile(q), f"p{q} {metric} ms") for q in PERCENTILES}

    def serving_change(self, metric: str) -> dict[int, RatioCI] | None:
        """Per percentile, the geometric mean over the pairs of candidate / baseline (each run's
        own percentile), Student t over the pairs, as the gain; None when not measured."""
        ratios: dict[int, list[float]] = {q: [] for q in PERCENTILES}
        for base, new in self._pairs():
            b, n = base.requests[metric].dropna(), new.requests[metric].dropna()
            if b.empty or n.empty:
                return None
            for q in PERCENTILES:
                ratios[q].append(float(np.percentile(n, q) / np.percentile(b, q)))
        try:
            return {q: geometric_mean_ci(r, f"p{q} {metric} ratio") for q, r in ratios.items()}
        except FdprofError:  # a zero latency: no ratio
            return None

    def python_time(self, mode: str) -> list[dict[str, Any]]:
        """py-spy's samples inside the spans of every run of ``mode``, per span name."""
        return python_time.summary(python_time.combine([r.python_time for r in self.of(mode)]))

    def hazards(self, mode: str) -> dict[str, int]:
        runs = self.of(mode)
        return {k: sum(r.hazard_counts[k] for r in runs) for k in runs[0].hazard_counts}

    @property
    def integrity_mismatches(self) -> int:
        return sum(r.mismatches for r in self.runs)

    @property
    def what_if_newly_unordered(self) -> int | None:
        counts = [r.what_if_newly_unordered for r in self.runs]
        known = [c for c in counts if c is not None]
        return sum(known) if known else None

    @property
    def verdict(self) -> Verdict:
        safety = [RunSafety(r.name, r.label, r.hazard_counts["races"], r.hazard_counts["latent"],
                            r.mismatches, r.hazard_counts["lifetime"], r.untrusted_locks,
                            r.hazard_counts.get("ownership", 0))
                  for r in self.runs]  # fmt: skip
        kinds = merge_kinds([r.race_kinds for r in self.runs])
        return Verdict(self.gain, self.labels, safety, kinds, self.require_gain)

    def settings(self) -> dict[str, dict[str, Any]]:
        """What each mode ran with: its arm's settings, then what its first run's ``run.json``
        recorded (the engine's own account, e.g. a vLLM configuration)."""
        out = {}
        for arm in self.arms:
            first = self.of(arm.key)[0].manifest.get("config") or {}
            recorded = {k: v for k, v in first.items() if k not in arm.settings()}
            out[arm.key] = {**arm.settings(), **recorded}
        return out

    def to_json(self) -> dict[str, Any]:
        def mode_json(mode: str) -> dict[str, Any]:
            tps = self.throughput(mode)
            serving = {m: _percentiles_json(self.serving(mode, m), "ms") for m in SERVING}
            return {
                "label": dict(zip(self.modes, self.labels, strict=True))[mode],
                "throughput": tps,
                "median": float(np.median(tps)),
                "spread": spread(tps),
                "step_ms": spread(self.step_ms(mode)),
                "empty_steps": self.empty_steps(mode),
                "breakdown_ms": self.breakdown_ms(mode),
                "swap_overlap": self.swap_overlap(mode),
                "device_breakdown_ms": self.device_breakdown_ms(mode),
                "serving_ms": serving,
                "hazards": self.hazards(mode),
                "python_time": self.python_time(mode),
            }  # fmt: skip

        change = {m: _percentiles_json(self.serving_change(m), "ratio") for m in SERVING}
        what_if = self.what_if_newly_unordered
        return {
            "verdict": self.verdict.to_json(),
            "settings": self.settings(),
            "throughput_unit": self.unit,
            "runs": [r.to_json(self.unit) for r in self.runs],
            BASELINE: mode_json(self.modes[0]),
            CANDIDATE: mode_json(self.modes[1]),
            "gain": {"ratio": self.gain.ratio, "ci95": [self.gain.lo, self.gain.hi],
                     "includes_one": self.gain.includes_one, "statistic": self.gain.statistic,
                     "method": self.gain.method},
            "ideal": {"ratio": self.ideal.ratio, "ci95": [self.ideal.lo, self.ideal.hi],
                      "method": self.ideal.method},
            "breakdown_change_ms": {part: {"delta": c.delta, "ci95": [c.lo, c.hi]}
                                    for part, c in self.breakdown_change().items()},
            "serving_change": change,
            "what_if_drop_lock": None if what_if is None else {
                "newly_unordered": what_if, "safe": what_if == 0},
            "integrity_mismatches": self.integrity_mismatches,
            "report": self.report_files,
        }  # fmt: skip


def _percentiles_json(pcts: dict[int, RatioCI] | None, key: str) -> dict[str, Any] | None:
    if pcts is None:
        return None
    return {f"p{q}": {key: c.ratio, "ci95": [c.lo, c.hi]} for q, c in pcts.items()}


def _percentile(q: int):
    return lambda a, idx: np.percentile(a[idx], q, axis=1)


def interleaved(runs: int) -> list[tuple[int, int]]:
    """(arm, pair) in ABBA order: pair i runs arm 0 first when i is even."""
    plan = []
    for i in range(runs):
        plan += [(0, i), (1, i)] if i % 2 == 0 else [(1, i), (0, i)]
    return plan


def run_session(
    arms: tuple[Arm, Arm],
    runs: int,
    out_dir: Path,
    progress: Progress | None = None,
    perfetto: bool = True,
) -> ABResult:
    """Run both arms ``runs`` times each, interleaved; judge every run; the gain of arm 1 over
    arm 0. A run that fails, or leaves no trace with steps, stops the session with an error
    naming it (exit 2)."""
    if runs < 2:
        raise FdprofError("--runs must be at least 2 (a confidence interval needs repeats)")
    if arms[0].key == arms[1].key:
        raise FdprofError("the two modes need different names")
    files.make_dir(out_dir)
    plan = interleaved(runs)
    outcomes: list[RunOutcome] = []
    for n, (which, i) in enumerate(plan):
        arm = arms[which]
        if progress is not None:
            progress(n, len(plan), f"{arm.label} #{i}")
        run_dir = out_dir / "runs" / f"{arm.key}-{i}"
        try:
            arm.run(run_dir, i)
            outcomes.append(analyse_run(arm.key, arm.label, i, run_dir, arm.what_if,
                                        out_dir / "perfetto" if perfetto else None))  # fmt: skip
        except FdprofError as exc:
            raise FdprofError(f"run {arm.label} #{i} ({run_dir}): {exc}") from None
    if progress is not None:
        progress(len(plan), len(plan), "done")
    unit = next((u for u in UNITS if all(u in r.throughput for r in outcomes)), None)
    if unit is None:
        raise FdprofError("no throughput measurable in every run (no requests, no steps)")
    by = {(r.mode, r.index): r for r in outcomes}
    ratios = [by[arms[1].key, i].throughput[unit] / by[arms[0].key, i].throughput[unit]
              for i in range(runs)]  # fmt: skip
    gain = geometric_mean_ci(
        ratios, f"geometric mean of {arms[1].label} / {arms[0].label} {unit} over pairs"
    )
    ideal = geometric_mean_ci(
        [ideal_speedup(by[arms[0].key, i].breakdown) for i in range(runs)],
        f"geometric mean of the {arms[0].label} runs' actual / ideal time",
    )
    return ABResult(arms, outcomes, unit, gain, ideal, out_dir)


def lock_arms(config, capture: CapturePlan | None = None) -> tuple[EngineArm, EngineArm]:
    """The built-in A/B: the engine with the KV lock (baseline, with the lock what-if) and
    without it, on the same workload, seeds and cache manager."""
    capture = capture or CapturePlan(workload=config.workload)
    v1 = "V1 " if config.v1 else ""
    return (
        EngineArm(
            BASELINE,
            f"{v1}baseline (lock)",
            replace(config, kv_lock=LockMode.IPC, swap_in=SwapIn.SYNC, store_on_fill=False),
            capture,
            True,
        ),
        EngineArm(CANDIDATE, f"{v1}lockless", replace(config, kv_lock=LockMode.NONE), capture),
    )


def cache_manager_arms(config, capture: CapturePlan | None = None) -> tuple[EngineArm, EngineArm]:
    """Cache Manager V1 against the old path, both lockless, on the same workload and seeds:
    the old path with its swap-in setting (baseline), V1 (candidate)."""
    capture = capture or CapturePlan(workload=config.workload)
    old = replace(config, kv_lock=LockMode.NONE, cache_manager=CacheManagerMode.OLD)
    v1 = replace(config, kv_lock=LockMode.NONE, cache_manager=CacheManagerMode.V1,
                 swap_in=SwapIn.SYNC, device_async=False, store_on_fill=False)  # fmt: skip
    label = "old path lockless" + (" (async swap-in)" if old.swap_in == SwapIn.ASYNC else "")
    return (EngineArm(BASELINE, label, old, capture),
            EngineArm(CANDIDATE, "V1 lockless", v1, capture))  # fmt: skip
