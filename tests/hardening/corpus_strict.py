"""The last classes of bad input (issue 28), crafted in every reader: registered into
:data:`corpus.CASES` on import, built and judged the same way (exit 2, one line).

- JSON that is not JSON: ``NaN``, ``Infinity``, ``-Infinity`` and numbers past a double's
  range, wherever a reader parses JSON (Chrome events, args and metadata, OTLP requests,
  ``run.json``, py-spy's index and samples).
- One rule for every field every reader reads: of the wrong type, or out of its range, it is
  bad input naming the field (ranks as words, pids and names as blobs, enum ids as text,
  negative block ids, step ids, stream numbers, ids of the wrong length, unknown kinds).
- Symbolic-link loops where a reader opens a file or a directory.
"""

from __future__ import annotations

import json
import sqlite3
import struct
from pathlib import Path

from corpus import (
    GTID,
    PUSHPOP,
    _baseline,
    _chrome,
    _first_rec,
    _nsys,
    _one_rec,
    _otlp,
    _otlp_attr,
    _otlp_span,
    _record,
    _span,
    _string,
    _x,
    case,
)

from fdprof.formats import records as R

# -- JSON that is not JSON --------------------------------------------------------------------


def _raw_chrome(path: Path, event_text: str, lines: bool = False) -> Path:
    """A Chrome trace whose one event is written by hand (``json`` would refuse or quote the
    literal); with ``lines``, among valid events one per line, the layout the fast batch
    decoder reads."""
    other = json.dumps(_x())
    body = f"[\n{other},\n{event_text},\n{other}\n]" if lines else f"[{event_text}]"
    path.write_text('{"traceEvents":' + body + "}")
    return path


_NOT_JSON_EVENTS = {
    "ts-nan": '{"ph":"X","name":"a","ts":NaN,"dur":1,"pid":1,"tid":1}',
    "dur-infinity": '{"ph":"X","name":"a","ts":1,"dur":Infinity,"pid":1,"tid":1}',
    "args-minus-infinity": '{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1,'
    '"args":{"x":-Infinity}}',
    "args-1e999": '{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1,"args":{"x":1e999}}',
    "args-nested-nan": '{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1,'
    '"args":{"x":[1,{"y":NaN}]}}',
    "counter-nan": '{"ph":"C","name":"c","ts":1,"pid":1,"args":{"v":NaN}}',
    "instant-ts-infinity": '{"ph":"i","name":"m","ts":Infinity,"pid":1,"tid":1}',
    "metadata-nan": '{"ph":"M","name":"process_name","pid":1,"args":{"name":"p","x":NaN}}',
}

for _name, _text in _NOT_JSON_EVENTS.items():

    @case(f"chrome-not-json-{_name}")
    def _(root, text=_text):
        return _raw_chrome(root / "t.json", text)

    @case(f"chrome-not-json-{_name}-lines")
    def _(root, text=_text):
        return _raw_chrome(root / "t.json", text, lines=True)


@case("chrome-not-json-other-data-nan")
def _(root):
    path = root / "t.json"
    path.write_text('{"otherData":{"x":NaN},"traceEvents":[' + json.dumps(_x()) + "]}")
    return path


@case("chrome-not-json-nan-gzip")
def _(root):
    import gzip

    path = root / "t.json.gz"
    path.write_bytes(gzip.compress(b'[{"ph":"X","name":"a","ts":NaN,"dur":1,"pid":1,"tid":1}]'))
    return path


def _raw_otlp(path: Path, old: str, new: str, spans: list | None = None) -> Path:
    """An OTLP request with one value's JSON text replaced by hand (a literal)."""
    text = json.dumps(
        {
            "resourceSpans": [
                {"resource": {"attributes": []}, "scopeSpans": [{"spans": spans or [_otlp_span()]}]}
            ]
        }  # fmt: skip
    )
    assert old in text, old
    path.write_text(text.replace(old, new, 1) + "\n")
    return path


_NOT_JSON_OTLP = {
    "start-nan": ('"startTimeUnixNano": "1000"', '"startTimeUnixNano": NaN'),
    "end-infinity": ('"endTimeUnixNano": "2000"', '"endTimeUnixNano": Infinity'),
    "int-minus-infinity": ('{"intValue": "7"}', '{"intValue": -Infinity}'),
    "double-nan-literal": ('{"intValue": "7"}', '{"doubleValue": NaN}'),
    "double-1e999": ('{"intValue": "7"}', '{"doubleValue": 1e999}'),
}

