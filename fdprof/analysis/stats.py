"""Spread and ratio statistics: every number a comparison reports carries its uncertainty.

Two kinds of unit, two methods. Many units (the steps of a run): a seeded percentile
bootstrap, each sample resampled on its own (the two runs are independent), so the same inputs
always give the same interval; where the mix of units is fixed by design (a workload has so many
prefill steps and so many decode steps), units are resampled within strata, so the interval
reflects how long the work took, not a redrawn workload. Few units (one value per run, paired
by seed): a Student-t interval, on logs for ratios; a bootstrap of five pairs has only 126
distinct resamples and covers the true ratio about 83% of the time for a nominal 95%
(``tests/analysis/test_stats_timeline.py`` measures it), the t interval 95%.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fdprof.errors import FdprofError

#: statistic of a sample under resampling: (sample, (n_boot, n) row indices) -> (n_boot,)
Statistic = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _rate(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Rows are (amount, time): total amount per total time, e.g. tokens per second; a
    resample whose time is 0 gives inf or nan, which the callers refuse with a reason."""
    num, den = np.ascontiguousarray(a[:, 0]), np.ascontiguousarray(a[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        return num[idx].sum(axis=1) / den[idx].sum(axis=1)


STATISTICS: dict[str, Statistic] = {
    "median": lambda a, idx: np.median(a[idx], axis=1),
    "mean": lambda a, idx: a[idx].mean(axis=1),
    "rate": _rate,
}


def spread(values: Any) -> dict[str, float | int | None]:
    """n, mean, p50, p90, p99, min and max of ``values`` (None when empty)."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return dict.fromkeys(("n", "mean", "p50", "p90", "p99", "min", "max"), None) | {"n": 0}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"n": int(a.size), "mean": float(a.mean()), "p50": float(p50), "p90": float(p90),
            "p99": float(p99), "min": float(a.min()), "max": float(a.max())}  # fmt: skip


@dataclass(frozen=True)
class RatioCI:
    """A ratio (``statistic(new) / statistic(base)``, or a mean of ratios) with its confidence
    interval and how that was computed."""

    ratio: float
    lo: float
    hi: float
    confidence: float
    statistic: str
    method: str

    @property
    def includes_one(self) -> bool:
        """True when the interval cannot tell the two apart."""
        return self.lo <= 1.0 <= self.hi

    def to_json(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "ci95": [self.lo, self.hi], "confidence": self.confidence,
                "statistic": self.statistic, "method": self.method,
                "includes_one": self.includes_one}  # fmt: skip


def ratio_ci(
    base: Any,
    new: Any,
    statistic: str = "median",
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    strata: tuple[Any, Any] | None = None,
    quantity: str = "ratio",
) -> RatioCI:
    """``statistic(new) / statistic(base)`` and its percentile-bootstrap CI, the two samples
    resampled independently. Samples are 1-D, or (n, 2) rows of (amount, time) for
    ``statistic="rate"``. ``strata``: a label per unit of (base, new); each stratum is then
    resampled on its own, keeping its size. ``quantity`` names it when there is no ratio."""
    (whole_b, whole_n), (reps_b, reps_n) = _two_samples(
        base, new, statistic, confidence, n_boot, seed, strata
    )
    if whole_b == 0 or not np.isfinite(whole_b):  # a rate over no time is inf or nan
        raise FdprofError(f"{quantity}: the base {statistic} is {whole_b:g}: no ratio")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = reps_n / reps_b
    return _interval(whole_n / whole_b, ratios, confidence, statistic, _bootstrap(n_boot, seed))


def geometric_mean_ci(ratios: Any, statistic: str, *, confidence: float = 0.95) -> RatioCI:
    """Geometric mean of a few independent ratios (one per run, or per seed pair of runs) with a
    Student-t interval on their logs: the interval for few units (see the module docstring)."""
    r = _sample(ratios)
    if (r <= 0).any() or not np.isfinite(r).all():
        raise FdprofError("a geometric mean needs positive finite ratios")
    mean, lo, hi = _t_interval(np.log(r), confidence)
    method = f"Student t on log ratios, {len(r)} units"
    return RatioCI(float(np.exp(mean)), float(np.exp(lo)), float(np.exp(hi)), confidence,
                   statistic, method)  # fmt: skip


@dataclass(frozen=True)
class DifferenceCI:
    """``statistic(new) - statistic(base)`` with a bootstrap confidence interval."""

    delta: float
    lo: float
    hi: float
    confidence: float
    statistic: str

    @property
    def includes_zero(self) -> bool:
        """True when the interval cannot tell the two apart."""
        return self.lo <= 0.0 <= self.hi


def difference_ci(
    base: Any,
    new: Any,
    statistic: str = "mean",
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    strata: tuple[Any, Any] | None = None,
) -> DifferenceCI:
    """``statistic(new) - statistic(base)`` and its percentile-bootstrap CI, resampled as in
    :func:`ratio_ci` (independently, within ``strata`` when given): how far a per-step mean
    moved, in its own unit, when a ratio of parts that may be 0 would say nothing."""
    (whole_b, whole_n), (reps_b, reps_n) = _two_samples(
        base, new, statistic, confidence, n_boot, seed, strata
    )
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(reps_n - reps_b, [tail, 100 - tail])
    return DifferenceCI(whole_n - whole_b, float(lo), float(hi), confidence, statistic)


def paired_difference_ci(new: Any, base: Any, *, confidence: float = 0.95) -> DifferenceCI:
    """``mean(new - base)`` over a few paired units (e.g. runs of one seed in each mode), with a
    Student-t interval (see the module docstring)."""
    mean, lo, hi = _t_interval(_sample(new) - _sample(base), confidence)
    return DifferenceCI(mean, lo, hi, confidence, "mean")


def _t_interval(x: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean of ``x`` and its Student-t interval, ``n - 1`` degrees of freedom."""
    if not 0 < confidence < 1:
        raise FdprofError(f"confidence must be between 0 and 1, got {confidence}")
    if len(x) < 2:
        raise FdprofError("an interval over units needs at least two of them")
    # imported here: every command loads this module, only A/B summaries need the quantile, and
    # scipy.special costs 0.4 s to import (scipy.stats, 1.2 s)
    from scipy.special import stdtrit

    mean = float(x.mean())
    quantile = float(stdtrit(len(x) - 1, (1 + confidence) / 2))
    half = quantile * float(x.std(ddof=1)) / np.sqrt(len(x))
    return mean, mean - half, mean + half


def _two_samples(base, new, statistic, confidence, n_boot, seed, strata):
    """The statistic of each sample and ``n_boot`` replicates of each, independently drawn."""
    stat = _statistic(statistic, confidence)
    b, n = _sample(base), _sample(new)
    sb, sn = strata if strata is not None else (None, None)
    rng = np.random.default_rng(seed)
    reps_n = _resample(n, stat, n_boot, rng, sn)
    reps_b = _resample(b, stat, n_boot, rng, sb)
    return (_whole(stat, b), _whole(stat, n)), (reps_b, reps_n)


def paired_ratio_ci(
    num: Any, den: Any, *, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> RatioCI:
    """``sum(num) / sum(den)`` over paired units (e.g. steps: actual and ideal time), with the
    units resampled together."""
    rows = np.column_stack([_sample(num), _sample(den)])
    if rows[:, 1].sum() == 0:
        raise FdprofError("the denominator sums to 0: no ratio")
    return bootstrap_ci(rows, _rate, "rate", confidence=confidence, n_boot=n_boot, seed=seed)


def bootstrap_ci(
    rows: Any,
    stat: Statistic,
    name: str,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> RatioCI:
    """Any ratio-valued ``stat`` of ``rows`` (units such as steps, each row one unit's columns,
    resampled together) with its percentile-bootstrap CI."""
    if not 0 < confidence < 1:
        raise FdprofError(f"confidence must be between 0 and 1, got {confidence}")
    a = _sample(rows)
    rng = np.random.default_rng(seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = _resample(a, stat, n_boot, rng)
    return _interval(_whole(stat, a), ratios, confidence, name, _bootstrap(n_boot, seed))


def _bootstrap(n_boot: int, seed: int) -> str:
    return f"percentile bootstrap, {n_boot} resamples, seed {seed}"


def _statistic(name: str, confidence: float) -> Statistic:
    if name not in STATISTICS:
        raise FdprofError(f"unknown statistic {name!r} (one of {', '.join(STATISTICS)})")
    if not 0 < confidence < 1:
        raise FdprofError(f"confidence must be between 0 and 1, got {confidence}")
    return STATISTICS[name]


def _whole(stat: Statistic, a: np.ndarray) -> float:
    """The statistic of the sample itself."""
    return float(stat(a, np.arange(len(a))[None])[0])


def _sample(values: Any) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if len(a) == 0:
        raise FdprofError("a ratio needs at least one value on each side")
    return a


def _resample(
    a: np.ndarray, stat: Statistic, n_boot: int, rng: np.random.Generator, strata: Any = None
) -> np.ndarray:
    """``n_boot`` bootstrap replicates of ``stat(a)``, in chunks that bound memory; with
    ``strata`` (a label per row), rows are drawn within their stratum."""
    groups = [np.arange(len(a))]
    if strata is not None:
        labels = np.asarray(strata)
        if len(labels) != len(a):
            raise FdprofError(f"{len(labels)} strata labels for {len(a)} units")
        groups = [np.flatnonzero(labels == v) for v in np.unique(labels)]
    out = np.empty(n_boot)
    chunk = max(1, 4_000_000 // len(a))
    for i in range(0, n_boot, chunk):
        k = min(chunk, n_boot - i)
        idx = [g[rng.integers(0, len(g), (k, len(g)))] for g in groups]
        out[i : i + k] = stat(a, np.concatenate(idx, axis=1))
    return out


def _interval(ratio, ratios, confidence, statistic, method) -> RatioCI:
    tail = (1 - confidence) / 2 * 100
    finite = ratios[np.isfinite(ratios)]  # a resample with a zero denominator has no ratio
    lo, hi = np.percentile(finite, [tail, 100 - tail]) if len(finite) else (np.nan, np.nan)
    return RatioCI(ratio, float(lo), float(hi), confidence, statistic, method)
