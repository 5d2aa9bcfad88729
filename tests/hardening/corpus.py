"""Crafted malformed inputs, one builder per case, built at test time (no blobs checked in).

Each case is a class of bad input a trace from someone else's machine can be: a resource bomb
(gzip, sparse files, huge lines, deep nesting, declared counts), a field of the wrong type in
each format, a record that lies about its size, a file that is not a file. ``CASES`` maps a
name (``<format>-<class>``) to a builder ``build(root) -> path`` that writes the case under
``root`` and returns what to hand to fdprof. Every case must end in seconds with exit 2 and
one line on stderr, under a memory cap, whatever command reads it.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path

from fdprof.formats import records as R
from fdprof.formats.rundir import RUN_FORMAT

TRACES = Path(__file__).resolve().parents[2] / "traces"
BASELINE = TRACES / "baseline"
GiB = 1 << 30
MiB = 1 << 20

Builder = Callable[[Path], Path]
CASES: dict[str, Builder] = {}


def case(name: str):
    def register(build: Builder) -> Builder:
        assert name not in CASES, name
        CASES[name] = build
        return build

    return register


# -- helpers ----------------------------------------------------------------------------------


def _gzip_bomb(path: Path, prefix: bytes, unit: bytes, inflated: int, suffix: bytes = b"") -> Path:
    """A gzip file inflating to ``inflated`` bytes: ``prefix``, ``unit`` repeated, ``suffix``.
    Built as many identical gzip members (one compressed once), so it takes a moment to write
    however large it inflates; a reader sees one stream."""
    block = unit * max(1, MiB // len(unit))
    member = gzip.compress(block, compresslevel=9)
    with path.open("wb") as f:
        f.write(gzip.compress(prefix))
        for _ in range(inflated // len(block)):
            f.write(member)
        f.write(gzip.compress(suffix))
    return path


def _json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _chrome(path: Path, events: list) -> Path:
    return _json(path, {"traceEvents": events})


def _x(**over) -> dict:
    return {"ph": "X", "name": "execute_model", "ts": 10, "dur": 5, "pid": 1, "tid": 2} | over


def _nested(depth: int, leaf=0, kind: str = "list"):
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


def _otlp_span(**over) -> dict:
    return {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "execute_model",
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
        "attributes": [{"key": "thread.id", "value": {"intValue": "7"}}],
    } | over


def _otlp(path: Path, spans: list | None = None, resource=None, request=None) -> Path:
    if request is None:
        res = resource if resource is not None else {
            "attributes": [{"key": "process.pid", "value": {"intValue": "42"}}]
        }  # fmt: skip
        spans = spans if spans is not None else [_otlp_span()]
        request = {"resourceSpans": [{"resource": res, "scopeSpans": [{"spans": spans}]}]}
    path.write_text(json.dumps(request) + "\n")
    return path


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _otlp_attr(value) -> list:
    return [{"key": "x", "value": value}]


def _record(kind: int, payload: bytes, tid: int = 7, length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return R.RECORD_HEADER.pack(kind, 0, n, tid) + payload


def _string(sid: int, text: str) -> bytes:
    return _record(R.Kind.STRING, R.STRING.pack(sid) + text.encode())


def _span(sid: int, name_id: int, t0: int = 100, t1: int = 200) -> bytes:
    return _record(R.Kind.SPAN_BEGIN, R.SPAN_BEGIN.pack(sid, 0, name_id, 0, t0)) + _record(
        R.Kind.SPAN_END, R.SPAN_END.pack(sid, t1)
    )


def _rec_header(pid: int, role: str = "worker") -> bytes:
    return R.pack_header(pid, 0, 1_700_000_000_000_000_000, role, 0, 0)


def _run(root: Path, records: dict[str, bytes], manifest: dict | None = None) -> Path:
    """A run directory of record files (name -> bytes) and a manifest naming them."""
    run = root / "run"
    run.mkdir()
    procs = []
    for i, (name, data) in enumerate(records.items()):
        (run / name).write_bytes(data)
        procs.append({"pid": 100 + i, "role": "worker", "name": f"worker-{i}", "dp_rank": 0,
                      "record": name, "exitcode": 0})  # fmt: skip
    doc = {"format": RUN_FORMAT, "status": "ok", "config": {}, "processes": procs,
           "results": {}, "error": None} | (manifest or {})  # fmt: skip
    (run / "run.json").write_text(json.dumps(doc))
    return run


def _one_rec(root: Path, body: bytes, pid: int = 100) -> Path:
    return _run(root, {f"worker-0-{pid}.rec": _rec_header(pid) + body})


def _baseline(root: Path, edit: Callable[[Path, dict], None]) -> Path:
    """A copy of a real run directory, its manifest passed to ``edit`` (and written back)."""
    run = root / "run"
    shutil.copytree(BASELINE, run)
    manifest = json.loads((run / "run.json").read_text())
    edit(run, manifest)
    (run / "run.json").write_text(json.dumps(manifest))
    return run


def _first_rec(run: Path, manifest: dict) -> Path:
    return run / manifest["processes"][0]["record"]


def _nsys(path: Path, nvtx: list[tuple] = (), kernels: list[tuple] = (), runtime=()) -> Path:
    """An Nsight Systems export with NVTX ranges (start, end, eventType, text, globalTid) and
    kernels (start, end, deviceId, streamId, globalPid, correlationId, shortName)."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType "
               "INTEGER NOT NULL, text TEXT, globalTid INTEGER)")  # fmt: skip
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO StringIds VALUES (1, 'gemm')")
    db.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT)")
    db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, 'x')")
    db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId "
               "INTEGER, streamId INTEGER, globalPid INTEGER, correlationId INTEGER, shortName "
               "INTEGER)")  # fmt: skip
    db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid "
               "INTEGER, correlationId INTEGER)")  # fmt: skip
    db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?, ?)", nvtx)
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?)", kernels)
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?)", runtime)
    db.commit()
    db.close()
    return path


