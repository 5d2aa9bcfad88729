"""The detector's input, typed: the sync events it trusts and the KV-block accesses it checks.

Why: the core (vector clocks, the race search, lifetimes, WCP) runs on plain numpy columns, in
C where it is built, so its input is two frozen dataclasses of numpy arrays with one dtype per
column, built once from the trace model's frames. Names (lanes, objects, pools) become integer
codes into tuples beside the columns: nothing in the core compares strings per row.

Codes are global to a trace: lane codes index the lanes of
:class:`fdprof.analysis.clocks.LaneClocks`, so any subset of an :class:`AccessTable` (a
partition of its (pool, block) keys) can be searched against the same clocks and the results
concatenated.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.kernels import stable_order
from fdprof.errors import FdprofError
from fdprof.trace.assemble import distinct

#: access modes, in code order (``AccessTable.mode``): reads and writes, then the allocator's
#: events (the lifetime check's alloc and free, the ownership analysis's holds, releases, counts
#: reaching zero or below it: :mod:`fdprof.analysis.ownership`)
MODES = (S.MODE_READ, S.MODE_WRITE, *S.LIFETIME_MODES, *S.OWNERSHIP_MODES)
READ, WRITE, ALLOC, FREE, HOLD, RELEASE, UNREF, UNDERFLOW = range(len(MODES))
#: ``hi`` of an access to every layer (``-1/-1`` in the trace)
ALL_LAYERS = np.iinfo(np.int64).max

GAP_COLUMNS = ["kind", "lane", "obj", "seq", "time", "span_id", "detail"]


def gap(kind: str, lane: str, obj: str, seq: int, time: int, span_id: int, detail: str) -> dict:
    """One instrumentation gap (a row of ``HazardReport.gaps``)."""
    return {"kind": kind, "lane": lane, "obj": obj, "seq": seq, "time": time,
            "span_id": span_id, "detail": detail}  # fmt: skip


class _Columns:
    """Row selection shared by the tables: every numpy field taken, the rest kept."""

    def take(self, rows: np.ndarray | slice) -> Any:
        values = {}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            values[f.name] = v[rows] if isinstance(v, np.ndarray) else v
        return type(self)(**values)

    def __len__(self) -> int:
        return len(getattr(self, fields(self)[0].name))  # type: ignore[arg-type]


@dataclass(frozen=True)
class SyncTable(_Columns):
    """Sync events, one row each, in the trace's row order (pairing and cycle breaking refer
    to rows). ``obj`` codes index ``objects``; ``lane`` codes the lanes of the trace."""

    lane: np.ndarray  #: int64
    time: np.ndarray  #: int64 ns
    release: np.ndarray  #: bool: a release (else an acquire)
    obj: np.ndarray  #: int64 code into ``objects``
    seq: np.ndarray  #: int64 (read only where ``keyed``)
    keyed: np.ndarray  #: bool
    objects: tuple[str, ...] = ()


def sync_table(syncs: pd.DataFrame, lanes: pd.Index) -> SyncTable:
    """The typed form of a (scoped, trusted) ``syncs`` frame, lanes coded by ``lanes``."""
    n = len(syncs)
    obj_code, objects = pd.factorize(syncs["obj"].to_numpy(dtype=object, na_value=""))
    lane = lanes.get_indexer(syncs["lane"].astype(str)) if n else np.empty(0, np.int64)
    return SyncTable(
        lane=np.asarray(lane, dtype=np.int64),
        time=syncs["time"].to_numpy(np.int64),
        release=(syncs["op"] == S.SyncOp.RELEASE).to_numpy(bool),
        obj=obj_code.astype(np.int64),
        seq=syncs["seq"].to_numpy(np.int64),
        keyed=syncs["keyed"].to_numpy(bool),
        objects=tuple(str(o) for o in objects),
    )


@dataclass(frozen=True)
class AccessTable(_Columns):
    """KV-block accesses (and allocator events, modes ``alloc``/``free``) of finished spans,
    one row per (span, scoped pool, block, mode), with their span's lane and times, sorted by
    (key, lane, start) (:func:`table_order`): a key's rows are one contiguous range, so a
    partition by key is a slice, and the race search reads the table in order.

    ``key`` identifies (scoped pool, block) with one int64 (equal keys: the same block of the
    same pool scope), ``pool`` codes index ``pools``; ``lo``/``hi`` is the half-open layer
    range, ``[0, ALL_LAYERS)`` for all layers. ``checked``: the accesses before a process in
    several pool scopes had its rows repeated once per scope."""

    span: np.ndarray  #: int64 row of the span in the spans frame
    lane: np.ndarray  #: int64
    key: np.ndarray  #: int64
    pool: np.ndarray  #: int64 code into ``pools``
    block: np.ndarray  #: int64
    mode: np.ndarray  #: int8 code into :data:`MODES`
    lo: np.ndarray  #: int64
    hi: np.ndarray  #: int64
    start: np.ndarray  #: int64 ns, the span's
    end: np.ndarray  #: int64 ns, the span's
    #: int64: the row's place in start order (ties in trace order): sorting a part of the
    #: table by time is a counting sort of these
    seq: np.ndarray
    pools: tuple[str, ...] = ()
    checked: int = 0

    @property
    def write(self) -> np.ndarray:
        return self.mode == WRITE

    @property
    def free(self) -> np.ndarray:
        return self.mode == FREE

    def pool_names(self) -> np.ndarray:
        """Each row's scoped pool name (object array)."""
        return np.asarray(self.pools, dtype=object)[self.pool]

    def restarted(self, start: np.ndarray) -> AccessTable:
        """The same rows with new start times (``start``, one per row: e.g. the entry times
        after acquires inside an access span), in the table's order again."""
        order, seq = table_order(self.key, self.lane, start)
        return replace(self.take(order), start=start[order], seq=seq)


