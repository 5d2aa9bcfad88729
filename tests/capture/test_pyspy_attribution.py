"""py-spy samples attributed to spans: the math on a crafted sample file (exact), and a real
``fdprof run --py-spy`` (real py-spy on the real engine processes)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fdprof.analysis import python_time as P
from fdprof.analysis.diff import diff_traces
from fdprof.report.render import render
from fdprof.report.tables import document
from fdprof.trace import load, save
from tests.analysis.builder import TraceBuilder
from tests.cli import fdprof

PID, TID, PY_TID = 100, 7, 139790542453632
MS = 1_000_000
#: the sampler's start on the monotonic clock: with a record-file offset of 0 (the native
#: writer's anchor) and 200 Hz, py-spy's ts 0 lands at 1 s (moved 1/rate = 5 ms earlier)
STARTED = 1_000 * MS + 5 * MS


def _event(ph: str, name: str, ts_ms: float, file: str = "", line: int = 0) -> dict:
    return {"args": {"filename": file, "line": line}, "cat": "py-spy", "name": name, "ph": ph,
            "pid": PID, "tid": PY_TID, "ts": int(ts_ms * 1000)}  # fmt: skip


def crafted_run(tmp_path: Path) -> Path:
    b = TraceBuilder()
    b.process(PID, 0, 0, role="worker")
    b.span(f"{PID}/{TID}", "execute_model", 1005 * MS, 1050 * MS, role="worker")
    b.span(f"{PID}/{TID}", "lock_wait", 1045 * MS, 1080 * MS, role="worker")
    b.span(f"{PID}/{TID}", "schedule", 1075 * MS, 1078 * MS, role="worker")
    b.span(f"{PID}/8", "execute_model", 1000 * MS, 1080 * MS, role="worker")  # not sampled
    run = tmp_path / "run"
    save(b.build(), run, "native")
    events = [
        _event("B", f"thread ({TID}): MainThread", 0),
        _event("B", "loop", 0, "/x/engine/worker.py", 1),
        _event("B", "Worker.execute_model", 0, "/x/engine/worker.py", 10),
        _event("B", "matmul", 0, "/x/lib/python3.11/site-packages/torch/m.py", 5),
        _event("E", "matmul", 30, "/x/lib/python3.11/site-packages/torch/m.py", 5),
        _event("B", "softmax", 30, "/x/lib/python3.11/site-packages/torch/m.py", 9),
        _event("E", "softmax", 50, "/x/lib/python3.11/site-packages/torch/m.py", 9),
        _event("E", "Worker.execute_model", 50, "/x/engine/worker.py", 10),
        _event("B", "IPCLock.acquire", 50, "/x/engine/ipc.py", 3),
        _event("E", "IPCLock.acquire", 80, "/x/engine/ipc.py", 3),
        _event("E", "loop", 80, "/x/engine/worker.py", 1),
        _event("E", f"thread ({TID}): MainThread", 80),
    ]
    (run / "pyspy").mkdir()
    (run / "pyspy" / "w.json").write_text(json.dumps(events))
    index = [
        {
            "pid": PID,
            "role": "worker",
            "file": "w.json",
            "ok": True,
            "rate": 200,
            "started_monotonic_ns": STARTED - 2 * MS,
            "popen_returned_monotonic_ns": STARTED,
        }
    ]
    (run / "pyspy" / "index.json").write_text(json.dumps(index))  # fmt: skip
    return run


def test_crafted_samples_land_on_the_spans_of_their_thread(tmp_path):
    trace = load(crafted_run(tmp_path))
    samples = trace.meta["pyspy"]
    assert samples.threads == {(PID, TID): "MainThread"}
    assert samples.processes[PID]["start_error_ns"] == [-2 * MS, 0]
    assert samples.segments["start"].min() == 1000 * MS  # ts 0: started - 1/rate
    frames, totals = P.attribute(trace)
    got = {(r.span, r.frame, r.caller): r.ns for r in frames.itertuples()}
    assert got == {
        ("execute_model", "matmul (torch/m.py)", "Worker.execute_model (engine/worker.py:10)"):
            25 * MS,
        ("execute_model", "softmax (torch/m.py)", "Worker.execute_model (engine/worker.py:10)"):
            20 * MS,
        ("lock_wait", "softmax (torch/m.py)", "Worker.execute_model (engine/worker.py:10)"):
            5 * MS,
        ("lock_wait", "IPCLock.acquire (engine/ipc.py)", "loop (engine/worker.py:1)"): 30 * MS,
        ("schedule", "IPCLock.acquire (engine/ipc.py)", "loop (engine/worker.py:1)"): 3 * MS,
    }  # fmt: skip
    t = totals.set_index("span")
    assert t.loc["execute_model", "spans"] == 1  # the unsampled thread's span is not counted
    assert t.loc["execute_model", "ns"] == 45 * MS
    assert t.loc["execute_model", "samples"] == pytest.approx(9.0)  # 200 Hz x 45 ms
    assert t.loc["execute_model", "on_stack_ns"] == 45 * MS
    assert t.loc["lock_wait", "on_stack_ns"] == -1  # no function of that name


def test_shares_and_wilson_intervals():
    from scipy.stats import binomtest  # here: 1.6 s of import in every worker's collection

    for k, n in ((0, 10), (3, 10), (10, 10), (17, 400), (250, 400)):
        want = binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert P.wilson(k, n) == pytest.approx((want.low, want.high), abs=1e-9)
    frames = [
        P.pd.DataFrame(
            {
                "role": ["w"] * 2,
                "span": ["s"] * 2,
                "frame": ["a", "b"],
                "caller": ["-", "-"],
                "ns": [30, 10],
                "samples": [300.0, 100.0],
            }
        )
    ]
    totals = [P.pd.DataFrame({"role": ["w"], "span": ["s"], "spans": [2], "ns": [40],
                              "samples": [400.0], "on_stack_ns": [-1]})]  # fmt: skip
    (entry,) = P.summary(P.combine([P.summed(frames, totals), P.summed(frames, totals)]))
    assert entry["spans"] == 4 and entry["samples"] == 800.0 and entry["on_stack"] is None
    a = entry["frames"][0]
    assert a["frame"] == "a" and a["share"] == 0.75 and a["samples"] == 600.0
    assert a["ci95"] == pytest.approx(P.wilson(600, 800))


def test_every_format_shows_the_table_and_perfetto_has_the_track(tmp_path):
    run = crafted_run(tmp_path)
    trace = load(run)
    doc = document(diff_traces(trace, load(run), step_name="execute_model"))
    text, md, html = (render(doc, f) for f in ("text", "md", "html"))
    title = "base: Python inside execute_model (worker), 1 span(s), 45 ms sampled"
    assert title in text and title in md and title in html
    assert "matmul (torch/m.py)" in text and "55.6% [" in text  # 25 of 45 ms
    data = json.loads(render(doc, "json"))
    (em,) = [e for e in data["base"]["python_time"] if e["span"] == "execute_model"]
    assert em["frames"][0]["share"] == pytest.approx(25 / 45) and em["on_stack"] == 1.0
    assert "base: Python inside lock_wait (worker)" in text
    # schedule: 0.6 expected samples, under the least a table needs: one line says so
    assert "schedule (worker) 1 span(s), 3 ms, ~0.6 samples" in text
    out = tmp_path / "p.json"
    save(trace, out, "perfetto")
    events = json.loads(out.read_text())["traceEvents"]
    names = [e for e in events if e.get("name") == "thread_name"
             and e["args"]["name"] == f"py-spy MainThread ({TID})"]  # fmt: skip
    (track,) = {e["tid"] for e in names}
    slices = [e for e in events if e.get("cat") == "py-spy" and e["tid"] == track]
    got = {(e["name"], float(e["ts"]), float(e["dur"])) for e in slices}
    assert ("matmul", 1_000_000.0, 30_000.0) in got  # µs on the run's timebase
    assert ("IPCLock.acquire", 1_050_000.0, 30_000.0) in got and len(slices) == 5


def _pyspy_can_attach() -> str | None:
    """Why py-spy cannot sample here (None: it can): it needs ptrace over the process."""
    binary = Path(sys.executable).parent / "py-spy"
    if not binary.is_file() and shutil.which("py-spy") is None:
        return "py-spy is not installed (the capture extra)"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        command = [str(binary) if binary.is_file() else "py-spy", "dump", "--pid", str(child.pid)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    finally:
        child.kill()
        child.wait()
    if done.returncode != 0:
        return f"py-spy cannot attach here (ptrace): {done.stderr.strip()[:200]}"
    return None


def test_a_real_run_with_py_spy(tmp_path):
    why = _pyspy_can_attach()
    if why:
        pytest.skip(why)
    run = tmp_path / "run"
    done = fdprof("run", "--kv-lock", "ipc", "--requests", "16", "--seed", "3", "--py-spy",
                  "--out", run)  # fmt: skip
    assert done.returncode == 0, done.stderr
    index = json.loads((run / "pyspy" / "index.json").read_text())
    assert {e["role"] for e in index} >= {"engine", "worker", "transfer"}
    assert all(e["ok"] and e["started_monotonic_ns"] <= e["popen_returned_monotonic_ns"]
               for e in index)  # fmt: skip
    trace = load(run)
    summary = P.summary(P.attribute(trace))
    (em,) = [e for e in summary if e["span"] == "execute_model" and e["role"] == "worker"]
    # the samples sit where the spans are: execute_model is on most of its sampled stacks
    assert em["on_stack"] > 0.5, em
    assert any("engine/model.py" in f["frame"] or "torch/" in f["frame"] for f in em["frames"])
    report = fdprof("diff", run, run, "--format", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["new"]["python_time"]
