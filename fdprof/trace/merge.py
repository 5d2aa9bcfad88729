"""Several traces (files, processes, runs) as one, on one timebase.

Readers already put each process on the epoch when they have its clock anchor (native headers,
Nsight's session start), so merging anchored traces is concatenation. A process without an
anchor (plain Chrome traces, OTLP from elsewhere) keeps its times as recorded: the merge says
so in a warning instead of shifting them by a guess. Span ids that collide across inputs are
renumbered in the later input (spans, parents, attributes, accesses, syncs together).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fdprof.errors import FdprofError
from fdprof.trace.attrs import Attrs
from fdprof.trace.model import SCHEMAS, Trace, frame


def _shift_ids(trace: Trace, by: int) -> Trace:
    spans = trace.spans.copy()
    spans["span_id"] += by
    spans["parent_id"] = spans["parent_id"].where(spans["parent_id"] == 0, spans["parent_id"] + by)
    tables = {"spans": spans}
    for table in ("accesses", "syncs"):
        df = getattr(trace, table).copy()
        df["span_id"] = df["span_id"].where(df["span_id"] == 0, df["span_id"] + by)
        tables[table] = df
    attrs = trace.attrs.with_span_ids(lambda ids: np.where(ids == 0, ids, ids + by))
    return Trace(**tables, attrs=attrs, processes=trace.processes, meta=trace.meta)


def merge(traces: list[Trace]) -> Trace:
    if not traces:
        raise FdprofError("nothing to merge")
    merged = Trace(meta={"format": "merged", "sources": [t.meta.get("path") for t in traces]})
    parts: list[Trace] = []
    seen: set[int] = set()
    top = 0
    for trace in traces:
        ids = set(trace.spans["span_id"].tolist())
        if ids & seen:
            trace = _shift_ids(trace, top - int(trace.spans["span_id"].min()) + 1)
            merged.warn(f"{trace.meta.get('path')}: span ids renumbered (they collided)",
                        "ids_renumbered", len(ids & seen))  # fmt: skip
            ids = set(trace.spans["span_id"].tolist())
        seen |= ids
        top = max([top, *ids]) if ids else top
        for pid in trace.processes.loc[~trace.processes["anchored"], "pid"].tolist():
            merged.warn(
                f"{trace.meta.get('path')}: process {pid} has no clock anchor; its times are "
                "used as recorded, not shifted onto the others' timebase",
                "unanchored_process",
            )
        for warning in trace.meta.get("warnings", []):
            merged.meta.setdefault("warnings", []).append(
                warning.prefixed(f"{trace.meta.get('path')}: ")
            )
        parts.append(trace)
    for table in SCHEMAS:
        frames = [getattr(t, table) for t in parts]
        df = pd.concat(frames, ignore_index=True) if frames else None
        if table == "processes":
            df = df.drop_duplicates("pid", ignore_index=True)
        setattr(merged, table, frame(table, {c: df[c] for c in SCHEMAS[table]}))
    merged.attrs = Attrs.concat([t.attrs for t in parts])
    merged.meta["thread_names"] = {
        k: v for t in parts for k, v in t.meta.get("thread_names", {}).items()
    }
    return merged.validate()
