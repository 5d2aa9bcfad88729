"""The canonical trace model: four DataFrames, the typed attributes and a little metadata,
whatever the source.

Every reader produces a :class:`Trace`; every analysis takes one. Times are int64
nanoseconds on one timebase (the run's epoch when clock anchors are known). A *lane* is
where program order holds: a host thread (``"<pid>/<tid>"``) or a device stream
(``"<pid>/cuda:0/stream:7"``, docs/trace.md "Lanes").

Ordering semantics used by the analyses: an access of span S on lane L happens after every
acquire on L at or before ``S.start`` and before every release on L at or after ``S.end``.
A sync event *inside* a span does not order that span's accesses.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from fdprof.errors import FdprofError
from fdprof.trace.attrs import Attrs

#: column -> dtype. ``parent_id`` 0 means none; ``step`` -1 means none; ``end`` -1 means the
#: span never ended (its process died or the trace was cut).
SPAN_COLUMNS: dict[str, str] = {
    "span_id": "int64",
    "parent_id": "int64",
    "name": "string",
    "start": "int64",
    "end": "int64",
    "pid": "int64",
    "tid": "int64",
    "lane": "string",
    "role": "string",
    "step": "int64",
    "trace_id": "string",
}
#: one row per (span, pool, block, mode); ``pool`` is ``gpu`` or ``cpu``; ``mode`` ``read`` or
#: ``write``; ``layer_lo``/``layer_hi`` is the half-open layer range, -1/-1 for all layers.
ACCESS_COLUMNS: dict[str, str] = {
    "span_id": "int64",
    "pool": "string",
    "block": "int64",
    "mode": "string",
    "layer_lo": "int64",
    "layer_hi": "int64",
}
#: happens-before events. ``keyed``: a release pairs only with acquires of the same ``obj`` and
#: the same ``seq`` (any int64, -1 included); unkeyed events (locks, mutexes; ``seq`` -1, not
#: read) pair each acquire with the object's latest unkeyed release. ``span_id`` 0: none.
SYNC_COLUMNS: dict[str, str] = {
    "op": "string",
    "obj": "string",
    "seq": "int64",
    "keyed": "bool",
    "time": "int64",
    "pid": "int64",
    "tid": "int64",
    "lane": "string",
    "span_id": "int64",
}
#: one row per process: its role and name, whether a clock anchor placed it on the timebase, and
#: its data- and tensor-parallel rank (-1: unknown), which scope per-engine objects and KV pools
#: for the analyses.
PROCESS_COLUMNS: dict[str, str] = {
    "pid": "int64",
    "role": "string",
    "name": "string",
    "anchored": "bool",
    "dp_rank": "int64",
    "tp_rank": "int64",
}

#: the Arrow type of string columns: pandas keeps them as large strings (a string column handed
#: to it is copied into one)
TEXT = pa.large_string()

#: ``meta["display"]`` keys: process labels and sort indexes by pid, thread sort indexes by
#: ``"pid/tid"``, as a Chrome trace's ``M`` events name them (the Chrome reader keeps them,
#: the Perfetto writer writes them back)
PROCESS_LABELS, PROCESS_SORT = "process_labels", "process_sort_index"
THREAD_SORT = "thread_sort_index"

SCHEMAS = {
    "spans": SPAN_COLUMNS,
    "accesses": ACCESS_COLUMNS,
    "syncs": SYNC_COLUMNS,
    "processes": PROCESS_COLUMNS,
}


def numpy_dtype(table: str, column: str) -> Any:
    """The numpy dtype a reader builds ``column`` of ``table`` in: object for strings."""
    dtype = SCHEMAS[table][column]
    return object if dtype == "string" else np.dtype(dtype)


def empty(table: str) -> pd.DataFrame:
    """An empty table of ``table``'s schema (a copy of one made once: building its typed
    columns costs ten times the copy, and a trace starts with four)."""
    return _empty(table).copy()


@functools.cache
def _empty(table: str) -> pd.DataFrame:
    return frame(table, {c: [] for c in SCHEMAS[table]})


def frame(table: str, columns: dict[str, Any]) -> pd.DataFrame:
    """A DataFrame of ``table``'s schema from column data, with the schema's dtypes."""
    schema = SCHEMAS[table]
    missing = [c for c in schema if c not in columns]
    if missing:
        raise FdprofError(f"{table}: missing columns {', '.join(missing)}")
    # no copies (two per column doubled a load's peak memory): the caller hands its column
    # arrays over and does not write to them afterwards
    data = {c: _text(columns[c]) if dtype == "string" else columns[c]
            for c, dtype in schema.items()}  # fmt: skip
    ready = _ready_arrays(schema, data)
    if ready is not None:
        return pd.DataFrame(ready, copy=False)
    return pd.DataFrame(
        {c: pd.Series(data[c], dtype=dtype, copy=False) for c, dtype in schema.items()},
        copy=False,
    )


#: the dtype the schemas' ``"string"`` names: Arrow-backed, NA for missing
_STRING = pd.api.types.pandas_dtype("string")


def _ready_arrays(schema: dict[str, str], data: dict[str, Any]) -> dict[str, Any] | None:
    """The columns as arrays of their schema's dtypes without a conversion, when each is one
    already (numbers) or an Arrow column of text (:func:`_text`), all of one length: a third of
    the time of typed Series, which a small table's build is mostly (property tests build
    thousands). None: something to convert, which typed Series do, with their checks."""
    if _STRING.storage != "pyarrow":
        return None
    arrays: dict[str, Any] = {}
    for c, dtype in schema.items():
        values = data[c]
        if dtype == "string" and isinstance(values, pa.Array):
            arrays[c] = pd.arrays.ArrowStringArray(pa.chunked_array([values]))
        elif dtype != "string" and isinstance(values, np.ndarray) and values.dtype == dtype:
            arrays[c] = values
        else:
            return None
    return arrays if len({len(a) for a in arrays.values()}) <= 1 else None


def _text(values: Any) -> Any:
    """An object array of strings (None: missing) as an Arrow column built from its distinct
    values, an exactly sized ``take``: converting it row by row grew the builder's buffer by
    doubling, 3-4× the column's size at the peak of a load."""
    if not (isinstance(values, np.ndarray) and values.dtype == object):
        return values
    codes, uniques = pd.factorize(values)
    try:
        dictionary = pa.array(uniques, TEXT)
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # not all strings: pandas says what is wrong
        return values
    return dictionary.take(pa.array(codes, mask=codes < 0))


