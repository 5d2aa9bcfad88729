"""Writer of Perfetto-openable Chrome trace JSON (``.json``, or gzip for ``.json.gz``).

Processes and threads are named (``M`` events, with the labels and sort indexes a Chrome
trace came with); spans are ``X`` slices with their ``cat``, placed by
:mod:`fdprof.trace.tracks` so none is dropped for overlapping (a span that does not nest on
its track is an async ``b``/``e`` slice); a span that never ended is a ``B`` without ``E``.
Flows a trace came with (``flow:<cat>`` syncs) are written back as flows, bound to their
slices; other sync events are thread-scoped instants carrying ``sync.*`` args, and each
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
from fdprof.trace.tracks import SYNTHETIC_TID, Tracks, assign

MASK64 = (1 << 64) - 1


def us(ns: int) -> str:
    """Nanoseconds as exact decimal microseconds."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}" if frac else f"{sign}{whole}"


def _open(path: Path) -> TextIO:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "wb", compresslevel=6), encoding="utf-8")
    return path.open("w", encoding="utf-8")


def args_text(attrs: Attrs, skip: tuple[str, ...] = ()) -> dict[int, str]:
    """Per span id, its attributes as JSON object members (each value's JSON text), but for
    the keys in ``skip``."""
    ids: list[np.ndarray] = []
    members: list[str] = []
    for key, column in attrs.items():
        if key in skip:
            continue
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
    tracks = assign(spans, track_labels(trace))
    display = trace.meta.get("display", {})
    with _open(path) as out:
        out.write('{"displayTimeUnit":"ns","traceEvents":[\n')
        first = True

        def emit(text: str) -> None:
            nonlocal first
            out.write(text if first else ",\n" + text)
            first = False

        role_of = dict(zip(procs["pid"].tolist(), procs["role"].tolist(), strict=True))
        proc_cols = ["pid", "role", "name", "anchored", "dp_rank"]
        for pid, role, name, anchored, rank in rows(procs, proc_cols):
            emit(
                f'{{"ph":"M","name":"process_name","pid":{pid},"args":{{"name":'
                f"{encode_basestring(str(name))},{encode_basestring(K.PROC_ROLE)}:"
                f'{encode_basestring(str(role))},"{K.PROC_ANCHORED}":{str(bool(anchored)).lower()}'
                f',"{C.DP_RANK}":{int(rank)}}}}}'
            )
        for pid, labels in display.get(K.PROCESS_LABELS, {}).items():
            emit(f'{{"ph":"M","name":"process_labels","pid":{pid},"args":{{"labels":'
                 f"{encode_basestring(labels)}}}}}")  # fmt: skip
        for pid, index in display.get(K.PROCESS_SORT, {}).items():
            emit(f'{{"ph":"M","name":"process_sort_index","pid":{pid},'
                 f'"args":{{"sort_index":{int(index)}}}}}')  # fmt: skip
        for lane, name in trace.meta.get("thread_names", {}).items():
            if (ids := _ids(lane)) is not None:
                emit(_thread_name(*ids, name))
        for lane, index in display.get(K.THREAD_SORT, {}).items():
            if (ids := _ids(lane)) is not None:
                emit(f'{{"ph":"M","name":"thread_sort_index","pid":{ids[0]},"tid":{ids[1]},'
                     f'"args":{{"sort_index":{int(index)}}}}}')  # fmt: skip
        _spans(emit, spans, trace.attrs, tracks, role_of)
        lane_tracks = dict(tracks.lane_tracks)
        names = dict(tracks.names)
        span_track = dict(zip(spans["span_id"].tolist(), tracks.span_tid.tolist(), strict=True))
        _syncs(emit, syncs, lane_tracks, names, span_track)
        for (pid, tid), name in names.items():
            emit(_thread_name(pid, tid, name))
        out.write("\n]}\n")


#: attribute whose value puts a span on a track of its own beside its thread's (Nsight's CUDA
#: runtime and OS runtime calls: ``nsys.api``)
TRACK_ATTR = "nsys.api"


def track_labels(trace: Trace) -> np.ndarray | None:
    """Per span row, the label of its own track (``TRACK_ATTR``), or None."""
    api = trace.attr(TRACK_ATTR)
    if api.empty:
        return None
    labels = api.reindex(trace.spans["span_id"]).astype(object)
    return labels.where(labels.notna(), None).to_numpy(object)


def _ids(lane: str) -> tuple[int, int] | None:
    pid, _, tid = lane.partition("/")
    if pid.lstrip("-").isdigit() and tid.lstrip("-").isdigit():
        return int(pid), int(tid)
    return None