# NVTX push/pop range type, and a thread of process 10
PUSHPOP = 59
GTID = (1 << 48) | (10 << 24) | 11
KERNEL = (100, 200, 0, 7, GTID, 1, 1)


def _kernel(**over) -> tuple:
    names = ("start", "end", "deviceId", "streamId", "globalPid", "correlationId", "shortName")
    row = dict(zip(names, KERNEL, strict=True)) | over
    return tuple(row[n] for n in names)


# -- resource bombs ---------------------------------------------------------------------------

_EVENT = json.dumps(_x()).encode() + b",\n"


@case("chrome-gzip-bomb-events")
def _(root):  # 3 GiB of valid events in ~3 MB
    return _gzip_bomb(root / "t.json.gz", b'{"traceEvents":[\n', _EVENT, 3 * GiB)


@case("chrome-gzip-bomb-one-string")
def _(root):  # one event whose name is 3 GiB long
    return _gzip_bomb(root / "t.json.gz", b'{"traceEvents":[{"ph":"X","name":"', b"a", 3 * GiB)


@case("chrome-gzip-bomb-whitespace")
def _(root):
    return _gzip_bomb(root / "t.json.gz", b'{"traceEvents":[', b" ", 3 * GiB)


@case("chrome-gzip-bomb-minified")
def _(root):  # valid events, all on one line
    return _gzip_bomb(root / "t.json.gz", b"[", _EVENT.rstrip(b"\n"), 3 * GiB)


@case("otlp-gzip-bomb-one-line")
def _(root):
    head = b'{"resourceSpans":[{"scopeSpans":[{"spans":['
    span = json.dumps(_otlp_span()).encode() + b","
    return _gzip_bomb(root / "t.otlp.json.gz", head, span, 3 * GiB)


@case("chrome-sparse-8g")
def _(root):  # 8 GiB on paper, a few bytes on disk: NULs after an open string
    path = root / "t.json"
    path.write_bytes(b'{"traceEvents":[{"ph":"X","name":"')
    os.truncate(path, 8 * GiB)
    return path


@case("chrome-huge-line-garbage")
def _(root):  # one 200 MB line that is not JSON
    path = root / "t.json"
    with path.open("wb") as f:
        f.write(b'{"traceEvents":[')
        f.write(b"x" * (200 * MiB))
    return path


