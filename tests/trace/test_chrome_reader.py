import gzip
import json

import pytest
from shared_data import DATA

from fdprof.errors import FdprofError
from fdprof.trace import load


def write(tmp_path, doc, name="t.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


@pytest.fixture(scope="module", params=["control.json.gz", "test.json.gz"])
def hta_trace(request):
    return load(DATA / "hta" / request.param)


def test_reads_real_pytorch_profiler_traces(hta_trace):
    trace = hta_trace
    spans = trace.spans
    assert len(spans) > 60_000
    assert (spans["end"] >= spans["start"]).all()
    assert spans["span_id"].is_unique
    assert trace.meta["distributedInfo"]["world_size"] in (2, 8)
    assert "python3.8" in set(trace.processes["name"])
    device = spans[spans["lane"].str.contains("/cuda:")]
    assert len(device) > 5_000
    cats = trace.attr("chrome.cat")
    assert set(cats[cats.index.isin(device["span_id"])]) <= {
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "gpu_user_annotation",
    }
    # typed as PyTorch wrote them: ints, int lists, string lists; a key mixing ints and
    # floats keeps each value's own type
    assert trace.attr("correlation").dtype == "int64"
    assert trace.attr("grid").iloc[0] == [int(v) for v in trace.attr("grid").iloc[0]]
    assert all(type(t) is str for t in trace.attr("Input type").iloc[0])
    blocks = trace.attr("blocks per SM")
    assert {type(v) for v in blocks} == {int, float}
    flows = trace.syncs
    assert set(flows["op"]) == {"release", "acquire"}
    assert flows["obj"].str.startswith("flow:").all()


def test_real_trace_timestamps_are_exact_nanoseconds(hta_trace):
    if "test.json" not in hta_trace.meta["path"]:
        pytest.skip("the known event is in test.json.gz")
    first = hta_trace.spans[hta_trace.spans["name"] == "ProfilerStep#1009"].iloc[0]
    assert first["start"] == 1661938466265087 * 1000
    assert first["end"] - first["start"] == 100298 * 1000


def test_every_phase(tmp_path):
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "engine-0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "sched"}},
        {"ph": "X", "name": "x", "pid": 1, "tid": 2, "ts": "TS", "dur": 0.5},
        {"ph": "B", "name": "outer", "pid": 1, "tid": 2, "ts": 10, "args": {"a": 1}},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 2, "ts": 11},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 12, "args": {"b": [1, 2]}},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 13},
        {"ph": "B", "name": "open", "pid": 1, "tid": 3, "ts": 14},
        {"ph": "b", "name": "req", "cat": "r", "id": "0x7", "pid": 1, "tid": 2, "ts": 20},
        {"ph": "e", "name": "req", "cat": "r", "id": "0x7", "pid": 1, "tid": 4, "ts": 25},
        {"ph": "i", "name": "mark", "pid": 1, "tid": 2, "ts": 30, "s": "t"},
        {
            "ph": "i",
            "name": "release lock:kv",
            "pid": 1,
            "tid": 2,
            "ts": 31,
            "args": {"sync.op": "release", "sync.obj": "lock:kv", "sync.seq": 4, "sync.span": 9},
        },
        {"ph": "s", "name": "f", "cat": "c", "id": 5, "pid": 1, "tid": 2, "ts": 40},
        {"ph": "t", "name": "f", "cat": "c", "id": 5, "pid": 1, "tid": 3, "ts": 41},
        {"ph": "f", "name": "f", "cat": "c", "id": 5, "pid": 1, "tid": 4, "ts": 42, "bp": "e"},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 50, "args": {"used": 3, "free": 1.5}},
        {"ph": "P", "name": "sample", "pid": 1, "ts": 51},
    ]
    doc = json.dumps({"traceEvents": events, "displayTimeUnit": "ns"})
    trace = load(write(tmp_path, doc.replace('"TS"', "1733150000123456.789")))
    spans = trace.spans.set_index("name")
    assert spans.loc["x", "start"] == 1733150000123456789
    assert spans.loc["x", "end"] == 1733150000123457289
    assert (spans.loc["outer", "start"], spans.loc["outer", "end"]) == (10_000, 13_000)
    assert (spans.loc["inner", "start"], spans.loc["inner", "end"]) == (11_000, 12_000)
    assert spans.loc["open", "end"] == -1
    assert spans.loc["req", "end"] == 25_000 and spans.loc["req", "lane"] == "1/async:0x7"
    assert spans.loc["mark", "start"] == spans.loc["mark", "end"] == 30_000
    inner = int(spans.loc["inner", "span_id"])
    assert trace.attr("b")[inner] == [1, 2]
    syncs = trace.syncs
    lock = syncs[syncs["obj"] == "lock:kv"].iloc[0]
    assert (lock["op"], lock["seq"], lock["span_id"], lock["lane"]) == ("release", 4, 9, "1/2")
    flow = syncs[syncs["obj"] == "flow:c"].sort_values(["time", "op"])
    assert flow["op"].tolist() == ["release", "acquire", "release", "acquire"]
    assert flow["time"].tolist() == [40_000, 41_000, 41_000, 42_000]  # on threads: not moved
    assert len(set(flow["seq"])) == 1
    # bound to the slices enclosing them: "open" on thread 3; nothing holds the end on 4
    assert flow["span_id"].tolist()[1:3] == [int(spans.loc["open", "span_id"])] * 2
    assert trace.processes.set_index("pid").loc[1, "name"] == "engine-0"
    assert trace.meta["thread_names"] == {"1/2": "sched"}
    counters = trace.meta["counters"]
    assert sorted(counters["key"]) == ["free", "used"]
    warnings = " ".join(trace.meta["warnings"])
    assert "never ended" in warnings and "'P' ×1" in warnings


