"""The analyses on Dask: ``hazards``, ``hazards --predict`` and ``diff`` over a Parquet store, on
an existing cluster or a ``LocalCluster``.

Why Dask: a trace that outgrows one machine is analysed where the field already runs its
batch analyses (nsys recipes run on Dask, by ``DASK_SCHEDULER_ADDRESS``), not on a home-made
engine. How the work is cut (docs/analysis.md "On Dask"):

- happens-before: the clocks come from the sync events (a tenth of the trace), computed once on
  the client and broadcast; each block bucket of the store (:mod:`fdprof.trace.store`) is one
  task: its candidate search, race and alarm pairs, and block lifetimes (per block, so exact);
  the pieces are reduced into the report's tables on the client, naming only the spans that
  race. ``--predict``: rule (a) of WCP per bucket too (it groups by (lock, block)), the WCP
  clocks propagated once on the client, broadcast, and searched per bucket.
- diff: per span part (a time window of steps), the statistics' sufficient pieces; reduced at
  the end (:mod:`fdprof.analysis.distributed_diff`).

Every in-process internal used goes through :mod:`fdprof.analysis.hb_seam`. Workers read the
store's files themselves: a cluster needs the store on a filesystem every worker sees.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fdprof import settings
from fdprof.analysis import hb_seam as seam
from fdprof.analysis.columns import empty_frame
from fdprof.analysis.hazards import HazardReport
from fdprof.errors import FdprofError
from fdprof.trace import store

#: ``--dask local:N``: a LocalCluster of N single-threaded worker processes
LOCAL = "local:"
#: the columns a race or violation names of its spans
SPAN_DETAIL = ["span_id", "name", "lane", "role", "step", "start", "end"]


@contextlib.contextmanager
def client_for(spec: str | None) -> Iterator[Any]:
    """A Dask client: ``local:N`` starts a LocalCluster (N workers, one thread each, memory
    limit the machine's memory shared among them, spilling to a temporary directory; its
    scheduler's HTTP endpoint on a free port, never one a running cluster holds), an address
    connects to that scheduler, ``None`` to ``DASK_SCHEDULER_ADDRESS``."""
    try:
        from distributed import Client, LocalCluster
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("--dask needs dask[distributed]", name="distributed") from exc
    spec = spec or settings.dask_scheduler()
    if not spec:
        raise FdprofError("--dask: no scheduler (give ADDRESS or local:N, or set "
                          "DASK_SCHEDULER_ADDRESS)")  # fmt: skip
    if spec.startswith(LOCAL):
        workers = _workers(spec)
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0", memory_limit=_memory_per_worker(workers),
                          silence_logs=50) as cluster, Client(cluster) as client:  # fmt: skip
            yield client
        return
    try:
        client = Client(spec, timeout="20s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise FdprofError(f"--dask {spec}: cannot reach the scheduler ({exc})") from None
    with client:
        yield client


def _workers(spec: str) -> int:
    text = spec[len(LOCAL) :]
    if not text.isdigit() or not 1 <= int(text) <= 1024:
        raise FdprofError(f"--dask {spec}: local:N needs N workers, 1 to 1024")
    return int(text)


def _memory_per_worker(workers: int) -> int:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(total * 0.6 / workers)


@contextlib.contextmanager
def as_store(path: Path, load) -> Iterator[Path]:
    """``path`` if it is a store, else the trace converted into a temporary one (the
    distributed analyses read stores only)."""
    if store.is_store(path):
        yield Path(path)
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="fdprof-store-") as tmp:
        out = Path(tmp) / "store"
        store.write(load(path), out)
        yield out


# -- tasks (run on the workers) --


def _span_part_summary(path: str, columns: list[str]) -> dict[str, Any]:
    """Rows, lanes in order of appearance, and the spans that never ended (their detail)."""
    t = store.read_part(Path(path), store.table_schema("spans"), columns)
    lanes = pd.unique(t["lane"].to_pandas().astype(str)).tolist() if t.num_rows else []
    end = t["end"].to_numpy()
    cut = np.flatnonzero(end == -1)
    unended = t.take(pa.array(cut)).to_pandas() if len(cut) else None
    return {"rows": t.num_rows, "lanes": lanes, "unended": unended, "cut": cut}


def _span_rows(path: str, ids: np.ndarray) -> pd.DataFrame:
    """The rows of ``ids`` in one span part, with their row number in the part."""
    t = store.read_part(Path(path), store.table_schema("spans"), SPAN_DETAIL)
    mask = pc.is_in(t["span_id"], value_set=pa.array(ids, pa.int64()))
    at = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    out = t.take(pa.array(at)).to_pandas()
    out["_row"] = at
    return out


def _read_bucket(folder: str) -> pd.DataFrame:
    parts = [store.read_part(p, store.table_schema("accesses"))
             for p in store._parts(Path(folder))]  # fmt: skip
    if not parts:
        return store.table_schema("accesses").empty_table().to_pandas()
    return pa.concat_tables(parts).to_pandas()


def _search(folder: str, clocks: seam.Clocks, wcp: Any = None) -> dict[str, Any]:
    return seam.search_bucket(_read_bucket(folder), clocks, wcp)


def _landings(folder: str, clocks: seam.Clocks, w: dict[str, Any]) -> tuple:
    return seam.wcp_landings(_read_bucket(folder), clocks, w)


# -- on the client --


def find_hazards(
    path: Path,
    client: Any,
    drop_objects: Iterable[str] = (),
    predict: bool = False,
) -> HazardReport:
    """:func:`fdprof.analysis.hazards.find_hazards` (``predict``:
    :func:`fdprof.analysis.predict.predict_races`) of the store at ``path`` on Dask; the same
    report, table for table."""
    path = Path(path)
    store.manifest(path)
    span_files = [str(p) for p in store.part_files(path, "spans")]
    buckets = [str(b) for b in store.bucket_dirs(path)]
    summaries = client.gather(client.map(_span_part_summary, span_files,
                                         columns=["span_id", "name", "lane", "role", "step",
                                                  "start", "end"], pure=False))  # fmt: skip
    lanes = pd.unique(pd.Series([x for s in summaries for x in s["lanes"]], dtype=object))
    syncs = store._frame("syncs", store.read_table(path, "syncs"))
    processes = store._frame(
        "processes", store.read_part(path / "processes.parquet", store.table_schema("processes"))
    )
    clocks = seam.clocks(syncs, processes, lanes, drop_objects)
    del syncs
    shared = client.scatter(replace(clocks, syncs=None), broadcast=True)  # the workers' part
    results = client.gather(client.map(_search, buckets, clocks=shared, pure=False))
    races = _cat([r["races"] for r in results], seam.PAIR_RAW)
    alarms = _cat([r["alarms"] for r in results], seam.PAIR_RAW)
    lifetime = _cat([r["lifetime"] for r in results], seam.LIFETIME_RAW)
    inside = _cat([r["inside"] for r in results], seam.instrumentation.INSIDE_COLUMNS)
    checked = sum(r["checked"] for r in results)
    orphans = [r["orphans"] for r in results if r["orphans"][0]]
    orphan = (sum(o[0] for o in orphans), orphans[0][1]) if orphans else (0, 0)
    wcp_raw = None
    if predict and checked:
        w = seam.wcp_setup(clocks)
        shared_w = client.scatter(w, broadcast=True)
        landings = client.gather(client.map(_landings, buckets, clocks=shared, w=shared_w,
                                            pure=False))  # fmt: skip
        wcp = client.scatter(seam.WcpBroadcast(clocks, w, landings), broadcast=True)
        found = client.gather(client.map(_search, buckets, clocks=shared, wcp=wcp, pure=False))
        wcp_raw = _cat([r["races"] for r in found], seam.PAIR_RAW)
    named = [races, alarms] + ([wcp_raw] if wcp_raw is not None else [])
    ids = np.unique(np.concatenate(
        [np.asarray(f[c], np.int64) for f in named for c in ("span_x", "span_y")]
        + [np.asarray(lifetime[c], np.int64) for c in ("span_x", "span_e")]
        + [np.asarray(inside["span_id"], np.int64)]))  # fmt: skip
    spans = _spans_named(client, span_files, summaries, ids)
    unended = _unended(summaries)
    report = seam.report(clocks, spans, unended, races, alarms, lifetime, checked, orphan,
                         inside)  # fmt: skip
    if not predict:
        return report
    if not checked:
        return replace(report, predicted=report.races.copy())
    wcp_pairs = seam.pair_table(spans, wcp_raw)
    observed = set(zip(report.races["span_a"], report.races["span_b"], strict=True))
    fresh = np.array([p not in observed for p in zip(wcp_pairs["span_a"], wcp_pairs["span_b"],
                                                     strict=True)], dtype=bool)  # fmt: skip
    return replace(report, predicted=wcp_pairs[fresh].reset_index(drop=True))


def _cat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return seam._empty_raw(columns)
    return pd.concat(frames, ignore_index=True)


def _spans_named(client, files: list[str], summaries: list[dict], ids: np.ndarray):
    """The spans ``ids`` names, in the trace's row order (its parts' order, then row)."""
    if not len(ids):
        return empty_frame(SPAN_DETAIL, store.SCHEMAS["spans"])
    offsets = np.cumsum([0] + [s["rows"] for s in summaries])
    parts = client.gather(client.map(_span_rows, files, ids=ids, pure=False))
    for part, off in zip(parts, offsets[:-1].tolist(), strict=True):
        part["_row"] += off
    spans = pd.concat(parts, ignore_index=True).sort_values("_row", kind="stable")
    return spans.drop(columns="_row").reset_index(drop=True)


def _unended(summaries: list[dict]) -> pd.DataFrame:
    parts = [s["unended"] for s in summaries if s["unended"] is not None]
    if not parts:
        return empty_frame(("span_id", "name", "lane", "start", "end"))
    return pd.concat(parts, ignore_index=True)
