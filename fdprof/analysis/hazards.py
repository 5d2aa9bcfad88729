"""KV-cache hazard detection: happens-before over lanes and sync edges, by vector clocks.

Why: removing a lock is safe only if every pair of conflicting accesses to a KV block stays
ordered by the protocol's own edges (queue messages, completion signals), whether or not the
two accesses happened to overlap in time this run. Timestamps decide nothing here except the
order *within* a lane and whether a pair overlapped in wall-clock time (for reporting).

Model (see :mod:`fdprof.trace.model`): a lane's sync events are in program order by
``(time, row)``. A keyed acquire pairs with the release of the same ``(obj, seq)``; an
unkeyed one (locks, mutexes) with the object's latest unkeyed release at or before it. Each
lane carries a vector clock whose own entry counts its releases, so a span S on lane
L has an *epoch* (the index of the first release on L at or after ``S.end``) and an *entry
clock* (the clock after every sync on L at or before ``S.start``). S happens before T (on lane
M) iff ``entry(T)[L] >= epoch(S)``. Per lane, the clock entries and the release times are
monotone, so for an access X the accesses on lane M that are unordered with X are exactly the
spans intersecting one time window ``(tB, tA)``: a range query on spans sorted per
(pool, block), answered for all accesses at once with ``numpy.searchsorted`` (FastTrack's
epoch idea, extended to report every racing pair rather than the first).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis import instrumentation, verdicts
from fdprof.analysis.clocks import LaneClocks, SyncClocks, pair_syncs, sync_clocks
from fdprof.analysis.columns import empty_frame, json_records, require
from fdprof.analysis.lifetime import empty_violations, lifetime_violations, violations_frame
from fdprof.analysis.locks import broken_locks, lock_holds, no_broken_locks
from fdprof.analysis.ownership import empty_findings, find_ownership, ownership_kinds
from fdprof.analysis.search import Pairs, unordered_pairs
from fdprof.analysis.tables import (
    ALL_LAYERS,
    ALLOC,
    FREE,
    GAP_COLUMNS,
    WRITE,
    AccessTable,
    SyncTable,
    access_table,
    gap,
    process_ranks,
    scoped_objects,
    sync_table,
)
from fdprof.errors import FdprofError
from fdprof.trace.model import Trace

SPAN_NEEDS = ("span_id", "name", "start", "end", "lane", "role", "step")
ACCESS_NEEDS = ("span_id", "pool", "block", "mode", "layer_lo", "layer_hi")
SYNC_NEEDS = ("op", "obj", "seq", "keyed", "time", "lane")

#: the columns of ``HazardReport.gaps``
__all__ = ["GAP_COLUMNS", "HazardReport", "Prepared", "find_hazards", "prepare", "race_kinds"]


@dataclass(frozen=True)
class HazardReport:
    """What :func:`find_hazards` found. ``races`` holds every unordered conflicting pair of
    spans (``overlapped`` says whether they overlapped in time this run); ``alarms`` the
    ordered pairs that overlapped anyway (clock skew or mis-scoped spans); ``gaps`` the
    instrumentation holes (acquire without release, truncated lanes, sync cycles)."""

    races: pd.DataFrame
    alarms: pd.DataFrame
    gaps: pd.DataFrame
    dropped_objects: tuple[str, ...] = ()
    lanes: tuple[str, ...] = field(default=())
    #: KV-block accesses of finished spans that were checked; 0 means nothing was checked
    #: (no ``kv.*`` attributes), which is not the same as clean
    accesses: int = 0
    #: pairs of holds of one lock overlapping in time on different lanes
    #: (:func:`fdprof.analysis.locks.broken_locks`): the lock did not exclude
    broken_locks: pd.DataFrame = field(default_factory=no_broken_locks)
    #: with ``--predict`` (:func:`fdprof.analysis.predict.predict_races`): conflicting span
    #: pairs happens-before orders only through a lock's schedule (WCP does not); None: not
    #: asked. Not races of this run, and not in ``clean``
    predicted: pd.DataFrame | None = None
    #: accesses outside their block's lifetime, where the trace records the allocator's events
    #: (:mod:`fdprof.analysis.lifetime`): a use after free or a block freed while in use
    lifetime: pd.DataFrame = field(default_factory=empty_violations)
    #: ownership findings (:mod:`fdprof.analysis.ownership`): blocks handed out, freed or
    #: written while another request holds them, reads without a hold or after the content was
    #: reused, frees under transfers, reference counts below zero or leaked
    ownership: pd.DataFrame = field(default_factory=empty_findings)
    #: whether the ownership analysis ran (the Dask path does not run it yet)
    ownership_checked: bool = True

    @property
    def untrusted_locks(self) -> tuple[str, ...]:
        """Lock objects whose edges were not taken as order, being broken."""
        return tuple(sorted(set(self.broken_locks["obj"].tolist())))

    @property
    def latent(self) -> pd.DataFrame:
        """Races that did not overlap in time this run: the next run may not be so lucky."""
        return self.races[~self.races["overlapped"]]

    @property
    def overlaps(self) -> pd.DataFrame:
        """Races whose two spans did overlap in time this run."""
        return self.races[self.races["overlapped"]]

    @property
    def counts(self) -> dict[str, int]:
        return {
            "races": len(self.races),
            "latent": len(self.latent),
            "overlaps": len(self.overlaps),
            "clock_alarms": len(self.alarms),
            "gaps": len(self.gaps),
            "broken_locks": len(self.broken_locks),
            "lifetime": len(self.lifetime),
            "ownership": len(self.ownership),
        } | ({} if self.predicted is None else {"predicted": len(self.predicted)})

    @property
    def clean(self) -> bool:
        """No race, no access outside its block's lifetime and no ownership finding
        (:func:`verdicts.safe`); a lock that failed to exclude is named beside, its edges
        already left out of the order."""
        return verdicts.safe(self.counts)

    @property
    def kinds(self) -> pd.DataFrame:
        """The races grouped by kind: see :func:`race_kinds`."""
        return race_kinds(self.races)

    def to_json(self) -> dict[str, Any]:
        return {
            "races": json_records(self.races),
            "race_kinds": json_records(self.kinds),
            "counts": self.counts,
            "clock_alarms": json_records(self.alarms),
            "gaps": json_records(self.gaps),
            "dropped_objects": list(self.dropped_objects),
            "broken_locks": json_records(self.broken_locks),
            "lifetime": json_records(self.lifetime),
            "ownership": json_records(self.ownership),
            "ownership_kinds": json_records(ownership_kinds(self.ownership)),
            "untrusted_locks": list(self.untrusted_locks),
            "checked": {"accesses": self.accesses, "lanes": len(self.lanes),
                        "ownership": self.ownership_checked},
        } | ({} if self.predicted is None else {
            "predicted_races": json_records(self.predicted),
            "predicted_kinds": json_records(race_kinds(self.predicted))})  # fmt: skip


def find_hazards(trace: Trace, drop_objects: Iterable[str] = ()) -> HazardReport:
    """Races, clock alarms, gaps and broken locks of ``trace``; sync objects matching any glob
    in ``drop_objects`` (e.g. ``"lock:*"``) are ignored, as if their edges were never there,
    and so are the edges of a lock whose holds overlapped on two lanes (a broken lock)."""
    return prepare(trace, drop_objects).report()


@dataclass
class Prepared:
    """What :func:`find_hazards` has in hand before it looks for races: the syncs it trusts
    (scoped, broken locks and dropped objects gone; ``syncs`` the frame, ``table`` its typed
    form), their happens-before clocks (``clocks``: each acquire's release after cycle
    breaking, the clock of every sync row, the lane form), the lanes, and the typed access
    table (``acc``; the allocator's events apart, ``events``). The hook for analyses that order
    the same accesses differently (:mod:`fdprof.analysis.predict`). ``acc``'s starts are its
    accesses' entry times (after the acquires inside their span,
    :mod:`fdprof.analysis.instrumentation`); ``ownership``: the ownership findings."""

    spans: pd.DataFrame
    syncs: pd.DataFrame
    table: SyncTable
    lanes: pd.Index
    clocks: SyncClocks
    acc: AccessTable
    events: AccessTable
    gaps: list[dict[str, Any]]
    dropped: tuple[str, ...]
    broken: pd.DataFrame
    ownership: pd.DataFrame = field(default_factory=empty_findings)

    @property
    def src(self) -> np.ndarray:
        """Each sync row's release (-1: none), as the clocks used it."""
        return self.clocks.src

    def unordered(self, clocks: LaneClocks, alarms: bool = True) -> Pairs:
        """Access pairs that conflict and are unordered by ``clocks`` (any clocks of the
        :class:`~fdprof.analysis.clocks.LaneClocks` shape), and with ``alarms`` the ordered
        ones that overlap in time."""
        return unordered_pairs(self.acc, clocks, alarms=alarms)

    def pairs(self, x: np.ndarray, y: np.ndarray) -> pd.DataFrame:
        """Access pairs (rows of ``acc``) as span pairs (:data:`PAIR_COLUMNS`)."""
        return race_table(self.spans, AccessPairs.of(self.acc, x), AccessPairs.of(self.acc, y))

    def report(self) -> HazardReport:
        gaps, lanes = gap_frame(self.gaps), tuple(self.lanes)
        lifetime = _lifetime(self.spans, self.acc, lifetime_events(self.events),
                             self.clocks.lanes)  # fmt: skip
        found = self.unordered(self.clocks.lanes)
        races = self.pairs(found.racy_x, found.racy_y)
        alarms = self.pairs(found.alarm_x, found.alarm_y).drop(columns="overlapped")
        return HazardReport(races, alarms, gaps, self.dropped, lanes, self.acc.checked,
                            self.broken, lifetime=lifetime, ownership=self.ownership)  # fmt: skip


