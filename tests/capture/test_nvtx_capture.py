"""NVTX capture with our injection library, in real spawned processes: ranges land in a
per-process file that survives os._exit and SIGKILL, payloads join to the recorded spans,
and without the library the probe's NVTX sink switches itself off."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from unittest import mock

import pytest

from fdprof import probe
from fdprof.capture import nvtx as capture
from fdprof.errors import FdprofError
from fdprof.trace.nvtx_capture import capture_files, read_file, read_nvtx_capture, sniff

SWAP = probe.name("swap", "swap")
EXEC = probe.name("execute_model", "execute_model")
BLOCKS = probe.key("kv.gpu_write")
QUEUE = probe.obj("queue:swap")


def _instrumented(run_dir: str, role: str, count: int, how: str) -> None:
    p = probe.configure(probe.ProbeConfig(run_dir=run_dir, nvtx=True), role)
    assert p.nvtx is not None
    for i in range(count):
        with p.span(EXEC if role == "worker" else SWAP) as sid:
            p.set_ints(sid, BLOCKS, [i])
            p.release(QUEUE, i, sid)
    sid = p.begin(SWAP)  # ends on another thread
    t = threading.Thread(target=p.end, args=(sid,))
    t.start()
    t.join()
    p.begin(SWAP)  # never ends
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0)


def _run(run_dir, role: str, count: int, how: str, env: dict[str, str]) -> int:
    with mock.patch.dict(os.environ, env):
        proc = mp.get_context("spawn").Process(
            target=_instrumented, args=(str(run_dir), role, count, how)
        )
        proc.start()
    proc.join(60)
    assert proc.exitcode == (-signal.SIGKILL if how == "kill" else 0)
    return proc.pid


@pytest.mark.parametrize("how", ["_exit", "kill"])
def test_capture_from_spawned_processes_joins_to_records(tmp_path, how):
    env = capture.injection_env(tmp_path)
    worker = _run(tmp_path, "worker", 200, how, env)
    transfer = _run(tmp_path, "transfer", 100, how, env)
    assert len(capture_files(tmp_path)) == 2
    assert sniff(tmp_path / "nvtx", b"") and not sniff(tmp_path, b"")
    assert sniff(capture_files(tmp_path)[0], b"FDNVTX1\n...")
    nv = read_nvtx_capture(tmp_path)
    spans = nv.spans.set_index("span_id")
    by_pid = nv.spans.groupby("pid")["name"].agg(lambda s: sorted(set(s)))
    assert by_pid[worker] == ["execute_model", "swap"]
    assert by_pid[transfer] == ["swap"]
    assert nv.spans.groupby("pid").size().to_dict() == {worker: 202, transfer: 102}
    cats = nv.attr("nvtx.category")
    assert cats[spans.index[spans.name == "execute_model"]].eq("execute_model").all()
    assert (nv.spans.end == -1).sum() == 2  # the two spans that never ended
    # payload = span id: every NVTX range is a recorded span with the same name and pid
    from fdprof.formats import records as R

    for pid, role in ((worker, "worker"), (transfer, "transfer")):
        rec = tmp_path / f"{role}-0-{pid}.rec"
        data = rec.read_bytes()
        strings, names = {}, {}
        for kind, _, _, f, _ in R.iter_records(data):
            if kind == R.Kind.STRING:
                strings[f[0]] = f[1]
            elif kind == R.Kind.SPAN_BEGIN:
                names[f[0]] = strings[f[2]]
        mine = nv.spans[nv.spans.pid == pid]
        assert dict(zip(mine.span_id, mine.name, strict=True)) == names
    syncs = nv.syncs[nv.syncs.pid == worker]
    assert list(syncs.seq) == list(range(200))
    assert set(syncs.op) == {"release"} and set(syncs.obj) == {"queue:swap"}
    offthread = nv.spans[(nv.spans.pid == worker) & (nv.spans.name == "swap")]
    assert (offthread.end >= offthread.start).sum() == 1
    assert nv.meta["dropped"] == 0


def test_trim_keeps_every_record(tmp_path):
    env = capture.injection_env(tmp_path)
    _run(tmp_path, "worker", 50, "_exit", env)
    (path,) = capture_files(tmp_path)
    before = read_file(path)
    assert path.stat().st_size == 64 << 20
    capture.trim(tmp_path)
    assert path.stat().st_size == before.used
    assert read_file(path).records == before.records


def _no_tool(out) -> None:
    p = probe.configure(probe.ProbeConfig(nvtx=True), "worker")
    out.put(not p.enabled)


def test_without_the_library_the_nvtx_sink_is_off():
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_no_tool, args=(out,))
    proc.start()
    assert out.get(timeout=60) is True
    proc.join(30)


def _forks(run_dir: str) -> None:
    import nvtx

    dom = nvtx.get_domain("fdprof")
    dom.push_range(dom.get_event_attributes(message="parent"))
    child = os.fork()
    if child == 0:
        dom.push_range(dom.get_event_attributes(message="child", payload=7))
        dom.pop_range()
        os._exit(0)
    os.waitpid(child, 0)
    dom.pop_range()
    os._exit(0)


def test_forked_child_writes_its_own_file(tmp_path):
    env = capture.injection_env(tmp_path)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        proc = mp.get_context("spawn").Process(target=_forks, args=(str(tmp_path),))
        proc.start()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    proc.join(60)
    nv = read_nvtx_capture(tmp_path)
    assert len(capture_files(tmp_path)) == 2
    names = dict(zip(nv.spans.name, nv.spans.pid, strict=True))
    assert names["parent"] == proc.pid and names["child"] != proc.pid
    assert nv.spans.set_index("name").loc["child", "span_id"] == 7


def test_bad_input_is_one_line_error(tmp_path):
    with pytest.raises(FdprofError, match="no NVTX capture files"):
        read_nvtx_capture(tmp_path)
    bad = tmp_path / "nvtx-1.cap"
    bad.write_bytes(b"x" * 100)
    with pytest.raises(FdprofError, match="bad magic"):
        read_nvtx_capture(bad)
