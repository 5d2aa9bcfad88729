"""The committed reference traces (``traces/``) show what their README promises, read through
the commands a user would type right after install."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[1] / "traces"
FAULTS = ["fault-no-wait-swap-in", "fault-free-before-swap-out", "fault-ack-before-copy"]


def fdprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fdprof", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("name", ["baseline", "lockless"])
def test_correct_runs_are_clean(name):
    result = fdprof("hazards", str(TRACES / name), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"]["races"] == 0


@pytest.mark.parametrize("name", FAULTS)
def test_each_fault_is_flagged(name):
    result = fdprof("hazards", str(TRACES / name), "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    races = data["races"]
    assert races and all({r["name_a"], r["name_b"]} == {"swap", "execute_model"} for r in races)
    kinds = {(k["name_a"], k["name_b"], k["modes"]): k["pairs"] for k in data["race_kinds"]}
    assert sum(kinds.values()) == len(races)
    # what raced with what names the bug: the worker reads a block a swap-in still writes
    # (no-wait-swap-in), writes a block a swap-out still reads (free-before-swap-out)
    expected = {
        "fault-no-wait-swap-in": {("execute_model", "swap", "rw")},
        "fault-free-before-swap-out": {("execute_model", "swap", "wr")},
    }.get(name)
    if expected is not None:
        assert set(kinds) == expected


def test_lock_what_if_on_the_baseline_finds_nothing_unordered():
    result = fdprof("hazards", str(TRACES / "baseline"), "--what-if", "drop-lock")
    assert result.returncode == 0, result.stdout + result.stderr


def test_diff_shows_the_lock_wait_gone_and_swaps_overlapping():
    result = fdprof("diff", str(TRACES / "baseline"), str(TRACES / "lockless"), "--json")
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    moved = {row["part"]: row for row in d["moved"]}
    assert moved["lock_wait"]["base_mean"] > 0 and moved["lock_wait"]["new_mean"] == 0
    assert d["base"]["swap_overlap"] == 0 and d["new"]["swap_overlap"] > 0
