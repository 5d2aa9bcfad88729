"""Writer of Perfetto-openable Chrome trace JSON (``.json``, or gzip for ``.json.gz``).

Processes and threads are named (``M`` events); spans are ``X`` slices placed by
:mod:`fdprof.trace.tracks` so none is dropped for overlapping; a span that never ended is a
``B`` without ``E``. Sync events are thread-scoped instants carrying ``sync.*`` args, and each
release → acquire edge (same object and sequence) is drawn as a flow arrow.

Times are written as exact decimal microseconds (``123.456``), and the args the reader knows
(:mod:`fdprof.trace.chrome`) restore ids, true threads and lanes: the model round-trips.
"""

from __future__ import annotations

import gzip
import io
from json.encoder import encode_basestring
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from fdprof.trace import chrome as K
from fdprof.trace import conventions as C
from fdprof.trace.attrs import Attrs
from fdprof.trace.model import Trace, rows
from fdprof.trace.tracks import SYNTHETIC_TID, assign


def us(ns: int) -> str:
    """Nanoseconds as exact decimal microseconds."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}" if frac else f"{sign}{whole}"


def _open(path: Path) -> TextIO:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "wb", compresslevel=6), encoding="utf-8")
    return path.open("w", encoding="utf-8")


def args_text(attrs: Attrs) -> dict[int, str]:
    """Per span id, its attributes as JSON object members (each value's JSON text)."""
    ids: list[np.ndarray] = []
    members: list[str] = []
    for key, column in attrs.items():
        name = encode_basestring(key)
        ids.append(column.span_id)
        members.extend([f"{name}:{text}" for text in column.json()])
    if not ids:
        return {}
    grouped = pd.Series(members).groupby(np.concatenate(ids)).agg(",".join)
    return dict(zip(grouped.index.tolist(), grouped.tolist(), strict=True))


def write(trace: Trace, path: str | Path) -> None:
    path = Path(path)
    spans, syncs, procs = trace.spans, trace.syncs, trace.processes
    tracks = assign(spans)
    with _open(path) as out:
        out.write('{"displayTimeUnit":"ns","traceEvents":[\n')
        first = True

        def emit(text: str) -> None:
            nonlocal first
            out.write(text if first else ",\n" + text)
            first = False

        role_of = dict(zip(procs["pid"].tolist(), procs["role"].tolist(), strict=True))
        proc_cols = ["pid", "role", "name", "anchored", "dp_rank", "tp_rank"]
        for pid, role, name, anchored, rank, tp_rank in rows(procs, proc_cols):
            emit(
                f'{{"ph":"M","name":"process_name","pid":{pid},"args":{{"name":'
                f"{encode_basestring(str(name))},{encode_basestring(K.PROC_ROLE)}:"
                f'{encode_basestring(str(role))},"{K.PROC_ANCHORED}":{str(bool(anchored)).lower()}'
                f',"{C.DP_RANK}":{int(rank)},"{C.TP_RANK}":{int(tp_rank)}}}}}'
            )
        for lane, name in trace.meta.get("thread_names", {}).items():
            pid, _, tid = lane.partition("/")
            if pid.lstrip("-").isdigit() and tid.lstrip("-").isdigit():
                emit(_thread_name(int(pid), int(tid), name))
        _spans(emit, spans, trace.attrs, tracks.span_tid, role_of)
        lane_tracks = dict(tracks.lane_tracks)
        names = dict(tracks.names)
        _syncs(emit, syncs, lane_tracks, names)
        for (pid, tid), name in names.items():
            emit(_thread_name(pid, tid, name))
        out.write("\n]}\n")


def _thread_name(pid: int, tid: int, name: str) -> str:
    return (
        f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},'
        f'"args":{{"name":{encode_basestring(name)}}}}}'
    )


