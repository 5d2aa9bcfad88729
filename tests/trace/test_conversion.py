"""Conversion keeps what users rely on: categories, process labels and sort indexes, flows as
flows, overlapping spans packed, Nsight's API calls and copy kinds; foreign traces convert to
native or fail in one line leaving nothing behind."""

import collections
import gzip
import json

import numpy as np
from nsys_export import PUSHPOP, add_cuda, build_export, gtid
from roundtrip import assert_same
from shared_data import DATA

from fdprof.cli import main
from fdprof.trace import load, save


def events(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _kineto_like(tmp_path):
    """A PyTorch-profiler-shaped trace: labels, sort indexes, categories, a launch flow, and
    three overlapping spans of one thread (b starts inside a and ends after it)."""
    host = {"pid": 10, "tid": 11}
    evs = [
        {"ph": "M", "name": "process_name", "pid": 10, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 10, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_sort_index", "pid": 10, "args": {"sort_index": 10}},
        {"ph": "M", "name": "process_labels", "pid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "process_sort_index", "pid": 0, "args": {"sort_index": 16777216}},
        {"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": 7, "args": {"sort_index": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 0, "dur": 10, **host},
        {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 5, "dur": 10, **host},
        {"ph": "X", "cat": "cpu_op", "name": "c", "ts": 7, "dur": 10, **host},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 20, "dur": 4,
         **host},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 30, "dur": 5,
         "args": {"device": 0, "stream": 7}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 77, "ts": 21, "bp": "e", **host},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 0, "tid": 7, "ts": 30,
         "bp": "e"},
    ]  # fmt: skip
    path = tmp_path / "kineto.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    return path


def test_chrome_out_keeps_categories_labels_sort_indexes_and_flows(tmp_path):
    trace = load(_kineto_like(tmp_path))
    save(trace, tmp_path / "out.json")
    out = events(tmp_path / "out.json")
    by_name = {e["name"]: e for e in out if e["ph"] in "Xb"}
    assert by_name["gemm"]["cat"] == "kernel" and "chrome.cat" not in by_name["gemm"]["args"]
    assert by_name["a"]["cat"] == "cpu_op"
    meta = {(e["name"], e["pid"], e.get("tid")): e["args"] for e in out if e["ph"] == "M"}
    assert meta[("process_labels", 0, None)] == {"labels": "GPU 0"}
    assert meta[("process_sort_index", 0, None)] == {"sort_index": 16777216}
    assert meta[("thread_sort_index", 0, 7)] == {"sort_index": 7}
    phases = collections.Counter(e["ph"] for e in out)
    assert phases["i"] == 0  # a flow is a flow, not an instant per end
    flows = [e for e in out if e["ph"] in "sf"]
    assert sorted((e["ph"], e["cat"], e["id"]) for e in flows) == [
        ("f", "ac2g", 77),
        ("s", "ac2g", 77),
    ]
    kernel_track = by_name["gemm"]["tid"]
    assert next(e for e in flows if e["ph"] == "f")["tid"] == kernel_track
    back = load(tmp_path / "out.json")
    assert_same(trace, back)
    assert back.meta["display"] == trace.meta["display"]


def test_overlapping_spans_of_a_thread_are_async_slices_not_a_track_each(tmp_path):
    trace = load(_kineto_like(tmp_path))
    save(trace, tmp_path / "out.json")
    out = events(tmp_path / "out.json")
    threads = [e["args"]["name"] for e in out if e["ph"] == "M" and e["name"] == "thread_name"]
    assert not any("overlap" in t for t in threads)
    on_thread = {e["name"]: e["ph"] for e in out if e["ph"] in "Xb" and e["pid"] == 10}
    assert on_thread["a"] == "X" and on_thread["cudaLaunchKernel"] == "X"
    assert {e["name"] for e in out if e["ph"] == "b"} == {"b", "c"}
    assert collections.Counter(e["ph"] for e in out)["e"] == 2
    spans = load(tmp_path / "out.json").spans.set_index("name")
    assert spans.loc["b", "lane"] == spans.loc["a", "lane"] == "10/11"  # still the thread


def test_real_pytorch_trace_converts_whole(tmp_path):
    trace = load(DATA / "hta" / "control.json.gz")
    save(trace, tmp_path / "control.json.gz")
    out = events(tmp_path / "control.json.gz")
    phases = collections.Counter(e["ph"] for e in out)
    assert phases["i"] == 0 and phases["s"] == phases["f"] == 9450
    assert collections.Counter(e.get("cat") for e in out if e["ph"] == "X")["kernel"] == 8568
    labels = [e for e in out if e["ph"] == "M" and e["name"] == "process_labels"]
    assert {e["args"]["labels"] for e in labels} >= {"CPU", "GPU 3"}
    assert_same(trace, load(tmp_path / "control.json.gz"))


def test_nsys_export_keeps_runtime_api_calls_and_memcpy_kinds(tmp_path):
    trace = load(DATA / "nsys" / "NVIDIA__Fuser__report1.sqlite")
    save(trace, tmp_path / "nsys.json")
    out = events(tmp_path / "nsys.json")
    slices = [e for e in out if e["ph"] in "XbB"]
    names = collections.Counter(e["name"] for e in slices)
    assert names["cudaLaunchKernel"] == 9 and names["cudaMemcpyAsync"] == 3
    assert names["Memcpy HtoD"] == 2 and names["Memcpy DtoD"] == 1 and names["Memset"] == 3
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in out
              if e["ph"] == "M" and e["name"] == "thread_name"}  # fmt: skip
    launch = next(e for e in slices if e["name"] == "cudaLaunchKernel")
    assert tracks[(launch["pid"], launch["tid"])].endswith("CUDA API")  # a track of its own
    assert len(load(tmp_path / "nsys.json").attr("nsys.api")) == 990


