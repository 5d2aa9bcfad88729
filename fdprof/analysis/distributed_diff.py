"""``diff --dask``: each run's summary from the pieces of its Parquet store, the in-process numbers
exactly.

Why it splits this way: the per-step breakdown needs few spans (the steps, the categories'
spans, device work, the spans that carry token counts), while the per-name and per-role
statistics read every span. So each span part (a window of steps) is one task that returns
(1) the spans the breakdown needs, (2) the union of the busy intervals a trace without compute
spans paints instead, and (3) for every group of the statistics its count, total and a
histogram of durations on fixed log-spaced bins; the client then asks each part for the
durations in the few bins that hold the 50th, 90th and 99th percentile of each group (a
second round), and reads them exactly. The in-process summary then runs on the reduced trace
(:func:`fdprof.analysis.diff.summarize`), its statistics replaced by the reduced ones.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fdprof import semconv as S
from fdprof.analysis import breakdown as B
from fdprof.analysis.diff import QUANTILES, RunSummary, grouped_names, summarize
from fdprof.analysis.timeline import union
from fdprof.trace import pyspy, store
from fdprof.trace.attrs import Attrs, Column
from fdprof.trace.model import SCHEMAS, Trace, frame

#: histogram bins per doubling of a duration
BINS_PER_OCTAVE = 8
#: the statistics' tables: name -> its group keys
TABLES = {"by_name": ["name"], "by_role": ["role"], "locks": ["name", "role"]}
#: attributes the breakdown and the serving latency read, of the spans it keeps
ATTRS = (S.BATCH_TOKENS, S.BATCH_SIZE, S.NVTX_GPU_OPS, S.CHROME_CATEGORY, S.CUDA_KIND,
         S.FIRST_TOKEN_NS, S.OUTPUT_TOKENS)  # fmt: skip
#: the name of the intervals standing for busy spans in a trace without compute spans
BUSY = "fdprof.busy"
_NAMES = {
    *S.COMPUTE_SPANS, *S.SWAP_SPANS, *S.SWAP_BLOCKING_SPANS, S.LOCK_WAIT, *S.DEVICE_SWAP_SPANS,
    *S.DEVICE_COMPUTE_SPANS, S.STEP, *(n for names in B.CATEGORIES.values() for n in names),
    S.REQUEST,  # serving latency per request (one span each: few beside the steps)
}  # fmt: skip


def _bins(duration: np.ndarray) -> np.ndarray:
    return np.floor(np.log2(np.maximum(duration, 0) + 1.0) * BINS_PER_OCTAVE).astype(np.int64)


def _read_spans(path: str) -> pd.DataFrame:
    t = store.read_part(Path(path), store.table_schema("spans"))
    return store._frame("spans", t)


def _groups(spans: pd.DataFrame, projections: np.ndarray) -> dict[str, pd.DataFrame]:
    """Per statistics table, the finished spans' group keys (as ``time_by`` makes them, text)
    and durations."""
    spans = spans[~spans["span_id"].isin(projections).to_numpy()]
    spans = spans[~spans["name"].astype(str).str.match(B.ENVELOPE.pattern).to_numpy()]
    done = spans[(spans["end"] != -1).to_numpy()]
    dur = (done["end"] - done["start"]).to_numpy(np.int64)
    named = done.assign(name=grouped_names(done["name"]))
    locks = done["name"].isin(S.LOCK_SPANS).to_numpy()
    return {
        "by_name": pd.DataFrame({"name": named["name"].astype(str).to_numpy(), "dur": dur}),
        "by_role": pd.DataFrame({"role": done["role"].astype(str).to_numpy(), "dur": dur}),
        "locks": pd.DataFrame({"name": done["name"].astype(str).to_numpy()[locks],
                               "role": done["role"].astype(str).to_numpy()[locks],
                               "dur": dur[locks]}),
    }  # fmt: skip


def _part_summary(path: str, projections: np.ndarray, tokens: np.ndarray,
                  step_name: str | None, keep_all: bool) -> dict[str, Any]:  # fmt: skip
    """Round one on one span part: kept spans, busy intervals, group histograms."""
    spans = _read_spans(path)
    rows = np.arange(len(spans))
    done = (spans["end"] != -1).to_numpy()
    names = spans["name"].astype(str)
    on_device = B._on_device(spans).to_numpy()
    step = B.is_step(names, step_name).to_numpy() | names.str.match(B.PROFILER_STEP.pattern)
    keep = spans["span_id"].isin(tokens).to_numpy() | done & (  # tokens count when unended too
        keep_all | step | names.isin(_NAMES).to_numpy() | on_device
        | spans["span_id"].isin(projections).to_numpy()
    )  # fmt: skip
    stepped = spans[done & (spans["step"] >= 0).to_numpy()]
    if len(stepped):  # each fd.step's first start and last end: its extent (a RangeIndex)
        g = stepped.groupby("step")
        keep[g["start"].idxmin().to_numpy()] = True
        keep[g["end"].idxmax().to_numpy()] = True
    busy = done & ~step & ~names.str.match(B.ENVELOPE.pattern).to_numpy() & ~on_device
    for other in list(B.CATEGORIES.values())[1:]:
        busy &= ~names.isin(other).to_numpy()
    u = union(spans["start"].to_numpy()[busy], spans["end"].to_numpy()[busy])
    hist = {}
    for table, g in _groups(spans, projections).items():
        keys = TABLES[table]
        g = g.assign(bin=_bins(g["dur"].to_numpy()))
        hist[table] = g.groupby([*keys, "bin"], sort=False)["dur"].agg(["count", "sum"])
    return {"rows": len(spans), "kept": spans[keep].assign(_row=rows[keep]), "busy": u,
            "hist": hist}  # fmt: skip


def _part_values(path: str, projections: np.ndarray, wanted: dict[str, pd.DataFrame]):
    """Round two: the durations of each group that fall in its wanted bins."""
    out = {}
    for table, g in _groups(_read_spans(path), projections).items():
        keys = TABLES[table]
        g = g.assign(bin=_bins(g["dur"].to_numpy()))
        out[table] = g.merge(wanted[table], on=[*keys, "bin"])[[*keys, "dur"]]
    return out


def _statistics(hist: pd.DataFrame, values: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``time_by``'s table from the groups' histograms and their wanted bins' values."""
    if hist.empty:
        return pd.DataFrame(columns=[*keys, "count", "total", *QUANTILES])
    per = hist.groupby(level=keys, sort=True).sum()
    rows = []
    for key, h in hist.groupby(level=keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        bins = h.groupby(level="bin")["count"].sum().sort_index()
        n = int(bins.sum())
        cum = np.cumsum(bins.to_numpy())
        sel = values
        for k, v in zip(keys, key, strict=True):
            sel = sel[sel[k] == v]
        qs = []
        for q in QUANTILES.values():
            pos = q * (n - 1)
            lo, hi = int(np.floor(pos)), int(np.ceil(pos))
            pair = [_kth(bins, cum, sel, i) for i in (lo, hi)]
            frac = pos - lo
            qs.append(float(pair[0]) + (float(pair[1]) - float(pair[0])) * frac)
        rows.append((*key, n, int(per.loc[key if len(keys) > 1 else key[0], "sum"]), *qs))
    out = pd.DataFrame(rows, columns=[*keys, "count", "total", *QUANTILES])
    return out.sort_values("total", ascending=False, kind="stable")


def _kth(bins: pd.Series, cum: np.ndarray, values: pd.DataFrame, k: int) -> int:
    """The ``k``-th smallest duration (0-based) of a group: in the bin where the cumulative
    count passes ``k``, among that bin's values."""
    b = int(np.searchsorted(cum, k, "right"))
    before = int(cum[b - 1]) if b else 0
    in_bin = np.sort(values["dur"].to_numpy(np.int64)[_bins(values["dur"].to_numpy()) ==
                                                      bins.index[b]])  # fmt: skip
    return int(in_bin[k - before])


def _wanted(hist: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per group, the bins that hold its quantiles' order statistics."""
    out = []
    for key, h in hist.groupby(level=keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        bins = h.groupby(level="bin")["count"].sum().sort_index()
        cum = np.cumsum(bins.to_numpy())
        n = int(cum[-1])
        for q in QUANTILES.values():
            pos = q * (n - 1)
            for k in {int(np.floor(pos)), int(np.ceil(pos))}:
                out.append((*key, int(bins.index[int(np.searchsorted(cum, k, "right"))])))
    return pd.DataFrame(out, columns=[*keys, "bin"]).drop_duplicates()


def _attrs_of(path: Path, doc: dict, ids: np.ndarray | None) -> Attrs:
    """The attributes the breakdown reads, of the spans ``ids`` (None: every span)."""
    columns = {}
    for i, (key, kind) in enumerate(doc["attrs"].items()):
        if key not in ATTRS:
            continue
        t = store._read_parts(path / "attrs" / f"k{i}", store._attr_schema(kind))
        if ids is not None and key not in (S.BATCH_TOKENS, S.NVTX_GPU_OPS):
            t = t.filter(pc.is_in(t["span_id"], value_set=pa.array(ids, pa.int64())))
        columns[key] = Column(kind, t["span_id"].to_numpy(), t["value"])
    return Attrs(columns)


def summarize_store(path: Path, client: Any, label: str, step_name: str | None) -> RunSummary:
    """:func:`fdprof.analysis.diff.summarize` of the store at ``path``, on Dask."""
    path = Path(path)
    doc = store.manifest(path)
    meta = store._decode_meta(doc.get("meta", {}), path)
    keep_all = isinstance(meta.get("pyspy"), pyspy.Samples)  # py-spy attributes every span
    attrs = _attrs_of(path, doc, np.zeros(0, np.int64))
    projections = attrs.span_ids(S.NVTX_GPU_OPS)
    tokens = attrs.span_ids(S.BATCH_TOKENS)
    files = [str(p) for p in store.part_files(path, "spans")]
    parts = client.gather(client.map(_part_summary, files, projections=projections,
                                     tokens=tokens, step_name=step_name, keep_all=keep_all,
                                     pure=False))  # fmt: skip
    offsets = np.cumsum([0] + [p["rows"] for p in parts])
    kept = pd.concat([p["kept"].assign(_row=p["kept"]["_row"] + off)
                      for p, off in zip(parts, offsets[:-1].tolist(), strict=True)],
                     ignore_index=True).sort_values("_row", kind="stable")  # fmt: skip
    kept = kept.drop(columns="_row")
    hist = {t: pd.concat([p["hist"][t] for p in parts]) for t in TABLES}
    hist = {t: h.groupby(level=[*TABLES[t], "bin"]).sum() for t, h in hist.items()}
    wanted = {t: _wanted(h, TABLES[t]) for t, h in hist.items()}
    shared = client.scatter(wanted, broadcast=True)
    found = client.gather(client.map(_part_values, files, projections=projections,
                                     wanted=shared, pure=False))  # fmt: skip
    values = {t: pd.concat([f[t] for f in found], ignore_index=True) for t in TABLES}
    stats = {t: _statistics(hist[t], values[t], TABLES[t]) for t in TABLES}
    spans = kept
    if not kept["name"].isin(B.CATEGORIES["compute"]).any():
        busy = union(
            np.concatenate([p["busy"][0] for p in parts]),
            np.concatenate([p["busy"][1] for p in parts]),
        )
        spans = pd.concat([kept, _busy_spans(busy, kept["span_id"].to_numpy(np.int64))],
                          ignore_index=True)  # fmt: skip
    trace = Trace(
        spans=frame("spans", {c: spans[c].to_numpy() if SCHEMAS["spans"][c] != "string"
                              else spans[c].astype(object).to_numpy() for c in SCHEMAS["spans"]}),
        syncs=store._frame("syncs", store.read_table(path, "syncs")),
        attrs=_attrs_of(path, doc, kept["span_id"].to_numpy(np.int64)),
        meta=meta,
    )  # fmt: skip
    summary = summarize(trace, label, step_name)
    return replace(summary, **stats)


def _busy_spans(u: tuple[np.ndarray, np.ndarray], taken: np.ndarray) -> pd.DataFrame:
    """Busy intervals as spans of their own (ids below every kept one), on a host lane no
    category names: the breakdown's fallback paints them, nothing else counts them."""
    n = len(u[0])
    low = int(taken.min(initial=0))
    return pd.DataFrame({
        "span_id": np.arange(low - n, low, dtype=np.int64), "parent_id": 0,
        "name": BUSY, "start": u[0], "end": u[1], "pid": -1, "tid": -1, "lane": "-1/-1",
        "role": "", "step": -1, "trace_id": None,
    })  # fmt: skip
