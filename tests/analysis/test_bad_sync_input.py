"""A sync event the conventions mean nothing by is bad input from every reader: one line on
stderr naming the field and the value, exit 2; never a silent span, a made-up gap or a race.
(Bad ``kv.layers`` ranges from every reader: ``tests/trace/test_attrs.py``.)"""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from fdprof.cli import main
from fdprof.formats import records as R
from fdprof.trace.otlp import attributes

BAD = [
    ({"sync.op": "Release", "sync.obj": "queue:swap", "sync.seq": 1}, 'sync.op = "Release"'),
    ({"sync.op": "signal", "sync.obj": "queue:swap"}, 'sync.op = "signal"'),
    ({"sync.obj": "queue:swap", "sync.seq": 1}, "sync.op = null"),
    ({"sync.op": "release", "sync.seq": 1}, "sync.obj = null"),
    ({"sync.op": "release", "sync.obj": "", "sync.seq": 1}, 'sync.obj = ""'),
    ({"sync.op": "release", "sync.obj": "queue:swap", "sync.seq": 1.5}, "sync.seq = 1.5"),
    ({"sync.op": "release", "sync.obj": "queue:swap", "sync.seq": "7"}, 'sync.seq = "7"'),
    ({"sync.op": "release", "sync.obj": "queue:swap", "sync.seq": True}, "sync.seq = true"),
    ({"sync.op": "release", "sync.obj": "queue:swap", "sync.seq": 2**63},
     f"sync.seq = {2**63}"),
    ({"sync.op": "release", "sync.obj": "queue:swap", "sync.seq": -(2**63) - 1},
     f"sync.seq = {-(2**63) - 1}"),
]  # fmt: skip


def _run(argv: list[str]) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    # a hand-built trace has no clock anchors: that warning is not about its syncs
    return rc, [line for line in err.getvalue().splitlines() if "no clock anchor" not in line]


def chrome_file(tmp_path, args: dict):
    events = [
        {"ph": "X", "name": "swap", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
         "args": {"kv.gpu_write": [3]}},
        {"ph": "i", "s": "t", "name": "sync", "pid": 1, "tid": 1, "ts": 6, "args": args},
        {"ph": "X", "name": "execute_model", "pid": 2, "tid": 1, "ts": 9, "dur": 5,
         "args": {"kv.gpu_read": [3]}},
    ]  # fmt: skip
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def otlp_file(tmp_path, args: dict, raw: tuple = ()):
    """``raw``: attribute items added as they are (values no writer of ours makes)."""

    def span(sid: int, name: str, t: int, attrs: dict, events=()):
        return {"traceId": "0" * 31 + "1", "spanId": f"{sid:016x}", "name": name,
                "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 5),
                "attributes": attributes(attrs), "events": list(events)}  # fmt: skip

    event = {"timeUnixNano": "6", "name": "sync", "attributes": attributes(args) + list(raw)}
    request = {"resourceSpans": [
        {"resource": {"attributes": attributes({"process.pid": 1})},
         "scopeSpans": [{"spans": [span(1, "swap", 0, {"kv.gpu_write": [3]}, [event])]}]},
        {"resource": {"attributes": attributes({"process.pid": 2})},
         "scopeSpans": [{"spans": [span(2, "execute_model", 9, {"kv.gpu_read": [3]})]}]},
    ]}  # fmt: skip
    path = tmp_path / "spans.otlp.json"
    path.write_text(json.dumps(request) + "\n")
    return path


@pytest.mark.parametrize("write", [chrome_file, otlp_file], ids=["chrome", "otlp"])
@pytest.mark.parametrize(("args", "shown"), BAD, ids=[s for _, s in BAD])
def test_a_bad_sync_event_is_one_line_and_exit_2(tmp_path, write, args, shown):
    rc, lines = _run(["hazards", str(write(tmp_path, dict(args)))])
    assert rc == 2
    assert len(lines) == 1 and shown in lines[0], lines


@pytest.mark.parametrize("write", [chrome_file, otlp_file], ids=["chrome", "otlp"])
def test_a_good_sync_event_reads_as_an_edge(tmp_path, write):
    # the same files with a well-formed release: read, no error (the read is then a race,
    # as no acquire follows it), so the bad cases above fail for the field they name
    args = {"sync.op": "release", "sync.obj": "queue:swap", "sync.seq": -(2**63)}
    rc, lines = _run(["hazards", str(write(tmp_path, args))])
    assert rc == 1 and lines == []


def test_an_otlp_int_value_that_is_no_integer_names_its_attribute(tmp_path):
    bad_seq = {"key": "sync.seq", "value": {"intValue": "x1"}}
    path = otlp_file(tmp_path, {"sync.op": "release", "sync.obj": "queue:swap"}, (bad_seq,))
    rc, lines = _run(["hazards", str(path)])
    assert rc == 2 and len(lines) == 1 and "sync.seq" in lines[0] and "x1" in lines[0], lines


def test_a_native_sync_record_with_an_unknown_op_names_it(tmp_path):
    from fdprof.probe.sdk.recorder import open_recorder

    rec = open_recorder(tmp_path / f"worker-0-{os.getpid()}.rec", "worker", 0, 0)
    rec.sync(0, rec.intern("queue:swap"), 7, 1, 10, True)
    rec.close()
    rc, lines = _run(["hazards", str(tmp_path)])
    assert rc == 2 and len(lines) == 1 and "op is 7" in lines[0], lines
    assert R.SyncCode.RELEASE == 1
