"""The broken-lock alarm: FastDeploy's IPCLock is a flock on one descriptor shared by the
cache manager's swap-in (scheduler) thread and its eviction thread, and flock does not
exclude threads sharing an open file description. Two holds of one lock overlapping on
different lanes are reported, and the lock's edges are then not taken as order."""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import threading

import pytest

from fdprof import probe
from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.locks import broken_locks, lock_holds
from fdprof.cli import main
from fdprof.engine.ipc import KvLock, PerThreadKvLock, RunPaths
from fdprof.trace import load, save

from .builder import TraceBuilder

LOCK = "lock:kv/dp0"
SCHEDULER, EVICTION, WORKER = "1/1", "1/2", "3/1"  # two threads of the cache manager, a worker


def shared_descriptor_run(overlap: bool) -> TraceBuilder:
    """The eviction thread swaps gpu:5 out under the lock; later the scheduler thread reads it
    under the lock: only the lock orders the two. With ``overlap``, the threads later hold
    the lock at the same time (the shared descriptor let the second flock through)."""
    b = TraceBuilder()
    b.process(1, 0, -1, "engine")
    b.process(3, 0, 0, "worker")
    b.acquire(LOCK, 1, EVICTION)
    b.span(EVICTION, "swap", 2, 4, writes=(5,))
    b.release(LOCK, 5, EVICTION)
    b.acquire(LOCK, 6, SCHEDULER)
    b.span(SCHEDULER, "swap", 7, 8, reads=(5,))
    b.release(LOCK, 9, SCHEDULER)
    if overlap:
        b.acquire(LOCK, 10, SCHEDULER)
        b.acquire(LOCK, 12, EVICTION)  # flock on the shared descriptor: no wait
        b.release(LOCK, 15, EVICTION)
        b.release(LOCK, 20, SCHEDULER)
    b.acquire(LOCK, 30, WORKER)  # another process: its own descriptor
    b.release(LOCK, 31, WORKER)
    return b


def test_holds_are_acquire_then_release_on_one_lane():
    holds = lock_holds(shared_descriptor_run(overlap=True).build().syncs)
    assert sorted(map(tuple, holds[["lane", "start", "end"]].to_numpy().tolist())) == [
        (SCHEDULER, 6, 9), (SCHEDULER, 10, 20), (EVICTION, 1, 5), (EVICTION, 12, 15),
        (WORKER, 30, 31)]  # fmt: skip


def test_a_lock_that_excluded_is_trusted():
    report = find_hazards(shared_descriptor_run(overlap=False).build())
    assert report.broken_locks.empty and report.clean
    assert report.counts["broken_locks"] == 0


def test_overlapping_holds_are_a_broken_lock_and_its_edges_no_order():
    report = find_hazards(shared_descriptor_run(overlap=True).build())
    assert report.broken_locks[["obj", "lane_a", "start_a", "end_a", "lane_b", "start_b",
                                "end_b"]].to_numpy().tolist() == [
        [LOCK, SCHEDULER, 10, 20, EVICTION, 12, 15]]  # fmt: skip
    assert report.untrusted_locks == (LOCK,)
    # the swap-out and the read the lock alone ordered: a race once the lock is not trusted
    assert report.counts["races"] == 1 and report.counts["latent"] == 1
    assert not report.clean


def test_holds_that_touch_do_not_overlap():
    b = TraceBuilder()
    b.acquire(LOCK, 1, SCHEDULER)
    b.release(LOCK, 5, SCHEDULER)
    b.acquire(LOCK, 5, EVICTION)
    b.release(LOCK, 9, EVICTION)
    assert broken_locks(lock_holds(b.build().syncs)).empty


def test_overlapping_holds_on_one_lane_or_of_two_locks_are_not_broken():
    b = TraceBuilder()
    b.acquire(LOCK, 1, SCHEDULER)
    b.acquire("lock:kv/dp1", 2, EVICTION)
    b.release("lock:kv/dp1", 8, EVICTION)
    b.release(LOCK, 9, SCHEDULER)
    assert broken_locks(lock_holds(b.build().syncs)).empty


def _hazards(run, fmt: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["hazards", str(run), "--format", fmt])
    return code, out.getvalue()


CLAUSE = f"BROKEN LOCK {LOCK} (1 pair(s) of holds at once): it did not exclude its threads"


