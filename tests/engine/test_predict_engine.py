"""``hazards --predict`` on real engine runs: the correct protocol has no race in any lock
mode, observed or predicted (no other order of the lock's critical sections exposes one); the
seeded bug's races are observed ones. 18 requests on seed 0 swap blocks both ways."""

import json

import pytest

from fdprof.analysis.predict import predict_races
from fdprof.analysis.whatif import what_if_drop_lock
from fdprof.cli import main
from fdprof.semconv import LockMode
from fdprof.trace import load
from tests.engine.conftest import run


def _predict(run_dir, capsys, code: int):
    """The predictor's report of the run, and the same counts from the command line."""
    report = predict_races(load(run_dir))
    assert main(["hazards", str(run_dir), "--predict", "--json"]) == code
    assert json.loads(capsys.readouterr().out)["counts"] == report.counts
    return report


@pytest.mark.slow
@pytest.mark.parametrize("kv_lock", list(LockMode))
def test_the_correct_protocol_predicts_no_race(tmp_path, capsys, kv_lock):
    results, run_dir = run(tmp_path, kv_lock=kv_lock, requests=18, seed=0)
    assert results["swaps"]["to_cpu"] > 0 and results["swaps"]["to_gpu"] > 0
    report = _predict(run_dir, capsys, 0)
    assert report.accesses > 0 and report.broken_locks.empty
    assert report.races.empty and report.predicted.empty


@pytest.mark.slow
@pytest.mark.parametrize("kv_lock", ["ipc", "none"])
def test_the_seeded_bug_is_observed_not_predicted(tmp_path, capsys, kv_lock):
    """Predicted are only pairs happens-before orders; the lock orders none of the unwaited
    swap-in's pairs (dropping it unorders nothing), so all are observed, none left to predict."""
    _, run_dir = run(tmp_path, kv_lock=kv_lock, requests=18, seed=0, fault="no-wait-swap-in")
    report = _predict(run_dir, capsys, 1)
    assert len(report.races) > 0 and report.predicted.empty
    assert what_if_drop_lock(load(run_dir)).newly_unordered.empty
