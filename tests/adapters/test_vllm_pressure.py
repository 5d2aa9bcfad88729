"""fdprof on real vLLM under memory pressure: unmodified vLLM is clean and gives the tokens of
a run without offloading or prefix sharing, each pressure phase really made vLLM use its own
fences; bugs seeded into vLLM's own code (block pool, offloading scheduler and worker) are
each flagged, naming blocks and roles."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from fdprof import semconv as S
from fdprof.ab.runs import request_latencies
from fdprof.trace import load
from tests.adapters.conftest import SEEDED_BUGS
from tests.cli import fdprof

pytestmark = pytest.mark.slow

PHASES = ("prefill-finish", "reuse", "shared", "revive", "preempt", "reload")


def spans_named(trace, name: str) -> pd.DataFrame:
    spans = trace.spans
    return spans[(spans["name"] == name).to_numpy(bool)].sort_values("start")


def attr(trace, key: str, spans: pd.DataFrame) -> list:
    values = trace.attr(key)
    return [values.get(int(s)) for s in spans["span_id"]]


def pool_events(trace) -> pd.DataFrame:
    """Every allocator event, one row per block: time, mode, block, request, step."""
    acc = trace.accesses
    acc = acc[acc["mode"].isin(S.ALLOCATOR_MODES).to_numpy(bool)]
    spans = trace.spans.set_index("span_id")
    requests = trace.attr(S.REQUEST_ID)
    return pd.DataFrame({
        "time": spans.loc[acc["span_id"], "start"].to_numpy(np.int64),
        "span": acc["span_id"].to_numpy(np.int64), "mode": acc["mode"].astype(str).to_numpy(),
        "block": acc["block"].to_numpy(np.int64),
        "request": [str(requests.get(int(s), "")) for s in acc["span_id"]],
        "step": spans.loc[acc["span_id"], "step"].to_numpy(np.int64),
    }).sort_values(["time", "span"], kind="stable")  # fmt: skip


def pressure_evidence(trace) -> dict[str, int]:
    """How often vLLM did what each phase is there for (module doc of the workload)."""
    events = pool_events(trace)
    syncs = trace.syncs
    waits = spans_named(trace, S.SWAP_WAIT)
    done = syncs[(syncs["obj"] == S.SIGNAL_SWAP_DONE) & (syncs["op"] == S.SyncOp.ACQUIRE)]
    issued = spans_named(trace, S.ISSUE_SWAP_TASK)
    direction = attr(trace, S.SWAP_DIRECTION, issued)
    job_request = attr(trace, S.REQUEST_ID, issued)
    released_at = events[events["mode"] == S.MODE_RELEASE].groupby("request")["time"].min()
    stores_after_release = sum(
        d == S.TO_CPU and r in released_at.index and released_at[r] < t
        for d, r, t in zip(direction, job_request, issued["start"], strict=True)
    )
    allocs = events[events["mode"] == S.MODE_ALLOC]
    owner = {(s, b): r for s, b, r in zip(allocs["step"], allocs["block"], allocs["request"],
                                          strict=True)}  # fmt: skip
    holds = events[events["mode"] == S.MODE_HOLD]
    held = zip(holds["step"], holds["block"], holds["request"], strict=True)
    same_step_hits = sum(owner.get((s, b), r) != r for s, b, r in held)
    revived, last = 0, {}
    for mode, block in zip(events["mode"], events["block"], strict=True):
        if mode == S.MODE_HOLD and last.get(block) == S.MODE_UNREF:
            revived += 1
        if mode in (S.MODE_ALLOC, S.MODE_UNREF, S.MODE_HOLD):
            last[block] = mode
    preempted = sum(
        n > 1
        for n in Counter(
            events.loc[events["mode"] == S.MODE_RELEASE].drop_duplicates("span")["request"]
        ).values()
    )
    steps = spans_named(trace, S.EXECUTE_MODEL)
    tokens = attr(trace, S.BATCH_TOKENS, steps)
    loads_beside = 0
    for t, d in zip(issued["start"], direction, strict=True):
        before = [n for s, n in zip(steps["end"], tokens, strict=True) if s <= t]
        loads_beside += d == S.TO_GPU and bool(before) and before[-1] > 0
    return {"fenced": int(done["span_id"].isin(waits["span_id"]).sum()),
            "stores_after_release": int(stores_after_release),
            "same_step_hits": int(same_step_hits), "revived": revived,
            "preempted": preempted,
            "loads_beside_running": int(loads_beside)}  # fmt: skip


def max_logprob_gap(a: list[dict], b: list[dict]) -> float:
    return max(float(np.max(np.abs(np.subtract(x["logprobs"], y["logprobs"]))))
               for x, y in zip(a, b, strict=True))  # fmt: skip


def test_unmodified_vllm_under_pressure_is_clean_and_gives_the_reference_tokens(pressure_runs):
    ref, run = pressure_runs["reference"].check(), pressure_runs["correct"].check()
    assert [o["phase"] for o in run.outputs] == [o["phase"] for o in ref.outputs]
    assert {o["phase"] for o in run.outputs} == set(PHASES)
    for phase in PHASES:
        mine = [o["tokens"] for o in run.outputs if o["phase"] == phase]
        assert mine == [o["tokens"] for o in ref.outputs if o["phase"] == phase], phase
    assert max_logprob_gap(ref.outputs, run.outputs) < 1e-4
    hazards = fdprof("hazards", str(run.run_dir), "--json")
    assert hazards.returncode == 0, hazards.stdout[-3000:] + hazards.stderr
    report = json.loads(hazards.stdout)
    assert set(report["counts"].values()) == {0}, report["counts"]  # no gap either
    assert report["checked"]["accesses"] > 1000
    evidence = pressure_evidence(load(run.run_dir))
    # every phase did what it is there for
    assert evidence["fenced"] > 0, evidence  # reallocated blocks' deferred stores waited for
    assert evidence["stores_after_release"] > 0, evidence  # finished in prefill, stored later
    assert evidence["same_step_hits"] > 0 and evidence["revived"] > 0, evidence
    assert evidence["preempted"] > 0, evidence
    assert evidence["loads_beside_running"] > 0, evidence
    reloaded = [o for o in run.outputs if o["phase"] == "reload" and o["cached_tokens"]]
    assert len(reloaded) >= 3


def test_request_spans_give_ttft_and_tpot(pressure_runs):
    run = pressure_runs["correct"].check()
    trace = load(run.run_dir)
    latencies = request_latencies(trace)
    assert len(latencies) == len(run.outputs)
    assert latencies["ttft"].notna().all() and (latencies["ttft"] > 0).all()
    many = sum(len(o["tokens"]) > 1 for o in run.outputs)
    assert latencies["tpot"].notna().sum() == many
    requests = spans_named(trace, S.REQUEST)
    counted = sorted(attr(trace, S.OUTPUT_TOKENS, requests))
    assert counted == sorted(len(o["tokens"]) for o in run.outputs)


#: what each seeded bug must show: races of these span kinds, or these ownership kinds
EXPECTED = {
    "touch-no-ref": {"ownership": {"refcount_negative"}},
    "free-twice": {"ownership": {"freed_while_held"}},
    "no-flush": {"races": {(S.EXECUTE_MODEL, S.SWAP)}},
    "no-wait": {"races": {(S.EXECUTE_MODEL, S.SWAP)}},
    "no-finish-fence": {"races": {(S.EXECUTE_MODEL, S.SWAP)}},
    "early-load-done": {"races": {(S.EXECUTE_MODEL, S.SWAP)}},
}
#: bugs whose runs corrupt the tokens of the workload (the others' copies happen to finish
#: before the next owner writes, or vLLM's own assertion stops the run first)
DAMAGES = {"no-finish-fence", "early-load-done"}


@pytest.mark.parametrize("bug", list(SEEDED_BUGS))
def test_a_bug_seeded_into_vllm_is_flagged_naming_blocks_and_roles(pressure_runs, bug):
    run = pressure_runs[bug]
    assert run.run_dir.joinpath("run.json").exists(), run.log.read_text()[-3000:]
    hazards = fdprof("hazards", str(run.run_dir), "--json")
    assert hazards.returncode == 1, hazards.stdout[-3000:] + hazards.stderr
    report = json.loads(hazards.stdout)
    want = EXPECTED[bug]
    if "races" in want:
        kinds = {(k["name_a"], k["name_b"]) for k in report["race_kinds"]}
        assert want["races"] <= kinds, report["race_kinds"]
        race = report["races"][0]
        assert {race["role_a"], race["role_b"]} == {S.ROLE_WORKER, S.ROLE_TRANSFER}
        assert race["blocks"] and all(b.startswith("gpu:") for b in race["blocks"])
    if "ownership" in want:
        kinds = {k["kind"] for k in report["ownership_kinds"]}
        assert want["ownership"] <= kinds, report["ownership_kinds"]
        row = next(r for r in report["ownership"] if r["kind"] in want["ownership"])
        assert row["blocks"] and row["request_a"] and row["role_a"] == S.ROLE_ENGINE
        assert row["step_a"] > 0
    if bug in DAMAGES:
        assert run.returncode == 0, run.log.read_text()[-3000:]
        ref = pressure_runs["reference"].check().outputs
        assert [o["tokens"] for o in run.outputs] != [o["tokens"] for o in ref]
