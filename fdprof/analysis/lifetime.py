"""Block lifetimes: every access to a KV block must fall inside one of its lifetimes.

Why: a block freed while a reader still needs it (a swap-out that has not copied it yet) is a
bug whether or not the allocator hands it out again before the reader is done. Happens-before
over accesses alone sees it only in a run where a new owner's write raced with the late read;
with the allocator's events recorded (``block_alloc``/``block_free`` spans listing
``kv.<pool>_alloc``/``kv.<pool>_free`` ids), every run shows it.

Rule, per (pool, block): the allocator's events A1 F1 A2 F2 ... are ordered among themselves
(an allocator serializes its hand-outs, e.g. under the cache manager's mutex). An access X
belongs to the lifetime of the last event E that happens before X:

- E is a free: X is a *use after free* (ordered after the free, with no allocation between);
- E is an allocation and the next event is a free F that X does not happen before: the block
  was *freed while in use* (X and F unordered);
- no event happens before X: nothing is known (a trace that starts mid-lifetime), no finding.

The check is a vectorized binary search per access over its block's events, with the
happens-before relation handed in by :mod:`fdprof.analysis.hazards` (its vector clocks), so
this module knows nothing of clocks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from fdprof.analysis.columns import empty_frame

USE_AFTER_FREE = "use_after_free"
FREED_WHILE_IN_USE = "freed_while_in_use"

#: (lane_a, end_a, lane_b, start_b) -> whether a span on lane_a ending at end_a happens before
#: one on lane_b starting at start_b, elementwise
HappensBefore = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]

COLUMNS = ["kind", "pool", "block", "blocks", "span_a", "name_a", "role_a", "lane_a",
           "span_b", "name_b", "role_b", "lane_b"]  # fmt: skip


def lifetime_violations(
    events: dict[str, Any],
    accesses: dict[str, Any],
    happens_before: HappensBefore,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kind, access row, event row) of every access outside its block's lifetime.

    ``events`` and ``accesses`` are column dicts with ``key`` (pool and block as one int),
    ``lane`` (int), ``start``, ``end``; ``events`` also ``free`` (bool). Kind codes: 0 use after
    free, 1 freed while in use."""
    ev_order = np.lexsort((events["start"], events["key"]))
    ev_key = events["key"][ev_order]
    ev_lane, ev_end = events["lane"][ev_order], events["end"][ev_order]
    ev_start, ev_free = events["start"][ev_order], events["free"][ev_order]
    first = np.searchsorted(ev_key, accesses["key"], "left")
    stop = np.searchsorted(ev_key, accesses["key"], "right")
    has = np.flatnonzero(stop > first)
    lo, hi = first[has].copy(), stop[has].copy()
    x_lane, x_start, x_end = (accesses[c][has] for c in ("lane", "start", "end"))
    # lo ends as the first event of the block that does not happen before X (a prefix does)
    while True:
        open_ = np.flatnonzero(lo < hi)
        if len(open_) == 0:
            break
        mid = (lo[open_] + hi[open_]) // 2
        before = happens_before(ev_lane[mid], ev_end[mid], x_lane[open_], x_start[open_])
        lo[open_] = np.where(before, mid + 1, lo[open_])
        hi[open_] = np.where(before, hi[open_], mid)
    last = lo - 1
    known = last >= first[has]
    last_free = known & ev_free[np.maximum(last, 0)]
    nxt = np.minimum(lo, len(ev_key) - 1)
    open_life = known & ~last_free & (lo < stop[has]) & ev_free[nxt]
    rows = np.flatnonzero(open_life)
    freed_early = np.zeros(len(has), dtype=bool)
    if len(rows):
        freed_early[rows] = ~happens_before(
            x_lane[rows], x_end[rows], ev_lane[nxt[rows]], ev_start[nxt[rows]]
        )
    kind = np.repeat(np.array([0, 1], np.int64), [last_free.sum(), freed_early.sum()])
    x = np.concatenate([has[last_free], has[freed_early]])
    e = np.concatenate([ev_order[last[last_free]], ev_order[nxt[freed_early]]])
    return kind, x, e


def violations_frame(
    spans: pd.DataFrame,
    kind: np.ndarray,
    x_srow: np.ndarray,
    e_srow: np.ndarray,
    pool: np.ndarray,
    block: np.ndarray,
) -> pd.DataFrame:
    """One row per (kind, accessing span, allocator span, pool): ``block`` one example,
    ``blocks`` how many blocks the pair shares."""
    if len(kind) == 0:
        return empty_frame(COLUMNS)
    raw = pd.DataFrame(
        {
            "kind": np.where(kind == 0, USE_AFTER_FREE, FREED_WHILE_IN_USE),
            "pool": pool,
            "block": block,
            "xa": x_srow,
            "xb": e_srow,
        }
    )
    grouped = (
        raw.groupby(["kind", "xa", "xb", "pool"], sort=True)["block"]
        .agg(block="min", blocks="nunique")
        .reset_index()
    )
    out = {"kind": grouped["kind"], "pool": grouped["pool"], "block": grouped["block"],
           "blocks": grouped["blocks"]}  # fmt: skip
    for side, col in (("a", "xa"), ("b", "xb")):
        rows = grouped[col].to_numpy(np.int64)
        out[f"span_{side}"] = spans["span_id"].to_numpy(np.int64)[rows]
        for c in ("name", "role", "lane"):
            out[f"{c}_{side}"] = spans[c].take(rows).astype(str).to_numpy(dtype=object)
    return pd.DataFrame(out)[COLUMNS]


def empty_violations() -> pd.DataFrame:
    return violations_frame(pd.DataFrame(), *(np.empty(0, np.int64),) * 5)
