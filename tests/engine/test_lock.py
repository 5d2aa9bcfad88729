"""The baseline lock excludes across real processes, one lock per DP group, and its file is
private to the user."""

import fcntl
import multiprocessing
import os
import secrets
import stat
import time

import pytest

from engine.ipc import KvLock, RunPaths


@pytest.fixture
def paths():
    run = RunPaths(f"fdprof-test-{os.getpid()}-{secrets.token_hex(4)}")
    yield run
    for leftover in run.leftovers():
        leftover.unlink()


def _hold(prefix: str, log_path: str, name: str, rounds: int) -> None:
    lock = KvLock(RunPaths(prefix), 0, name)
    for _ in range(rounds):
        with lock.held(), open(log_path, "a") as log:
            log.write(f"{name} in\n")
            log.flush()
            time.sleep(0.005)
            log.write(f"{name} out\n")
    lock.close()


def test_flock_excludes_two_processes(tmp_path, paths):
    log_path = tmp_path / "log"
    mp = multiprocessing.get_context("spawn")
    procs = [mp.Process(target=_hold, args=(paths.prefix, str(log_path), n, 20)) for n in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = log_path.read_text().split("\n")[:-1]
    assert len(lines) == 80
    for enter, leave in zip(lines[::2], lines[1::2], strict=True):
        assert enter.endswith(" in") and leave == enter.replace(" in", " out")
    assert stat.S_IMODE(os.stat(paths.lock(0)).st_mode) == 0o600


def test_each_dp_group_has_its_own_lock(paths):
    """As FastDeploy's gpu_cache_lock, named per engine-worker queue port: group 0 holding its
    lock does not stop group 1."""
    group0, group1 = KvLock(paths, 0, "worker"), KvLock(paths, 1, "worker")
    other0 = os.open(paths.lock(0), os.O_RDWR)
    other1 = os.open(paths.lock(1), os.O_RDWR)
    try:
        with group0.held():
            with pytest.raises(BlockingIOError):
                fcntl.flock(other0, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(other1, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(other1, fcntl.LOCK_UN)
    finally:
        for fd in (other0, other1):
            os.close(fd)
        group0.close()
        group1.close()
