"""Reader of Nsight Systems SQLite exports (``nsys export --type sqlite``).

Export schemas differ between versions (docs/trace.md lists the differences), so nothing here
assumes a column position or an event-type number: columns are looked up by name, event types
through ``ENUM_NSYS_EVENT_TYPE`` when the export has it (else the long-stable ids), range names
come from ``text`` or, failing that, ``textId`` → ``StringIds``.

What becomes what:
- NVTX push/pop and start/end ranges → spans on the thread that opened them (an unclosed
  range gets end = -1); marks → zero-length spans. Domain and category names, and the payload,
  become the ``nvtx.domain``, ``nvtx.category`` and ``nvtx.payload`` attributes. The probe puts
  the span id in the int64 payload, which is how :mod:`fdprof.trace.join` matches native spans.
- CUDA kernels, memcpys and memsets → spans on device lanes
  ``<pid>/cuda:<device>/stream:<stream>`` (the process from ``globalPid``);
  CUDA runtime and OS runtime calls → spans on their thread (attribute ``nsys.api``); each
  runtime call that launched device work releases ``cuda:launch/<pid>`` (sequence: the
  correlation id, which is per process) and the device work acquires it, so launch order is a
  happens-before edge.
- NVTX ranges projected onto the device work launched inside them (spans on the device lanes,
  children of their range), and the host's stream and device synchronisations as edges:
  :mod:`fdprof.trace.nsys_projection`.
- Times are nanoseconds from the session start; ``TARGET_INFO_SESSION_START_TIME`` anchors them
  to the epoch (otherwise processes are marked unanchored and a warning says so).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from fdprof import errors
from fdprof import semconv as S
from fdprof.errors import FdprofError
from fdprof.trace import limits
from fdprof.trace.assemble import assemble, on_epoch
from fdprof.trace.attrs import AttrsBuilder
from fdprof.trace.model import SYNC_COLUMNS, Trace, numpy_dtype
from fdprof.trace.nsys_projection import host_waits, project

SQLITE_MAGIC = b"SQLite format 3\x00"
#: event types by ENUM_NSYS_EVENT_TYPE name, with the ids used when the export lacks the enum
EVENT_TYPES = {
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxMark": 34,
    "NvtxDomainCreate": 75,
    "NvtxCategory": 33,
}
DEVICE_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "kernel",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "memcpy",
    "CUPTI_ACTIVITY_KIND_MEMSET": "memset",
}
LAUNCH = "cuda:launch"
#: ``copyKind`` names, as ``ENUM_CUDA_MEMCPY_OPER`` has them (schema 3.x)
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH",
                13: "UVM DtoD"}  # fmt: skip


def _copy_kind(enum_name: str) -> str:
    """``CUDA_MEMCPY_KIND_HTOD`` -> ``HtoD`` (the Kineto spelling), ``..._UVM_DTOH`` -> ``UVM
    DtoH``."""
    kind = enum_name.removeprefix("CUDA_MEMCPY_KIND_")
    parts = kind.split("_")
    last = parts[-1]
    if len(last) == 4 and last[1:3] == "TO":
        parts[-1] = f"{last[0]}to{last[3]}"
    return " ".join(p if p == "UVM" or "to" in p else p.title() for p in parts)


PAYLOAD = "nvtx.payload"


def sniff(path: Path, head: bytes) -> bool:
    return head.startswith(SQLITE_MAGIC)


def global_tid(values: pd.Series, what: str = "globalTid") -> tuple[np.ndarray, np.ndarray]:
    """``(pid, tid)`` of Nsight's ``globalTid`` / ``globalPid`` values (NULL: 0)."""
    g = ints(values, what, null=0, least=0)
    return (g >> 24) & 0xFFFFFF, g & 0xFFFFFF


