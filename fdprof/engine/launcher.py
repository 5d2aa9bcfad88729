"""The supervisor: starts the engine's process groups, watches them, and writes ``run.json``.

It owns every shared resource (the /dev/shm pools, signals, control block and lock file) and
removes them whatever happens: a normal exit, Ctrl-C or SIGTERM (:mod:`fdprof.interrupts`: a
second one does not cut the cleanup short), or a process that died. If any process dies, the
others are asked to stop, then terminated, and :class:`EngineCrashed` says which one died and
why. While it runs it holds the run directory's lock (:class:`fdprof.files.DirectoryLock`): a
second run given the same directory refuses before it touches anything.
"""

from __future__ import annotations

import contextlib
import gc
import json
import multiprocessing
import os
import queue
import resource
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from multiprocessing import forkserver
from pathlib import Path
from typing import Any, Protocol

from fdprof import files, interrupts, settings
from fdprof import semconv as S
from fdprof.engine.config import EngineConfig, fault_modes
from fdprof.engine.hosts import Hosts
from fdprof.engine.ipc import (
    Control,
    RunPaths,
    SwapSignal,
    create_shm_file,
    proc_stat,
    remove_stale,
)
from fdprof.engine.process import ROLES, GroupQueues, ProcessContext, StdStreams, child_main
from fdprof.engine.reference import REFERENCE_DIR, TOKENS_FILE, compare_tokens, reference_config
from fdprof.engine.results import (
    EngineStats,
    IntegrityStats,
    ProcessRecord,
    RunResults,
    StepLatency,
    SwapStats,
)
from fdprof.engine.workloads import sized_for_workload
from fdprof.errors import FdprofError
from fdprof.formats.rundir import MANIFEST, write_run_manifest
from fdprof.probe import ProbeConfig

STOP_GRACE_S = 3.0
#: how long processes that reported "done" get to exit by themselves (torch's exit alone takes
#: seconds on a loaded machine) before they are stopped like the rest
EXIT_GRACE_S = 30.0


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


#: a process of a run: (role, DP rank, TP rank; -1 for the engine process)
Key = tuple[str, int, int]


def _start_method() -> multiprocessing.context.BaseContext:
    """How the engine's processes start. They fork from a server that imported their modules
    (torch among them) once per supervisor, rather than each being a new interpreter importing
    torch: seconds of CPU per process per run, most of a short run's cost. The server imports
    and runs nothing else (no CUDA), so the children start as clean as spawned ones; a simulated
    host's join its clock's namespace as they start (:func:`fdprof.engine.hosts.join`)."""
    mp = multiprocessing.get_context("forkserver")
    mp.set_forkserver_preload(sorted(set(ROLES.values())))
    return mp


