"""The seam between the partitioned analyses (:mod:`fdprof.analysis.distributed`) and the
in-process happens-before core (:mod:`fdprof.analysis.hazards`, :mod:`fdprof.analysis.predict`).

Why one module: the core's internals (sync pairing, lane clocks, the access table, the
candidate search, the pair and violation tables) are not a public API and are being
restructured; everything the distributed execution takes from them goes through the functions
here, so a change of the core is adapted here and nowhere else. Each function is the core's
own step on a piece of the trace: the clocks from the whole (small) sync table, the search on
one block bucket's accesses, the report tables from the pieces' raw results.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fdprof.analysis import hazards as H
from fdprof.analysis import instrumentation
from fdprof.analysis import predict as P
from fdprof.analysis.lifetime import empty_violations, lifetime_violations, violations_frame
from fdprof.trace.model import Trace, frame

#: what a bucket's search returns per access pair: the two spans and the access of each
PAIR_RAW = ["span_x", "span_y", "pool", "block", "write_x", "write_y", "lo_x", "hi_x",
            "lo_y", "hi_y"]  # fmt: skip
LIFETIME_RAW = ["kind", "span_x", "span_e", "pool", "block"]


@dataclass
class Clocks:
    """What every bucket needs, computed once from the syncs and broadcast: the trusted syncs'
    lanes and happens-before clocks, the ranks scoping the pools, and the gaps found."""

    lanes: pd.Index
    clocks: Any  # hazards._LaneClocks
    ranks: dict[int, tuple[int, int]]
    #: every clock time, sorted and distinct (merged into each bucket's own)
    times: np.ndarray
    gaps: list[dict[str, Any]]
    dropped: tuple[str, ...]
    broken: pd.DataFrame
    syncs: pd.DataFrame
    src: np.ndarray
    #: the trusted acquires (index: their row among ``syncs``): an acquire inside an access
    #: span orders its accesses and is a gap (:mod:`fdprof.analysis.instrumentation`)
    acquires: pd.DataFrame | None = None


def clocks(
    syncs: pd.DataFrame,
    processes: pd.DataFrame,
    span_lanes: Iterable[str],
    drop_objects: Iterable[str] = (),
) -> Clocks:
    """:func:`hazards.prepare`'s sync half (dropped objects and broken locks out, objects
    scoped, syncs paired, clocks), run by ``prepare`` itself on the syncs beside one empty span
    per lane (the spans' lanes, in order of appearance): no access, so nothing else is done."""
    lanes = [str(x) for x in span_lanes]
    k = len(lanes)
    spans = frame("spans", {
        "span_id": np.arange(1, k + 1, dtype=np.int64), "parent_id": np.zeros(k, np.int64),
        "name": np.full(k, "", object), "start": np.zeros(k, np.int64),
        "end": np.zeros(k, np.int64), "pid": np.zeros(k, np.int64),
        "tid": np.zeros(k, np.int64), "lane": np.array(lanes, dtype=object),
        "role": np.full(k, "", object), "step": np.full(k, -1, np.int64),
        "trace_id": np.full(k, None, object),
    })  # fmt: skip
    p = H.prepare(Trace(spans=spans, syncs=syncs, processes=processes), drop_objects)
    acquires = p.syncs[(p.syncs["op"] == "acquire").to_numpy(bool)]
    return Clocks(p.lanes, p.clocks, H.process_ranks(Trace(processes=processes)),
                  np.unique(p.clocks.all_times()), p.gaps, p.dropped, p.broken, p.syncs,
                  p.src, acquires[["op", "obj", "seq", "time", "lane"]])  # fmt: skip


def bucket_spans(part: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A bucket's accesses (the store's rows: the model's columns and the span's
    ``span_start``/``span_end``/``span_lane``/``span_pid``) as the (accesses, spans) pair the
    core's access table takes: one span row per span the bucket names (orphans: none)."""
    named = part["span_lane"].notna().to_numpy()
    first = ~pd.Index(part["span_id"]).duplicated() & named
    spans = pd.DataFrame({
        "span_id": part["span_id"].to_numpy(np.int64)[first],
        "start": part["span_start"].to_numpy(np.int64)[first],
        "end": part["span_end"].to_numpy(np.int64)[first],
        "lane": part["span_lane"].astype(str).to_numpy(object)[first],
        "pid": part["span_pid"].to_numpy(np.int64)[first],
    })  # fmt: skip
    return part, spans


def _merged_times(acc: dict, clock_times: np.ndarray) -> np.ndarray:
    """Every time the bucket's search ranks: its accesses' and the clocks' (sorted merges)."""
    own = np.unique(np.concatenate([acc["start"], acc["end"]]))
    both = np.concatenate([clock_times, own])
    both.sort(kind="stable")  # two sorted runs: a merge
    keep = np.ones(len(both), dtype=bool)
    keep[1:] = both[1:] != both[:-1]
    return both[keep]


def search_bucket(part: pd.DataFrame, c: Clocks, wcp: Any = None) -> dict[str, Any]:
    """The core's access table and candidate search on one bucket: raw racy pairs, alarm pairs
    (conflicting, overlapping, ordered), lifetime violations, the orphan count and how many
    accesses were checked. ``wcp``: clocks to search with instead (``--predict``)."""
    from fdprof import semconv as S

    accesses, spans = bucket_spans(part)
    is_event = accesses["mode"].isin(S.ALLOCATOR_MODES).to_numpy(bool)
    events_in, accesses = accesses[is_event], accesses[~is_event]
    events_in = events_in[events_in["mode"].isin(S.LIFETIME_MODES).to_numpy(bool)]
    acc, _ = H._access_table(spans, accesses, c.lanes, c.ranks)
    orphan = np.flatnonzero(accesses["span_lane"].isna().to_numpy())
    out: dict[str, Any] = {
        "checked": acc["checked"],
        # (how many accesses name no span, the first one's span id): one gap, reduced
        "orphans": (len(orphan), int(accesses["span_id"].iat[orphan[0]]) if len(orphan) else 0),
        "races": _empty_raw(PAIR_RAW),
        "alarms": _empty_raw(PAIR_RAW),
        "lifetime": _empty_raw(LIFETIME_RAW),
        "inside": pd.DataFrame(columns=instrumentation.INSIDE_COLUMNS),
    }
    if acc["n"] == 0:
        return out
    acc["start"], out["inside"] = _entry(spans, acc, c)
    span_ids = spans["span_id"].to_numpy(np.int64)
    rank = H._Ranker(_merged_times(acc, c.times if wcp is None else wcp.sorted_times))
    racy_x, racy_y, over_x, over_y = H._candidate_pairs(acc, c.clocks if wcp is None else wcp,
                                                        rank, len(c.lanes))  # fmt: skip
    out["races"] = _raw_pairs(acc, span_ids, racy_x, racy_y)
    if wcp is not None:
        return out
    n = acc["n"]
    alarm = ~np.isin(over_x * n + over_y, racy_x * n + racy_y)
    out["alarms"] = _raw_pairs(acc, span_ids, over_x[alarm], over_y[alarm])
    events, _ = H._access_table(spans, events_in, c.lanes, c.ranks)
    if events["n"]:
        out["lifetime"] = _raw_lifetime(spans, acc, events, c, span_ids)
    return out


def _entry(spans: pd.DataFrame, acc: dict, c: Clocks) -> tuple[np.ndarray, pd.DataFrame]:
    """The core's entry times of a bucket's accesses (after the acquires inside their span),
    and those acquires, for the gaps the reduction names."""
    if c.acquires is None:
        return acc["start"], pd.DataFrame(columns=instrumentation.INSIDE_COLUMNS)
    return instrumentation.entry_times(spans, acc, c.acquires, c.lanes)


def _empty_raw(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == "pool" else "int64") for c in columns})


