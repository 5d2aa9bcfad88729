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
from collections import deque
from collections.abc import Iterable
from dataclasses import replace

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.hazards import HazardReport, Prepared, _LaneClocks, prepare
from fdprof.analysis.locks import lock_holds


def predict_races(trace, drop_objects: Iterable[str] = ()) -> HazardReport:
    """:func:`fdprof.analysis.hazards.find_hazards`'s report of ``trace`` with ``predicted``
    set: the conflicting span pairs that happens-before orders and WCP does not (columns as
    ``races``). Broken locks orders nothing in either (their edges are dropped first)."""
    p = prepare(trace, drop_objects)
    report = p.report()
    if p.acc["n"] == 0:
        return replace(report, predicted=report.races.copy())
    x, y, _, _ = p.unordered(WcpClocks(p))
    wcp = p.pairs(x, y)
    observed = set(zip(report.races["span_a"], report.races["span_b"], strict=True))
    pairs = zip(wcp["span_a"], wcp["span_b"], strict=True)
    fresh = np.array([pair not in observed for pair in pairs], dtype=bool)
    return replace(report, predicted=wcp[fresh].reset_index(drop=True))


def lock_rows_mask(syncs: pd.DataFrame) -> np.ndarray:
    """Which sync rows are of a lock object (``lock:*``): their edges are WCP's to judge."""
    obj = syncs["obj"].astype(str)
    locks = {o for o in pd.unique(obj).tolist() if fnmatch.fnmatchcase(o, S.LOCK_OBJECTS)}
    return obj.isin(locks).to_numpy(bool)


class WcpClocks:
    """Per lane, the WCP clock ``P`` at every sync event and at every span start where a
    rule-(a) edge lands, in lane order; the shape :meth:`Prepared.unordered` queries."""

    def __init__(self, p: Prepared) -> None:
        syncs, k = p.syncs, len(p.lanes)
        n = len(syncs)
        hb = p.clocks
        self.release_times = hb.release_times
        is_rel = (syncs["op"] == "release").to_numpy(bool)
        is_lock = lock_rows_mask(syncs) if n else np.zeros(0, bool)
        lane = p.lanes.get_indexer(syncs["lane"].astype(str)) if n else np.empty(0, np.int64)
        time = syncs["time"].to_numpy(np.int64)
        h_full = _row_clocks(hb, n, k)
        hard_src = np.where(is_lock & ~is_rel, -1, p.src)
        hard = _LaneClocks(syncs, hard_src, p.lanes, [])
        h_hard = _row_clocks(hard, n, k)
        # releases on a row's lane before it, in lane order: a1's epoch is this + 1
        rel_before = np.zeros(n, dtype=np.int64)
        for rows in hb.lane_rows:
            r = is_rel[rows].astype(np.int64)
            rel_before[rows] = np.cumsum(r) - r
        holds = _ordered_holds(syncs)
        landings = _rule_a(p, holds, hard, h_full, h_hard, rel_before, lane, time)
        self.times, self.vc = _propagate_wcp(p, holds, landings, h_full, rel_before, is_rel,
                                             is_lock, lane, time)  # fmt: skip

    def all_times(self) -> np.ndarray:
        return np.concatenate(self.times) if self.times else np.empty(0, np.int64)


def _row_clocks(clocks: _LaneClocks, n: int, k: int) -> np.ndarray:
    """The (n, lanes) clock of every sync row."""
    out = np.zeros((n, k), dtype=np.int64)
    for rows, vc in zip(clocks.lane_rows, clocks.vc, strict=True):
        out[rows] = vc
    return out


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