def access_table(
    spans: pd.DataFrame,
    accesses: pd.DataFrame,
    span_lane: np.ndarray,
    ranks: dict[int, tuple[int, int]],
) -> tuple[AccessTable, list[dict[str, Any]]]:
    """Accesses and allocator events joined with their (finished) spans (``span_lane``: each
    span row's lane code); pools scoped per (DP group, TP rank) (:func:`pool_scopes`), an
    access of a process in several scopes repeated once per scope. Returns the table and the
    orphan-access gap (accesses, not allocator events, naming no span)."""
    span_ids = spans["span_id"].to_numpy(np.int64)
    if not distinct(span_ids):
        raise FdprofError("trace spans table has duplicate span_id values")
    access_span = accesses["span_id"].to_numpy(np.int64)
    srow = _rows_of(span_ids, access_span)
    mode_code, mode_names = pd.factorize(accesses["mode"])
    mode_of = np.array([MODES.index(m) if m in MODES else READ for m in mode_names], np.int8)
    mode = mode_of[mode_code] if len(mode_code) else np.zeros(0, np.int8)
    gaps = []
    orphan = (srow < 0) & (mode <= WRITE)  # allocator events name no span: not checked anyway
    if orphan.any():
        first = int(access_span[int(np.flatnonzero(orphan)[0])])
        gaps.append(gap("orphan_access", "", "", -1, -1, first,
                        f"{int(orphan.sum())} access rows name no span"))  # fmt: skip
    ends = spans["end"].to_numpy(np.int64)
    ok = srow >= 0
    ok[ok] = ends[srow[ok]] != -1
    srow, mode = srow[ok], mode[ok]
    checked = int((mode <= WRITE).sum())
    pool_code, pool_names = pd.factorize(accesses["pool"])
    pool_code = pool_code[ok]
    block = accesses["block"].to_numpy(np.int64)[ok]
    lo = accesses["layer_lo"].to_numpy(np.int64)[ok]
    hi = accesses["layer_hi"].to_numpy(np.int64)[ok]
    scopes = pool_scopes(ranks)
    if any(label for labels in scopes.values() for label in labels):
        rows, suffix = _scope_rows(spans["pid"].to_numpy(np.int64)[srow], scopes)
        names = np.asarray(pool_names, dtype=object)[pool_code[rows]] + suffix
        pool_code, pool_names = pd.factorize(names)
        srow, mode, block, lo, hi = srow[rows], mode[rows], block[rows], lo[rows], hi[rows]
    pool = pool_code.astype(np.int64)
    key = block_keys(pool, block)
    lane = span_lane[srow]
    start = spans["start"].to_numpy(np.int64)[srow]
    order, seq = table_order(key, lane, start)
    span = srow[order]
    lo, hi = _layers(lo, hi, order)
    table = AccessTable(
        span=span,
        lane=lane[order],
        key=key[order],
        pool=_taken(pool, order),
        block=block[order],
        mode=mode[order],
        lo=lo,
        hi=hi,
        start=start[order],
        end=ends[span],
        seq=seq,
        pools=tuple(str(p) for p in pool_names),
        checked=checked,
    )
    return table, gaps