def _thread_name(pid: int, tid: int, name: str) -> str:
    return (
        f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},'
        f'"args":{{"name":{encode_basestring(name)}}}}}'
    )


def _spans(emit, spans: pd.DataFrame, attrs: Attrs, tracks: Tracks, role_of) -> None:
    args_of = args_text(attrs, skip=(K.CAT_ATTR,))
    cats = attrs.series(K.CAT_ATTR)
    cat_of = {} if cats.empty else {
        sid: encode_basestring(c) for sid, c in zip(cats.index.tolist(), cats.tolist(),
                                                      strict=True) if type(c) is str}  # fmt: skip
    lanes_default = C.thread_lanes(spans["pid"].to_numpy(), spans["tid"].to_numpy())
    has_lane_attr = set(attrs.span_ids(C.LANE).tolist())
    has_role_attr = set(attrs.span_ids(C.ROLE).tolist())
    cols = ["span_id", "parent_id", "name", "start", "end", "pid", "tid", "lane", "role"]
    trace_ids = spans["trace_id"].to_numpy(object, na_value=None)
    track_tid, overlapping = tracks.span_tid, tracks.overlapping
    for i, (sid, parent, name, start, end, pid, tid, lane, role) in enumerate(rows(spans, cols)):
        members = [f'"{K.SPAN_ID}":{sid}']
        if parent:
            members.append(f'"{K.PARENT_ID}":{parent}')
        if trace_ids[i] is not None:
            members.append(f'"{K.TRACE_ID}":{encode_basestring(trace_ids[i])}')
        track = int(track_tid[i])
        if track != tid or overlapping[i]:
            members.append(f'"{K.TRUE_TID}":{tid}')
        if (lane != lanes_default[i] or overlapping[i]) and sid not in has_lane_attr:
            members.append(f'"{K.SPAN_LANE}":{encode_basestring(lane)}')
        if role != role_of.get(pid) and sid not in has_role_attr:
            members.append(f'"{K.SPAN_ROLE}":{encode_basestring(role)}')
        extra = args_of.get(sid)
        if extra:
            members.append(extra)
        cat = cat_of.get(sid)
        head = f'"name":{encode_basestring(name)},' + (f'"cat":{cat},' if cat else "")
        head += f'"pid":{pid},"tid":{track},"ts":{us(start)}'
        args = f'"args":{{{",".join(members)}}}'
        if overlapping[i]:  # an async slice: viewers pack these instead of dropping them
            ident = f'"id":"0x{sid & MASK64:x}"'
            emit(f'{{"ph":"b",{head},{ident},{args}}}')
            if end >= 0:
                close = head.rsplit('"ts":', 1)[0] + f'"ts":{us(end)}'
                emit(f'{{"ph":"e",{close},{ident}}}')
        elif end < 0:
            emit(f'{{"ph":"B",{head},{args}}}')
        else:
            emit(f'{{"ph":"X",{head},"dur":{us(end - start)},{args}}}')


def _syncs(emit, syncs: pd.DataFrame, lane_tracks: dict, names: dict, span_track: dict) -> None:
    """The flows a trace came with, as flows; instants for every other sync event, and a flow
    arrow per release → acquire edge of those."""
    syncs = syncs.reset_index(drop=True)
    flow = (syncs["obj"].str.startswith(K.FLOW_OBJ) & syncs["keyed"]).to_numpy(bool)
    _flows(emit, syncs[flow], span_track)
    syncs = syncs[~flow].reset_index(drop=True)
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


def _flows(emit, flows: pd.DataFrame, span_track: dict) -> None:
    """Each flow event as a flow event (start ``s`` for a release, end ``f`` for an acquire)
    of its own category and id, on the track of the slice it is bound to, naming that slice
    (``sync.span``) so the reader binds it back to the same one."""
    cols = ["op", "obj", "seq", "time", "pid", "tid", "span_id"]
    for op, obj, seq, t, pid, tid, span in rows(flows, cols):
        cat = encode_basestring(obj[len(K.FLOW_OBJ) :])
        ph, bp = ("s", "") if op == "release" else ("f", ',"bp":"e"')
        track = span_track.get(span, tid)
        bound = f',"{K.SYNC_SPAN}":{span}' if span else ""
        emit(f'{{"ph":"{ph}","cat":{cat},"name":{cat},"id":{seq},"pid":{pid},"tid":{track},'
             f'"ts":{us(t)}{bp},"args":{{"{K.TRUE_TID}":{tid}{bound}}}}}')  # fmt: skip
