"""The main job: the baseline (lock) and the lockless engine, K runs each, interleaved.

Runs are paired by seed and alternate which mode goes first (ABBA), so drift of this noisy
machine hits both modes alike; the gain is the geometric mean of the pairs' throughput ratios
with a Student-t CI over the pairs (few units: see :mod:`fdprof.analysis.stats`). Every run is
also checked: hazards, integrity, and on the baseline the lock what-if. The result is plain
data that the renderers in :mod:`fdprof.report` turn into text, Markdown and HTML.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.ab.verdict import RunSafety, Verdict, merge_kinds
from fdprof.analysis.breakdown import PARTS, ideal_speedup, step_breakdown
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.stats import (
    DifferenceCI,
    RatioCI,
    geometric_mean_ci,
    paired_difference_ci,
    spread,
)
from fdprof.analysis.whatif import what_if_drop_lock
from fdprof.capture.plan import CapturePlan
from fdprof.errors import FdprofError
from fdprof.trace import load
from fdprof.trace.model import Trace

MODES = ("ipc", "none")
LABELS = {"ipc": "baseline (lock)", "none": "lockless"}
#: span names drawn in the timeline excerpt, one lane each
TIMELINE_SPANS = (S.EXECUTE_MODEL, S.SWAP, S.ISSUE_SWAP_TASK, S.LOCK_WAIT)
TIMELINE_WINDOW_NS = 400_000_000


@dataclass
class RunOutcome:
    """One engine run and what the analyses found in it."""

    mode: str
    index: int
    seed: int
    results: dict[str, Any]
    hazard_counts: dict[str, int]
    breakdown: pd.DataFrame
    what_if_newly_unordered: int | None = None
    #: the run's races grouped by kind (``HazardReport.kinds``)
    race_kinds: pd.DataFrame = field(default_factory=pd.DataFrame)
    timeline: list[tuple[str, list[tuple[float, float, int]]]] = field(default_factory=list)
    timeline_window: tuple[float, float] = (0.0, 0.0)

    @property
    def tokens_per_s(self) -> float:
        return float(self.results["tokens_per_s"])

    @property
    def name(self) -> str:
        """How reports name the run: its mode and pair index."""
        return f"{LABELS[self.mode]} #{self.index}"

    @property
    def safety(self) -> RunSafety:
        h = self.hazard_counts
        mismatches = self.results["integrity"]["mismatches"]
        return RunSafety(self.name, LABELS[self.mode], h["races"], h["latent"], mismatches)

    def to_json(self) -> dict[str, Any]:
        out = {
            "mode": self.mode,
            "index": self.index,
            "seed": self.seed,
            "tokens_per_s": self.tokens_per_s,
            "wall_s": self.results["wall_s"],
            "steps": self.results["steps"],
            "swaps": self.results["swaps"],
            "integrity": self.results["integrity"],
            "hazards": self.hazard_counts,
            "trace": self.results["trace"],
        }
        if self.what_if_newly_unordered is not None:
            out["what_if_drop_lock_newly_unordered"] = self.what_if_newly_unordered
        return out


@dataclass
class ABResult:
    config: dict[str, Any]
    runs: list[RunOutcome]
    gain: RatioCI
    ideal: RatioCI
    out_dir: Path
    report_files: dict[str, str] = field(default_factory=dict)
    #: ``--require-gain``: the least acceptable lower bound of the gain's CI
    require_gain: float | None = None

    @property
    def verdict(self) -> Verdict:
        kinds = merge_kinds([r.race_kinds for r in self.runs])
        labels = (LABELS[MODES[0]], LABELS[MODES[1]])
        return Verdict(self.gain, labels, [r.safety for r in self.runs], kinds, self.require_gain)

    def of(self, mode: str) -> list[RunOutcome]:
        return [r for r in self.runs if r.mode == mode]

    def tokens_per_s(self, mode: str) -> list[float]:
        return [r.tokens_per_s for r in self.of(mode)]

    def step_ms(self, mode: str) -> np.ndarray:
        return np.concatenate([r.breakdown["duration"].to_numpy() / 1e6 for r in self.of(mode)])

    def _part_ms_per_run(self, mode: str) -> dict[int, pd.Series]:
        """Each run's mean ms per step in each part, by run index."""
        return {r.index: r.breakdown[list(PARTS)].mean() / 1e6 for r in self.of(mode)}

    def breakdown_ms(self, mode: str) -> dict[str, float]:
        """Mean ms per step in each part, every run weighing the same (as in the gain)."""
        runs = pd.DataFrame(list(self._part_ms_per_run(mode).values()))
        return {part: float(runs[part].mean()) for part in PARTS}

    def breakdown_change(self) -> dict[str, DifferenceCI]:
        """Per part, lockless minus baseline mean ms per step over the seed pairs (as the
        gain): which part the gain came from, with its uncertainty."""
        base, new = self._part_ms_per_run("ipc"), self._part_ms_per_run("none")
        idx = sorted(base)
        return {
            part: paired_difference_ci([new[i][part] for i in idx], [base[i][part] for i in idx])
            for part in PARTS
        }

    def hazards(self, mode: str) -> dict[str, int]:
        runs = self.of(mode)
        return {k: sum(r.hazard_counts[k] for r in runs) for k in runs[0].hazard_counts}

    @property
    def integrity_mismatches(self) -> int:
        return sum(r.results["integrity"]["mismatches"] for r in self.runs)

    @property
    def what_if_newly_unordered(self) -> int:
        return sum(r.what_if_newly_unordered or 0 for r in self.of("ipc"))

    def to_json(self) -> dict[str, Any]:
        def mode_json(mode: str) -> dict[str, Any]:
            tps = self.tokens_per_s(mode)
            return {
                "tokens_per_s": tps,
                "median": float(np.median(tps)),
                "spread": spread(tps),
                "step_ms": spread(self.step_ms(mode)),
                "breakdown_ms": self.breakdown_ms(mode),
            }

        return {
            "verdict": self.verdict.to_json(),
            "config": self.config,
            "runs": [r.to_json() for r in self.runs],
            "baseline": mode_json("ipc"),
            "lockless": mode_json("none"),
            "gain": {
                "ratio": self.gain.ratio,
                "ci95": [self.gain.lo, self.gain.hi],
                "includes_one": self.gain.includes_one,
                "statistic": self.gain.statistic,
                "method": self.gain.method,
            },
            "breakdown_change_ms": {
                part: {"delta": c.delta, "ci95": [c.lo, c.hi]}
                for part, c in self.breakdown_change().items()
            },
            "ideal_ratio": self.ideal.ratio,
            "ideal_ci95": [self.ideal.lo, self.ideal.hi],
            "hazards": {"baseline": self.hazards("ipc"), "lockless": self.hazards("none")},
            "what_if_drop_lock": {
                "newly_unordered": self.what_if_newly_unordered,
                "safe": self.what_if_newly_unordered == 0,
            },
            "integrity_mismatches": self.integrity_mismatches,
            "report": self.report_files,
        }