def _spans(emit, spans: pd.DataFrame, attrs: Attrs, track_tid, role_of) -> None:
    args_of = args_text(attrs)
    lanes_default = C.thread_lanes(spans["pid"].to_numpy(), spans["tid"].to_numpy())
    has_lane_attr = set(attrs.span_ids(C.LANE).tolist())
    has_role_attr = set(attrs.span_ids(C.ROLE).tolist())
    cols = ["span_id", "parent_id", "name", "start", "end", "pid", "tid", "lane", "role"]
    trace_ids = spans["trace_id"].to_numpy(object, na_value=None)
    for i, (sid, parent, name, start, end, pid, tid, lane, role) in enumerate(rows(spans, cols)):
        members = [f'"{K.SPAN_ID}":{sid}']
        if parent:
            members.append(f'"{K.PARENT_ID}":{parent}')
        if trace_ids[i] is not None:
            members.append(f'"{K.TRACE_ID}":{encode_basestring(trace_ids[i])}')
        track = int(track_tid[i])
        if track != tid:
            members.append(f'"{K.TRUE_TID}":{tid}')
        if lane != lanes_default[i] and sid not in has_lane_attr:
            members.append(f'"{K.SPAN_LANE}":{encode_basestring(lane)}')
        if role != role_of.get(pid) and sid not in has_role_attr:
            members.append(f'"{K.SPAN_ROLE}":{encode_basestring(role)}')
        extra = args_of.get(sid)
        if extra:
            members.append(extra)
        head = f'"name":{encode_basestring(name)},"pid":{pid},"tid":{track},"ts":{us(start)}'
        if end < 0:
            emit(f'{{"ph":"B",{head},"args":{{{",".join(members)}}}}}')
        else:
            emit(f'{{"ph":"X",{head},"dur":{us(end - start)},"args":{{{",".join(members)}}}}}')


def _syncs(emit, syncs: pd.DataFrame, lane_tracks: dict, names: dict) -> None:
    """Instants for every sync event, and a flow arrow per release → acquire edge."""
    syncs = syncs.reset_index(drop=True)
    lanes_default = C.thread_lanes(syncs["pid"].to_numpy(), syncs["tid"].to_numpy())
    next_tid = max([t for _, t in names] + [SYNTHETIC_TID - 1]) + 1
    where: list[tuple[int, int]] = []
    cols = ["op", "obj", "seq", "keyed", "time", "pid", "tid", "lane", "span_id"]
    for i, (op, obj, seq, keyed, t, pid, tid, lane, span) in enumerate(rows(syncs, cols)):
        track = tid
        if lane != lanes_default[i]:
            if (pid, lane) not in lane_tracks:
                lane_tracks[(pid, lane)] = next_tid
                names[(pid, next_tid)] = lane
                next_tid += 1
            track = lane_tracks[(pid, lane)]
        where.append((pid, track))
        label = f"{op} {obj}" + (f" #{seq}" if keyed else "")
        seq_arg = f'"{C.SYNC_SEQ}":{seq},' if keyed else ""  # an unkeyed event has none
        emit(
            f'{{"ph":"i","s":"t","name":{encode_basestring(label)},"pid":{pid},"tid":{track},'
            f'"ts":{us(t)},"args":{{"{C.SYNC_OP}":"{op}","{C.SYNC_OBJ}":{encode_basestring(obj)},'
            f'{seq_arg}"{K.SYNC_SPAN}":{span},"{K.TRUE_TID}":{tid},'
            f'"{C.LANE}":{encode_basestring(lane)}}}}}'
        )
    if not len(syncs):
        return
    times = syncs["time"].tolist()
    keyed = syncs[syncs["keyed"].to_numpy(bool)]
    rel = keyed[keyed["op"] == "release"].drop_duplicates(["obj", "seq"])
    acq = keyed[keyed["op"] == "acquire"]
    pairs = acq.reset_index().merge(rel.reset_index(), on=["obj", "seq"], suffixes=("_a", "_r"))
    for flow, (obj, r, a) in enumerate(rows(pairs, ["obj", "index_r", "index_a"])):
        for ph, row in (("s", r), ("f", a)):
            pid, track = where[row]
            t = times[row]
            bp = ',"bp":"e"' if ph == "f" else ""
            emit(
                f'{{"ph":"{ph}","cat":"{K.SYNC_FLOW_CAT}","name":{encode_basestring(obj)},'
                f'"id":{flow},"pid":{pid},"tid":{track},"ts":{us(t)}{bp}}}'
            )
