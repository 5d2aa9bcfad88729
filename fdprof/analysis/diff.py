"""Trace diff: two runs side by side, and where the time moved between them.

Works on any two traces the model loads: steps come from ``step`` spans / ``fd.step`` ids or
a user-named range (``ProfilerStep#``). Every number carries its spread (p50/p90/p99), and
every ratio a seeded bootstrap 95% CI. Steps that scheduled no tokens
(:func:`~fdprof.analysis.breakdown.scheduled_nothing`: vLLM polling its pending transfers) are
counted apart and left out of step latency, per-token time and the per-step breakdown: they
come and go with timing, and a run with fifty 0.2 ms polls would otherwise show a step latency
many times shorter than one whose real steps did the same work at the same speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis import python_time
from fdprof.analysis.breakdown import (
    DEVICE_PARTS,
    ENVELOPE,
    PARTS,
    device_breakdown,
    empty_steps,
    step_breakdown,
    without_projections,
    working,
)
from fdprof.analysis.columns import json_records, require
from fdprof.analysis.device_time import device_overlap, host_overlap
from fdprof.analysis.serving import SERVING, request_latencies
from fdprof.analysis.stats import RatioCI, difference_ci, ratio_ci, spread
from fdprof.trace.model import Trace

SPAN_NEEDS = ("span_id", "name", "start", "end", "role", "lane")
#: below this many steps a side, a bootstrap of steps gives too narrow an interval: simulated
#: with a known ratio (1,500 draws each), the throughput CI covered it 89% of the time at 6
#: steps, 92% at 10 and 20, 93.5% at 40 (``tests/analysis/test_diff.py``)
FEW_STEPS = 10


@dataclass(frozen=True)
class RunSummary:
    """One run's numbers: ``breakdown`` has one row per step (ns), ``no_tokens`` true for the
    steps that scheduled nothing; ``by_name``/``by_role``/``locks`` one row per group with
    count, total and duration percentiles (ns)."""

    label: str
    breakdown: pd.DataFrame
    tokens: float | None
    seconds: float
    by_name: pd.DataFrame
    by_role: pd.DataFrame
    locks: pd.DataFrame
    #: share of swap time during which ``execute_model`` ran, with its CI over swaps: on host
    #: lanes (the calls), and on device lanes (the work; None without device spans)
    swap_overlap: RatioCI | None
    #: one row per step: its GPU time by :data:`DEVICE_PARTS` (ns); None without device work
    device: pd.DataFrame | None = None
    #: share of the copies' time on device lanes under compute work there; None without any
    device_swap_overlap: RatioCI | None = None
    #: py-spy's samples inside the spans, per span name (:func:`python_time.summary`); empty
    #: without ``--py-spy`` (and then left out of the JSON)
    python_time: list[dict[str, Any]] = field(default_factory=list)
    #: one row per finished request: ``e2e``, ``ttft``, ``tpot`` (ms; NaN where unknown)
    requests: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def n_steps(self) -> int:
        return len(self.breakdown)

    @cached_property
    def working(self) -> pd.DataFrame:
        """The steps that scheduled tokens (:func:`~fdprof.analysis.breakdown.working`); kept,
        as :attr:`per_token` and :attr:`working_device` are: a report reads them dozens of
        times."""
        return working(self.breakdown)

    @property
    def empty_steps(self) -> dict[str, float | int | None]:
        return empty_steps(self.breakdown)

    @cached_property
    def per_token(self) -> pd.Series:
        """Each step that did work and counted its tokens: its duration per scheduled token
        (ns)."""
        w = self.working
        counted = w[w["tokens"] > 0]
        return counted["duration"] / counted["tokens"]

    @property
    def per_token_ns(self) -> dict[str, Any]:
        """Spread of :attr:`per_token` (``n`` 0 without token counts)."""
        return spread(self.per_token)

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.tokens is not None and self.seconds else None

    @property
    def steps_per_s(self) -> float | None:
        return self.n_steps / self.seconds if self.seconds else None

    @property
    def step_latency(self) -> dict[str, Any]:
        """Spread of the durations of the steps that did work."""
        return spread(self.working["duration"])

    def to_json(self) -> dict[str, Any]:
        ov = self.device_swap_overlap
        return {
            "label": self.label, "steps": self.n_steps, "seconds": self.seconds,
            "tokens": self.tokens, "tokens_per_s": self.tokens_per_s,
            "steps_per_s": self.steps_per_s, "step_latency_ns": self.step_latency,
            "working_steps": len(self.working), "empty_steps": self.empty_steps,
            "per_token_ns": self.per_token_ns,
            "breakdown_ns": {p: spread(self.working[p]) for p in PARTS},
            "swap_overlap": None if self.swap_overlap is None else self.swap_overlap.ratio,
            "swap_overlap_ci95": None if self.swap_overlap is None else [
                self.swap_overlap.lo, self.swap_overlap.hi],
            "by_name": json_records(self.by_name), "by_role": json_records(self.by_role),
            "locks": json_records(self.locks),
            "device_swap_overlap": None if ov is None else ov.ratio,
            "device_swap_overlap_ci95": None if ov is None else [ov.lo, ov.hi],
        } | ({"python_time": self.python_time} if self.python_time else {}) | (
            {} if self.device is None else {
            "gpu_ns": {p: spread(self.working_device[p])
                       for p in (*DEVICE_PARTS, "gpu_window")},
            "gpu_share": {p: _share(self.working_device, p, "gpu_window") for p in DEVICE_PARTS},
        })  # fmt: skip

    @cached_property
    def working_device(self) -> pd.DataFrame:
        """The device breakdown of the steps that did work."""
        assert self.device is not None
        return self.device.loc[self.working.index]


@dataclass(frozen=True)
class DiffResult:
    base: RunSummary
    new: RunSummary
    #: new/base tokens per second (steps per second when a trace has no token counts)
    throughput: RatioCI
    throughput_unit: str
    #: new/base median latency of the steps that did work
    step_latency: RatioCI
    #: mean ns per step of each part, base and new, and the change: where the time moved
    moved: pd.DataFrame
    by_name: pd.DataFrame
    by_role: pd.DataFrame
    #: as ``moved``, for the GPU time per step (empty unless both traces have device work)
    device_moved: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: new/base median step time per scheduled token over the steps that did work; None
    #: unless both traces count tokens
    per_token: RatioCI | None = None
    #: per serving metric (:data:`~fdprof.analysis.serving.SERVING`) measured in both traces:
    #: new/base median over requests
    serving: dict[str, RatioCI] = field(default_factory=dict)

    @property
    def cautions(self) -> list[str]:
        """What a reader must know before trusting the intervals, one sentence each."""
        b, n = len(self.base.working), len(self.new.working)
        if min(b, n) >= FEW_STEPS:
            return []
        return [
            f"only {b} and {n} steps: intervals that resample fewer than "
            f"{FEW_STEPS} steps are too narrow (a nominal 95% covered 89% at 6 steps in "
            "simulation); record more steps"
        ]

    @property
    def throughput_resampling(self) -> str:
        """How the throughput CI resampled steps (see :func:`_throughput_ratio`)."""
        return "steps within token-count classes" if self.throughput_unit == "tokens/s" else "steps"

    def to_json(self) -> dict[str, Any]:
        return {
            "base": self.base.to_json(), "new": self.new.to_json(),
            "throughput": self.throughput.to_json() | {
                "unit": self.throughput_unit, "resampled": self.throughput_resampling},
            "step_latency": self.step_latency.to_json() | {"steps": "that scheduled tokens"},
            "per_token": None if self.per_token is None else self.per_token.to_json(),
            "serving": {m: c.to_json() for m, c in self.serving.items()},
            "moved": json_records(self.moved),
            "by_name": json_records(self.by_name), "by_role": json_records(self.by_role),
            "cautions": self.cautions,
        } | ({} if self.device_moved.empty else {
            "gpu_moved": json_records(self.device_moved),
        })  # fmt: skip


def summarize(trace: Trace, label: str = "", step_name: str | None = None) -> RunSummary:
    every = require(trace.spans, "spans", SPAN_NEEDS)  # with the projections: device overlap
    spans = without_projections(trace, every)
    b = step_breakdown(trace, step_name)
    spans = spans[~spans["name"].astype(str).str.match(ENVELOPE.pattern)]  # not work
    tokens = float(b["tokens"].sum()) if b["tokens"].notna().any() else None
    seconds = float(b["duration"].sum()) / 1e9  # time inside steps: what the CIs resample
    return RunSummary(
        label=label,
        breakdown=b,
        tokens=tokens,
        seconds=seconds,
        by_name=time_by(spans.assign(name=grouped_names(spans["name"])), "name"),
        by_role=time_by(spans, "role"),
        locks=time_by(spans[spans["name"].isin(S.LOCK_SPANS)], ["name", "role"]),
        swap_overlap=host_overlap(spans),
        device_swap_overlap=device_overlap(every),
        device=device_breakdown(trace, b),
        python_time=python_time.summary(python_time.attribute(trace)),
        requests=request_latencies(trace),
    )


def grouped_names(names: pd.Series) -> pd.Series:
    """Span names with a trailing iteration number grouped: ``ProfilerStep#1009`` and
    ``ProfilerStep#1010`` are ``ProfilerStep#*``."""
    return names.astype(str).str.replace(r"#\d+$", "#*", regex=True)


