"""The supervisor: starts the engine's process groups, watches them, and writes ``run.json``.

It owns every shared resource (the /dev/shm pools, signals, control block and lock file) and
removes them whatever happens: a normal exit, Ctrl-C, or a process that died. If any process
dies, the others are asked to stop, then terminated, and :class:`EngineCrashed` says which one
died and why.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from engine.cache_manager import SwapStats
from engine.config import EngineConfig
from engine.integrity import IntegrityStats
from engine.ipc import Control, RunPaths, SwapSignal, create_shm_file, remove_stale
from engine.process import ProcessContext, child_environment, child_main
from engine.results import EngineStats, ProcessRecord, RunResults, StepLatency
from engine.workloads import sized_for_workload
from fdprof.errors import FdprofError
from fdprof.probe import ProbeConfig

RUN_FORMAT = "fdprof-run/1"
STOP_GRACE_S = 3.0


class EngineCrashed(FdprofError):
    """An engine process died; the message names it and says why."""


class RunObserver(Protocol):
    """Watches a run from outside: tails record files, serves metrics, attaches a profiler."""

    def start(self, run_dir: Path, processes: list[dict]) -> None: ...

    def stop(self) -> None: ...


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped responding"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class _Group:
    """The live processes of one run and their messages to the supervisor."""

    def __init__(self, cfg, probe_config, paths, env: Mapping[str, str]) -> None:
        mp = multiprocessing.get_context("spawn")
        self.report_q = mp.Queue()
        self.go = mp.Event()
        self.procs: list[tuple[str, int, multiprocessing.process.BaseProcess]] = []
        self.done: dict[tuple[str, int], dict] = {}
        self.errors: dict[tuple[str, int], str] = {}
        self.ready: dict[tuple[str, int], dict] = {}
        #: the queues must outlive the children's start: Process.start() drops its arguments
        self.contexts: list[ProcessContext] = []
        with child_environment(env):
            for rank in range(cfg.dp):
                ctx = ProcessContext(
                    cfg,
                    probe_config,
                    rank,
                    paths,
                    mp.Queue(),
                    mp.Queue(),
                    mp.Queue(),
                    mp.Queue(),
                    self.report_q,
                    self.go,
                    os.getpid(),
                )
                self.contexts.append(ctx)
                for role in ("engine", "transfer", "worker"):
                    proc = mp.Process(target=child_main, args=(role, ctx), name=f"{role}-{rank}")
                    proc.start()
                    self.procs.append((role, rank, proc))

    def describe(self, exitcodes: bool = False) -> list[dict]:
        return [
            ProcessRecord(
                pid=proc.pid,
                role=role,
                name=proc.name,
                dp_rank=rank,
                record=f"{role}-{rank}-{proc.pid}.rec",
                exitcode=proc.exitcode if exitcodes else None,
            ).to_json()
            for role, rank, proc in self.procs
        ]

    def poll(self, timeout: float) -> None:
        """Take the supervisor's messages; raise :class:`EngineCrashed` if a process died."""
        try:
            while True:
                kind, role, rank, _pid, payload = self.report_q.get(timeout=timeout)
                timeout = 0
                {"ready": self.ready, "done": self.done, "error": self.errors}[kind][
                    (role, rank)
                ] = payload
        except queue.Empty:
            pass
        for role, rank, proc in self.procs:
            key = (role, rank)
            if key in self.errors or (not proc.is_alive() and key not in self.done):
                proc.join(0.5)
                self._drain()
                why = self.errors.get(key) or _exit_reason(proc.exitcode)
                raise EngineCrashed(f"{role} process (dp rank {rank}, pid {proc.pid}) died: {why}")

    def _drain(self) -> None:
        try:
            while True:
                kind, role, rank, _pid, payload = self.report_q.get(timeout=0.2)
                if kind == "error":
                    self.errors[(role, rank)] = payload
        except queue.Empty:
            pass

    def stop(self, control: Control) -> None:
        """Ask every process to stop, then terminate and kill whatever is left."""
        control.stop()
        deadline = time.monotonic() + STOP_GRACE_S
        for _, _, proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for sig in ("terminate", "kill"):
            alive = [proc for _, _, proc in self.procs if proc.is_alive()]
            for proc in alive:
                getattr(proc, sig)()
            for proc in alive:
                proc.join(1.0)

    def release(self) -> None:
        """Drop the queues and events now, so their named semaphores in /dev/shm are unlinked
        (they otherwise wait for a garbage collection that may come only at exit)."""
        for ctx in self.contexts:
            for q in (ctx.batch_q, ctx.result_q, ctx.swap_q, ctx.setup_q):
                q.close()
                q.cancel_join_thread()
        self.report_q.close()
        self.report_q.cancel_join_thread()
        self.contexts.clear()
        self.report_q = self.go = None
        gc.collect()


