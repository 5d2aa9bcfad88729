"""Running the real engine from the probe tests, as a user would."""

from __future__ import annotations

import subprocess

from tests.cli import fdprof


def fdprof_run(out, *flags: str) -> subprocess.CompletedProcess:
    """``fdprof run`` as a user runs it; the timeout only turns a hang into a failure."""
    result = fdprof("run", "--requests", "24", "--kv-lock", "ipc", *flags, "--json", "--out", out)
    assert result.returncode == 0, result.stderr
    return result
