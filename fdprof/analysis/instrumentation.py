"""Instrumentation gaps the model finds beyond sync pairing: acquires recorded inside an
access span, and waits on transfer jobs that were never submitted. Gaps, never races.

Acquires inside an access span. Why: an access span says "these blocks were read and written
here". If it opens before the waits that order those accesses (vLLM's worker waits for
deferred stores, then runs the forward; a span opened when the method is entered holds both),
the waits' acquires fall *inside* the span, and by the model's rule (an access happens after
the acquires at or before its span's start) they order nothing of it: correct code reads as a
race. Whatever adapter
misplaces its span next, the model must say so as what it is, not as a race.

Rule (conservative, for the verdict): an acquire on lane L strictly inside a finished access
span S of L (``S.start < t < S.end``) is a ``sync_in_access_span`` gap naming the span and
the object, and S's accesses take the clock after the last such acquire, as if S had opened
there: the acquire orders all of S's accesses. That can hide a race only between an access
that really ran before the acquire and whatever the acquire ordered, which the gap reports.
Releases inside a span are left as they are: an access is ordered before the releases at or
after its span's end only (a completion signalled before the copy is done is a race).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.tables import AccessTable, SyncTable
from fdprof.trace.model import Trace

SYNC_IN_ACCESS_SPAN = "sync_in_access_span"
#: a wait on jobs the waiter never submitted: it completes nothing, so it orders nothing (an
#: adapter records completion edges only for jobs it saw submitted, and this for the rest)
WAIT_UNSUBMITTED = "wait_unsubmitted"


#: an acquire inside an access span: the span, the acquire's row among the trusted syncs (its
#: identity, across pieces of one trace), and what the gap names
INSIDE_COLUMNS = ["lane", "span_id", "row", "obj", "seq", "time"]


@dataclass(frozen=True)
class Acquires:
    """The trusted acquires (rows of a :class:`~fdprof.analysis.tables.SyncTable`), per lane in
    program order: what :func:`entry_times` reads. Small (a row per acquire), so computed once
    and handed to every partition of the accesses."""

    lane: np.ndarray  #: int64 lane code
    time: np.ndarray  #: int64 ns
    row: np.ndarray  #: int64: the acquire's row in the sync table
    obj: np.ndarray  #: object: the object's (scoped) name
    seq: np.ndarray  #: int64
    lanes: tuple[str, ...]  #: the lane codes' names

    @classmethod
    def of(cls, table: SyncTable, lanes: Sequence[str]) -> Acquires:
        rows = np.flatnonzero(~table.release)
        rows = rows[np.lexsort((rows, table.time[rows], table.lane[rows]))]
        objects = np.asarray(table.objects, dtype=object)
        return cls(table.lane[rows], table.time[rows], rows.astype(np.int64),
                   objects[table.obj[rows]] if len(objects) else np.empty(0, object),
                   table.seq[rows], tuple(str(x) for x in lanes))  # fmt: skip


def entry_times(
    acc: AccessTable, acquires: Acquires, span_ids: np.ndarray
) -> tuple[np.ndarray, pd.DataFrame]:
    """Each access's entry time (its span's start, or the last acquire of its lane strictly
    inside its span), and every (access span, acquire inside it) (:data:`INSIDE_COLUMNS`).
    ``span_ids``: the span id of each span row ``acc.span`` names."""
    start = acc.start
    if len(acc) == 0 or len(acquires.lane) == 0:
        return start, pd.DataFrame(columns=INSIDE_COLUMNS)
    entry = start.copy()
    span_of, acq_of = [], []
    bounds = np.searchsorted(acquires.lane, np.arange(len(acquires.lanes) + 1))
    for li in np.unique(acc.lane).tolist():
        first_acq, last_acq = int(bounds[li]), int(bounds[li + 1])
        if first_acq == last_acq:
            continue
        times = acquires.time[first_acq:last_acq]
        on = np.flatnonzero(acc.lane == li)
        lo = np.searchsorted(times, start[on], "right")
        hi = np.searchsorted(times, acc.end[on], "left")
        inside = hi > lo
        if not inside.any():
            continue
        rows = on[inside]
        entry[rows] = times[hi[inside] - 1]
        srow, first = np.unique(acc.span[rows], return_index=True)
        for s, a, b in zip(srow.tolist(), lo[inside][first].tolist(),
                           hi[inside][first].tolist(), strict=True):  # fmt: skip
            span_of += [s] * (b - a)
            acq_of += range(first_acq + a, first_acq + b)
    a = np.asarray(acq_of, dtype=np.int64)
    inside_rows = pd.DataFrame({
        "lane": np.asarray(acquires.lanes, dtype=object)[acquires.lane[a]],
        "span_id": span_ids[np.asarray(span_of, dtype=np.int64)],
        "row": acquires.row[a], "obj": acquires.obj[a], "seq": acquires.seq[a],
        "time": acquires.time[a],
    })  # fmt: skip
    return entry, inside_rows


def entered(
    acc: AccessTable, acquires: Acquires, span_ids: np.ndarray
) -> tuple[AccessTable, pd.DataFrame]:
    """``acc`` with its entry times as starts (:func:`entry_times`), in table order again, and
    the acquires found inside access spans."""
    entry, inside = entry_times(acc, acquires, span_ids)
    return (acc if entry is acc.start else acc.restarted(entry)), inside


def inside_gaps(inside: pd.DataFrame, spans: pd.DataFrame) -> list[dict[str, Any]]:
    """One ``sync_in_access_span`` gap per (lane, span name, object) of ``inside`` (rows of
    :func:`entry_times`, from one trace or its pieces: repeats count once): the first acquire
    (earliest, then smallest span id), how many acquires and spans. ``spans``: ``span_id`` and
    ``name`` of the spans named."""
    if inside.empty:
        return []
    rows = inside.drop_duplicates(["span_id", "row"])
    names = pd.Series(spans["name"].astype(str).to_numpy(dtype=object),
                      index=spans["span_id"].to_numpy(np.int64))  # fmt: skip
    rows = rows.assign(name=names.reindex(rows["span_id"].to_numpy()).fillna("").to_numpy())
    out = []
    for (lane, name, obj), g in rows.groupby(["lane", "name", "obj"], sort=True):
        first = g.sort_values(["time", "span_id"], kind="stable").iloc[0]
        span, n_spans = int(first["span_id"]), g["span_id"].nunique()
        out.append({
            "kind": SYNC_IN_ACCESS_SPAN, "lane": lane, "obj": obj, "seq": int(first["seq"]),
            "time": int(first["time"]), "span_id": span,
            "detail": f"{len(g)} acquire(s) of {obj} inside {n_spans} {name} span(s) (first: "
                      f"span {span}): the span opens before the syncs that order its accesses; "
                      "they were taken as after them",
        })  # fmt: skip
    return out


def unsubmitted_waits(trace: Trace) -> list[dict[str, Any]]:
    """One gap per ``swap_wait`` span that waited on jobs never submitted
    (``swap.unsubmitted``)."""
    listed = trace.attr(S.SWAP_UNSUBMITTED)
    if listed.empty:
        return []
    spans = trace.spans.set_index("span_id")
    out = []
    for span_id, jobs in listed.items():
        jobs = [int(j) for j in (jobs or [])]
        if not jobs or span_id not in spans.index:
            continue
        s = spans.loc[span_id]
        shown = ", ".join(map(str, jobs[:8])) + (" ..." if len(jobs) > 8 else "")
        out.append({"kind": WAIT_UNSUBMITTED, "lane": str(s["lane"]), "obj": S.SIGNAL_SWAP_DONE,
                    "seq": jobs[0], "time": int(s["start"]), "span_id": int(span_id),
                    "detail": f"waited on {len(jobs)} job(s) never submitted ({shown}): no "
                              "completion edge"})  # fmt: skip
    return out
