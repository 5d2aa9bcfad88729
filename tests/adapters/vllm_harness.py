"""Several vLLM workload runs from one warm interpreter, for the adapter tests (test-only).

Importing vLLM is most of a short run's time here (40-90 s of a one-minute workload on a busy
two-core machine). This imports it once, then forks one child per run, ``jobs`` at a time.
Each child redirects its output to the run's log, sets ``FDPROF_RUN_DIR``, seeds the run's
bug into vLLM (:mod:`tests.adapters.vllm_bugs`) if it has one, and runs
``bench/vllm_workload.py``'s ``main`` with the run's arguments: vLLM in one process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a patch reaches the engine core and the worker.

Usage: ``python vllm_harness.py PLAN.json`` with ``{"jobs": N, "runs": [{"run_dir", "log",
"argv", "bug"}]}``; each run's exit status goes to ``<log>.rc``, its wall time to the
harness's output.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _child(run: dict) -> int:
    fd = os.open(run["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if run.get("run_dir"):
        os.environ["FDPROF_RUN_DIR"] = run["run_dir"]
    else:
        os.environ.pop("FDPROF_RUN_DIR", None)
    if run.get("bug"):
        import vllm_bugs

        vllm_bugs.apply(run["bug"])
    import vllm_workload

    return vllm_workload.main(run["argv"])


def main(plan_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    sys.path[:0] = [str(HERE), str(ROOT / "bench")]
    import vllm_workload  # noqa: F401 - warm imports the children share
    from vllm import LLM, SamplingParams  # noqa: F401
    from vllm.v1.engine import core  # noqa: F401

    import fdprof.adapters.vllm.offload  # noqa: F401

    waiting = list(plan["runs"])
    running: dict[int, dict] = {}
    while waiting or running:
        while waiting and len(running) < plan.get("jobs", 2):
            run = waiting.pop(0)
            pid = os.fork()
            if pid == 0:
                code = 70
                try:
                    code = _child(run)
                except BaseException:  # noqa: BLE001 - the child's own failure, in its log
                    sys.excepthook(*sys.exc_info())  # as uncaught: the plugin's run.json says so
                finally:
                    atexit._run_exitfuncs()  # the plugin writes run.json at exit
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            running[pid] = run | {"t0": time.monotonic()}
        pid, status = os.wait()
        run = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        Path(run["log"] + ".rc").write_text(str(code))
        print(f"{run['log']}: exit {code} after {time.monotonic() - run['t0']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
