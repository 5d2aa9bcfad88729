"""Display tracks for timeline viewers that drop overlapping slices on one thread.

Perfetto (and chrome://tracing) show a thread's ``X`` slices as one stack: a slice that
overlaps another without nesting in it is dropped. So a span is placed on its thread's track
only if it nests properly there; device lanes (``fd.lane``), swaps and spans a caller labels
(Nsight's CUDA API and OS runtime calls) get tracks of their own, and spans that would still
overlap are written as async slices, which viewers pack onto as few rows as they need.
Nothing is dropped, and no track is made per overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.trace.conventions import thread_lanes

#: span names that always get a track of their own (they overlap the work they serve)
OWN_TRACK_NAMES = frozenset({*S.SWAP_SPANS, *S.SWAP_BLOCKING_SPANS})
#: thread ids of synthetic tracks start here (Linux thread ids stay below 2**22)
SYNTHETIC_TID = 1 << 30


@dataclass
class Tracks:
    #: track thread id per span row (the span's own tid when it stays on its thread)
    span_tid: np.ndarray
    #: (pid, track tid) -> track name, for the synthetic tracks
    names: dict[tuple[int, int], str]
    #: (pid, lane) -> track tid of the lane's first track, for lanes that are not threads
    lane_tracks: dict[tuple[int, str], int]
    #: per span row: it overlaps its track without nesting, so it is an async slice
    overlapping: np.ndarray


def assign(spans: pd.DataFrame, labels: np.ndarray | None = None) -> Tracks:
    """A track per span such that slices on each track nest properly; ``labels`` (a string or
    None per row) puts the labelled spans of a lane on a track of their own named
    ``"<lane> <label>"``."""
    pid = spans["pid"].to_numpy(np.int64)
    tid = spans["tid"].to_numpy(np.int64)
    lane = spans["lane"].to_numpy(object)
    name = spans["name"].to_numpy(object)
    own_lane = lane != thread_lanes(pid, tid)
    own_name = np.isin(name, list(OWN_TRACK_NAMES)) & ~own_lane
    label = np.full(len(spans), None, dtype=object) if labels is None else labels
    labelled = ~np.equal(label, None)
    # the track group of each row: its thread, its lane, or (lane, label or name); keyed by
    # objects, not numpy strings (a fixed-width copy of every span name ran to gigabytes)
    kind = np.where(own_lane & ~labelled, 1, np.where(own_name | labelled, 2, 0))
    suffix = np.where(labelled, label, name)
    group = np.full(len(spans), None, dtype=object)
    group[kind == 1] = lane[kind == 1]
    by_name = np.flatnonzero(kind == 2)
    group[by_name] = [(lane[r], suffix[r]) for r in by_name.tolist()]
    codes = pd.factorize(group)[0]
    start = spans["start"].to_numpy(np.int64)
    end = spans["end"].to_numpy(np.int64)
    end = np.where(end < 0, np.iinfo(np.int64).max, end)
    order = np.lexsort((-end, start, tid, pid, codes))
    # plain Python values for the loop: indexing numpy arrays element by element was most of
    # a conversion's time
    is_thread = (kind == 0).tolist()
    keys = list(zip(codes.tolist(), pid.tolist(), np.where(kind == 0, tid, 0).tolist(),
                    strict=True))  # fmt: skip
    starts, ends = start.tolist(), end.tolist()
    span_tid = tid.copy()
    overlapping = np.zeros(len(spans), dtype=bool)
    names: dict[tuple[int, int], str] = {}
    lane_tracks: dict[tuple[int, str], int] = {}
    tracks: dict[tuple, int] = {}
    stacks: dict[tuple, list[int]] = {}
    for row in order.tolist():
        base = keys[row]
        s, e = starts[row], ends[row]
        stack = stacks.get(base)  # ends of the open slices enclosing this one
        if stack is None:
            stack = stacks[base] = []
        while stack and stack[-1] <= s:
            stack.pop()
        if not stack or stack[-1] >= e:
            stack.append(e)
        else:
            overlapping[row] = True
        if is_thread[row]:
            continue
        track = tracks.get(base)
        if track is None:
            p = base[1]
            track = tracks[base] = SYNTHETIC_TID + len(tracks)
            named = kind[row] == 2
            names[(p, track)] = f"{lane[row]} {suffix[row]}" if named else lane[row]
            if own_lane[row] and not labelled[row]:
                lane_tracks.setdefault((p, lane[row]), track)
        span_tid[row] = track
    return Tracks(span_tid, names, lane_tracks, overlapping)