def ints(
    values: pd.Series, what: str, null: int | None = None, least: int | None = None
) -> np.ndarray:
    """A column as int64. SQLite keeps any type in any column: a NULL is ``null`` where one is
    given, else bad input, as is a value that is not an integer (text, a real, a blob) or,
    with ``least``, one below it (an id, a device or a stream number below 0)."""
    if pd.api.types.is_integer_dtype(values.dtype):
        missing = values.isna()
        if null is None and missing.any():
            raise FdprofError(f"{what}: {int(missing.sum()):,} NULL value(s) where an integer "
                              "is required")  # fmt: skip
        out = values.to_numpy(np.int64, na_value=null if null is not None else 0)
    else:
        for value in values.tolist():
            if value is None or value is pd.NA or (type(value) is float and value != value):
                if null is None:
                    raise FdprofError(f"{what}: a NULL value where an integer is required")
            elif type(value) is not int:
                raise FdprofError(f"{what}: {errors.short(value)} is not an integer")
        out = values.astype(object).where(values.notna(), null).to_numpy(np.int64)
    if least is not None:
        below = out[(out < least) & ~values.isna().to_numpy(bool)]
        if len(below):
            raise FdprofError(f"{what}: {int(below[0])} is out of range (at least {least})")
    return out


def optional_ints(values: pd.Series, what: str) -> pd.Series:
    """A column of integers where NULL means none (an id not given): as it was, once checked."""
    ints(values, what, null=0)
    return values


def texts(values: pd.Series, what: str, null: str | None) -> np.ndarray:
    """A column of names as an object array of strings (NULL: ``null``, None allowed)."""
    out = values.astype(object).where(values.notna(), null).to_numpy(object)
    for value in out:
        if type(value) is not str and not (value is None and null is None):
            raise FdprofError(f"{what}: {errors.short(value)} is not text")
    return out


def _pairs(export: _Export, sql: str, what: str) -> list[tuple[int, str]]:
    """Rows of (integer id, text) from a lookup table (string ids, an enum): an id that is
    not an integer or a name that is not text is bad input, not a lookup that finds
    nothing."""
    rows = export.db.execute(sql).fetchall()
    for key, value in rows:
        if type(key) is not int:
            raise FdprofError(f"{export.path}: {what}: the id {errors.short(key)} is not an "
                              "integer")  # fmt: skip
        if type(value) is not str:
            raise FdprofError(f"{export.path}: {what}: {errors.short(value)} (id {key}) is not "
                              "text")  # fmt: skip
    return rows


