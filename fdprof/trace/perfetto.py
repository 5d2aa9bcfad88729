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
import pyarrow as pa
import pyarrow.compute as pc

from fdprof import progress
from fdprof import semconv as S
from fdprof.trace import conventions as C
from fdprof.trace.attrs import STR, Attrs
from fdprof.trace.model import PROCESS_LABELS, PROCESS_SORT, THREAD_SORT, Trace, remap_ints, rows
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


def args_text(attrs: Attrs, skip: tuple[str, ...] = ()) -> tuple[np.ndarray, pa.Array]:
    """The span ids that have attributes (sorted) and, for each, its attributes as JSON
    object members (each value's JSON text), but for the keys in ``skip``: every key's members
    sorted by span id once and joined a span at a time in Arrow (a pandas group-by-join made a
    Series per span: most of a conversion's time)."""
    ids: list[np.ndarray] = []
    members: list[pa.Array] = []
    for key, column in attrs.items():
        if key in skip:
            continue
        ids.append(column.span_id)
        text = column.as_json().values.combine_chunks().cast(pa.string())
        members.append(_join(f"{encode_basestring(key)}:", text))
    if not ids:
        return np.zeros(0, np.int64), pa.array([], pa.string())
    span_ids = np.concatenate(ids)
    order = np.argsort(span_ids, kind="stable")  # a span's keys keep their order
    span_ids = span_ids[order]
    ordered = pa.concat_arrays(members).take(pa.array(order))
    starts = np.flatnonzero(np.r_[True, span_ids[1:] != span_ids[:-1]])
    offsets = pa.array(np.r_[starts, len(span_ids)], pa.int64())
    joined = pc.binary_join(pa.LargeListArray.from_arrays(offsets, ordered), ",")
    return span_ids[starts], joined


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
        proc_cols = ["pid", "role", "name", "anchored", "dp_rank", "tp_rank"]
        for pid, role, name, anchored, rank, tp_rank in rows(procs, proc_cols):
            emit(
                f'{{"ph":"M","name":"process_name","pid":{pid},"args":{{"name":'
                f"{encode_basestring(str(name))},{encode_basestring(S.ROLE)}:"
                f'{encode_basestring(str(role))},"{S.ANCHORED}":{str(bool(anchored)).lower()}'
                f',"{S.DP_RANK}":{int(rank)},"{S.TP_RANK}":{int(tp_rank)}}}}}'
            )
        for pid, labels in display.get(PROCESS_LABELS, {}).items():
            emit(f'{{"ph":"M","name":"process_labels","pid":{pid},"args":{{"labels":'
                 f"{encode_basestring(labels)}}}}}")  # fmt: skip
        for pid, index in display.get(PROCESS_SORT, {}).items():
            emit(f'{{"ph":"M","name":"process_sort_index","pid":{pid},'
                 f'"args":{{"sort_index":{int(index)}}}}}')  # fmt: skip
        for lane, name in trace.meta.get("thread_names", {}).items():
            if (ids := _ids(lane)) is not None:
                emit(_thread_name(*ids, name))
        for lane, index in display.get(THREAD_SORT, {}).items():
            if (ids := _ids(lane)) is not None:
                emit(f'{{"ph":"M","name":"thread_sort_index","pid":{ids[0]},"tid":{ids[1]},'
                     f'"args":{{"sort_index":{int(index)}}}}}')  # fmt: skip
        _spans(emit, spans, trace.attrs, tracks, role_of)
        lane_tracks = dict(tracks.lane_tracks)
        names = dict(tracks.names)
        _syncs(emit, syncs, lane_tracks, names, (spans["span_id"].to_numpy(), tracks.span_tid))
        for (pid, tid), name in names.items():
            emit(_thread_name(pid, tid, name))
        if (samples := trace.meta.get("pyspy")) is not None:
            _samples(emit, samples)
        out.write("\n]}\n")


#: track ids of py-spy's sampled threads: this plus the thread's id (Linux thread ids stay
#: below 2**22, the span tracks' synthetic ids start at 2**30)
PYSPY_TID = 1 << 29


