"""One A/B run judged from its trace alone: throughput, steps, serving latency, hazards,
integrity, a timeline excerpt, and its Perfetto copy.

Why from the trace: a command's own output is whatever its author printed; the trace says the
same thing for every engine. Throughput is requests finished per second of serving (first
request's arrival to last one's end) where the trace has ``request`` spans, else step tokens
(``batch.tokens``) per second of steps, else steps per second: the same work in both modes, so
the ratio is the gain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis import python_time
from fdprof.analysis.breakdown import (
    DEVICE_PARTS,
    Part,
    device_breakdown,
    empty_steps,
    step_breakdown,
    working,
)
from fdprof.analysis.device_time import device_overlap, host_overlap
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.predict import predict_races
from fdprof.analysis.serving import finished_requests, request_latencies
from fdprof.analysis.whatif import what_if_drop_lock
from fdprof.errors import FdprofError
from fdprof.formats.rundir import MANIFEST
from fdprof.trace import load, save
from fdprof.trace.jsonstream import loads
from fdprof.trace.model import Trace

#: throughput units, in order of preference (the first every run of a session has wins)
UNITS = ("requests/s", "tokens/s", "steps/s")
#: span names drawn in the timeline excerpt, one lane each, with the part each one paints
TIMELINE_SPANS = {
    S.EXECUTE_MODEL: Part.COMPUTE,
    S.ISSUE_SWAP_TASK: Part.SWAP_BLOCKING,
    S.SWAP: Part.SWAP_BLOCKING,
    S.LOCK_WAIT: Part.LOCK_WAIT,
}
TIMELINE_WINDOW_NS = 400_000_000
#: a run whose manifest says this did not finish
_FAILED = ("crashed", "failed", "interrupted", "running")


@dataclass
class RunOutcome:
    """One run and what the analyses found in it (times in ns unless named otherwise)."""

    mode: str
    label: str
    index: int
    run_dir: Path
    throughput: dict[str, float]
    breakdown: pd.DataFrame
    hazard_counts: dict[str, int]
    race_kinds: pd.DataFrame
    mismatches: int
    #: one row per finished request: ``e2e``, ``ttft`` and ``tpot`` (NaN where unknown)
    requests: pd.DataFrame
    what_if_newly_unordered: int | None = None
    #: share of swap time overlapped with compute: ``host`` (the calls), ``device`` (the
    #: stream work; None without device spans)
    swap_overlap: dict[str, float | None] = field(default_factory=dict)
    #: mean ns per step of each part of the device time (``gpu_compute`` ...); None without
    #: device work
    device_breakdown: dict[str, float] | None = None
    #: span name -> (start, end) ms of its spans in the excerpt window
    timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    timeline_window: tuple[float, float] = (0.0, 0.0)
    perfetto: Path | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    #: py-spy's samples attributed to the spans, raw (summable over runs); None without them
    python_time: tuple[pd.DataFrame, pd.DataFrame] | None = None
    #: locks whose holds overlapped on two lanes (``HazardReport.untrusted_locks``)
    untrusted_locks: tuple[str, ...] = ()
    #: what the trace reader warned about (:class:`fdprof.trace.model.TraceWarning`)
    warnings: list = field(default_factory=list)

    @property
    def name(self) -> str:
        """How reports name the run: its mode and pair index."""
        return f"{self.label} #{self.index}"

    @property
    def working(self) -> pd.DataFrame:
        """The steps that scheduled tokens (as ``fdprof diff`` counts them)."""
        return working(self.breakdown)

    @property
    def step_ms(self) -> np.ndarray:
        """Durations of the steps that did work (ms)."""
        return self.working["duration"].to_numpy(float) / 1e6

    @property
    def empty_steps(self) -> dict[str, float | int | None]:
        """Count, time (ns) and share of the steps that scheduled no tokens."""
        return empty_steps(self.breakdown)

    def to_json(self, unit: str) -> dict[str, Any]:
        out = {
            "mode": self.mode,
            "label": self.label,
            "index": self.index,
            "throughput": self.throughput.get(unit),
            "throughput_unit": unit,
            "steps": len(self.breakdown),
            "empty_steps": self.empty_steps["count"],
            "requests": len(self.requests),
            "integrity_mismatches": self.mismatches,
            "hazards": self.hazard_counts,
            "untrusted_locks": list(self.untrusted_locks),
            "trace": str(self.run_dir),
            "perfetto": None if self.perfetto is None else str(self.perfetto),
        }
        if self.what_if_newly_unordered is not None:
            out["what_if_drop_lock_newly_unordered"] = self.what_if_newly_unordered
        out["swap_overlap"] = self.swap_overlap
        return out


def analyse_run(
    mode: str, label: str, index: int, run_dir: Path, what_if: bool, perfetto_dir: Path | None
) -> RunOutcome:
    """Load ``run_dir``'s trace and judge it; a run that did not finish, or whose trace has
    no steps, is an error (the session names the run)."""
    manifest = _manifest(run_dir)
    if manifest.get("status") in _FAILED:
        why = manifest.get("error") or f"status {manifest['status']!r}"
        raise FdprofError(f"the run did not finish: {why}")
    trace = load(run_dir)
    breakdown = step_breakdown(trace)
    if breakdown.empty:
        raise FdprofError(f"{run_dir}: the trace has no steps")
    wi = what_if_drop_lock(trace) if what_if else None
    # a mode that asks for the lock what-if also gets WCP's predicted races beside it: the two
    # answers to "was the lock needed?" (counts["predicted"])
    hazards = predict_races(trace) if wi is not None else find_hazards(trace)
    outcome = RunOutcome(
        mode, label, index, run_dir, throughput(trace, breakdown), breakdown, hazards.counts,
        hazards.kinds, _mismatches(trace, manifest), request_latencies(trace),
        None if wi is None else len(wi.newly_unordered), manifest=manifest,
        untrusted_locks=hazards.untrusted_locks,
    )  # fmt: skip
    outcome.swap_overlap, outcome.device_breakdown = _device_side(trace, breakdown)
    outcome.timeline, outcome.timeline_window = _timeline_excerpt(trace)
    outcome.python_time = python_time.attribute(trace)
    outcome.warnings = list(trace.warnings)
    if perfetto_dir is not None:
        perfetto_dir.mkdir(parents=True, exist_ok=True)
        outcome.perfetto = perfetto_dir / f"{mode}-{index}.json"
        save(trace, outcome.perfetto, "perfetto")
    return outcome


def _device_side(
    trace: Trace, breakdown: pd.DataFrame
) -> tuple[dict[str, float | None], dict[str, float] | None]:
    """Swap/compute overlap on host and device lanes, and the mean device breakdown."""
    host, device = host_overlap(trace.spans), device_overlap(trace.spans)
    overlap = {"host": None if host is None else host.ratio,
               "device": None if device is None else device.ratio}  # fmt: skip
    parts = device_breakdown(trace, breakdown)
    if parts is not None:  # the steps that did work, as the host breakdown
        parts = parts.loc[working(breakdown).index]
    means = None if parts is None else {p: float(parts[p].mean()) for p in DEVICE_PARTS}
    return overlap, means


def _manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not path.exists():
        return {}
    try:
        return loads(path.read_text())
    except ValueError as exc:
        raise FdprofError(f"{path}: not JSON ({exc})") from None


def throughput(trace: Trace, breakdown: pd.DataFrame) -> dict[str, float]:
    """The run's throughput in every unit of :data:`UNITS` its trace supports."""
    out: dict[str, float] = {}
    req = finished_requests(trace)
    if len(req):
        window = (req["end"].max() - req["start"].min()) / 1e9
        if window > 0:
            out["requests/s"] = len(req) / window
    step_window = (breakdown["end"].max() - breakdown["start"].min()) / 1e9
    if step_window > 0:
        tokens = breakdown["tokens"].sum()
        if breakdown["tokens"].notna().any() and tokens > 0:
            out["tokens/s"] = float(tokens) / step_window
        out["steps/s"] = len(breakdown) / step_window
    return out


