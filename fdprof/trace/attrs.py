"""Span attributes stored typed: per key, the spans that carry it and their values as one Arrow
column of the key's kind.

Kinds: ``int`` (int64), ``float`` (float64), ``str``, ``bool``, ``ints`` (list<int64>: block
ids, layer ranges, grids), ``strs`` (list<string>: links, PyTorch's input types), and ``json``
for what no column type holds exactly: objects, nested or mixed lists, nulls, integers beyond
64 bits, and a key whose values mix types (``[0, 2.5]`` stays an int and a float). A ``json``
column keeps each value's JSON text and decodes it on access. JSON is written and parsed only
here, for the formats that carry JSON (Chrome args, OTLP ``AnyValue``\\s, the native writer's
string fallback); a native run's attributes never pass through text.

Readers hand values to :class:`AttrsBuilder` (typed Arrow arrays, or Python values whose kind
it infers) in parts. Small parts are joined as they come, :data:`SMALL_PARTS` at a time, until
they hold :data:`PART_ROWS` rows (so a value is copied a few times at most): thousands of small
parts, one per batch of events, left the allocator's heap full of holes the final columns could
not reuse.
:meth:`AttrsBuilder.build` joins what is left without copying values (an Arrow chunked array)
and keeps the last value where a span sets a key twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

INT, FLOAT, STR, BOOL, INTS, STRS, JSON = "int", "float", "str", "bool", "ints", "strs", "json"
ARROW_TYPES: dict[str, pa.DataType] = {
    INT: pa.int64(),
    FLOAT: pa.float64(),
    STR: pa.string(),
    BOOL: pa.bool_(),
    INTS: pa.list_(pa.int64()),
    STRS: pa.list_(pa.string()),
    JSON: pa.string(),
}
#: Python scalar type -> the kind that holds it (Decimal: a number an exact JSON decode made)
_SCALAR_KINDS = {int: INT, float: FLOAT, Decimal: FLOAT, str: STR, bool: BOOL}

#: parts are joined :data:`SMALL_PARTS` at a time while smaller than this many rows
PART_ROWS = 1 << 16
SMALL_PARTS = 8

_ENCODER = msgspec.json.Encoder(decimal_format="number")
_DECODER = msgspec.json.Decoder()


def small_tail(parts: list, rows: Callable[[Any], int]) -> int:
    """How many trailing parts to join now: :data:`SMALL_PARTS` when that many in a row are
    smaller than :data:`PART_ROWS` (module doc), else 0."""
    tail = 0
    for part in reversed(parts):
        if rows(part) >= PART_ROWS:
            break
        tail += 1
    return tail if tail >= SMALL_PARTS else 0


def to_json(value: Any) -> str:
    """The canonical JSON text of a value: compact, from one encoder for every writer (a
    Decimal from an exact JSON decode is written with its own digits)."""
    return _ENCODER.encode(value).decode()


def from_json(text: str) -> Any:
    return _DECODER.decode(text)


def kind_of(values: list) -> str:
    """The kind whose column holds every one of ``values`` exactly."""
    types = set(map(type, values))
    if len(types) == 1 or types == {float, Decimal}:
        kind = _SCALAR_KINDS.get(next(iter(types)))
        if kind is not None:
            return kind
    if types != {list}:
        return JSON
    inner = {type(x) for v in values for x in v}
    if inner <= {int}:
        return INTS
    return STRS if inner == {str} else JSON


def typed(values: list) -> tuple[str, pa.Array]:
    """``values`` (Python) as the Arrow column of their kind."""
    kind = kind_of(values)
    if kind == FLOAT:
        values = [_float(v) for v in values]
    if kind != JSON:
        try:
            return kind, pa.array(values, ARROW_TYPES[kind])
        except (OverflowError, pa.ArrowInvalid):  # an int beyond 64 bits
            pass
    return JSON, pa.array([to_json(_plain(v)) for v in values], pa.string())


def _too_wide(value: Any) -> bool:
    """Whether ``value`` is, or is a list holding, an integer beyond int64."""
    if type(value) is int:
        return not -(2**63) <= value < 2**63
    return type(value) is list and any(type(v) is int and _too_wide(v) for v in value)


def _float(value: float | Decimal) -> float:
    """A number as a double; a Decimal (an exact JSON decode) past a double's range is bad
    input, not infinity."""
    if type(value) is not Decimal:
        return value
    out = float(value)
    if math.isinf(out):
        raise ValueError(f"the number {str(value)[:40]} is beyond the range of a double")
    return out


def _plain(value: Any) -> Any:
    """Decimals as floats, as every other source gives non-integer numbers."""
    if type(value) is Decimal:
        return _float(value)
    if type(value) is list:
        return [_plain(v) for v in value]
    if type(value) is dict:
        return {k: _plain(v) for k, v in value.items()}
    return value


def int_lists_json(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each int list as compact JSON text (``[1,2]``), joined in Arrow: no Python list per
    row."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not len(values):
        return pa.array([], pa.string())
    text = pc.cast(pc.list_flatten(values), pa.string())
    offsets = pc.subtract(values.offsets, values.offsets[0])
    lists = pa.ListArray.from_arrays(offsets, text)
    return pc.binary_join_element_wise("[", pc.binary_join(lists, ","), "]", "")


@dataclass(frozen=True)
class Column:
    """One key's values: ``values[i]`` is the value on span ``span_id[i]``."""

    kind: str
    span_id: np.ndarray
    values: pa.ChunkedArray

    def __len__(self) -> int:
        return len(self.span_id)

    @property
    def nbytes(self) -> int:
        return int(self.span_id.nbytes) + int(self.values.nbytes)

    def python(self) -> list[Any]:
        """The values as Python objects (ints, floats, strs, bools, lists, decoded JSON)."""
        if self.kind == JSON:
            return [from_json(t) for t in self.values.to_pylist()]
        return self.values.to_pylist()

    def json(self) -> list[str]:
        """Each value's JSON text, as the formats that carry JSON write it."""
        return self.as_json().values.to_pylist()

    def as_json(self) -> Column:
        """The same values in the ``json`` kind (to join a key whose parts differ in kind)."""
        if self.kind == JSON:
            return self
        if self.kind == INT:
            text = pc.cast(self.values, pa.string())
        elif self.kind == INTS:
            text = int_lists_json(self.values)
        elif self.kind == STR:  # each distinct string encoded once (names repeat)
            encoded = pc.dictionary_encode(self.values).combine_chunks()
            words = [to_json(v) for v in encoded.dictionary.to_pylist()]
            text = pa.array(words, pa.string()).take(encoded.indices)
        else:
            text = pa.array([to_json(v) for v in self.values.to_pylist()], pa.string())
        return Column(JSON, self.span_id, _chunked(text, JSON))

    def take(self, rows: np.ndarray) -> Column:
        return Column(self.kind, self.span_id[rows], self.values.take(pa.array(rows)))

    def series(self, name: str) -> pd.Series:
        """The values as a Series indexed by span id: numpy for numbers and bools, Arrow for
        strings and lists (elements read as Python lists), Python objects for ``json``."""
        index = pd.Index(self.span_id, name="span_id")
        if self.kind == JSON:
            return pd.Series(self.python(), index=index, name=name, dtype=object)
        if self.kind in (INT, FLOAT, BOOL):
            data: Any = self.values.to_numpy()
        else:
            data = pd.arrays.ArrowExtensionArray(self.values)
        return pd.Series(data, index=index, name=name, copy=False)


