"""fdprof inside vLLM: a general plugin (entry point group ``vllm.general_plugins``, name
``fdprof``) that records every vLLM process through fdprof's probe.

It does nothing unless ``FDPROF_RUN_DIR`` is set. Then, in each process vLLM loads it in
(main, engine core, worker; all three in one with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``), it
configures the probe (``<role>-<dp>-<pid>.rec`` in that directory) and installs the hooks of
:mod:`fdprof.adapters.vllm.hooks` that fit the process. The main process writes the run's
``run.json`` when it exits. Supported: any vLLM whose hook targets resolve
(:mod:`fdprof.adapters.vllm.targets`, looked up in the process at start); another is one line
on stderr naming what is missing and an unrecorded run whose ``run.json`` says why. Nothing
here raises into vLLM. See docs/vllm.md, "Versions".
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import re
import sys
from typing import Any

from fdprof import semconv as S
from fdprof import settings


def register() -> None:
    """The plugin's entry point, called by vLLM's ``load_general_plugins()`` in each process."""
    run_dir = settings.run_dir()
    if not run_dir:
        return
    try:
        _start(run_dir)
    except Exception as exc:  # noqa: BLE001 - a broken profiler must not stop vLLM
        print(f"fdprof: vLLM adapter not started, vLLM goes on unrecorded: {exc!r}",
              file=sys.stderr)  # fmt: skip


def process_role(name: str, single_process: bool) -> tuple[str, int, int]:
    """(role, DP rank, TP rank) of a vLLM process from its multiprocessing name:
    ``EngineCore`` / ``EngineCore_DP<n>`` (engine core), ``VllmWorker-<rank>`` (worker),
    anything else the main process (everything at once when vLLM runs in one process)."""
    if name.startswith("EngineCore"):
        dp = re.search(r"_DP(\d+)", name)
        return S.ROLE_ENGINE, int(dp[1]) if dp else 0, 0
    if name.startswith("VllmWorker"):
        rank = re.search(r"-(\d+)$", name)
        return S.ROLE_WORKER, 0, int(rank[1]) if rank else 0
    return (S.ROLE_ENGINE if single_process else S.ROLE_FRONTEND), 0, 0


def _start(run_dir: str) -> None:
    import vllm

    from fdprof.adapters.vllm import hooks, targets
    from fdprof.probe import sdk

    single = settings.vllm_single_process()
    role, dp_rank, tp_rank = process_role(multiprocessing.current_process().name, single)
    is_main = multiprocessing.parent_process() is None
    if is_main and settings.vllm_main_pid() not in (None, os.getpid()):
        # an interpreter a vLLM process started for a side job (inspecting the model class on
        # a cold cache): neither another frontend nor the owner of run.json
        return
    if is_main:
        settings.export(settings.VLLM_MAIN_PID, str(os.getpid()))
    version = getattr(vllm, "__version__", "?")
    missing = targets.problems(targets.runtime_facts())
    if missing:
        if is_main:
            error = (f"vLLM {version} is not supported by fdprof's vLLM adapter: "
                     f"{targets.first_problem(missing)}; this run is not recorded")  # fmt: skip
            print(f"fdprof: {error}", file=sys.stderr)
            os.makedirs(run_dir, exist_ok=True)
            from fdprof.formats.rundir import write_run_manifest

            write_run_manifest(run_dir, status="failed", error=error, processes=[])
        return
    sdk.configure_from_env(role, dp_rank, tp_rank).name_thread(f"vllm-{role}")
    if role == S.ROLE_ENGINE:
        hooks.EngineCoreRecorder().install()
    if role == S.ROLE_WORKER or single:
        hooks.WorkerRecorder().install()
    if is_main:
        frontend = hooks.FrontendRecorder()
        frontend.install()
        run = _MainRun(run_dir, version, single, frontend)
        run.install()
        atexit.register(run.finish)


class _MainRun:
    """The main process's view of the run: vLLM's configuration (captured when vLLM builds
    it), how the process ended, and ``run.json`` at exit."""

    def __init__(self, run_dir: str, version: str, single: bool, frontend) -> None:
        self.run_dir = run_dir
        self.config: dict[str, Any] = {"engine": "vllm", "vllm_version": version,
                                       "multiprocessing": not single, "argv": sys.argv}  # fmt: skip
        self.status = "ok"
        self.error: str | None = None
        self.tp_size = 1
        self._frontend = frontend

    def install(self) -> None:
        from vllm.engine.arg_utils import EngineArgs

        from fdprof.adapters.vllm.hooks import ERRORS, wrap

        def make(original):
            def create_engine_config(engine_args, *args, **kwargs):
                config = original(engine_args, *args, **kwargs)
                with ERRORS.guard("EngineArgs.create_engine_config"):
                    self._capture(config)
                return config

            return create_engine_config

        wrap(EngineArgs, "create_engine_config", make)
        previous = sys.excepthook

        def excepthook(kind, value, tb):
            self.status = "interrupted" if issubclass(kind, KeyboardInterrupt) else "failed"
            self.error = f"{kind.__name__}: {value}"
            previous(kind, value, tb)

        sys.excepthook = excepthook

    def _capture(self, config) -> None:
        cache, parallel, sched = (
            config.cache_config,
            config.parallel_config,
            config.scheduler_config,
        )
        kv = config.kv_transfer_config
        self.tp_size = parallel.tensor_parallel_size
        self.config.update({
            "model": config.model_config.model,
            "dtype": str(config.model_config.dtype),
            "block_size": cache.block_size,
            "enable_prefix_caching": cache.enable_prefix_caching,
            "num_gpu_blocks_override": cache.num_gpu_blocks_override,
            "max_num_seqs": sched.max_num_seqs,
            "tensor_parallel_size": parallel.tensor_parallel_size,
            "data_parallel_size": parallel.data_parallel_size,
            "kv_connector": kv.kv_connector if kv else None,
            "kv_connector_extra_config": dict(kv.kv_connector_extra_config) if kv else None,
        })  # fmt: skip

    def finish(self) -> None:
        from fdprof.adapters.vllm.hooks import ERRORS
        from fdprof.formats.rundir import processes_from_records, write_run_manifest

        try:
            self._frontend.close()
            processes = processes_from_records(self.run_dir)
            if self.tp_size == 1:  # every process of a TP-1 engine is TP rank 0
                for proc in processes:
                    proc["tp_rank"] = 0
            results = {"adapter_errors": dict(ERRORS.counts)}
            write_run_manifest(self.run_dir, status=self.status, config=self.config,
                               results=results, error=self.error,
                               processes=processes)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - at exit: say it, do not mask vLLM's status
            print(f"fdprof: could not write {self.run_dir}/run.json: {exc!r}", file=sys.stderr)