def ended_children_cpu_s() -> float:
    """CPU seconds of the processes this one started that have ended: those it waited for
    itself (spawned ones, and any other child) and those its fork server reaped (the engine's
    processes are the server's children, so the kernel adds their time to the server's), with
    the server's own (its one import of torch)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = children.ru_utime + children.ru_stime
    server = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if server:
        # utime, stime, cutime, cstime: fields 14-17 of proc(5)
        total += sum(int(x) for x in proc_stat(server)[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


class _Group:
    """The live processes of one run and their messages to the supervisor."""

    def __init__(self, cfg, hosts: Hosts | None = None) -> None:
        self._mp = _start_method()
        self.cfg = cfg
        self.hosts = hosts
        self.tp = cfg.tp
        self.report_q = self._mp.Queue()
        self.go = self._mp.Event()
        self.procs: list[tuple[Key, multiprocessing.process.BaseProcess]] = []
        self.done: dict[Key, Any] = {}
        self.errors: dict[Key, str] = {}
        self.ready: dict[Key, dict] = {}
        #: the queues must outlive the children's start: Process.start() drops its arguments
        self.queues: list[GroupQueues] = []
        self._clocks = contextlib.ExitStack()

    def start(self, probe_config, paths, env: Mapping[str, str]) -> None:
        """Start every process; each is in :attr:`procs` as soon as it started, so an
        interrupt half-way stops those already running."""
        mp, cfg = self._mp, self.cfg
        environ, stdio = settings.child_env(env), StdStreams()
        # the hosts' clocks live as long as the group (its processes join them as they start)
        clocks = {} if self.hosts is None else self._clocks.enter_context(self.hosts.clocks())
        for rank in range(cfg.dp):
            queues = GroupQueues.make(mp, cfg.tp)
            self.queues.append(queues)
            own = cfg if self.hosts is None else self.hosts.config(cfg, rank)
            ctx = ProcessContext(own, probe_config, rank, paths, queues, self.report_q, self.go,
                                 environ, stdio, clock=clocks.get(rank))  # fmt: skip
            members = [(S.ROLE_ENGINE, -1)] + [
                (role, t) for t in range(cfg.tp) for role in (S.ROLE_TRANSFER, S.ROLE_WORKER)
            ]
            for role, t in members:
                name = f"{role}-{rank}" if cfg.tp == 1 or t < 0 else f"{role}-{rank}.{t}"
                proc = mp.Process(
                    target=child_main, args=(role, replace(ctx, tp_rank=t)), name=name
                )
                proc.start()
                self.procs.append(((role, rank, t), proc))

    def describe(self, exitcodes: bool = False) -> list[dict]:
        return [
            ProcessRecord(
                pid=proc.pid,
                role=role,
                name=proc.name,
                dp_rank=rank,
                tp_rank=t,
                record=f"{role}-{rank}-{proc.pid}.rec",
                kv_cache=(self.ready.get((role, rank, t)) or {}).get("kv_cache"),
                exitcode=proc.exitcode if exitcodes else None,
            ).to_json()
            for (role, rank, t), proc in self.procs
        ]

    def poll(self, timeout: float) -> None:
        """Take the supervisor's messages; raise :class:`EngineCrashed` if a process died.

        Which processes have exited is looked at *before* the messages are read: a process's
        last message is in the pipe by the time it has exited, so one that sent "done" and
        exited while the queue was being read is not taken for a crash."""
        exited = [(key, proc) for key, proc in self.procs if not proc.is_alive()]
        self._take(timeout)
        for key, proc in [(k, p) for k, p in self.procs if k in self.errors] + exited:
            if key in self.done and key not in self.errors:
                continue
            proc.join(0.5)
            self._take(0.2, rest=0.2)
            if key in self.done and key not in self.errors:
                continue
            why = self.errors.get(key) or _exit_reason(proc.exitcode)
            role, rank, t = key
            where = f"dp rank {rank}" + (f", tp rank {t}" if t >= 0 and self.tp > 1 else "")
            raise EngineCrashed(f"{role} process ({where}, pid {proc.pid}) died: {why}")

    def _take(self, timeout: float, rest: float = 0.0) -> None:
        """File every message waiting: up to ``timeout`` s for the first, ``rest`` for each next."""
        try:
            while True:
                kind, role, rank, t, payload = self.report_q.get(timeout=timeout)
                timeout = rest
                {"ready": self.ready, "done": self.done, "error": self.errors}[kind][
                    (role, rank, t)
                ] = payload
        except queue.Empty:
            pass

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for every process to exit by itself."""
        deadline = time.monotonic() + timeout
        for _, proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))

    def stop(self, paths: RunPaths, dp: int) -> None:
        """Ask every process to stop, then terminate and kill whatever is left."""
        if paths.control.exists():
            Control(paths.control, dp).stop()
        deadline = time.monotonic() + STOP_GRACE_S
        for _, proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for sig in ("terminate", "kill"):
            alive = [proc for _, proc in self.procs if proc.is_alive()]
            for proc in alive:
                getattr(proc, sig)()
            for proc in alive:
                proc.join(1.0)

    def release(self) -> None:
        """Drop the queues and events now, so their named semaphores in /dev/shm are unlinked
        (they otherwise wait for a garbage collection that may come only at exit), and the
        simulated hosts' clocks."""
        self._clocks.close()
        for queues in self.queues:
            for q in queues.all():
                q.close()
                q.cancel_join_thread()
        self.report_q.close()
        self.report_q.cancel_join_thread()
        self.queues.clear()
        self.report_q = self.go = None
        gc.collect()


def _create_shared(cfg: EngineConfig, paths: RunPaths) -> Control:
    control = Control(paths.control, cfg.dp, create=True)
    for rank in range(cfg.dp):
        for t in range(cfg.tp):
            SwapSignal(paths.signal(rank, t), create=True)
            for kind in cfg.event_kinds:
                create_shm_file(paths.event(kind, rank, t), 8)
        if cfg.locked:
            create_shm_file(paths.lock(rank), 0)
    return control


def _check_device(device: str) -> None:
    if device == S.DEVICE_CUDA:
        import torch

        if not torch.cuda.is_available():
            raise FdprofError("--device cuda: CUDA is not available on this machine")


def _results(cfg: EngineConfig, group: _Group, wall_s: float, run_dir: Path) -> RunResults:
    engines: list[EngineStats] = [v for k, v in group.done.items() if k[0] == S.ROLE_ENGINE]
    checkers = [v.integrity for k, v in group.done.items() if k[0] != S.ROLE_ENGINE]
    devices = {v["device"] for k, v in group.ready.items() if k[0] == S.ROLE_WORKER}
    tokens = sum(e.generated_tokens for e in engines)
    return RunResults(
        kv_lock=cfg.kv_lock,
        device=",".join(sorted(devices)),
        workload=cfg.workload,
        seed=cfg.seed,
        dp=cfg.dp,
        tp=cfg.tp,
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
        outputs={rid: toks for e in engines for rid, toks in sorted(e.outputs.items())},
        cache_manager=cfg.cache_manager,
        fault_modes=fault_modes(cfg),
    )