def test_nsys_os_runtime_calls_are_kept(tmp_path):
    path = build_export(tmp_path / "osrt.sqlite", [
        {"start": 0, "end": 100, "eventType": PUSHPOP, "text": "step", "globalTid": gtid(5, 6)}
    ])  # fmt: skip
    add_cuda(path, {"OSRT_API": [
        {"start": 10, "end": 40, "eventClass": 27, "globalTid": gtid(5, 6), "nameId": 30,
         "returnValue": 0, "nestingLevel": 0}]}, {30: "pthread_mutex_lock"})  # fmt: skip
    trace = load(path)
    call = trace.spans[trace.spans["name"] == "pthread_mutex_lock"].iloc[0]
    assert (call["lane"], call["end"] - call["start"]) == ("5/6", 30)
    assert trace.attr("nsys.api")[call["span_id"]] == "OS runtime"


def test_foreign_trace_to_native_and_back(tmp_path):
    """Kineto's named processes (negative pids) and its odd negative tid map into records."""
    trace = load(DATA / "hta" / "control.json.gz")
    assert (trace.spans["tid"] < 0).any() and (trace.spans["pid"] < 0).any()
    assert main(["convert", str(DATA / "hta" / "control.json.gz"), str(tmp_path / "run")]) == 0
    assert_same(trace, load(tmp_path / "run"))


def test_conversion_that_cannot_be_done_fails_in_one_line_leaving_nothing(tmp_path, capsys):
    path = tmp_path / "wide.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "a", "pid": 1, "tid": 2**40, "ts": 1, "dur": 1}]}))  # fmt: skip
    out = tmp_path / "run"
    assert main(["convert", str(path), str(out)]) == 2
    err = [e for e in capsys.readouterr().err.strip().splitlines() if ": warning: " not in e]
    assert len(err) == 1 and "does not fit a native record" in err[0]
    assert not out.exists()
    assert np.iinfo(np.int32).max < 2**40