def _samples(emit, samples) -> None:
    """py-spy's samples (:mod:`fdprof.trace.pyspy`) as a track of their own per sampled
    thread, ``py-spy <thread> (<tid>)`` beside the thread's spans: each frame's stay on the
    stack a slice, nested as the stack was (category ``py-spy``, file and line in its args)."""
    for (pid, tid), name in samples.threads.items():
        emit(_thread_name(pid, PYSPY_TID + tid, f"py-spy {name} ({tid})"))
    texts = [
        f'{{"name":{encode_basestring(fn)},"cat":"py-spy","ph":"X","pid":{pid},'
        f'"tid":{PYSPY_TID + tid},"ts":{us(start)},"dur":{us(max(end - start, 0))},'
        f'"args":{{"file":{encode_basestring(path)},"line":{line}}}}}'
        for pid, tid, start, end, frame in rows(
            samples.slices.sort_values(["pid", "tid", "start", "depth"]),
            ["pid", "tid", "start", "end", "frame"],
        )
        for fn, path, line in [samples.frames[frame]]
    ]
    for lo in range(0, len(texts), 8192):
        emit(",\n".join(texts[lo : lo + 8192]))


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
    """Every span's event text, built a column at a time in Arrow (a Python f-string per span
    was most of a conversion's time); the few spans that are not ``X`` slices (never ended,
    or async) are finished one by one."""
    n = len(spans)
    if not n:
        return
    sid = spans["span_id"].to_numpy(np.int64)
    pid = spans["pid"].to_numpy(np.int64)
    tid = spans["tid"].to_numpy(np.int64)
    start = spans["start"].to_numpy(np.int64)
    end = spans["end"].to_numpy(np.int64)
    parent = spans["parent_id"].to_numpy(np.int64)
    lane = spans["lane"].to_numpy(object)
    role = spans["role"].to_numpy(object)
    track, overlapping = tracks.span_tid, tracks.overlapping
    own_lane = np.isin(sid, attrs.span_ids(S.LANE))
    own_role = np.isin(sid, attrs.span_ids(S.ROLE))
    default_lane = lane != C.thread_lanes(pid, tid)
    proc_role = pd.Series(pid).map(role_of).to_numpy(object)
    members = [
        _join(f'"{S.SPAN_ID}":', _ints(sid)),
        _opt(parent != 0, f',"{S.PARENT_ID}":', _ints(parent)),
        _opt(spans["trace_id"].notna().to_numpy(bool), f',"{S.TRACE_ID}":',
             _json_texts(spans["trace_id"].to_numpy(object, na_value=None))),
        _opt((track != tid) | overlapping, f',"{S.TRUE_TID}":', _ints(tid)),
        _opt((default_lane | overlapping) & ~own_lane, f',"{S.SPAN_LANE}":', _json_texts(lane)),
        _opt((role != proc_role) & ~own_role, f',"{S.SPAN_ROLE}":', _json_texts(role)),
        _extra(sid, args_text(attrs, skip=(S.CHROME_CATEGORY,))),
    ]  # fmt: skip
    args = _join('"args":{', *members, "}")
    cat = _cats(sid, attrs)
    head = _join('"name":', _json_texts(spans["name"].to_numpy(object)), ",", cat, '"pid":',
                 _ints(pid), ',"tid":', _ints(track), ',"ts":', _us_texts(start))  # fmt: skip
    texts = _join('{"ph":"X",', head, ',"dur":', _us_texts(np.maximum(end - start, 0)), ",",
                  args, "}").to_pylist()  # fmt: skip
    special = np.flatnonzero(overlapping | (end < 0)).tolist()
    at = pa.array(special, pa.int64())
    heads, argss = head.take(at).to_pylist(), args.take(at).to_pylist()
    for k, i in enumerate(special):
        if overlapping[i]:  # an async slice: viewers pack these instead of dropping them
            ident = f'"id":"0x{int(sid[i]) & MASK64:x}"'
            texts[i] = f'{{"ph":"b",{heads[k]},{ident},{argss[k]}}}'
            if end[i] >= 0:
                close = heads[k].rsplit('"ts":', 1)[0] + f'"ts":{us(int(end[i]))}'
                texts[i] += f',\n{{"ph":"e",{close},{ident}}}'
        else:
            texts[i] = f'{{"ph":"B",{heads[k]},{argss[k]}}}'
    with progress.bar(n, "writing spans", "span") as shown:
        for lo in range(0, n, 8192):
            emit(",\n".join(texts[lo : lo + 8192]))
            shown.update(min(8192, n - lo))


def _join(*parts) -> pa.Array:
    """Arrow strings concatenated element-wise (a ``str`` part is the same for every row)."""
    return pc.binary_join_element_wise(*parts, "")


