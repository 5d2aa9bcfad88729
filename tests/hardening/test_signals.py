"""SIGTERM ends ``fdprof run`` and ``fdprof ab`` as Ctrl-C does: the engine's processes stopped,
its shared memory and lock files removed, ``run.json`` saying ``interrupted``, exit 143; more
signals during that cleanup do not cut it short; no resource-tracker warning on stderr.

Real processes throughout: the command is started as a user would, signalled once it serves
(its control block in /dev/shm counts a finished request), and everything it made is looked
for afterwards.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fdprof.files import LOCK_NAME

SHM = Path("/dev/shm")
ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "ab" / "toy_engine.py"
#: what multiprocessing's resource tracker says about what a process left behind
TRACKER_WARNINGS = ("resource_tracker", "leaked", "semaphore", "shared_memory")

pytestmark = pytest.mark.slow


def fdprof(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fdprof", *map(str, args)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def control_block(proc: subprocess.Popen) -> np.ndarray | None:
    """The run's control block (slot 0: stop asked; 1 + r: requests DP rank r finished)."""
    for path in SHM.glob(f"fdprof-{proc.pid}-*-control"):
        try:
            return np.fromfile(path, dtype=np.int64)
        except (OSError, ValueError):
            return None
    return None


def wait_for(proc: subprocess.Popen, ready, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"fdprof exited ({proc.returncode}) before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} in {timeout} s")
        time.sleep(0.05)


def serving(proc: subprocess.Popen, out: Path) -> None:
    """Wait until the run has records and has finished a request."""

    def ready() -> bool:
        block = control_block(proc)
        return bool(list(out.glob("worker-*.rec"))) and block is not None and block[1:].sum() > 0

    wait_for(proc, ready, "finished request")


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def assert_cleaned_up(proc: subprocess.Popen, out: Path, err: str, signame: str) -> dict:
    assert "Traceback" not in err, err
    for word in TRACKER_WARNINGS:
        assert word not in err, err
    m = json.loads((out / "run.json").read_text())
    assert m["status"] == "interrupted" and signame in m["error"]
    assert list(SHM.glob(f"fdprof-{proc.pid}-*")) == []  # pools, signals, control, kv lock
    assert not (out / LOCK_NAME).exists()
    assert [p for p in m["processes"] if running(p["pid"])] == []
    assert all(p["exitcode"] is not None for p in m["processes"])
    return m


def test_sigterm_stops_a_run_like_ctrl_c(tmp_path):
    out = tmp_path / "run"
    proc = fdprof("run", "--out", out, "--requests", 2000, "--kv-lock", "ipc")
    serving(proc, out)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "fdprof run: terminated (SIGTERM)"
    assert_cleaned_up(proc, out, err, "SIGTERM")


def test_more_signals_during_the_cleanup_do_not_cut_it_short(tmp_path):
    """SIGTERM, then once the supervisor is stopping its processes (the control block's stop
    flag is set; a transfer delay keeps a copy in flight, so that takes a while) Ctrl-C and
    SIGTERM again: the cleanup still runs to its end, and the exit status is the first's."""
    out = tmp_path / "run"
    proc = fdprof("run", "--out", out, "--requests", 2000, "--kv-lock", "ipc",
                  "--fault-delay-ms", 400)  # fmt: skip
    serving(proc, out)
    proc.send_signal(signal.SIGTERM)

    def stopping() -> bool:
        block = control_block(proc)
        return block is not None and block[0] == 1

    wait_for(proc, stopping, "stop flag")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
        assert proc.poll() is None  # still cleaning up: these land inside the cleanup
        proc.send_signal(sig)
        time.sleep(0.05)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "fdprof run: terminated (SIGTERM)"
    assert_cleaned_up(proc, out, err, "SIGTERM")


def test_ctrl_c_still_exits_130(tmp_path):
    out = tmp_path / "run"
    proc = fdprof("run", "--out", out, "--requests", 2000)
    serving(proc, out)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "fdprof run: interrupted"
    assert_cleaned_up(proc, out, err, "Ctrl-C")


def test_sigterm_stops_an_ab_and_its_commands_process_group(tmp_path):
    """The generic A/B's command runs in a session of its own: SIGTERM to ``fdprof ab`` reaches
    the command (and what it started) too; the interrupted run's run.json says so."""
    out = tmp_path / "ab"
    slow = f"{sys.executable} {TOY} --tokens 100000 --step-ms 5"
    proc = fdprof("ab", "--baseline", slow, "--candidate", slow, "--runs", 2, "--out", out)
    run_dir = out / "runs" / "baseline-0"
    wait_for(proc, lambda: bool(list(run_dir.glob("engine-0-*.rec"))), "toy engine record")
    (record,) = run_dir.glob("engine-0-*.rec")
    engine_pid = int(record.stem.rsplit("-", 1)[1])
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "fdprof ab: terminated (SIGTERM)"
    assert "Traceback" not in err
    assert not running(engine_pid)
    m = json.loads((run_dir / "run.json").read_text())
    assert m["status"] == "interrupted" and "SIGTERM" in m["error"]
    assert not (out / LOCK_NAME).exists()


CLEANUP = """
import os, signal, sys, time
from fdprof import interrupts
done = []
try:
    with interrupts.handled():
        try:
            os.kill(os.getpid(), signal.SIG1)
            time.sleep(5)
        finally:
            for i in range(3):  # a cleanup a signal lands in, twice
                os.kill(os.getpid(), signal.SIG2)
                time.sleep(0.01)
                done.append(i)
except KeyboardInterrupt as exc:
    print(len(done), interrupts.exit_code(exc))
"""


@pytest.mark.parametrize(("first", "second", "code"), [("SIGTERM", "SIGINT", 143),
                                                       ("SIGINT", "SIGTERM", 130)])  # fmt: skip
def test_signals_after_the_first_are_noted_not_raised(first, second, code):
    script = CLEANUP.replace("SIG1", first).replace("SIG2", second)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3", str(code)]


SHIELDED = """
import os, signal, time
from fdprof import interrupts
steps = []
try:
    with interrupts.handled():
        with interrupts.shielded():  # a cleanup with no interrupt behind it
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            steps.append("cleaned")
        steps.append("after")
except KeyboardInterrupt as exc:
    print(",".join(steps), interrupts.exit_code(exc))
"""


def test_a_signal_during_a_shielded_cleanup_is_raised_after_it():
    result = subprocess.run([sys.executable, "-c", SHIELDED], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cleaned", "143"]


INTERRUPTED = """
import os, signal
from fdprof import interrupts
seen = []
for kill in (True, False):
    try:
        with interrupts.handled():
            seen.append(interrupts.interrupted())
            if kill:
                os.kill(os.getpid(), signal.SIGTERM)
    except KeyboardInterrupt:
        pass
    seen.append(interrupts.interrupted())
print(seen)
"""


def test_a_cleanup_can_tell_it_runs_for_an_interrupt():
    """What the metrics' end-of-run race check reads to stay out of an interrupted exit."""
    result = subprocess.run([sys.executable, "-c", INTERRUPTED], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[False, True, False, False]"


def test_the_exit_codes_are_documented():
    help_text = subprocess.run([sys.executable, "-m", "fdprof", "--help"], capture_output=True,
                               text=True, timeout=60, cwd=ROOT).stdout  # fmt: skip
    assert "130  interrupted (Ctrl-C)" in help_text and "143  terminated (SIGTERM)" in help_text
    assert "143 SIGTERM" in (ROOT / "README.md").read_text()