def _raw_pairs(acc: dict, span_ids: np.ndarray, x: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({
        "span_x": span_ids[acc["srow"][x]], "span_y": span_ids[acc["srow"][y]],
        "pool": acc["pool"][x], "block": acc["block"][x],
        "write_x": acc["write"][x].astype(np.int64), "write_y": acc["write"][y].astype(np.int64),
        "lo_x": acc["lo"][x], "hi_x": acc["hi"][x], "lo_y": acc["lo"][y], "hi_y": acc["hi"][y],
    })  # fmt: skip


def _raw_lifetime(spans, acc, events, c: Clocks, span_ids) -> pd.DataFrame:
    """:func:`hazards._lifetime` on one bucket, one row per violating access (by span id: the
    names come with the reduction)."""
    pool_code = pd.factorize(np.concatenate([acc["pool"], events["pool"]]))[0]
    block = np.concatenate([acc["block"], events["block"]])
    key = np.unique(np.stack([pool_code, block]), axis=1, return_inverse=True)[1].ravel()
    cols = ("lane", "start", "end")
    k, x, e = lifetime_violations(
        {"key": key[acc["n"] :], "free": events["free"], **{col: events[col] for col in cols}},
        {"key": key[: acc["n"]], **{col: acc[col] for col in cols}},
        c.clocks.happens_before,
    )
    return pd.DataFrame({"kind": k, "span_x": span_ids[acc["srow"][x]],
                         "span_e": span_ids[events["srow"][e]], "pool": acc["pool"][x],
                         "block": acc["block"][x]})  # fmt: skip


def pair_table(spans: pd.DataFrame, raw: pd.DataFrame) -> pd.DataFrame:
    """The core's race table (``PAIR_COLUMNS``) from raw access pairs of every bucket;
    ``spans``: the spans they name, in the trace's row order."""
    if raw.empty:
        return H._pairs_frame(spans, np.empty(0, int), np.empty(0, int), {})
    at = pd.Index(spans["span_id"].to_numpy(np.int64))
    n = len(raw)
    acc = {
        "srow": np.concatenate([at.get_indexer(raw["span_x"]), at.get_indexer(raw["span_y"])]),
        "pool": np.concatenate([raw["pool"].to_numpy(object)] * 2),
        "block": np.concatenate([raw["block"].to_numpy(np.int64)] * 2),
        "write": np.concatenate([raw["write_x"], raw["write_y"]]).astype(bool),
        "lo": np.concatenate([raw["lo_x"], raw["lo_y"]]).astype(np.int64),
        "hi": np.concatenate([raw["hi_x"], raw["hi_y"]]).astype(np.int64),
    }
    return H._pairs_frame(spans, np.arange(n), np.arange(n, 2 * n), acc)


def lifetime_table(spans: pd.DataFrame, raw: pd.DataFrame) -> pd.DataFrame:
    if raw.empty:
        return empty_violations()
    at = pd.Index(spans["span_id"].to_numpy(np.int64))
    x, e = at.get_indexer(raw["span_x"]), at.get_indexer(raw["span_e"])
    kind, pool, block = (raw["kind"].to_numpy(np.int64), raw["pool"].to_numpy(object),
                         raw["block"].to_numpy(np.int64))  # fmt: skip
    return violations_frame(spans, kind, x, e, pool, block)


def report(
    c: Clocks,
    spans: pd.DataFrame,
    unended: pd.DataFrame,
    races: pd.DataFrame,
    alarms: pd.DataFrame,
    lifetime: pd.DataFrame,
    checked: int,
    orphans: tuple[int, int],
    inside: pd.DataFrame | None = None,
) -> H.HazardReport:
    """The core's report from the reduced pieces (``inside``: the buckets' acquires inside
    access spans, ``spans`` naming their spans too)."""
    gaps = list(c.gaps)
    if inside is not None:
        gaps += instrumentation.inside_gaps(inside, spans)
    if orphans[0]:
        gaps.append(H._gap("orphan_access", "", "", -1, -1, orphans[1],
                           f"{orphans[0]} access rows name no span"))  # fmt: skip
    gaps += H._truncation_gaps(unended)
    return H.HazardReport(pair_table(spans, races),
                          pair_table(spans, alarms).drop(columns="overlapped"),
                          H._gap_frame(gaps), c.dropped, tuple(c.lanes), checked, c.broken,
                          lifetime=lifetime_table(spans, lifetime),
                          ownership_checked=False)  # fmt: skip


# -- WCP (--predict) --


def wcp_setup(c: Clocks) -> dict[str, Any]:
    """The whole-trace parts of :class:`predict.WcpClocks` that need only the syncs: the
    clocks of every row with all edges and with hard edges only, the holds, and each row's
    releases before it on its lane."""
    syncs, k = c.syncs, len(c.lanes)
    n = len(syncs)
    hb = c.clocks
    is_rel = (syncs["op"] == "release").to_numpy(bool)
    is_lock = P.lock_rows_mask(syncs) if n else np.zeros(0, bool)
    lane = c.lanes.get_indexer(syncs["lane"].astype(str)) if n else np.empty(0, np.int64)
    time = syncs["time"].to_numpy(np.int64)
    h_full = P._row_clocks(hb, n, k)
    hard_src = np.where(is_lock & ~is_rel, -1, c.src)
    hard = H._LaneClocks(syncs, hard_src, c.lanes, [])
    h_hard = P._row_clocks(hard, n, k)
    rel_before = np.zeros(n, dtype=np.int64)
    for rows in hb.lane_rows:
        r = is_rel[rows].astype(np.int64)
        rel_before[rows] = np.cumsum(r) - r
    return {"is_rel": is_rel, "is_lock": is_lock, "lane": lane, "time": time,
            "h_full": h_full, "hard": hard, "h_hard": h_hard, "rel_before": rel_before,
            "holds": P._ordered_holds(syncs)}  # fmt: skip


class _Part:
    """The slice of :class:`hazards.Prepared` that rule (a) reads: one bucket's access table
    (its ``srow`` holding span ids) and the lanes."""

    def __init__(self, acc: dict, lanes: pd.Index) -> None:
        self.acc, self.lanes = acc, lanes


def wcp_landings(part: pd.DataFrame, c: Clocks, w: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Rule (a) on one bucket (it groups by (lock, block), so buckets by block are exact):
    (span ids, their start, their lane, the joined clock landing at each span's start)."""
    from fdprof import semconv as S

    accesses, spans = bucket_spans(part)
    accesses = accesses[~accesses["mode"].isin(S.ALLOCATOR_MODES).to_numpy(bool)]
    acc, _ = H._access_table(spans, accesses, c.lanes, c.ranks)
    k = len(c.lanes)
    empty = (np.empty(0, np.int64),) * 3 + (np.zeros((0, k), np.int64),)
    if acc["n"] == 0:
        return empty
    acc["start"], _ = _entry(spans, acc, c)
    entry = spans["start"].to_numpy(np.int64).copy()  # a landing span's entry time
    entry[acc["srow"]] = acc["start"]
    span_ids = spans["span_id"].to_numpy(np.int64)
    local = acc["srow"]
    acc = dict(acc, srow=span_ids[local])
    rows, vc = P._rule_a(_Part(acc, c.lanes), w["holds"], w["hard"], w["h_full"], w["h_hard"],
                         w["rel_before"], w["lane"], w["time"])  # fmt: skip
    if not len(rows):
        return empty
    at = pd.Index(span_ids).get_indexer(rows)
    return rows, entry[at], c.lanes.get_indexer(
        spans["lane"].to_numpy(object)[at]), vc  # fmt: skip


class _Spans:
    """The slice of :class:`hazards.Prepared` the WCP propagation reads: the landing spans
    (lane, start), the lanes, the HB clocks' lane order and each acquire's release."""

    def __init__(self, c: Clocks, lane: np.ndarray, start: np.ndarray) -> None:
        self.lanes, self.clocks, self.src = c.lanes, c.clocks, c.src
        self.spans = pd.DataFrame({"lane": np.asarray(c.lanes, dtype=object)[lane],
                                   "start": start})  # fmt: skip


class WcpBroadcast:
    """The WCP clocks in the shape the candidate search queries (``times``, ``vc``,
    ``release_times``, ``all_times``), built on the client from every bucket's landings."""

    def __init__(self, c: Clocks, w: dict[str, Any], landings: list[tuple]) -> None:
        k = len(c.lanes)
        rows = np.concatenate([x[0] for x in landings]) if landings else np.empty(0, np.int64)
        start = np.concatenate([x[1] for x in landings]) if landings else np.empty(0, np.int64)
        lane = np.concatenate([x[2] for x in landings]) if landings else np.empty(0, np.int64)
        vc = np.concatenate([x[3] for x in landings]) if landings else np.zeros((0, k), np.int64)
        if len(rows):  # a span landed on in several buckets: the join of its clocks
            frame = pd.DataFrame(vc).groupby(rows).max()
            first = pd.DataFrame({"r": rows, "s": start, "l": lane}).groupby("r").first()
            rows, vc = frame.index.to_numpy(np.int64), frame.to_numpy(np.int64)
            start = first.loc[rows, "s"].to_numpy(np.int64)
            lane = first.loc[rows, "l"].to_numpy(np.int64)
        spans = _Spans(c, lane, start)
        self.release_times = c.clocks.release_times
        self.times, self.vc = P._propagate_wcp(spans, w["holds"], (np.arange(len(rows)), vc),
                                               w["h_full"], w["rel_before"], w["is_rel"],
                                               w["is_lock"], w["lane"], w["time"])  # fmt: skip
        #: every WCP clock time, sorted and distinct
        self.sorted_times = np.unique(self.all_times())

    def all_times(self) -> np.ndarray:
        return np.concatenate(self.times) if self.times else np.empty(0, np.int64)