Progress = Callable[[int, int, str], None]


def run_ab(
    config,
    runs: int,
    out_dir: Path,
    capture: CapturePlan | None = None,
    progress: Progress | None = None,
) -> ABResult:
    """Run both modes ``runs`` times each (seeds ``config.seed + i``), analyse every run."""
    from engine.launcher import run_engine

    out_dir.mkdir(parents=True, exist_ok=True)
    capture = capture or CapturePlan(workload=config.workload)
    plan = []
    for i in range(runs):
        order = MODES if i % 2 == 0 else MODES[::-1]
        plan += [(mode, i) for mode in order]
    outcomes: list[RunOutcome] = []
    for n, (mode, i) in enumerate(plan):
        if progress is not None:
            progress(n, len(plan), f"{LABELS[mode]} #{i}")
        seed = config.seed + i
        run_dir = out_dir / "runs" / f"{mode}-{i}"
        cfg = replace(config, kv_lock=mode, seed=seed)
        probe_config = capture.probe_config(run_dir, mode)
        observers, env = capture.observers_and_env(probe_config)
        try:
            results = run_engine(cfg, probe_config, observers, env=env).to_json()
        except FdprofError as exc:
            raise FdprofError(f"run {LABELS[mode]} #{i} ({run_dir}): {exc}") from None
        capture.finish(run_dir)
        outcomes.append(analyse_run(mode, i, seed, results, load(run_dir)))
    if progress is not None:
        progress(len(plan), len(plan), "done")
    base = {r.index: r.tokens_per_s for r in outcomes if r.mode == "ipc"}
    new = {r.index: r.tokens_per_s for r in outcomes if r.mode == "none"}
    gain = geometric_mean_ci(
        [new[i] / base[i] for i in sorted(base)],
        "geometric mean of lockless / baseline tokens/s over seed pairs",
    )
    ideal = geometric_mean_ci(
        [ideal_speedup(r.breakdown) for r in outcomes if r.mode == "ipc"],
        "geometric mean of the baseline runs' actual / ideal time",
    )
    return ABResult({**asdict(config), "runs_per_mode": runs}, outcomes, gain, ideal, out_dir)


def analyse_run(mode: str, index: int, seed: int, results: dict, trace: Trace) -> RunOutcome:
    """Hazards, step breakdown and timeline of one run; on the baseline also the lock what-if,
    whose with-lock half is the run's hazard report (so the detector runs once per edge set)."""
    what_if = what_if_drop_lock(trace) if mode == "ipc" else None
    hazards = what_if.with_lock if what_if is not None else find_hazards(trace)
    outcome = RunOutcome(mode, index, seed, results, hazards.counts, step_breakdown(trace),
                         race_kinds=hazards.kinds)  # fmt: skip
    if what_if is not None:
        outcome.what_if_newly_unordered = len(what_if.newly_unordered)
    outcome.timeline, outcome.timeline_window = _timeline_excerpt(trace)
    return outcome


def _timeline_excerpt(trace: Trace) -> tuple[list, tuple[float, float]]:
    """Lanes of the spans in ``TIMELINE_SPANS`` in a window around the middle swap (ms)."""
    spans = trace.spans[trace.spans["end"] != -1]
    names = spans["name"].astype(str)
    swaps = spans[names == S.SWAP]
    if swaps.empty:
        center = int(spans["start"].median()) if not spans.empty else 0
    else:
        center = int(swaps["start"].iloc[len(swaps) // 2])
    t0, t1 = center - TIMELINE_WINDOW_NS // 4, center + 3 * TIMELINE_WINDOW_NS // 4
    lanes = []
    for kind, span_name in enumerate(TIMELINE_SPANS):
        sel = spans[(names == span_name) & (spans["end"] > t0) & (spans["start"] < t1)]
        boxes = [(s / 1e6, e / 1e6, kind) for s, e in zip(sel["start"], sel["end"], strict=True)]
        lanes.append((span_name, boxes))
    return lanes, (t0 / 1e6, t1 / 1e6)