def diff_traces(
    base: Trace,
    new: Trace,
    step_name: str | None = None,
    *,
    labels: tuple[str, str] = ("base", "new"),
    seed: int = 0,
) -> DiffResult:
    """Compare ``new`` against ``base``: ratios are new/base. Throughput counts every step's
    time; step latency, per-token time and where the time moved count the steps that did
    work (module doc)."""
    sb, sn = summarize(base, labels[0], step_name), summarize(new, labels[1], step_name)
    return diff_summaries(sb, sn, seed=seed)


def diff_summaries(sb: RunSummary, sn: RunSummary, *, seed: int = 0) -> DiffResult:
    """The comparison of two runs' summaries (however they were computed: in process, or
    reduced from pieces on Dask, :mod:`fdprof.analysis.distributed_diff`)."""
    both_tokens = sb.tokens is not None and sn.tokens is not None
    wb, wn = sb.working, sn.working
    return DiffResult(
        base=sb,
        new=sn,
        throughput=_throughput_ratio(sb, sn, both_tokens, seed),
        throughput_unit="tokens/s" if both_tokens else "steps/s",
        step_latency=ratio_ci(wb["duration"], wn["duration"], seed=seed,
                              quantity="step latency"),  # fmt: skip
        moved=_moved(wb, wn, both_tokens, seed),
        by_name=_side_by_side(sb.by_name, sn.by_name, "name"),
        by_role=_side_by_side(sb.by_role, sn.by_role, "role"),
        device_moved=pd.DataFrame() if sb.device is None or sn.device is None else _moved(
            sb.working_device.assign(tokens=wb["tokens"].to_numpy()),
            sn.working_device.assign(tokens=wn["tokens"].to_numpy()),
            both_tokens, seed, DEVICE_PARTS, "gpu_window"),
        per_token=_per_token_ratio(sb, sn, seed),
        serving=_serving_ratios(sb, sn, seed),
    )  # fmt: skip


