"""vLLM runs and scripts from one warm interpreter, for the adapter tests (test-only).

Importing vLLM is most of a short run here (40-90 s of a one-minute workload on a busy
two-core machine, 10-15 s of a short script). This imports it once and serves batches for the
whole test session: each line on stdin is one batch, ``{"jobs": N, "runs": [...]}``; it forks
one child per run, ``N`` at a time, and answers one line (each run's exit status and wall
time) when every run of the batch has ended. Each child sends its output to the run's files,
takes the run's environment additions (``env``; ``FDPROF_RUN_DIR`` from ``run_dir``) and runs
either

- a workload run (``argv``; ``bug``): the bug seeded into vLLM first
  (:mod:`tests.adapters.vllm_bugs`), then ``bench/vllm_workload.py``'s ``main`` with ``argv``:
  vLLM in one process unless ``--multiprocess`` (so a patch reaches the engine core and the
  worker), or
- a script (``script``): Python source, run as ``python -c`` runs it,

then the exit handlers (the plugin writes ``run.json`` at exit), and exits with its status.
Nothing of fdprof's plugin is imported or registered here before a run does it itself.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _redirect(run: dict) -> None:
    for fd, key in ((1, "log"), (2, "err")):
        opened = os.open(run.get(key) or run["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                         0o644)  # fmt: skip
        os.dup2(opened, fd)
        os.close(opened)


def _child(run: dict) -> int:
    for path in {run["log"], run.get("err") or run["log"]}:
        Path(path).write_text("")
    _redirect(run)
    os.environ.update(run.get("env", {}))
    if run.get("run_dir"):
        os.environ["FDPROF_RUN_DIR"] = run["run_dir"]
    else:
        os.environ.pop("FDPROF_RUN_DIR", None)
    if "script" in run:
        sys.argv = ["-c"]
        exec(compile(run["script"], "<string>", "exec"), {"__name__": "__main__"})
        return 0
    if run.get("bug"):
        import vllm_bugs

        vllm_bugs.apply(run["bug"])
    import vllm_workload

    return vllm_workload.main(run["argv"])


def _fork(run: dict) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        code = _child(run)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child's own failure, in its log
        code = 1
        sys.excepthook(*sys.exc_info())  # as uncaught: the plugin's run.json says so
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


#: what a run imports once ``LLM(...)`` starts (the CPU worker, the model class, the
#: offloading connector and what they pull in): imported here, a pressure run's CPU is 4.5 s,
#: not 5.5 (measured by the modules a run added to ``sys.modules``)
RUN_IMPORTS = (
    "vllm.v1.worker.cpu_worker",
    "vllm.v1.worker.cpu_model_runner",
    "vllm.model_executor.models.llama",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector",
    "vllm.v1.kv_offload.cpu.manager",
    "vllm.v1.kv_offload.cpu.gpu_worker",
    "vllm.lora.layers",
    "vllm.model_executor.layers.quantization.online.base",
    "vllm.entrypoints.launchers.cli_args",
)


def serve_batch(batch: dict) -> list[dict]:
    """Every run of ``batch``, ``jobs`` at a time: [{"status", "wall_s"}] in its order."""
    waiting = list(enumerate(batch["runs"]))
    running: dict[int, tuple[int, float]] = {}
    ended: dict[int, dict] = {}
    while waiting or running:
        while waiting and len(running) < batch.get("jobs", 2):
            index, run = waiting.pop(0)
            running[_fork(run)] = (index, time.monotonic())
        pid, status = os.wait()
        index, t0 = running.pop(pid)
        ended[index] = {"status": os.waitstatus_to_exitcode(status),
                        "wall_s": round(time.monotonic() - t0, 1)}  # fmt: skip
    return [ended[i] for i in range(len(ended))]


def main() -> int:
    sys.path[:0] = [str(HERE), str(ROOT / "bench")]
    import torch  # noqa: F401 - warm imports the children share
    import vllm_workload  # noqa: F401
    from vllm import LLM, SamplingParams  # noqa: F401
    from vllm.v1.core import block_pool  # noqa: F401
    from vllm.v1.engine import core  # noqa: F401

    for name in RUN_IMPORTS:
        with contextlib.suppress(ImportError):  # another vLLM: its runs import their own
            importlib.import_module(name)

    # what was imported stays out of every child's collections: vLLM collects at start and at
    # exit, and a collection that walks the inherited heap writes to all of it (copy on write)
    gc.freeze()  # 6.2 -> 4.8 s of CPU a pressure run here
    for line in sys.stdin:
        print(json.dumps(serve_batch(json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