@case("chrome-huge-event")
def _(root):  # one complete event of 100 MB on one line
    path = root / "t.json"
    with path.open("wb") as f:
        f.write(b'{"traceEvents":[{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1,"name":"')
        f.write(b"n" * (100 * MiB))
        f.write(b'"}]}')
    return path


@case("chrome-nested-900-list")
def _(root):
    return _chrome(root / "t.json", [_x(args={"deep": _nested(900)})])


@case("chrome-nested-900-object")
def _(root):
    return _chrome(root / "t.json", [_x(args={"deep": _nested(900, kind="object")})])


@case("chrome-nested-100k")
def _(root):
    path = root / "t.json"
    path.write_text(
        '{"traceEvents":[{"ph":"X","ts":1,"args":{"a":' + "[" * 100_000 + "]" * 100_000 + "}}]}"
    )  # noqa: E501
    return path


@case("chrome-nested-900-otherdata")
def _(root):
    return _json(root / "t.json", {"otherData": _nested(900), "traceEvents": [_x()]})


def _gz_lines(path: Path, lines) -> Path:
    with gzip.open(path, "wt", compresslevel=1) as f:
        for line in lines:
            f.write(line)
    return path


@case("chrome-million-processes")
def _(root):  # 10^6 process_name metadata events
    lines = (f'{{"ph":"M","name":"process_name","pid":{p},"args":{{"name":"p{p}"}}}},\n'
             for p in range(1_000_000))  # fmt: skip
    return _gz_lines(root / "t.json.gz", ['{"traceEvents":[\n', *lines, json.dumps(_x()), "]}"])


@case("chrome-million-pids")
def _(root):  # 10^6 spans, each of its own process
    lines = (f'{{"ph":"X","name":"a","ts":1,"dur":1,"pid":{p},"tid":1}},\n'
             for p in range(1_000_000))  # fmt: skip
    return _gz_lines(root / "t.json.gz", ["[\n", *lines, json.dumps(_x()), "]"])


@case("chrome-million-keys")
def _(root):  # 10^6 distinct attribute keys
    lines = (f'{{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1,"args":{{"k{i}":1}}}},\n'
             for i in range(1_000_000))  # fmt: skip
    return _gz_lines(root / "t.json.gz", ["[\n", *lines, json.dumps(_x()), "]"])


@case("otlp-million-resources")
def _(root):
    # one resource's JSON, its pid and span id filled in as text: what json.dumps would write
    # for each, without building a million dicts (seconds, not tens of seconds, to make)
    one = json.dumps({"resource": {"attributes": [{"key": "process.pid",
                                                   "value": {"intValue": "PID"}}]},
                      "scopeSpans": [{"spans": [_otlp_span(spanId="SPAN")]}]})  # fmt: skip

    def request(lo):
        rs = (one.replace('"PID"', f'"{p}"').replace('"SPAN"', f'"{p + 1:016x}"')
              for p in range(lo, lo + 10_000))  # fmt: skip
        return '{"resourceSpans": [' + ", ".join(rs) + "]}\n"

    return _gz_lines(root / "t.otlp.json.gz", (request(lo) for lo in range(0, 1_000_000, 10_000)))


def _otlp_nested(root: Path, opening: str, closing: str, levels: int) -> Path:
    """An OTLP span whose attribute value nests ``levels`` AnyValues deep (JSON text built by
    hand: the encoder would run out of stack)."""
    value = opening * levels + '{"intValue": "1"}' + closing * levels
    span = json.dumps(_otlp_span(attributes=_otlp_attr("VALUE"))).replace('"VALUE"', value)
    request = '{"resourceSpans": [{"scopeSpans": [{"spans": [' + span + "]}]}]}"
    path = root / "t.otlp.json"
    path.write_text(request + "\n")
    return path


@case("otlp-nested-900-kvlist")
def _(root):  # 4 JSON levels a kvlist: 900 deep
    return _otlp_nested(root, '{"kvlistValue": {"values": [{"key": "k", "value": ', "}]}}", 225)


@case("otlp-nested-900-array")
def _(root):  # 3 JSON levels an array
    return _otlp_nested(root, '{"arrayValue": {"values": [', "]}}", 300)


@case("native-time-past-int64")
def _(root):  # a monotonic time that wraps once the clock anchor is added
    return _one_rec(root, _string(1, "s") + _span(1, 1, t0=2**63 - 10, t1=2**63 - 5))