def test_array_form_plain_or_gzip_without_closing_bracket(tmp_path):
    text = '[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},\n'
    path = tmp_path / "trace.bin"
    path.write_bytes(gzip.compress(text.encode()))
    trace = load(path)
    assert trace.spans["name"].tolist() == ["a"]


def test_large_event_spanning_buffer_refills(tmp_path, monkeypatch):
    from fdprof.trace import jsonstream

    monkeypatch.setattr(jsonstream, "CHUNK_CHARS", 64)
    monkeypatch.setattr(jsonstream, "BATCH_CHARS", 128)  # each event is longer than a batch
    events = [
        {
            "ph": "X",
            "name": f"s{i}",
            "pid": 1,
            "tid": 1,
            "ts": 123456789012 + i,
            "dur": 1,
            "args": {"big": "x" * 300, "n": i},
        }
        for i in range(50)
    ]
    lines = ",\n".join(json.dumps(e) for e in events)  # one per line: decoded in batches
    trace = load(write(tmp_path, f'{{"otherData": {{"k": 1}}, "traceEvents": [\n{lines}\n]}}'))
    assert len(trace.spans) == 50
    assert trace.attr("n").tolist() == list(range(50))
    assert trace.spans["start"].tolist() == [(123456789012 + i) * 1000 for i in range(50)]


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"traceEvents": [{"ph": "X", "ts": 1', "truncated"),
        ('{"traceEvents": [', "truncated"),
        ('{"traceEvents": [{"ph": "X", "ts": "1", "dur": 1}]}', "events 0-0"),
        ('{"traceEvents": [{"ph": "X", "ts": 1, "args": [1]}]}', "args should be an object"),
        ('{"traceEvents": [3]}', "should be an object"),
        ('{"traceEvents": [{"ph": "X"}]}', "missing 'ts'"),
        ('{"traceEvents": {}}', "expected '\\['"),
        ('{"other": 1}', "no traceEvents"),
        ('{"traceEvents": []} x', "unexpected data"),
        ("[1 2]", "expected ','"),
    ],
)
def test_bad_json_is_one_line(tmp_path, content, message):
    with pytest.raises(FdprofError, match=message) as info:
        load(write(tmp_path, content))
    assert "\n" not in str(info.value)


def test_truncated_gzip_is_one_line(tmp_path):
    data = gzip.compress(json.dumps({"traceEvents": [{"ph": "i", "ts": 1}] * 1000}).encode())
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FdprofError, match="truncated") as info:
        load(path)
    assert "\n" not in str(info.value)