for _name, (_old, _new) in _NOT_JSON_OTLP.items():

    @case(f"otlp-not-json-{_name}")
    def _(root, old=_old, new=_new):
        return _raw_otlp(root / "t.otlp.json", old, new)


@case("otlp-double-string-past-range")
def _(root):  # the protobuf mapping's strings are "NaN" and "Infinity", not a number past it
    return _otlp(
        root / "t.otlp.json", [_otlp_span(attributes=_otlp_attr({"doubleValue": "1e999"}))]
    )


def _manifest_text(root: Path, old: str, new: str) -> Path:
    """A real run directory whose run.json has one value replaced by a literal."""
    run = _baseline(root, lambda run, manifest: None)
    text = (run / "run.json").read_text()
    assert old in text, old
    (run / "run.json").write_text(text.replace(old, new, 1))
    return run


@case("native-manifest-not-json-nan")
def _(root):
    return _manifest_text(root, '"requests": 48', '"requests": NaN')


@case("native-manifest-not-json-infinity-pid")
def _(root):
    return _manifest_text(root, '"dp_rank": 0', '"dp_rank": Infinity')


@case("native-manifest-not-json-1e999")
def _(root):
    return _manifest_text(root, '"link_gbps": 0.1', '"link_gbps": 1e999')


def _pyspy(root: Path, index: list | str, events: list | str | None = None) -> Path:
    """A real run directory with a py-spy index (``PID`` in it: the run's first process) and
    one samples file, either given as objects or as JSON text written by hand."""
    run = _baseline(root, lambda run, manifest: None)
    pid = json.loads((run / "run.json").read_text())["processes"][0]["pid"]
    folder = run / "pyspy"
    folder.mkdir()

    def text(doc) -> str:
        return doc.replace("PID", str(pid)) if isinstance(doc, str) else json.dumps(doc)

    if isinstance(index, list):
        index = [
            {k: pid if v == "PID" else v for k, v in e.items()} if isinstance(e, dict) else e
            for e in index
        ]
    (folder / "index.json").write_text(text(index))
    samples = [{"ph": "B", "name": "f", "ts": 0, "pid": 1, "tid": 1}, {"ph": "E", "ts": 5,
               "pid": 1, "tid": 1}] if events is None else events  # fmt: skip
    (folder / "p.json").write_text(text(samples))
    return run


_ENTRY = {"pid": "PID", "ok": True, "file": "p.json", "rate": 100, "role": "engine"}

_PYSPY = {
    "index-nan-rate": ('[{"pid": PID, "ok": true, "file": "p.json", "rate": NaN}]', None),
    "event-ts-infinity": ([_ENTRY], '[{"ph": "B", "name": "f", "ts": Infinity, "tid": 1}]'),
    "index-pid-string": ([_ENTRY | {"pid": "one"}], None),
    "index-ok-string": ([_ENTRY | {"ok": "yes"}], None),
    "index-file-number": ([_ENTRY | {"file": 5}], None),
    "index-rate-negative": ([_ENTRY | {"rate": -100}], None),
    "index-started-float": ([_ENTRY | {"started_monotonic_ns": 1.5}], None),
    "index-entry-string": (["entry"], None),
    "event-ts-string": ([_ENTRY], [{"ph": "B", "name": "f", "ts": "soon", "tid": 1}]),
    "event-ts-negative": ([_ENTRY], [{"ph": "B", "name": "f", "ts": -5, "tid": 1}]),
    "event-tid-list": ([_ENTRY], [{"ph": "B", "name": "f", "ts": 1, "tid": [1]}]),
    "event-name-number": ([_ENTRY], [{"ph": "B", "name": 5, "ts": 1, "tid": 1}]),
    "event-line-string": (
        [_ENTRY],
        [{"ph": "B", "name": "f", "ts": 1, "tid": 1, "args": {"line": "ten"}}],
    ),  # fmt: skip
    "event-number": ([_ENTRY], [5]),
}

for _name, (_index, _events) in _PYSPY.items():

    @case(f"native-pyspy-{_name}")
    def _(root, index=_index, events=_events):
        return _pyspy(root, index, events)


# -- one rule for every field: wrong type or out of range -------------------------------------

