"""``fdprof run --nsys``: without nsys on the PATH, one line and exit 2; with it (here a
stand-in speaking nsys's command line, see ``nsys_standin.py``), the run's processes under it
and the export joined to the records by span id, in the run directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fdprof.trace import load

FDPROF = [sys.executable, "-m", "fdprof", "run"]


def test_without_nsys_on_the_path_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # nothing there
    res = subprocess.run([*FDPROF, "--nsys", "--out", str(tmp_path / "run")], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "fdprof run: --nsys needs Nsight Systems: no 'nsys' on the PATH"]  # fmt: skip
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_under_nsys_the_export_joins_the_records(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    standin = Path(__file__).with_name("nsys_standin.py")
    (bin_dir / "nsys").write_text(f'#!/bin/sh\nexec {sys.executable} {standin} "$@"\n')
    (bin_dir / "nsys").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    run = tmp_path / "run"
    cmd = [*FDPROF, "--nsys", "--requests", "8", "--kv-lock", "ipc", "--json", "--out", str(run)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)  # one JSON object: the run's results and the join
    assert out["generated_tokens"] > 0 and out["nsys"]["export"] == "nsys/report.sqlite"
    assert (run / "nsys" / "report.sqlite").exists() and (run / "nsys" / "report.nsys-rep").exists()
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["nsys"] == out["nsys"]
    native = load(run)
    # every span of every process had its NVTX range, and each one joined back
    assert out["nsys"]["ranges_joined"] == len(native.spans) > 0
    joined = load(run / "nsys" / "report.sqlite", join=run)
    assert set(native.accesses["span_id"]) == set(joined.accesses["span_id"])
