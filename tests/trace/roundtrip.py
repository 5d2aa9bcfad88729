"""Comparison of two traces' spans, accesses and syncs, whatever row order each reader chose."""

from __future__ import annotations

import pandas as pd

from fdprof.trace.model import Trace

KEYS = {
    "spans": ["span_id"],
    "accesses": ["span_id", "pool", "block", "mode", "layer_lo", "layer_hi"],
    "syncs": ["time", "pid", "tid", "op", "obj", "seq", "span_id", "lane"],
    "attrs": ["span_id", "key"],
    "processes": ["pid"],
}


def canonical(trace: Trace, table: str) -> pd.DataFrame:
    df = getattr(trace, table)
    return df.sort_values(KEYS[table]).reset_index(drop=True).astype(object)


def assert_same(a: Trace, b: Trace, tables=("spans", "accesses", "syncs")) -> None:
    for table in tables:
        pd.testing.assert_frame_equal(canonical(a, table), canonical(b, table), obj=table)
