"""Device lanes scoped by process in every reader, and flows bound to the slices they point at
(docs/trace.md "Lanes")."""

import json

import numpy as np
import pandas as pd
import pytest
from nsys_export import EPOCH, PUSHPOP, add_cuda, build_export, gpid, gtid
from shared_data import DATA

from fdprof import semconv as S
from fdprof.analysis.hazards import find_hazards
from fdprof.cli import main
from fdprof.trace import load, save
from fdprof.trace.assemble import assemble
from fdprof.trace.attrs import AttrsBuilder
from fdprof.trace.model import SYNC_COLUMNS, Trace, numpy_dtype


def test_semconv_builds_scoped_lane_names():
    assert S.device_lane(42, S.DEVICE_CUDA, 0, 7) == "42/cuda:0/stream:7"
    assert S.device_lane(42, S.DEVICE_CPU, 1, 3) == "42/cpu:1/stream:3"
    assert S.scoped_lane(42, "cuda:0/stream:7") == "42/cuda:0/stream:7"
    for lane in ("42/cuda:0/stream:7", "42/7", "42/async:0x1", "cuda-graph"):
        assert S.scoped_lane(9, lane) == lane


def test_nsys_two_processes_with_equal_stream_ids_are_two_lanes(tmp_path):
    """Stream 7 on device 0 in processes 100 and 200, each launching its kernel with
    correlation id 1: two lanes, and each kernel acquires its own process's launch."""
    path = build_export(
        tmp_path / "two.sqlite",
        [
            {"start": 0, "end": 90, "eventType": PUSHPOP, "text": "step", "globalTid": gtid(p, p)}
            for p in (100, 200)
        ],
    )
    kernel = {"deviceId": 0, "contextId": 1, "streamId": 7, "correlationId": 1,
              "demangledName": 51, "shortName": 50}  # fmt: skip
    add_cuda(
        path,
        {
            "CUPTI_ACTIVITY_KIND_KERNEL": [
                kernel | {"start": 20, "end": 40, "globalPid": gpid(100)},
                kernel | {"start": 50, "end": 70, "globalPid": gpid(200)},
            ],
            "CUPTI_ACTIVITY_KIND_RUNTIME": [
                {
                    "start": s,
                    "end": s + 5,
                    "eventClass": 1,
                    "globalTid": gtid(p, p),
                    "correlationId": 1,
                    "nameId": 52,
                    "returnValue": 0,
                }
                for p, s in ((100, 10), (200, 45))
            ],  # fmt: skip
        },
        strings={50: "gemm", 51: "void gemm<float>(float *)", 52: "cudaLaunchKernel_v7000"},
    )
    trace = load(path)
    kernels = trace.spans[trace.spans["name"] == "gemm"].set_index("pid")
    assert kernels.loc[100, "lane"] == "100/cuda:0/stream:7"
    assert kernels.loc[200, "lane"] == "200/cuda:0/stream:7"
    launches = trace.syncs[trace.syncs["obj"].str.startswith("cuda:launch/")]
    for pid, lane in ((100, "100/cuda:0/stream:7"), (200, "200/cuda:0/stream:7")):
        mine = launches[launches["obj"] == f"cuda:launch/{pid}"].set_index("op")
        assert mine.loc["release", "lane"] == f"{pid}/{pid}"
        assert mine.loc["acquire", "lane"] == lane
        assert mine.loc["acquire", "time"] == kernels.loc[pid, "start"]
    assert trace.spans["start"].min() >= EPOCH


def _two_process_trace() -> Trace:
    """Spans of processes 1 and 2, each on ``fd.lane`` ``cuda:0/stream:7`` (unscoped, as a
    hand-written or older trace says it)."""
    attrs = AttrsBuilder()
    attrs.add_values(S.LANE, [1, 2], ["cuda:0/stream:7", "cuda:0/stream:7"])
    trace = Trace(meta={"format": "test"})
    spans = {
        "span_id": np.array([1, 2]),
        "parent_id": np.array([0, 0]),
        "name": np.array(["k", "k"], dtype=object),
        "start": np.array([10, 20]),
        "end": np.array([15, 25]),
        "pid": np.array([1, 2]),
        "tid": np.array([1, 2]),
        "role": np.array(["", ""], dtype=object),
        "trace_id": np.array([None, None], dtype=object),
    }
    syncs = {k: np.zeros(0, dtype=numpy_dtype("syncs", k)) for k in SYNC_COLUMNS}
    processes = {"pid": [1, 2], "role": ["", ""], "name": ["a", "b"], "anchored": [True, True],
                 "dp_rank": [-1, -1], "tp_rank": [-1, -1]}  # fmt: skip
    return assemble(trace, spans, attrs.build(), syncs, processes)


