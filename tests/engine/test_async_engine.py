"""The asynchronous engine (``--device-async``) end to end, one seed each: the forward pass and
the copies run on device lanes with their KV accesses there, ordered by launch and event
edges so the detector finds nothing to report; the settings it refuses. (Five seeds of each
mode and fault: tests/test_validation.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fdprof import semconv as S
from fdprof.analysis.device_time import device_overlap, on_device
from fdprof.analysis.hazards import find_hazards
from fdprof.engine.config import ASYNC_FAULTS, EngineConfig, fault_modes, fault_settings
from fdprof.errors import FdprofError
from fdprof.trace import load
from tests.cli import fdprof
from tests.engine.conftest import run


@pytest.fixture(scope="module")
def lockless(engine_runs):
    """A lockless asynchronous run with write-through stores, the session's (test_validation
    reads it too): (results, trace)."""
    shared = engine_runs.get(device_async=True, store_on_fill=True, requests=24, seed=0)
    return shared.results, shared.load()


def _accesses(trace, name: str) -> int:
    """KV accesses of spans named ``name``."""
    ids = trace.spans.loc[trace.spans["name"] == name, "span_id"]
    return int(trace.accesses["span_id"].isin(ids).sum())


def test_device_work_is_on_device_lanes_with_its_kv_accesses(lockless):
    results, trace = lockless
    assert results["integrity"]["mismatches"] == 0 and results["integrity"]["nan"] == 0
    spans = trace.spans
    dev = spans[on_device(spans)]
    assert {S.FORWARD, S.SWAP_COPY} <= set(dev["name"])
    assert not set(dev["name"]) & {S.EXECUTE_MODEL, S.SWAP}  # the host calls stay on the host
    # the accesses are the device work's, not the host call's that queued it
    assert _accesses(trace, S.FORWARD) > 0 and _accesses(trace, S.SWAP_COPY) > 0
    assert _accesses(trace, S.EXECUTE_MODEL) == 0 and _accesses(trace, S.SWAP) == 0
    # each forward is the child of the execute_model call that launched it
    by_id = spans.set_index("span_id")
    forwards = spans[spans["name"] == S.FORWARD]
    assert set(by_id.loc[forwards["parent_id"], "name"]) == {S.EXECUTE_MODEL}


def test_launches_and_events_are_the_edges(lockless):
    _, trace = lockless
    objs = set(trace.syncs["obj"].astype(str))
    assert any(o.startswith(S.DEVICE_LAUNCH_PREFIX) for o in objs)
    compute = S.DEVICE_EVENT_PREFIX + S.engine_event(S.COMPUTE_DONE_EVENT, 0, 0)
    swap_in = S.DEVICE_EVENT_PREFIX + S.engine_event(S.SWAP_IN_EVENT, 0, 0)
    assert {compute, swap_in} <= objs
    # stores waited on compute-done on the transfer's copy stream: an acquire on a device lane
    waits = trace.syncs[(trace.syncs["obj"] == compute) & (trace.syncs["op"] == S.SyncOp.ACQUIRE)]
    assert waits["lane"].astype(str).str.contains(S.DEVICE_LANE_PATTERN).any()


def test_a_correct_async_run_has_no_race(lockless):
    results, trace = lockless
    assert results["swaps"]["to_cpu"] > 0 and results["swaps"]["to_gpu"] > 0
    counts = find_hazards(trace).counts
    assert counts["races"] == 0 and counts["latent"] == 0 and counts["gaps"] == 0


def test_the_baseline_lock_covers_the_launch_and_not_the_kernel(tmp_path):
    """The corrected lock on the asynchronous worker: unless the worker synchronises before it
    unlocks, its holds end before the forward pass they launched has finished on the device (so
    copies may overlap it: how much is the scheduler's luck, not asserted); with the
    synchronisation no hold ends before its forward pass and no copy overlaps one. Races
    neither way (the events order what conflicts)."""
    open_at_unlock, overlap = {}, {}
    for sync in (False, True):
        results, run_dir = run(tmp_path / str(sync), kv_lock="ipc-per-thread",
                               workload="swap-heavy", device_async=True,
                               sync_before_unlock=sync, requests=24, seed=0)  # fmt: skip
        trace = load(run_dir)
        assert results["integrity"]["mismatches"] == 0
        assert find_hazards(trace).counts["races"] == 0
        spans = trace.spans[trace.spans["end"] != -1]
        holds = spans[(spans["name"] == S.LOCK_HOLD) & (spans["role"] == S.ROLE_WORKER)]
        holds = holds.sort_values("start")
        forward = spans[spans["name"] == S.FORWARD]
        ends = forward.sort_values("start")["end"].to_numpy()
        # per hold, the first forward pass still to finish when the hold began: the one it
        # launched (or one before it, still running); did it outlive the hold?
        first = np.searchsorted(np.maximum.accumulate(ends), holds["start"].to_numpy(), "right")
        first = first[first < len(ends)]
        open_at_unlock[sync] = int((ends[first] > holds["end"].to_numpy()[: len(first)]).sum())
        overlap[sync] = device_overlap(trace.spans).ratio
    assert open_at_unlock[False] > 0, "every hold outlived its forward pass without the sync"
    assert open_at_unlock[True] == 0 and overlap[True] == 0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"store_on_fill": True}, "need --device-async"),
        ({"device_async": True, "store_on_fill": True, "kv_lock": "ipc"}, "--kv-lock none"),
        ({"device_async": True, "tp": 2}, "--tp 1"),
        ({"fault": "reuse-staging-buffer", "kv_lock": "ipc"}, "--swap-in async needs"),
    ],
)
def test_settings_the_async_engine_refuses(settings, message):
    with pytest.raises(FdprofError, match=message):
        EngineConfig(**settings)


@pytest.mark.parametrize("fault", ASYNC_FAULTS)
def test_each_async_fault_turns_on_the_settings_it_needs(fault):
    cfg = EngineConfig(fault=fault)
    assert cfg.device_async and fault_modes(cfg) == fault_settings(fault)


def test_the_cli_says_which_modes_a_fault_turned_on(tmp_path):
    """``fdprof run --fault reuse-staging-buffer`` alone: the fault turns on
    ``--device-async --swap-in async``; run.json's config and the JSON output say so."""
    result = fdprof("run", "--fault", "reuse-staging-buffer", "--json", "--requests", 4,
                    "--workload", "no-swap", "--out", tmp_path / "r")  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["fault_modes"] == {"device_async": True, "swap_in": "async"}
    config = json.loads((tmp_path / "r" / "run.json").read_text())["config"]
    assert config["device_async"] and config["swap_in"] == "async"