@case("native-end-past-int64")
def _(root):
    return _one_rec(root, _string(1, "s") + _span(1, 1, t0=100, t1=2**63 - 5))


@case("native-string-id-2e31")
def _(root):  # a string's id edited: the span names an id no record defines
    return _one_rec(root, _string(2**31, "execute_model") + _span(1, 1))


@case("native-string-id-max")
def _(root):
    return _one_rec(root, _string(2**32 - 1, "execute_model") + _span(1, 1))


@case("native-int-list-count-2e31")
def _(root):
    body = _string(1, "s") + _string(2, "kv.gpu_read") + _span(1, 1)
    ints = R.ATTR_INTS.pack(1, 2, 2**31) + struct.pack("<3i", 1, 2, 3)
    return _one_rec(root, body + _record(R.Kind.ATTR_INTS, ints))


@case("native-count-past-end")
def _(root):  # the last record's fixed fields run past the end of the file
    return _one_rec(root, _string(1, "s") + _span(1, 1) + _record(R.Kind.SPAN_BEGIN, b""))


@case("native-short-record")
def _(root):  # a record shorter than its kind: its fields would be read from the next one
    short = _record(R.Kind.SPAN_END, R.SPAN_END.pack(1, 5)[:4])
    return _one_rec(root, _string(1, "s") + short + _span(2, 1))


@case("native-short-string")
def _(root):
    return _one_rec(root, _record(R.Kind.STRING, b"\x01\x00") + _span(1, 1))


@case("native-record-dev-zero")
def _(root):
    def edit(run, manifest):
        rec = _first_rec(run, manifest)
        rec.unlink()
        rec.symlink_to("/dev/zero")

    return _baseline(root, edit)


@case("native-record-fifo")
def _(root):
    def edit(run, manifest):
        rec = _first_rec(run, manifest)
        rec.unlink()
        os.mkfifo(rec)

    return _baseline(root, edit)


@case("native-record-directory")
def _(root):
    def edit(run, manifest):
        rec = _first_rec(run, manifest)
        rec.unlink()
        rec.mkdir()

    return _baseline(root, edit)


@case("native-manifest-dev-zero")
def _(root):
    run = _baseline(root, lambda run, manifest: None)
    (run / "run.json").unlink()
    (run / "run.json").symlink_to("/dev/zero")
    return run


@case("native-manifest-fifo")
def _(root):
    run = _baseline(root, lambda run, manifest: None)
    (run / "run.json").unlink()
    os.mkfifo(run / "run.json")
    return run


@case("native-million-processes")
def _(root):
    def edit(run, manifest):
        manifest["processes"] = [{"pid": p, "role": "worker", "record": f"w-{p}.rec"}
                                 for p in range(1_000_000)]  # fmt: skip

    return _baseline(root, edit)


@case("native-manifest-nested-900")
def _(root):
    return _baseline(root, lambda run, manifest: manifest.update(config=_nested(900)))


# -- wrong types: Chrome ----------------------------------------------------------------------

for _ph in "BEMCXibens":

    @case(f"chrome-args-list-{'lower-' if _ph.islower() else ''}{_ph}")
    def _(root, ph=_ph):
        event = {"ph": ph, "name": "process_name" if ph == "M" else "a", "ts": 5, "pid": 1,
                 "tid": 1, "id": 1, "cat": "c", "args": [1, 2]}  # fmt: skip
        return _chrome(root / "t.json", [event])


for _ph, _args in (("B", "text"), ("C", 3), ("M", "x"), ("E", 7.5), ("X", True)):

    @case(f"chrome-args-{type(_args).__name__}-{_ph}")
    def _(root, ph=_ph, args=_args):
        events = [{"ph": "B", "name": "a", "ts": 1, "pid": 1, "tid": 1}] if ph == "E" else []
        name = "process_name" if ph == "M" else "a"
        return _chrome(root / "t.json", [*events, {"ph": ph, "name": name, "ts": 5, "pid": 1,
                                                   "tid": 1, "args": args}])  # fmt: skip


