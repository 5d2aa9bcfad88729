"""The race search: conflicting access pairs that a set of lane clocks leaves unordered.

Two accesses conflict when they touch one (scoped pool, block) key from different lanes, at
least one writes, and their layer ranges meet. With clocks of :mod:`fdprof.analysis.clocks`,
an access X on lane a and an access Y on lane b are unordered exactly when Y starts before
``tA`` (lane b's first event X happens before) and ends after ``tB`` (the time of the release
of b that X's entry clock knows last), because clock entries and release times grow along a
lane. So per key the candidates of X on lane b are one window of b's accesses sorted by start,
found by two binary searches (FastTrack's epoch idea, extended to report every racing pair, not
the first); :mod:`fdprof.analysis.kernels` runs the search, per key, in C.

Partitioning: the search reads the clocks whole and the accesses per key, so any split of an
:class:`~fdprof.analysis.tables.AccessTable` by key (a block partition) can be searched on its
own against the same :class:`~fdprof.analysis.clocks.LaneClocks` and the pairs concatenated
(:func:`unordered_pairs` takes ``rows``, the part to search).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fdprof.analysis import kernels
from fdprof.analysis.clocks import LaneClocks
from fdprof.analysis.tables import AccessTable

I64 = np.int64


@dataclass(frozen=True)
class ClockIndex:
    """What the search reads of a set of clocks, derived once and shared by every partition:
    the clocks' flat arrays, the reach table (:meth:`LaneClocks.reach_table`), and the two
    window bounds as times, ready to read: ``tb[e, b]``, the time of the last release of lane
    b known at event e (``INT64_MIN``: none), and ``ta_time``, the reach table's events as
    times (``INT64_MAX``: none). One row each per access, not a lookup per lane: the search
    reads them in key order, where every other lookup would miss the cache."""

    clocks: LaneClocks
    ta_off: np.ndarray
    ta: np.ndarray
    tb: np.ndarray
    ta_time: np.ndarray

    @classmethod
    def of(cls, clocks: LaneClocks) -> ClockIndex:
        k = clocks.k
        ta_off, ta = clocks.reach_table()
        tb = np.full((len(clocks.times), k), np.iinfo(I64).min, dtype=I64)
        ta_time = np.full(len(ta), np.iinfo(I64).max, dtype=I64)
        for b in range(k):
            entry = clocks.vc[:, b]
            known = entry > 0
            tb[known, b] = clocks.release_times[clocks.rel_off[b] + entry[known] - 1]
            reach = ta[b::k] if k else ta
            has = reach < clocks.ev_off[b + 1] - clocks.ev_off[b]
            ta_time[b::k][has] = clocks.times[clocks.ev_off[b] + reach[has]]
        return cls(clocks, ta_off, ta, tb.ravel(), ta_time)

    def arrays(self) -> dict[str, np.ndarray]:
        c = self.clocks
        return {"ev_off": c.ev_off, "times": c.times, "vc": c.vc, "rel_off": c.rel_off,
                "rel": c.release_times, "ta_off": self.ta_off, "ta": self.ta, "tb": self.tb,
                "ta_time": self.ta_time}  # fmt: skip


@dataclass(frozen=True)
class Pairs:
    """Access pairs as rows of the access table: ``racy`` (x, y) unordered conflicting
    pairs, x on the lower lane; ``alarms`` (x, y) ordered conflicting pairs that overlap in
    time (clock skew or mis-scoped spans)."""

    racy_x: np.ndarray
    racy_y: np.ndarray
    alarm_x: np.ndarray
    alarm_y: np.ndarray


def unordered_pairs(
    acc: AccessTable,
    clocks: LaneClocks | ClockIndex,
    rows: np.ndarray | None = None,
    alarms: bool = True,
) -> Pairs:
    """The conflicting pairs among ``acc``'s ``rows`` that ``clocks`` leaves unordered, and
    with ``alarms`` the ordered ones that overlap in time. ``rows`` (default: all) must keep
    the table's order (ascending rows); a partition takes whole keys, a contiguous range."""
    index = clocks if isinstance(clocks, ClockIndex) else ClockIndex.of(clocks)
    perm = np.arange(len(acc), dtype=I64) if rows is None else np.asarray(rows, dtype=I64)
    if not len(perm):
        empty = np.zeros(0, I64)
        return Pairs(empty, empty, empty, empty)
    seq = acc.seq[perm]
    lo = int(seq.min())
    by_time = perm[kernels.stable_order(seq - lo, int(seq.max()) - lo + 1)]
    columns = {"key": acc.key, "lane": acc.lane, "start": acc.start, "end": acc.end,
               "write": acc.write, "lo": acc.lo, "hi": acc.hi}  # fmt: skip
    found = kernels.unordered(index.clocks.k, perm, by_time, columns, index.arrays(), alarms)
    return Pairs(*found)
