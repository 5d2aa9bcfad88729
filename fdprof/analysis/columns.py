"""DataFrame edges of the analyses: required columns checked first (one clear line, not a
KeyError deep inside), and rows turned into JSON-ready dicts for ``--json``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from fdprof.errors import FdprofError


def require(df: pd.DataFrame, table: str, columns: Iterable[str]) -> pd.DataFrame:
    """Return ``df`` if it has every column in ``columns``; else raise :class:`FdprofError`."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise FdprofError(f"trace {table} table lacks column(s) {', '.join(missing)}")
    return df


def json_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts of plain Python values (numpy scalars unwrapped, lists kept). Built a
    column at a time: going row by row through Arrow-backed columns is most of a small
    report's JSON."""
    names = list(df.columns)
    columns = [[_plain(v) for v in df.iloc[:, i].tolist()] for i in range(len(names))]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(i) for i in v]
    if v is pd.NA:
        return None
    return v