_CHROME_FIELDS = {
    "ts-string": _x(ts="soon"),
    "ts-null": _x(ts=None),
    "ts-missing": {k: v for k, v in _x().items() if k != "ts"},
    "ts-list": _x(ts=[1]),
    "ts-2e70": _x(ts=2**70),
    "ts-1e300": _x(ts=1e300),
    "dur-string": _x(dur="long"),
    "dur-2e70": _x(dur=2**70),
    "pid-list": _x(pid=[1]),
    "pid-object": _x(pid={"a": 1}),
    "pid-2e70": _x(pid=2**70),
    "tid-float": _x(tid=1.5),
    "name-number": _x(name=5),
    "name-object": _x(name={"a": 1}),
    "name-null": _x(name=None),
    "cat-list": _x(cat=["kernel"]),
    "ph-list": _x(ph=["X"]),
    "span-id-string": _x(args={"fd.span_id": "one"}),
    "span-id-2e70": _x(args={"fd.span_id": 2**70}),
    "parent-id-list": _x(args={"fd.parent_id": [1]}),
    "span-lane-number": _x(args={"fd.span_lane": 5}),
    "sync-seq-2e70": {
        "ph": "i",
        "ts": 1,
        "pid": 1,
        "tid": 1,
        "args": {"sync.op": "release", "sync.obj": "q", "sync.seq": 2**70},
    },
    "sync-op-list": {
        "ph": "i",
        "ts": 1,
        "pid": 1,
        "tid": 1,
        "args": {"sync.op": ["release"], "sync.obj": "q"},
    },
    "instant-ts-string": {"ph": "i", "ts": "x", "pid": 1, "tid": 1},
    "begin-ts-null": {"ph": "B", "ts": None, "pid": 1, "tid": 1, "name": "a"},
    "counter-value-string": {"ph": "C", "ts": 1, "pid": 1, "name": "c", "args": {"v": "high"}},
    "counter-value-list": {"ph": "C", "ts": 1, "pid": 1, "name": "c", "args": {"v": [1]}},
    "counter-name-list": {"ph": "C", "ts": 1, "pid": 1, "name": ["c"], "args": {"v": 1}},
    "flow-id-list": {"ph": "s", "ts": 1, "pid": 1, "tid": 1, "cat": "c", "id": [1]},
    "flow-cat-list": {"ph": "s", "ts": 1, "pid": 1, "tid": 1, "cat": ["c"], "id": 1},
    "async-cat-object": {"ph": "b", "ts": 1, "pid": 1, "tid": 1, "cat": {"c": 1}, "id": 1},
    "metadata-name-list": {"ph": "M", "name": ["process_name"], "pid": 1, "args": {}},
    "metadata-dp-rank-list": {
        "ph": "M",
        "name": "process_name",
        "pid": 1,
        "args": {"name": "p", "fd.dp_rank": [0]},
    },
}

for _name, _event in _CHROME_FIELDS.items():

    @case(f"chrome-{_name}")
    def _(root, event=_event):
        return _chrome(root / "t.json", [event])


@case("chrome-event-number")
def _(root):
    return _chrome(root / "t.json", [1, 2, 3])


@case("chrome-trace-events-object")
def _(root):
    return _json(root / "t.json", {"traceEvents": {"ph": "X"}})


@case("chrome-trace-events-string")
def _(root):
    return _json(root / "t.json", {"traceEvents": "[]"})


@case("chrome-duplicate-span-ids")
def _(root):
    return _chrome(root / "t.json", [_x(args={"fd.span_id": 7}), _x(args={"fd.span_id": 7})])


@case("chrome-lone-surrogate")
def _(root):
    path = root / "t.json"
    path.write_text('{"traceEvents":[{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1,"name":"\\ud800"}]}')
    return path


@case("chrome-invalid-utf8")
def _(root):
    path = root / "t.json"
    path.write_bytes(b'{"traceEvents":[{"ph":"X","ts":1,"name":"\xff\xfe"}]}')
    return path


@case("chrome-truncated-gzip")
def _(root):
    path = root / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": [_x()] * 100}).encode())[:60])
    return path


# -- wrong types: OTLP ------------------------------------------------------------------------