def _write_manifest(run_dir: Path, **fields) -> None:
    tmp = run_dir / "run.json.tmp"
    tmp.write_text(json.dumps({"format": RUN_FORMAT, **fields}, indent=2) + "\n")
    tmp.replace(run_dir / "run.json")


def _create_shared(cfg: EngineConfig, paths: RunPaths) -> Control:
    control = Control(paths.control, cfg.dp, create=True)
    for rank in range(cfg.dp):
        create_shm_file(paths.gpu_pool(rank), cfg.pool_bytes(cfg.gpu_blocks))
        SwapSignal(paths.signal(rank), create=True)
        if cfg.kv_lock == "ipc":
            create_shm_file(paths.lock(rank), 0)
    return control


def _check_device(device: str) -> None:
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise FdprofError("--device cuda: CUDA is not available on this machine")


def _results(cfg: EngineConfig, group: _Group, wall_s: float, run_dir: Path) -> RunResults:
    engines: list[EngineStats] = [v for (role, _), v in group.done.items() if role == "engine"]
    checkers = [v.integrity for (role, _), v in group.done.items() if role != "engine"]
    devices = {v["device"] for (role, _), v in group.ready.items() if role == "worker"}
    tokens = sum(e.generated_tokens for e in engines)
    return RunResults(
        kv_lock=cfg.kv_lock,
        device=",".join(sorted(devices)),
        workload=cfg.workload,
        seed=cfg.seed,
        dp=cfg.dp,
        fault=cfg.fault,
        requests=sum(e.requests for e in engines),
        generated_tokens=tokens,
        wall_s=round(wall_s, 4),
        tokens_per_s=round(tokens / wall_s, 2) if wall_s > 0 else 0.0,
        steps=sum(e.steps for e in engines),
        step_ms=StepLatency.of([ns for e in engines for ns in e.step_ns]),
        swaps=SwapStats.total(e.swaps for e in engines),
        integrity=IntegrityStats.total(checkers),
        trace=str(run_dir),
    )


def run_engine(
    config: EngineConfig,
    probe_config: ProbeConfig,
    observers: Sequence[RunObserver] = (),
    progress: Callable[[int, int], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> RunResults:
    """Serve ``config``'s workload with real processes; record into ``probe_config.run_dir``.

    Returns the results (their ``to_json()`` is also written into ``run.json``). ``env`` is
    added to the children's environment (e.g. NVTX injection). Raises :class:`EngineCrashed`
    if a process dies.
    """
    if probe_config.run_dir is None:
        raise FdprofError("run_engine needs probe_config.run_dir (the run directory)")
    cfg = sized_for_workload(config)
    _check_device(cfg.device)
    run_dir = Path(probe_config.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.glob("*.rec"):
        old.unlink()
    remove_stale()
    paths = RunPaths.for_this_process()
    manifest = {"config": cfg.to_dict(), "processes": [], "results": {}, "error": None}
    group: _Group | None = None
    started: list[RunObserver] = []
    status, error = "crashed", None
    try:
        control = _create_shared(cfg, paths)
        group = _Group(cfg, probe_config, paths, env or {})
        manifest["processes"] = group.describe()
        _write_manifest(run_dir, status="running", **manifest)
        while len(group.ready) < len(group.procs):
            group.poll(0.05)
        for obs in observers:
            obs.start(run_dir, group.describe())
            started.append(obs)
        group.go.set()
        t0 = time.monotonic()
        shown, served_at = -1, None
        while len(group.done) < len(group.procs):
            group.poll(0.05)
            if progress is not None and control.finished() != shown:
                shown = control.finished()
                progress(shown, cfg.requests)
            if served_at is None and all(("engine", r) in group.done for r in range(cfg.dp)):
                served_at = time.monotonic()
        wall_s = (served_at or time.monotonic()) - t0
        results = _results(cfg, group, wall_s, run_dir)
        manifest["results"] = results.to_json()
        status = "ok"
        return results
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted (Ctrl-C)"
        raise
    except FdprofError as exc:
        status = "crashed" if isinstance(exc, EngineCrashed) else "failed"
        error = str(exc)
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if group is not None:
            group.stop(Control(paths.control, cfg.dp))
            manifest["processes"] = group.describe(exitcodes=True)
            group.release()
        for obs in started:
            obs.stop()
        for path in paths.leftovers():
            path.unlink(missing_ok=True)
        _write_manifest(run_dir, status=status, **{**manifest, "error": error})