def _convert(column: Column, kind: str) -> Column:
    if kind == JSON:
        return column.as_json()
    values = column.values.cast(ARROW_TYPES[kind])
    return Column(kind, column.span_id, values)


def _chunked(values: pa.Array | pa.ChunkedArray, kind: str) -> pa.ChunkedArray:
    if isinstance(values, pa.ChunkedArray):
        return values
    return pa.chunked_array([values], ARROW_TYPES[kind])


class Attrs:
    """Every span attribute of a trace, a typed :class:`Column` per key (module doc)."""

    def __init__(self, columns: dict[str, Column] | None = None, too_wide: int = 0) -> None:
        self._columns: dict[str, Column] = dict(columns or {})
        #: how many values the reader found that were integers beyond 64 bits (kept as JSON
        #: text, flagged once by the trace's warning)
        self.too_wide = too_wide

    def keys(self) -> list[str]:
        return list(self._columns)

    def __iter__(self):
        return iter(list(self._columns))

    def column(self, key: str) -> Column | None:
        return self._columns.get(key)

    def items(self) -> Iterable[tuple[str, Column]]:
        return self._columns.items()

    def __contains__(self, key: str) -> bool:
        return key in self._columns

    def __len__(self) -> int:
        """How many (span, key) values there are."""
        return sum(len(c) for c in self._columns.values())

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._columns.values())

    def series(self, key: str) -> pd.Series:
        column = self._columns.get(key)
        if column is None:
            return pd.Series([], index=pd.Index([], dtype="int64", name="span_id"),
                             dtype=object, name=key)  # fmt: skip
        return column.series(key)

    def span_ids(self, key: str) -> np.ndarray:
        column = self._columns.get(key)
        return np.zeros(0, np.int64) if column is None else column.span_id

    def without(self, *keys: str) -> Attrs:
        return Attrs({k: c for k, c in self._columns.items() if k not in keys})

    def with_span_ids(self, change: Callable[[np.ndarray], np.ndarray]) -> Attrs:
        """The same values on the span ids ``change`` maps each key's ids to."""
        return Attrs(
            {
                k: Column(c.kind, np.asarray(change(c.span_id), dtype=np.int64), c.values)
                for k, c in self._columns.items()
            }
        )

    def by_span(self) -> dict[int, dict[str, Any]]:
        """``span id -> {key: value}`` (Python values), for writers that visit every span."""
        out: dict[int, dict[str, Any]] = {}
        for key, column in self._columns.items():
            for sid, value in zip(column.span_id.tolist(), column.python(), strict=True):
                out.setdefault(sid, {})[key] = value
        return out

    @staticmethod
    def concat(parts: list[Attrs]) -> Attrs:
        """Several traces' attributes as one (span ids already distinct across them)."""
        builder = AttrsBuilder()
        for attrs in parts:
            for key, column in attrs.items():
                builder.add(key, column.span_id, column.values, column.kind)
        return builder.build()


