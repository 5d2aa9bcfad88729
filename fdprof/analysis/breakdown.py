"""Steps and where their time went: compute, swap blocking, lock wait, idle.

Why: a throughput change alone does not say why. Decomposing each step's wall time (the
categories painted in priority order, so overlapping spans count once) shows where the
time moved between two runs, and gives the ideal gain: the throughput if the baseline's
swaps and lock waits had hidden perfectly behind compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.columns import require
from fdprof.analysis.stats import RatioCI, bootstrap_ci
from fdprof.analysis.timeline import covered, merge, union
from fdprof.errors import FdprofError
from fdprof.trace.model import Trace

STEP_NEEDS = ("span_id", "name", "start", "end", "step")
#: span names of each category, in painting priority (compute first: a swap that runs under
#: compute costs nothing)
CATEGORIES: dict[str, tuple[str, ...]] = {
    "compute": S.COMPUTE_SPANS,
    "lock_wait": (S.LOCK_WAIT,),
    "swap_blocking": S.SWAP_BLOCKING_SPANS,
}
PARTS = (*CATEGORIES, "idle")


def steps(trace: Trace, step_name: str | None = None) -> pd.DataFrame:
    """One row per step: ``step``, ``start``, ``end``, ``duration`` (ns) and ``tokens``
    (from ``batch.tokens`` of the step's spans; NaN where unknown).

    Steps are the spans named ``step_name`` (or starting with it, e.g. ``ProfilerStep#``);
    without it, the ``step`` spans, else each ``fd.step`` id's extent."""
    spans = require(trace.spans, "spans", STEP_NEEDS)
    spans = spans[spans["end"] != -1]
    names = spans["name"].astype(str)
    if step_name:
        sel = spans[(names == step_name) | names.str.startswith(step_name)]
        if sel.empty:
            raise FdprofError(f"no span is named {step_name!r} (or starts with it)")
        out = sel[["step", "start", "end"]].copy()
    elif (names == S.STEP).any():
        out = spans.loc[names == S.STEP, ["step", "start", "end"]].copy()
    elif (spans["step"] >= 0).any():
        g = spans[spans["step"] >= 0].groupby("step")
        out = pd.DataFrame({"start": g["start"].min(), "end": g["end"].max()}).reset_index()
    else:
        raise FdprofError(
            "no steps found: no 'step' spans and no fd.step ids; name a step range with "
            "--step-name (e.g. ProfilerStep#)"
        )
    out = out.sort_values(["start", "end"], kind="stable").reset_index(drop=True)
    if not (out["step"] >= 0).any():
        out["step"] = np.arange(len(out), dtype=np.int64)  # user-named ranges: ordinals
        out["tokens"] = np.nan
    else:
        out["tokens"] = out["step"].map(tokens_by_step(trace)).astype(float)
    out["duration"] = out["end"] - out["start"]
    return out[["step", "start", "end", "duration", "tokens"]]


def tokens_by_step(trace: Trace) -> pd.Series:
    """Tokens per ``fd.step``, summed over the spans that carry ``batch.tokens``."""
    tok = trace.attr(S.BATCH_TOKENS)
    if tok.empty:
        return pd.Series(dtype=float)
    values = pd.to_numeric(tok, errors="coerce").to_numpy(float)
    step = trace.spans.set_index("span_id")["step"].reindex(tok.index).to_numpy()
    s = pd.Series(values, index=step)
    return s[s.index >= 0].groupby(level=0).sum()


def step_breakdown(
    trace: Trace,
    step_name: str | None = None,
    categories: dict[str, tuple[str, ...]] = CATEGORIES,
) -> pd.DataFrame:
    """Each step's ``duration`` split into ``compute``, ``lock_wait``, ``swap_blocking`` and
    ``idle`` (ns; they sum to ``duration``), plus ``blocking_any``: lock wait or swap time in
    the step whether or not compute hid it. A trace with no compute spans (not ours) counts
    every non-step span as compute: busy versus idle."""
    st = steps(trace, step_name)
    spans = trace.spans[trace.spans["end"] != -1]
    names = spans["name"].astype(str)
    lo, hi = st["start"].to_numpy(), st["end"].to_numpy()
    painted = blocking = (np.empty(0, np.int64), np.empty(0, np.int64))
    done = np.zeros(len(st), dtype=np.int64)
    step_names = {step_name or S.STEP}
    out = st.copy()
    for i, (part, members) in enumerate(categories.items()):
        sel = names.isin(members)
        if i == 0 and not sel.any():
            sel = ~names.isin(step_names) & ~names.str.startswith(step_name or "\0")
            for other in list(categories.values())[1:]:
                sel &= ~names.isin(other)
        u = union(spans["start"][sel].to_numpy(), spans["end"][sel].to_numpy())
        painted = merge(painted, u)
        if i > 0:
            blocking = merge(blocking, u)
        total = covered(painted, lo, hi)
        out[part] = total - done
        done = total
    out["blocking_any"] = covered(blocking, lo, hi)
    out["idle"] = out["duration"] - done
    return out


@dataclass(frozen=True)
class IdealGain:
    """Throughput ratio if blocking (swap + lock wait) had hidden behind compute."""

    ratio: RatioCI
    actual_ns: int
    ideal_ns: int

    def to_json(self) -> dict[str, Any]:
        return {"ratio": self.ratio.ratio, "ci95": [self.ratio.lo, self.ratio.hi],
                "actual_ns": self.actual_ns, "ideal_ns": self.ideal_ns}  # fmt: skip


def ideal_gain(trace: Trace, step_name: str | None = None, *, seed: int = 0) -> IdealGain:
    """From the run's own spans: actual over ideal time for the same work, about 1 for a run
    that already overlaps. See :func:`ideal_ratio`."""
    b = step_breakdown(trace, step_name)
    actual, ideal = _actual_and_ideal(_totals(b))
    return IdealGain(ideal_ratio(b, seed=seed), int(actual[0]), int(ideal[0]))


_IDEAL_COLUMNS = ("duration", "idle", "compute", "blocking_any")


def _totals(breakdown: pd.DataFrame) -> np.ndarray:
    """The steps' summed ``_IDEAL_COLUMNS``, as one sample: shape (1, 4)."""
    return breakdown[list(_IDEAL_COLUMNS)].to_numpy(float).sum(axis=0)[None]


def _actual_and_ideal(totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Actual and ideal time of samples of steps, ``totals`` the samples' summed
    ``_IDEAL_COLUMNS``, shaped (samples, 4). Ideal: every swap and lock wait hidden under the
    compute of the run as a whole, not of its own step (a lockless engine's background eviction
    spans several steps), so ``ideal = idle + max(compute, blocking)`` over all the steps: the
    best removing the lock can do while the transfer link stays as fast as it is."""
    duration, idle, compute, blocking = totals.T
    return duration, idle + np.maximum(compute, blocking)


def _speedup_if_hidden(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    totals = np.column_stack([np.ascontiguousarray(a[:, i])[idx].sum(axis=1) for i in range(4)])
    actual, ideal = _actual_and_ideal(totals)
    return actual / ideal


def ideal_speedup(breakdown: pd.DataFrame) -> float:
    """Actual over ideal time of the steps in ``breakdown`` (see :func:`_actual_and_ideal`)."""
    actual, ideal = _actual_and_ideal(_totals(breakdown))
    return float(actual[0] / ideal[0])


def ideal_ratio(breakdown: pd.DataFrame, *, seed: int = 0) -> RatioCI:
    """:func:`ideal_speedup` of one run's steps, with a CI over its steps resampled whole (for
    several runs, take each run's speed-up and :func:`~fdprof.analysis.stats.geometric_mean_ci`
    over the runs)."""
    rows = breakdown[list(_IDEAL_COLUMNS)].to_numpy(float)
    return bootstrap_ci(rows, _speedup_if_hidden, "ideal speed-up", seed=seed)