class _Export:
    """An open export: its tables and columns, queried by name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            names = self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")
            self.tables = {row[0] for row in names}
        except sqlite3.DatabaseError as exc:
            raise FdprofError(f"{path}: not a readable SQLite database ({exc})") from None

    def columns(self, table: str) -> set[str]:
        return {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}

    def query(self, sql: str) -> pd.DataFrame:
        try:
            # nullable dtypes: an int column with NULLs must not become float (span ids in
            # payloads need all 64 bits)
            return pd.read_sql_query(sql, self.db, dtype_backend="numpy_nullable")
        except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
            raise FdprofError(f"{self.path}: unexpected export schema ({exc})") from None

    def strings(self) -> dict[int, str]:
        if "StringIds" not in self.tables:
            return {}
        return dict(_pairs(self, "SELECT id, value FROM StringIds", "StringIds"))

    def event_types(self) -> dict[str, int]:
        types = dict(EVENT_TYPES)
        if "ENUM_NSYS_EVENT_TYPE" in self.tables:
            rows = _pairs(self, "SELECT id, name FROM ENUM_NSYS_EVENT_TYPE", "ENUM_NSYS_EVENT_TYPE")
            known = {name: i for i, name in rows}
            types.update({k: known[k] for k in EVENT_TYPES if k in known})
        return types

    def memcpy_kinds(self) -> dict[int, str]:
        """``copyKind`` -> ``HtoD``, ``DtoH``, ``DtoD``, ... (the enum's names without their
        ``CUDA_MEMCPY_KIND_`` prefix; the long-stable ids when the export lacks the enum)."""
        kinds = dict(MEMCPY_KINDS)
        if "ENUM_CUDA_MEMCPY_OPER" in self.tables:
            sql = "SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER"
            kinds.update({i: _copy_kind(n) for i, n in _pairs(self, sql, "ENUM_CUDA_MEMCPY_OPER")})
        return kinds

    def meta(self) -> dict[str, str]:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if table in self.tables:
                rows = self.db.execute(f"SELECT name, value FROM {table}").fetchall()
                return {k: v for k, v in rows if type(k) is str and type(v) is str}
        return {}

    def epoch_offset(self) -> int | None:
        table = "TARGET_INFO_SESSION_START_TIME"
        if table in self.tables and "utcEpochNs" in self.columns(table):
            row = self.db.execute(f"SELECT utcEpochNs FROM {table}").fetchone()
            if not row or row[0] is None:
                return None
            if type(row[0]) is not int:
                shown = errors.short(row[0])
                raise FdprofError(f"{self.path}: {table}.utcEpochNs {shown} is not an integer")
            return row[0]
        return None


class _Rows:
    """Columns collected from each source table, assembled once."""

    def __init__(self) -> None:
        self.spans: list[dict[str, np.ndarray]] = []
        self.attrs = AttrsBuilder()
        self.syncs: list[dict[str, np.ndarray]] = []
        self.next_id = 1

    def add_spans(self, cols: dict[str, np.ndarray]) -> np.ndarray:
        n = len(cols["start"])
        ids = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
        self.next_id += n
        self.spans.append(cols | {"span_id": ids})
        return ids

    def add_attr(self, ids: np.ndarray, key: str, values: pd.Series) -> None:
        keep = values.notna().to_numpy()
        self.attrs.add_values(key, ids[keep], values[keep].tolist())


def read(path: Path) -> Trace:
    export = _Export(path)
    if "NVTX_EVENTS" not in export.tables and not (set(DEVICE_TABLES) & export.tables):
        raise FdprofError(
            f"{path}: an SQLite file, but not an Nsight Systems export (no NVTX_EVENTS or CUPTI "
            "tables)"
        )
    trace = Trace(meta={"format": "nsys", "path": str(path)})
    meta = export.meta()
    trace.meta["nsys"] = {
        k: meta[k] for k in ("EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION") if k in meta
    }
    offset = export.epoch_offset()  # None: unanchored, and a warning from assemble says so
    strings = export.strings()
    rows = _Rows()
    ranges = _nvtx(export, strings, rows) if "NVTX_EVENTS" in export.tables else None
    launched = _device(export, strings, rows)
    calls = _api_calls(export, strings, rows)
    if launched is not None and calls is not None:
        _launches(calls, launched, rows)
        if ranges is not None:
            _projections(project(ranges, calls, launched), ranges, rows)
        _host_waits(export, calls, launched, rows, trace)
    procs = _processes(export, rows)
    _assemble(trace, rows, procs, offset or 0, offset is not None)
    trace.meta["thread_names"] = _thread_names(export, strings)
    return trace


def _name_sql(export: _Export, table: str, alias: str = "e") -> str:
    cols = export.columns(table)
    text = f"{alias}.text" if "text" in cols else "NULL"
    if "textId" in cols and "StringIds" in export.tables:
        return f"COALESCE({text}, (SELECT value FROM StringIds s WHERE s.id = {alias}.textId))"
    return text


def _nvtx(export: _Export, strings: dict[int, str], rows: _Rows) -> pd.DataFrame:
    """NVTX events as spans; returns the ranges (``range_id, pid, tid, start, end, name``)."""
    cols = export.columns("NVTX_EVENTS")
    missing = {"start", "eventType", "globalTid"} - cols
    if missing:
        raise FdprofError(f"{export.path}: NVTX_EVENTS lacks {', '.join(sorted(missing))}")
    types = export.event_types()

    def col(name: str) -> str:
        return f"e.{name}" if name in cols else "NULL"

    df = export.query(
        f"SELECT e.start, {col('end')} AS end_, e.eventType, e.globalTid, {col('domainId')} AS "
        f"domainId, {col('category')} AS category, {col('int64Value')} AS i64, "
        f"{col('uint64Value')} AS u64, {_name_sql(export, 'NVTX_EVENTS')} AS name "
        "FROM NVTX_EVENTS e"
    )
    where = f"{export.path}: NVTX_EVENTS"
    kind = pd.Series(ints(df["eventType"], f"{where}.eventType", least=0), index=df.index)
    for column in ("domainId", "category", "i64", "u64"):
        optional_ints(df[column], f"{where}.{column}")
    texts(df["name"], f"{where}.text", None)
    domains = df[kind == types["NvtxDomainCreate"]]
    domain_of = dict(zip(domains["domainId"].tolist(), domains["name"].tolist(), strict=True))
    categories = df[kind == types["NvtxCategory"]]
    category_of = dict(
        zip(categories["category"].tolist(), categories["name"].tolist(), strict=True)
    )
    ranges = df[kind.isin([types["NvtxPushPopRange"], types["NvtxStartEndRange"]])]
    marks = df[kind == types["NvtxMark"]]
    out = pd.DataFrame({"range_id": [], "pid": [], "tid": [], "start": [], "end": [], "name": []})
    for part, is_mark in ((ranges, False), (marks, True)):
        if not len(part):
            continue
        pid, tid = global_tid(part["globalTid"], f"{where}.globalTid")
        start = ints(part["start"], f"{where}.start")
        end = start if is_mark else ints(part["end_"], f"{where}.end", null=-1)
        names = texts(part["name"], f"{where}.text", "")
        ids = rows.add_spans(
            {
                "name": names,
                "start": start,
                "end": end,
                "pid": pid,
                "tid": tid,
                "lane": np.full(len(part), None, dtype=object),
            }
        )
        payload = part["i64"].where(part["i64"].notna(), part["u64"])
        rows.add_attr(ids, PAYLOAD, payload)
        domains = part["domainId"].astype(object).where(part["domainId"].notna(), None)
        rows.add_attr(ids, "nvtx.domain", pd.Series([domain_of.get(d) for d in domains]))
        cats = part["category"].astype(object).where(part["category"].notna(), None)
        named = [category_of.get(c, c) if c else None for c in cats]
        rows.add_attr(ids, "nvtx.category", pd.Series(named, dtype=object))
        if not is_mark:
            out = pd.DataFrame(
                {
                    "range_id": ids,
                    "pid": pid,
                    "tid": tid,
                    "start": start,
                    "end": end,
                    "name": names,
                }
            )
    return out


def _device(export: _Export, strings: dict[int, str], rows: _Rows) -> pd.DataFrame | None:
    """Device work as spans; returns (correlation id, device span) for the launch edges."""
    parts = []
    for table, what in DEVICE_TABLES.items():
        if table not in export.tables:
            continue
        cols = export.columns(table)
        needed = {"start", "end", "deviceId", "streamId", "globalPid"}
        if needed - cols:
            continue
        name_cols = [c for c in ("shortName", "demangledName") if c in cols]
        extra = [c for c in ("correlationId", "bytes", "copyKind") if c in cols]
        select = ", ".join(sorted(needed) + extra + name_cols)
        df = export.query(f"SELECT {select} FROM {table}")
        if not len(df):
            continue
        where = f"{export.path}: {table}"
        for c in extra + name_cols:
            optional_ints(df[c], f"{where}.{c}")
        demangled = df["demangledName"].map(strings.get) if "demangledName" in df else None
        if what == "kernel":
            short = df["shortName"].map(strings.get) if "shortName" in df else demangled
            names = _kernel_names(short if short is not None else pd.Series([None] * len(df)),
                                  demangled)  # fmt: skip
        elif what == "memcpy" and "copyKind" in df:
            kinds = {k: f"Memcpy {v}" for k, v in export.memcpy_kinds().items()}
            names = df["copyKind"].map(lambda k, named=kinds: named.get(k, f"Memcpy kind {k}"))
        else:
            names = pd.Series(["Memset" if what == "memset" else what] * len(df))
        pid, _ = global_tid(df["globalPid"], f"{where}.globalPid")
        device = ints(df["deviceId"], f"{where}.deviceId", least=0)
        stream = ints(df["streamId"], f"{where}.streamId", least=0)
        start, end = ints(df["start"], f"{where}.start"), ints(df["end"], f"{where}.end")
        lanes = _device_lanes(pid, device, stream)
        ids = rows.add_spans(
            {
                "name": texts(names, f"{where} name", what),
                "start": start,
                "end": end,
                "pid": pid,
                "tid": stream,
                "lane": lanes,
            }
        )
        rows.add_attr(ids, S.CUDA_KIND, pd.Series([what] * len(df)))
        if what == "kernel" and demangled is not None:
            rows.add_attr(ids, S.CUDA_DEMANGLED_NAME, demangled)
        for c in extra:
            rows.add_attr(ids, S.CUDA_PREFIX + c, df[c])
        if "correlationId" in df:
            parts.append(
                pd.DataFrame(
                    {
                        "correlationId": ints(
                            df["correlationId"], f"{where}.correlationId", least=0
                        ),
                        "span_id": ids,
                        "time": start,
                        "start": start,
                        "end": end,
                        "pid": pid,
                        "tid": stream,
                        "device": device,
                        "stream": stream,
                        "lane": lanes,
                    }
                )
            )
    return pd.concat(parts, ignore_index=True) if parts else None


def _kernel_names(short: pd.Series, demangled: pd.Series | None = None) -> pd.Series:
    """Kernels by their short name, unless kernels of the export that differ share one (three
    ``vectorized_elementwise_kernel`` instances in the Fuser export): those get as much of
    their demangled name's template arguments as tells them apart
    (``vectorized_elementwise_kernel<(int)8, at::native::bfloat16_copy…>``), so they stay
    apart in tables and diffs; the whole demangled name is the ``cuda.demangled_name``
    attribute."""
    names = short.fillna("kernel").astype(str)
    if demangled is None:
        return names
    full = demangled.fillna(names).astype(str)
    out = names.copy()
    for name, variants in full.groupby(names):
        distinct = pd.unique(variants)
        if len(distinct) > 1:
            out[variants.index] = variants.map(_distinguishing(str(name), list(distinct)))
    return out


def _distinguishing(short: str, variants: list[str]) -> dict[str, str]:
    """Each demangled variant as ``short`` plus the shortest head of what follows it (at
    least 24 characters) that no other variant shares."""
    tails = {v: v[v.find(short) + len(short) :] if short in v else v for v in variants}
    for width in range(24, max(map(len, tails.values())) + 1, 8):
        heads = {v: t[:width] for v, t in tails.items()}
        if len(set(heads.values())) == len(variants):
            return {v: short + h + ("…" if len(h) < len(tails[v]) else "")
                    for v, h in heads.items()}  # fmt: skip
    return {v: short + t for v, t in tails.items()}


def _device_lanes(pid: np.ndarray, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Each row's device lane, scoped by its process: Nsight's stream ids are per context
    (each process has its own on each device), so two processes' stream 7 are two lanes."""
    keys, inverse = np.unique(np.column_stack([pid, device, stream]), axis=0, return_inverse=True)
    names = [S.device_lane(p, S.DEVICE_CUDA, d, s) for p, d, s in keys.tolist()]
    return np.array(names, dtype=object)[inverse.ravel()]


