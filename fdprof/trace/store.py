"""The columnar trace store: the model's tables as Parquet files in one directory.

Why: a trace of hours (10^8 KV-block accesses per host-hour) does not fit one process, and
the analyses that run on Dask (:mod:`fdprof.analysis.distributed`) need their inputs cut into
pieces that a worker can read alone. Layout (docs/trace.md "The columnar store"):

``store.json``
    format ``fdprof-parquet/1``, the attribute keys and their kinds, the trace's metadata
    (JSON; tables among it as Parquet files under ``meta/``) and what each table holds.
``processes.parquet``
    one row per process.
``spans/``, ``syncs/``
    time windows: ``part-<window>[-<n>][-<writer>].parquet``, one file per window (and per
    :data:`PART_ROWS` rows) and writer; rows in the order the reader gave them (a converted
    trace is one window, its parts consecutive rows; a rolled run one window per roll), so
    ties between events of one instant read back in their order.
``accesses/bucket=<b>/``
    the ``accesses`` rows of blocks ``block % buckets == b``, each with its span's ``start``,
    ``end``, ``lane`` and ``pid`` beside it (``span_*``): a per-(pool, block) analysis reads
    one bucket and needs no join.
``attrs/k<i>/``
    attribute ``i`` (``store.json`` names it): ``span_id`` and ``value`` in its kind's type.

Parts are written under a temporary name and renamed, so a reader never sees half a file;
a writer that rolls a live run into the store (:mod:`fdprof.trace.roll`) adds parts and
rewrites ``store.json`` as it goes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fdprof.errors import FdprofError, short
from fdprof.trace import attrs as A
from fdprof.trace import pyspy
from fdprof.trace.attrs import Attrs, Column
from fdprof.trace.model import SCHEMAS, TEXT, Trace, frame

FORMAT = "fdprof-parquet/1"
MANIFEST = "store.json"
#: rows per part file of spans and syncs, and most rows an access bucket aims at
PART_ROWS = 1 << 20
#: the access columns denormalised from their span (``span_`` + the span column)
SPAN_COPY = ("start", "end", "lane", "pid")
#: buckets of a converted trace: enough for a worker each, none below this many accesses
BUCKET_ROWS = 1 << 21
MAX_BUCKETS = 256

_ARROW = {"int64": pa.int64(), "string": TEXT, "bool": pa.bool_()}
_PART = re.compile(r"^part-[0-9a-z_-]+\.parquet$")


def arrow_schema(table: str, extra: dict[str, pa.DataType] | None = None) -> pa.Schema:
    """The Parquet schema of a model table (plus ``extra`` columns)."""
    fields = [pa.field(c, _ARROW[t]) for c, t in SCHEMAS[table].items()]
    return pa.schema(fields + [pa.field(c, t) for c, t in (extra or {}).items()])


ACCESS_EXTRA = {
    "span_start": pa.int64(),
    "span_end": pa.int64(),
    "span_lane": TEXT,
    "span_pid": pa.int64(),
}


def sniff(path: Path, head: bytes) -> bool:
    return path.is_dir() and (path / MANIFEST).is_file()


def is_store(path: str | Path) -> bool:
    return sniff(Path(path), b"")


# -- writing --


def write(trace: Trace, path: Path, buckets: int | None = None, part_rows: int = PART_ROWS) -> None:
    """``trace`` as a new store at ``path`` (a directory that must not hold anything); spans
    and syncs in parts of ``part_rows``."""
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FdprofError(f"{path}: exists and is not an empty directory")
    created = not path.exists()
    try:
        writer = StoreWriter(path, buckets or buckets_for(len(trace.accesses)), part_rows=part_rows)
        writer.add_tables(trace.spans, trace.syncs, trace.accesses, window="0")
        writer.add_attrs(trace.attrs, window="0")
        writer.finish(trace.processes, trace.meta, trace.attrs.too_wide)
    except BaseException:
        _remove_tree(path, created)
        raise


def buckets_for(accesses: int) -> int:
    """Access buckets of a converted trace: a power of two, about :data:`BUCKET_ROWS` each."""
    want = max(1, -(-accesses // BUCKET_ROWS))
    return min(MAX_BUCKETS, 1 << (want - 1).bit_length())


class StoreWriter:
    """Adds parts to a store; :meth:`finish` writes ``processes`` and ``store.json``. Used
    whole by :func:`write` and window by window by the roller (:mod:`fdprof.trace.roll`)."""

    def __init__(self, path: Path, buckets: int, name: str = "", part_rows: int = PART_ROWS):
        self.path = Path(path)
        self.part_rows = part_rows
        self.path.mkdir(parents=True, exist_ok=True)
        self.buckets = int(buckets)
        #: told apart from other writers of one store (one per host or process)
        self.name = name
        self.kinds: dict[str, str] = {}
        self._keys: dict[str, int] = {}
        self._load_keys()

    def _load_keys(self) -> None:
        manifest = self.path / MANIFEST
        if manifest.is_file():
            doc = json.loads(manifest.read_text())
            self.kinds = dict(doc.get("attrs", {}))
            self._keys = {k: i for i, k in enumerate(self.kinds)}

    def _part(self, folder: str, window: str) -> Path:
        directory = self.path / folder
        directory.mkdir(parents=True, exist_ok=True)
        suffix = f"-{self.name}" if self.name else ""
        return directory / f"part-{window}{suffix}.parquet"

    def put(self, table: pa.Table, folder: str, window: str) -> None:
        """One part file of ``folder`` (a table's, or ``accesses/bucket=<b>``) for ``window``."""
        if not table.num_rows:
            return
        target = self._part(folder, window)
        tmp = target.with_name(f".{target.name}.tmp")
        pq.write_table(table, tmp, row_group_size=PART_ROWS // 4)
        os.replace(tmp, target)

    def add_tables(
        self, spans: pd.DataFrame, syncs: pd.DataFrame, accesses: pd.DataFrame, window: str
    ) -> None:
        """One window's rows; an access's span is among this window's ``spans``."""
        for name, df in (("spans", spans), ("syncs", syncs)):
            for i, lo in enumerate(range(0, len(df), self.part_rows)):
                part = _to_arrow(name, df.iloc[lo : lo + self.part_rows])
                self.put(part, name, f"{window}-{i:04d}" if len(df) > self.part_rows else window)
        self.add_accesses(accesses, spans, window)

    def add_accesses(self, accesses: pd.DataFrame, spans: pd.DataFrame, window: str) -> None:
        if accesses.empty:
            return
        at = pd.Index(spans["span_id"].to_numpy(np.int64)).get_indexer(
            accesses["span_id"].to_numpy(np.int64)
        )
        found = at >= 0
        take = np.maximum(at, 0)
        extra = {
            "span_start": np.where(found, spans["start"].to_numpy(np.int64)[take], -1),
            "span_end": np.where(found, spans["end"].to_numpy(np.int64)[take], -1),
            "span_lane": pa.array(spans["lane"].array, TEXT).take(
                pa.array(take, mask=~found) if len(take) else pa.array([], pa.int64())
            ),
            "span_pid": np.where(found, spans["pid"].to_numpy(np.int64)[take], -1),
        }
        bucket = accesses["block"].to_numpy(np.int64) % self.buckets
        table = _to_arrow("accesses", accesses, extra)
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(self.buckets + 1))
        for b in range(self.buckets):
            rows = order[bounds[b] : bounds[b + 1]]
            if len(rows):
                self.put(table.take(pa.array(rows)), f"accesses/bucket={b}", window)

    def add_attrs(self, attrs: Attrs, window: str) -> None:
        for key, column in attrs.items():
            known = self.kinds.get(key)
            if known is not None and known != column.kind:
                column = column.as_json()  # a key whose parts differ in kind: JSON, as _join
                if known != A.JSON:
                    self._to_json(key)
            self.kinds.setdefault(key, column.kind)
            index = self._keys.setdefault(key, len(self._keys))
            table = pa.table({
                "span_id": pa.array(column.span_id, pa.int64()),
                "value": column.values.combine_chunks() if len(column) else
                pa.array([], A.ARROW_TYPES[column.kind]),
            })  # fmt: skip
            self.put(table, f"attrs/k{index}", window)

    def _to_json(self, key: str) -> None:
        """Rewrite the parts of ``key`` written so far as JSON text (a later window gave it
        values of another kind)."""
        folder = self.path / "attrs" / f"k{self._keys[key]}"
        for part in sorted(folder.glob("part-*.parquet")):
            t = pq.read_table(part)
            column = Column(self.kinds[key], t["span_id"].to_numpy(), t["value"]).as_json()
            out = pa.table({"span_id": t["span_id"], "value": column.values.combine_chunks()})
            pq.write_table(out, part)
        self.kinds[key] = A.JSON

    def finish(self, processes: pd.DataFrame, meta: dict[str, Any], too_wide: int = 0) -> None:
        table = _to_arrow("processes", processes)
        tmp = self.path / ".processes.parquet.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.path / "processes.parquet")
        doc = {
            "format": FORMAT,
            "buckets": self.buckets,
            "attrs": self.kinds,
            "too_wide": int(too_wide),
            "meta": _encode_meta(meta, self.path),
        }
        write_manifest(self.path, doc)


def write_manifest(path: Path, doc: dict[str, Any]) -> None:
    """``store.json``, replaced whole (a reader sees the old one or the new one)."""
    tmp = Path(path) / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, Path(path) / MANIFEST)