def prepare(trace: Trace, drop_objects: Iterable[str] = ()) -> Prepared:
    """The trusted syncs, their pairing, happens-before clocks and the access table of
    ``trace`` (see :func:`find_hazards`)."""
    spans = require(trace.spans, "spans", SPAN_NEEDS)
    accesses = require(trace.accesses, "accesses", ACCESS_NEEDS)
    syncs = require(trace.syncs, "syncs", SYNC_NEEDS)
    dropped = tuple(drop_objects)
    if dropped and not syncs.empty:
        objs = syncs["obj"].astype(str)
        keep = ~objs.map(lambda o: any(fnmatch.fnmatchcase(o, p) for p in dropped)).astype(bool)
        syncs = syncs[keep.to_numpy()]
    syncs = syncs.reset_index(drop=True)
    bad = ~syncs["op"].isin(list(S.SyncOp))
    if bad.any():
        raise FdprofError(f"sync op {syncs['op'][bad].iloc[0]!r} is neither release nor acquire")
    ranks = process_ranks(trace.processes)
    syncs = scoped_objects(syncs, {pid: dp for pid, (dp, _) in ranks.items()})
    broken = broken_locks(lock_holds(syncs))
    if not broken.empty:  # a lock that did not exclude orders nothing
        syncs = syncs[~syncs["obj"].isin(set(broken["obj"].tolist())).to_numpy(bool)]
        syncs = syncs.reset_index(drop=True)
    lanes, span_lane = _lanes(spans, syncs)
    table = sync_table(syncs, lanes)
    names = tuple(lanes)
    src, gaps = pair_syncs(table, names)
    clocks = sync_clocks(table, src, names, gaps)
    every, orphan_gaps = access_table(spans, accesses, span_lane, ranks)
    is_event = every.mode > WRITE
    acc, events = every.take(~is_event), every.take(is_event)
    # an acquire inside an access span is a gap, and orders the span's accesses
    span_ids = spans["span_id"].to_numpy(np.int64)
    acc, inside = instrumentation.entered(acc, instrumentation.Acquires.of(table, names), span_ids)
    gaps += orphan_gaps + instrumentation.inside_gaps(inside, spans)
    gaps += instrumentation.unsubmitted_waits(trace)
    gaps += truncation_gaps(spans)
    dp_of_pid = {pid: dp for pid, (dp, _) in ranks.items()}
    ownership = find_ownership(trace, spans, acc, events, lanes, dp_of_pid,
                               clocks.lanes.happens_before)  # fmt: skip
    return Prepared(spans, syncs, table, lanes, clocks, acc, events, gaps, dropped, broken,
                    ownership)  # fmt: skip


