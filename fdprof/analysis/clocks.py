"""Vector clocks over lanes: which release each acquire pairs with, the happens-before clock of
every sync event, and the per-lane form every query reads.

Why one module: happens-before (:mod:`fdprof.analysis.hazards`), weak causal precedence
(:mod:`fdprof.analysis.predict`) and the lifetime check all order accesses by clocks of this
shape: lane ``L``'s clock counts, in entry ``M``, the releases of lane ``M`` it knows of. A
span S on lane L has an *epoch* (1 + the releases on L before ``S.end``) and an *entry clock*
(L's clock after its last event at or before ``S.start``); S happens before T on lane M iff
``entry(T)[L] >= epoch(S)``. The clocks come from the sync events alone (small beside the
accesses): computed once, they can be handed to any partition of the accesses.

The clocks are computed by the worklist of :mod:`fdprof.analysis.kernels` in an order that
respects the pairing edges, never timestamps: a skewed clock must not reorder anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fdprof.analysis.kernels import HbStep, Worklist, run_worklist
from fdprof.analysis.tables import SyncTable, gap

I64 = np.int64


@dataclass(frozen=True)
class LaneClocks:
    """Per lane, its clock events in program order (``times``) with the clock after each
    (``vc``, ``k`` entries), and its releases' times (``release_times``: entry ``l`` of a
    clock counts lane ``l``'s releases, so release number ``i`` is ``release_times[i - 1]``).
    Lane ``l``'s rows are ``ev_off[l]:ev_off[l + 1]`` and ``rel_off[l]:rel_off[l + 1]``: flat
    arrays, so a partitioned run ships four arrays, not a list per lane."""

    ev_off: np.ndarray  #: (k + 1,) int64
    times: np.ndarray  #: (events,) int64, sorted within each lane
    vc: np.ndarray  #: (events, k) int64
    rel_off: np.ndarray  #: (k + 1,) int64
    release_times: np.ndarray  #: (releases,) int64, sorted within each lane

    @property
    def k(self) -> int:
        return len(self.ev_off) - 1

    def lane_times(self, lane: int) -> np.ndarray:
        return self.times[self.ev_off[lane] : self.ev_off[lane + 1]]

    def lane_vc(self, lane: int) -> np.ndarray:
        return self.vc[self.ev_off[lane] : self.ev_off[lane + 1]]

    def lane_releases(self, lane: int) -> np.ndarray:
        return self.release_times[self.rel_off[lane] : self.rel_off[lane + 1]]

    @classmethod
    def from_lanes(
        cls, times: list[np.ndarray], vc: list[np.ndarray], releases: list[np.ndarray], k: int
    ) -> LaneClocks:
        """From per-lane arrays (``vc[l]``: ``(len(times[l]), k)``)."""
        return cls(
            ev_off=_offsets([len(t) for t in times]),
            times=np.concatenate(times).astype(I64) if times else np.zeros(0, I64),
            vc=np.concatenate(vc).astype(I64).reshape(-1, k) if vc else np.zeros((0, k), I64),
            rel_off=_offsets([len(r) for r in releases]),
            release_times=np.concatenate(releases).astype(I64) if releases else np.zeros(0, I64),
        )

    def reach_table(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ta_off, ta)``: for lanes a, b and an epoch e of lane a, the index among lane
        b's events of the first whose clock has entry a >= e (lane b's event count: none), at
        ``(ta_off[a] + e) * k + b``: the first event of b that a span of a with that epoch
        happens before."""
        k = self.k
        sizes = np.diff(self.rel_off) + 2
        ta_off = _offsets(sizes.tolist())
        ta = np.empty((int(ta_off[-1]), max(k, 1)), dtype=I64)
        for a in range(k):
            epochs = np.arange(int(sizes[a]), dtype=I64)
            for b in range(k):
                column = self.lane_vc(b)[:, a] if b != a else np.zeros(0, I64)
                ta[ta_off[a] : ta_off[a + 1], b] = np.searchsorted(column, epochs, "left")
                if b == a:
                    ta[ta_off[a] : ta_off[a + 1], b] = self.ev_off[b + 1] - self.ev_off[b]
        return ta_off, ta.ravel()

    def happens_before(
        self, lane_a: np.ndarray, end_a: np.ndarray, lane_b: np.ndarray, start_b: np.ndarray
    ) -> np.ndarray:
        """Elementwise: whether a span on ``lane_a`` ending at ``end_a`` happens before one on
        ``lane_b`` starting at ``start_b`` (one lane: program order, by time)."""
        out = (lane_a == lane_b) & (end_a <= start_b)
        for la, lb in set(zip(lane_a.tolist(), lane_b.tolist(), strict=True)):
            if la == lb or not len(self.lane_times(lb)):
                continue
            on = np.flatnonzero((lane_a == la) & (lane_b == lb))
            epoch = np.searchsorted(self.lane_releases(la), end_a[on], "left") + 1
            at = np.searchsorted(self.lane_times(lb), start_b[on], "right") - 1
            entry = np.where(at >= 0, self.lane_vc(lb)[np.maximum(at, 0), la], 0)
            out[on] = entry >= epoch
        return out


