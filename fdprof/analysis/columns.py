"""DataFrame edges of the analyses: required columns checked first (one clear line, not a
KeyError deep inside), and rows turned into JSON-ready dicts for ``--json``."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
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


def empty_frame(columns: Iterable[str], dtypes: Mapping[str, Any] | None = None,
                default: Any = object) -> pd.DataFrame:  # fmt: skip
    """No rows, ``columns`` typed by ``dtypes`` (else ``default``): a copy of one made once
    per shape. An analysis that finds nothing returns several of these, and building typed
    empty columns costs more than a small trace's whole search."""
    typed = tuple((c, (dtypes or {}).get(c, default)) for c in columns)
    return _empty_frame(typed).copy()


@functools.cache
def _empty_frame(typed: tuple[tuple[str, Any], ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=dtype) for c, dtype in typed})