#: host API tables kept as spans on their threads (on tracks of their own in Perfetto):
#: table -> the ``nsys.api`` attribute value
API_TABLES = {"CUPTI_ACTIVITY_KIND_RUNTIME": "CUDA API", "OSRT_API": "OS runtime"}


def _api_calls(export: _Export, strings: dict[int, str], rows: _Rows) -> pd.DataFrame | None:
    """CUDA runtime and OS runtime calls as spans on the calling thread (named as Nsight shows
    them: ``cudaLaunchKernel``, not ``cudaLaunchKernel_v7000``); returns every CUDA runtime
    and driver API call: ``pid, tid, start, end, correlationId, name, span_id``."""
    launches = None
    for table, api in API_TABLES.items():
        cols = export.columns(table) if table in export.tables else set()
        if {"start", "globalTid"} - cols or (api == "CUDA API" and "correlationId" not in cols):
            continue
        extra = "".join(f", {c}" for c in ("end", "nameId", "correlationId") if c in cols)
        df = export.query(f"SELECT start, globalTid{extra} FROM {table}")
        if not len(df):
            continue
        where = f"{export.path}: {table}"
        pid, tid = global_tid(df["globalTid"], f"{where}.globalTid")
        start = ints(df["start"], f"{where}.start")
        end = ints(df["end"], f"{where}.end", null=-1) if "end" in df else start
        if "nameId" in df:
            optional_ints(df["nameId"], f"{where}.nameId")
        names = df["nameId"].map(strings) if "nameId" in df else pd.Series([""] * len(df))
        names = names.fillna("").astype(str)
        shown = names.str.replace(r"_v\d+$", "", regex=True).where(names != "", api)
        ids = rows.add_spans({"name": shown.to_numpy(object), "start": start, "end": end,
                              "pid": pid, "tid": tid,
                              "lane": np.full(len(df), None, dtype=object)})  # fmt: skip
        rows.add_attr(ids, "nsys.api", pd.Series([api] * len(df)))
        if api == "CUDA API":
            correlation = ints(df["correlationId"], f"{where}.correlationId", null=-1)
            rows.add_attr(ids, S.CUDA_CORRELATION_ID, pd.Series(correlation))
            launches = pd.DataFrame({
                "pid": pid, "tid": tid, "start": start, "end": end, "correlationId": correlation,
                "name": names.to_numpy(object), "span_id": ids,
            })  # fmt: skip
    return launches


