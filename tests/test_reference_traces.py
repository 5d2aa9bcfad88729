"""The committed reference traces (``traces/``) show what their README promises, read through
the commands a user would type right after install, and still are what the engine records:
a trace that predates a change of the engine (the FastDeploy-faithful lock) fails here until
it is regenerated (``make traces``)."""

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from fdprof import semconv as S
from fdprof.analysis.hazards import find_hazards
from fdprof.engine.launcher import run_engine
from fdprof.probe import ProbeConfig
from fdprof.trace import load
from tests.cli import fdprof

TRACES = Path(__file__).resolve().parents[1] / "traces"
FAULTS = ["fault-no-wait-swap-in", "fault-free-before-swap-out", "fault-ack-before-copy"]


def _regenerate():
    spec = importlib.util.spec_from_file_location("regenerate", TRACES / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def signature(run_dir: Path) -> dict:
    """What a reference trace must still show: its lanes (how many per role) and its verdict
    (which locks did not exclude, whether anything raced)."""
    trace = load(run_dir)
    report = find_hazards(trace)
    roles = trace.spans.groupby("lane")["role"].first()
    return {
        "lanes": sorted(Counter(roles.astype(str)).items()),
        "broken_locks": list(report.untrusted_locks),
        "races": not report.races.empty,
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_regenerate().CASES))
def test_the_committed_trace_is_what_the_engine_records(name, tmp_path):
    """The engine, run as ``traces/regenerate.py`` runs it, records the same lanes and the
    same lock verdict as the committed trace (a baseline recorded before the faithful lock
    checked clean while every fresh ``--kv-lock ipc`` run reported a broken lock)."""
    config = _regenerate().CASES[name]
    fresh = tmp_path / name
    run_engine(config, ProbeConfig(run_dir=str(fresh), resource={S.KV_LOCK: config.kv_lock}))
    assert signature(TRACES / name) == signature(fresh), "regenerate traces/: make traces"


def test_the_lockless_run_is_clean():
    result = fdprof("hazards", str(TRACES / "lockless"), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"]["races"] == 0


def test_the_baseline_shows_the_broken_lock_and_no_race():
    """FastDeploy's lock as it ran: the cache manager's threads share one flock descriptor, so
    two holds overlap. Nothing raced, so the run is safe (exit 0) and the verdict names the lock
    (one rule with ab: docs/analysis.md "Verdicts and exit codes")."""
    result = fdprof("hazards", str(TRACES / "baseline"), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["verdict"]["safe"] and "BROKEN LOCK lock:kv/dp0" in data["verdict"]["line"]
    assert data["untrusted_locks"] == ["lock:kv/dp0"] and data["counts"]["broken_locks"] > 0
    assert data["counts"]["races"] == 0


@pytest.mark.parametrize("name", FAULTS)
def test_each_fault_is_flagged(name):
    result = fdprof("hazards", str(TRACES / name), "--json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    races = data["races"]
    assert races and all({r["name_a"], r["name_b"]} <= {"swap", "execute_model"} for r in races)
    kinds = {(k["name_a"], k["name_b"], k["modes"]): k["pairs"] for k in data["race_kinds"]}
    assert sum(kinds.values()) == len(races)
    # what raced with what names the bug: the worker reads a block a swap-in still writes
    # (no-wait-swap-in), writes a block a swap-out still reads (free-before-swap-out); with
    # swaps both ways at once, a swap-in and a swap-out of the block race as well
    expected = {
        "fault-no-wait-swap-in": ("execute_model", "swap", "rw"),
        "fault-free-before-swap-out": ("execute_model", "swap", "wr"),
    }.get(name)
    if expected is not None:
        assert expected in kinds


def test_lock_what_if_on_the_baseline_finds_nothing_unordered():
    """The broken lock's edges are not order anyway: dropping the lock unorders nothing."""
    result = fdprof("hazards", str(TRACES / "baseline"), "--what-if", "drop-lock", "--json")
    assert result.returncode == 0, result.stderr  # the broken lock is named, not unsafe
    assert json.loads(result.stdout)["what_if_drop_lock"]["count"] == 0


def test_diff_shows_the_lock_wait_gone_and_swaps_overlapping():
    result = fdprof("diff", str(TRACES / "baseline"), str(TRACES / "lockless"), "--json")
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    moved = {row["part"]: row for row in d["moved"]}
    assert moved["lock_wait"]["base_mean"] > 0 and moved["lock_wait"]["new_mean"] == 0
    assert d["base"]["swap_overlap"] == 0 and d["new"]["swap_overlap"] > 0
