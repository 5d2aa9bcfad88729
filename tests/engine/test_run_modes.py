"""Both lock modes serve the default workload with swaps both ways and intact KV, and every
happens-before edge the protocol relies on is in the records. The runs are the session's
(``tests/runs.py``): 24 requests on seed 1, as ``tests/test_validation.py`` checks them."""

from collections import Counter

import pytest

from fdprof import semconv as S
from fdprof.engine.ipc import SEQ_STRIDE
from fdprof.formats import records as R
from fdprof.semconv import LockMode
from tests.engine.conftest import read_records, run

REQUESTS = 24


@pytest.mark.slow
@pytest.mark.parametrize("kv_lock", list(LockMode))
def test_mode_swaps_both_ways_without_corruption(engine_runs, kv_lock):
    shared = engine_runs.get(kv_lock=kv_lock, requests=REQUESTS, seed=1)
    results, run_dir = shared.results, shared.run_dir
    assert results["kv_lock"] == kv_lock
    assert results["requests"] == REQUESTS
    assert results["generated_tokens"] == REQUESTS * 16
    assert results["swaps"]["to_cpu"] > 0 and results["swaps"]["to_gpu"] > 0
    assert results["integrity"]["blocks_checked"] > 0
    assert results["integrity"]["mismatches"] == 0 and results["integrity"]["nan"] == 0
    m = shared.manifest
    assert m["status"] == "ok" and m["results"] == results and m["error"] is None
    assert m["config"]["kv_lock"] == kv_lock
    assert sorted(p["role"] for p in m["processes"]) == ["engine", "transfer", "worker"]
    cache = {p["role"]: p["kv_cache"] for p in m["processes"]}
    assert cache == {"engine": None, "transfer": "owner", "worker": "attached"}
    assert all(p["exitcode"] == 0 for p in m["processes"])

    recs = {p["role"]: read_records(run_dir / p["record"]) for p in m["processes"]}
    names = {
        role: Counter(f[2] for k, f in rs if k == R.Kind.SPAN_BEGIN) for role, rs in recs.items()
    }
    assert names["engine"]["request"] == REQUESTS
    assert (
        names["engine"]["issue_swap_task"]
        == results["swaps"]["to_cpu"] + results["swaps"]["to_gpu"]
    )
    assert names["transfer"]["swap"] == names["engine"]["issue_swap_task"]
    assert names["worker"]["execute_model"] == results["steps"]
    if kv_lock == "none":
        assert names["worker"]["lock_hold"] == 0
    else:
        assert names["worker"]["lock_hold"] == results["steps"]
        assert names["engine"]["lock_hold"] == names["engine"]["issue_swap_task"]

    syncs = [f for rs in recs.values() for k, f in rs if k == R.Kind.SYNC]
    released = {(o, s) for o, op, s in syncs if op == "release"}
    for obj, op, seq in syncs:
        if op == "acquire" and seq != R.NO_SEQ:
            assert (obj, seq) in released, f"acquire of {obj} #{seq} without its release"
    ops = Counter((o, op) for o, op, _ in syncs)
    assert ops[("queue:batch", "acquire")] == results["steps"]
    assert ops[("queue:result", "acquire")] == results["steps"]
    assert ops[("signal:swap_done", "acquire")] == names["transfer"]["swap"]
    assert ops[("mutex:kv_cache/dp0", "acquire")] == ops[("mutex:kv_cache/dp0", "release")] > 0
    assert (ops[("lock:kv/dp0", "acquire")] > 0) == (kv_lock != "none")
    assert all(s < SEQ_STRIDE for o, _, s in syncs if o == "queue:batch")

    first = [f for k, f in recs["engine"] if k == R.Kind.ATTR_INT and f[1] == S.FIRST_TOKEN_NS]
    assert len(first) == REQUESTS and all(f[2] > 0 for f in first)
    swap_attrs = {f[1] for k, f in recs["transfer"] if k == R.Kind.ATTR_INTS}
    assert {"kv.gpu_read", "kv.cpu_write", "kv.cpu_read", "kv.gpu_write"} <= swap_attrs


@pytest.mark.slow
def test_dp_runs_independent_groups(engine_runs):
    shared = engine_runs.get(dp=2, requests=16, seed=1)
    results, run_dir = shared.results, shared.run_dir
    assert results["dp"] == 2 and results["requests"] == 16
    assert results["integrity"]["mismatches"] == 0
    procs = shared.manifest["processes"]
    assert sorted((p["role"], p["dp_rank"]) for p in procs) == sorted(
        (role, rank) for role in ("engine", "transfer", "worker") for rank in (0, 1)
    )
    seqs = [
        f[2]
        for p in procs
        if p["role"] == "worker"
        for k, f in read_records(run_dir / p["record"])
        if k == R.Kind.SYNC and f[0] == "queue:batch"
    ]
    assert len(seqs) == len(set(seqs)) == results["steps"]
    assert any(s >= SEQ_STRIDE for s in seqs)


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.parametrize("kv_lock", ["ipc", "none"])
def test_cuda_device_pool(tmp_path, kv_lock):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    results, _ = run(tmp_path, kv_lock=kv_lock, device="cuda")
    assert results["device"] == "cuda"
    assert results["swaps"]["to_cpu"] > 0 and results["swaps"]["to_gpu"] > 0
    assert results["integrity"]["mismatches"] == 0 and results["integrity"]["nan"] == 0
