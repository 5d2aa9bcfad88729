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
    the clocks' flat arrays and the reach table (:meth:`LaneClocks.reach_table`)."""

    clocks: LaneClocks
    ta_off: np.ndarray
    ta: np.ndarray

    @classmethod
    def of(cls, clocks: LaneClocks) -> ClockIndex:
        return cls(clocks, *clocks.reach_table())

    def arrays(self) -> dict[str, np.ndarray]:
        c = self.clocks
        return {"ev_off": c.ev_off, "times": c.times, "vc": c.vc, "rel_off": c.rel_off,
                "rel": c.release_times, "ta_off": self.ta_off, "ta": self.ta}  # fmt: skip


@dataclass(frozen=True)
class Pairs:
    """Access pairs as rows of the access table: ``racy`` (x, y) unordered conflicting
    pairs, x on the lower lane; ``alarms`` (x, y) ordered conflicting pairs that overlap in
    time (clock skew or mis-scoped spans)."""

    racy_x: np.ndarray
    racy_y: np.ndarray
    alarm_x: np.ndarray
    alarm_y: np.ndarray


def search_order(acc: AccessTable, rows: np.ndarray | None = None) -> np.ndarray:
    """``rows`` (default: every row) sorted by (key, lane, start): each key's accesses in
    runs per lane, each run in program order."""
    rows = np.arange(len(acc), dtype=I64) if rows is None else np.asarray(rows, dtype=I64)
    if not len(rows):
        return rows
    k = int(acc.lane[rows].max()) + 1
    by_start = rows[np.argsort(acc.start[rows], kind="stable")]
    key = acc.key[by_start]
    lo = int(key.min())
    span = (int(key.max()) - lo + 1) * k
    if span < 2**62 // max(k, 1):
        codes = (key - lo) * k + acc.lane[by_start]
        return by_start[kernels.stable_order(codes, span)]
    return by_start[np.lexsort((acc.lane[by_start], key))]


def unordered_pairs(
    acc: AccessTable,
    clocks: LaneClocks | ClockIndex,
    rows: np.ndarray | None = None,
    alarms: bool = True,
) -> Pairs:
    """The conflicting pairs among ``acc``'s ``rows`` (default: all) that ``clocks`` leaves
    unordered, and with ``alarms`` the ordered ones that overlap in time."""
    index = clocks if isinstance(clocks, ClockIndex) else ClockIndex.of(clocks)
    perm = search_order(acc, rows)
    if not len(perm):
        empty = np.zeros(0, I64)
        return Pairs(empty, empty, empty, empty)
    at = np.full(len(acc), -1, dtype=I64)
    epoch = np.ones(len(acc), dtype=I64)
    at[perm], epoch[perm] = index.clocks.positions(acc.lane[perm], acc.start[perm], acc.end[perm])
    columns = {"key": acc.key, "lane": acc.lane, "start": acc.start, "end": acc.end,
               "write": acc.write, "lo": acc.lo, "hi": acc.hi, "at": at,
               "epoch": epoch}  # fmt: skip
    found = kernels.unordered(index.clocks.k, perm, columns, index.arrays(), alarms)
    return Pairs(*found)