def _rule_a(p: Prepared, holds, hard, h_full, h_hard, rel_before, lane, time):
    """Rule (a) as landings: {span row: the join of H(r1) over every earlier hold of the
    same lock whose body has an access conflicting with one of the span's, in a hold's body
    the span is in}. Returns (span rows, (m, lanes) clocks)."""
    acc, k = p.acc, len(p.lanes)
    empty = (np.empty(0, np.int64), np.zeros((0, k), np.int64))
    if holds.empty or acc["n"] == 0:
        return empty
    hold_idx, x = _bodies(acc, holds, hard, h_hard, rel_before, lane, time, k)
    if len(x) == 0:
        return empty
    lock = holds["lock"].to_numpy(np.int64)[hold_idx]
    order = holds["order"].to_numpy(np.int64)[hold_idx]
    key = acc["key"][x]
    sort = np.lexsort((order, key, lock))
    hold_idx, x, lock, order, key = hold_idx[sort], x[sort], lock[sort], order[sort], key[sort]
    m = len(x)
    pos = np.arange(m)
    new_group = np.ones(m, dtype=bool)
    new_group[1:] = (lock[1:] != lock[:-1]) | (key[1:] != key[:-1])
    group = np.cumsum(new_group) - 1
    new_hold = new_group.copy()
    new_hold[1:] |= order[1:] != order[:-1]
    hold_start = np.maximum.accumulate(np.where(new_hold, pos, 0))  # first row of this hold
    h_rel = h_full[holds["release_row"].to_numpy(np.int64)[hold_idx]]
    write, lo, hi = acc["write"][x], acc["lo"][x], acc["hi"][x]
    big = int(h_full.max(initial=0)) + 1
    base = group * big
    joined = np.zeros((m, k), dtype=np.int64)
    classes = np.unique(np.stack([lo, hi], axis=1), axis=0)
    for c_lo, c_hi in classes.tolist():
        in_class = (lo == c_lo) & (hi == c_hi)
        meets = (c_lo < hi) & (lo < c_hi)
        for writes_only, needs in ((False, write), (True, ~write)):
            # a write conflicts with any access of the class, a read with its writes only
            take = meets & needs
            src = in_class & (write if writes_only else True)
            if not (take.any() and src.any()):
                continue
            for j in range(k):
                run = np.maximum.accumulate(base + np.where(src, h_rel[:, j], 0))
                before = np.where(hold_start > 0, run[np.maximum(hold_start - 1, 0)], -1)
                earlier = np.where(before >= base, before - base, 0)  # an earlier hold, same group
                joined[take, j] = np.maximum(joined[take, j], earlier[take])
    hit = joined.any(axis=1)
    if not hit.any():
        return empty
    span = acc["srow"][x[hit]]
    frame = pd.DataFrame(joined[hit]).groupby(span).max()
    return frame.index.to_numpy(np.int64), frame.to_numpy(np.int64)


def _bodies(acc, holds, hard, h_hard, rel_before, lane, time, k):
    """(hold index, access row) for every access of a span forced inside a hold: on the
    hold's lane, between its acquire and release; on another lane L', after an event of L'
    that the acquire reaches and ending before a release of L' that reaches the release, by
    program order and hard edges (one time window per hold and lane)."""
    a_row = holds["acquire_row"].to_numpy(np.int64)
    r_row = holds["release_row"].to_numpy(np.int64)
    h_lane = lane[a_row]
    out_h, out_x = [], []
    for lp in range(k):
        rows = np.flatnonzero(acc["lane"] == lp)
        if not len(rows):
            continue
        rows = rows[np.argsort(acc["start"][rows], kind="stable")]
        starts = acc["start"][rows]
        t_a = np.full(len(holds), np.iinfo(np.int64).max, dtype=np.int64)
        t_b = np.full(len(holds), np.iinfo(np.int64).min, dtype=np.int64)
        own = h_lane == lp
        t_a[own], t_b[own] = time[a_row[own]], time[r_row[own]]
        ht, rt = hard.times[lp], hard.release_times[lp]
        for lh in np.unique(h_lane[~own]).tolist():
            on = np.flatnonzero(h_lane == lh)
            if len(ht):
                ia = np.searchsorted(hard.vc[lp][:, lh], rel_before[a_row[on]] + 1, "left")
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
        inside = acc["end"][xr] <= t_b[h]
        out_h.append(h[inside])
        out_x.append(xr[inside])
    if not out_h:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(out_h), np.concatenate(out_x)


def _entry_starts(p) -> np.ndarray:
    """Each span's start, an access span's its entry time (after the acquires inside it:
    :mod:`fdprof.analysis.instrumentation`) where ``p`` has the access table."""
    start = p.spans["start"].to_numpy(np.int64)
    acc = getattr(p, "acc", None)
    if acc is None:
        return start
    out = start.copy()
    out[acc["srow"]] = acc["start"]
    return out