def _ints(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def _opt(mask: np.ndarray, prefix: str, values: pa.Array) -> pa.Array:
    """``prefix + value`` where ``mask``, else nothing."""
    return pc.if_else(pa.array(mask), _join(prefix, values), "")


def _json_texts(values: np.ndarray) -> pa.Array:
    """Each string as its JSON text (each distinct one encoded once); ``""`` for None."""
    codes, uniques = pd.factorize(values)
    texts = pa.array([encode_basestring(str(u)) for u in uniques] + [""], pa.string())
    return texts.take(pa.array(np.where(codes < 0, len(uniques), codes)))


def _us_texts(ns: np.ndarray) -> pa.Array:
    """:func:`us` of every value."""
    whole, frac = np.divmod(np.abs(ns), 1000)
    text = _ints(whole)
    dotted = _join(text, ".", pc.utf8_lpad(_ints(frac), 3, "0"))
    text = pc.if_else(pa.array(frac != 0), dotted, text)
    return pc.if_else(pa.array(ns < 0), _join("-", text), text)


def _extra(sid: np.ndarray, args: tuple[np.ndarray, pa.Array]) -> pa.Array:
    """``,<attributes>`` of each span that has any."""
    ids, texts = args
    if not len(ids):
        return pa.array([""] * len(sid), pa.string())
    pos = pd.Index(ids).get_indexer(sid)
    found = pos >= 0
    text = texts.take(pa.array(np.where(found, pos, 0))).cast(pa.string())
    return _opt(found, ",", text)


def _cats(sid: np.ndarray, attrs: Attrs) -> pa.Array:
    """``"cat":<its chrome.cat>,`` of each span that has a string one."""
    column = attrs.column(S.CHROME_CATEGORY)
    if column is None:
        return pa.array([""] * len(sid), pa.string())
    values = column.values.to_pylist() if column.kind == STR else column.python()
    strings = {i: v for i, v in zip(column.span_id.tolist(), values, strict=True)
               if type(v) is str}  # fmt: skip
    cats = pd.Series(strings, dtype=object).reindex(sid).to_numpy(object)
    have = ~pd.isna(cats)
    return _opt(have, '"cat":', _join(_json_texts(np.where(have, cats, None)), ","))


def _syncs(emit, syncs: pd.DataFrame, lane_tracks: dict, names: dict, span_track: tuple) -> None:
    """The flows a trace came with, as flows; instants for every other sync event, and a flow
    arrow per release → acquire edge of those."""
    syncs = syncs.reset_index(drop=True)
    flow = (syncs["obj"].str.startswith(S.FLOW_OBJ_PREFIX) & syncs["keyed"]).to_numpy(bool)
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
        seq_arg = f'"{S.SYNC_SEQ}":{seq},' if keyed else ""  # an unkeyed event has none
        emit(
            f'{{"ph":"i","s":"t","name":{encode_basestring(label)},"pid":{pid},"tid":{track},'
            f'"ts":{us(t)},"args":{{"{S.SYNC_OP}":"{op}","{S.SYNC_OBJ}":{encode_basestring(obj)},'
            f'{seq_arg}"{S.SYNC_SPAN}":{span},"{S.TRUE_TID}":{tid},'
            f'"{S.LANE}":{encode_basestring(lane)}}}}}'
        )
    if not len(syncs):
        return
    times = syncs["time"].tolist()
    keyed = syncs[syncs["keyed"].to_numpy(bool)]
    rel = keyed[keyed["op"] == S.SyncOp.RELEASE].drop_duplicates(["obj", "seq"])
    acq = keyed[keyed["op"] == S.SyncOp.ACQUIRE]
    pairs = acq.reset_index().merge(rel.reset_index(), on=["obj", "seq"], suffixes=("_a", "_r"))
    for flow, (obj, r, a) in enumerate(rows(pairs, ["obj", "index_r", "index_a"])):
        for ph, row in (("s", r), ("f", a)):
            pid, track = where[row]
            t = times[row]
            bp = ',"bp":"e"' if ph == "f" else ""
            emit(
                f'{{"ph":"{ph}","cat":"{S.SYNC_FLOW_CATEGORY}","name":{encode_basestring(obj)},'
                f'"id":{flow},"pid":{pid},"tid":{track},"ts":{us(t)}{bp}}}'
            )


def _flows(emit, flows: pd.DataFrame, span_track: tuple[np.ndarray, np.ndarray]) -> None:
    """Each flow event as a flow event (start ``s`` for a release, end ``f`` for an acquire)
    of its own category and id, on the track of the slice it is bound to, naming that slice
    (``sync.span``) so the reader binds it back to the same one."""
    if flows.empty:
        return
    span = flows["span_id"].to_numpy(np.int64)
    tid = flows["tid"].to_numpy(np.int64)
    track = remap_ints(span, *span_track, missing=tid)  # (span ids, their tracks)
    cat = _json_texts(flows["obj"].str.slice(len(S.FLOW_OBJ_PREFIX)).to_numpy(object))
    release = (flows["op"] == S.SyncOp.RELEASE).to_numpy(bool)
    texts = _join(
        pc.if_else(pa.array(release), '{"ph":"s","cat":', '{"ph":"f","cat":'), cat, ',"name":',
        cat, ',"id":', _ints(flows["seq"].to_numpy(np.int64)), ',"pid":',
        _ints(flows["pid"].to_numpy(np.int64)), ',"tid":', _ints(track), ',"ts":',
        _us_texts(flows["time"].to_numpy(np.int64)),
        pc.if_else(pa.array(release), "", ',"bp":"e"'), f',"args":{{"{S.TRUE_TID}":', _ints(tid),
        _opt(span != 0, f',"{S.SYNC_SPAN}":', _ints(span)), "}}",
    ).to_pylist()  # fmt: skip
    for lo in range(0, len(texts), 8192):
        emit(",\n".join(texts[lo : lo + 8192]))