def lifetime_events(events: AccessTable) -> AccessTable:
    """The allocator events the lifetime check reads (hand-outs and frees, not holds)."""
    return events.take(np.isin(events.mode, (ALLOC, FREE)))


def _lanes(spans: pd.DataFrame, syncs: pd.DataFrame) -> tuple[pd.Index, np.ndarray]:
    """Every lane (the spans' in order of appearance, then the syncs' others) and each span
    row's lane code; lane columns factorized, not turned into a Python string per row."""
    codes, uniques = pd.factorize(spans["lane"], use_na_sentinel=False)
    sync_lanes = pd.unique(syncs["lane"].astype(str)) if len(syncs) else []
    lanes = pd.Index(pd.unique(np.concatenate([
        np.asarray([str(u) for u in uniques], dtype=object),
        np.asarray(sync_lanes, dtype=object)])))  # fmt: skip
    span_lane = lanes.get_indexer(np.asarray([str(u) for u in uniques], dtype=object))
    return lanes, span_lane[codes].astype(np.int64) if len(codes) else np.zeros(0, np.int64)


def _lifetime(
    spans: pd.DataFrame, acc: AccessTable, events: AccessTable, clocks: LaneClocks
) -> pd.DataFrame:
    """Accesses outside their block's lifetime (:mod:`fdprof.analysis.lifetime`), pools
    scoped as for races (both tables share one key numbering)."""
    if len(events) == 0 or len(acc) == 0:
        return empty_violations()
    cols = ("key", "lane", "start", "end")
    kind, x, e = lifetime_violations(
        {"free": events.free, **{c: getattr(events, c) for c in cols}},
        {c: getattr(acc, c) for c in cols},
        clocks.happens_before,
    )
    return violations_frame(spans, kind, acc.span[x], events.span[e], acc.pool_names()[x],
                            acc.block[x])  # fmt: skip


