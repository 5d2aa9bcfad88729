"""How the engine's processes talk: shared-memory signals, task queues, the baseline lock.

Every object that happens-before depends on records its edge through the probe here, in one
place: a signal's set is a release and a completed wait an acquire (seq = task id); the flock
lock and the in-process mutexes record release at unlock and acquire once obtained (no seq).
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import queue
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fdprof import probe
from fdprof import semconv as S
from fdprof.engine.messages import tp_seq
from fdprof.probe import handles as H

SHM_DIR = Path("/dev/shm")
SIGNAL_SLOTS = 1 << 14
#: task ids and step sequence numbers of DP rank r start at r * SEQ_STRIDE, so the sync
#: sequence numbers of different groups never pair up
SEQ_STRIDE = 1_000_000_000
#: a waiter's first look after POLL_S, each next twice as long up to POLL_MAX_S (:func:`backoff`)
POLL_S = 0.0002
POLL_MAX_S = 0.002
#: how often an engine process looks whether its supervisor is gone (killed outright)
ORPHAN_CHECK_S = 0.05


@dataclass(frozen=True)
class RunPaths:
    """Names of everything a run creates in /dev/shm; all start with ``prefix``."""

    prefix: str

    def lock(self, rank: int) -> Path:
        """The baseline's lock file of one DP group (FastDeploy names its ``gpu_cache_lock`` by
        the group's engine-worker queue port: one lock per group, not per server)."""
        return SHM_DIR / f"{self.prefix}-kv-{rank}.lock"

    @property
    def control(self) -> Path:
        return SHM_DIR / f"{self.prefix}-control"

    def gpu_pool(self, rank: int, tp_rank: int = 0) -> Path:
        """The device pool (CPU runs) of DP group ``rank``'s TP rank ``tp_rank``, made by
        that rank's transfer process."""
        return SHM_DIR / f"{self.prefix}-gpu-{rank}-{tp_rank}"

    def signal(self, rank: int, tp_rank: int = 0) -> Path:
        return SHM_DIR / f"{self.prefix}-swapdone-{rank}-{tp_rank}"

    def event(self, kind: str, rank: int, tp_rank: int = 0) -> Path:
        """The generation slot of one of the asynchronous engine's shared events (kind:
        ``semconv.COMPUTE_DONE_EVENT`` or ``SWAP_IN_EVENT``)."""
        return SHM_DIR / f"{self.prefix}-event-{kind}-{rank}-{tp_rank}"

    def store(self, group: str) -> Path:
        """The file store where the workers of a ``torch.distributed`` group meet."""
        return SHM_DIR / f"{self.prefix}-dist-{group}"

    def leftovers(self) -> list[Path]:
        return sorted(SHM_DIR.glob(f"{self.prefix}-*"))

    @staticmethod
    def for_this_process() -> RunPaths:
        """``fdprof-<pid>-<start>-<pidns>-<hex>``: the supervisor's pid, its start time (clock
        ticks after boot, ``/proc/<pid>/stat``) and pid namespace, so :func:`remove_stale` can
        tell whether the process that made a file is gone even after its pid was reused or from
        another container sharing /dev/shm; random hex tells runs of one process apart."""
        pid = os.getpid()
        return RunPaths(f"fdprof-{pid}-{start_time(pid)}-{pid_namespace()}-{secrets.token_hex(4)}")


#: what :meth:`RunPaths.for_this_process` names: pid, start time, pid namespace, random hex
_OWN_NAME = re.compile(r"^fdprof-(\d+)-(\d+)-(\d+)-[0-9a-f]{8}-")


def proc_stat(pid: int) -> list[bytes]:
    """Fields 3 on of ``/proc/<pid>/stat`` (index ``i`` is field ``i + 3`` of proc(5)); empty
    when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return []
    # the name (field 2) is in parentheses and may hold spaces or ')': split after the last ')'
    return stat[stat.rfind(b")") + 2 :].split()


def start_time(pid: int) -> int:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat`` field 22);
    0 when there is no such process."""
    fields = proc_stat(pid)
    return int(fields[19]) if len(fields) > 19 else 0


def pid_namespace() -> int:
    """The inode of this process's pid namespace (``/proc/self/ns/pid``); 0 if unknown."""
    try:
        link = os.readlink("/proc/self/ns/pid")
    except OSError:
        return 0
    digits = link.rpartition("[")[2].rstrip("]")
    return int(digits) if digits.isdigit() else 0


