"""``make gpu-check`` where there is no CUDA device: one line saying so, exit 0, nothing run."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_without_a_device_it_says_so_in_one_line_and_exits_0(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no device, even on a GPU machine
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "gpu-check: no CUDA device on this machine; nothing to check\n"
    assert not (tmp_path / "out").exists()
