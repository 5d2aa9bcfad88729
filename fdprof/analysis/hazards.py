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
import functools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis import instrumentation, verdicts
from fdprof.analysis.columns import json_records, require
from fdprof.analysis.lifetime import empty_violations, lifetime_violations, violations_frame
from fdprof.analysis.locks import broken_locks, lock_holds, no_broken_locks
from fdprof.analysis.ownership import dense_keys, empty_findings, find_ownership, ownership_kinds
from fdprof.errors import FdprofError
from fdprof.trace.model import Trace

SPAN_NEEDS = ("span_id", "name", "start", "end", "lane", "role", "step")
ACCESS_NEEDS = ("span_id", "pool", "block", "mode", "layer_lo", "layer_hi")
SYNC_NEEDS = ("op", "obj", "seq", "keyed", "time", "lane")

GAP_COLUMNS = ["kind", "lane", "obj", "seq", "time", "span_id", "detail"]
_ALL_LAYERS = np.iinfo(np.int64).max


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
    (scoped, broken locks and dropped objects gone), each acquire's release (``src``, after
    cycle breaking), the lanes, their happens-before clocks and the access table. The hook
    for analyses that order the same accesses differently (:mod:`fdprof.analysis.predict`)."""

    spans: pd.DataFrame
    syncs: pd.DataFrame
    src: np.ndarray
    lanes: pd.Index
    clocks: _LaneClocks
    acc: dict
    gaps: list[dict[str, Any]]
    dropped: tuple[str, ...]
    broken: pd.DataFrame
    lifetime: pd.DataFrame
    ownership: pd.DataFrame = field(default_factory=empty_findings)

    def unordered(self, clocks: _LaneClocks | Any) -> tuple[np.ndarray, ...]:
        """(x, y) access pairs that conflict and are unordered by ``clocks`` (any object with
        per-lane ``times``, ``vc`` and ``release_times``, monotone along each lane), then the
        pairs that conflict and overlap in time."""
        times = np.unique(np.concatenate([self.acc["start"], self.acc["end"], clocks.all_times()]))
        return _candidate_pairs(self.acc, clocks, _Ranker(times), len(self.lanes))

    def pairs(self, x: np.ndarray, y: np.ndarray) -> pd.DataFrame:
        """Access pairs as span pairs (:data:`PAIR_COLUMNS`)."""
        return _pairs_frame(self.spans, x, y, self.acc)

    def report(self) -> HazardReport:
        gaps, lanes = _gap_frame(self.gaps), tuple(self.lanes)
        if self.acc["n"] == 0:
            empty_pairs = self.pairs(np.empty(0, int), np.empty(0, int))
            return HazardReport(empty_pairs, empty_pairs.drop(columns="overlapped"), gaps,
                                self.dropped, lanes, self.acc["checked"], self.broken,
                                lifetime=self.lifetime, ownership=self.ownership)  # fmt: skip
        racy_x, racy_y, over_x, over_y = self.unordered(self.clocks)
        n = self.acc["n"]
        alarm = ~np.isin(over_x * n + over_y, racy_x * n + racy_y)
        races = self.pairs(racy_x, racy_y)
        alarms = self.pairs(over_x[alarm], over_y[alarm])
        return HazardReport(races, alarms.drop(columns="overlapped"), gaps, self.dropped, lanes,
                            self.acc["checked"], self.broken, lifetime=self.lifetime,
                            ownership=self.ownership)  # fmt: skip


def prepare(trace: Trace, drop_objects: Iterable[str] = ()) -> Prepared:
    """The trusted syncs, their pairing, happens-before clocks and the access table of
    ``trace`` (see :func:`find_hazards`)."""
    spans = require(trace.spans, "spans", SPAN_NEEDS)
    accesses = require(trace.accesses, "accesses", ACCESS_NEEDS)
    syncs = require(trace.syncs, "syncs", SYNC_NEEDS)
    is_event = accesses["mode"].isin(S.ALLOCATOR_MODES).to_numpy(bool)
    allocator_events, accesses = accesses[is_event], accesses[~is_event]
    dropped = tuple(drop_objects)
    if dropped and not syncs.empty:
        objs = syncs["obj"].astype(str)
        keep = ~objs.map(lambda o: any(fnmatch.fnmatchcase(o, p) for p in dropped)).astype(bool)
        syncs = syncs[keep.to_numpy()]
    syncs = syncs.reset_index(drop=True)
    bad = ~syncs["op"].isin(["release", "acquire"])
    if bad.any():
        raise FdprofError(f"sync op {syncs['op'][bad].iloc[0]!r} is neither release nor acquire")
    ranks = process_ranks(trace)
    syncs = _scoped_objects(syncs, {pid: dp for pid, (dp, _) in ranks.items()})
    broken = broken_locks(lock_holds(syncs))
    if not broken.empty:  # a lock that did not exclude orders nothing
        syncs = syncs[~syncs["obj"].isin(set(broken["obj"].tolist())).to_numpy(bool)]
        syncs = syncs.reset_index(drop=True)

    lanes = pd.Index(
        pd.unique(pd.concat([spans["lane"], syncs["lane"]], ignore_index=True).astype(str))
    )
    gaps: list[dict[str, Any]] = []
    src, pair_gaps = pair_syncs(syncs)
    gaps += pair_gaps
    clocks = _LaneClocks(syncs, src, lanes, gaps)
    acc, orphan_gaps = _access_table(spans, accesses, lanes, ranks)
    # an acquire inside an access span is a gap, and orders the span's accesses
    acc["start"], inside = instrumentation.entry_times(spans, acc, syncs, lanes)
    gaps += orphan_gaps + instrumentation.inside_gaps(inside, spans)
    gaps += instrumentation.unsubmitted_waits(trace)
    gaps += _truncation_gaps(spans)
    events, _ = _access_table(spans, allocator_events, lanes, ranks)
    life = np.flatnonzero(np.isin(events["modes"], S.LIFETIME_MODES))
    lifetime = _lifetime(spans, acc, _rows(events, np.isin(events["mode"], life)),
                         clocks)  # fmt: skip
    dp_of_pid = {pid: dp for pid, (dp, _) in ranks.items()}
    ownership = find_ownership(trace, spans, acc, events, lanes, dp_of_pid, clocks.happens_before)
    return Prepared(spans, syncs, clocks.src, lanes, clocks, acc, gaps, dropped, broken, lifetime,
                    ownership)  # fmt: skip


def _rows(table: dict, keep: np.ndarray) -> dict:
    """The rows ``keep`` of a table of :func:`_access_table`."""
    rows = {k: v[keep] if isinstance(v, np.ndarray) and k != "modes" else v
            for k, v in table.items()}  # fmt: skip
    return rows | {"n": int(keep.sum())}


def _lifetime(spans: pd.DataFrame, acc: dict, events: dict, clocks: _LaneClocks) -> pd.DataFrame:
    """Accesses outside their block's lifetime (:mod:`fdprof.analysis.lifetime`), the pools
    scoped as for races; (pool, block) numbered densely so no id can overflow a key."""
    if events["n"] == 0 or acc["n"] == 0:
        return empty_violations()
    pool_code = pd.factorize(np.concatenate([acc["pool"], events["pool"]]))[0]
    block = np.concatenate([acc["block"], events["block"]])
    key = dense_keys(pool_code, block)
    cols = ("lane", "start", "end")
    kind, x, e = lifetime_violations(
        {"key": key[acc["n"] :], "free": events["free"], **{c: events[c] for c in cols}},
        {"key": key[: acc["n"]], **{c: acc[c] for c in cols}},
        clocks.happens_before,
    )
    return violations_frame(spans, kind, acc["srow"][x], events["srow"][e], acc["pool"][x],
                            acc["block"][x])  # fmt: skip


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


def process_ranks(trace: Trace) -> dict[int, tuple[int, int]]:
    """pid -> (DP rank, TP rank), from ``processes`` (-1: unknown)."""
    processes = trace.processes
    pids = processes["pid"].to_numpy(np.int64).tolist()
    dp = processes["dp_rank"].to_numpy(np.int64).tolist()
    tp = processes["tp_rank"].to_numpy(np.int64).tolist()
    return dict(zip(pids, zip(dp, tp, strict=True), strict=True))


def pool_scopes(ranks: dict[int, tuple[int, int]]) -> dict[int, list[str]]:
    """pid -> the KV-pool scopes its accesses fall in ("" unscoped): each (DP group, TP rank)
    has its own pool, so ``gpu:12`` of (dp0, tp0) is not ``gpu:12`` of (dp0, tp1). DP groups
    are scoped when the trace has several (unknown rank -1 is one group); TP ranks when a
    group has several known ones, and then a process of that group whose TP rank is unknown
    falls in all of them (it may touch any shard: hiding a race is worse than a false one)."""
    dp_values = {dp for dp, _ in ranks.values()}
    known_tp: dict[int, set[int]] = {dp: set() for dp in dp_values}
    for dp, tp in ranks.values():
        if tp >= 0:
            known_tp[dp].add(tp)
    out = {}
    for pid, (dp, tp) in ranks.items():
        dp_part = f"dp{dp}" if len(dp_values) > 1 else ""
        tps = sorted(known_tp[dp]) if len(known_tp[dp]) > 1 else []
        tp_parts = [f"tp{tp}"] if tps and tp >= 0 else [f"tp{t}" for t in tps] or [""]
        out[pid] = ["/".join(x for x in (dp_part, t) if x) for t in tp_parts]
    return out


def _scoped_objects(syncs: pd.DataFrame, groups: dict[int, int]) -> pd.DataFrame:
    """Object names made unique where the name alone is ambiguous: ``mutex:*`` are
    in-process (scoped by pid); keyed channels (queues, signals) belong to one DP group (TP
    ranks of a group tell their copies apart by seq). Unkeyed inter-process objects stay
    global, their name says which one they are (our engine's ``lock:kv/dp0``, one flock file
    per DP group), and so do collectives (``collective:<group>/...``), which span groups."""
    if syncs.empty:
        return syncs
    obj = syncs["obj"].astype(str).to_numpy(dtype=object)
    pid = syncs["pid"].to_numpy(np.int64)
    mutex = np.array([o.startswith("mutex:") for o in obj.tolist()], dtype=bool)
    scoped = obj.copy()
    if mutex.any():
        scoped[mutex] = [f"{o}@pid{p}" for o, p in zip(obj[mutex], pid[mutex], strict=True)]
    collective = np.array([o.startswith(S.COLLECTIVE_PREFIX) for o in obj.tolist()], dtype=bool)
    keyed = syncs["keyed"].to_numpy(bool) & ~mutex & ~collective
    if len(set(groups.values())) > 1 and keyed.any():
        scoped[keyed] = [f"{o}@dp{groups.get(p, -1)}"
                         for o, p in zip(obj[keyed], pid[keyed], strict=True)]  # fmt: skip
    if (scoped == obj).all():
        return syncs
    return syncs.assign(obj=pd.array(scoped, dtype="string"))


def pair_syncs(syncs: pd.DataFrame) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """For each sync row, the row of the release it acquires (-1: none) and the gaps found.

    A keyed acquire pairs with a keyed release of its ``obj`` and its ``seq`` (if several,
    the latest at or before it in time, else the first); an unkeyed one with the latest
    unkeyed release of the object at or before it, and the object's first unkeyed acquire
    may have none (a lock starts free). Pairing keys are compared column by column (a
    stable sort on object code, keyed, seq), never packed into one integer: any int64 seq,
    any number of objects.
    """
    n = len(syncs)
    src = np.full(n, -1, dtype=np.int64)
    gaps: list[dict[str, Any]] = []
    if n == 0:
        return src, gaps
    obj = syncs["obj"].to_numpy(dtype=object, na_value="")
    seq = syncs["seq"].to_numpy(np.int64)
    keyed = syncs["keyed"].to_numpy(bool)
    time = syncs["time"].to_numpy(np.int64)
    is_rel = (syncs["op"] == "release").to_numpy(bool)
    obj_code = pd.factorize(obj)[0].astype(np.int64)
    # every event in pairing order: (object, keyed, seq), then time, releases before the
    # acquires of their instant, then row
    rows = np.arange(n)
    order = np.lexsort((rows, ~is_rel, time, np.where(keyed, seq, 0), keyed, obj_code))
    o_obj, o_keyed, o_seq = obj_code[order], keyed[order], seq[order]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = ((o_obj[1:] != o_obj[:-1]) | (o_keyed[1:] != o_keyed[:-1])
                     | (o_keyed[1:] & (o_seq[1:] != o_seq[:-1])))  # fmt: skip
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    o_rel = is_rel[order]
    # the latest release at or before each position, and the group's first release
    last_rel = np.maximum.accumulate(np.where(o_rel, np.arange(n), -1))
    rel_pos = np.flatnonzero(o_rel)
    first_rel = np.full(n, -1, dtype=np.int64)
    if len(rel_pos):
        nxt = np.searchsorted(rel_pos, group_start)  # the first release at or after the start
        ok = nxt < len(rel_pos)
        first_rel[ok] = rel_pos[nxt[ok]]
    before = last_rel >= group_start
    # a keyed acquire before its release (skewed clocks): the group's first release
    after = ~before & o_keyed & (first_rel >= 0) & (group_start[np.maximum(first_rel, 0)]
                                                     == group_start)  # fmt: skip
    found = np.where(before, last_rel, np.where(after, first_rel, -1))
    acq = ~o_rel
    src[order[acq]] = np.where(found[acq] >= 0, order[np.maximum(found[acq], 0)], -1)
    missing = np.flatnonzero(~is_rel & (src < 0))
    if len(missing):
        unkeyed_acq = rows[~is_rel & ~keyed]
        by_time = unkeyed_acq[np.lexsort((unkeyed_acq, time[unkeyed_acq]))]
        first_acq = set(by_time[np.unique(obj_code[by_time], return_index=True)[1]].tolist())
        lane = syncs["lane"].to_numpy(dtype=object, na_value="")
        for row in missing.tolist():
            if not keyed[row] and row in first_acq:
                continue
            detail = "no release with this seq" if keyed[row] else "no earlier release"
            gaps.append(_gap("no_release", str(lane[row]), str(obj[row]), int(seq[row]),
                             int(time[row]), 0, f"acquire of {obj[row]} has {detail}"))  # fmt: skip
    return src, gaps


class _LaneClocks:
    """Vector clocks of every sync event, lane by lane, computed in an order that respects
    the pairing edges (not timestamps: a skewed clock must not reorder anything)."""

    def __init__(
        self, syncs: pd.DataFrame, src: np.ndarray, lanes: pd.Index, gaps: list[dict[str, Any]]
    ) -> None:
        k = len(lanes)
        n = len(syncs)
        lane = lanes.get_indexer(syncs["lane"].astype(str)) if n else np.empty(0, int)
        time = syncs["time"].to_numpy(np.int64)
        is_rel = (syncs["op"] == "release").to_numpy(bool)
        order = np.lexsort((np.arange(n), time, lane))
        bounds = np.searchsorted(lane[order], np.arange(k + 1))
        lane_rows = [order[bounds[i] : bounds[i + 1]] for i in range(k)]
        pairing = src.tolist()
        vc = self._propagate([r.tolist() for r in lane_rows], is_rel.tolist(), pairing, syncs,
                             gaps)  # fmt: skip
        #: each acquire's release as the clocks used it (a cycle's dropped edge is -1)
        self.src = np.asarray(pairing, dtype=np.int64)
        self.lane_rows = lane_rows
        self.times = [time[r] for r in lane_rows]
        self.vc = [vc[r] for r in lane_rows]
        self.release_times = [time[r][is_rel[r]] for r in lane_rows]

    @staticmethod
    def _propagate(lane_rows, is_rel, src, syncs, gaps) -> np.ndarray:
        """The clock of every sync event (rows of an (n, lanes) array). Plain Python ints
        and tuples: with a handful of lanes they beat numpy's per-call overhead."""
        k = len(lane_rows)
        pos = [0] * k
        cur = [[0] * k for _ in range(k)]
        vc: list[tuple[int, ...] | None] = [None] * len(src)
        waiting: dict[int, list[int]] = {}
        runnable = deque(range(k))
        left = sum(len(r) for r in lane_rows)
        while left:
            while runnable:
                lane = runnable.popleft()
                rows, p, clock = lane_rows[lane], pos[lane], cur[lane]
                while p < len(rows):
                    row = rows[p]
                    if is_rel[row]:
                        clock[lane] += 1
                    else:
                        s = src[row]
                        if s >= 0:
                            other = vc[s]
                            if other is None:
                                waiting.setdefault(s, []).append(lane)
                                break
                            clock[:] = map(max, clock, other)
                    vc[row] = tuple(clock)
                    left -= 1
                    p += 1
                    if row in waiting:
                        runnable.extend(waiting.pop(row))
                pos[lane] = p
            if left:
                # Every unfinished lane waits on a release that waits on it: a cycle of edges
                # the trace cannot have meant. Drop the earliest blocked edge and go on.
                blocked = [
                    (lane_rows[i][pos[i]], i) for i in range(k) if pos[i] < len(lane_rows[i])
                ]
                row, lane = min(blocked, key=lambda b: (syncs["time"].iat[b[0]], b[0]))
                waiting[src[row]].remove(lane)
                src[row] = -1
                e = syncs.iloc[row]
                gaps.append(
                    _gap(
                        "cycle",
                        str(e["lane"]),
                        str(e["obj"]),
                        int(e["seq"]),
                        int(e["time"]),
                        0,
                        "acquire waits on a release that waits on it",
                    )
                )
                runnable.append(lane)
        return np.array(vc, dtype=np.int64).reshape(len(src), k)

    def happens_before(
        self, lane_a: np.ndarray, end_a: np.ndarray, lane_b: np.ndarray, start_b: np.ndarray
    ) -> np.ndarray:
        """Elementwise: whether a span on ``lane_a`` ending at ``end_a`` happens before one on
        ``lane_b`` starting at ``start_b`` (one lane: program order, by time)."""
        out = (lane_a == lane_b) & (end_a <= start_b)
        for la, lb in set(zip(lane_a.tolist(), lane_b.tolist(), strict=True)):
            on = np.flatnonzero((lane_a == la) & (lane_b == lb))
            if la == lb or not len(self.times[lb]):
                continue
            epoch = np.searchsorted(self.release_times[la], end_a[on], "left") + 1
            at = np.searchsorted(self.times[lb], start_b[on], "right") - 1
            entry = np.where(at >= 0, self.vc[lb][np.maximum(at, 0), la], 0)
            out[on] = entry >= epoch
        return out

    def all_times(self) -> np.ndarray:
        return np.concatenate(self.times) if self.times else np.empty(0, np.int64)