SCOPED = ["1/cuda:0/stream:7", "2/cuda:0/stream:7"]


def test_unscoped_fd_lane_is_scoped_by_process_in_every_reader(tmp_path):
    trace = _two_process_trace()
    assert sorted(trace.spans["lane"]) == SCOPED
    for name in ("run", "t.otlp.json", "t.json"):
        save(trace, tmp_path / name)
        assert sorted(load(tmp_path / name).spans["lane"]) == SCOPED, name
    chrome = {"traceEvents": [
        {"ph": "X", "name": "k", "pid": p, "tid": p, "ts": 1, "dur": 1,
         "args": {"fd.lane": "cuda:0/stream:7"}} for p in (1, 2)]}  # fmt: skip
    (tmp_path / "hand.json").write_text(json.dumps(chrome))
    assert sorted(load(tmp_path / "hand.json").spans["lane"]) == SCOPED


def test_pids_past_2_to_the_53_scope_their_own_lanes(tmp_path):
    """Kernels on device 0's stream 7 in processes 2^60 and 2^60 + 1 (one float64 apart from
    none), each writing block 3: two lanes, unordered, one race (a float on the way to the
    lane names made them one lane, and hid the race)."""
    pids = (2**60, 2**60 + 1)
    chrome = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": p, "tid": 7, "ts": ts, "dur": 1,
         "args": {"device": 0, "stream": 7, S.KV_GPU_WRITE: [3]}}
        for p, ts in zip(pids, (1, 5), strict=True)]}  # fmt: skip
    (tmp_path / "big.json").write_text(json.dumps(chrome))
    trace = load(tmp_path / "big.json")
    assert sorted(trace.spans["lane"]) == [f"{p}/cuda:0/stream:7" for p in pids]
    assert len(find_hazards(trace).races) == 1


def _pytorch_trace(flow_end_ts: int | None, kernel_pid: int = 0) -> dict:
    """A PyTorch-profiler-shaped trace: a CPU op on the host thread writes block 3, then
    ``cudaLaunchKernel`` launches a kernel (on device 0's stream 7, Kineto's pid/tid) that reads
    it, linked by an ``ac2g`` flow when ``flow_end_ts`` is given (the flow end's time)."""
    host = {"pid": 4242, "tid": 4243}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 0, "dur": 10,
         "args": {S.KV_GPU_WRITE: [3]}, **host},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 12, "dur": 5, **host},
        {"ph": "X", "cat": "kernel", "name": "attention", "pid": kernel_pid, "tid": 7, "ts": 20,
         "dur": 10, "args": {S.KV_GPU_READ: [3], "device": 0, "stream": 7, "correlation": 99}},
    ]  # fmt: skip
    if flow_end_ts is not None:
        events += [
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 99, "ts": 13, "bp": "e", **host},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 99, "pid": kernel_pid, "tid": 7,
             "ts": flow_end_ts, "bp": "e"},
        ]  # fmt: skip
    return {"traceEvents": events}


@pytest.mark.parametrize("flow_end_ts", [20, 25])  # at the kernel's start, or inside it
def test_kernel_is_ordered_after_its_launch(tmp_path, flow_end_ts):
    path = tmp_path / "pt.json"
    path.write_text(json.dumps(_pytorch_trace(flow_end_ts)))
    trace = load(path)
    kernel = trace.spans[trace.spans["name"] == "attention"].iloc[0]
    assert kernel["lane"] == "4242/cuda:0/stream:7"  # scoped by the host process
    acquire = trace.syncs[trace.syncs["op"] == "acquire"].iloc[0]
    assert (acquire["lane"], acquire["time"]) == (kernel["lane"], kernel["start"])
    assert acquire["span_id"] == kernel["span_id"]
    report = find_hazards(trace)
    assert report.races.empty
    # and it survives a conversion to Perfetto JSON and back
    save(trace, tmp_path / "out.json")
    assert find_hazards(load(tmp_path / "out.json")).races.empty


