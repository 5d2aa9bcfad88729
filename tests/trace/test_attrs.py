"""Typed attributes: each value keeps its type from every source, ``Trace.attr`` serves them
typed, and a ``kv.*`` value the conventions cannot mean anything by is bad input (one line,
exit 2) in whichever format it arrives."""

import contextlib
import io
import json
import os

import numpy as np
import pytest

from fdprof import probe
from fdprof.cli import main
from fdprof.errors import FdprofError
from fdprof.probe.sdk.recorder import open_recorder
from fdprof.trace import load
from fdprof.trace.attrs import INT, INTS, JSON, STRS, Attrs, AttrsBuilder, kind_of, typed
from fdprof.trace.model import Trace
from fdprof.trace.otlp import attributes


def attrs_of(**values: list) -> Attrs:
    builder = AttrsBuilder()
    for key, column in values.items():
        builder.add_values(key, list(range(1, len(column) + 1)), column)
    return builder.build()


def test_each_kind_has_its_column_type():
    trace = Trace(
        attrs=attrs_of(
            i=[1, -(2**63)],
            f=[0.5, 2.0],
            s=["a", "é"],
            b=[True, False],
            li=[[1, 2], []],
            ls=[["x"], []],
            mixed=[0, 2.5],
            nested=[[[1]], {"k": None}],
            big=[2**64, 1],
        )
    )
    dtypes = {k: str(trace.attr(k).dtype) for k in trace.attrs}
    assert dtypes == {
        "i": "int64",
        "f": "float64",
        "s": "string[pyarrow]",
        "b": "bool",
        "li": "list<item: int64>[pyarrow]",
        "ls": "list<item: string>[pyarrow]",
        "mixed": "object",
        "nested": "object",
        "big": "object",
    }
    assert trace.attr("li").tolist() == [[1, 2], []]
    assert [type(v) for v in trace.attr("mixed")] == [int, float]
    assert trace.attr("nested").tolist() == [[[1]], {"k": None}]
    assert trace.attr("big")[1] == 2**64
    assert trace.attr("i").index.name == "span_id" and trace.attr("i").index.tolist() == [1, 2]
    assert trace.attr("absent").empty


def test_kinds_of_values():
    assert kind_of([True, 1]) == JSON  # a bool is not an int
    assert kind_of([[1], [True]]) == JSON
    assert kind_of([[], []]) == INTS
    assert typed([2**63])[0] == JSON and typed([2**63 - 1])[0] == INT


def test_a_span_that_sets_a_key_twice_keeps_the_later_value():
    builder = AttrsBuilder()
    builder.add_values("k", [5, 6], [1, 2])
    builder.add_values("k", [5], ["later"])  # another kind: the key becomes mixed
    assert builder.build().series("k").to_dict() == {6: 2, 5: "later"}
    # with record offsets, the later record wins whatever order the parts came in
    builder = AttrsBuilder()
    builder.add("k", np.array([5]), typed([9])[1], INT, order=np.array([20]))
    builder.add("k", np.array([5]), typed([1])[1], INT, order=np.array([10]))
    assert builder.build().series("k").to_dict() == {5: 9}


def test_empty_lists_next_to_string_lists_are_string_lists():
    builder = AttrsBuilder()
    builder.add_values("tags", [1], [[]])
    builder.add_values("tags", [2], [["a"]])
    assert builder.build().column("tags").kind == STRS


def test_many_small_parts_are_joined_as_they_come():
    builder = AttrsBuilder()
    for i in range(100):
        builder.add_values("n", [i], [i])
    assert len(builder._parts["n"]) < 16
    assert builder.build().series("n").tolist() == list(range(100))


# -- bad kv.* values, in every format that carries attributes --------------------------------

BAD = [
    ({"kv.gpu_read": [1, "a"]}, 'kv.gpu_read = [1,"a"]'),
    ({"kv.gpu_read": [1.5]}, "kv.gpu_read = [1.5]"),
    ({"kv.cpu_write": [True]}, "kv.cpu_write = [true]"),
    ({"kv.gpu_write": 7}, "kv.gpu_write = 7"),
    ({"kv.gpu_read": [1], "kv.layers": [3, 3]}, "kv.layers = [3,3]"),
    ({"kv.gpu_read": [1], "kv.layers": [5, 2]}, "kv.layers = [5,2]"),
    ({"kv.gpu_read": [1], "kv.layers": [1]}, "kv.layers = [1]"),
    ({"kv.gpu_read": [1], "kv.layers": [-1, 2]}, "kv.layers = [-1,2]"),
    ({"kv.gpu_read": [1], "kv.layers": "0-2"}, 'kv.layers = "0-2"'),
]


def chrome_file(tmp_path, args: dict):
    good = {"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
            "args": {"kv.gpu_read": [0]}}  # fmt: skip
    bad = {"ph": "X", "name": "execute_model", "pid": 1, "tid": 1, "ts": 3, "dur": 1,
           "args": args}  # fmt: skip
    path = tmp_path / "trace.json"
    path.write_text('{"traceEvents": [\n' + json.dumps(good) + ",\n" + json.dumps(bad) + "\n]}")
    return path


def otlp_file(tmp_path, args: dict):
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "2", "name": "execute_model",
            "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": attributes(args)}  # fmt: skip
    request = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]}
    path = tmp_path / "spans.otlp.json"
    path.write_text(json.dumps(request) + "\n")
    return path


@pytest.mark.parametrize("write", [chrome_file, otlp_file], ids=["chrome", "otlp"])
@pytest.mark.parametrize("args, shown", BAD, ids=[s for _, s in BAD])
def test_bad_kv_values_are_one_line_and_exit_2(tmp_path, write, args, shown):
    path = write(tmp_path, args)
    with pytest.raises(FdprofError, match="attribute " + shown.split(" =")[0]) as got:
        load(path)
    assert shown in str(got.value) and "\n" not in str(got.value)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["hazards", str(path)]) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and shown in lines[0] and "Traceback" not in err.getvalue()


@pytest.mark.parametrize(
    "record, shown",
    [
        (lambda r, s, k: r.set_ints(s, k("kv.layers"), [4, 4]), "kv.layers = [4,4]"),
        (lambda r, s, k: r.set_ints(s, k("kv.layers"), [6, 1]), "kv.layers = [6,1]"),
        (lambda r, s, k: r.set_str(s, k("kv.gpu_read"), "1,2"), 'kv.gpu_read = "1,2"'),
        (lambda r, s, k: r.set_int(s, k("kv.gpu_write"), 3), "kv.gpu_write = 3"),
    ],
    ids=["empty layers", "inverted layers", "string blocks", "int blocks"],
)
def test_bad_kv_values_recorded_natively_are_one_line(tmp_path, record, shown):
    rec = open_recorder(tmp_path / f"worker-0-{os.getpid()}.rec", "worker")
    sid = rec.begin(probe.name("execute_model", "execute_model"))
    rec.set_ints(sid, probe.key("kv.cpu_read"), [1, 2])
    record(rec, sid, probe.key)
    rec.end(sid)
    rec.close()
    with pytest.raises(FdprofError) as got:
        load(tmp_path)
    assert shown in str(got.value) and f"span {sid}" in str(got.value)
