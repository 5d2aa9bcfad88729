"""The attribute conventions (docs/trace.md), applied the same way for every source format.

Readers only turn their format into typed attributes (:mod:`fdprof.trace.attrs`) plus raw
span and sync rows; the meaning of ``fd.step``, ``fd.role``, ``fd.lane``, ``kv.layers`` and the
``kv.*`` block lists is derived here, once, straight from the typed columns, so a trace means
the same thing whether it came from native records, Chrome ``args`` or OTLP attributes. A value
these conventions cannot mean anything by (a block id that is not an integer, an empty layer
range) is bad input: one :class:`~fdprof.errors.FdprofError` line naming the span, the key and
the value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.trace import attrs as A
from fdprof.trace.attrs import Attrs, Column
from fdprof.trace.model import TEXT, empty, frame

#: ``sync.seq`` absent: the event is unkeyed (pairs in time order)
NO_SEQ = object()
_INT64 = (-(2**63), 2**63 - 1)


def sync_fields(op: Any, obj: Any, seq: Any = NO_SEQ) -> tuple[str, str, int, bool]:
    """``(op, obj, seq, keyed)`` of a sync event a format carries as attributes (Chrome args,
    OTLP event attributes); a value the conventions mean nothing by is bad input, a
    ``ValueError`` naming the key and the value, never a span, a gap or an edge of its own
    making: ``"Release"``, a seq that is not an int64."""
    if op not in tuple(S.SyncOp):
        raise ValueError(f"{S.SYNC_OP} = {_shown(op)}: should be one of {', '.join(S.SyncOp)}")
    if type(obj) is not str or not obj:
        raise ValueError(f"{S.SYNC_OBJ} = {_shown(obj)}: should be a non-empty string")
    if seq is NO_SEQ:
        return op, obj, -1, False
    if type(seq) is not int or not _INT64[0] <= seq <= _INT64[1]:
        raise ValueError(f"{S.SYNC_SEQ} = {_shown(seq)}: should be an integer in the int64 range")
    return op, obj, seq, True


def _shown(value: Any) -> str:
    """A value as JSON text, cut to 80 characters: what a bad-input line quotes."""
    text = A.to_json(value)
    return text if len(text) <= 80 else text[:77] + "..."


def rank(value: Any, key: str = S.DP_RANK) -> int:
    """A process's DP or TP rank (``key`` names it) from a manifest entry or an attribute: an
    integer, or its digits as the probe's OTel resource writes them; -1 or absent (None):
    unknown. Anything else is bad input, a ``ValueError`` naming the key and the value (the
    same in every reader: a rank of ``"zero"`` is not an unknown rank)."""
    if value is None:
        return -1
    if type(value) is str and value.lstrip("-").isdecimal() and len(value) < 20:
        value = int(value)
    if type(value) is not int or value < -1 or value >= 2**31:
        raise ValueError(f"{key} = {_shown(value)}: should be a rank (an integer >= 0; -1: "
                         "unknown)")  # fmt: skip
    return value


def _bad(key: str, column: Column, row: int, why: str) -> FdprofError:
    """One line naming the attribute, the span and the value."""
    value = column.take(np.array([row])).python()[0]
    return FdprofError(f"span {int(column.span_id[row])}: attribute {key} = {_shown(value)}: {why}")


def _first_not(column: Column, kinds: tuple[str, ...]) -> int:
    """The first row whose value is of none of ``kinds`` (a ``json`` column's values one by
    one), or -1."""
    if column.kind in kinds:
        return -1
    if column.kind != A.JSON:
        return 0
    for row, value in enumerate(column.python()):
        if A.kind_of([value]) not in kinds:
            return row
    return -1


def _ints(key: str, column: Column) -> np.ndarray:
    row = _first_not(column, (A.INT,))
    if row >= 0:
        raise _bad(key, column, row, "should be an integer")
    if column.kind == A.JSON:
        return np.array(column.python(), dtype=np.int64)
    return column.values.to_numpy()


def _strings(key: str, column: Column) -> np.ndarray:
    row = _first_not(column, (A.STR,))
    if row >= 0:
        raise _bad(key, column, row, "should be a string")
    return np.asarray(column.python() if column.kind == A.JSON else column.values, dtype=object)


def _int_lists(key: str, column: Column, what: str) -> tuple[np.ndarray, pa.Array]:
    """A column of int lists (``[]`` counts, as any list with no element): each value's
    length, and the elements, all int64."""
    row = _first_not(column, (A.INTS,))
    if row < 0 and column.kind == A.JSON:  # int lists, some beyond 64 bits?
        row = next((r for r, v in enumerate(column.python()) if not _fits(v)), -1)
    if row >= 0:
        raise _bad(key, column, row, what)
    values = column.values
    if column.kind == A.JSON:
        values = pa.array(column.python(), A.ARROW_TYPES[A.INTS])
    lengths = pc.list_value_length(values).to_numpy(zero_copy_only=False)
    return lengths.astype(np.int64), pc.list_flatten(values)


def _fits(values: list[int]) -> bool:
    return all(-(2**63) <= v < 2**63 for v in values)


def span_columns(spans: pd.DataFrame, attrs: Attrs) -> None:
    """Set ``step``, ``role`` and ``lane`` of ``spans`` in place from ``fd.*`` attributes,
    where present (elsewhere the reader's values stay)."""
    index = pd.Index(spans["span_id"])
    for key, column, decode in ((S.STEP_ID, "step", _ints), (S.ROLE, "role", _strings),
                                (S.LANE, "lane", _strings)):  # fmt: skip
        values = attrs.column(key)
        if values is None:
            continue
        decoded = decode(key, values)
        if decode is _ints and (decoded < 0).any():
            row = int(np.flatnonzero(decoded < 0)[0])
            raise _bad(key, values, row, "a step id is an integer >= 0")
        pos = index.get_indexer(values.span_id)
        found = pos >= 0
        rows, decoded = pos[found], decoded[found]
        if decode is _ints:
            col = spans[column].to_numpy(copy=True)
            col[rows] = decoded
        else:  # in Arrow: no Python string per row of the column
            order = np.argsort(rows)
            mask = np.zeros(len(spans), dtype=bool)
            mask[rows] = True
            current = pa.array(spans[column])
            replacements = pa.array(decoded[order], current.type)
            col = pc.replace_with_mask(current, pa.array(mask), replacements)
        spans[column] = pd.Series(col, dtype=spans[column].dtype, index=spans.index)


def override_lanes(attrs: Attrs) -> pd.Series:
    """``fd.lane`` of each span that sets one, indexed by span id."""
    column = attrs.column(S.LANE)
    if column is None:
        return pd.Series([], dtype="string")
    return pd.Series(_strings(S.LANE, column), index=column.span_id, dtype="string")


def _layer_ranges(attrs: Attrs) -> tuple[pd.Series, pd.Series]:
    """``kv.layers`` of each span that sets one, as ``lo`` and ``hi`` by span id; a range
    that is not ``[lo, hi)`` with ``0 <= lo < hi`` is bad input, not a span that touches no
    layer (which would hide every race it takes part in)."""
    column = attrs.column(S.KV_LAYERS)
    if column is None:
        return pd.Series(dtype="int64"), pd.Series(dtype="int64")
    lengths, ints = _int_lists(S.KV_LAYERS, column, "should be a layer range [lo, hi)")
    if (lengths != 2).any():
        row = int(np.flatnonzero(lengths != 2)[0])
        raise _bad(S.KV_LAYERS, column, row, "should be a layer range [lo, hi)")
    pairs = ints.to_numpy().reshape(-1, 2)
    bad = (pairs[:, 0] < 0) | (pairs[:, 0] >= pairs[:, 1])
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise _bad(S.KV_LAYERS, column, row, "an empty or inverted layer range (need 0 <= lo < hi)")
    return (pd.Series(pairs[:, 0], index=column.span_id),
            pd.Series(pairs[:, 1], index=column.span_id))  # fmt: skip


def accesses_from_attrs(attrs: Attrs) -> pd.DataFrame:
    """The ``accesses`` table, straight from the ``kv.*`` block-id lists and ``kv.layers``."""
    lo_of, hi_of = _layer_ranges(attrs)
    parts = []
    for key, (pool, mode) in S.KV_ACCESS_KEYS.items():
        column = attrs.column(key)
        if column is None:
            continue
        lengths, blocks = _int_lists(key, column, "should be a list of integer block ids")
        blocks = blocks.to_numpy()
        if (blocks < 0).any():  # a block id is an index into a pool
            row = int(np.searchsorted(np.cumsum(lengths), np.flatnonzero(blocks < 0)[0], "right"))
            raise _bad(key, column, row, "block ids are integers >= 0")
        parts.append((np.repeat(column.span_id, lengths), pool, mode, blocks))
    if not parts:
        return empty("accesses")
    span_id = np.concatenate([p[0] for p in parts])
    # Arrow columns taken from the few distinct texts: np.full(n, text, dtype=object) made a
    # Python string per row
    which = np.repeat(np.arange(len(parts)), [len(p[0]) for p in parts])
    pool = pa.array([p[1] for p in parts], TEXT).take(which)
    mode = pa.array([p[2] for p in parts], TEXT).take(which)
    block = np.concatenate([p[3] for p in parts])
    if len(lo_of):
        lo = lo_of.reindex(span_id).fillna(-1).to_numpy(dtype=np.int64)
        hi = hi_of.reindex(span_id).fillna(-1).to_numpy(dtype=np.int64)
    else:  # no span names a layer range: every access is to all layers
        lo, hi = np.full(len(span_id), -1, dtype=np.int64), np.full(len(span_id), -1, np.int64)
    return frame(
        "accesses",
        {
            "span_id": span_id,
            "pool": pool,
            "block": block,
            "mode": mode,
            "layer_lo": lo,
            "layer_hi": hi,
        },
    )


def scope_lanes(lanes: Any, pids: np.ndarray) -> Any:
    """Device lanes that name no process (``cuda:0/stream:7`` from an ``fd.lane``) scoped by
    the row's pid (:func:`fdprof.semconv.scoped_lane`), each distinct (pid, lane) formatted
    once; ``lanes`` (a Series or an object array) itself when none is unscoped."""
    if not len(lanes):
        return lanes
    codes, uniques = pd.factorize(lanes)
    unscoped = np.array([S.scoped_lane(0, u) != u for u in list(uniques)] + [False], dtype=bool)
    rows = np.flatnonzero(unscoped[codes])  # code -1 (None) reads the last, False
    if not len(rows):
        return lanes
    pid = np.asarray(pids, dtype=np.int64)[rows]
    pairs, inverse = np.unique(np.column_stack([pid, codes[rows]]), axis=0, return_inverse=True)
    texts = np.array([S.scoped_lane(p, uniques[c]) for p, c in pairs.tolist()], dtype=object)
    out = lanes.copy()
    if isinstance(out, pd.Series):
        out.iloc[rows] = texts[inverse.ravel()]
    else:
        out[rows] = texts[inverse.ravel()]
    return out


def thread_lanes(pids: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """``"<pid>/<tid>"`` per row, formatted once per distinct thread."""
    pids = np.asarray(pids, dtype=np.int64)
    tids = np.asarray(tids, dtype=np.int64)
    if not len(pids):
        return np.zeros(0, dtype=object)
    pid_codes, pid_values = pd.factorize(pids)
    tid_codes, tid_values = pd.factorize(tids)
    inverse, pairs = pd.factorize(pid_codes * len(tid_values) + tid_codes)
    texts = np.array(
        [f"{pid_values[k // len(tid_values)]}/{tid_values[k % len(tid_values)]}" for k in pairs],
        dtype=object,
    )
    return texts[inverse]
