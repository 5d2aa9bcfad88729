"""Shared-memory housekeeping: what a killed supervisor left behind is removed by the next run,
and nothing else: not a live run's files (even under a reused pid), not another pid
namespace's, not another user's."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fdprof.engine.ipc import RunPaths, pid_namespace, remove_stale, start_time


def own_name(pid: int, started: int, namespace: int | None = None, what: str = "control") -> str:
    namespace = pid_namespace() if namespace is None else namespace
    return f"fdprof-{pid}-{started}-{namespace}-deadbeef-{what}"


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_runs_names_carry_its_pid_start_time_and_namespace():
    prefix = RunPaths.for_this_process().prefix
    _, pid, started, namespace, _ = prefix.split("-")
    assert int(pid) == os.getpid()
    assert int(started) == start_time(os.getpid()) > 0
    assert int(namespace) == pid_namespace() > 0


def test_stale_files_of_dead_supervisors_are_removed(tmp_path):
    me = os.getpid()
    stale = tmp_path / own_name(dead_pid(), 12345)
    reused = tmp_path / own_name(me, start_time(me) + 1)  # my pid, another process's start
    live = tmp_path / own_name(me, start_time(me), what="kv-0.lock")
    elsewhere = tmp_path / own_name(dead_pid(), 12345, namespace=pid_namespace() + 1)
    legacy = tmp_path / "fdprof-999999999-deadbeef-control"  # no start time: cannot tell
    other = tmp_path / "fdprof-notes"
    for p in (stale, reused, live, elsewhere, legacy, other):
        p.write_bytes(b"")
    assert remove_stale(tmp_path) == sorted([stale, reused])
    assert live.exists() and elsewhere.exists() and legacy.exists() and other.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_stale_file_is_left_alone_and_does_not_block(tmp_path):
    """Root could delete it; it is not ours, so it stays, and the cleanup goes on."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    theirs = tmp_path / own_name(dead_pid(), 12345)
    ours = tmp_path / own_name(dead_pid(), 12346)
    for p in (theirs, ours):
        p.write_bytes(b"")
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    assert remove_stale(tmp_path) == [ours]
    assert theirs.exists() and theirs.stat().st_uid == nobody.pw_uid


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_file_in_dev_shm_does_not_stop_a_run(tmp_path):
    """A stale-looking file of another user's in the real /dev/shm: a run starts, serves and
    leaves it where it was."""
    import pwd

    from fdprof.engine.config import EngineConfig
    from fdprof.engine.launcher import run_engine
    from fdprof.probe import ProbeConfig

    nobody = pwd.getpwnam("nobody")
    # pid 1 under another start time: stale, were it ours (and no older fdprof that other
    # sessions on this machine may run, which checks the pid alone, removes it meanwhile)
    planted = Path("/dev/shm") / own_name(1, start_time(1) + 1)
    planted.write_bytes(b"")
    os.chown(planted, nobody.pw_uid, nobody.pw_gid)
    try:
        cfg = EngineConfig(requests=4, seed=1, workload="no-swap")
        run_engine(cfg, ProbeConfig(run_dir=str(tmp_path / "run")))
        assert planted.exists() and planted.stat().st_uid == nobody.pw_uid
    finally:
        planted.unlink(missing_ok=True)
