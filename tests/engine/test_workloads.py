"""Workloads: deterministic from the seed, split across DP ranks, and the no-swap control."""

import pytest

from fdprof.engine.config import EngineConfig
from fdprof.engine.workloads import blocks_for, make_requests, sized_for_workload


def test_requests_are_seeded_and_dealt_round_robin():
    cfg = EngineConfig(requests=10, seed=3)
    assert make_requests(cfg) == make_requests(cfg)
    assert make_requests(cfg) != make_requests(cfg.with_(seed=4))
    two = cfg.with_(dp=2)
    ids = sorted(s.request_id for r in (0, 1) for s in make_requests(two, r))
    assert ids == list(range(10))
    assert [s.prompt for s in make_requests(two, 0)] == [s.prompt for s in make_requests(cfg)[::2]]


def test_no_swap_pool_holds_the_whole_working_set():
    cfg = EngineConfig(workload="no-swap", requests=20)
    sized = sized_for_workload(cfg)
    assert sized.gpu_blocks >= sum(blocks_for(cfg, s) for s in make_requests(cfg))
    assert sized_for_workload(cfg.with_(workload="prefix-swap")).gpu_blocks == cfg.gpu_blocks


@pytest.mark.slow
def test_no_swap_run_never_swaps(engine_runs):
    results = engine_runs.get(workload="no-swap", requests=16, seed=1).results
    assert results["swaps"] == {"to_cpu": 0, "to_gpu": 0, "blocks": 0}
    assert results["generated_tokens"] == 16 * 16
    assert results["integrity"]["mismatches"] == 0