_OTLP_CASES: dict[str, Callable[[Path], Path]] = {
    "resource-spans-object": lambda p: _otlp(p, request={"resourceSpans": {"a": 1}}),
    "resource-spans-string": lambda p: _otlp(p, request={"resourceSpans": "x"}),
    "resource-string": lambda p: _otlp(p, resource="r"),
    "resource-attributes-object": lambda p: _otlp(p, resource={"attributes": {"a": 1}}),
    "pid-list": lambda p: _otlp(
        p, resource={"attributes": [{"key": "process.pid", "value": {"intValue": ["1"]}}]}
    ),
    "scope-spans-number": lambda p: _otlp(p, request={"resourceSpans": [{"scopeSpans": 3}]}),
    "spans-object": lambda p: _otlp(
        p, request={"resourceSpans": [{"scopeSpans": [{"spans": {"a": 1}}]}]}
    ),
    "span-number": lambda p: _otlp(p, [5]),
    "start-list": lambda p: _otlp(p, [_otlp_span(startTimeUnixNano=[1])]),
    "start-words": lambda p: _otlp(p, [_otlp_span(startTimeUnixNano="noon")]),
    "start-2e70": lambda p: _otlp(p, [_otlp_span(startTimeUnixNano=str(2**70))]),
    "start-5000-digits": lambda p: _otlp(p, [_otlp_span(startTimeUnixNano="9" * 5000)]),
    "end-null": lambda p: _otlp(p, [_otlp_span(endTimeUnixNano=None)]),
    "end-missing": lambda p: _otlp(
        p, [{k: v for k, v in _otlp_span().items() if k != "endTimeUnixNano"}]
    ),
    "span-id-number": lambda p: _otlp(p, [_otlp_span(spanId=12)]),
    "span-id-bad-hex": lambda p: _otlp(p, [_otlp_span(spanId="zz" * 8)]),
    "span-id-bad-base64": lambda p: _otlp(p, [_otlp_span(spanId="!!!")]),
    "trace-id-bad-base64": lambda p: _otlp(p, [_otlp_span(traceId="@@@")]),
    "name-object": lambda p: _otlp(p, [_otlp_span(name={"a": 1})]),
    "attributes-object": lambda p: _otlp(p, [_otlp_span(attributes={"a": 1})]),
    "attribute-string": lambda p: _otlp(p, [_otlp_span(attributes=["x"])]),
    "attribute-key-missing": lambda p: _otlp(p, [_otlp_span(attributes=[{"value": {}}])]),
    "attribute-value-list": lambda p: _otlp(p, [_otlp_span(attributes=_otlp_attr([1]))]),
    "int-value-words": lambda p: _otlp(p, [_otlp_span(attributes=_otlp_attr({"intValue": "x"}))]),
    "int-value-list": lambda p: _otlp(p, [_otlp_span(attributes=_otlp_attr({"intValue": [1]}))]),
    "double-value-object": lambda p: _otlp(
        p, [_otlp_span(attributes=_otlp_attr({"doubleValue": {}}))]
    ),
    "bytes-value-bad": lambda p: _otlp(p, [_otlp_span(attributes=_otlp_attr({"bytesValue": "!"}))]),
    "array-values-object": lambda p: _otlp(
        p, [_otlp_span(attributes=_otlp_attr({"arrayValue": {"values": {"a": 1}}}))]
    ),
    "array-value-string": lambda p: _otlp(
        p, [_otlp_span(attributes=_otlp_attr({"arrayValue": "x"}))]
    ),
    "thread-id-words": lambda p: _otlp(
        p, [_otlp_span(attributes=[{"key": "thread.id", "value": {"stringValue": "main"}}])]
    ),
    "events-object": lambda p: _otlp(p, [_otlp_span(events={"a": 1})]),
    "event-number": lambda p: _otlp(p, [_otlp_span(events=[1])]),
    "sync-event-time-null": lambda p: _otlp(
        p,
        [
            _otlp_span(
                events=[
                    {
                        "name": "sync",
                        "timeUnixNano": None,
                        "attributes": [
                            {"key": "sync.op", "value": {"stringValue": "release"}},
                            {"key": "sync.obj", "value": {"stringValue": "q"}},
                        ],
                    }
                ]
            )
        ],
    ),
    "sync-seq-words": lambda p: _otlp(
        p,
        [
            _otlp_span(
                events=[
                    {
                        "name": "sync",
                        "timeUnixNano": "5",
                        "attributes": [
                            {"key": "sync.op", "value": {"stringValue": "release"}},
                            {"key": "sync.obj", "value": {"stringValue": "q"}},
                            {"key": "sync.seq", "value": {"stringValue": "first"}},
                        ],
                    }
                ]
            )
        ],
    ),
    "links-string": lambda p: _otlp(p, [_otlp_span(links="x")]),
    "link-number": lambda p: _otlp(p, [_otlp_span(links=[3])]),
    "duplicate-span-ids": lambda p: _otlp(p, [_otlp_span(), _otlp_span()]),
    "request-list": lambda p: _otlp(p, request=[1, 2]),
    "line-truncated": lambda p: _text(p, '{"resourceSpans": [{"scopeSpans": ['),
}

