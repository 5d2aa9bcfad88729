"""The baseline lock excludes across real processes, and its file is private to the user."""

import multiprocessing
import os
import stat
import time
from pathlib import Path

from engine.ipc import KvLock


def _hold(lock_path: str, log_path: str, name: str, rounds: int) -> None:
    lock = KvLock(Path(lock_path), name)
    for _ in range(rounds):
        with lock.held(), open(log_path, "a") as log:
            log.write(f"{name} in\n")
            log.flush()
            time.sleep(0.005)
            log.write(f"{name} out\n")
    lock.close()


def test_flock_excludes_two_processes(tmp_path):
    lock_path, log_path = tmp_path / "kv.lock", tmp_path / "log"
    mp = multiprocessing.get_context("spawn")
    procs = [mp.Process(target=_hold, args=(str(lock_path), str(log_path), n, 20)) for n in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = log_path.read_text().split("\n")[:-1]
    assert len(lines) == 80
    for enter, leave in zip(lines[::2], lines[1::2], strict=True):
        assert enter.endswith(" in") and leave == enter.replace(" in", " out")
    assert stat.S_IMODE(os.stat(lock_path).st_mode) == 0o600
