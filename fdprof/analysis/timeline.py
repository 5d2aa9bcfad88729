"""Interval arithmetic on span timelines: unions, and how much of a union falls in a window.

Why: "how much of this step was spent waiting on a lock" must count overlapping spans from
several lanes once, so everything goes through disjoint unions and prefix sums.
"""

from __future__ import annotations

import numpy as np


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The disjoint, sorted union of half-open intervals [start, end)."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    keep = end > start
    start, end = start[keep], end[keep]
    if len(start) == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.ones(len(start), dtype=bool)
    new[1:] = start[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    return start[idx], np.maximum.reduceat(end, idx)


def covered(u: tuple[np.ndarray, np.ndarray], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of the union ``u`` inside each window [lo, hi)."""
    s, e = u
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    if len(s) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def upto(t: np.ndarray) -> np.ndarray:
        """Union length in (-inf, t)."""
        i = np.searchsorted(s, t, "right")  # intervals starting before or at t
        inside = np.clip(t - s[np.maximum(i - 1, 0)], 0, (e - s)[np.maximum(i - 1, 0)])
        return cum[np.maximum(i - 1, 0)] + np.where(i > 0, inside, 0)

    return np.maximum(upto(hi) - upto(lo), 0)


def merge(*unions: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The union of several unions."""
    return union(np.concatenate([u[0] for u in unions]), np.concatenate([u[1] for u in unions]))