def test_a_broken_lock_alone_is_named_in_every_format_and_exits_0(tmp_path):
    """The lock did not exclude, and nothing relied on it: the run is safe (exit 0, as ab
    judges it) and every format's verdict line names the lock."""
    b = TraceBuilder()
    b.process(1, 0, -1, "engine")
    b.acquire(LOCK, 10, SCHEDULER)
    b.acquire(LOCK, 12, EVICTION)
    b.span(EVICTION, "swap", 13, 14, attrs={"kv.cpu_write": [9]})
    b.release(LOCK, 15, EVICTION)
    b.release(LOCK, 20, SCHEDULER)
    save(b.build(), tmp_path / "run")
    code, out = _hazards(tmp_path / "run", "json")
    doc = json.loads(out)
    assert code == 0 and doc["verdict"]["safe"] is True
    assert doc["counts"]["races"] == 0 and doc["counts"]["broken_locks"] == 1
    assert doc["untrusted_locks"] == [LOCK]
    assert doc["broken_locks"][0]["lane_b"] == EVICTION
    assert (
        doc["verdict"]["line"] == f"clean: no unordered conflicting accesses; {CLAUSE}, so "
        "the accesses were judged without it"
    )
    for fmt in ("text", "md", "html"):
        code, out = _hazards(tmp_path / "run", fmt)
        assert code == 0 and CLAUSE in out, fmt


def test_a_broken_lock_that_ordered_accesses_leaves_races_and_exits_1(tmp_path):
    """As :func:`shared_descriptor_run`, saved (accesses as the attributes that carry them):
    only the broken lock ordered the swap-out and the later read."""
    b = TraceBuilder()
    b.process(1, 0, -1, "engine")
    b.acquire(LOCK, 1, EVICTION)
    b.span(EVICTION, "swap", 2, 4, attrs={"kv.gpu_write": [5]})
    b.release(LOCK, 5, EVICTION)
    b.acquire(LOCK, 6, SCHEDULER)
    b.span(SCHEDULER, "swap", 7, 8, attrs={"kv.gpu_read": [5]})
    b.release(LOCK, 9, SCHEDULER)
    b.acquire(LOCK, 10, SCHEDULER)
    b.acquire(LOCK, 12, EVICTION)
    b.release(LOCK, 15, EVICTION)
    b.release(LOCK, 20, SCHEDULER)
    save(b.build(), tmp_path / "run")
    code, out = _hazards(tmp_path / "run", "json")
    doc = json.loads(out)
    assert code == 1 and doc["verdict"]["safe"] is False and doc["counts"]["races"] == 1
    assert doc["verdict"]["line"].startswith("HAZARDS FOUND: 1 race(s), 1 of them latent; "
                                             f"{CLAUSE}")  # fmt: skip


def _two_threads_under(lock) -> None:
    """The swap-in thread holds ``lock``; the eviction thread asks for it meanwhile and holds
    it when it gets it. With one shared descriptor it gets it at once."""
    inside, done = threading.Event(), threading.Event()

    def eviction() -> None:
        inside.wait(10)
        with lock.held():
            done.set()

    other = threading.Thread(target=eviction)
    other.start()
    with lock.held():
        inside.set()
        done.wait(0.3)  # the shared descriptor: the other thread is in too by now
    other.join(10)


@pytest.mark.parametrize(("lock_kind", "broken"), [(KvLock, True), (PerThreadKvLock, False)])
def test_the_engine_lock_on_a_shared_descriptor_is_reported_broken(tmp_path, lock_kind, broken):
    paths = RunPaths(f"fdprof-test-{os.getpid()}-{secrets.token_hex(4)}")
    probe.configure(probe.ProbeConfig(run_dir=str(tmp_path)), "engine", 0)
    lock = lock_kind(paths, 0, "engine")
    try:
        _two_threads_under(lock)
    finally:
        lock.close()
        probe.shutdown()
        for leftover in paths.leftovers():
            leftover.unlink()
    report = find_hazards(load(tmp_path))
    assert len(lock_holds(load(tmp_path).syncs)) == 2
    assert (not report.broken_locks.empty) is broken
    assert report.untrusted_locks == (("lock:kv/dp0",) if broken else ())
