"""The baseline lock excludes across real processes, one lock per DP group, and its file is
private to the user; what the two lock modes exclude between the cache manager's threads, and
how each hold is recorded."""

import fcntl
import multiprocessing
import os
import secrets
import stat
import threading
import time

import pytest

from fdprof import probe
from fdprof.analysis.hazards import find_hazards
from fdprof.engine.ipc import KvLock, PerThreadKvLock, RunPaths
from fdprof.formats import records as R
from fdprof.formats.rundir import write_run_manifest
from fdprof.probe import ProbeConfig
from fdprof.trace import load


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


class _Holder(threading.Thread):
    """A thread of the cache manager: holds ``lock`` from ``holding`` until ``let_go``."""

    def __init__(self, lock, after: threading.Event | None = None) -> None:
        super().__init__(daemon=True)
        self.lock, self.after = lock, after
        self.holding, self.let_go = threading.Event(), threading.Event()

    def run(self) -> None:
        if self.after is not None:
            self.after.wait(10)
        with self.lock.held():
            self.holding.set()
            self.let_go.wait(10)


def _worker_gets_in(paths) -> bool:
    """Whether another process's descriptor (the worker's) would get the lock now."""
    fd = os.open(paths.lock(0), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing the only descriptor that holds it unlocks
    return True


def test_baseline_lock_shared_by_threads_does_not_exclude_them(paths):
    """FastDeploy's IPCLock as its engine used it: one descriptor for the swap-in path and the
    eviction thread. The second thread gets the lock while the first holds it, and the first's
    unlock lets the worker in while the second still 'holds' it."""
    lock = KvLock(paths, 0, "cache_manager")
    a = _Holder(lock)
    b = _Holder(lock, after=a.holding)
    a.start(), b.start()
    assert b.holding.wait(10)  # at once: threads sharing a descriptor do not exclude
    assert not _worker_gets_in(paths)
    a.let_go.set()
    a.join(10)
    assert _worker_gets_in(paths)  # b is still inside its hold: the lock protects nothing
    b.let_go.set()
    b.join(10)
    lock.close()


def test_per_thread_lock_excludes_threads_and_processes(paths):
    lock = PerThreadKvLock(paths, 0, "cache_manager")
    a = _Holder(lock)
    b = _Holder(lock, after=a.holding)
    a.start(), b.start()
    assert a.holding.wait(10)
    assert not b.holding.wait(0.3)  # b waits for a
    assert not _worker_gets_in(paths)
    a.let_go.set()
    assert b.holding.wait(10)
    assert not _worker_gets_in(paths)  # now b holds it
    b.let_go.set()
    b.join(10)
    assert _worker_gets_in(paths)
    lock.close()


@pytest.mark.parametrize("shared", [True, False], ids=["ipc", "ipc-per-thread"])
def test_each_hold_is_recorded_and_the_detector_sees_which_lock_excludes(tmp_path, paths, shared):
    """Each hold is an acquire and a release of lock:kv/dp0 on its holder's lane. With the
    shared descriptor the two threads' holds overlap, and the detector's broken-lock alarm
    says so; with a descriptor per thread they follow each other, and it says nothing."""
    probe.configure(ProbeConfig(run_dir=str(tmp_path)), "engine", 0)
    try:
        lock = (KvLock if shared else PerThreadKvLock)(paths, 0, "cache_manager")
        a = _Holder(lock)
        b = _Holder(lock, after=a.holding)
        a.start(), b.start()
        assert a.holding.wait(10)
        assert b.holding.wait(0.3) == shared
        a.let_go.set()
        a.join(10)
        assert b.holding.wait(10)
        b.let_go.set()
        b.join(10)
        lock.close()
    finally:
        probe.shutdown()
    (rec,) = tmp_path.glob("engine-0-*.rec")
    strings, events = {}, []
    for kind, _flags, tid, fields, _ in R.iter_records(rec.read_bytes()):
        if kind == R.Kind.STRING:
            strings[fields[0]] = fields[1]
        elif kind == R.Kind.SYNC and strings[fields[1]] == "lock:kv/dp0":
            events.append((fields[4], R.SyncCode(fields[2]).name.lower(), tid))
    ops = [(op, tid) for _, op, tid in sorted(events)]
    ta, tb = ops[0][1], ops[-1][1]
    assert ta != tb
    overlapping = [("acquire", ta), ("acquire", tb), ("release", ta), ("release", tb)]
    in_turn = [("acquire", ta), ("release", ta), ("acquire", tb), ("release", tb)]
    assert ops == (overlapping if shared else in_turn)
    write_run_manifest(tmp_path, status="ok")
    assert find_hazards(load(tmp_path)).counts["broken_locks"] == (1 if shared else 0)
