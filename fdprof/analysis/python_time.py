"""Where Python time goes inside spans: py-spy's samples attributed to the spans they fall in.

The probe's spans say exactly when ``lock_wait``, ``issue_swap_task`` or ``execute_model``
ran; py-spy (``fdprof run --py-spy``, :mod:`fdprof.trace.pyspy`) says what Python was doing,
sampled. Each interval over which a thread's sampled stack stayed the same is cut by the spans
of that thread (same pid, same native tid, on the run's timebase), and its time goes to the
span's name and role, by the innermost frame and that frame's caller: what the worker does
while it waits for the lock, what the scheduler does during a synchronous swap, what
``execute_model`` spends in Python.

Shares are of the sampled time inside a span name's spans. Behind each share's 95% interval
(Wilson's score interval) is a sample count: the expected number of py-spy's samples in that
time (its rate times the time; py-spy's Chrome trace keeps the changes of stack, not each
sample), so a name with few samples gets a wide interval. Samples of one span are not
independent (a stack lasts), so the interval is a lower bound on the uncertainty across runs.

Check of the clock mapping: where a span is named as a Python function (``execute_model``),
``on_stack`` is the share of its sampled time with that function on the stack; near 1 when
the samples sit where the spans are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fdprof.trace.conventions import thread_lanes
from fdprof.trace.model import Trace
from fdprof.trace.pyspy import Samples

#: span names shown (most sampled time first) and frames per name
TOP_SPANS = 12
TOP_FRAMES = 5
#: the normal quantile of a two-sided 95% interval
Z95 = 1.959963984540054
FRAME_KEYS = ["role", "span", "frame", "caller"]
SPAN_KEYS = ["role", "span"]


def samples_of(trace: Trace) -> Samples | None:
    return trace.meta.get("pyspy")


def attribute(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The raw attribution, summable over runs: per (role, span, frame, caller) the time (ns)
    and expected samples; per (role, span) the spans sampled, their sampled time and samples,
    and the time the span's own function was on the stack. None: no py-spy samples."""
    samples = samples_of(trace)
    if samples is None or samples.segments.empty:
        return None
    spans = trace.spans[trace.spans["end"] >= 0]
    pid = spans["pid"].to_numpy(np.int64)
    tid = spans["tid"].to_numpy(np.int64)
    on_thread = spans["lane"].to_numpy(object) == thread_lanes(pid, tid)
    spans = spans[on_thread]
    frames, totals = [], []
    names = np.array([f[0] for f in samples.frames], dtype=object)
    for (p, t), seg in samples.segments.groupby(["pid", "tid"], sort=False):
        mine = spans[(spans["pid"] == p) & (spans["tid"] == t)]
        if mine.empty:
            continue
        rate = float(samples.processes[int(p)]["rate_hz"])
        s0, e0 = mine["start"].to_numpy(np.int64), mine["end"].to_numpy(np.int64)
        b0, b1 = seg["start"].to_numpy(np.int64), seg["end"].to_numpy(np.int64)
        i, j, ns = overlaps(s0, e0, b0, b1)
        if not len(i):
            continue
        span_name = mine["name"].to_numpy(object)[i]
        role = mine["role"].to_numpy(object)[i]
        leaf, caller = seg["leaf"].to_numpy(np.int64)[j], seg["caller"].to_numpy(np.int64)[j]
        frames.append(pd.DataFrame({
            "role": role, "span": span_name,
            "frame": [samples.frame_text(f, line=False) for f in leaf.tolist()],
            "caller": [samples.frame_text(f) for f in caller.tolist()],
            "ns": ns, "samples": ns * rate / 1e9,
        }))  # fmt: skip
        on_stack = _own_function_time(samples, int(p), int(t), mine, names)
        per_span = pd.DataFrame({"role": role, "span": span_name, "row": i, "ns": ns})
        sampled = per_span.groupby(SPAN_KEYS).agg(spans=("row", "nunique"), ns=("ns", "sum"))
        sampled["samples"] = sampled["ns"] * rate / 1e9
        sampled["on_stack_ns"] = on_stack.reindex(sampled.index).fillna(-1).astype(np.int64)
        totals.append(sampled.reset_index())
    if not frames:
        return None
    return summed(frames, totals)


