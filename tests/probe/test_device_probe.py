"""Device work as the probe records it: spans on device lanes with the interval they really
ran, and launch / event edges that order exactly what the device orders, read back through the
native reader and judged by the hazard detector. On the CPU twin, with both recorder twins."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from unittest import mock

import pytest
import torch

from fdprof import probe
from fdprof import semconv as S
from fdprof.analysis.hazards import find_hazards
from fdprof.engine.device import CpuDevice
from fdprof.formats import records as R
from fdprof.formats.records import DEVICE_SPAN_BIT, PID_SHIFT
from fdprof.probe import handles as H
from fdprof.trace import load

WRITE = probe.name("kernel_write", S.CATEGORY_DEVICE)
READ = probe.name("kernel_read", S.CATEGORY_DEVICE)
HOST_READ = probe.name("host_read", S.CATEGORY_DEVICE)


@pytest.fixture
def recorded(tmp_path, impl):
    """A probe recording into ``tmp_path`` and a CPU device made after it; yields them, then
    the trace of what they recorded (call the yielded ``finish``)."""
    p = probe.configure(probe.ProbeConfig(run_dir=str(tmp_path)), S.ROLE_WORKER)
    dev = CpuDevice()
    state = {}

    def finish():
        dev.close()
        probe.shutdown()
        state["trace"] = load(tmp_path)
        return state["trace"]

    yield p, dev, finish
    if "trace" not in state:
        dev.close()
        probe.shutdown()


def _epoch_offset(trace) -> int:
    """What the reader added to this process's monotonic times (its file header's anchors)."""
    (path,) = Path(trace.meta["path"]).glob("*.rec")
    header = R.read_header(path.read_bytes()[: R.FILE_HEADER.size])
    return header.epoch_anchor_ns - header.mono_anchor_ns


def _writer_and_reader(dev: CpuDevice, p, ordered: bool, same_stream: bool = False):
    """Work writing block 5 on one stream, then work reading it on another (or the same)."""
    a = dev.stream()
    b = a if same_stream else dev.stream()
    e = dev.event()
    sid = a.launch(WRITE, time.sleep, 0.01)
    p.set_ints(sid, H.KV_GPU_WRITE, [5])
    if ordered:
        a.record(e)
        b.wait(e)
    sid = b.launch(READ, lambda: None)
    p.set_ints(sid, H.KV_GPU_READ, [5])
    return a, b


def test_device_work_is_a_span_on_its_lane_with_the_interval_it_ran(recorded):
    p, dev, finish = recorded
    s = dev.stream()
    inside: list[int] = []
    gate = threading.Event()
    with p.span(H.EXECUTE_MODEL) as host:
        sid = s.launch(WRITE, lambda: (gate.wait(30), inside.append(time.monotonic_ns())),
                       parent=host)  # fmt: skip
        launched_at = time.monotonic_ns()
    gate.set()
    s.synchronize()
    trace = finish()
    spans = trace.spans.set_index("span_id")
    work = spans.loc[sid]
    assert sid >> PID_SHIFT == os.getpid() and sid & DEVICE_SPAN_BIT
    assert work["lane"] == S.device_lane(os.getpid(), S.DEVICE_CPU, 0, 1) == s.lane
    assert work["name"] == "kernel_write" and work["parent_id"] == host
    # it ran after the host call that launched it had returned, and the span says so
    assert launched_at < inside[0] and work["end"] > spans.loc[host, "end"]
    assert work["start"] <= inside[0] + _epoch_offset(trace) <= work["end"]


def test_launches_and_events_are_keyed_edges_on_their_lanes(recorded):
    p, dev, finish = recorded
    a, b = _writer_and_reader(dev, p, ordered=True)
    b.synchronize()
    trace = finish()
    syncs = trace.syncs
    host_lane = syncs[syncs["obj"] == f"{S.DEVICE_LAUNCH_PREFIX}{a.lane}"]
    rel = host_lane[host_lane["op"] == "release"]
    acq = host_lane[host_lane["op"] == "acquire"]
    assert rel["seq"].tolist() == acq["seq"].tolist() == [1, 2]  # the work, the record
    assert set(acq["lane"]) == {a.lane} and not set(rel["lane"]) & {a.lane, b.lane}
    events = syncs[syncs["obj"].str.startswith(S.DEVICE_EVENT_PREFIX)]
    lanes = {(op, lane) for op, lane in zip(events["op"], events["lane"], strict=True)}
    # the user event: released on a, acquired on b; b's own sync event: released on b,
    # acquired by the host
    assert ("release", a.lane) in lanes and ("acquire", b.lane) in lanes
    assert ("release", b.lane) in lanes
    assert (events["seq"] >= 1).all()
    names = set(trace.spans["name"])
    assert {S.DEVICE_EVENT_RECORD, S.DEVICE_EVENT_WAIT} <= names


@pytest.mark.parametrize(
    ("ordered", "same_stream", "races"),
    [(True, False, 0), (False, False, 1), (False, True, 0)],
    ids=["event between streams", "no event", "one stream"],
)
def test_happens_before_sees_what_the_device_orders(recorded, ordered, same_stream, races):
    p, dev, finish = recorded
    _writer_and_reader(dev, p, ordered, same_stream)
    dev.synchronize()
    report = find_hazards(finish())
    assert len(report.races) == races
    assert report.accesses == 2


@pytest.mark.parametrize("host_waits", [True, False])
def test_the_host_reads_after_an_event_wait_and_not_otherwise(recorded, host_waits):
    p, dev, finish = recorded
    s = dev.stream()
    e = dev.event()
    block = torch.zeros(4)
    sid = s.launch(WRITE, block.fill_, 1)
    p.set_ints(sid, H.KV_GPU_WRITE, [7])
    s.record(e)
    if host_waits:
        e.synchronize()
    with p.span(HOST_READ) as host:
        p.set_ints(host, H.KV_GPU_READ, [7])
    dev.synchronize()
    report = find_hazards(finish())
    assert len(report.races) == (0 if host_waits else 1)


def test_a_query_that_saw_completion_orders_the_host(recorded):
    p, dev, finish = recorded
    s = dev.stream()
    e = dev.event()
    sid = s.launch(WRITE, lambda: None)
    p.set_ints(sid, H.KV_GPU_WRITE, [3])
    s.record(e)
    while not e.query():
        time.sleep(0.001)
    with p.span(HOST_READ) as host:
        p.set_ints(host, H.KV_GPU_READ, [3])
    assert find_hazards(finish()).clean


def test_a_host_write_before_the_launch_is_ordered_before_the_work(recorded):
    p, dev, finish = recorded
    s = dev.stream()
    with p.span(HOST_READ) as host:
        p.set_ints(host, H.KV_CPU_WRITE, [2])
    sid = s.launch(READ, lambda: None)
    p.set_ints(sid, H.KV_CPU_READ, [2])
    # written after the launch: not ordered with the work, whatever the timing
    with p.span(HOST_READ) as late:
        p.set_ints(late, H.KV_CPU_WRITE, [2])
    s.synchronize()
    races = find_hazards(finish()).races
    assert len(races) == 1 and {races["span_a"].iat[0], races["span_b"].iat[0]} == {sid, late}


def test_a_disabled_probe_records_nothing_and_returns_span_id_zero():
    dev = CpuDevice()
    try:
        s = dev.stream()
        assert s.launch(WRITE, lambda: None) == 0
        s.synchronize()
    finally:
        dev.close()


def _device_work_under_nvtx(run_dir: str) -> None:
    probe.configure(probe.ProbeConfig(run_dir=run_dir, nvtx=True), S.ROLE_WORKER)
    dev = CpuDevice()
    s = dev.stream()
    sids = [s.launch(WRITE, lambda: None) for _ in range(3)]
    dev.close()
    probe.shutdown()
    (Path(run_dir) / "sids").write_text(" ".join(map(str, sids)))


def test_nvtx_ranges_of_device_work_carry_the_span_id(tmp_path):
    """The range is where the work ran (the stream thread), its payload the device span's id,
    so a capture joins back to the recorded span and its lane."""
    import multiprocessing as mp

    from fdprof.capture import nvtx as capture
    from fdprof.trace.nvtx_capture import read_nvtx_capture

    with mock.patch.dict(os.environ, capture.injection_env(tmp_path)):
        proc = mp.get_context("spawn").Process(target=_device_work_under_nvtx,
                                               args=(str(tmp_path),))  # fmt: skip
        proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    sids = [int(s) for s in (tmp_path / "sids").read_text().split()]
    ranges = read_nvtx_capture(tmp_path).spans
    work = ranges[ranges["name"] == "kernel_write"]
    assert sorted(work["span_id"]) == sorted(sids) and all(s & DEVICE_SPAN_BIT for s in sids)
    recorded = load(tmp_path).spans.set_index("span_id")
    assert set(recorded.loc[sids, "lane"]) == {S.device_lane(proc.pid, S.DEVICE_CPU, 0, 1)}


@pytest.mark.parametrize("sync_before_unlock", [False, True])
def test_a_lock_around_the_launch_does_not_cover_the_kernel(recorded, sync_before_unlock):
    """FastDeploy's lock is held around the host call to execute_model. With asynchronous
    work the call only queues the kernel: the transfer thread takes the lock next and reads
    the block the kernel is still writing. The detector says so (and the what-if agrees: the
    lock never ordered that pair); synchronising the stream before unlocking orders it, and
    then the what-if says the lock is what does. ``--predict`` predicts nothing more."""
    from fdprof.analysis.predict import predict_races
    from fdprof.analysis.whatif import what_if_drop_lock

    p, dev, finish = recorded
    compute = dev.stream()
    lock, lock_obj = threading.Lock(), probe.obj(S.LOCK_KV_PREFIX + "0")
    worker_done = threading.Event()
    ids = {}

    def worker():
        with lock:
            p.acquire(lock_obj)
            with p.span(H.EXECUTE_MODEL) as host:
                ids["kernel"] = compute.launch(WRITE, time.sleep, 0.05, parent=host)
                p.set_ints(ids["kernel"], H.KV_GPU_WRITE, [5])
            if sync_before_unlock:
                compute.synchronize()
            p.release(lock_obj)
        worker_done.set()

    def transfer():
        worker_done.wait(30)
        with lock:
            p.acquire(lock_obj)
            with p.span(H.SWAP) as sid:
                p.set_ints(sid, H.KV_GPU_READ, [5])
                ids["swap"] = sid
            p.release(lock_obj)

    threads = [threading.Thread(target=f) for f in (worker, transfer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dev.synchronize()
    trace = finish()
    pair = {frozenset((ids["kernel"], ids["swap"]))}

    def pairs(races):
        return {frozenset(p) for p in zip(races["span_a"], races["span_b"], strict=True)}

    what_if = what_if_drop_lock(trace)
    if sync_before_unlock:
        assert what_if.with_lock.clean and pairs(what_if.newly_unordered) == pair
    else:
        assert pairs(what_if.with_lock.races) == pair  # the lock covered the launch only
        assert pairs(what_if.without_lock.races) == pair and what_if.newly_unordered.empty
    # WCP on device lanes: the kernel inside the synchronised hold conflicts with the swap's
    # read, so the lock's edge stays; unsynchronised, the one pair is already an observed race
    predicted = predict_races(trace)
    assert pairs(predicted.races) == pairs(what_if.with_lock.races)
    assert predicted.predicted.empty and predicted.counts["predicted"] == 0