def _launches(calls: pd.DataFrame, launched: pd.DataFrame, rows: _Rows) -> None:
    """``cuda:launch/<pid>`` edges from each runtime call (its span) to the device work it
    launched. Correlation ids are per process, so the object is too: two processes' call 5
    are two edges."""
    calls = calls[["pid", "tid", "correlationId", "start", "span_id"]].rename(
        columns={"start": "time"})  # fmt: skip
    keys = ["pid", "correlationId"]
    calls = calls.merge(launched[keys].drop_duplicates(), on=keys)
    got = launched.merge(calls[keys].drop_duplicates(), on=keys)
    ends = ((calls, S.SyncOp.RELEASE, None), (got, S.SyncOp.ACQUIRE, "lane"))
    for part, op, lane in ends:
        rows.syncs.append(
            {
                "op": np.full(len(part), op, dtype=object),
                "obj": launch_objects(part["pid"].to_numpy(np.int64)),
                "seq": part["correlationId"].to_numpy(np.int64),
                "keyed": np.ones(len(part), dtype=bool),
                "time": part["time"].to_numpy(np.int64),
                "pid": part["pid"].to_numpy(np.int64),
                "tid": part["tid"].to_numpy(np.int64),
                "lane": part[lane].to_numpy(object) if lane else np.full(len(part), None, object),
                "span_id": part["span_id"].to_numpy(np.int64),
            }
        )


