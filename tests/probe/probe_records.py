"""Helpers shared by the probe tests: which recorder twin, and decoding record files."""

from __future__ import annotations

from pathlib import Path

from fdprof.formats import records as R
from fdprof.probe.sdk import recorder as pyrec

IMPLS = ["python", "c"]


def recorder_class(impl: str):
    if impl == "c":
        from fdprof.probe.sdk._recorder import Recorder

        return Recorder
    return pyrec.Recorder


def decode(path: Path) -> tuple[R.FileHeader, list[tuple[int, int, int, tuple]]]:
    """``(header, [(kind, flags, tid, fields)])`` of a record file, strings resolved lazily."""
    data = Path(path).read_bytes()
    return R.read_header(data), [(k, f, t, flds) for k, f, t, flds, _ in R.iter_records(data)]


def spans_of(path: Path) -> dict[int, dict]:
    """Span id -> {name, t0, t1, parent, tid, attrs} from a record file."""
    _, recs = decode(path)
    strings = {f[0]: f[1] for k, _, _, f in recs if k == R.Kind.STRING}
    spans: dict[int, dict] = {}
    for kind, _flags, tid, f in recs:
        if kind == R.Kind.SPAN_BEGIN:
            sid, parent, name_id, _, t0 = f
            spans[sid] = {"name": strings[name_id], "t0": t0, "parent": parent, "tid": tid}
            spans[sid]["attrs"] = {}
        elif kind == R.Kind.SPAN_END:
            spans[f[0]]["t1"] = f[1]
        elif kind in (R.Kind.ATTR_INT, R.Kind.ATTR_FLOAT):
            spans[f[0]]["attrs"][strings[f[1]]] = f[3]
        elif kind == R.Kind.ATTR_STR:
            spans[f[0]]["attrs"][strings[f[1]]] = strings[f[2]]
        elif kind == R.Kind.ATTR_INTS:
            spans[f[0]]["attrs"][strings[f[1]]] = f[2]
    return spans