class AttrsBuilder:
    """Attribute values collected in parts (a batch of events, a record file), joined per key
    by :meth:`build`."""

    def __init__(self) -> None:
        self._parts: dict[str, list[tuple[Column, np.ndarray | None]]] = {}
        self.too_wide = 0

    def add(
        self,
        key: str,
        span_ids: np.ndarray,
        values: pa.Array | pa.ChunkedArray,
        kind: str,
        order: np.ndarray | None = None,
    ) -> None:
        """Typed values of ``key`` on ``span_ids``. ``order`` (optional) places them among the
        key's other parts where a span sets the key twice: the last in order wins; without it,
        the last added."""
        if not len(span_ids):
            return
        ids = np.asarray(span_ids, dtype=np.int64)
        parts = self._parts.setdefault(key, [])
        parts.append((Column(kind, ids, _chunked(values, kind)), order))
        small = small_tail(parts, lambda part: len(part[0]) if part[1] is None else PART_ROWS)
        if small:
            joined = _join(parts[-small:])
            values = _chunked(joined.values.combine_chunks(), joined.kind)
            parts[-small:] = [(Column(joined.kind, joined.span_id, values), None)]

    def add_values(self, key: str, span_ids: Any, values: list) -> None:
        """Python values of ``key`` (decoded from JSON or SQL), typed by what they hold."""
        if values:
            kind, array = typed(values)
            if kind == JSON:
                self.too_wide += sum(map(_too_wide, values))
            self.add(key, np.asarray(span_ids, dtype=np.int64), array, kind)

    @property
    def keys(self) -> int:
        """How many distinct keys have values so far (a column each, once built)."""
        return len(self._parts)

    def renumber(self, change: Callable[[np.ndarray], Any]) -> None:
        """Let ``change`` rewrite the span ids of every part in place (a reader that numbers
        spans only once it has seen them all)."""
        for parts in self._parts.values():
            for column, _ in parts:
                change(column.span_id)

    def build(self) -> Attrs:
        columns = {}
        for key, parts in self._parts.items():
            columns[key] = _join(parts)
        self._parts = {}
        return Attrs(columns, self.too_wide)


def _join(parts: list[tuple[Column, np.ndarray | None]]) -> Column:
    """One key's parts as one column (the ``json`` kind if their kinds differ), without a
    span's earlier values."""
    kinds = {c.kind for c, _ in parts}
    if kinds == {INTS, STRS} and all(
        c.kind == STRS or pc.max(pc.list_value_length(c.values)).as_py() == 0 for c, _ in parts
    ):
        kinds = {STRS}  # a part whose lists are all empty holds no ints: they are string lists
    kind = kinds.pop() if len(kinds) == 1 else JSON
    columns = [c if c.kind == kind else _convert(c, kind) for c, _ in parts]
    ids = columns[0].span_id if len(columns) == 1 else np.concatenate([c.span_id for c in columns])
    chunks = [chunk for c in columns for chunk in c.values.chunks]
    column = Column(kind, ids, pa.chunked_array(chunks, ARROW_TYPES[kind]))
    if len(ids) < 2 or (ids[1:] > ids[:-1]).all():  # the common case: distinct and in order
        return column
    if all(order is not None for _, order in parts):
        rows = np.argsort(np.concatenate([order for _, order in parts]), kind="stable")
        column = column.take(rows)
    last = ~pd.Index(column.span_id).duplicated(keep="last")
    return column if last.all() else column.take(np.flatnonzero(last))
