"""Tensor parallelism: each TP rank of a DP group has its shard of the device pool and its own
transfer process; the worker holds the baseline lock on TP rank 0 only, as FastDeploy's does."""

from collections import Counter

import pytest

from fdprof.analysis.hazards import find_hazards
from fdprof.engine.messages import TP_SEQ_STRIDE
from fdprof.formats import records as R
from fdprof.trace import load
from tests.engine.conftest import manifest, read_records

pytestmark = pytest.mark.slow


@pytest.fixture
def tp_run(engine_runs):
    run = engine_runs.get(kv_lock="ipc", tp=2, requests=20, seed=1)
    return run.results, run.run_dir


def test_each_tp_rank_has_its_transfer_process_and_shard(tp_run):
    results, run_dir = tp_run
    assert results["tp"] == 2 and results["requests"] == 20
    assert results["integrity"]["mismatches"] == 0 and results["integrity"]["blocks_checked"] > 0
    assert results["swaps"]["to_cpu"] > 0 and results["swaps"]["to_gpu"] > 0
    procs = manifest(run_dir)["processes"]
    layout = sorted((p["role"], p["tp_rank"], p["kv_cache"]) for p in procs)
    assert layout == [("engine", -1, None), ("transfer", 0, "owner"), ("transfer", 1, "owner"),
                      ("worker", 0, "attached"), ("worker", 1, "attached")]  # fmt: skip
    recs = {(p["role"], p["tp_rank"]): read_records(run_dir / p["record"]) for p in procs}
    spans = {
        k: Counter(f[2] for kind, f in rs if kind == R.Kind.SPAN_BEGIN) for k, rs in recs.items()
    }
    # every swap runs on both ranks' shards; each rank's copy has its own sequence numbers
    assert spans["transfer", 0]["swap"] == spans["transfer", 1]["swap"] > 0
    seqs = {k: {f[2] for kind, f in rs if kind == R.Kind.SYNC and f[0] == "queue:swap"}
            for k, rs in recs.items() if k[0] == "transfer"}  # fmt: skip
    assert all(s < TP_SEQ_STRIDE for s in seqs["transfer", 0])
    assert all(s >= TP_SEQ_STRIDE for s in seqs["transfer", 1])
    # the lock around execute_model on TP rank 0 only
    assert spans["worker", 0]["lock_hold"] == spans["worker", 0]["execute_model"] > 0
    assert spans["worker", 1]["lock_hold"] == 0
    assert spans["worker", 1]["execute_model"] == spans["worker", 0]["execute_model"]


def test_tp_run_has_no_race(tp_run):
    """Equal block ids of TP ranks 0 and 1 are different memory: the detector scopes pools by
    (dp, tp) from the record headers, and finds the run race-free."""
    _, run_dir = tp_run
    trace = load(run_dir)
    assert sorted(trace.processes["tp_rank"].tolist()) == [-1, 0, 0, 1, 1]
    assert find_hazards(trace).counts["races"] == 0