def remove_stale(shm_dir: Path = SHM_DIR) -> list[Path]:
    """Remove what runs whose supervisor was killed (``kill -9``, no cleanup) left behind.

    Only files this user owns, named as :meth:`RunPaths.for_this_process` names them, made in
    this pid namespace (another's pids mean other processes), whose process is gone: no such pid,
    or one that started at another time (the pid was reused). Anything else is left alone, and
    a file that cannot be removed does not stop the run."""
    removed = []
    uid, namespace = os.geteuid(), pid_namespace()
    for path in sorted(shm_dir.glob("fdprof-*")):
        match = _OWN_NAME.match(path.name)
        if match is None:
            continue
        pid, started, made_in = (int(g) for g in match.groups())
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if info.st_uid != uid or made_in != namespace or namespace == 0:
            continue
        if start_time(pid) == started:  # the process that made it is still running
            continue
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed


def create_shm_file(path: Path, size: int) -> None:
    """A zero-filled shared file only this user can open."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def shm_array(path: Path, n: int, create: bool = False) -> np.ndarray:
    """An int64 array of ``n`` slots in a shared file (created zeroed, mode 0600)."""
    if create:
        create_shm_file(path, n * 8)
    return np.memmap(path, dtype=np.int64, mode="r+", shape=(n,))


#: set in an engine process by SIGTERM (:func:`stop_this_process`): it stops as if asked to
_terminated = False


def stop_this_process(signum: int = 0, frame=None) -> None:
    """SIGTERM's handler in an engine process: its loops stop at their next check of
    :attr:`Control.stopping` and the process exits through its normal end (records closed),
    whoever sent the signal (the supervisor stopping it, or a whole process group ended)."""
    global _terminated
    _terminated = True


class Control:
    """Run-wide flags in shared memory: slot 0 asks everyone to stop; slot 1 + r counts the
    requests DP rank r has finished (the supervisor's progress bar reads it)."""

    def __init__(self, path: Path, dp: int, create: bool = False, child: bool = False) -> None:
        self._a = shm_array(path, 1 + dp, create)
        #: the process that started this one (the supervisor), seen through the pipe it holds
        #: open: its end closes when it dies, whoever the process's parent is (a fork server's
        #: children are not the supervisor's). Looked at every ORPHAN_CHECK_S, not on every
        #: poll: a look is a select() (5 us), a poll loop turns every 0.2 ms.
        self._supervisor = multiprocessing.parent_process() if child else None
        self._orphaned = False
        self._next_look = 0.0

    def stop(self) -> None:
        self._a[0] = 1

    @property
    def stopping(self) -> bool:
        """Asked to stop, or orphaned: a supervisor killed outright cannot ask."""
        return bool(self._a[0]) or self._orphaned_now() or _terminated

    def _orphaned_now(self) -> bool:
        if self._supervisor is not None and not self._orphaned:
            now = time.monotonic()
            if now >= self._next_look:
                self._next_look = now + ORPHAN_CHECK_S
                self._orphaned = not self._supervisor.is_alive()
        return self._orphaned

    def add_finished(self, rank: int, n: int) -> None:
        self._a[1 + rank] += n

    def finished(self) -> int:
        return int(self._a[1:].sum())


class Stopped(Exception):
    """The supervisor asked this process to stop (another process died, or Ctrl-C)."""


def backoff(first_s: float = POLL_S, max_s: float = POLL_MAX_S) -> Iterator[None]:
    """The turns of a polling loop: the first at once, then after ``first_s``, each next sleep
    twice as long up to ``max_s``. A short wait stays short; a long one (a copy behind a fault's
    delay, a whole step) does not spin a core at 5 kHz, a tenth of a run's CPU on a small
    machine when it did."""
    delay = first_s
    while True:
        yield
        time.sleep(delay)
        delay = min(2 * delay, max_s)


def recv(q, control: Control, timeout: float = 0.1):
    """``q.get()`` that gives up with :class:`Stopped` once the run is stopping."""
    while True:
        try:
            return q.get(timeout=timeout)
        except queue.Empty:
            if control.stopping:
                raise Stopped from None


class SwapSignal:
    """``signal:swap_done``: the transfer process sets a task's slot after its copy."""

    def __init__(self, path: Path, create: bool = False) -> None:
        self._a = shm_array(path, SIGNAL_SLOTS, create)

    def set(self, task_id: int) -> None:
        probe.get().release(H.SIGNAL_SWAP_DONE, task_id)
        self._a[task_id % SIGNAL_SLOTS] = task_id

    def done(self, task_id: int) -> bool:
        """Whether the task has completed, without waiting (True records the acquire)."""
        if self._a[task_id % SIGNAL_SLOTS] != task_id:
            return False
        probe.get().acquire(H.SIGNAL_SWAP_DONE, task_id)
        return True

    def wait(self, task_id: int, control: Control) -> None:
        for _ in backoff():
            if self.done(task_id):
                return
            if control.stopping:
                raise Stopped


class KvLock:
    """The baseline's inter-process lock (FastDeploy's IPCLock): ``flock`` on a file in /dev/shm,
    one per DP group, through ONE open file description.

    flock excludes open file descriptions, not threads: threads that share this object do not
    exclude each other. Wait and hold are recorded as ``lock_wait``/``lock_hold`` spans on the
    caller's lane, each hold as an acquire (once obtained) and a release (at unlock) of
    ``lock:kv/dp<rank>``.
    """

    def __init__(self, paths: RunPaths, rank: int, holder: str) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # a link is not followed
        self._fd = os.open(paths.lock(rank), flags, 0o600)
        self._obj = probe.obj(f"{S.LOCK_KV_PREFIX}{rank}")
        self.holder = holder

    @contextmanager
    def held(self, parent: int = 0) -> Iterator[int]:
        p = probe.get()
        wait = p.begin(H.LOCK_WAIT, parent)
        p.set_str(wait, H.LOCK_HOLDER, self.holder)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        p.acquire(self._obj)
        p.end(wait)
        hold = p.begin(H.LOCK_HOLD, parent)
        p.set_str(hold, H.LOCK_HOLDER, self.holder)
        try:
            yield hold
        finally:
            p.end(hold)
            p.release(self._obj)
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self._fd)


