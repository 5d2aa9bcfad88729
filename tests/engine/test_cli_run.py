"""``fdprof run`` as users call it: JSON results, the legacy env switch, bad input."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from schemas import validate

from tests.cli import fdprof


@pytest.mark.slow
@pytest.mark.parametrize("legacy", ["USE_KVCACHE_LOCK", "FD_USE_KVCACHE_LOCK"])
def test_json_results_and_legacy_env(tmp_path, legacy):
    out = tmp_path / "run"
    r = fdprof("run", "--out", str(out), "--requests", "8", "--json", env={legacy: "1"})
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    for key in (
        "kv_lock",
        "device",
        "requests",
        "generated_tokens",
        "wall_s",
        "tokens_per_s",
        "steps",
        "swaps",
        "integrity",
        "trace",
    ):
        assert key in res
    assert res["kv_lock"] == "ipc" and res["device"] == "cpu"
    lat = res["step_ms"]  # one run's spread: step wall times
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert f"{legacy}=1 is deprecated; use --kv-lock ipc" in r.stderr
    assert res["trace"] == str(out.resolve())
    validate("run", res)
    assert json.loads((out / "run.json").read_text())["results"] == {
        k: v for k, v in res.items() if k != "schema"
    }


@pytest.mark.parametrize(
    "args",
    [
        ["--device", "cuda"],
        ["--requests", "0"],
        ["--kv-lock", "flock"],
        ["--dp", "0"],
        ["--tp", "3"],
        ["--fault-delay-ms", "-5"],
        ["--metrics-port", "99999"],
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args):
    if args[:2] == ["--device", "cuda"]:
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    r = fdprof("run", "--out", str(tmp_path / "run"), *args)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_metrics_port_in_use_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "fdprof", "run", "--requests", "2", "--metrics-port",
             str(port), "--out", str(tmp_path / "run")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert (
        err
        == f"fdprof run: cannot serve metrics on 127.0.0.1 port {port}: Address already in use\n"
    )
    assert list(Path("/dev/shm").glob(f"fdprof-{proc.pid}-*")) == []
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["error"] in err
