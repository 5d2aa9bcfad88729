"""A killed process stops the run within seconds, named with the reason; nothing is left in
/dev/shm; Ctrl-C on ``fdprof run`` stops cleanly too."""

import json
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from fdprof.engine.launcher import EngineCrashed, _Group
from tests.engine.conftest import SHM, manifest, run


class KillAfterStart:
    """An observer that SIGKILLs one engine process shortly after the run has started."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.stopped = False

    def start(self, run_dir, processes):
        pid = next(p["pid"] for p in processes if p["role"] == self.role)
        threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()

    def stop(self):
        self.stopped = True


@pytest.mark.slow
@pytest.mark.parametrize("role", ["worker"])
def test_killed_process_is_named_and_run_stops(tmp_path, role):
    killer = KillAfterStart(role)
    t0 = time.monotonic()
    with pytest.raises(EngineCrashed, match=rf"{role} process .* killed by SIGKILL"):
        run(tmp_path, observers=[killer], requests=200)
    assert time.monotonic() - t0 < 60
    assert killer.stopped
    m = manifest(tmp_path / "run")
    assert m["status"] == "crashed" and "SIGKILL" in m["error"]
    assert all(p["exitcode"] is not None for p in m["processes"])
    dead = next(p for p in m["processes"] if p["role"] == role)
    assert dead["exitcode"] == -signal.SIGKILL
    assert (tmp_path / "run" / dead["record"]).stat().st_size > 0


@pytest.mark.slow
def test_ctrl_c_interrupts_cleanly(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fdprof",
            "run",
            "--out",
            str(tmp_path / "run"),
            "--requests",
            "400",
            "--kv-lock",
            "ipc",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run_json = tmp_path / "run" / "run.json"
        if run_json.exists() and list((tmp_path / "run").glob("worker-*.rec")):
            break
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == "fdprof run: interrupted"
    assert "Traceback" not in err
    m = json.loads((tmp_path / "run" / "run.json").read_text())
    assert m["status"] == "interrupted"
    assert list(SHM.glob(f"fdprof-{proc.pid}-*")) == []


@pytest.mark.slow
def test_children_exit_when_the_supervisor_is_killed(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fdprof", "run", "--out", str(out), "--requests", "400"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(out.glob("*.rec"))) < 3:
        time.sleep(0.1)
    pids = [p["pid"] for p in json.loads((out / "run.json").read_text())["processes"]]
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if _running(p)]


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie lingers until init reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class _LateQueue:
    """The report queue as the supervisor saw it in CI once: the first read times out just
    before the process's "done" arrives and the process exits."""

    def __init__(self, real, child, sent) -> None:
        self.real, self.child, self.sent = real, child, sent
        self.missed = False

    def get(self, timeout: float):
        if not self.missed:
            self.missed = True
            self.sent.set()
            self.child.join(10)
            raise queue.Empty
        return self.real.get(timeout=timeout)


def _report_done(report_q, sent) -> None:
    sent.wait(10)
    report_q.put(("done", "engine", 0, -1, "served"))


def _exit_silently() -> None:
    pass


def test_done_then_exit_during_a_read_is_not_a_crash():
    """A process that sends "done" and exits while the supervisor reads the queue is done, not
    dead (the exits are looked at before the messages are read). Fails when they are not."""
    group = _Group(SimpleNamespace(tp=1))
    mp = multiprocessing.get_context("fork")
    sent = mp.Event()
    child = mp.Process(target=_report_done, args=(group.report_q, sent))
    child.start()
    group.procs.append((("engine", 0, -1), child))
    group.report_q = _LateQueue(group.report_q, child, sent)
    group.poll(0.05)
    group.poll(0.05)
    assert group.done == {("engine", 0, -1): "served"}


def test_exit_without_done_is_a_crash():
    group = _Group(SimpleNamespace(tp=1))
    child = multiprocessing.get_context("fork").Process(target=_exit_silently)
    child.start()
    child.join(10)
    group.procs.append((("worker", 0, 0), child))
    with pytest.raises(EngineCrashed, match=r"worker process \(dp rank 0, pid \d+\) died: "
                                            r"exited with code 0"):  # fmt: skip
        group.poll(0.05)
