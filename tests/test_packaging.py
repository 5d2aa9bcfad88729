"""``pip install .`` for analysis alone: an isolated build (the NVTX headers come from the build
requirements) into a fresh venv pulls no torch, py-spy, nvtx or OpenTelemetry, and the
analyses work there; the engine says which extra it needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = ("torch", "py_spy", "nvtx", "opentelemetry", "prometheus_client")


@pytest.mark.slow
@pytest.mark.install
def test_pip_install_for_analysis_alone(tmp_path):
    source = tmp_path / "src"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (t.decode() for t in tracked)):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # --no-compile: pip's bytecode for every module of every dependency (pandas' tests among
    # them) is not what this test checks, and was a quarter of its CPU
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-compile", str(source)],
                             capture_output=True, text=True)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    present = subprocess.run(
        [python, "-c", "import importlib.util as u, sys; "
         f"print([m for m in {OPTIONAL!r} if u.find_spec(m)])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert present == "[]"
    fdprof = env_dir / "bin" / "fdprof"
    hazards = subprocess.run(
        [fdprof, "hazards", str(ROOT / "traces" / "lockless")], capture_output=True, text=True
    )
    assert hazards.returncode == 0, hazards.stderr
    assert "Races" in hazards.stdout
    converted = tmp_path / "lockless.json"
    convert = subprocess.run(
        [fdprof, "convert", str(ROOT / "traces" / "lockless"), str(converted)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert convert.returncode == 0 and converted.stat().st_size > 0, convert.stderr
    run = subprocess.run([fdprof, "run", "--out", str(tmp_path / "run")], capture_output=True,
                         text=True)  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "fdprof run: needs torch, which is not installed: pip install 'fdprof[engine]'"
    ]
    assert sys.executable not in run.stderr  # no traceback
