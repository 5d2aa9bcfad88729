"""The seam between the partitioned analyses (:mod:`fdprof.analysis.distributed`) and the
in-process happens-before core: everything the distributed execution takes from the core, on
the core's public API (:mod:`fdprof.analysis.tables`, :mod:`fdprof.analysis.clocks`,
:mod:`fdprof.analysis.search`, the steps of :mod:`fdprof.analysis.predict`), so the pieces
are the core's own steps on a piece of the trace: the clocks from the whole (small) sync
table, the search on one block bucket's accesses, the report tables from the pieces' raw
results.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis import hazards as H
from fdprof.analysis import instrumentation
from fdprof.analysis import predict as P
from fdprof.analysis.clocks import SyncClocks
from fdprof.analysis.columns import empty_frame
from fdprof.analysis.lifetime import empty_violations, lifetime_violations, violations_frame
from fdprof.analysis.search import ClockIndex, unordered_pairs
from fdprof.analysis.tables import (
    WRITE,
    AccessTable,
    SyncTable,
    access_table,
    gap,
    process_ranks,
)
from fdprof.trace.model import Trace, frame

#: what a bucket's search returns per access pair: the two spans and the access of each
PAIR_RAW = ["span_x", "span_y", "pool", "block", "write_x", "write_y", "lo_x", "hi_x",
            "lo_y", "hi_y"]  # fmt: skip
LIFETIME_RAW = ["kind", "span_x", "span_e", "pool", "block"]


@dataclass
class Clocks:
    """What every bucket needs, computed once from the syncs and broadcast: the lanes, the
    trusted syncs' happens-before clocks (``sync``; ``index``, what the search reads of
    them), the ranks scoping the pools, and the gaps found. ``syncs``/``table``: the trusted
    syncs, for WCP's setup on the client (not broadcast)."""

    lanes: pd.Index
    sync: SyncClocks
    index: ClockIndex
    ranks: dict[int, tuple[int, int]]
    gaps: list[dict[str, Any]]
    dropped: tuple[str, ...]
    broken: pd.DataFrame
    syncs: pd.DataFrame | None
    table: SyncTable | None
    #: the trusted acquires: one inside an access span orders its accesses and is a gap
    #: (:mod:`fdprof.analysis.instrumentation`)
    acquires: instrumentation.Acquires | None = None


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
    return Clocks(p.lanes, p.clocks, ClockIndex.of(p.clocks.lanes), process_ranks(processes),
                  p.gaps, p.dropped, p.broken, p.syncs, p.table,
                  instrumentation.Acquires.of(p.table, tuple(p.lanes)))  # fmt: skip


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


def _tables(
    part: pd.DataFrame, c: Clocks
) -> tuple[pd.DataFrame, AccessTable, AccessTable, pd.DataFrame]:
    """A bucket's spans and typed tables: its accesses (starts: their entry times, after the
    acquires inside their span), the allocator events the lifetime check reads, and the
    acquires found inside access spans (:func:`instrumentation.entered`)."""
    accesses, spans = bucket_spans(part)
    lane = c.lanes.get_indexer(spans["lane"].to_numpy(object)).astype(np.int64)
    every, _ = access_table(spans, accesses, lane, c.ranks)  # orphans: counted by the caller
    is_event = every.mode > WRITE
    acc, inside = every.take(~is_event), pd.DataFrame(columns=instrumentation.INSIDE_COLUMNS)
    if c.acquires is not None:
        acc, inside = instrumentation.entered(acc, c.acquires,
                                              spans["span_id"].to_numpy(np.int64))  # fmt: skip
    return spans, acc, H.lifetime_events(every.take(is_event)), inside


def search_bucket(part: pd.DataFrame, c: Clocks, wcp: WcpBroadcast | None = None) -> dict:
    """The core's access table and candidate search on one bucket: raw racy pairs, alarm pairs
    (conflicting, overlapping, ordered), lifetime violations, the orphan count and how many
    accesses were checked. ``wcp``: clocks to search with instead (``--predict``)."""
    spans, acc, events, inside = _tables(part, c)
    accesses = part[~part["mode"].isin(S.ALLOCATOR_MODES).to_numpy(bool)]
    orphan = np.flatnonzero(accesses["span_lane"].isna().to_numpy())
    out: dict[str, Any] = {
        "checked": acc.checked,
        # (how many accesses name no span, the first one's span id): one gap, reduced
        "orphans": (len(orphan), int(accesses["span_id"].iat[orphan[0]]) if len(orphan) else 0),
        "races": _empty_raw(PAIR_RAW),
        "alarms": _empty_raw(PAIR_RAW),
        "lifetime": _empty_raw(LIFETIME_RAW),
        "inside": inside,
    }
    if len(acc) == 0:
        return out
    span_ids = spans["span_id"].to_numpy(np.int64)
    found = unordered_pairs(acc, c.index if wcp is None else wcp.index, alarms=wcp is None)
    out["races"] = _raw_pairs(acc, span_ids, found.racy_x, found.racy_y)
    if wcp is not None:
        return out
    out["alarms"] = _raw_pairs(acc, span_ids, found.alarm_x, found.alarm_y)
    if len(events):
        out["lifetime"] = _raw_lifetime(acc, events, c, span_ids)
    return out