KIND_KEYS = ["name_a", "role_a", "name_b", "role_b", "modes"]


def race_kinds(races: pd.DataFrame) -> pd.DataFrame:
    """Races grouped by what raced with what (span names, roles, access modes): one row per
    root-cause candidate, as a seeded bug shows up as hundreds of pairs of one kind. Each pair
    is put in a fixed order first (a: the smaller (name, role); ``modes`` follow), so a kind
    does not split by which span came first. Columns: ``pairs``, ``overlapped`` (pairs that
    overlapped in time), ``spans_a``/``spans_b`` (distinct spans), ``blocks`` (distinct
    blocks), ``first_ns`` (earliest start of a pair); most pairs first."""
    if races.empty:
        return pd.DataFrame(columns=[*KIND_KEYS, "pairs", "overlapped", "spans_a", "spans_b",
                                     "blocks", "first_ns"])  # fmt: skip
    a = races[["name_a", "role_a", "span_a"]].astype({"name_a": str, "role_a": str}).to_numpy()
    b = races[["name_b", "role_b", "span_b"]].astype({"name_b": str, "role_b": str}).to_numpy()
    flip = (a[:, 0] > b[:, 0]) | ((a[:, 0] == b[:, 0]) & (a[:, 1] > b[:, 1]))
    a[flip], b[flip] = b[flip], a[flip].copy()
    modes = races["modes"].astype(str).to_numpy(dtype=object)
    modes[flip] = [m[::-1] for m in modes[flip]]
    frame = pd.DataFrame({
        "name_a": a[:, 0], "role_a": a[:, 1], "name_b": b[:, 0], "role_b": b[:, 1],
        "modes": modes, "span_a": a[:, 2], "span_b": b[:, 2],
        "overlapped": races["overlapped"].to_numpy(), "blocks": races["blocks"].to_numpy(),
        "first_ns": np.minimum(races["start_a"], races["start_b"]).to_numpy(),
    })  # fmt: skip
    g = frame.groupby(KIND_KEYS, sort=False)
    out = g.agg(
        pairs=("span_a", "size"),
        overlapped=("overlapped", "sum"),
        spans_a=("span_a", "nunique"),
        spans_b=("span_b", "nunique"),
        first_ns=("first_ns", "min"),
    ).join(g["blocks"].agg(lambda b: len({x for blocks in b for x in blocks})).rename("blocks"))
    out = out.reset_index()[[*KIND_KEYS, "pairs", "overlapped", "spans_a", "spans_b", "blocks",
                             "first_ns"]]  # fmt: skip
    return out.sort_values(["pairs", "first_ns"], ascending=[False, True]).reset_index(drop=True)


def truncation_gaps(spans: pd.DataFrame) -> list[dict[str, Any]]:
    """One gap per lane whose spans never ended (the process died or the trace was cut)."""
    cut = np.flatnonzero(spans["end"].to_numpy(np.int64) == -1)
    if len(cut) == 0:
        return []
    lane = spans["lane"].to_numpy(dtype=object, na_value="")[cut]
    start = spans["start"].to_numpy(np.int64)[cut]
    out = []
    for name in sorted(set(lane.tolist())):
        on = cut[lane == name]
        first = on[np.argmin(start[lane == name])]
        out.append(
            gap(
                "truncated",
                name,
                "",
                -1,
                int(spans["start"].iat[first]),
                int(spans["span_id"].iat[first]),
                f"{len(on)} span(s) never ended, first {spans['name'].iat[first]!r}",
            )
        )
    return out


PAIR_COLUMNS = [
    "span_a", "span_b", "name_a", "name_b", "lane_a", "lane_b", "role_a", "role_b",
    "step_a", "step_b", "start_a", "end_a", "start_b", "end_b", "blocks", "n_blocks",
    "modes", "layers_a", "layers_b", "overlapped",
]  # fmt: skip