for _name, _build in _OTLP_CASES.items():

    @case(f"otlp-{_name}")
    def _(root, build=_build):
        return build(root / "t.otlp.json")


# -- wrong types and NULLs: Nsight Systems ----------------------------------------------------

_NSYS_CASES: dict[str, dict] = {
    "nvtx-start-text": {"nvtx": [("soon", 20, PUSHPOP, "r", GTID)]},
    "nvtx-start-real": {"nvtx": [(1.5, 20, PUSHPOP, "r", GTID)]},
    "nvtx-start-huge-real": {"nvtx": [(1e300, 20, PUSHPOP, "r", GTID)]},
    "nvtx-end-text": {"nvtx": [(10, "later", PUSHPOP, "r", GTID)]},
    # fits int64 as written, not once the session start is added: it would wrap to 1677
    "nvtx-end-past-int64": {"nvtx": [(10, 2**63 - 1, PUSHPOP, "r", GTID)]},
    "nvtx-start-past-int64": {"nvtx": [(2**63 - 10, 2**63 - 5, PUSHPOP, "r", GTID)]},
    "nvtx-tid-text": {"nvtx": [(10, 20, PUSHPOP, "r", "main")]},
    "nvtx-text-blob": {"nvtx": [(10, 20, PUSHPOP, b"\xff\x00", GTID)]},
    "kernel-start-null": {"kernels": [_kernel(start=None)]},
    "kernel-end-null": {"kernels": [_kernel(end=None)]},
    "kernel-device-null": {"kernels": [_kernel(deviceId=None)]},
    "kernel-stream-null": {"kernels": [_kernel(streamId=None)]},
    "kernel-stream-text": {"kernels": [_kernel(streamId="s7")]},
    "kernel-correlation-null": {
        "kernels": [_kernel(correlationId=None)],
        "runtime": [(90, 95, GTID, 1)],
    },
    "kernel-correlation-real": {
        "kernels": [_kernel(correlationId=1.5)],
        "runtime": [(90, 95, GTID, 1)],
    },
    "kernel-pid-text": {"kernels": [_kernel(globalPid="proc")]},
    "runtime-start-null": {"kernels": [_kernel()], "runtime": [(None, 95, GTID, 1)]},
    "runtime-tid-text": {"kernels": [_kernel()], "runtime": [(90, 95, "t", 1)]},
}

for _name, _rows in _NSYS_CASES.items():

    @case(f"nsys-{_name}")
    def _(root, rows=_rows):
        return _nsys(root / "t.sqlite", **rows)


@case("nsys-nvtx-start-null")
def _(root):  # the documented schema says NOT NULL; a hand-made export may not
    path = _nsys(root / "t.sqlite")
    db = sqlite3.connect(path)
    db.execute("DROP TABLE NVTX_EVENTS")
    db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text "
               "TEXT, globalTid INTEGER)")  # fmt: skip
    db.execute("INSERT INTO NVTX_EVENTS VALUES (NULL, 20, ?, 'r', ?)", (PUSHPOP, GTID))
    db.commit()
    db.close()
    return path