def _empty_raw(columns: list[str]) -> pd.DataFrame:
    return empty_frame(columns, {"pool": object}, default="int64")


def _raw_pairs(acc: AccessTable, span_ids: np.ndarray, x: np.ndarray, y: np.ndarray):
    write = acc.write
    return pd.DataFrame({
        "span_x": span_ids[acc.span[x]], "span_y": span_ids[acc.span[y]],
        "pool": acc.pool_names()[x], "block": acc.block[x],
        "write_x": write[x].astype(np.int64), "write_y": write[y].astype(np.int64),
        "lo_x": acc.lo[x], "hi_x": acc.hi[x], "lo_y": acc.lo[y], "hi_y": acc.hi[y],
    })  # fmt: skip


def _raw_lifetime(acc: AccessTable, events: AccessTable, c: Clocks, span_ids) -> pd.DataFrame:
    """:func:`hazards._lifetime` on one bucket, one row per violating access (by span id: the
    names come with the reduction)."""
    cols = ("key", "lane", "start", "end")
    k, x, e = lifetime_violations(
        {"free": events.free, **{col: getattr(events, col) for col in cols}},
        {col: getattr(acc, col) for col in cols},
        c.sync.lanes.happens_before,
    )
    return pd.DataFrame({"kind": k, "span_x": span_ids[acc.span[x]],
                         "span_e": span_ids[events.span[e]], "pool": acc.pool_names()[x],
                         "block": acc.block[x]})  # fmt: skip


def pair_table(spans: pd.DataFrame, raw: pd.DataFrame) -> pd.DataFrame:
    """The core's race table (``PAIR_COLUMNS``) from raw access pairs of every bucket;
    ``spans``: the spans they name, in the trace's row order."""
    at = pd.Index(spans["span_id"].to_numpy(np.int64))
    pool = raw["pool"].to_numpy(object)
    block = raw["block"].to_numpy(np.int64)
    x, y = (H.AccessPairs(at.get_indexer(raw[f"span_{s}"]).astype(np.int64), pool, block,
                          raw[f"write_{s}"].to_numpy().astype(bool),
                          raw[f"lo_{s}"].to_numpy(np.int64), raw[f"hi_{s}"].to_numpy(np.int64))
            for s in "xy")  # fmt: skip
    return H.race_table(spans, x, y)


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
        gaps.append(gap("orphan_access", "", "", -1, -1, orphans[1],
                        f"{orphans[0]} access rows name no span"))  # fmt: skip
    gaps += H.truncation_gaps(unended)
    return H.HazardReport(pair_table(spans, races),
                          pair_table(spans, alarms).drop(columns="overlapped"),
                          H.gap_frame(gaps), c.dropped, tuple(c.lanes), checked, c.broken,
                          lifetime=lifetime_table(spans, lifetime),
                          ownership_checked=False)  # fmt: skip


# -- WCP (--predict) --


def wcp_setup(c: Clocks) -> P.WcpSetup:
    """WCP's part of the syncs (:func:`predict.wcp_setup`), computed once and broadcast."""
    return P.wcp_setup(c.syncs, c.table, c.sync)


def wcp_landings(part: pd.DataFrame, c: Clocks, w: P.WcpSetup) -> tuple[np.ndarray, ...]:
    """Rule (a) on one bucket (it groups by (lock, block), so buckets by block are exact):
    (span ids, their entry time, their lane, the joined clock landing at each span's entry)."""
    spans, acc, _, _ = _tables(part, c)
    rows, vc = P.landings(w, acc)
    if not len(rows):
        return (np.empty(0, np.int64),) * 3 + (np.zeros((0, len(c.lanes)), np.int64),)
    lane = c.lanes.get_indexer(spans["lane"].to_numpy(object)[rows]).astype(np.int64)
    entry = spans["start"].to_numpy(np.int64).copy()  # a landing span's entry time
    entry[acc.span] = acc.start
    return spans["span_id"].to_numpy(np.int64)[rows], entry[rows], lane, vc


class WcpBroadcast:
    """The WCP clocks (:func:`predict.propagate`) built on the client from every bucket's
    landings, and what the search reads of them (``index``), broadcast to the buckets."""

    def __init__(self, c: Clocks, w: P.WcpSetup, landings: list[tuple]) -> None:
        k = len(c.lanes)
        ids = np.concatenate([x[0] for x in landings]) if landings else np.empty(0, np.int64)
        start = np.concatenate([x[1] for x in landings]) if landings else np.empty(0, np.int64)
        lane = np.concatenate([x[2] for x in landings]) if landings else np.empty(0, np.int64)
        vc = np.concatenate([x[3] for x in landings]) if landings else np.zeros((0, k), np.int64)
        if len(ids):  # a span landed on in several buckets: the join of its clocks
            order = np.argsort(ids, kind="stable")
            ids, start, lane, vc = ids[order], start[order], lane[order], vc[order]
            first = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
            start, lane, vc = start[first], lane[first], np.maximum.reduceat(vc, first, axis=0)
        self.index = ClockIndex.of(P.propagate(w, lane, start, vc))
