"""Comparison of two traces' tables and typed attributes, whatever row order each reader chose."""

from __future__ import annotations

import pandas as pd

from fdprof.trace.model import Trace

KEYS = {
    "spans": ["span_id"],
    "accesses": ["span_id", "pool", "block", "mode", "layer_lo", "layer_hi"],
    "syncs": ["time", "pid", "tid", "op", "obj", "keyed", "seq", "span_id", "lane"],
    "processes": ["pid"],
}


def canonical(trace: Trace, table: str) -> pd.DataFrame:
    df = getattr(trace, table)
    return df.sort_values(KEYS[table]).reset_index(drop=True).astype(object)


def typed_attrs(trace: Trace) -> dict[str, list[tuple[int, str, object]]]:
    """Per key, ``(span id, Python type, value)`` in span order: values and their types."""
    out = {}
    for key in trace.attrs:
        series = trace.attr(key).sort_index()
        out[key] = [(sid, type(v).__name__, v) for sid, v in series.items()]
    return out


def assert_same(a: Trace, b: Trace, tables=("spans", "accesses", "syncs")) -> None:
    for table in tables:
        if table == "attrs":
            assert typed_attrs(a) == typed_attrs(b)
            continue
        pd.testing.assert_frame_equal(canonical(a, table), canonical(b, table), obj=table)
