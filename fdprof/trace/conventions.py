"""The attribute conventions of DESIGN.md, applied the same way for every source format.

Readers only turn their format into the long ``attrs`` table (JSON text values) plus raw span
and sync rows; the meaning of ``fd.step``, ``fd.role``, ``fd.lane`` and the ``kv.*`` block lists
is derived here, once, so a trace means the same thing whether it came from native records,
Chrome ``args`` or OTLP attributes.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.trace.model import empty, frame

#: attribute key -> (pool, mode) of the accesses it lists
KV_KEYS = S.KV_ACCESS_KEYS
KV_LAYERS = S.KV_LAYERS
#: span attributes that fill span columns instead of staying only in ``attrs``
STEP, ROLE, LANE = S.STEP_ID, S.ROLE, S.LANE
#: W3C traceparents of a span's links (e.g. a step span linking the requests it served)
LINKS = S.LINKS
#: the sync conventions when a format carries sync events as attributes
SYNC_OP, SYNC_OBJ, SYNC_SEQ = S.SYNC_OP, S.SYNC_OBJ, S.SYNC_SEQ
#: a process's data-parallel rank, as a resource attribute (the probe's OTel export sets it)
DP_RANK = S.DP_RANK


_ENCODER = msgspec.json.Encoder(decimal_format="number")


def attr_json(value: Any) -> str:
    """The canonical JSON text of an attribute value: compact, so equal values compare equal,
    from one encoder for every reader and writer (a Decimal from an exact JSON decode is
    written with its own digits)."""
    return _ENCODER.encode(value).decode()


def dp_rank(value: Any) -> int:
    """A process's DP rank from a manifest entry or attribute (an int, or digits as the probe's
    OTel resource writes it); -1 (unknown) for anything else."""
    if type(value) is str and value.isdecimal():
        value = int(value)
    return value if type(value) is int and value >= 0 else -1


def attrs_frame(span_ids: Any, keys: Any, values: Any) -> pd.DataFrame:
    """The long ``attrs`` table; a key set twice on one span keeps its last value."""
    attrs = frame("attrs", {"span_id": span_ids, "key": keys, "value": values})
    dup = attrs.duplicated(["span_id", "key"], keep="last")
    if dup.any():
        attrs = attrs[~dup].reset_index(drop=True)
    return attrs


def _values(attrs: pd.DataFrame, key: str) -> tuple[np.ndarray, pa.Array]:
    # only the two columns needed are filtered, not whole rows (the key column too) of a key
    # that every span may have, like ``fd.step``
    mask = (attrs["key"] == key).to_numpy(dtype=bool, na_value=False)
    values = pa.array(attrs["value"])  # the Arrow data behind the column, not a copy per row
    values = values.filter(pa.array(mask))
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return attrs["span_id"].to_numpy(dtype=np.int64)[mask], values.cast(pa.string())


def _json_strings(values: pa.Array) -> pa.Array:
    """Decode JSON string texts; plain ones (no escapes) without a Python call per row."""
    if not len(values):
        return values
    quoted = pc.and_(pc.starts_with(values, '"'), pc.ends_with(values, '"'))
    simple = pc.and_(quoted, pc.invert(pc.match_substring(values, "\\")))
    if not pc.all(quoted).as_py():
        bad = values.filter(pc.invert(quoted))[0].as_py()
        raise FdprofError(f"attribute value {bad!r} should be a string")
    if pc.all(simple).as_py():
        return pc.utf8_slice_codeunits(values, 1, -1)
    return pa.array([json.loads(v) for v in values.to_pylist()], type=pa.string())


def _json_ints(values: pa.Array, key: str) -> np.ndarray:
    try:
        return pc.cast(pc.utf8_trim_whitespace(values), pa.int64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise FdprofError(f"attribute {key} should be an integer") from None


def _json_int_lists(values: pa.Array, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Decode JSON int lists: ``(row index, value)`` pairs for every element."""
    if not len(values):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    trimmed = pc.utf8_trim_whitespace(values)
    ok = pc.and_(pc.starts_with(trimmed, "["), pc.ends_with(trimmed, "]"))
    if not pc.all(ok).as_py():
        raise FdprofError(f"attribute {key} should be a list of integers")
    parts = pc.split_pattern(pc.utf8_slice_codeunits(trimmed, 1, -1), ",")
    rows = pc.list_parent_indices(parts).to_numpy()
    flat = pc.utf8_trim_whitespace(pc.list_flatten(parts))
    keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    try:
        ints = pc.cast(flat.filter(pa.array(keep)), pa.int64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise FdprofError(f"attribute {key} should be a list of integers") from None
    return rows[keep], ints


def span_columns(spans: pd.DataFrame, attrs: pd.DataFrame) -> None:
    """Set ``step``, ``role`` and ``lane`` of ``spans`` in place from ``fd.*`` attributes,
    where present (elsewhere the reader's values stay)."""
    index = pd.Index(spans["span_id"])
    for key, column in ((STEP, "step"), (ROLE, "role"), (LANE, "lane")):
        ids, values = _values(attrs, key)
        if not len(ids):
            continue
        decoded = _json_ints(values, key) if column == "step" else _json_strings(values)
        pos = index.get_indexer(ids)
        found = pos >= 0
        col = spans[column].to_numpy(copy=True)
        col[pos[found]] = np.asarray(decoded)[found]
        spans[column] = pd.Series(col, dtype=spans[column].dtype, index=spans.index)


def override_lanes(attrs: pd.DataFrame) -> pd.Series:
    """``fd.lane`` of each span that sets one, indexed by span id."""
    ids, values = _values(attrs, LANE)
    return pd.Series(_json_strings(values).to_pylist(), index=ids, dtype="string")


def accesses_from_attrs(attrs: pd.DataFrame) -> pd.DataFrame:
    """The ``accesses`` table derived from the ``kv.*`` block lists and ``kv.layers``."""
    lo_of = hi_of = pd.Series(dtype="int64")
    ids, values = _values(attrs, KV_LAYERS)
    if len(ids):
        rows, ints = _json_int_lists(values, KV_LAYERS)
        counts = np.bincount(rows, minlength=len(ids))
        if (counts != 2).any():
            raise FdprofError(f"attribute {KV_LAYERS} should be [lo, hi)")
        pairs = ints.reshape(-1, 2)
        lo_of = pd.Series(pairs[:, 0], index=ids)
        hi_of = pd.Series(pairs[:, 1], index=ids)
    parts = []
    for key, (pool, mode) in KV_KEYS.items():
        ids, values = _values(attrs, key)
        if not len(ids):
            continue
        rows, blocks = _json_int_lists(values, key)
        parts.append((ids[rows], pool, mode, blocks))
    if not parts:
        return empty("accesses")
    span_id = np.concatenate([p[0] for p in parts])
    # Arrow columns taken from the few distinct texts: np.full(n, text, dtype=object) made a
    # Python string per row
    which = np.repeat(np.arange(len(parts)), [len(p[0]) for p in parts])
    pool = pa.array([p[1] for p in parts], pa.string()).take(which)
    mode = pa.array([p[2] for p in parts], pa.string()).take(which)
    block = np.concatenate([p[3] for p in parts])
    lo = lo_of.reindex(span_id).fillna(-1).to_numpy(dtype=np.int64)
    hi = hi_of.reindex(span_id).fillna(-1).to_numpy(dtype=np.int64)
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


def thread_lanes(pids: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """``"<pid>/<tid>"`` per row, formatted once per distinct thread."""
    pids = np.asarray(pids, dtype=np.int64)
    tids = np.asarray(tids, dtype=np.int64)
    if not len(pids):
        return np.zeros(0, dtype=object)
    pid_codes, pid_values = pd.factorize(pids)
    tid_codes, tid_values = pd.factorize(tids)
    pairs, inverse = np.unique(pid_codes * len(tid_values) + tid_codes, return_inverse=True)
    texts = np.array(
        [f"{pid_values[k // len(tid_values)]}/{tid_values[k % len(tid_values)]}" for k in pairs],
        dtype=object,
    )
    return texts[inverse]
