"""Predicted races: weak causal precedence (WCP) instead of happens-before for lock edges.

Why: a lock's release → acquire edge orders two critical sections in *this* run; in another
schedule the second could have run first. Happens-before takes every such edge as order, so
a pair of accesses that only the lock's schedule ordered looks safe. WCP (Kini, Mathur,
Viswanathan, "Dynamic race prediction in linear time", PLDI 2017) keeps a lock edge only
where the critical sections conflict. Its rules, for critical sections (holds) ``h1 = (a1,
r1)`` before ``h2 = (a2, r2)`` of one lock:

- (a) if ``h1``'s body has an access conflicting with an access ``e2`` of ``h2``'s body,
  ``r1 ≺ e2``;
- (b) if ``a1 ≺ r2``, then ``r1 ≺ r2``;
- (c) ``≺`` composes with happens-before on both sides (``x ≤HB u ≺ v ≤HB y`` gives
  ``x ≺ y``); program order alone is not ``≺``.

Non-lock edges (queues, signals, launch flows, collectives) are hard edges: a message cannot
be received before it is sent, so they are in ``≺`` themselves, as fork and join are in the
paper's algorithm. A hold's *body* is every span forced inside it by program order and hard
edges (after ``a1`` and before ``r1`` without any lock edge): the spans of its own lane
between the two, and work it handed out and waited for — a kernel launched after the acquire
and synchronised before the release. A predicted race is a conflicting pair that
happens-before orders and ``≺`` does not.

How (the paper's vector-clock algorithm, offline and vectorised where it can be): the
happens-before clocks of :mod:`fdprof.analysis.hazards` (all edges, then hard edges only);
bodies as one time window per (hold, lane) from the hard clocks; rule (a) as, per (lock,
block), a running maximum over the holds in lock order of the happens-before clocks of their
releases (one pass per distinct layer range and clock column); then one Python step per sync
event and per span start where a rule-(a) edge lands, carrying each lane's WCP clock ``P``
(rule (b) with one queue position per (lock, lane), as the paper's per-lock queues). Races
under ``P`` come from the same window queries as the happens-before ones.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.clocks import LaneClocks, SyncClocks, sync_clocks
from fdprof.analysis.hazards import HazardReport, Prepared, prepare
from fdprof.analysis.kernels import WcpStep, Worklist, rule_a, run_worklist, stable_order
from fdprof.analysis.locks import lock_holds
from fdprof.analysis.tables import AccessTable, SyncTable


def predict_races(trace, drop_objects: Iterable[str] = ()) -> HazardReport:
    """:func:`fdprof.analysis.hazards.find_hazards`'s report of ``trace`` with ``predicted``
    set: the conflicting span pairs that happens-before orders and WCP does not (columns as
    ``races``). Broken locks orders nothing in either (their edges are dropped first)."""
    p = prepare(trace, drop_objects)
    report = p.report()
    if len(p.acc) == 0:
        return replace(report, predicted=report.races.copy())
    found = p.unordered(wcp_clocks(p), alarms=False)
    wcp = p.pairs(found.racy_x, found.racy_y)
    observed = set(zip(report.races["span_a"], report.races["span_b"], strict=True))
    pairs = zip(wcp["span_a"], wcp["span_b"], strict=True)
    fresh = np.array([pair not in observed for pair in pairs], dtype=bool)
    return replace(report, predicted=wcp[fresh].reset_index(drop=True))


def lock_rows_mask(table: SyncTable) -> np.ndarray:
    """Which sync rows are of a lock object (``lock:*``): their edges are WCP's to judge."""
    is_lock = np.array([fnmatch.fnmatchcase(o, S.LOCK_OBJECTS) for o in table.objects], bool)
    return is_lock[table.obj] if len(table) else np.zeros(0, bool)