#: the quantiles of a group's durations that :func:`time_by` reports, by column
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


def time_by(spans: pd.DataFrame, key: str | list[str]) -> pd.DataFrame:
    """Count, total and p50/p90/p99 (pandas' linear quantiles) of finished spans' durations
    (ns) per ``key``, the keys as text; largest total first, then key order. A span without
    the key is in no group. Sorted codes and one pass over the groups, not a groupby: a
    quarter of the time on a small trace, half on millions of spans."""
    keys = [key] if isinstance(key, str) else key
    done = spans[(spans["end"] != -1).to_numpy()]
    if done.empty:
        return pd.DataFrame(columns=[*keys, "count", "total", *QUANTILES])
    labels = [pd.factorize(done[k].astype(str), sort=True) for k in keys]
    dims = [max(len(uniques), 1) for _, uniques in labels]
    named = np.logical_and.reduce([codes >= 0 for codes, _ in labels])
    group = np.ravel_multi_index([codes[named] for codes, _ in labels], dims).astype(np.int64)
    dur = (done["end"] - done["start"]).to_numpy(np.int64)[named]
    group, dur = _by_group_then_duration(group, int(np.prod(dims)), dur)
    firsts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]][: len(dur)])
    counts = np.diff(np.r_[firsts, len(dur)]).astype(np.int64)
    at = np.unravel_index(group[firsts], dims)
    table = {k: pd.Series(uniques.take(i))
             for k, (_, uniques), i in zip(keys, labels, at, strict=True)}  # fmt: skip
    table["count"] = counts
    table["total"] = np.add.reduceat(dur, firsts) if len(firsts) else counts
    values = dur.astype(np.float64)
    for column, q in QUANTILES.items():
        pos = q * (counts - 1)
        lo = np.floor(pos).astype(np.int64)
        a, b = values[firsts + lo], values[firsts + np.minimum(lo + 1, counts - 1)]
        table[column] = a + (b - a) * (pos - lo)
    out = pd.DataFrame(table)
    return out.iloc[np.argsort(-out["total"].to_numpy(), kind="stable")]


def _by_group_then_duration(group: np.ndarray, groups: int, dur: np.ndarray):
    """``group`` and ``dur`` sorted by group, then duration: one sort of one int64 key where
    both fit in it, else a two-key sort."""
    if not len(dur):
        return group, dur
    low = int(dur.min())
    width = int(dur.max()) - low + 1
    if groups * width < 2**62:
        key = np.sort(group * width + (dur - low))
        return key // width, key % width + low
    order = np.lexsort((dur, group))
    return group[order], dur[order]


