"""Running the real engine from the probe tests, as a user would."""

from __future__ import annotations

import subprocess
import sys


def fdprof_run(out, *flags: str) -> subprocess.CompletedProcess:
    """``fdprof run`` as a user runs it; the timeout only turns a hang into a failure."""
    cmd = [sys.executable, "-m", "fdprof", "run", "--requests", "24", "--kv-lock", "ipc"]
    result = subprocess.run(
        [*cmd, *flags, "--json", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result