@dataclass
class Trace:
    spans: pd.DataFrame = field(default_factory=lambda: empty("spans"))
    accesses: pd.DataFrame = field(default_factory=lambda: empty("accesses"))
    syncs: pd.DataFrame = field(default_factory=lambda: empty("syncs"))
    #: span attributes, typed, a column per key (:mod:`fdprof.trace.attrs`); read them with
    #: :meth:`attr`
    attrs: Attrs = field(default_factory=Attrs)
    processes: pd.DataFrame = field(default_factory=lambda: empty("processes"))
    #: source format, path, run config and results where the source has them, warnings
    meta: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> Trace:
        """Raise :class:`FdprofError` if a table lacks a column or has the wrong dtype."""
        if not isinstance(self.attrs, Attrs):
            raise FdprofError(f"trace attrs should be Attrs, not {type(self.attrs).__name__}")
        for table, schema in SCHEMAS.items():
            df = getattr(self, table)
            for col, dtype in schema.items():
                if col not in df.columns:
                    raise FdprofError(f"trace {table} table has no column {col!r}")
                if str(df[col].dtype) != dtype and not (
                    dtype == "string" and str(df[col].dtype).startswith("string")
                ):
                    raise FdprofError(
                        f"trace {table}.{col} has dtype {df[col].dtype}, expected {dtype}"
                    )
        return self

    def attr(self, key: str) -> pd.Series:
        """The values of attribute ``key``, indexed by span id, typed: int64, float64 and bool
        columns for numbers and bools, Arrow-backed strings and lists (read as Python lists),
        Python objects where a key's values mix types. The one way code outside
        ``fdprof.trace`` reads attributes, so their storage can change without touching the
        analyses."""
        return self.attrs.series(key)

    @property
    def nbytes(self) -> int:
        """Memory of the loaded tables and attributes (what a load's peak is measured against)."""
        tables = sum(int(getattr(self, t).memory_usage(deep=True).sum()) for t in SCHEMAS)
        return tables + self.attrs.nbytes

    def warn(self, message: str, code: str, count: int = 1) -> None:
        """Note what a reader read past (``code``: one of :data:`WARNING_CODES`; ``count``:
        how many of it): printed on stderr by the commands, listed in their JSON."""
        self.meta.setdefault("warnings", []).append(TraceWarning(message, code, count))

    @property
    def origin(self) -> int:
        """The trace's first time (ns): what a report's times "into the run" count from."""
        firsts = [int(t.min()) for t in (self.spans["start"], self.syncs["time"]) if len(t)]
        return min(firsts, default=0)

    @property
    def warnings(self) -> list[TraceWarning]:
        return self.meta.get("warnings", [])


