"""The Chrome reader's fast path: pieces of a trace read by C (``fdprof.trace._chromescan``)
into typed columns, with no Python object per event.

Why: decoding a gigabyte of events into dicts and reading them back was most of a large
hazard check's time (~10 µs per event). The C scanner reads a piece (the events
:class:`~fdprof.trace.jsonstream.Stream` cuts between two lines) only when every event in it
is a complete slice (``X``) or a sync instant whose fields have the plain types the Python path
reads; else it declines and the piece takes the Python path, which also words any error. What
it returns here becomes exactly what :class:`fdprof.trace.chrome._Builder` makes of the same
events (span columns, attribute parts of the same kinds in the same order, sync columns): the
tests compare the two readings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from fdprof.trace import attrs as A

try:
    from fdprof.trace import _chromescan as _c
except ImportError:  # not built: every piece takes the Python path
    _c = None

#: the C scanner's value kinds
T_INT, T_FLOAT, T_STR, T_BOOL, T_LIST_INT, T_LIST_STR, T_LIST_EMPTY = range(7)
E_SPAN, E_SYNC = 0, 1
_SCALARS = {T_INT: A.INT, T_FLOAT: A.FLOAT, T_STR: A.STR, T_BOOL: A.BOOL}
#: the scanner's records: one per event, one per attribute value of a span
EVENT = np.dtype([(f, "<i8") for f in ("kind", "ts", "dur", "pid", "tid", "name", "cat", "sid",
                                        "has_sid", "parent", "trace", "lane", "role", "op",
                                        "obj", "seq", "keyed", "span")])  # fmt: skip
ARG = np.dtype([("a_ev", "<i8"), ("a_key", "<i8"), ("a_tag", "<i8"), ("a_val", "<i8"),
                ("a_len", "<i8"), ("a_f", "<f8")])  # fmt: skip
#: events the scanner collects before the builder takes them (fewer, larger steps)
MERGE_EVENTS = 1 << 16


class Scanner:
    """The C scanner over one trace: :meth:`feed` each piece (True: read; False: declined,
    the Python path reads it), :meth:`take` what the pieces fed so far hold."""

    def __init__(self) -> None:
        self._c = _c.Scanner() if _c is not None else None

    def feed(self, piece: str) -> bool:
        return self._c is not None and self._c.feed(piece.encode())

    def __len__(self) -> int:
        return 0 if self._c is None else self._c.events()

    def take(self) -> Scanned:
        strings, events, args, ints, strs = self._c.take()
        cols = {**_columns(events, EVENT), **_columns(args, ARG)}
        cols |= {"l_int": np.frombuffer(ints, np.int64), "l_str": np.frombuffer(strs, np.int64)}
        return Scanned(strings, cols)


def _columns(data: bytes, dtype: np.dtype) -> dict[str, np.ndarray]:
    """The scanner's records, one column after another, as arrays by field."""
    rows = len(data) // dtype.itemsize
    return {name: np.frombuffer(data, dtype.fields[name][0], rows, i * rows * 8)
            for i, name in enumerate(dtype.names)}  # fmt: skip


