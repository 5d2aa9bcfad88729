"""Turn a reader's raw columns into a validated :class:`Trace`, the same way for every format.

Readers decode their format (attributes typed, :mod:`fdprof.trace.attrs`); this applies the
attribute conventions (``fd.step``, ``fd.role``, ``fd.lane``, ``kv.*``) and the lane rules
once, so no reader re-implements them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fdprof.errors import FdprofError
from fdprof.trace import conventions as C
from fdprof.trace import limits
from fdprof.trace.attrs import Attrs
from fdprof.trace.model import Trace, frame


def assemble(
    trace: Trace,
    spans: dict[str, Any],
    attrs: Attrs,
    syncs: dict[str, Any],
    processes: dict[str, Any],
) -> Trace:
    """Fill ``trace`` from raw columns and the typed attributes.

    ``spans`` has every span column but ``step`` (derived here); ``role`` is the default used
    where ``fd.role`` is absent, ``lane`` (optional, None per row) where ``fd.lane`` is absent,
    and the host thread ``"<pid>/<tid>"`` where both are; device lanes that name no process
    are scoped by the span's (docs/trace.md "Lanes"). ``syncs`` has every sync column; a
    ``lane`` entry that is None means the owning span's ``fd.lane``, else the host thread.
    """
    n = len(spans["span_id"])
    where = trace.meta.get("path", "trace")
    limits.check(len(processes["pid"]), "processes", f"{where}: processes")
    _unique(where, np.asarray(spans["span_id"], dtype=np.int64))
    cols = dict(spans)
    cols["end"] = _drop_negative_durations(trace, cols)
    given = np.asarray(cols.get("lane", np.full(n, None)), dtype=object)
    cols["lane"] = np.where(np.equal(given, None), C.thread_lanes(cols["pid"], cols["tid"]), given)
    cols["step"] = np.full(n, -1, dtype=np.int64)
    spans_df = frame("spans", cols)
    C.span_columns(spans_df, attrs)
    spans_df["lane"] = C.scope_lanes(spans_df["lane"], cols["pid"])
    trace.spans = spans_df
    trace.attrs = attrs
    trace.accesses = C.accesses_from_attrs(attrs)
    trace.syncs = frame("syncs", syncs | {"lane": _sync_lanes(syncs, attrs)})
    trace.processes = frame("processes", processes)
    _flag_unanchored(trace, cols["start"], processes["anchored"])
    if attrs.too_wide:
        trace.warn(f"{attrs.too_wide:,} attribute value(s) do not fit int64: kept exactly, as "
                   "JSON text, so analyses do not read them as numbers", "wide_int",
                   attrs.too_wide)  # fmt: skip
    return trace


#: times before this (2001-09-09, 10^18 ns since the epoch) are not wall-clock times of a trace
EPOCH_FLOOR_NS = 10**18
_INT64 = np.iinfo(np.int64)


def on_epoch(times: Any, offset: int, where: str, unset: bool = False) -> np.ndarray:
    """``times + offset``: a reader's clock put on the epoch. A sum past int64 would wrap
    silently and reorder the trace, so the first such time is bad input, one line. ``unset``:
    negative times mean "never" (an open span's end) and stay -1."""
    times = np.asarray(times, dtype=np.int64)
    past = times > _INT64.max - offset if offset > 0 else times < _INT64.min - offset
    if unset:
        past &= times >= 0
    if past.any():
        raise FdprofError(
            f"{where}: a time of {int(times[past][0]):,} ns does not fit in int64 once put on "
            f"the epoch ({offset:+,} ns)"
        )
    return np.where(times < 0, -1, times + offset) if unset else times + offset


def _drop_negative_durations(trace: Trace, cols: dict[str, Any]) -> np.ndarray:
    """Spans that end before they start get no end (-1, as a span that never ended), so no
    duration, rate or overlap uses them; one warning says how many and names one."""
    start = np.asarray(cols["start"], dtype=np.int64)
    end = np.asarray(cols["end"], dtype=np.int64)
    backwards = (end != -1) & (end < start)
    if not backwards.any():
        return end
    first = int(np.flatnonzero(backwards)[0])
    names = cols["name"]
    name = names[first] if not hasattr(names, "to_pylist") else names[first].as_py()
    trace.warn(
        f"{int(backwards.sum()):,} span(s) end before they start (e.g. {name!r}: "
        f"{int(end[first]) - int(start[first]):,} ns): read as never ended (end = -1), so no "
        "duration or rate counts them",
        "negative_duration",
        int(backwards.sum()),
    )
    return np.where(backwards, -1, end)


def _flag_unanchored(trace: Trace, start: Any, anchored: Any) -> None:
    """One warning when no process is anchored to a clock and the times read as 1970: they
    count from the trace's own zero, which exports and dashboards would show as 1970 dates."""
    start = np.asarray(start, dtype=np.int64)
    if not len(start) or any(bool(a) for a in anchored):
        return
    if int(start.min()) < EPOCH_FLOOR_NS:
        trace.warn(
            "no clock anchor: times count from the trace's own start, not the epoch (as dates "
            "they read as 1970-01-01); its order against other traces is not known",
            "no_clock_anchor",
        )


def distinct(ids: np.ndarray) -> bool:
    """Whether no two of ``ids`` are equal: at once when they are in increasing order (a
    reader's own numbering), else by sorting."""
    if len(ids) < 2 or bool((ids[1:] > ids[:-1]).all()):
        return True
    ordered = np.sort(ids)
    return not bool((ordered[1:] == ordered[:-1]).any())


def _unique(where: str, span_id: np.ndarray) -> None:
    """Span ids identify spans (parents, attributes, syncs refer to them): two spans with one
    id cannot both be read right, so such a trace is refused rather than half-merged."""
    if distinct(span_id):
        return
    ordered = np.sort(span_id)
    twice = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(twice):
        raise FdprofError(f"{where}: {len(np.unique(twice)):,} span id(s) used by more than "
                          f"one span (e.g. {int(twice[0]) & (1 << 64) - 1:#x})")  # fmt: skip


def _sync_lanes(syncs: dict[str, Any], attrs: Attrs) -> np.ndarray:
    lane = np.asarray(syncs.get("lane", np.full(len(syncs["op"]), None)), dtype=object)
    unset = np.equal(lane, None)
    if not unset.any():
        return C.scope_lanes(lane, syncs["pid"])
    fallback = C.thread_lanes(syncs["pid"], syncs["tid"])
    overrides = C.override_lanes(attrs)
    if len(overrides):
        pos = pd.Index(overrides.index).get_indexer(np.asarray(syncs["span_id"], dtype=np.int64))
        fallback = np.where(pos >= 0, overrides.to_numpy(object)[pos], fallback)
    return C.scope_lanes(np.where(unset, fallback, lane), syncs["pid"])