class _Ranker:
    """Times → dense ranks, so (block, time) pairs pack into one sortable int64."""

    def __init__(self, times: np.ndarray) -> None:
        self.times = times
        self.inf = len(times)  # rank of +inf; -1 is -inf
        self.base = len(times) + 2

    def __call__(self, t: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.times, t)


def _access_table(
    spans: pd.DataFrame,
    accesses: pd.DataFrame,
    lanes: pd.Index,
    ranks: dict[int, tuple[int, int]],
):
    """Accesses joined with their (finished) spans, as numpy columns; pools scoped per (DP
    group, TP rank) (:func:`pool_scopes`), an access of a process in several scopes repeated
    once per scope. ``checked``: the accesses before that repetition."""
    span_ids = spans["span_id"].to_numpy(np.int64)
    span_index = pd.Index(span_ids)
    if not span_index.is_unique:
        raise FdprofError("trace spans table has duplicate span_id values")
    srow = span_index.get_indexer(accesses["span_id"].to_numpy(np.int64))
    gaps = []
    orphan = srow < 0
    if orphan.any():
        gaps.append(
            _gap(
                "orphan_access",
                "",
                "",
                -1,
                -1,
                int(accesses["span_id"].iat[int(np.flatnonzero(orphan)[0])]),
                f"{int(orphan.sum())} access rows name no span",
            )
        )
    ends = spans["end"].to_numpy(np.int64)
    ok = ~orphan
    ok[ok] = ends[srow[ok]] != -1
    srow = srow[ok]
    a = accesses[ok]
    pool = a["pool"].astype(str).to_numpy(dtype=object)
    rows = np.arange(len(a))
    scopes = pool_scopes(ranks)
    if any(label for labels in scopes.values() for label in labels):
        pids, inverse = np.unique(spans["pid"].to_numpy(np.int64)[srow], return_inverse=True)
        labels = [scopes.get(p, [""]) for p in pids.tolist()]
        sizes = np.array([len(ls) for ls in labels], dtype=np.int64)
        flat = np.array([f"@{x}" if x else "" for ls in labels for x in ls], dtype=object)
        first = np.cumsum(sizes) - sizes
        count = sizes[inverse]
        rows = np.repeat(rows, count)
        nth = np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)
        pool = pool[rows] + flat[first[inverse][rows] + nth]
        srow = srow[rows]
    pool_code, pools = pd.factorize(pool)
    block = a["block"].to_numpy(np.int64)[rows]
    nb = int(block.max()) + 1 if len(block) else 1
    lo = a["layer_lo"].to_numpy(np.int64)[rows]
    hi = a["layer_hi"].to_numpy(np.int64)[rows]
    all_layers = (lo < 0) & (hi < 0)
    mode_code, modes = pd.factorize(a["mode"])
    acc = {
        "n": len(rows),
        "checked": len(a),
        "srow": srow,
        "lane": lanes.get_indexer(spans["lane"].astype(str).to_numpy()[srow]),
        "key": pool_code.astype(np.int64) * nb + block,
        "write": (a["mode"] == S.MODE_WRITE).to_numpy(bool)[rows],
        "free": (a["mode"] == S.MODE_FREE).to_numpy(bool)[rows],
        # the mode of each row as the index of its name in ``modes`` (factorized from the
        # column as it is: an object array of a million strings costs seconds)
        "mode": mode_code[rows],
        "modes": np.asarray(modes, dtype=object),
        "lo": np.where(all_layers, 0, lo),
        "hi": np.where(all_layers, _ALL_LAYERS, hi),
        "start": spans["start"].to_numpy(np.int64)[srow],
        "end": ends[srow],
        "pool": np.asarray(pools, dtype=object)[pool_code],
        "block": block,
    }
    return acc, gaps