def race_table(spans: pd.DataFrame, x: AccessPairs, y: AccessPairs) -> pd.DataFrame:
    """Access pairs aggregated per pair of spans (:data:`PAIR_COLUMNS`), ``a`` the one that
    started first: the race and alarm tables. ``x`` and ``y`` are the pairs' two sides, each
    access as its span's row in ``spans``, scoped pool name, block, mode and layer range; the
    pairs may come from any partition of the accesses (pairs of one span pair from several
    partitions are aggregated here)."""
    if len(x.span) == 0:
        return _empty_pairs().copy()
    start = spans["start"].to_numpy(np.int64)
    swap = (start[y.span] < start[x.span]) | ((start[y.span] == start[x.span]) & (y.span < x.span))
    a, b = x.where(~swap, y), x.where(swap, y)
    groups, first, inverse = np.unique(a.span * len(start) + b.span, return_index=True,
                                       return_inverse=True)  # fmt: skip
    sets: list[tuple[set, set, set, set]] = [(set(), set(), set(), set()) for _ in groups]
    for g, pool, block, wa, wb, la, ha, lb, hb in zip(
        inverse.ravel().tolist(), a.pool.tolist(), a.block.tolist(), a.write.tolist(),
        b.write.tolist(), a.lo.tolist(), a.hi.tolist(), b.lo.tolist(), b.hi.tolist(), strict=True,
    ):  # fmt: skip
        blocks, modes, layers_a, layers_b = sets[g]
        blocks.add((pool, block))
        modes.add(("w" if wa else "r") + ("w" if wb else "r"))
        layers_a.add(_layer_text(la, ha))
        layers_b.add(_layer_text(lb, hb))
    ra, rb = a.span[first], b.span[first]
    out: dict[str, Any] = {}
    for c in ("span_id", "name", "lane", "role", "step", "start", "end"):
        column = spans[c]  # the pairs' rows taken first: no Python object per span of the trace
        out[f"{c}_a"], out[f"{c}_b"] = column.take(ra).to_numpy(), column.take(rb).to_numpy()
    frame = pd.DataFrame(out).rename(columns={"span_id_a": "span_a", "span_id_b": "span_b"})
    frame["blocks"] = [[f"{p}:{b}" for p, b in sorted(s[0])] for s in sets]
    frame["n_blocks"] = [len(s[0]) for s in sets]
    for i, col in ((1, "modes"), (2, "layers_a"), (3, "layers_b")):
        frame[col] = [",".join(sorted(s[i])) for s in sets]
    frame["overlapped"] = (frame["start_a"] < frame["end_b"]) & (frame["start_b"] < frame["end_a"])
    return frame[PAIR_COLUMNS]


@dataclass(frozen=True)
class AccessPairs:
    """One side of a list of access pairs, as :func:`race_table` reads it: each access's span
    row, scoped pool name, block, whether it writes, layer range."""

    span: np.ndarray
    pool: np.ndarray
    block: np.ndarray
    write: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def of(cls, acc: AccessTable, rows: np.ndarray) -> AccessPairs:
        return cls(acc.span[rows], acc.pool_names()[rows], acc.block[rows], acc.write[rows],
                   acc.lo[rows], acc.hi[rows])  # fmt: skip

    def where(self, mask: np.ndarray, other: AccessPairs) -> AccessPairs:
        """Each pair's side from ``self`` where ``mask``, else from ``other``."""
        return AccessPairs(*(np.where(mask, getattr(self, f), getattr(other, f))
                             for f in ("span", "pool", "block", "write", "lo", "hi")))  # fmt: skip


def _empty_pairs() -> pd.DataFrame:
    return empty_frame(PAIR_COLUMNS, _PAIR_DTYPES)


_PAIR_DTYPES = {
    "span_a": "int64", "span_b": "int64", "step_a": "int64", "step_b": "int64",
    "start_a": "int64", "end_a": "int64", "start_b": "int64", "end_b": "int64",
    "n_blocks": "int64", "overlapped": "bool",
}  # fmt: skip


def _layer_text(lo: int, hi: int) -> str:
    return "all" if hi == ALL_LAYERS else f"[{lo},{hi})"


def gap_frame(gaps: list[dict[str, Any]]) -> pd.DataFrame:
    """The ``gaps`` table of a report from :func:`fdprof.analysis.tables.gap` rows."""
    if not gaps:
        return empty_frame(GAP_COLUMNS)
    return pd.DataFrame(gaps, columns=GAP_COLUMNS)