def _taken(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``values[order]``, with no gather where every value is the same (one pool)."""
    if len(values) and (values == values[0]).all():
        return np.full(len(order), values[0], dtype=values.dtype)
    return values[order]


def _layers(lo: np.ndarray, hi: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The layer ranges in ``order``, ``-1/-1`` (all layers) as ``[0, ALL_LAYERS)``."""
    all_layers = (lo < 0) & (hi < 0)
    if all_layers.all():  # the common case: no gather
        return np.zeros(len(order), np.int64), np.full(len(order), ALL_LAYERS, np.int64)
    return np.where(all_layers, 0, lo)[order], np.where(all_layers, ALL_LAYERS, hi)[order]


def table_order(
    key: np.ndarray, lane: np.ndarray, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The rows sorted by (key, lane, start), ties in row order: each key's accesses in runs
    per lane, each run in program order (the order an :class:`AccessTable` keeps); and each
    of those rows' place in start order. Stable sorts: by start (cheap on a trace's rows,
    nearly in time order already), then a counting sort by (key, lane) where the codes are
    dense enough."""
    if not len(key):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    by_start = np.argsort(start, kind="stable")
    k = int(lane.max()) + 1
    lo = int(key.min())
    span = (int(key.max()) - lo + 1) * k
    if span < 2**62 // max(k, 1):
        place = stable_order((key[by_start] - lo) * k + lane[by_start], span)
    else:
        place = np.lexsort((lane[by_start], key[by_start]))
    return by_start[place], place


def _rows_of(span_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The row of each of ``wanted`` in ``span_ids`` (-1: none). Readers number spans in
    order, and list accesses in runs of that order: a binary search then walks the ids
    nearly in sequence, where hashing them would not."""
    if len(wanted) == len(span_ids) and np.array_equal(wanted, span_ids):
        return np.arange(len(wanted), dtype=np.int64)
    if not (len(span_ids) < 2 or bool((span_ids[1:] > span_ids[:-1]).all())):
        return pd.Index(span_ids).get_indexer(wanted).astype(np.int64)
    pos = np.searchsorted(span_ids, wanted)
    found = pos < len(span_ids)
    found[found] = span_ids[pos[found]] == wanted[found]
    return np.where(found, pos, -1)


def _scope_rows(pid: np.ndarray, scopes: dict[int, list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows repeated once per pool scope of their process, and each repeat's ``@scope``."""
    pids, inverse = np.unique(pid, return_inverse=True)
    labels = [scopes.get(p, [""]) for p in pids.tolist()]
    sizes = np.array([len(ls) for ls in labels], dtype=np.int64)
    flat = np.array([f"@{x}" if x else "" for ls in labels for x in ls], dtype=object)
    first = np.cumsum(sizes) - sizes
    count = sizes[inverse]
    rows = np.repeat(np.arange(len(pid)), count)
    nth = np.arange(len(rows)) - np.repeat(np.cumsum(count) - count, count)
    return rows, flat[first[inverse][rows] + nth]


def block_keys(pool: np.ndarray, block: np.ndarray) -> np.ndarray:
    """One int64 per (pool code, block): arithmetic where it cannot overflow (block ids span
    less than 2^62 / pools), else a dense numbering by sort."""
    if not len(block):
        return np.zeros(0, np.int64)
    lo, hi = int(block.min()), int(block.max())
    width = hi - lo + 1
    if width * (int(pool.max()) + 1) < 2**62:
        return pool * width + (block - lo)
    pairs = np.stack([pool, block])
    return np.unique(pairs, axis=1, return_inverse=True)[1].ravel().astype(np.int64)


def process_ranks(processes: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """pid -> (DP rank, TP rank), from ``processes`` (-1: unknown)."""
    pids = processes["pid"].to_numpy(np.int64).tolist()
    dp = processes["dp_rank"].to_numpy(np.int64).tolist()
    tp = processes["tp_rank"].to_numpy(np.int64).tolist()
    return dict(zip(pids, zip(dp, tp, strict=True), strict=True))


def pool_scopes(ranks: dict[int, tuple[int, int]]) -> dict[int, list[str]]:
    """pid -> the KV-pool scopes its accesses fall in ("" unscoped): each (DP group, TP rank)
    has its own pool, so ``gpu:12`` of (dp0, tp0) is not ``gpu:12`` of (dp0, tp1). DP groups
    are scoped when the trace has several (unknown rank -1 is one group); TP ranks when a
    group has several known ones, and then a process of that group whose TP rank is unknown
    falls in all of them (it may touch any shard: hiding a race is worse than a false one)."""
    dp_values = {dp for dp, _ in ranks.values()}
    known_tp: dict[int, set[int]] = {dp: set() for dp in dp_values}
    for dp, tp in ranks.values():
        if tp >= 0:
            known_tp[dp].add(tp)
    out = {}
    for pid, (dp, tp) in ranks.items():
        dp_part = f"dp{dp}" if len(dp_values) > 1 else ""
        tps = sorted(known_tp[dp]) if len(known_tp[dp]) > 1 else []
        tp_parts = [f"tp{tp}"] if tps and tp >= 0 else [f"tp{t}" for t in tps] or [""]
        out[pid] = ["/".join(x for x in (dp_part, t) if x) for t in tp_parts]
    return out


def scoped_objects(syncs: pd.DataFrame, groups: dict[int, int]) -> pd.DataFrame:
    """Object names made unique where the name alone is ambiguous: ``mutex:*`` are
    in-process (scoped by pid); keyed channels (queues, signals) belong to one DP group (TP
    ranks of a group tell their copies apart by seq). Unkeyed inter-process objects stay
    global, their name says which one they are (our engine's ``lock:kv/dp0``, one flock file
    per DP group), and so do collectives (``collective:<group>/...``), which span groups."""
    if syncs.empty:
        return syncs
    codes, names = pd.factorize(syncs["obj"].to_numpy(dtype=object, na_value=""))
    names = np.asarray(names, dtype=object)
    is_mutex = np.array([str(o).startswith(S.MUTEX_PREFIX) for o in names], dtype=bool)
    is_collective = np.array([str(o).startswith(S.COLLECTIVE_PREFIX) for o in names], bool)
    mutex, collective = is_mutex[codes], is_collective[codes]
    keyed = syncs["keyed"].to_numpy(bool) & ~mutex & ~collective
    scope_dp = len(set(groups.values())) > 1 and keyed.any()
    if not mutex.any() and not scope_dp:
        return syncs
    obj = names[codes]
    pid = syncs["pid"].to_numpy(np.int64)
    scoped = obj.copy()
    if mutex.any():
        scoped[mutex] = [f"{o}@pid{p}" for o, p in zip(obj[mutex], pid[mutex], strict=True)]
    if scope_dp:
        scoped[keyed] = [f"{o}@dp{groups.get(p, -1)}"
                         for o, p in zip(obj[keyed], pid[keyed], strict=True)]  # fmt: skip
    return syncs.assign(obj=pd.array(scoped, dtype="string"))