def _offsets(sizes: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=I64))]).astype(I64)


@dataclass(frozen=True)
class SyncClocks:
    """Happens-before over the sync events: ``src``, each acquire's release row as the clocks
    used it (-1: none, or an edge dropped to break a cycle); ``rows``, the clock after every
    sync row (row order); ``lane_rows``, each lane's rows in program order; ``lanes``, the
    same clocks in lane form."""

    src: np.ndarray
    rows: np.ndarray
    lane_rows: list[np.ndarray]
    lanes: LaneClocks


def lane_order(syncs: SyncTable, k: int) -> list[np.ndarray]:
    """Each lane's sync rows in program order: by time, rows tied in time in row order."""
    n = len(syncs)
    order = np.lexsort((np.arange(n), syncs.time, syncs.lane))
    bounds = np.searchsorted(syncs.lane[order], np.arange(k + 1))
    return [order[bounds[i] : bounds[i + 1]] for i in range(k)]


def sync_clocks(
    syncs: SyncTable, src: np.ndarray, lanes: Sequence[str], gaps: list[dict[str, Any]]
) -> SyncClocks:
    """The happens-before clock of every sync event, each acquire joining the clock of the
    release ``src`` pairs it with. A cycle of edges (each unfinished lane waits on a release
    that waits on it) the trace cannot have meant: the earliest blocked edge is dropped and a
    ``cycle`` gap added to ``gaps``."""
    k, n = len(lanes), len(syncs)
    lane_rows = lane_order(syncs, k)
    src = np.array(src, dtype=I64)
    wait = np.where(syncs.release, -1, src)
    w = Worklist.new(lane_rows, n, wait)
    step = HbStep(syncs.release)
    while run_worklist(w, step):
        row = min((item for _, item in w.blocked()), key=lambda r: (int(syncs.time[r]), r))
        w.wait[row] = src[row] = -1
        gaps.append(gap("cycle", lanes[int(syncs.lane[row])], syncs.objects[int(syncs.obj[row])],
                        int(syncs.seq[row]), int(syncs.time[row]), 0,
                        "acquire waits on a release that waits on it"))  # fmt: skip
    release = syncs.release
    clocks = LaneClocks.from_lanes(
        [syncs.time[r] for r in lane_rows],
        [w.out[r] for r in lane_rows],
        [syncs.time[r][release[r]] for r in lane_rows],
        k,
    )
    return SyncClocks(src, w.out, lane_rows, clocks)


def pair_syncs(syncs: SyncTable, lanes: Sequence[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """For each sync row, the row of the release it acquires (-1: none) and the gaps found.

    A keyed acquire pairs with a keyed release of its ``obj`` and its ``seq`` (if several,
    the latest at or before it in time, else the first); an unkeyed one with the latest
    unkeyed release of the object at or before it, and the object's first unkeyed acquire
    may have none (a lock starts free). Pairing keys are compared column by column (a
    stable sort on object code, keyed, seq), never packed into one integer: any int64 seq,
    any number of objects.
    """
    n = len(syncs)
    src = np.full(n, -1, dtype=I64)
    gaps: list[dict[str, Any]] = []
    if n == 0:
        return src, gaps
    obj_code, seq, keyed, time = syncs.obj, syncs.seq, syncs.keyed, syncs.time
    is_rel = syncs.release
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
    first_rel = np.full(n, -1, dtype=I64)
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
        for row in missing.tolist():
            if not keyed[row] and row in first_acq:
                continue
            obj = syncs.objects[int(obj_code[row])]
            detail = "no release with this seq" if keyed[row] else "no earlier release"
            gaps.append(gap("no_release", lanes[int(syncs.lane[row])], obj, int(seq[row]),
                            int(time[row]), 0, f"acquire of {obj} has {detail}"))  # fmt: skip
    return src, gaps