def _propagate_wcp(p, holds, landings, h_full, rel_before, is_rel, is_lock, lane, time):
    """Each lane's WCP clock along its events (sync rows and rule-(a) landings at span
    starts, a landing after the syncs of its instant), in an order that respects the lock
    edges (the only edges along which ``P`` itself travels: a hard edge brings its source's
    whole happens-before past). Returns per lane (times, clocks)."""
    k = len(p.lanes)
    src = p.src.tolist()
    lock_edge = [bool(is_lock[i] and not is_rel[i] and src[i] >= 0) for i in range(len(src))]
    # rule (b): per lock, its holds in order; per release row ending a hold, (lock, order)
    ends = {r: (lk, o) for r, lk, o in zip(holds["release_row"].tolist(),
                                            holds["lock"].tolist(), holds["order"].tolist(),
                                            strict=True)}  # fmt: skip
    queue = _hold_queues(holds, h_full, rel_before, lane)
    land_span, land_vc = landings
    span_lane = p.lanes.get_indexer(p.spans["lane"].astype(str).to_numpy()[land_span])
    span_start = _entry_starts(p)[land_span]
    items: list[list] = []  # per lane: sync rows (int) and landings (tuple), in lane order
    times: list[np.ndarray] = []
    for li, rows in enumerate(p.clocks.lane_rows):
        on = np.flatnonzero(span_lane == li)
        on = on[np.argsort(span_start[on], kind="stable")]
        t_sync, t_land = time[rows], span_start[on]
        at = np.searchsorted(t_sync, t_land, "right") + np.arange(len(on))
        seq: list = [None] * (len(rows) + len(on))
        is_land = np.zeros(len(seq), dtype=bool)
        is_land[at] = True
        for i, r in zip(np.flatnonzero(~is_land).tolist(), rows.tolist(), strict=True):
            seq[i] = r
        for i, v in zip(at.tolist(), land_vc[on].tolist(), strict=True):
            seq[i] = tuple(v)
        items.append(seq)
        t = np.empty(len(seq), dtype=np.int64)
        t[~is_land], t[is_land] = t_sync, t_land
        times.append(t)
    h_rows = h_full.tolist()
    done: list[list[int] | None] = [None] * len(src)
    out: list[list] = [[None] * len(seq) for seq in items]
    pos, cur = [0] * k, [[0] * k for _ in range(k)]
    applied: dict[tuple[int, int], list] = {}  # (lock, lane) -> [prefix, later ones...]
    waiting: dict[int, list[int]] = {}
    runnable = deque(range(k))
    left = sum(len(seq) for seq in items)
    while left:
        while runnable:
            li = runnable.popleft()
            seq, i, clock = items[li], pos[li], cur[li]
            while i < len(seq):
                e = seq[i]
                if isinstance(e, tuple):
                    clock[:] = map(max, clock, e)
                else:
                    s = src[e]
                    if lock_edge[e]:
                        if done[s] is None:
                            waiting.setdefault(s, []).append(li)
                            break
                        clock[:] = map(max, clock, done[s])
                    elif s >= 0 and not is_rel[e]:
                        clock[:] = map(max, clock, h_rows[s])
                    if e in ends:  # rule (b): every earlier hold whose acquire ≺ this release
                        lock, order = ends[e]
                        _rule_b(clock, queue[lock], order, applied.setdefault((lock, li), [0]))
                    done[e] = list(clock)
                    if e in waiting:
                        runnable.extend(waiting.pop(e))
                out[li][i] = tuple(clock)
                left -= 1
                i += 1
            pos[li] = i
        if left and not runnable:  # cannot happen: the clocks above had no cycle left
            raise RuntimeError("WCP propagation blocked on a lock edge")
    vc = [np.array(o, dtype=np.int64).reshape(len(o), k) for o in out]
    return times, vc


def _hold_queues(holds: pd.DataFrame, h_full, rel_before, lane) -> dict[int, tuple]:
    """Per lock, its holds in order as the paper's acquire/release queues: each acquire's
    lane and epoch (a1 ≺ x iff P(x)[lane] >= epoch), each release's happens-before clock, and
    ``skip``: the next hold whose acquire its predecessor's release does not reach (a stray
    release between them): if a1 ⊀ r2, neither is any later acquire up to there."""
    out = {}
    for lock, h in holds.groupby("lock", sort=True):
        a1 = h["acquire_row"].to_numpy(np.int64)
        r1 = h["release_row"].to_numpy(np.int64)
        lanes, own = lane[a1], lane[r1]
        idx = h_full[r1, own]  # each release's index on its lane
        chained = np.ones(len(h), dtype=bool)
        chained[0] = False
        chained[1:] = h_full[a1[1:], own[:-1]] >= idx[:-1]
        breaks = np.flatnonzero(~chained)  # hold 0 is one: breaks is never empty
        after = np.searchsorted(breaks, np.arange(len(h)), "right")
        skip = np.where(after < len(breaks), breaks[np.minimum(after, len(breaks) - 1)], len(h))
        out[int(lock)] = (lanes.tolist(), (rel_before[a1] + 1).tolist(),
                          h_full[r1].tolist(), skip.tolist())  # fmt: skip
    return out


def _rule_b(clock: list[int], queue: tuple, order: int, applied: list) -> None:
    """Join into ``clock`` (P at the release ending hold ``order``) the release clock of every
    earlier hold of the lock whose acquire is WCP-before it, until none is left; ``applied``
    holds the prefix of holds already joined on this lane, then the later ones joined."""
    lanes, epochs, rels, skip = queue
    done = set(applied[1:])
    changed = True
    while changed:
        changed = False
        j = applied[0]
        while j < order:
            if j in done:
                j += 1
            elif clock[lanes[j]] >= epochs[j]:
                clock[:] = map(max, clock, rels[j])
                done.add(j)
                changed = True
                j += 1
            else:
                j = skip[j]
    first = applied[0]
    while first in done:
        done.discard(first)
        first += 1
    applied[:] = [first, *sorted(done)]
