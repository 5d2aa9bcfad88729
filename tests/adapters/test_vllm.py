"""fdprof on real vLLM (CPU): what the plugin records, that the analyses read it like one of
our runs, and that the seeded offloading fault corrupts tokens and is flagged."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fdprof import semconv as S
from fdprof.trace import load
from tests.cli import fdprof

pytestmark = pytest.mark.slow

#: rounds of the workload (bench/vllm_workload.py): 2 is the one that reloads offloaded KV
RELOAD_ROUND = 2


def by_name(trace, name: str) -> pd.DataFrame:
    spans = trace.spans
    return spans[spans["name"] == name]


def attr_of(trace, key: str, span_ids) -> list:
    values = trace.attr(key)
    return [values.get(int(s)) for s in span_ids]


def max_logprob_gap(a: list[dict], b: list[dict], round_: int | None = None) -> float:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if round_ is None or x["round"] == round_]
    return max(float(np.max(np.abs(np.subtract(x["logprobs"], y["logprobs"])))) for x, y in pairs)


def test_offloading_reloads_prefixes_with_the_reference_tokens(vllm_runs):
    ref, off = vllm_runs["reference"].check().outputs, vllm_runs["offload"].check().outputs
    reloaded = [o for o in off if o["round"] == RELOAD_ROUND]
    assert all(o["cached_tokens"] >= 32 for o in reloaded), "round 2 should load prefixes back"
    assert [o["tokens"] for o in off] == [r["tokens"] for r in ref]
    assert max_logprob_gap(ref, off) < 1e-4


def test_offload_trace_has_steps_accesses_transfers_and_edges(vllm_runs):
    trace = load(vllm_runs["offload"].check().run_dir)
    assert trace.meta["status"] == "ok"
    assert trace.meta["config"]["enable_prefix_caching"] is True
    assert trace.meta["config"]["kv_connector"] == "ThreadedOffloadingConnector"
    assert len(by_name(trace, S.STEP)) >= 10
    # every scheduled request's blocks are on the schedule span's children
    scheduled = by_name(trace, S.SCHEDULED_REQUEST)
    assert len(scheduled) and all(attr_of(trace, S.KV_BLOCKS, scheduled["span_id"]))
    execute = by_name(trace, S.EXECUTE_MODEL)
    writes = attr_of(trace, S.KV_GPU_WRITE, execute["span_id"])
    reads = attr_of(trace, S.KV_GPU_READ, execute["span_id"])
    assert sum(len(w) > 0 for w in writes) >= 10 and sum(len(r) > 0 for r in reads) >= 10
    # transfers both ways, with block ids of both pools
    swaps = by_name(trace, S.SWAP)
    directions = set(attr_of(trace, S.SWAP_DIRECTION, swaps["span_id"]))
    assert directions == {S.TO_CPU, S.TO_GPU}
    acc = trace.accesses[trace.accesses["span_id"].isin(swaps["span_id"])]
    assert set(zip(acc["pool"], acc["mode"], strict=True)) == {
        (S.POOL_GPU, S.MODE_READ), (S.POOL_CPU, S.MODE_WRITE),
        (S.POOL_CPU, S.MODE_READ), (S.POOL_GPU, S.MODE_WRITE),
    }  # fmt: skip
    for name in (S.BLOCK_ALLOC, S.BLOCK_FREE, S.BLOCK_EVICT, S.ISSUE_SWAP_TASK, S.REQUEST):
        assert len(by_name(trace, name)), name
    # sync edges with seqs: step id out and back, job id submit -> copy -> completion, free -> reuse
    syncs = trace.syncs
    for obj in (S.QUEUE_BATCH, S.QUEUE_RESULT, S.QUEUE_SWAP, S.SIGNAL_SWAP_DONE, S.BLOCK_FREE_OBJ):
        mine = syncs[syncs["obj"] == obj]
        released = set(mine.loc[mine["op"] == S.SyncOp.RELEASE, "seq"])
        acquired = set(mine.loc[mine["op"] == S.SyncOp.ACQUIRE, "seq"])
        assert acquired and acquired <= released, obj
    jobs = set(attr_of(trace, S.SWAP_TASK_ID, swaps["span_id"]))
    done = syncs[(syncs["obj"] == S.SIGNAL_SWAP_DONE) & (syncs["op"] == S.SyncOp.ACQUIRE)]
    assert jobs == set(done["seq"]), "every copy's completion is observed by the worker"


def test_hazards_diff_and_perfetto_read_a_vllm_run(vllm_runs, tmp_path):
    ref, off = vllm_runs["reference"].check(), vllm_runs["offload"].check()
    hazards = fdprof("hazards", str(off.run_dir), "--json")
    assert hazards.returncode == 0, hazards.stdout + hazards.stderr
    report = json.loads(hazards.stdout)
    assert report["counts"]["races"] == 0 and report["checked"]["accesses"] > 100
    diff = fdprof("diff", str(ref.run_dir), str(off.run_dir), "--json")
    assert diff.returncode == 0, diff.stderr
    doc = json.loads(diff.stdout)
    assert "throughput" in doc
    # TTFT and TPOT from the request spans' first-token time and output tokens
    assert {"ttft", "tpot", "e2e"} <= set(doc["serving"])
    out = tmp_path / "offload.json"
    convert = fdprof("convert", str(off.run_dir), str(out), "--to", "perfetto")
    assert convert.returncode == 0, convert.stderr
    back = load(out)
    assert len(back.spans) == len(load(off.run_dir).spans)
    assert len(back.accesses) == len(load(off.run_dir).accesses)


def test_seeded_store_before_compute_corrupts_tokens_and_is_flagged(vllm_runs):
    ref, fault = vllm_runs["reference"].check(), vllm_runs["fault"].check()
    wrong = [
        f for f, r in zip(fault.outputs, ref.outputs, strict=True)
        if f["round"] == RELOAD_ROUND and f["tokens"] != r["tokens"]
    ]  # fmt: skip
    assert wrong or max_logprob_gap(ref.outputs, fault.outputs, RELOAD_ROUND) > 0.1
    # rounds before the reload are untouched: the fault is in what was stored
    assert max_logprob_gap(ref.outputs, fault.outputs, 0) < 1e-4
    hazards = fdprof("hazards", str(fault.run_dir), "--json")
    assert hazards.returncode == 1, hazards.stdout + hazards.stderr
    kinds = json.loads(hazards.stdout)["race_kinds"]
    assert {(k["name_a"], k["name_b"]) for k in kinds} == {(S.EXECUTE_MODEL, S.SWAP)}


def test_every_vllm_process_records(vllm_runs):
    run, ref = vllm_runs["multiprocess"].check(), vllm_runs["reference"].check()
    assert [o["tokens"] for o in run.outputs] == [o["tokens"] for o in ref.outputs]
    manifest = json.loads((run.run_dir / "run.json").read_text())
    roles = sorted(p["role"] for p in manifest["processes"])
    assert roles == sorted([S.ROLE_FRONTEND, S.ROLE_ENGINE, S.ROLE_WORKER])
    trace = load(run.run_dir)
    role_of = dict(zip(trace.processes["pid"], trace.processes["role"], strict=True))
    names: dict[str, set[str]] = {}
    for pid, name in zip(trace.spans["pid"], trace.spans["name"], strict=True):
        names.setdefault(role_of[pid], set()).add(name)
    assert S.REQUEST in names[S.ROLE_FRONTEND]
    assert {S.STEP, S.SCHEDULE, S.BLOCK_ALLOC} <= names[S.ROLE_ENGINE]
    assert {S.EXECUTE_MODEL, S.SWAP, S.ISSUE_SWAP_TASK} <= names[S.ROLE_WORKER]
    # the step ids cross the process boundary: each worker step acquires the engine's release
    syncs = trace.syncs
    batch = syncs[syncs["obj"] == S.QUEUE_BATCH]
    assert set(batch.loc[batch["op"] == S.SyncOp.ACQUIRE, "pid"].map(role_of)) == {S.ROLE_WORKER}
    assert set(batch.loc[batch["op"] == S.SyncOp.ACQUIRE, "seq"]) <= set(
        batch.loc[batch["op"] == S.SyncOp.RELEASE, "seq"]
    )
    hazards = fdprof("hazards", str(run.run_dir))
    assert hazards.returncode == 0, hazards.stdout + hazards.stderr