class PerThreadKvLock:
    """The corrected lock: each thread opens its own descriptor, so the threads of one process
    exclude each other as well as the other processes."""

    def __init__(self, paths: RunPaths, rank: int, holder: str) -> None:
        self._args = (paths, rank, holder)
        self._local = threading.local()
        self._opened: list[KvLock] = []

    def held(self, parent: int = 0) -> contextlib.AbstractContextManager[int]:
        lock = getattr(self._local, "lock", None)
        if lock is None:
            lock = self._local.lock = KvLock(*self._args)
            self._opened.append(lock)
        return lock.held(parent)

    def close(self) -> None:
        for lock in self._opened:
            lock.close()


class TransferPort:
    """The cache manager's :class:`~fdprof.engine.cache_manager.SwapPort` in the engine
    process: a task goes on the queue of every TP rank's transfer process (``queue:swap``
    released, seq = the rank's :func:`~fdprof.engine.messages.tp_seq` of the task id) and is
    done once every rank has set its completion signal."""

    def __init__(self, swap_qs: list, signals: list[SwapSignal], control: Control) -> None:
        self._qs = swap_qs
        self._signals = signals
        self._control = control
        #: task id -> the TP ranks seen done so far (each rank's acquire recorded once)
        self._done: dict[int, set[int]] = {}

    def submit(self, task) -> None:
        p = probe.get()
        for t, q in enumerate(self._qs):
            p.release(H.QUEUE_SWAP, tp_seq(task.task_id, t))
            q.put(task)

    def wait(self, task_id: int) -> None:
        for t, signal in enumerate(self._signals):
            signal.wait(tp_seq(task_id, t), self._control)

    def done(self, task_id: int) -> bool:
        seen = self._done.setdefault(task_id, set())
        for t, signal in enumerate(self._signals):
            if t not in seen and signal.done(tp_seq(task_id, t)):
                seen.add(t)
        if len(seen) < len(self._signals):
            return False
        del self._done[task_id]
        return True


class TracedMutex:
    """A ``threading.Lock`` whose handoffs between threads are recorded (``mutex:<name>``)."""

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        self._obj = probe.obj(f"{S.MUTEX_PREFIX}{name}")

    def __enter__(self) -> TracedMutex:
        self._lock.acquire()
        probe.get().acquire(self._obj)
        return self

    def __exit__(self, *exc) -> None:
        probe.get().release(self._obj)
        self._lock.release()