def summed(
    frames: list[pd.DataFrame], totals: list[pd.DataFrame]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Raw attributions (of threads, or of runs) added up."""
    f = (
        pd.concat(frames, ignore_index=True)
        .groupby(FRAME_KEYS, as_index=False)[["ns", "samples"]]
        .sum()
    )
    t = pd.concat(totals, ignore_index=True)
    has = t[t["on_stack_ns"] >= 0].groupby(SPAN_KEYS)["on_stack_ns"].sum()
    t = t.groupby(SPAN_KEYS)[["spans", "ns", "samples"]].sum()
    t["on_stack_ns"] = has.reindex(t.index).fillna(-1).astype(np.int64)
    return f, t.reset_index()


def combine(parts: list[tuple[pd.DataFrame, pd.DataFrame] | None]):
    """Several runs' raw attributions as one (None where no run had samples)."""
    have = [p for p in parts if p is not None]
    if not have:
        return None
    return summed([f for f, _ in have], [t for _, t in have])


def overlaps(
    s0: np.ndarray, e0: np.ndarray, b0: np.ndarray, b1: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (span, interval) pair that overlaps and by how much (ns): spans ``[s0, e0)`` in
    any order, intervals ``[b0, b1)`` sorted and not overlapping each other."""
    lo = np.searchsorted(b1, s0, side="right")
    hi = np.searchsorted(b0, e0, side="left")
    counts = np.maximum(hi - lo, 0)
    i = np.repeat(np.arange(len(s0)), counts)
    first = np.repeat(lo, counts)
    j = first + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    ns = np.minimum(e0[i], b1[j]) - np.maximum(s0[i], b0[j])
    keep = ns > 0
    return i[keep], j[keep], ns[keep]


def _own_function_time(
    samples: Samples, pid: int, tid: int, spans: pd.DataFrame, names: np.ndarray
) -> pd.Series:
    """Per (role, span name) named as a Python function seen on this thread: the time inside
    those spans with that function on the sampled stack."""
    sl = samples.slices
    sl = sl[(sl["pid"] == pid) & (sl["tid"] == tid)]
    out = {}
    base = np.array([str(n).rsplit(".", 1)[-1] for n in names.tolist()], dtype=object)
    for (role, name), rows in spans.groupby(["role", "name"], sort=False):
        mine = sl[sl["frame"].isin(np.flatnonzero(base == name))]
        if mine.empty:  # not a function this thread ran: nothing to check
            continue
        b0, b1 = _union(mine["start"].to_numpy(np.int64), mine["end"].to_numpy(np.int64))
        _, _, ns = overlaps(rows["start"].to_numpy(np.int64), rows["end"].to_numpy(np.int64),
                            b0, b1)  # fmt: skip
        out[(role, name)] = int(ns.sum())
    index = pd.MultiIndex.from_tuples(list(out), names=SPAN_KEYS) if out else None
    return pd.Series(list(out.values()), index=index, dtype=np.int64)


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals merged where they overlap: sorted, disjoint."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.r_[True, s[1:] > e[:-1]]
    last = np.r_[np.flatnonzero(new)[1:] - 1, len(s) - 1]
    return s[new], e[last]


def wilson(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval of a proportion ``k / n`` (``n`` may be fractional)."""
    if n <= 0:
        return 0.0, 1.0
    p = min(max(k / n, 0.0), 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def summary(raw: tuple[pd.DataFrame, pd.DataFrame] | None) -> list[dict[str, Any]]:
    """The JSON form of a raw attribution: the most sampled span names, each with its top
    frames, their share of the sampled time, the Wilson 95% interval and the samples."""
    if raw is None:
        return []
    frames, totals = raw
    out = []
    for t in totals.sort_values("ns", ascending=False).head(TOP_SPANS).itertuples():
        mine = frames[(frames["role"] == t.role) & (frames["span"] == t.span)]
        mine = mine.sort_values("ns", ascending=False)
        rows = []
        for f in mine.head(TOP_FRAMES).itertuples():
            share = f.ns / t.ns
            lo, hi = wilson(share * t.samples, t.samples)
            rows.append({"frame": f.frame, "caller": f.caller, "share": share,
                         "ci95": [lo, hi], "samples": f.samples, "ns": int(f.ns)})  # fmt: skip
        rest = mine.iloc[TOP_FRAMES:]
        out.append({
            "span": t.span, "role": t.role, "spans": int(t.spans), "sampled_ns": int(t.ns),
            "samples": float(t.samples), "frames": rows,
            "other": {"frames": len(rest), "share": float(rest["ns"].sum() / t.ns)},
            "on_stack": None if t.on_stack_ns < 0 else min(1.0, t.on_stack_ns / t.ns),
        })  # fmt: skip
    return out