_CHROME_TYPES = {
    "dp-rank-words": {"ph": "M", "name": "process_name", "pid": 1,
                      "args": {"name": "p", "fd.dp_rank": "zero"}},
    "dp-rank-below-minus-one": {"ph": "M", "name": "process_name", "pid": 1,
                                "args": {"name": "p", "fd.dp_rank": -5}},
    "tp-rank-list": {"ph": "M", "name": "process_name", "pid": 1,
                     "args": {"name": "p", "fd.tp_rank": [1]}},
    "tp-rank-float": {"ph": "M", "name": "process_name", "pid": 1,
                      "args": {"name": "p", "fd.tp_rank": 1.5}},
    "anchored-string": {"ph": "M", "name": "process_name", "pid": 1,
                        "args": {"name": "p", "fd.anchored": "yes"}},
    "role-number": {"ph": "M", "name": "process_name", "pid": 1,
                    "args": {"name": "p", "fd.role": 3}},
    "thread-name-object": {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1,
                           "args": {"name": {"n": 1}}},
    "sort-index-string": {"ph": "M", "name": "process_sort_index", "pid": 1,
                          "args": {"sort_index": "first"}},
    "labels-number": {"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": 5}},
    "device-string": _x(cat="kernel", args={"device": "cuda0", "stream": 7}),
    "stream-negative": _x(cat="kernel", args={"device": 0, "stream": -7}),
    "kv-block-negative": _x(args={"kv.gpu_read": [3, -1]}),
    "kv-cpu-write-negative": _x(args={"kv.cpu_write": [-4]}),
    "step-negative": _x(args={"fd.step": -3}),
    "bp-number": {"ph": "f", "ts": 1, "pid": 1, "tid": 1, "cat": "c", "id": 1, "bp": 1},
}  # fmt: skip

for _name, _event in _CHROME_TYPES.items():

    @case(f"chrome-type-{_name}")
    def _(root, event=_event):
        return _chrome(root / "t.json", [event, _x()])


def _resource(*attrs: tuple[str, dict]) -> dict:
    pid = [("process.pid", {"intValue": "42"})]
    given = dict(pid + list(attrs))
    return {"attributes": [{"key": k, "value": v} for k, v in given.items()]}


def _span_attrs(*attrs: tuple[str, dict]) -> list:
    given = {"thread.id": {"intValue": "7"}} | dict(attrs)
    return [_otlp_span(attributes=[{"key": k, "value": v} for k, v in given.items()])]


_OTLP_TYPES = {
    "dp-rank-words": {"resource": _resource(("fd.dp_rank", {"stringValue": "zero"}))},
    "dp-rank-below-minus-one": {"resource": _resource(("fd.dp_rank", {"intValue": "-5"}))},
    "tp-rank-double": {"resource": _resource(("fd.tp_rank", {"doubleValue": 1.5}))},
    "tp-rank-bool": {"resource": _resource(("fd.tp_rank", {"boolValue": True}))},
    "pid-string": {"resource": _resource(("process.pid", {"stringValue": "42"}))},
    "pid-bytes": {"resource": _resource(("process.pid", {"bytesValue": "AAAAKg=="}))},
    "pid-double": {"resource": _resource(("process.pid", {"doubleValue": 42.0}))},
    "service-name-int": {"resource": _resource(("service.name", {"intValue": "5"}))},
    "role-bytes": {"resource": _resource(("fd.role", {"bytesValue": "d29ya2Vy"}))},
    "process-name-bytes": {"resource": _resource(("fd.process_name", {"bytesValue": "AAE="}))},
    "process-name-int": {"resource": _resource(("fd.process_name", {"intValue": "3"}))},
    "anchored-string": {"resource": _resource(("fd.anchored", {"stringValue": "true"}))},
    "thread-id-digits": {"spans": _span_attrs(("thread.id", {"stringValue": "7"}))},
    "thread-id-double": {"spans": _span_attrs(("thread.id", {"doubleValue": 7.0}))},
    "thread-name-int": {"spans": _span_attrs(("thread.name", {"intValue": "1"}))},
    "span-lane-bytes": {"spans": _span_attrs(("fd.span_lane", {"bytesValue": "AAE="}))},
    "unended-string": {"spans": _span_attrs(("fd.unended", {"stringValue": "yes"}))},
    "kv-block-negative": {"spans": _span_attrs(
        ("kv.gpu_write", {"arrayValue": {"values": [{"intValue": "-2"}]}}))},
    "step-negative": {"spans": _span_attrs(("fd.step", {"intValue": "-1"}))},
    "span-id-long": {"spans": [_otlp_span(spanId="ab" * 16)]},
    "trace-id-short": {"spans": [_otlp_span(traceId="ab" * 8)]},
    "parent-id-base64-long": {"spans": [_otlp_span(parentSpanId="AAAAAAAAAAAAAAAAAAAAAA==")]},
    "link-span-id-long": {"spans": [_otlp_span(links=[{"traceId": "ab" * 16,
                                                       "spanId": "cd" * 16}])]},
    "kind-unknown": {"spans": [_otlp_span(kind=99)]},
    "kind-words": {"spans": [_otlp_span(kind="SPAN_KIND_SOMETIMES")]},
    "status-code-unknown": {"spans": [_otlp_span(status={"code": 7})]},
    "status-message-number": {"spans": [_otlp_span(status={"code": 2, "message": 5})]},
    "status-string": {"spans": [_otlp_span(status="ok")]},
    "start-negative": {"spans": [_otlp_span(startTimeUnixNano="-5")]},
    "event-time-negative": {"spans": [_otlp_span(events=[{"name": "sync", "timeUnixNano": "-1",
        "attributes": [{"key": "sync.op", "value": {"stringValue": "release"}},
                       {"key": "sync.obj", "value": {"stringValue": "q"}}]}])]},
}  # fmt: skip

