"""Steps and where their time went: compute, swap blocking, lock wait, idle; and on a GPU,
compute kernels, communication, memcpy, memset and idle.

Why: a throughput change alone does not say why. Decomposing each step's wall time (the
categories painted in priority order, so overlapping spans count once) shows where the
time moved between two runs, and gives the ideal gain: the throughput if the baseline's
swaps and lock waits had hidden perfectly behind compute. Foreign traces (PyTorch profiler,
Nsight) get steps without flags and the device split HTA's temporal breakdown makes
(docs/analysis.md "Foreign traces").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
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


class Part(StrEnum):
    """The parts of a step's time (JSON ``breakdown``): compute, waiting for the lock, blocked
    on a swap, and the rest."""

    COMPUTE = "compute"
    LOCK_WAIT = "lock_wait"
    SWAP_BLOCKING = "swap_blocking"
    IDLE = "idle"


#: span names of each category, in painting priority (compute first: a swap that runs under
#: compute costs nothing)
CATEGORIES: dict[Part, tuple[str, ...]] = {
    Part.COMPUTE: S.COMPUTE_SPANS,
    Part.LOCK_WAIT: (S.LOCK_WAIT,),
    Part.SWAP_BLOCKING: S.SWAP_BLOCKING_SPANS,
}
PARTS = tuple(Part)
#: the iteration spans the PyTorch profiler writes: steps of a trace that has no others
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
#: spans wrapping a whole profiling session, not work (PyTorch's ``PyTorch Profiler (0)``)
ENVELOPE = re.compile(r"^PyTorch Profiler \(\d+\)$")
#: device work by kind, in painting priority (a copy under a kernel costs nothing): HTA's
#: kernel types, with its memory type split into memcpy and memset
DEVICE_KINDS = ("compute", "communication", "memcpy", "memset")
DEVICE_PARTS = (*(f"gpu_{k}" for k in DEVICE_KINDS), "gpu_idle")
#: HTA's communication kernels (``hta/common/types.py``): NCCL, RCCL, HCCL
COMMUNICATION = re.compile(r"^nccl|^hip|^hccl|ncclKernel")
#: annotations on a device lane (PyTorch's ``gpu_user_annotation``): they span kernels
DEVICE_ANNOTATION_CATS = ("gpu_user_annotation",)


def without_projections(trace: Trace, spans: pd.DataFrame) -> pd.DataFrame:
    """``spans`` less the NVTX ranges' projections onto the device (``nvtx.gpu_ops``): each
    repeats its range's name and covers device work that has spans of its own, so counting it
    would make a second step of every step range and count its kernels twice."""
    return spans[~spans["span_id"].isin(projections(trace))]


def steps(trace: Trace, step_name: str | None = None) -> pd.DataFrame:
    """One row per step: ``step``, ``start``, ``end``, ``duration`` (ns), ``tokens`` (from
    ``batch.tokens``: :func:`tokens_by_step`; NaN where unknown) and ``no_tokens``
    (:func:`scheduled_nothing`).

    Steps are the spans named ``step_name`` (or starting with it, e.g. ``ProfilerStep#``);
    without it, the ``step`` spans, else each ``fd.step`` id's extent, else the PyTorch
    profiler's ``ProfilerStep#N`` spans (step N)."""
    spans = require(trace.spans, "spans", STEP_NEEDS)
    spans = without_projections(trace, spans[spans["end"] != -1])
    names = spans["name"].astype(str)
    profiler = names.str.match(PROFILER_STEP.pattern)
    if step_name:
        sel = spans[is_step(names, step_name)]
        if sel.empty:
            raise FdprofError(f"no span is named {step_name!r} (or starts with it)")
        out = sel[["step", "start", "end"]].copy()
    elif (names == S.STEP).any():
        out = spans.loc[names == S.STEP, ["step", "start", "end"]].copy()
    elif (spans["step"] >= 0).any():
        g = spans[spans["step"] >= 0].groupby("step")
        out = pd.DataFrame({"start": g["start"].min(), "end": g["end"].max()}).reset_index()
    elif profiler.any():
        out = spans.loc[profiler, ["start", "end"]].copy()
        out["step"] = names[profiler].str.slice(len("ProfilerStep#")).astype(np.int64)
        out["tokens"] = np.nan
    else:
        raise FdprofError(
            "no steps found: no 'step' spans, no fd.step ids and no ProfilerStep#N spans; "
            "name a step range with --step-name"
        )
    out = out.sort_values(["start", "end"], kind="stable").reset_index(drop=True)
    sizes = pd.Series(np.nan, index=out.index)
    if "tokens" in out:
        pass  # profiler steps: numbered by the profiler, no token counts
    elif not (out["step"] >= 0).any():
        out["step"] = np.arange(len(out), dtype=np.int64)  # user-named ranges: ordinals
        out["tokens"] = np.nan
    else:
        out["tokens"] = out["step"].map(tokens_by_step(trace)).astype(float)
        sizes = out["step"].map(per_step(trace, S.BATCH_SIZE)).astype(float)
    out["duration"] = out["end"] - out["start"]
    out["no_tokens"] = scheduled_nothing(out["tokens"], sizes)
    return out[["step", "start", "end", "duration", "tokens", "no_tokens"]]


def scheduled_nothing(tokens: pd.Series, sizes: pd.Series) -> pd.Series:
    """Steps that scheduled no tokens: ``batch.tokens`` 0, or no token count and a batch of
    size 0. vLLM runs such steps while it polls pending KV transfers, an expert-parallel
    engine to keep its collectives matched; they come and go with timing, not work, so the
    step-latency and per-step comparisons leave them out and count them apart
    (docs/analysis.md "Steps that did work"). A step whose trace says neither is taken to have
    worked."""
    t, n = tokens.to_numpy(float), sizes.to_numpy(float)
    return pd.Series((t == 0) | (np.isnan(t) & (n == 0)), index=tokens.index)


def working(st: pd.DataFrame) -> pd.DataFrame:
    """The steps of ``st`` that scheduled tokens (all of them when none did: nothing to set
    apart)."""
    did = st[~st["no_tokens"]]
    return st if did.empty else did


def empty_steps(st: pd.DataFrame) -> dict[str, float | int | None]:
    """Count, total time (ns) and share of step time of the steps that scheduled nothing."""
    total, empty = float(st["duration"].sum()), st.loc[st["no_tokens"], "duration"]
    return {"count": int(len(empty)), "total_ns": float(empty.sum()),
            "share": float(empty.sum()) / total if total else None}  # fmt: skip


def is_step(names: pd.Series, step_name: str | None) -> pd.Series:
    """Which spans are steps (not work): ``step_name`` and what starts with it, else ``step``
    and ``ProfilerStep#N``."""
    if step_name:
        return (names == step_name) | names.str.startswith(step_name)
    return (names == S.STEP) | names.str.match(PROFILER_STEP.pattern)


def tokens_by_step(trace: Trace) -> pd.Series:
    """Tokens per ``fd.step`` (:func:`per_step` of ``batch.tokens``)."""
    return per_step(trace, S.BATCH_TOKENS)


def per_step(trace: Trace, key: str) -> pd.Series:
    """A numeric attribute per ``fd.step``: the ``step`` spans' own value where they carry it
    (the scheduler's account of the batch: vLLM's step and its ``execute_model`` both carry
    the batch's tokens, which summed would count them twice), else summed over the spans of
    the step that carry it (fdprof's engine: ``execute_model``)."""
    attr = trace.attr(key)
    if attr.empty:
        return pd.Series(dtype=float)
    spans = trace.spans.set_index("span_id").reindex(attr.index)
    rows = pd.DataFrame({
        "step": spans["step"].to_numpy(),
        "own": (spans["name"].astype(str) == S.STEP).to_numpy(),
        "value": pd.to_numeric(attr, errors="coerce").to_numpy(float),
    })  # fmt: skip
    rows = rows[rows["step"] >= 0]
    by = rows.groupby(["step", "own"])["value"].sum(min_count=1).unstack("own")
    own = by[True] if True in by else pd.Series(np.nan, index=by.index)
    rest = by[False] if False in by else pd.Series(np.nan, index=by.index)
    return own.fillna(rest)


def step_breakdown(
    trace: Trace,
    step_name: str | None = None,
    categories: dict[str, tuple[str, ...]] = CATEGORIES,
) -> pd.DataFrame:
    """Each step's ``duration`` split into ``compute``, ``lock_wait``, ``swap_blocking`` and
    ``idle`` (ns; they sum to ``duration``), plus ``blocking_any``: lock wait or swap time in
    the step whether or not compute hid it. A trace with no compute spans (not ours) counts
    every host span that is not a step or an envelope as compute: busy versus idle (device
    work has its own split, :func:`device_breakdown`)."""
    st = steps(trace, step_name)
    spans = trace.spans[trace.spans["end"] != -1]
    names = spans["name"].astype(str)
    lo, hi = st["start"].to_numpy(), st["end"].to_numpy()
    painted = blocking = (np.empty(0, np.int64), np.empty(0, np.int64))
    done = np.zeros(len(st), dtype=np.int64)
    out = st.copy()
    for i, (part, members) in enumerate(categories.items()):
        sel = names.isin(members)
        if i == 0 and not sel.any():
            sel = ~is_step(names, step_name) & ~names.str.match(ENVELOPE.pattern)
            sel &= ~_on_device(spans)
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


def projections(trace: Trace) -> pd.Index:
    """Span ids of NVTX ranges projected onto the device work they launched (Nsight): they
    repeat their range on a device lane, neither a step nor device work of their own."""
    return trace.attr(S.NVTX_GPU_OPS).index


def _on_device(spans: pd.DataFrame) -> pd.Series:
    return spans["lane"].str.contains(S.DEVICE_LANE_PATTERN).fillna(False).astype(bool)


def _text(values: pd.Series) -> np.ndarray:
    """Attribute values as plain strings, "" where a span has none (comparisons with pandas'
    NA are neither true nor false)."""
    return values.astype("string").fillna("").to_numpy(dtype=str)


def device_kind(trace: Trace, spans: pd.DataFrame) -> pd.Series:
    """Each device span's kind (:data:`DEVICE_KINDS`), or None for an annotation (``spans``
    without NVTX projections: :func:`without_projections`): memcpy and
    memset by the reader's category (PyTorch's ``gpu_memcpy``/``gpu_memset``, Nsight's
    ``cuda.kind``) or the name Kineto gives them (``Memcpy HtoD ...``, ``Memset ...``),
    communication by HTA's pattern of NCCL-like kernel names, compute the other kernels; the
    probe's device spans by name (a swap's copies are memcpy, event records and waits are
    markers, not work)."""
    ids = spans["span_id"]
    cat, cuda = (_text(trace.attr(key).reindex(ids)) for key in (S.CHROME_CATEGORY, S.CUDA_KIND))
    names = spans["name"].astype(str)
    kind = np.where(names.str.match(COMMUNICATION.pattern), "communication", "compute")
    kind = np.where(names.str.startswith("Memcpy"), "memcpy", kind)
    kind = np.where(names.str.startswith("Memset"), "memset", kind)
    for given in (cat, cuda):
        kind = np.where((given == "gpu_memcpy") | (given == "memcpy"), "memcpy", kind)
        kind = np.where((given == "gpu_memset") | (given == "memset"), "memset", kind)
    kind = np.where(names.isin(S.DEVICE_SWAP_SPANS), "memcpy", kind)  # our streams' copies
    kind = kind.astype(object)
    kind[np.isin(cat, DEVICE_ANNOTATION_CATS) | names.isin(S.DEVICE_MARKER_SPANS)] = None
    return pd.Series(kind, index=spans.index)


def launch_times(trace: Trace, span_ids: np.ndarray) -> np.ndarray:
    """When each span was launched: the time of the release its acquire pairs with (a
    PyTorch launch flow, Nsight's ``cuda:launch/<pid>`` edge), -1 for a span no edge
    reaches. A release launching several spans (``cudaGraphLaunch``) launches each."""
    syncs = trace.syncs
    acq = syncs[(syncs["op"] == S.SyncOp.ACQUIRE) & syncs["span_id"].isin(span_ids)]
    rel = syncs[syncs["op"] == S.SyncOp.RELEASE].drop_duplicates(["obj", "seq"])
    pairs = acq[["obj", "seq", "span_id"]].merge(rel[["obj", "seq", "time"]], on=["obj", "seq"])
    first = pairs.groupby("span_id")["time"].min()
    return first.reindex(span_ids).fillna(-1).to_numpy(np.int64)


def device_breakdown(trace: Trace, st: pd.DataFrame) -> pd.DataFrame | None:
    """Each step's GPU time split into :data:`DEVICE_PARTS` (ns; they sum to ``gpu_window``),
    None for a trace without device work.

    A device span belongs to the step its launch falls in; in a trace with launch edges, work
    no edge reaches was launched before the trace began and is left out, as HTA leaves out
    kernels without a CPU launch (without any edges, a span's own start places it). A step's
    window on the device runs from the first start of its work to the first start of the next
    step's (the last step's to its work's last end), so
    the windows tile the device timeline as HTA's one window over a whole trace does: the gap
    before the next step's first kernel is this step's idle time. Kinds are painted in
    priority order over every stream of the trace at once, as HTA merges a rank's kernels."""
    spans = without_projections(trace, trace.spans[(trace.spans["end"] != -1)])
    spans = spans[_on_device(spans).to_numpy()]
    if spans.empty:
        return None
    kind = device_kind(trace, spans)
    spans, kind = spans[kind.notna().to_numpy()], kind[kind.notna()]
    start = spans["start"].to_numpy(np.int64)
    end = spans["end"].to_numpy(np.int64)
    launched = launch_times(trace, spans["span_id"].to_numpy(np.int64))
    if (launched >= 0).any():  # work no launch reaches: launched before the trace (as HTA)
        keep = launched >= 0
        start, end, launched, kind = start[keep], end[keep], launched[keep], kind[keep]
    else:
        launched = start
    lo, hi = st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
    step = np.searchsorted(lo, launched, "right") - 1
    inside = (step >= 0) & (launched < hi[np.maximum(step, 0)])
    n = len(st)
    big = np.iinfo(np.int64).max
    w_lo = np.full(n, big, dtype=np.int64)
    np.minimum.at(w_lo, step[inside], start[inside])
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, step[inside], end[inside])
    has = w_lo != big
    # the next step with work's first start: a reverse running minimum of the later starts
    nxt = np.minimum.accumulate(np.concatenate([w_lo[1:], [big]])[::-1])[::-1]
    w_hi = np.where(nxt == big, last, nxt)
    w_lo = np.where(has, w_lo, 0)
    w_hi = np.where(has, np.maximum(w_hi, w_lo), 0)
    out = pd.DataFrame({"step": st["step"].to_numpy(), "gpu_window": w_hi - w_lo})
    painted = (np.empty(0, np.int64), np.empty(0, np.int64))
    done = np.zeros(len(st), dtype=np.int64)
    for k in DEVICE_KINDS:
        sel = (kind == k).to_numpy()
        painted = merge(painted, union(start[sel], end[sel]))
        total = covered(painted, w_lo, w_hi)
        out[f"gpu_{k}"] = total - done
        done = total
    out["gpu_idle"] = out["gpu_window"] - done
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
