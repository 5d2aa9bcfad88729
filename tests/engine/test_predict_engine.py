"""``hazards --predict`` on real engine runs: the correct protocol has no race in any lock
mode, observed or predicted (no other order of the lock's critical sections exposes one); the
seeded bug's races are observed ones. 18 requests on seed 0 swap blocks both ways (and the
baseline's shared-descriptor lock happens to be seen to exclude there); the seeded bug's
lockless run is the one ``tests/test_validation.py`` reads too (``tests/runs.py``)."""

import json

import pytest

from fdprof.analysis.predict import predict_races
from fdprof.analysis.whatif import what_if_drop_lock
from fdprof.semconv import LockMode
from fdprof.trace import load
from tests.cli import fdprof


def _predict(run_dir, code: int):
    """The predictor's report of the run, and the same counts from the command line."""
    report = predict_races(load(run_dir))
    result = fdprof("hazards", run_dir, "--predict", "--json")
    assert result.returncode == code, result.stderr
    assert json.loads(result.stdout)["counts"] == report.counts
    return report


@pytest.mark.slow
@pytest.mark.parametrize("kv_lock", list(LockMode))
def test_the_correct_protocol_predicts_no_race(engine_runs, kv_lock):
    shared = engine_runs.get(kv_lock=kv_lock, requests=18, seed=0)
    results, run_dir = shared.results, shared.run_dir
    assert results["swaps"]["to_cpu"] > 0 and results["swaps"]["to_gpu"] > 0
    report = _predict(run_dir, 0)
    assert report.accesses > 0 and report.broken_locks.empty
    assert report.races.empty and report.predicted.empty


@pytest.mark.slow
@pytest.mark.parametrize("kv_lock", ["ipc", "none"])
def test_the_seeded_bug_is_observed_not_predicted(engine_runs, kv_lock):
    """Predicted are only pairs happens-before orders; the lock orders none of the unwaited
    swap-in's pairs (dropping it unorders nothing), so all are observed, none left to predict."""
    shared = engine_runs.get(kv_lock=kv_lock, requests=24, seed=0, fault="no-wait-swap-in")
    run_dir = shared.run_dir
    report = _predict(run_dir, 1)
    assert len(report.races) > 0 and report.predicted.empty
    assert what_if_drop_lock(load(run_dir)).newly_unordered.empty
