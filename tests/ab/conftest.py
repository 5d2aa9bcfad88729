"""Running ``fdprof ab`` as users do, and the toy engine's command lines."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import fdprof

TOY = Path(__file__).with_name("toy_engine.py")


def toy(*args: str) -> str:
    """A shell command running the toy engine with ``args``."""
    return shlex.join([sys.executable, str(TOY), *args])


def fdprof_ab(*args) -> subprocess.CompletedProcess:
    return fdprof("ab", *args)


@pytest.fixture(scope="session")
def toy_ab(tmp_path_factory):
    """A generic A/B of two toy-engine configurations, 3 pairs: (out dir, result)."""
    out = tmp_path_factory.mktemp("toy-ab")
    result = fdprof_ab("--baseline", toy("--step-ms", "4"), "--candidate", toy("--step-ms", "2"),
                       "--names", "slow", "fast", "--runs", 3, "--out", out)  # fmt: skip
    return out, result