def _mismatches(trace: Trace, manifest: dict[str, Any]) -> int:
    """Blocks whose content did not match what was written: ``kv.mismatches`` in the trace,
    or the run's own integrity count in ``run.json`` where that says more."""
    listed = trace.attr(S.KV_MISMATCHES)
    in_trace = int(sum(len(v) for v in listed if v is not None)) if len(listed) else 0
    integrity = (manifest.get("results") or {}).get("integrity") or {}
    return max(in_trace, int(integrity.get("mismatches") or 0))


def _timeline_excerpt(trace: Trace) -> tuple[dict, tuple[float, float]]:
    """Spans of :data:`TIMELINE_SPANS` in a window around the middle swap (ms)."""
    spans = trace.spans[trace.spans["end"] != -1]
    names = spans["name"].astype(str)
    swaps = spans[names == S.SWAP]
    if swaps.empty:
        center = int(spans["start"].median()) if not spans.empty else 0
    else:
        center = int(swaps["start"].iloc[len(swaps) // 2])
    t0, t1 = center - TIMELINE_WINDOW_NS // 4, center + 3 * TIMELINE_WINDOW_NS // 4
    lanes = {}
    for span_name in TIMELINE_SPANS:
        sel = spans[(names == span_name) & (spans["end"] > t0) & (spans["start"] < t1)]
        lanes[span_name] = [
            (max(s, t0) / 1e6, min(e, t1) / 1e6)
            for s, e in zip(sel["start"], sel["end"], strict=True)
        ]
    return lanes, (t0 / 1e6, t1 / 1e6)
