"""What an Nsight Systems export says about host calls and the device work they caused: NVTX
ranges projected onto the kernels and copies launched inside them, and the host's waits for the
device as sync edges.

Why: on a GPU an NVTX range times the *host* call; the work it launched runs later on a stream.
Where a trace has device intervals, the analyses should judge and time the device work itself.

- Projection, as ``nsys stats --report nvtx_gpu_proj_trace`` does it: a CUDA runtime or driver
  API call made on a thread while an NVTX range is open there (the call starts inside the range)
  launched the kernels, memcpys and memsets that carry its ``correlationId``. A range's
  projection is the interval from the first such operation's start to the last one's end;
  nested ranges each get their own. Where nsys reports one row per range, this makes one span
  per (range, device lane), since a lane is where program order holds: named as the range, on
  the device lane, child of the range, ``nvtx.gpu_ops`` operations.
- Joined to the run it profiled (:mod:`fdprof.trace.join`), a host span whose range launched
  device work on one lane hands its KV-block accesses to that projection
  (:func:`accesses_to_device`): the kernels touched the blocks, when and where they ran; the
  host call did not.
- Host waits (``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``, classified by the API call that waited,
  found by correlation id; the sync-type numbers differ between exports): a stream
  synchronisation releases ``cuda:sync/<lane>`` (seq: the call's correlation id) at the end of
  the last operation launched on that stream before the call, and the host thread acquires it
  when the call returns; a device (context) synchronisation does so for every lane of the
  process and device; a synchronous ``cudaMemcpy`` for the copy it made. Event synchronisations
  and stream waits on events are counted, not turned into edges: the export does not say where
  the event was recorded (a warning says how many).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from fdprof import semconv as S
from fdprof.trace.attrs import Attrs, AttrsBuilder

#: API calls by what they wait for (prefixes of runtime and driver API names)
STREAM_SYNC = ("cudaStreamSynchronize", "cuStreamSynchronize")
DEVICE_SYNC = ("cudaDeviceSynchronize", "cuCtxSynchronize", "cudaThreadSynchronize")
EVENT_SYNC = ("cudaEventSynchronize", "cuEventSynchronize", "cudaStreamWaitEvent",
              "cuStreamWaitEvent")  # fmt: skip

PROJECTION_COLUMNS = ["range_id", "lane", "stream", "start", "end", "ops"]


def project(ranges: pd.DataFrame, calls: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """One row per (range, lane) with device work launched inside the range.

    ``ranges``: ``range_id, pid, tid, start, end`` (end -1: never closed, open to the end);
    ``calls``: ``pid, tid, start, correlationId``; ``ops``: ``pid, correlationId, start, end,
    stream, lane`` (correlation ids are per process). Returns ``range_id, lane, stream, start,
    end, ops`` (the operations' first start, last end, count).
    """
    launched = calls[["pid", "tid", "start", "correlationId"]].merge(
        ops[["pid", "correlationId", "start", "end", "stream", "lane"]],
        on=["pid", "correlationId"], suffixes=("_call", ""),
    )  # fmt: skip
    if not len(launched) or not len(ranges):
        return pd.DataFrame({c: [] for c in PROJECTION_COLUMNS})
    open_end = np.iinfo(np.int64).max
    parts = []
    by_thread = ranges.groupby(["pid", "tid"], sort=False)
    for (pid, tid), group in launched.groupby(["pid", "tid"], sort=False):
        if (pid, tid) not in by_thread.groups:
            continue
        mine = ranges.loc[by_thread.groups[(pid, tid)]]
        group = group.sort_values("start_call", kind="stable")
        at = group["start_call"].to_numpy(np.int64)
        ends = mine["end"].to_numpy(np.int64)
        lo = np.searchsorted(at, mine["start"].to_numpy(np.int64), "left")
        hi = np.searchsorted(at, np.where(ends < 0, open_end, ends), "right")
        counts = np.maximum(hi - lo, 0)
        if not counts.any():
            continue
        which = np.repeat(np.arange(len(mine)), counts)
        # the calls of each range: lo, lo+1, ..., hi-1, range after range
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        call = np.repeat(lo, counts) + offsets
        parts.append(pd.DataFrame({
            "range_id": mine["range_id"].to_numpy(np.int64)[which],
            "lane": group["lane"].to_numpy(object)[call],
            "stream": group["stream"].to_numpy(np.int64)[call],
            "start": group["start"].to_numpy(np.int64)[call],
            "end": group["end"].to_numpy(np.int64)[call],
        }))  # fmt: skip
    if not parts:
        return pd.DataFrame({c: [] for c in PROJECTION_COLUMNS})
    rows = pd.concat(parts, ignore_index=True)
    out = rows.groupby(["range_id", "lane"], sort=True).agg(
        stream=("stream", "first"), start=("start", "min"), end=("end", "max"),
        ops=("start", "size"),
    )  # fmt: skip
    return out.reset_index()[PROJECTION_COLUMNS]


SYNC_COLUMNS = ["op", "obj", "seq", "keyed", "time", "pid", "tid", "lane", "span_id"]


def host_waits(
    waits: pd.DataFrame, calls: pd.DataFrame, ops: pd.DataFrame
) -> tuple[dict[str, np.ndarray], int]:
    """Sync rows for the host's waits on the device, and how many waits could not be placed.

    ``waits``: the synchronisation records, ``pid, correlationId, deviceId, streamId``;
    ``calls``: every API call, ``pid, tid, end, correlationId, name``; ``ops``: device work,
    ``correlationId, span_id, end, pid, device, stream, lane`` (correlation ids are per
    process). Synchronous ``cudaMemcpy`` calls come from ``calls`` alone."""
    named = calls.set_index(["pid", "correlationId"])
    rows: list[pd.DataFrame] = []
    unplaced = 0
    ops = ops.sort_values("correlationId", kind="stable")
    waiting = zip(waits["pid"].tolist(), waits["correlationId"].tolist(),
                  waits["deviceId"].tolist(), waits["streamId"].tolist(), strict=True)  # fmt: skip
    for pid, corr, device, stream in waiting:
        if (pid, corr) not in named.index:
            continue
        call = named.loc[(pid, corr)]
        name = str(call["name"])
        if name.startswith(EVENT_SYNC):
            unplaced += 1
            continue
        before = ops[(ops["pid"] == pid) & (ops["device"] == device)
                     & (ops["correlationId"] < corr)]  # fmt: skip
        if name.startswith(STREAM_SYNC):
            before = before[before["stream"] == stream]
        elif not name.startswith(DEVICE_SYNC):
            continue
        rows.append(_wait(before.groupby("lane", sort=False).tail(1), corr, pid, call))
    copies = calls[calls["name"].str.startswith("cudaMemcpy") & ~calls["name"].str.contains(
        "Async")]  # fmt: skip
    for (pid, corr), call in copies.set_index(["pid", "correlationId"]).iterrows():
        mine = ops[(ops["pid"] == pid) & (ops["correlationId"] == corr)]
        rows.append(_wait(mine, corr, pid, call))
    rows = [r for r in rows if len(r)]
    if not rows:
        return {c: np.zeros(0, dtype=_dtype(c)) for c in SYNC_COLUMNS}, unplaced
    frame = pd.concat(rows, ignore_index=True)
    return {c: frame[c].to_numpy(_dtype(c)) for c in SYNC_COLUMNS}, unplaced


def _dtype(column: str):
    return object if column in ("op", "obj", "lane") else bool if column == "keyed" else np.int64


def _wait(last: pd.DataFrame, corr: int, pid: int, call: pd.Series) -> pd.DataFrame:
    """Each lane's last operation releases its ``cuda:sync/<lane>``; the host acquires each."""
    n = len(last)
    objs = [f"{S.CUDA_SYNC_PREFIX}{lane}" for lane in last["lane"].tolist()]
    release = pd.DataFrame({
        "op": [S.SyncOp.RELEASE] * n, "obj": objs, "seq": [corr] * n, "keyed": [True] * n,
        "time": last["end"].to_numpy(np.int64), "pid": last["pid"].to_numpy(np.int64),
        "tid": last["stream"].to_numpy(np.int64), "lane": last["lane"].to_numpy(object),
        "span_id": last["span_id"].to_numpy(np.int64),
    })  # fmt: skip
    acquire = pd.DataFrame({
        "op": [S.SyncOp.ACQUIRE] * n, "obj": objs, "seq": [corr] * n, "keyed": [True] * n,
        "time": [int(call["end"])] * n,
        "pid": [pid] * n, "tid": [int(call["tid"])] * n, "lane": [None] * n,
        "span_id": [0] * n,
    })  # fmt: skip
    return pd.concat([release, acquire], ignore_index=True)


def accesses_to_device(attrs: Attrs, moves: dict[int, list[int]]) -> Attrs:
    """``attrs`` with the ``kv.*`` values of each span in ``moves`` on its projections instead
    (each one gets them all)."""
    if not moves:
        return attrs
    hosts = np.fromiter(moves, dtype=np.int64)
    builder = AttrsBuilder()
    for key, column in attrs.items():
        if key not in S.KV_ACCESS_KEYS and key != S.KV_LAYERS:
            builder.add(key, column.span_id, column.values, column.kind)
            continue
        moved = np.isin(column.span_id, hosts)
        builder.add(key, column.span_id[~moved], column.values.filter(pa.array(~moved)),
                    column.kind)  # fmt: skip
        rows = np.flatnonzero(moved)
        targets = [moves[int(sid)] for sid in column.span_id[rows].tolist()]
        repeat = np.repeat(rows, [len(t) for t in targets])
        ids = np.array([t for ts in targets for t in ts], dtype=np.int64)
        builder.add(key, ids, column.values.take(pa.array(repeat)), column.kind)
    return builder.build()