def launch_objects(pids: np.ndarray) -> np.ndarray:
    """The launch-edge object of each row's process, ``cuda:launch/<pid>``."""
    uniques, inverse = np.unique(pids, return_inverse=True)
    return np.array([f"{LAUNCH}/{p}" for p in uniques.tolist()], dtype=object)[inverse.ravel()]


def _projections(proj: pd.DataFrame, ranges: pd.DataFrame, rows: _Rows) -> None:
    """Each (range, lane) projection as a span on the lane, child of its range."""
    if not len(proj):
        return
    of = ranges.set_index("range_id").loc[proj["range_id"].to_numpy(np.int64)]
    lanes = proj["lane"].to_numpy(object)
    ids = rows.add_spans(
        {
            "name": of["name"].to_numpy(object),
            "start": proj["start"].to_numpy(np.int64),
            "end": proj["end"].to_numpy(np.int64),
            "pid": of["pid"].to_numpy(np.int64),
            "tid": proj["stream"].to_numpy(np.int64),
            "lane": lanes,
            "parent_id": proj["range_id"].to_numpy(np.int64),
        }
    )
    rows.add_attr(ids, S.NVTX_GPU_OPS, proj["ops"].astype("int64"))


def _host_waits(
    export: _Export, calls: pd.DataFrame, launched: pd.DataFrame, rows: _Rows, trace: Trace
) -> None:
    table = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    needed = {"correlationId", "deviceId", "streamId", "globalPid"}
    if table in export.tables and not needed - export.columns(table):
        waits = export.query(f"SELECT correlationId, deviceId, streamId, globalPid FROM {table}")
        where = f"{export.path}: {table}"
        for c in ("correlationId", "deviceId", "streamId"):
            optional_ints(waits[c], f"{where}.{c}")
        waits["pid"] = global_tid(waits["globalPid"], f"{where}.globalPid")[0]
    else:
        waits = pd.DataFrame({c: [] for c in ("pid", "correlationId", "deviceId", "streamId")})
    syncs, unplaced = host_waits(waits, calls, launched)
    rows.syncs.append(syncs)
    if unplaced:
        trace.warn(
            f"{unplaced} CUDA event synchronisation(s) (event synchronize, stream wait on an "
            "event) are not edges: the export does not say where their events were recorded",
            "unplaced_event_sync",
            unplaced,
        )