def wcp_clocks(p: Prepared) -> LaneClocks:
    """Per lane, the WCP clock ``P`` at every sync event and at every span start where a
    rule-(a) edge lands, in lane order: clocks of the shape :meth:`Prepared.unordered`
    queries (releases counted as happens-before counts them). The three steps below, on the
    whole trace; a partitioned run does the middle one per block partition."""
    setup = wcp_setup(p.syncs, p.table, p.clocks)
    spans, clocks = landings(setup, p.acc)
    lane_of = np.full(len(p.spans), -1, dtype=np.int64)
    lane_of[p.acc.span] = p.acc.lane  # each span's lane (its accesses carry it)
    entry = p.spans["start"].to_numpy(np.int64).copy()  # an access span's entry time
    entry[p.acc.span] = p.acc.start
    return propagate(setup, lane_of[spans], entry[spans], clocks)


@dataclass(frozen=True)
class WcpSetup:
    """What WCP needs of the syncs alone, computed once (small: a row per sync event): the
    happens-before clocks (``hb``), the clocks of hard edges only (``hard``: lock edges left
    out), the lock rows, each row's releases before it on its lane, the holds of every lock in
    order (:func:`_ordered_holds`)."""

    table: SyncTable
    hb: SyncClocks
    hard: SyncClocks
    is_lock: np.ndarray
    rel_before: np.ndarray
    holds: pd.DataFrame

    @property
    def k(self) -> int:
        return self.hb.lanes.k


def wcp_setup(syncs: pd.DataFrame, table: SyncTable, hb: SyncClocks) -> WcpSetup:
    """The syncs' part of WCP (:class:`WcpSetup`), from the trusted syncs (frame and typed
    table) and their happens-before clocks (:class:`Prepared`'s)."""
    is_rel = table.release
    is_lock = lock_rows_mask(table)
    k = hb.lanes.k
    hard = sync_clocks(table, np.where(is_lock & ~is_rel, -1, hb.src), [""] * k, [])
    # releases on a row's lane before it, in lane order: a1's epoch is this + 1
    rel_before = np.zeros(len(table), dtype=np.int64)
    for rows in hb.lane_rows:
        r = is_rel[rows].astype(np.int64)
        rel_before[rows] = np.cumsum(r) - r
    return WcpSetup(table, hb, hard, is_lock, rel_before, _ordered_holds(syncs))


def landings(setup: WcpSetup, acc: AccessTable) -> tuple[np.ndarray, np.ndarray]:
    """Rule (a) over ``acc`` (the whole access table, or whole blocks of it: the rule groups
    by lock and block): the span rows (``acc.span``) where an edge lands, ascending, and the
    join landing at each one's start, ``(spans, k)``."""
    return _rule_a(acc, setup)


def propagate(
    setup: WcpSetup, lane: np.ndarray, start: np.ndarray, clocks: np.ndarray
) -> LaneClocks:
    """The WCP clocks from the syncs and the landings (each landing's lane, span start and
    clock; from every partition, a span landed on twice joined first)."""
    times, vc = _propagate_wcp(setup, lane, start, clocks)
    hb = setup.hb.lanes
    return LaneClocks.from_lanes(times, vc, [hb.lane_releases(li) for li in range(hb.k)], hb.k)


def _ordered_holds(syncs: pd.DataFrame) -> pd.DataFrame:
    """The holds (critical sections) of every lock, each lock's in trace order (start, end,
    acquire row: holds of one trusted lock on different lanes do not overlap), with
    ``lock`` (a code per object) and ``order`` (position within its lock)."""
    holds = lock_holds(syncs)
    holds = holds.sort_values(["obj", "start", "end", "acquire_row"], kind="stable")
    holds = holds.reset_index(drop=True)
    code = pd.factorize(holds["obj"])[0].astype(np.int64)
    first = np.searchsorted(code, code, "left") if len(code) else code
    return holds.assign(lock=code, order=np.arange(len(holds)) - first)