def _to_arrow(table: str, df: pd.DataFrame, extra: dict[str, Any] | None = None) -> pa.Table:
    """``df``'s columns of ``table`` (and the ``extra`` ones) as Arrow, in the store's types."""
    schema = arrow_schema(table, ACCESS_EXTRA if extra else None)
    columns = []
    for f in schema:
        values = extra[f.name] if extra and f.name in extra else df[f.name]
        if isinstance(values, pd.Series):
            values = values.array if f.type == TEXT else values.to_numpy()
        columns.append(pa.array(values, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _remove_tree(path: Path, created: bool) -> None:
    """A failed write leaves nothing behind: its files, and the directory if it made it."""
    if not path.is_dir():
        return
    for root, dirs, names in os.walk(path, topdown=False):
        for n in names:
            Path(root, n).unlink(missing_ok=True)
        for d in dirs:
            Path(root, d).rmdir()
    if created:
        path.rmdir()


# -- metadata: JSON, with the tables and py-spy samples some readers keep as Parquet --


def _encode_meta(meta: dict[str, Any], root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if isinstance(value, pd.DataFrame):
            out[key] = {"$frame": _put_frame(value, root, key)}
        elif isinstance(value, pyspy.Samples):
            out[key] = {"$pyspy": {
                "slices": _put_frame(value.slices, root, f"{key}.slices"),
                "segments": _put_frame(value.segments, root, f"{key}.segments"),
                "frames": [list(f) for f in value.frames],
                "threads": [[p, t, n] for (p, t), n in value.threads.items()],
                "processes": [[p, v] for p, v in value.processes.items()],
            }}  # fmt: skip
        else:
            out[key] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    """JSON for a metadata value; a dict with non-string keys keeps their types."""
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _plain(v) for k, v in value.items()}
        return {"$items": [[k, _plain(v)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _put_frame(df: pd.DataFrame, root: Path, name: str) -> str:
    (root / "meta").mkdir(exist_ok=True)
    rel = f"meta/{name}.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), root / rel)
    return rel


def _decode_meta(value: Any, root: Path) -> Any:
    if isinstance(value, dict):
        if "$frame" in value:
            return _get_frame(root, value["$frame"])
        if "$pyspy" in value:
            p = value["$pyspy"]
            return pyspy.Samples(
                slices=_get_frame(root, p["slices"]),
                segments=_get_frame(root, p["segments"]),
                frames=[tuple(f) for f in p["frames"]],
                threads={(int(pid), int(tid)): n for pid, tid, n in p["threads"]},
                processes={int(pid): v for pid, v in p["processes"]},
            )
        if "$items" in value:
            return {_key(k): _decode_meta(v, root) for k, v in value["$items"]}
        return {k: _decode_meta(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_meta(v, root) for v in value]
    return value


def _key(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def _get_frame(root: Path, rel: Any) -> pd.DataFrame:
    if not isinstance(rel, str) or not re.fullmatch(r"meta/[^/]+\.parquet", rel):
        raise FdprofError(f"{root}: {MANIFEST} names a metadata table {short(rel)}")
    return _read_file(root / rel).to_pandas()


# -- reading --


def read(path: Path) -> Trace:
    """The trace a store holds, every table as the model has it."""
    doc = manifest(path)
    trace = Trace(meta={})
    tables = {}
    for table in ("spans", "syncs"):
        tables[table] = _frame(table, read_table(path, table))
    accesses = read_table(path, "accesses")
    tables["accesses"] = _frame("accesses", accesses.select(list(SCHEMAS["accesses"])))
    tables["processes"] = _frame("processes", _read_file(path / "processes.parquet"))
    attrs = {}
    for i, (key, kind) in enumerate(doc["attrs"].items()):
        t = _read_parts(path / "attrs" / f"k{i}", _attr_schema(kind))
        attrs[key] = Column(kind, t["span_id"].to_numpy(), t["value"])
    trace = Trace(**tables, attrs=Attrs(attrs, doc.get("too_wide", 0)))
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise FdprofError(f"{path}: {MANIFEST}: meta is {short(meta)}, not an object")
    trace.meta = _decode_meta(meta, path)
    trace.meta.setdefault("format", "parquet")
    trace.meta["store"] = str(path)
    return trace


def manifest(path: Path) -> dict[str, Any]:
    """``store.json``, checked: the format, the buckets, the attribute keys and kinds."""
    try:
        doc = json.loads((Path(path) / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FdprofError(f"{path}: {MANIFEST} cannot be read ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FdprofError(f"{path}: {MANIFEST} is not an {FORMAT} manifest")
    kinds = doc.get("attrs")
    buckets = doc.get("buckets")
    if not isinstance(kinds, dict) or any(k not in A.ARROW_TYPES for k in kinds.values()):
        raise FdprofError(f"{path}: {MANIFEST}: attrs should map keys to kinds")
    if type(buckets) is not int or not 1 <= buckets <= 1 << 20:
        raise FdprofError(f"{path}: {MANIFEST}: buckets is {short(buckets)}")
    return doc


def _attr_schema(kind: str) -> pa.Schema:
    return pa.schema([pa.field("span_id", pa.int64()), pa.field("value", A.ARROW_TYPES[kind])])


def table_schema(table: str) -> pa.Schema:
    return arrow_schema(table, ACCESS_EXTRA if table == "accesses" else None)


def part_files(path: Path, table: str) -> list[Path]:
    """The part files of ``table`` (for accesses: of every bucket), in order."""
    folder = Path(path) / table
    if not folder.is_dir():
        return []
    if table != "accesses":
        return _parts(folder)
    return [p for b in bucket_dirs(path) for p in _parts(b)]


def bucket_dirs(path: Path) -> list[Path]:
    folder = Path(path) / "accesses"
    if not folder.is_dir():
        return []
    found = []
    for d in folder.iterdir():
        m = re.fullmatch(r"bucket=(\d+)", d.name)
        if m and d.is_dir():
            found.append((int(m.group(1)), d))
    return [d for _, d in sorted(found)]


def _parts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if _PART.match(p.name) and p.is_file())


def read_table(path: Path, table: str, columns: Iterable[str] | None = None) -> pa.Table:
    """Every part of ``table`` as one Arrow table, parts in the order of their names."""
    schema = table_schema(table)
    files = part_files(path, table)
    parts = [_read_file(f, schema, columns) for f in files]
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts)


def first_time(path: Path) -> int:
    """The store's first time (ns), as :attr:`Trace.origin` gives it for a loaded trace, one
    column of one part at a time (what a report's times "into the run" count from when the
    analysis ran on the parts and the trace was never loaded whole)."""
    firsts = []
    for table, column in (("spans", "start"), ("syncs", "time")):
        schema = table_schema(table)
        for f in part_files(path, table):
            values = _read_file(f, schema, [column]).column(column)
            if len(values):
                firsts.append(int(pc.min(values).as_py()))
    return min(firsts, default=0)


def read_part(path: Path, schema: pa.Schema | None = None, columns=None) -> pa.Table:
    return _read_file(path, schema, columns)


def _read_parts(folder: Path, schema: pa.Schema) -> pa.Table:
    if not folder.is_dir():
        return schema.empty_table()
    parts = [_read_file(f, schema) for f in _parts(folder)]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _read_file(path: Path, schema: pa.Schema | None = None, columns=None) -> pa.Table:
    """One Parquet file; a file that is not one, or lacks a column of ``schema`` or holds it
    in another type, is bad input (one line)."""
    try:
        table = pq.read_table(path, columns=list(columns) if columns is not None else None)
    except (pa.ArrowException, OSError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise FdprofError(f"{path}: not a readable Parquet file ({first})") from None
    if schema is None:
        return table
    for f in schema:
        if columns is not None and f.name not in columns:
            continue
        if f.name not in table.column_names:
            raise FdprofError(f"{path}: no column {f.name!r}")
        got = table.schema.field(f.name).type
        if got != f.type:
            if f.type == TEXT and got in (pa.string(), pa.large_string()):
                table = table.set_column(
                    table.column_names.index(f.name), f.name, table[f.name].cast(TEXT)
                )
                continue
            raise FdprofError(f"{path}: column {f.name!r} is {got}, expected {f.type}")
    return table


def _frame(table: str, data: pa.Table) -> pd.DataFrame:
    cols = {}
    for c, dtype in SCHEMAS[table].items():
        column = data[c]
        if dtype == "string":
            cols[c] = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        else:
            if column.null_count:
                raise FdprofError(f"{table}.{c}: {column.null_count} missing value(s)")
            cols[c] = column.to_numpy()
    return frame(table, cols)