for _name, _parts in _OTLP_TYPES.items():

    @case(f"otlp-type-{_name}")
    def _(root, parts=_parts):
        return _otlp(root / "t.otlp.json", parts.get("spans"), parts.get("resource"))


@case("otlp-type-scope-name-number")
def _(root):
    request = {"resourceSpans": [{"resource": _resource(), "scopeSpans": [
        {"scope": {"name": 5}, "spans": [_otlp_span()]}]}]}  # fmt: skip
    return _otlp(root / "t.otlp.json", request=request)


def _nsys_edit(root: Path, *statements: tuple) -> Path:
    """An export with one range, then edited by SQL statements ``(sql, params)``."""
    path = _nsys(root / "t.sqlite", nvtx=[(10, 20, PUSHPOP, "r", GTID)],
                 kernels=[(100, 200, 0, 7, GTID, 1, 1)], runtime=[(90, 95, GTID, 1)])  # fmt: skip
    db = sqlite3.connect(path)
    for sql, params in statements:
        db.execute(sql, params)
    db.commit()
    db.close()
    return path


_MEMCPY = (
    "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId "
    "INTEGER, streamId INTEGER, globalPid INTEGER, copyKind INTEGER, bytes INTEGER)"
)
#: no declared types: SQLite keeps '59' as text (an INTEGER column would convert it)
_ENUM = "CREATE TABLE {} (id, name)"
_NSYS_TYPES = {
    "enum-event-type-id-text": [(_ENUM.format("ENUM_NSYS_EVENT_TYPE"), ()),
        ("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES ('59', 'NvtxPushPopRange')", ())],
    "enum-event-type-name-blob": [(_ENUM.format("ENUM_NSYS_EVENT_TYPE"), ()),
        ("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (59, ?)", (b"NvtxPushPopRange",))],
    "enum-memcpy-id-text": [(_ENUM.format("ENUM_CUDA_MEMCPY_OPER"), ()),
        ("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES ('1', 'CUDA_MEMCPY_KIND_HTOD')", ()),
        (_MEMCPY, ()), ("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (300, 400, 0, 7, ?, 1, "
                        "64)", (GTID,))],
    "string-id-text": [("DROP TABLE StringIds", ()), ("CREATE TABLE StringIds (id, value)", ()),
        ("INSERT INTO StringIds VALUES ('1', 'gemm')", ())],
    "string-value-blob": [("UPDATE StringIds SET value = ? WHERE id = 1", (b"\xff\x00",))],
    "processes-name-blob": [("CREATE TABLE PROCESSES (pid INTEGER, name TEXT)", ()),
        ("INSERT INTO PROCESSES VALUES (10, ?)", (b"\x00\x01",))],
    "processes-pid-text": [("CREATE TABLE PROCESSES (pid, name)", ()),
        ("INSERT INTO PROCESSES VALUES ('10', 'python')", ())],
    "thread-names-id-text": [("CREATE TABLE ThreadNames (nameId INTEGER, globalTid INTEGER)", ()),
        ("INSERT INTO ThreadNames VALUES ('main', ?)", (GTID,))],
    "nvtx-domain-text": [("ALTER TABLE NVTX_EVENTS ADD COLUMN domainId INTEGER", ()),
        ("UPDATE NVTX_EVENTS SET domainId = 'default'", ())],
    "nvtx-payload-text": [("ALTER TABLE NVTX_EVENTS ADD COLUMN int64Value INTEGER", ()),
        ("UPDATE NVTX_EVENTS SET int64Value = 'span seven'", ())],
    "nvtx-event-type-negative": [("UPDATE NVTX_EVENTS SET eventType = -59", ())],
    "kernel-short-name-text": [("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 'gemm'", ())],
    "kernel-device-negative": [("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = -1", ())],
    "kernel-stream-negative": [("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = -7", ())],
    "kernel-pid-negative": [("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = -5", ())],
    "kernel-correlation-negative": [
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = -1", ())],
    "runtime-name-id-text": [("ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME ADD COLUMN nameId "
                              "INTEGER", ()),
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 'cudaLaunchKernel'", ())],
}  # fmt: skip

for _name, _statements in _NSYS_TYPES.items():

    @case(f"nsys-type-{_name}")
    def _(root, statements=_statements):
        return _nsys_edit(root, *statements)


@case("nsys-type-memcpy-copy-kind-text")
def _(root):
    insert = "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (300, 400, 0, 7, ?, 'HtoD', 64)"
    return _nsys_edit(root, (_MEMCPY, ()), (insert, (GTID,)))


def _ints_record(key: str, values: list[int]) -> bytes:
    body = R.ATTR_INTS.pack(1, 2, len(values)) + struct.pack(f"<{len(values)}i", *values)
    return (
        _string(1, "execute_model")
        + _string(2, key)
        + _span(1, 1)
        + _record(R.Kind.ATTR_INTS, body)
    )


@case("native-type-kv-block-negative")
def _(root):
    return _one_rec(root, _ints_record("kv.gpu_read", [4, -1]))


@case("native-type-kv-cpu-write-negative")
def _(root):
    return _one_rec(root, _ints_record("kv.cpu_write", [-2147483648]))


@case("native-type-step-negative")
def _(root):
    attr = R.ATTR_INT.pack(1, 2, 0, -2)
    body = _string(1, "step") + _string(2, "fd.step") + _span(1, 1)
    return _one_rec(root, body + _record(R.Kind.ATTR_INT, attr))


@case("native-type-string-not-utf8")
def _(root):
    bad = _record(R.Kind.STRING, R.STRING.pack(1) + b"exec\xff\xfemodel")
    return _one_rec(root, bad + _span(1, 1))


@case("native-type-context-flags-unknown")
def _(root):
    ctx = _record(R.Kind.CONTEXT, R.CONTEXT.pack(1, b"\x01" * 16, 2))
    ctx = ctx[:1] + b"\x07" + ctx[2:]  # flags: neither parent (0) nor link (1)
    return _one_rec(root, _string(1, "s") + _span(1, 1) + ctx)


@case("native-type-header-rank-below-minus-one")
def _(root):
    from corpus import _run

    header = R.pack_header(100, 0, 1_700_000_000_000_000_000, "worker", -7, 0)
    return _run(root, {"worker-0-100.rec": header + _string(1, "s") + _span(1, 1)})


for _key, _value in (("dp_rank", -5), ("tp_rank", -2), ("tp_rank", "one"), ("exitcode", "0")):

    @case(f"native-type-manifest-{_key}-{type(_value).__name__}-{_value}")
    def _(root, key=_key, value=_value):
        return _baseline(root, lambda run, manifest: manifest["processes"][0].update({key: value}))


# -- symbolic-link loops ----------------------------------------------------------------------


@case("native-loop-record")
def _(root):
    def edit(run, manifest):
        rec = _first_rec(run, manifest)
        rec.unlink()
        rec.symlink_to(rec.name)

    return _baseline(root, edit)


@case("native-loop-record-pair")
def _(root):
    def edit(run, manifest):
        rec = _first_rec(run, manifest)
        rec.unlink()
        rec.symlink_to("other.rec")
        (run / "other.rec").symlink_to(rec.name)

    return _baseline(root, edit)


@case("native-loop-manifest")
def _(root):
    run = _baseline(root, lambda run, manifest: None)
    (run / "run.json").unlink()
    (run / "run.json").symlink_to("run.json")
    return run


@case("native-loop-run-directory")
def _(root):
    run = root / "run"
    run.symlink_to("run")
    return run


@case("file-loop")
def _(root):
    path = root / "t.json"
    path.symlink_to("t.json")
    return path