@pytest.mark.parametrize(("flow_end_ts", "races"), [(20, 0), (25, 0), (None, 1)])
def test_hazards_predict_finds_nothing_across_a_launch_flow(tmp_path, capsys, flow_end_ts, races):
    """A launch flow is a hard edge (a kernel cannot start before its launch), not a lock's
    chance order: ``hazards --predict`` predicts no race, before and after a round trip;
    without the flow the race is an observed one (exit 1), not a predicted one."""
    path = tmp_path / "pt.json"
    path.write_text(json.dumps(_pytorch_trace(flow_end_ts)))
    save(load(path), tmp_path / "out.json")
    for trace in (path, tmp_path / "out.json"):
        assert main(["hazards", str(trace), "--predict", "--json"]) == races
        counts = json.loads(capsys.readouterr().out)["counts"]
        assert (counts["races"], counts["predicted"]) == (races, 0)


def test_without_the_flow_the_same_accesses_race(tmp_path):
    """The control: the flow is the only thing ordering the kernel after the write."""
    path = tmp_path / "pt.json"
    path.write_text(json.dumps(_pytorch_trace(None)))
    races = find_hazards(load(path)).races
    assert len(races) == 1


def test_flow_end_without_bp_binds_to_the_next_slice(tmp_path):
    doc = _pytorch_trace(18)
    del doc["traceEvents"][-1]["bp"]  # Chrome's default: the next slice to begin on the track
    path = tmp_path / "pt.json"
    path.write_text(json.dumps(doc))
    trace = load(path)
    kernel = trace.spans[trace.spans["name"] == "attention"].iloc[0]
    acquire = trace.syncs[trace.syncs["op"] == "acquire"].iloc[0]
    assert (acquire["span_id"], acquire["time"]) == (kernel["span_id"], kernel["start"])
    assert find_hazards(trace).races.empty


def test_flow_ends_without_a_start_are_dropped_with_a_warning(tmp_path):
    doc = _pytorch_trace(20)
    doc["traceEvents"].append(
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 4242, "tid": 4243, "ts": 14,
         "bp": "e"}
    )  # fmt: skip
    path = tmp_path / "pt.json"
    path.write_text(json.dumps(doc))
    trace = load(path)
    assert len(trace.syncs) == 2
    assert any("1 flow event(s) without the other end" in w for w in trace.meta["warnings"])


@pytest.mark.parametrize("name", ["control.json.gz", "test.json.gz"])
def test_real_pytorch_flows_land_on_the_kernels_they_launch(name):
    """Every kernel, memcpy and memset a launch flow reaches acquires it on its stream's lane,
    at its start, from the runtime call that launched it (one ``cudaGraphLaunch`` launches
    hundreds of kernels: one flow start, many ends)."""
    trace = load(DATA / "hta" / name)
    spans = trace.spans.set_index("span_id")
    syncs = trace.syncs[trace.syncs["obj"].str.startswith("flow:")]
    acq = syncs[syncs["op"] == "acquire"]
    rel = syncs[syncs["op"] == "release"].set_index("seq")
    assert len(acq) > 9_000 and rel.index.is_unique
    bound = spans.loc[acq["span_id"]]
    assert (acq["lane"].to_numpy() == bound["lane"].to_numpy()).all()
    assert (acq["time"].to_numpy() == bound["start"].to_numpy()).all()
    assert bound["lane"].str.match(r"^\d+/cuda:\d+/stream:\d+$").all()
    host = spans.loc[rel.loc[acq["seq"], "span_id"]]
    assert set(host["name"]) <= {
        "cudaLaunchKernel",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "cudaGraphLaunch",
    }
    assert (rel.loc[acq["seq"], "time"].to_numpy() <= acq["time"].to_numpy()).all()
    assert len(pd.unique(bound["lane"].str.split("/").str[0])) == 1  # the one host process
