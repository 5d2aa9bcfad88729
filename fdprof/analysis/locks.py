"""Lock holds (critical sections) from sync events, and locks that did not exclude.

Why: a lock's release → acquire edges order two critical sections only if the lock excluded
them. FastDeploy's ``IPCLock`` is a ``flock`` on one descriptor shared by the cache manager's
threads, and ``flock`` does not exclude threads that share an open file description: both
hold it at once, and either's unlock frees the other's hold. Two holds of one lock object
overlapping in time on different lanes are a *broken lock*: its recorded edges are not order
(a hold that started while another was held "acquired" from a release that did not exclude
it), so the detector drops them and reports the races they would have hidden.

A hold is an acquire of a ``lock:*`` object and the next sync event of that object on the
same lane, when that is a release (as the engine records a hold: acquire once obtained,
release at unlock).
"""

from __future__ import annotations

import fnmatch

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.columns import empty_frame

HOLD_COLUMNS = {"obj": "object", "lane": "object", "start": "int64", "end": "int64",
                "acquire_row": "int64", "release_row": "int64"}  # fmt: skip
BROKEN_COLUMNS = {"obj": "object", "lane_a": "object", "start_a": "int64", "end_a": "int64",
                  "lane_b": "object", "start_b": "int64", "end_b": "int64"}  # fmt: skip


def lock_rows(syncs: pd.DataFrame, pattern: str = S.LOCK_OBJECTS) -> np.ndarray:
    """Rows of ``syncs`` whose object matches the glob ``pattern`` (default: every lock); the
    objects matched by name once each, not a string per row."""
    codes, names = pd.factorize(syncs["obj"], use_na_sentinel=False)
    matching = np.array([fnmatch.fnmatchcase(str(o), pattern) for o in names] + [False], bool)
    return np.flatnonzero(matching[codes])


def lock_holds(syncs: pd.DataFrame) -> pd.DataFrame:
    """One row per hold of a lock object: its object, lane, start (the acquire's time), end
    (the release's), and the two sync rows (positions in ``syncs``)."""
    rows = lock_rows(syncs)
    if not len(rows):
        return _empty(HOLD_COLUMNS)
    # codes, not a Python string per row: objects and lanes are few
    obj_code, objs = pd.factorize(syncs["obj"].take(rows), use_na_sentinel=False)
    lane_code, lanes = pd.factorize(syncs["lane"].take(rows), use_na_sentinel=False)
    obj = np.array([str(o) for o in objs], dtype=object)[obj_code]
    lane = np.array([str(x) for x in lanes], dtype=object)[lane_code]
    time = syncs["time"].to_numpy(np.int64)[rows]
    is_acq = (syncs["op"].take(rows) == S.SyncOp.ACQUIRE).to_numpy(bool)
    order = np.lexsort((rows, time, lane_code, obj_code))
    same = (obj_code[order][1:] == obj_code[order][:-1]) & (
        lane_code[order][1:] == lane_code[order][:-1]
    )
    opens = np.flatnonzero(is_acq[order][:-1] & ~is_acq[order][1:] & same)
    a, r = order[opens], order[opens + 1]
    return pd.DataFrame({
        "obj": obj[a], "lane": lane[a], "start": time[a], "end": time[r],
        "acquire_row": rows[a], "release_row": rows[r],
    })  # fmt: skip


def broken_locks(holds: pd.DataFrame) -> pd.DataFrame:
    """Every pair of holds of one lock object on different lanes that overlap in time (one
    started before the other ended), ``a`` the one that started first."""
    if holds.empty:
        return no_broken_locks()
    h = holds.sort_values(["obj", "start", "end"], kind="stable").reset_index(drop=True)
    obj_code = pd.factorize(h["obj"])[0]
    start, end = h["start"].to_numpy(np.int64), h["end"].to_numpy(np.int64)
    # holds i < j of one object overlap iff start_j < end_i (starts are sorted) and
    # start_i < end_j; the candidates j of i are a contiguous run after it
    bound = np.empty(len(h), dtype=np.int64)
    for code in np.unique(obj_code).tolist():
        on = np.flatnonzero(obj_code == code)
        bound[on] = on[0] + np.searchsorted(start[on], end[on], "left")
    length = np.maximum(bound - np.arange(len(h)) - 1, 0)
    i = np.repeat(np.arange(len(h)), length)
    j = i + 1 + (np.arange(len(i)) - np.repeat(np.cumsum(length) - length, length))
    lane = h["lane"].to_numpy(dtype=object)
    keep = (lane[i] != lane[j]) & (start[i] < end[j])
    i, j = i[keep], j[keep]
    return pd.DataFrame({
        "obj": h["obj"].to_numpy(dtype=object)[i], "lane_a": lane[i], "start_a": start[i],
        "end_a": end[i], "lane_b": lane[j], "start_b": start[j], "end_b": end[j],
    })  # fmt: skip


def no_broken_locks() -> pd.DataFrame:
    """The empty :func:`broken_locks` frame."""
    return _empty(BROKEN_COLUMNS)


def _empty(columns: dict[str, str]) -> pd.DataFrame:
    return empty_frame(columns, columns)
