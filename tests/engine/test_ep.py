"""DP + EP: two DP groups whose workers share a mixture of experts through all-to-all, in
lockstep (an idle worker runs empty steps); collectives recorded as exact sync pairs; every step
checked for NaN/Inf; tokens equal to a reference run without swaps."""

from collections import Counter

import pytest

from fdprof import semconv as S
from fdprof.engine.config import EngineConfig
from fdprof.formats import records as R
from tests.engine.conftest import manifest, read_records

pytestmark = pytest.mark.slow


@pytest.fixture
def ep_run(engine_runs):
    run = engine_runs.get(kv_lock="ipc", dp=2, ep=True, requests=16, seed=3, reference=True)
    return run.results, run.run_dir


def test_tokens_equal_the_reference_and_no_value_is_broken(ep_run):
    results, run_dir = ep_run
    assert results["requests"] == 16 and results["generated_tokens"] == 16 * 16
    assert results["integrity"] == {**results["integrity"], "mismatches": 0, "nan": 0}
    ref = results["reference"]
    assert ref["equal"] and ref["requests"] == 16 and ref["mismatched"] == []
    assert (run_dir / "reference" / "run.json").exists()
    assert manifest(run_dir)["results"]["reference"] == ref


def _worker_records(run_dir):
    return {
        p["dp_rank"]: read_records(run_dir / p["record"])
        for p in manifest(run_dir)["processes"]
        if p["role"] == "worker"
    }


def test_collectives_are_exact_sync_pairs_between_the_workers(ep_run):
    _, run_dir = ep_run
    recs = _worker_records(run_dir)
    syncs = {r: [f for k, f in rs if k == R.Kind.SYNC] for r, rs in recs.items()}
    steps = {r: sum(k == R.Kind.SPAN_BEGIN and f[2] == S.EXECUTE_MODEL for k, f in rs)
             for r, rs in recs.items()}  # fmt: skip
    assert steps[0] == steps[1] > 0  # lockstep: every iteration is a step of both
    per_step = 1 + 3 * EngineConfig().layers  # who-is-done all-gather, 3 exchanges a layer
    for me, other in ((0, 1), (1, 0)):
        mine = S.collective_obj("ep", me)
        released = [s for o, op, s in syncs[me] if o == mine and op == "release"]
        acquired = [s for o, op, s in syncs[other] if o == mine and op == "acquire"]
        # each collective entered by one worker is left by the other, seq for seq
        assert released == acquired == list(range(1, steps[me] * per_step + 2))


def test_an_idle_worker_keeps_joining_with_empty_batches(ep_run):
    results, run_dir = ep_run
    served = 0
    for rank, rs in _worker_records(run_dir).items():
        names = Counter(f[2] for k, f in rs if k == R.Kind.SPAN_BEGIN)
        sizes = Counter(f[2] for k, f in rs if k == R.Kind.ATTR_INT and f[1] == S.BATCH_SIZE)
        # the lock around every execute_model, empty ones included (TP rank 0 of each group)
        assert names["execute_model"] == names["lock_hold"] == sum(sizes.values())
        assert sizes[0] > 0, f"worker {rank} never ran an empty step"
        served += sum(n for size, n in sizes.items() if size > 0)
    assert served == results["steps"]