def _processes(export: _Export, rows: _Rows) -> dict[int, str]:
    names: dict[int, str] = {}
    if "PROCESSES" in export.tables and {"pid", "name"} <= export.columns("PROCESSES"):
        sql = "SELECT pid, COALESCE(name, CAST(pid AS TEXT)) FROM PROCESSES"
        names = dict(_pairs(export, sql, "PROCESSES"))
    seen: set[int] = set()
    for part in rows.spans:
        seen.update(part["pid"].tolist())
    for part in rows.syncs:
        seen.update(part["pid"].tolist())
    limits.check(len(seen), "processes", f"{export.path}: processes in the export")
    return {pid: str(names.get(pid, pid)) for pid in sorted(seen)}


def _thread_names(export: _Export, strings: dict[int, str]) -> dict[str, str]:
    if "ThreadNames" not in export.tables:
        return {}
    df = export.query("SELECT nameId, globalTid FROM ThreadNames")
    ints(df["nameId"], f"{export.path}: ThreadNames.nameId")
    pid, tid = global_tid(df["globalTid"], f"{export.path}: ThreadNames.globalTid")
    return {
        f"{p}/{t}": strings.get(n, str(n))
        for p, t, n in zip(pid.tolist(), tid.tolist(), df["nameId"].tolist(), strict=True)
    }


def _assemble(trace: Trace, rows: _Rows, procs: dict[int, str], offset: int, anchored: bool):
    def cat(parts: list[dict], key: str, dtype) -> np.ndarray:
        return np.concatenate([p[key] for p in parts]) if parts else np.zeros(0, dtype=dtype)

    where = trace.meta["path"]
    start = on_epoch(cat(rows.spans, "start", np.int64), offset, where)
    end = on_epoch(cat(rows.spans, "end", np.int64), offset, where, unset=True)
    pids = cat(rows.spans, "pid", np.int64)
    for part in rows.spans:
        part.setdefault("parent_id", np.zeros(len(part["start"]), dtype=np.int64))
    spans = {
        "span_id": cat(rows.spans, "span_id", np.int64),
        "parent_id": cat(rows.spans, "parent_id", np.int64),
        "name": cat(rows.spans, "name", object),
        "start": start,
        "end": end,
        "pid": pids,
        "tid": cat(rows.spans, "tid", np.int64),
        "lane": cat(rows.spans, "lane", object),
        "role": np.full(len(start), "", dtype=object),
        "trace_id": np.full(len(start), None, dtype=object),
    }
    syncs = {k: cat(rows.syncs, k, numpy_dtype("syncs", k)) for k in SYNC_COLUMNS}
    syncs["time"] = on_epoch(syncs["time"], offset, where)
    processes = {
        "pid": list(procs),
        "role": [""] * len(procs),
        "name": list(procs.values()),
        "anchored": [anchored] * len(procs),
        "dp_rank": [-1] * len(procs),
        "tp_rank": [-1] * len(procs),
    }
    assemble(trace, spans, rows.attrs.build(), syncs, processes)
    unended = int((end == -1).sum())
    if unended:
        trace.warn(f"{unended} range(s) never ended (end = -1)", "unended_span", unended)