def run_engine(
    config: EngineConfig,
    probe_config: ProbeConfig,
    observers: Sequence[RunObserver] = (),
    progress: Callable[[int, int], None] | None = None,
    env: Mapping[str, str] | None = None,
    reference: bool = False,
    hosts: Hosts | None = None,
) -> RunResults:
    """Serve ``config``'s workload with real processes; record into ``probe_config.run_dir``.

    Returns the results (their ``to_json()`` is also written into ``run.json``, each request's
    tokens into ``tokens.json``). ``env`` is added to the children's environment (e.g. NVTX
    injection). With ``reference``, the same seed is then served without swaps into
    ``<run dir>/reference`` and the tokens compared (:mod:`fdprof.engine.reference`). Raises
    :class:`EngineCrashed` if a process dies. ``hosts``: each DP group on a simulated host of
    its own (:mod:`fdprof.engine.hosts`: its own clock, the fault on some only).
    """
    if probe_config.run_dir is None:
        raise FdprofError("run_engine needs probe_config.run_dir (the run directory)")
    run_dir = files.make_dir(probe_config.run_dir)
    with files.DirectoryLock(run_dir):
        results = _run(config, probe_config, observers, progress, env, hosts)
        if reference:
            ref_dir = run_dir / REFERENCE_DIR
            ref = _run(reference_config(config), ProbeConfig(run_dir=str(ref_dir)), (), None, env)
            results = replace(results, reference=compare_tokens(results.outputs, ref, ref_dir))
            _rewrite_results(run_dir, results)
    return results


def _rewrite_results(run_dir: Path, results: RunResults) -> None:
    manifest = json.loads((run_dir / MANIFEST).read_text())
    manifest.pop("format", None)
    write_run_manifest(run_dir, **{**manifest, "results": results.to_json()})


def _run(
    config: EngineConfig,
    probe_config: ProbeConfig,
    observers: Sequence[RunObserver],
    progress: Callable[[int, int], None] | None,
    env: Mapping[str, str] | None,
    hosts: Hosts | None = None,
) -> RunResults:
    cfg = sized_for_workload(config)
    _check_device(cfg.device)
    run_dir = files.make_dir(probe_config.run_dir)
    for old in run_dir.glob("*.rec"):  # the directory is ours: run_engine holds its lock
        old.unlink()
    remove_stale()
    paths = RunPaths.for_this_process()
    manifest = {"config": cfg.to_dict(), "processes": [], "results": {}, "error": None}
    group: _Group | None = None
    started: list[RunObserver] = []
    status, error = "crashed", None
    try:
        control = _create_shared(cfg, paths)
        group = _Group(cfg, hosts)
        group.start(probe_config, paths, env or {})
        manifest["processes"] = group.describe()
        write_run_manifest(run_dir, status="running", **manifest)
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
            if served_at is None and all(
                (S.ROLE_ENGINE, r, -1) in group.done for r in range(cfg.dp)
            ):
                served_at = time.monotonic()
        wall_s = (served_at or time.monotonic()) - t0
        group.join(EXIT_GRACE_S)
        results = _results(cfg, group, wall_s, run_dir)
        manifest["results"] = results.to_json()
        files.write_atomic(run_dir / TOKENS_FILE, json.dumps(results.outputs) + "\n")
        status = "ok"
        return results
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (interrupts.Terminated)
        status, error = "interrupted", interrupts.describe(exc)
        raise
    except FdprofError as exc:
        status = "crashed" if isinstance(exc, EngineCrashed) else "failed"
        error = str(exc)
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        with interrupts.shielded():  # a second Ctrl-C or SIGTERM waits for the cleanup
            _clean_up(group, cfg, paths, started, manifest)
            write_run_manifest(run_dir, status=status, **{**manifest, "error": error})


def _clean_up(
    group: _Group | None,
    cfg: EngineConfig,
    paths: RunPaths,
    started: list[RunObserver],
    manifest: dict,
) -> None:
    """Stop the processes (their exit codes into ``manifest``), then the observers; remove
    everything the run made in /dev/shm."""
    try:
        if group is not None:
            group.stop(paths, cfg.dp)
            manifest["processes"] = group.describe(exitcodes=True)
            group.release()
        for obs in started:
            obs.stop()
    finally:
        for path in paths.leftovers():
            path.unlink(missing_ok=True)