@case("nsys-nvtx-event-type-null")
def _(root):
    path = _nsys(root / "t.sqlite")
    db = sqlite3.connect(path)
    db.execute("DROP TABLE NVTX_EVENTS")
    db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text "
               "TEXT, globalTid INTEGER)")  # fmt: skip
    db.execute("INSERT INTO NVTX_EVENTS VALUES (10, 20, NULL, 'r', ?)", (GTID,))
    db.commit()
    db.close()
    return path


@case("nsys-million-processes")
def _(root):
    rows = [(10, 20, PUSHPOP, "r", (1 << 48) | (p << 24) | 1) for p in range(1_000_000)]
    return _nsys(root / "t.sqlite", nvtx=rows)


@case("nsys-corrupt-pages")
def _(root):
    path = _nsys(root / "t.sqlite", nvtx=[(10, 20, PUSHPOP, "r", GTID)] * 2000)
    data = bytearray(path.read_bytes())
    data[4096:8192] = b"\xa5" * 4096
    path.write_bytes(bytes(data))
    return path


# -- wrong types: run.json and record files ---------------------------------------------------


def _proc_field(key: str, value):
    def build(root):
        return _baseline(root, lambda run, manifest: manifest["processes"][0].update({key: value}))

    return build


for _key, _value in (
    ("record", 5),
    ("record", ["a.rec"]),
    ("record", {"path": "a.rec"}),
    ("pid", "one"),
    ("pid", [1]),
    ("pid", 2**70),
    ("dp_rank", "zero"),
    ("dp_rank", [0]),
    ("role", 5),
    ("name", ["w"]),
):
    case(f"native-manifest-{_key}-{type(_value).__name__}")(_proc_field(_key, _value))

for _key, _value in (("processes", {"a": 1}), ("processes", "all"), ("status", ["ok"]),
                     ("config", "none"), ("format", 1)):  # fmt: skip
    case(f"native-manifest-top-{_key}-{type(_value).__name__}")(
        lambda root, k=_key, v=_value: _baseline(root, lambda run, m: m.update({k: v}))
    )


@case("native-manifest-process-string")
def _(root):
    return _baseline(root, lambda run, manifest: manifest["processes"].append("worker"))


@case("native-manifest-not-json")
def _(root):
    run = _baseline(root, lambda run, manifest: None)
    (run / "run.json").write_text("{not json")
    return run


@case("native-manifest-list")
def _(root):
    run = _baseline(root, lambda run, manifest: None)
    (run / "run.json").write_text("[]")
    return run


@case("native-duplicate-span-ids-one-file")
def _(root):
    return _one_rec(root, _string(1, "s") + _span(1, 1) + _span(1, 1))


@case("native-duplicate-span-ids-two-files")
def _(root):
    data = _rec_header(100) + _string(1, "s") + _span(1, 1)
    return _run(root, {"worker-0-100.rec": data, "worker-1-100.rec": data})


@case("native-unknown-kind")
def _(root):
    return _one_rec(root, _record(77, b"abcd"))


@case("native-sync-op-unknown")
def _(root):
    sync = R.SYNC.pack(0, 1, 9, -1, 5)
    return _one_rec(root, _string(1, "q") + _record(R.Kind.SYNC, sync))


@case("native-bad-magic")
def _(root):
    return _run(root, {"worker-0-100.rec": b"NOTFDPRF" + bytes(60)})


@case("native-unknown-name-id")
def _(root):
    return _one_rec(root, _span(1, 2**31))


@case("native-attr-key-unknown")
def _(root):
    attr = R.ATTR_INT.pack(1, 2**31 - 1, 0, 5)
    return _one_rec(root, _string(1, "s") + _span(1, 1) + _record(R.Kind.ATTR_INT, attr))


@case("native-context-short")
def _(root):
    ctx = R.CONTEXT.pack(1, b"\x01" * 16, 2)[:20]
    return _one_rec(root, _string(1, "s") + _span(1, 1) + _record(R.Kind.CONTEXT, ctx))


# -- files that are not files -----------------------------------------------------------------


@case("file-fifo")
def _(root):
    path = root / "t.json"
    os.mkfifo(path)
    return path


@case("file-dev-zero")
def _(root):
    path = root / "t.json"
    path.symlink_to("/dev/zero")
    return path


@case("file-binary-noise")
def _(root):
    path = root / "t.bin"
    path.write_bytes(bytes(range(256)) * 64)
    return path