def _rule_a(acc: AccessTable, setup: WcpSetup) -> tuple[np.ndarray, np.ndarray]:
    """Rule (a) as landings: {span row: the join of H(r1) over every earlier hold of the
    same lock whose body has an access conflicting with one of the span's, in a hold's body
    the span is in}. Returns (span rows, (m, lanes) clocks)."""
    holds, k = setup.holds, setup.k
    empty = (np.empty(0, np.int64), np.zeros((0, k), np.int64))
    if holds.empty or len(acc) == 0:
        return empty
    table = setup.table
    hold_idx, x = _bodies(acc, holds, setup.hard.lanes, setup.hard.rows, setup.rel_before,
                          table.lane, table.time, k)  # fmt: skip
    if len(x) == 0:
        return empty
    # the pairs by hold (holds are in (lock, order) order), then stably by block: each
    # (block, lock) group's pairs contiguous, in lock order
    by_hold = stable_order(hold_idx, len(holds))
    hold_idx, x = hold_idx[by_hold], x[by_hold]
    key = acc.key[x]
    lo_key = int(key.min())
    by_key = stable_order(key - lo_key, int(key.max()) - lo_key + 1)
    hold_idx, x, key = hold_idx[by_key], x[by_key], key[by_key]
    lock = holds["lock"].to_numpy(np.int64)[hold_idx]
    group = np.cumsum(np.concatenate([[True], (key[1:] != key[:-1]) | (lock[1:] != lock[:-1])]))
    lo, hi = acc.lo[x], acc.hi[x]
    if (lo == lo[0]).all() and (hi == hi[0]).all():  # one layer class: the common case
        classes, cls = np.array([[lo[0], hi[0]]]), np.zeros(len(x), np.int64)
    else:
        classes, cls = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
    order = holds["order"].to_numpy(np.int64)[hold_idx]
    release = holds["release_row"].to_numpy(np.int64)[hold_idx]
    return rule_a(k, group, order, cls.ravel(), classes[:, 0], classes[:, 1], acc.write[x],
                  release, setup.hb.rows, acc.span[x])  # fmt: skip


def _bodies(acc, holds, hard: LaneClocks, h_hard, rel_before, lane, time, k):
    """(hold index, access row) for every access of a span forced inside a hold: on the
    hold's lane, between its acquire and release; on another lane L', after an event of L'
    that the acquire reaches and ending before a release of L' that reaches the release, by
    program order and hard edges (one time window per hold and lane)."""
    a_row = holds["acquire_row"].to_numpy(np.int64)
    r_row = holds["release_row"].to_numpy(np.int64)
    h_lane = lane[a_row]
    out_h, out_x = [], []
    for lp in range(k):
        rows = np.flatnonzero(acc.lane == lp)
        if not len(rows):
            continue
        rows = rows[np.argsort(acc.start[rows], kind="stable")]
        starts = acc.start[rows]
        t_a = np.full(len(holds), np.iinfo(np.int64).max, dtype=np.int64)
        t_b = np.full(len(holds), np.iinfo(np.int64).min, dtype=np.int64)
        own = h_lane == lp
        t_a[own], t_b[own] = time[a_row[own]], time[r_row[own]]
        ht, rt = hard.lane_times(lp), hard.lane_releases(lp)
        for lh in np.unique(h_lane[~own]).tolist():
            on = np.flatnonzero(h_lane == lh)
            if len(ht):
                ia = np.searchsorted(hard.lane_vc(lp)[:, lh], rel_before[a_row[on]] + 1, "left")
                ok = ia < len(ht)
                t_a[on[ok]] = ht[ia[ok]]
            kk = h_hard[r_row[on], lp]
            ok = kk > 0
            t_b[on[ok]] = rt[kk[ok] - 1]
        lo = np.searchsorted(starts, t_a, "left")
        hi = np.searchsorted(starts, t_b, "right")
        length = np.maximum(hi - lo, 0)
        total = int(length.sum())
        if not total:
            continue
        h = np.repeat(np.arange(len(holds)), length)
        offs = np.arange(total) - np.repeat(np.cumsum(length) - length, length)
        xr = rows[np.repeat(lo, length) + offs]
        inside = acc.end[xr] <= t_b[h]
        out_h.append(h[inside])
        out_x.append(xr[inside])
    if not out_h:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(out_h), np.concatenate(out_x)


