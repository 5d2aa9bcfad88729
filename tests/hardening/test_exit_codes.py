"""Bad input and fdprof's own bugs are told apart: bad input exits 2 with the reason; anything
else exits 70 with "internal error, please report", the traceback only with --debug."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from corpus import BASELINE

from tests.cli import fdprof

#: a real process whose hazard analysis has a bug planted in it (a ZeroDivisionError)
PLANTED = """
import sys
import fdprof.cli.hazards as command
def broken(trace):
    return 1 // 0
command.find_hazards = broken
from fdprof.cli import main
sys.exit(main(sys.argv[1:]))
"""


def planted(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PLANTED, *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_an_internal_error_exits_70_in_one_line():
    result = planted("hazards", str(BASELINE))
    assert result.returncode == 70
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("fdprof hazards: internal error, please report")
    assert "ZeroDivisionError" in line and "--debug" in line
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(where):
    args = ["--debug", "hazards", str(BASELINE)]
    if where == "after":
        args = ["hazards", "--debug", str(BASELINE)]
    result = planted(*args)
    assert result.returncode == 70
    assert "Traceback (most recent call last)" in result.stderr
    assert "in broken" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("fdprof hazards: internal error")


def test_bad_input_exits_2_with_the_reason_even_with_debug(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": "soon"}]}')
    result = fdprof("--debug", "hazards", bad)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "expected a number of microseconds, got 'soon'" in line


def test_an_internal_error_asked_for_json_is_one_json_object():
    result = planted("hazards", "--json", str(BASELINE))
    assert result.returncode == 70
    error = json.loads(result.stdout)["error"]
    assert error["exit_code"] == 70 and "internal error" in error["message"]
