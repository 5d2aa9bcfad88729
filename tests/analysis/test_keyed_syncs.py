"""The ``keyed`` sync column, end to end: the probe's ``release(obj, seq=None)``, the native
record flag (and the legacy rule for files written before it), Chrome ``args`` and OTLP event
attributes, each read into the model and judged by the detector."""

from __future__ import annotations

import json
import os

import pytest

from fdprof import probe
from fdprof.analysis.hazards import find_hazards
from fdprof.formats import records as R
from fdprof.probe.sdk.recorder import open_recorder
from fdprof.trace import load, save

from .builder import TraceBuilder

A, B = "1/1", "2/1"


@pytest.fixture(params=["python", "c"])
def impl(request, monkeypatch):
    monkeypatch.setenv("FDPROF_RECORDER", request.param)
    return request.param


def test_probe_release_without_seq_is_unkeyed_and_with_any_seq_keyed(tmp_path, impl):
    rec = open_recorder(tmp_path / f"worker-0-{os.getpid()}.rec", "worker", 0, 1)
    lock, queue = probe.obj("lock:kv/dp0"), probe.obj("queue:swap")
    seqs = [-1, 0, -(2**63), 2**63 - 1]
    rec.release(lock)
    rec.acquire(lock)
    for seq in seqs:
        rec.release(queue, seq)
    rec.close()
    syncs = load(tmp_path).syncs
    assert syncs["keyed"].tolist() == [False, False, True, True, True, True]
    assert syncs["seq"].tolist() == [-1, -1, *seqs]


def _v1_file(path, syncs: list[tuple[int, int, int]]) -> None:
    """A record file as the first format wrote it: no ranks in the header, no keyed flag."""
    parts = [R.FILE_HEADER_V1.pack(R.MAGIC_V1, 4242, 0, 0, b"worker")]
    obj = b"queue:swap"
    parts.append(R.RECORD_HEADER.pack(R.Kind.STRING, 0, R.STRING.size + len(obj), 1))
    parts.append(R.STRING.pack(1) + obj)
    for op, seq, t in syncs:
        parts.append(R.RECORD_HEADER.pack(R.Kind.SYNC, 0, R.SYNC.size, 1))
        parts.append(R.SYNC.pack(0, 1, op, seq, t))
    path.write_bytes(b"".join(parts))


def test_a_legacy_native_file_is_keyed_where_its_seq_is_not_minus_one(tmp_path):
    ops = [(R.SyncCode.RELEASE, -1, 10), (R.SyncCode.RELEASE, 5, 11), (R.SyncCode.ACQUIRE, 5, 12)]
    _v1_file(tmp_path / "worker-0-4242.rec", ops)
    trace = load(tmp_path)
    assert trace.syncs["keyed"].tolist() == [False, True, True]
    assert trace.processes["dp_rank"].tolist() == [-1]


def _chrome(tmp_path, sync_args: list[dict]) -> object:
    events = [
        {"ph": "X", "name": "swap", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
         "args": {"kv.gpu_write": [7]}},
        {"ph": "X", "name": "execute_model", "pid": 2, "tid": 1, "ts": 30, "dur": 10,
         "args": {"kv.gpu_read": [7]}},
    ]  # fmt: skip
    for i, args in enumerate(sync_args):
        events.append({"ph": "i", "s": "t", "name": "sync", "pid": args.pop("pid"), "tid": 1,
                       "ts": 15 + i, "args": args})  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return load(path)


@pytest.mark.parametrize("seq", [-1, 0, 2**63 - 1, -(2**63)])
def test_chrome_sync_is_keyed_exactly_when_it_carries_a_seq(tmp_path, seq):
    release = {"pid": 1, "sync.op": "release", "sync.obj": "signal:done"}
    acquire = {"pid": 2, "sync.op": "acquire", "sync.obj": "signal:done", "sync.seq": seq}
    trace = _chrome(tmp_path, [dict(release), dict(acquire)])
    assert trace.syncs["keyed"].tolist() == [False, True]
    # an unkeyed release is not the release of any seq: the read is unordered
    assert find_hazards(trace).counts["races"] == 1
    trace = _chrome(tmp_path, [dict(release, **{"sync.seq": seq}), dict(acquire)])
    assert find_hazards(trace).counts["races"] == 0


def test_keyed_survives_every_writer(tmp_path):
    b = TraceBuilder()
    b.span(A, "swap", 0, 10, writes=(7,))
    b.release("lock:kv/dp0", 11, A)
    b.release("signal:done", 12, A, -1)
    b.release("signal:done", 13, A, 2**63 - 1)
    b.acquire("signal:done", 20, B, -1)
    b.acquire("lock:kv/dp0", 21, B)
    b.span(B, "execute_model", 22, 30, reads=(7,))
    trace = b.build()
    for name in ("native", "t.perfetto.json", "t.otlp.json"):
        save(trace, tmp_path / name)
        back = load(tmp_path / name).syncs.sort_values("time")
        assert back["keyed"].tolist() == [False, True, True, True, False], name
        assert back["seq"].tolist() == [-1, -1, 2**63 - 1, -1, -1], name