def _propagate_wcp(setup: WcpSetup, span_lane, span_start, land_vc):
    """Each lane's WCP clock along its events (sync rows and rule-(a) landings at span
    starts, a landing after the syncs of its instant), by the worklist of
    :mod:`fdprof.analysis.kernels` in an order that respects the lock edges (the only edges
    along which ``P`` itself travels: a hard edge brings its source's whole happens-before
    past). Returns per lane (times, clocks)."""
    table, n, hb, holds = setup.table, len(setup.table), setup.hb, setup.holds
    src, is_rel, time = hb.src, table.release, table.time
    lock_edge = setup.is_lock & ~is_rel & (src >= 0)
    lane_items, times = [], []
    for li, rows in enumerate(hb.lane_rows):
        on = np.flatnonzero(span_lane == li)
        on = on[np.argsort(span_start[on], kind="stable")]
        t_sync, t_land = time[rows], span_start[on]
        at = np.searchsorted(t_sync, t_land, "right") + np.arange(len(on))
        is_land = np.zeros(len(rows) + len(on), dtype=bool)
        is_land[at] = True
        items = np.empty(len(is_land), dtype=np.int64)
        items[~is_land], items[is_land] = rows, n + on
        t = np.empty(len(is_land), dtype=np.int64)
        t[~is_land], t[is_land] = t_sync, t_land
        lane_items.append(items)
        times.append(t)
    end_lock = np.full(n, -1, dtype=np.int64)
    end_order = np.zeros(n, dtype=np.int64)
    release_row = holds["release_row"].to_numpy(np.int64)
    end_lock[release_row] = holds["lock"].to_numpy(np.int64)
    end_order[release_row] = holds["order"].to_numpy(np.int64)
    step = WcpStep(n, land_vc, src, is_rel, lock_edge, hb.rows, end_lock, end_order,
                   *_hold_queues(holds, hb.rows, setup.rel_before, table.lane))  # fmt: skip
    wait = np.concatenate([np.where(lock_edge, src, -1), np.full(len(span_lane), -1)])
    w = Worklist.new(lane_items, n + len(span_lane), wait)
    if run_worklist(w, step):  # cannot happen: the clocks above had no cycle left
        raise RuntimeError("WCP propagation blocked on a lock edge")
    return times, [w.out[items] for items in lane_items]


def _hold_queues(holds: pd.DataFrame, h_full, rel_before, lane) -> tuple[np.ndarray, ...]:
    """Every lock's holds in order as the paper's acquire/release queues, flat with
    per-lock offsets (``q_off``): each acquire's lane and epoch (a1 ≺ x iff P(x)[lane] >=
    epoch), each release's happens-before clock, and ``skip``: the next hold whose acquire its
    predecessor's release does not reach (a stray release between them): if a1 ⊀ r2, neither
    is any later acquire up to there."""
    k = h_full.shape[1]
    lock = holds["lock"].to_numpy(np.int64)
    n_locks = int(lock.max()) + 1 if len(lock) else 0
    q_off = np.searchsorted(lock, np.arange(n_locks + 1)).astype(np.int64)
    a1 = holds["acquire_row"].to_numpy(np.int64)
    r1 = holds["release_row"].to_numpy(np.int64)
    own = lane[r1]
    idx = h_full[r1, own]  # each release's index on its lane
    skip = np.zeros(len(holds), dtype=np.int64)
    for j in range(n_locks):
        on = slice(q_off[j], q_off[j + 1])
        m = q_off[j + 1] - q_off[j]
        chained = np.ones(m, dtype=bool)
        chained[0] = False
        chained[1:] = h_full[a1[on][1:], own[on][:-1]] >= idx[on][:-1]
        breaks = np.flatnonzero(~chained)  # hold 0 is one: breaks is never empty
        after = np.searchsorted(breaks, np.arange(m), "right")
        skip[on] = np.where(after < len(breaks), breaks[np.minimum(after, len(breaks) - 1)], m)
    q_rel = h_full[r1] if len(r1) else np.zeros((0, k), np.int64)
    return q_off, lane[a1], rel_before[a1] + 1, q_rel, skip
