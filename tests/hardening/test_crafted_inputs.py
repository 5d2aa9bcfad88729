"""Every crafted malformed input (:mod:`corpus`), through every command that reads a trace, as
a real process under a 3 GiB address-space cap (forked from a warm parent: :mod:`capped`):
exit 2, one line naming the problem, no traceback, and done well within the hang guard."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import corpus_strict  # noqa: F401 (its cases register into CASES)
import pytest
from capped import fdprof_capped
from corpus import BASELINE, CASES

#: the memory cap of the issue: ``prlimit --as=3G``
ADDRESS_SPACE = 3 << 30
COMMANDS = ("hazards", "diff", "convert")
#: each case through one command in turn (the readers are shared; a command only wraps them),
#: every case through every command with FDPROF_HARDENING_ALL=1
PAIRS = [
    (name, command)
    for i, name in enumerate(sorted(CASES))
    for command in (COMMANDS if os.environ.get("FDPROF_HARDENING_ALL") else [COMMANDS[i % 3]])
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each case built once, on first use, shared by the commands."""
    root = tmp_path_factory.mktemp("corpus")
    paths: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in paths:
            where = root / name
            where.mkdir()
            paths[name] = CASES[name](where)
        return paths[name]

    return get


def capped(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``fdprof ARGS`` under the address-space cap."""
    return fdprof_capped(*args, cap=ADDRESS_SPACE, env=env)


def argv(command: str, path: Path, out: Path) -> list[str]:
    if command == "hazards":
        return ["hazards", str(path)]
    if command == "diff":
        return ["diff", str(path), str(BASELINE)]
    return ["convert", str(path), str(out / "out.json")]


@pytest.mark.parametrize("name, command", PAIRS)
def test_crafted_input_is_one_line_exit_2(built, tmp_path, name, command):
    path = built(name)
    result = capped(*argv(command, path, tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"fdprof {command}: "), lines[0]
    # the reader refused it: not a trace that loaded and then had nothing to check
    assert "no KV-block accesses" not in lines[0], lines[0]
    assert "internal error" not in lines[0], lines[0]