def _truncation_gaps(spans: pd.DataFrame) -> list[dict[str, Any]]:
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
            _gap(
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


def _candidate_pairs(acc: dict, clocks: _LaneClocks, rank: _Ranker, k: int):
    """(x, y) access pairs on lanes x < y that conflict and are unordered, and those that
    conflict and overlap in time."""
    lane, key, write = acc["lane"], acc["key"], acc["write"]
    start_r, end_r = rank(acc["start"]), rank(acc["end"])
    epoch = np.zeros(acc["n"], dtype=np.int64)
    at = np.full(acc["n"], -1, dtype=np.int64)  # last sync on its lane at or before its start
    for li in range(k):
        on = lane == li
        if not on.any():
            continue
        epoch[on] = np.searchsorted(clocks.release_times[li], acc["end"][on], "left") + 1
        at[on] = np.searchsorted(clocks.times[li], acc["start"][on], "right") - 1
    index = {
        li: _LaneIndex(np.flatnonzero(lane == li), key, start_r, end_r, write, rank.base)
        for li in range(k)
        if (lane == li).any()
    }
    racy: list[tuple[np.ndarray, np.ndarray]] = []
    over: list[tuple[np.ndarray, np.ndarray]] = []
    for l1, i1 in index.items():
        xs = i1.rows
        for l2, i2 in index.items():
            if l2 <= l1:
                continue
            # not X->Y iff Y.start < tA; not Y->X iff Y.end > tB
            vcol = clocks.vc[l2][:, l1] if len(clocks.times[l2]) else np.empty(0, np.int64)
            ia = np.searchsorted(vcol, epoch[xs], "left")
            t2 = clocks.times[l2]
            ta = np.where(
                ia < len(t2),
                rank(t2[np.minimum(ia, max(len(t2) - 1, 0))]) if len(t2) else rank.inf,
                rank.inf,
            )
            # entry(X)[l2]: the clock of X's lane at X's start, l2's entry
            vc1 = clocks.vc[l1]
            kk = np.where(at[xs] >= 0, vc1[np.maximum(at[xs], 0), l2] if len(vc1) else 0, 0)
            rt = clocks.release_times[l2]
            tb = np.where(kk > 0, rank(rt[np.maximum(kk - 1, 0)]) if len(rt) else -1, -1)
            racy.append(i2.query(xs, key, write, ta, tb, acc))
            over.append(i2.query(xs, key, write, end_r[xs], start_r[xs], acc))
    return (*_cat(racy), *_cat(over))


def _cat(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not pairs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


class _LaneIndex:
    """One lane's accesses sorted by (block, start), all and writes only, with the running
    maximum of ends, so 'spans on this lane and block that intersect (tB, tA)' is two
    binary searches and a filter."""

    def __init__(self, rows, key, start_r, end_r, write, base) -> None:
        self.rows = rows
        self.base = base
        self.sorted = {
            w: self._build(rows[write[rows]] if w else rows, key, start_r, end_r)
            for w in (False, True)
        }

    def _build(self, rows, key, start_r, end_r):
        order = np.lexsort((start_r[rows], key[rows]))
        rows = rows[order]
        by_start = key[rows] * self.base + start_r[rows] + 1
        by_end = (
            np.maximum.accumulate(key[rows] * self.base + end_r[rows] + 1) if len(rows) else rows
        )
        return rows, by_start, by_end, end_r[rows]

    def query(self, xs, key, write, ta, tb, acc):
        out_x, out_y = [], []
        for writes_only in (False, True):
            sel = ~write[xs] if writes_only else write[xs]
            if not sel.any():
                continue
            x = xs[sel]
            rows, by_start, by_end, yend = self.sorted[writes_only]
            kb = key[x] * self.base
            a = np.searchsorted(by_start, kb + np.broadcast_to(ta, xs.shape)[sel] + 1, "left")
            b = np.searchsorted(by_end, kb + np.broadcast_to(tb, xs.shape)[sel] + 1, "right")
            length = np.maximum(a - b, 0)
            total = int(length.sum())
            if total == 0:
                continue
            xi = np.repeat(np.arange(len(x)), length)
            offs = np.arange(total) - np.repeat(np.cumsum(length) - length, length)
            yi = np.repeat(b, length) + offs
            keep = yend[yi] > np.broadcast_to(tb, xs.shape)[sel][xi]
            xr, yr = x[xi[keep]], rows[yi[keep]]
            layers = (acc["lo"][xr] < acc["hi"][yr]) & (acc["lo"][yr] < acc["hi"][xr])
            out_x.append(xr[layers])
            out_y.append(yr[layers])
        if not out_x:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(out_x), np.concatenate(out_y)


PAIR_COLUMNS = [
    "span_a", "span_b", "name_a", "name_b", "lane_a", "lane_b", "role_a", "role_b",
    "step_a", "step_b", "start_a", "end_a", "start_b", "end_b", "blocks", "n_blocks",
    "modes", "layers_a", "layers_b", "overlapped",
]  # fmt: skip


def _pairs_frame(spans: pd.DataFrame, x: np.ndarray, y: np.ndarray, acc: dict) -> pd.DataFrame:
    """Access pairs aggregated per pair of spans, ``a`` the one that started first."""
    if len(x) == 0:
        return _empty_pairs().copy()
    start = spans["start"].to_numpy(np.int64)
    s1, s2 = acc["srow"][x], acc["srow"][y]
    swap = (start[s2] < start[s1]) | ((start[s2] == start[s1]) & (s2 < s1))
    xa, xb = np.where(swap, y, x), np.where(swap, x, y)
    sa, sb = acc["srow"][xa], acc["srow"][xb]
    groups, first, inverse = np.unique(sa * len(start) + sb, return_index=True, return_inverse=True)
    sets: list[tuple[set, set, set, set]] = [(set(), set(), set(), set()) for _ in groups]
    lo, hi, write = acc["lo"], acc["hi"], acc["write"]
    for g, pool, block, wa, wb, a, b in zip(
        inverse.tolist(), acc["pool"][xa].tolist(), acc["block"][xa].tolist(),
        write[xa].tolist(), write[xb].tolist(), xa.tolist(), xb.tolist(), strict=True,
    ):  # fmt: skip
        blocks, modes, layers_a, layers_b = sets[g]
        blocks.add((pool, block))
        modes.add(("w" if wa else "r") + ("w" if wb else "r"))
        layers_a.add(_layer_text(lo[a], hi[a]))
        layers_b.add(_layer_text(lo[b], hi[b]))
    ra, rb = sa[first], sb[first]
    out: dict[str, Any] = {}
    for c in ("span_id", "name", "lane", "role", "step", "start", "end"):
        values = spans[c].to_numpy()
        out[f"{c}_a"], out[f"{c}_b"] = values[ra], values[rb]
    frame = pd.DataFrame(out).rename(columns={"span_id_a": "span_a", "span_id_b": "span_b"})
    frame["blocks"] = [[f"{p}:{b}" for p, b in sorted(s[0])] for s in sets]
    frame["n_blocks"] = [len(s[0]) for s in sets]
    for i, col in ((1, "modes"), (2, "layers_a"), (3, "layers_b")):
        frame[col] = [",".join(sorted(s[i])) for s in sets]
    frame["overlapped"] = (frame["start_a"] < frame["end_b"]) & (frame["start_b"] < frame["end_a"])
    return frame[PAIR_COLUMNS]


@functools.cache
def _empty_pairs() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=_PAIR_DTYPES.get(c, "object")) for c in PAIR_COLUMNS})


_PAIR_DTYPES = {
    "span_a": "int64", "span_b": "int64", "step_a": "int64", "step_b": "int64",
    "start_a": "int64", "end_a": "int64", "start_b": "int64", "end_b": "int64",
    "n_blocks": "int64", "overlapped": "bool",
}  # fmt: skip


def _layer_text(lo: int, hi: int) -> str:
    return "all" if hi == _ALL_LAYERS else f"[{lo},{hi})"


def _gap(kind: str, lane: str, obj: str, seq: int, time: int, span_id: int, detail: str):
    return {"kind": kind, "lane": lane, "obj": obj, "seq": seq, "time": time,
            "span_id": span_id, "detail": detail}  # fmt: skip


def _gap_frame(gaps: list[dict[str, Any]]) -> pd.DataFrame:
    if not gaps:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in GAP_COLUMNS})
    return pd.DataFrame(gaps, columns=GAP_COLUMNS)