#: what a reader may warn about, by code: the ``code`` of each entry of a JSON output's
#: ``warnings`` list (docs/trace.md "Warnings"). A new code is an addition, not a change of
#: the outputs' schemas; a code's meaning does not change.
WARNING_CODES = {
    "negative_duration": "spans that end before they start: read as never ended (end = -1)",
    "unended_span": "spans that never ended (a process killed or cut, a begin without an end)",
    "unmatched_end": "end events (E/e) without a begin: ignored",
    "unsupported_phase": "events of phases the Chrome reader does not read: ignored",
    "unpaired_flow": "flow events without the other end of their flow: ignored",
    "wide_int": "attribute values past int64: kept as JSON text, not read as numbers",
    "no_clock_anchor": "no process anchored to the epoch: times count from the trace's start",
    "unanchored_process": "a merged process without a clock anchor: its times used as recorded",
    "ids_renumbered": "span ids that collided across merged traces: renumbered",
    "clock_alarm": "hosts' clocks that the cross-host edges or the anchors contradict (merge)",
    "no_manifest": "a run directory without run.json: its .rec files read alone",
    "run_not_ok": "a run whose status is not ok: records read up to each process's last one",
    "missing_record": "a record file run.json names is missing",
    "stray_record": "record files run.json does not name: not read",
    "nvtx_dropped": "NVTX events dropped (capture file full)",
    "unplaced_event_sync": "CUDA event synchronisations that are not edges (no record place)",
    "join_several_streams": "spans with KV accesses whose device work ran on several streams",
    "join": "what joining an Nsight export to a run matched",
}


class TraceWarning(str):
    """A reader's warning: its text (what a person reads), a ``code`` naming its kind and the
    ``count`` of what it is about (spans, events, files), so a script can gate on it in a JSON
    output. A ``str``, so code and tests that read warnings as text keep working."""

    code: str
    count: int

    def __new__(cls, text: str, code: str, count: int = 1) -> TraceWarning:
        if code not in WARNING_CODES:
            raise ValueError(f"unknown warning code {code!r}")
        self = super().__new__(cls, text)
        self.code, self.count = code, int(count)
        return self

    def __reduce__(self):
        return TraceWarning, (str(self), self.code, self.count)

    def prefixed(self, prefix: str) -> TraceWarning:
        """The same warning, its text after ``prefix`` (which trace of several it is about)."""
        return TraceWarning(f"{prefix}{self}", self.code, self.count)

    def to_json(self, source: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "count": self.count, "message": str(self)}
        return out if source is None else out | {"source": source}


def rows(df: pd.DataFrame, columns: list[str]) -> Iterator[tuple]:
    """The rows of ``columns`` as plain Python tuples; much faster than ``itertuples`` over
    Arrow-backed columns, for writers that must visit every row."""
    return zip(*(df[c].tolist() for c in columns), strict=True)


def remap_ints(values: Any, keys: Any, new: Any, missing: Any = None) -> np.ndarray:
    """``values`` with each of ``keys`` (unique) replaced by the ``new`` beside it, the others
    kept (or taken from ``missing``), exact for every int64: a pandas ``map`` goes through
    float64 for the misses, which rounds ids past 2^53 together and cannot hold 2^63 - 1."""
    values = np.asarray(values, dtype=np.int64)
    fallback = values if missing is None else np.asarray(missing, dtype=np.int64)
    keys = np.asarray(keys, dtype=np.int64)
    if not len(keys) or not len(values):
        return fallback
    order = np.argsort(keys)
    keys, new = keys[order], np.asarray(new, dtype=np.int64)[order]
    at = np.searchsorted(keys, values).clip(0, len(keys) - 1)
    return np.where(keys[at] == values, new[at], fallback)