class Scanned:
    """The events of consecutive pieces: per event ``kind`` (span or sync), ``ts``/``dur``
    (ns), ``pid``, ``tid``, codes into ``strings`` (``name``, ``cat``, ``trace``, ``lane``,
    ``role``, sync ``obj``; -1 none), span ids (``sid`` where ``has_sid``), ``parent``, sync
    ``op`` (0 release, 1 acquire), ``seq``, ``keyed``, ``span``; and the spans' attributes, one
    row each (``a_ev`` event, ``a_key`` key code, ``a_tag`` kind, ``a_val``/``a_f`` value,
    ``a_len`` a list's length, elements in ``l_int``/``l_str``)."""

    def __init__(self, strings: list[str], cols: dict[str, np.ndarray]) -> None:
        self.strings = np.array(strings + [None], dtype=object)  # code -1 reads None
        self.c = cols
        self._arrow: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.c["kind"])

    def text(self, codes: np.ndarray) -> np.ndarray:
        """The strings of ``codes`` (object array; -1: None)."""
        return self.strings[codes]

    def interned(self, names: dict[str, str]) -> np.ndarray:
        """The piece's strings interned in ``names`` (the reader's: one object per distinct
        name across the trace), as ``strings``: code -1 reads None."""
        return np.array([names.setdefault(t, t) for t in self.strings[:-1].tolist()] + [None],
                        dtype=object)  # fmt: skip

    def arrow_text(self, codes: np.ndarray) -> pa.Array:
        if self._arrow is None:
            self._arrow = pa.array(self.strings[:-1].tolist(), pa.string())
        return self._arrow.take(pa.array(codes))

    def rows(self, lo: int, hi: int, kind: int) -> np.ndarray:
        """The events of ``kind`` among events ``lo..hi-1``."""
        return lo + np.flatnonzero(self.c["kind"][lo:hi] == kind)

    def attributes(self, events: np.ndarray, sids: np.ndarray) -> list[tuple[str, Any, Any, str]]:
        """The attributes of ``events`` (sorted) as ``(key, span ids, values, kind)`` per key
        in the order the keys first appear: Arrow arrays of the key's kind, or Python values
        (kind ``""``) where a key's values differ in kind here (the builder types them as the
        Python path does: a ``json`` column)."""
        c = self.c
        a_ev = c["a_ev"]
        lo = np.searchsorted(a_ev, events[0], "left")
        hi = np.searchsorted(a_ev, events[-1], "right")
        ev, key, tag = a_ev[lo:hi], c["a_key"][lo:hi], c["a_tag"][lo:hi]
        val, length, real = c["a_val"][lo:hi], c["a_len"][lo:hi], c["a_f"][lo:hi]
        out = []
        for code in pd.unique(key).tolist():  # in order of first appearance
            on = np.flatnonzero(key == code)
            ids = sids[np.searchsorted(events, ev[on])]
            out.append((self.strings[code], ids, *self._values(tag[on], val[on], length[on],
                                                               real[on])))  # fmt: skip
        return out

    def _values(self, tag, val, length, real) -> tuple[Any, str]:
        tags = set(pd.unique(tag).tolist())
        if len(tags) == 1 and next(iter(tags)) in _SCALARS:
            kind = _SCALARS[next(iter(tags))]
            if kind == A.STR:
                return self.arrow_text(val), kind
            data = {A.INT: val, A.FLOAT: real, A.BOOL: val.astype(bool)}[kind]
            return pa.array(data, A.ARROW_TYPES[kind]), kind
        strs = T_LIST_STR in tags
        if tags <= {T_LIST_INT, T_LIST_EMPTY} or (strs and tags <= {T_LIST_STR, T_LIST_EMPTY}):
            elements = self._elements(val, length, self.c["l_str" if strs else "l_int"])
            offsets = pa.array(np.concatenate([[0], np.cumsum(length)]).astype(np.int32))
            items = self.arrow_text(elements) if strs else pa.array(elements, pa.int64())
            return pa.ListArray.from_arrays(offsets, items), A.STRS if strs else A.INTS
        rows = zip(tag.tolist(), val.tolist(), length.tolist(), real.tolist(), strict=True)
        return [self._python(*row) for row in rows], ""

    def _python(self, tag: int, val: int, length: int, real: float) -> Any:
        """One value as the Python path decodes it."""
        if tag == T_INT:
            return val
        if tag == T_FLOAT:
            return real
        if tag == T_STR:
            return self.strings[val]
        if tag == T_BOOL:
            return bool(val)
        if tag == T_LIST_INT:
            return self.c["l_int"][val : val + length].tolist()
        if tag == T_LIST_STR:
            return self.strings[self.c["l_str"][val : val + length]].tolist()
        return []

    @staticmethod
    def _elements(start: np.ndarray, length: np.ndarray, pool: np.ndarray) -> np.ndarray:
        total = int(length.sum())
        at = np.repeat(start, length) + np.arange(total)
        return pool[at - np.repeat(np.cumsum(length) - length, length)]
