"""The recorder twins (pure Python and C) write the identical format, survive a hard exit,
and can be read while they write."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading

import pytest
from probe_records import IMPLS, decode, recorder_class, spans_of

from fdprof.formats import records as R
from fdprof.probe.api import key, name, obj
from fdprof.probe.sdk.recorder import CHUNK, MAX_PAYLOAD, open_recorder


def write_fixed_sequence(rec) -> None:
    """Low-level calls with explicit times: output depends only on the arguments."""
    n = rec.intern("swap")
    k = rec.intern("kv.gpu_read")
    rec.name_thread("main")
    rec.span_begin(7, 3, n, 1000)
    rec.attr_int(7, k, -5)
    rec.attr_float(7, rec.intern("ratio"), 0.25)
    rec.attr_str(7, rec.intern("swap.direction"), "to_cpu")
    rec.attr_ints(7, k, [1, 2, 3, 2**31 - 1])
    rec.sync(7, rec.intern("queue:swap"), R.SyncCode.RELEASE, 42, 1500, True)
    rec.context(7, bytes(range(16)), 99, True)
    rec.span_end(7, 2000)


def test_twins_write_identical_bytes(tmp_path):
    paths = {}
    for impl in IMPLS:
        paths[impl] = tmp_path / f"{impl}.rec"
        rec = recorder_class(impl)(paths[impl], "worker")
        write_fixed_sequence(rec)
        assert rec.records == 16
        rec.close()
    data = {impl: p.read_bytes() for impl, p in paths.items()}
    assert data["c"][R.FILE_HEADER.size :] == data["python"][R.FILE_HEADER.size :]
    header = R.read_header(data["c"])
    assert header.pid == os.getpid() and header.role == "worker"


def test_fixed_sequence_decodes(tmp_path, impl):
    rec = open_recorder(tmp_path / "x.rec", "transfer")
    write_fixed_sequence(rec)
    rec.close()
    header, recs = decode(tmp_path / "x.rec")
    assert header.role == "transfer"
    assert {r[2] for r in recs} == {threading.get_native_id()}
    sync = next(f for k, _, _, f in recs if k == R.Kind.SYNC)
    assert sync[2:] == (R.SyncCode.RELEASE, 42, 1500)
    ctx = next((fl, f) for k, fl, _, f in recs if k == R.Kind.CONTEXT)
    assert ctx == (R.CONTEXT_LINK, (7, bytes(range(16)), 99))
    span = spans_of(tmp_path / "x.rec")[7]
    assert span["attrs"] == {
        "kv.gpu_read": [1, 2, 3, 2**31 - 1],
        "ratio": 0.25,
        "swap.direction": "to_cpu",
    }
    assert (span["t0"], span["t1"], span["parent"]) == (1000, 2000, 3)


def test_handle_methods_and_span_ids(tmp_path, impl):
    rec = open_recorder(tmp_path / "h.rec", "engine")
    assert type(rec).__module__.endswith("_recorder" if impl == "c" else "recorder")
    swap, blocks, op = name("swap", "swap"), key("kv.cpu_write"), obj("queue:swap")
    sid = rec.begin(swap)
    rec.set_ints(sid, blocks, [4, 5])
    rec.set_int(sid, key("swap.task_id"), 3)
    rec.set_float(sid, key("x"), 1.5)
    rec.set_str(sid, key("swap.direction"), "to_cpu")
    rec.release(op, 3, sid)
    rec.acquire(op)
    rec.end(sid)
    with rec.span(name("step", "step"), sid) as child:
        assert child == sid + 1
    rec.close()
    assert sid >> 40 == os.getpid()
    spans = spans_of(tmp_path / "h.rec")
    assert spans[sid]["attrs"]["kv.cpu_write"] == [4, 5]
    assert spans[sid]["attrs"]["swap.task_id"] == 3
    assert spans[child]["parent"] == sid and spans[child]["t1"] >= spans[child]["t0"]
    _, recs = decode(tmp_path / "h.rec")
    syncs = [f for k, _, _, f in recs if k == R.Kind.SYNC]
    assert [(s[0], s[2], s[3]) for s in syncs] == [
        (sid, R.SyncCode.RELEASE, 3),
        (0, R.SyncCode.ACQUIRE, R.NO_SEQ),
    ]
    names = [f[1] for k, _, _, f in recs if k == R.Kind.STRING]
    assert names.count("swap") == 1  # interned once


def test_grows_past_a_chunk_and_caps_oversized_values(tmp_path, impl):
    rec = open_recorder(tmp_path / "g.rec", "worker")
    k = key("kv.gpu_write")
    n = name("execute_model", "execute_model")
    count = CHUNK // 64  # 96-byte spans: past the first chunk
    for i in range(count):
        sid = rec.begin(n)
        rec.set_int(sid, k, i)
        rec.end(sid)
    big = rec.begin(n)
    rec.set_ints(big, k, range(100_000))
    rec.set_str(big, key("long"), "é" * 40_000)
    rec.end(big)
    rec.close()
    spans = spans_of(tmp_path / "g.rec")
    assert len(spans) == count + 1
    assert len(spans[big]["attrs"]["kv.gpu_write"]) == (MAX_PAYLOAD - R.ATTR_INTS.size) // 4
    assert set(spans[big]["attrs"]["long"]) == {"é"}
    assert (tmp_path / "g.rec").stat().st_size > CHUNK


def test_closed_recorder_raises(tmp_path, impl):
    rec = open_recorder(tmp_path / "c.rec", "worker")
    rec.close()
    with pytest.raises(ValueError):
        rec.span_end(1, 2)


def _write_then_die(path: str, impl: str, count: int, how: str) -> None:
    os.environ["FDPROF_RECORDER"] = impl
    rec = open_recorder(path, "transfer")
    n, k = name("swap", "swap"), key("swap.blocks")
    for i in range(count):
        sid = rec.begin(n)
        rec.set_int(sid, k, i)
        rec.end(sid)
    open_span = rec.begin(n)
    assert open_span
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(3)


@pytest.mark.parametrize("how", ["kill", "_exit"])
def test_hard_exit_loses_nothing(tmp_path, impl, how):
    path = tmp_path / "dead.rec"
    proc = mp.get_context("spawn").Process(
        target=_write_then_die, args=(str(path), impl, 5000, how)
    )
    proc.start()
    proc.join(60)
    assert proc.exitcode == (-signal.SIGKILL if how == "kill" else 3)
    spans = spans_of(path)
    assert len(spans) == 5001
    ended = [s for s in spans.values() if "t1" in s]
    assert sorted(s["attrs"]["swap.blocks"] for s in ended) == list(range(5000))
    assert header_pid(path) == proc.pid


def header_pid(path) -> int:
    return R.read_header(path.read_bytes()).pid


def _inherited(rec) -> None:
    n = name("swap", "swap")
    for _ in range(1000):
        rec.end(rec.begin(n))
    os._exit(0)


def test_forked_child_does_not_write_into_the_parents_file(tmp_path, impl):
    rec = open_recorder(tmp_path / "parent.rec", "engine")
    n = name("step", "step")
    rec.end(rec.begin(n))
    child = mp.get_context("fork").Process(target=_inherited, args=(rec,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    for _ in range(10):
        rec.end(rec.begin(n))
    rec.close()
    spans = spans_of(tmp_path / "parent.rec")
    assert len(spans) == 11 and {s["name"] for s in spans.values()} == {"step"}