def _throughput_ratio(sb: RunSummary, sn: RunSummary, tokens: bool, seed: int) -> RatioCI:
    """Rate ratio over (tokens or 1 per step, step duration) rows, steps resampled. With
    tokens, steps are resampled within their token-count class (:func:`token_class`): the
    workload fixes how many prefill-sized and decode-sized steps a run has, and redrawing that
    mix would make the interval mostly about the mix (several times wider), not the speed."""

    def rows(s: RunSummary) -> np.ndarray:
        amount = s.breakdown["tokens"].fillna(0) if tokens else np.ones(s.n_steps)
        return np.column_stack([np.asarray(amount, float), s.breakdown["duration"]])

    rb, rn = rows(sb), rows(sn)
    strata = (token_class(rb[:, 0]), token_class(rn[:, 0])) if tokens else None
    unit = "tokens/s" if tokens else "steps/s"
    return ratio_ci(rb, rn, "rate", seed=seed, strata=strata, quantity=f"throughput ({unit})")


def _per_token_ratio(sb: RunSummary, sn: RunSummary, seed: int) -> RatioCI | None:
    """New/base median time per scheduled token of the steps that did work, steps resampled
    (as step latency: a step's time per token is its latency with the batch size taken out);
    None unless both runs count tokens. A median, not total time over total tokens: the
    latter is the throughput's inverse, and one start-up step of seconds would make it."""
    b, n = sb.per_token, sn.per_token
    if b.empty or n.empty:
        return None
    return ratio_ci(b, n, seed=seed, quantity="per-token time")


def _serving_ratios(sb: RunSummary, sn: RunSummary, seed: int) -> dict[str, RatioCI]:
    """New/base median of each serving metric both runs measured, requests resampled."""
    out = {}
    for metric in SERVING:
        b, n = (s.requests[metric].dropna() if metric in s.requests else pd.Series(dtype=float)
                for s in (sb, sn))  # fmt: skip
        if len(b) and len(n) and float(np.median(b)) > 0:
            out[metric] = ratio_ci(b, n, seed=seed, quantity=SERVING[metric])
    return out


def token_class(tokens: np.ndarray) -> np.ndarray:
    """Steps grouped by order of magnitude of their token count: 0, 1, 2–3, 4–7, ..."""
    t = np.asarray(tokens, float)
    return np.where(t >= 1, np.floor(np.log2(np.maximum(t, 1))).astype(int) + 1, 0)


def _moved(
    b: pd.DataFrame,
    n: pd.DataFrame,
    tokens: bool,
    seed: int,
    parts: tuple[str, ...] = PARTS,
    total: str = "duration",
) -> pd.DataFrame:
    """Per part: mean ns per step and p50/p90/p99 in each run, the change of the mean with its
    95% CI (steps resampled as for throughput), and the share of ``total``."""
    strata = None
    if tokens:
        strata = (token_class(b["tokens"].fillna(0)), token_class(n["tokens"].fillna(0)))
    rows = []
    for part in (*parts, total):
        sb, sn = spread(b[part]), spread(n[part])
        change = difference_ci(b[part], n[part], seed=seed, strata=strata)
        rows.append({
            "part": "step" if part == "duration" else part,
            "base_mean": sb["mean"], "base_p50": sb["p50"], "base_p90": sb["p90"],
            "base_p99": sb["p99"], "new_mean": sn["mean"], "new_p50": sn["p50"],
            "new_p90": sn["p90"], "new_p99": sn["p99"],
            "delta_mean": change.delta, "delta_lo": change.lo, "delta_hi": change.hi,
            "base_share": _share(b, part, total), "new_share": _share(n, part, total),
        })  # fmt: skip
    return pd.DataFrame(rows)


def _share(b: pd.DataFrame, part: str, of: str = "duration") -> float | None:
    total = float(b[of].sum())
    return float(b[part].sum()) / total if total else None


def _side_by_side(b: pd.DataFrame, n: pd.DataFrame, key: str) -> pd.DataFrame:
    out = b.merge(n, on=key, how="outer", suffixes=("_base", "_new"))
    for col in ("count", "total"):
        out[[f"{col}_base", f"{col}_new"]] = out[[f"{col}_base", f"{col}_new"]].fillna(0)
    out["delta_total"] = out["total_new"] - out["total_base"]
    order = np.argsort(-np.abs(out["delta_total"].to_numpy()), kind="stable")
    return out.iloc[order].reset_index(drop=True)
