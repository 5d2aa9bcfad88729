"""Run directories written by the real probe in real child processes, as the engine writes them."""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fdprof import probe
from fdprof.formats.rundir import RUN_FORMAT
from fdprof.probe.config import ProbeConfig

# the probe handles of the vocabulary (fdprof/probe/handles.py), plus two keys only these tests use
from fdprof.probe.handles import BATCH_SIZE as K_SIZE
from fdprof.probe.handles import EXECUTE_MODEL as EXECUTE
from fdprof.probe.handles import ISSUE_SWAP_TASK as ISSUE
from fdprof.probe.handles import KV_CPU_WRITE as K_CPU_WRITE
from fdprof.probe.handles import KV_GPU_READ as K_GPU_READ
from fdprof.probe.handles import KV_GPU_WRITE as K_GPU_WRITE
from fdprof.probe.handles import QUEUE_BATCH as Q_BATCH
from fdprof.probe.handles import QUEUE_SWAP as Q_SWAP
from fdprof.probe.handles import SIGNAL_SWAP_DONE as SIG_DONE
from fdprof.probe.handles import STEP, SWAP
from fdprof.probe.handles import STEP_ID as K_STEP
from fdprof.probe.handles import SWAP_BLOCKS as K_BLOCKS
from fdprof.probe.handles import SWAP_DIRECTION as K_DIR
from fdprof.probe.handles import SWAP_TASK_ID as K_TASK

K_LAYERS = probe.key("kv.layers")
K_RATIO = probe.key("batch.ratio")

STEPS = 3


def _engine(run_dir: str, swaps: mp.Queue, done: mp.Queue, batches: mp.Queue) -> None:
    """Cache manager + scheduler: one swap-out per step, then dispatch the step's batch."""
    p = probe.configure(ProbeConfig(run_dir=run_dir), "engine")
    p.name_thread("scheduler")
    for step in range(STEPS):
        with p.span(STEP) as s:
            p.set_int(s, K_STEP, step)
            with p.span(ISSUE, s) as issue:
                p.set_int(issue, K_TASK, step)
                p.set_str(issue, K_DIR, "to_cpu")
                p.release(Q_SWAP, step, issue)
                swaps.put(step)
                assert done.get(timeout=30) == step
                p.acquire(SIG_DONE, step, issue)
            p.release(Q_BATCH, step, s)
            batches.put(step)
    swaps.put(None)
    batches.put(None)
    probe.shutdown()


def _transfer(run_dir: str, swaps: mp.Queue, done: mp.Queue) -> None:
    p = probe.configure(ProbeConfig(run_dir=run_dir), "transfer")
    while (task := swaps.get(timeout=30)) is not None:
        p.acquire(Q_SWAP, task)
        with p.span(SWAP) as s:
            p.set_int(s, K_TASK, task)
            p.set_str(s, K_DIR, "to_cpu")
            p.set_int(s, K_BLOCKS, 2)
            p.set_ints(s, K_GPU_READ, [10 + task, 20 + task])
            p.set_ints(s, K_CPU_WRITE, [task, 100 + task])
        p.release(SIG_DONE, task)
        done.put(task)
    probe.shutdown()


def _worker(run_dir: str, batches: mp.Queue) -> None:
    p = probe.configure(ProbeConfig(run_dir=run_dir), "worker")
    while (step := batches.get(timeout=30)) is not None:
        p.acquire(Q_BATCH, step)
        with p.span(EXECUTE) as s:
            p.set_int(s, K_STEP, step)
            p.set_int(s, K_SIZE, 4)
            p.set_float(s, K_RATIO, 0.5)
            p.set_ints(s, K_GPU_READ, [1, 2, 3])
            p.set_ints(s, K_GPU_WRITE, [3])
            p.set_ints(s, K_LAYERS, [0, 2])
    probe.shutdown()


def write_manifest(run_dir: Path, procs: list[tuple[mp.Process, str]], status: str) -> None:
    processes = []
    for proc, role in procs:
        processes.append(
            {
                "pid": proc.pid,
                "role": role,
                "name": f"{role}-0",
                "dp_rank": 0,
                "record": f"{role}-0-{proc.pid}.rec",
                "exitcode": proc.exitcode,
            }
        )
    manifest = {
        "format": RUN_FORMAT,
        "config": {"kv_lock": "none", "seed": 0},
        "status": status,
        "processes": processes,
        "results": {"steps": STEPS},
        "error": None,
    }
    (run_dir / "run.json").write_text(json.dumps(manifest))


def spawn(target: Callable, *args) -> mp.Process:
    proc = mp.get_context("fork").Process(target=target, args=args)
    proc.start()
    return proc


@pytest.fixture(scope="session")
def engine_run(tmp_path_factory) -> Path:
    """A three-process run: engine, transfer, worker, talking over real queues."""
    run_dir = tmp_path_factory.mktemp("run")
    ctx = mp.get_context("fork")
    swaps, done, batches = ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [
        (spawn(_engine, str(run_dir), swaps, done, batches), "engine"),
        (spawn(_transfer, str(run_dir), swaps, done), "transfer"),
        (spawn(_worker, str(run_dir), batches), "worker"),
    ]
    for proc, _ in procs:
        proc.join(60)
        assert proc.exitcode == 0
    write_manifest(run_dir, procs, "ok")
    return run_dir


def _hang(run_dir: str, ready) -> None:
    p = probe.configure(ProbeConfig(run_dir=run_dir), "worker")
    with p.span(EXECUTE) as s:
        p.set_int(s, K_STEP, 0)
    sid = p.begin(EXECUTE)
    p.set_int(sid, K_STEP, 1)
    p.set_ints(sid, K_GPU_WRITE, [7])
    ready.set()
    time.sleep(120)


@pytest.fixture
def killed_run(tmp_path) -> Path:
    """A worker killed with SIGKILL inside an open span; the manifest still says running."""
    ready = mp.get_context("fork").Event()
    proc = spawn(_hang, str(tmp_path), ready)
    assert ready.wait(30)
    proc.kill()
    proc.join(30)
    write_manifest(tmp_path, [(proc, "worker")], "running")
    return tmp_path
