"""The detector against the real engine: every seeded protocol bug is a race in every run, and
correct runs of both modes have none — 5 seeds each, whether or not the racing accesses
happened to overlap in time (or corrupt data) in that run."""

from __future__ import annotations

import pytest

from fdprof.analysis.hazards import find_hazards
from fdprof.analysis.whatif import what_if_drop_lock
from fdprof.engine.config import V1_FAULTS
from fdprof.semconv import Fault

SEEDS = range(5)
#: the old path's and the asynchronous engine's faults (V1's zoo: tests/engine/test_zoo.py)
CHECKED_FAULTS = [f for f in Fault if f not in V1_FAULTS]
REQUESTS = 24  # enough for swaps both ways in every seed; fewer engine-seconds in CI

pytestmark = pytest.mark.slow


def _run(engine_runs, **kw):
    """The session's run (other modules read the same ones: ``tests/runs.py``)."""
    run = engine_runs.get(requests=REQUESTS, **kw)
    return run.results, run.load()


def _findings(hazards) -> set[tuple[str, ...]]:
    """What raced with what (span-name pairs), what lived past its free (kind, user, freer) and
    the ownership findings (kind, side a, side b)."""
    races = {frozenset(p) for p in zip(hazards.races.name_a, hazards.races.name_b, strict=True)}
    life, own = hazards.lifetime, hazards.ownership
    return (
        {tuple(sorted(r)) for r in races}
        | set(zip(life.kind, life.name_a, life.name_b, strict=True))
        | set(zip(own.kind, own.name_a, own.name_b, strict=True))
    )


#: what each seeded fault must show in every seed: a block freed before its swap-out read it is
#: used after its free whether or not anyone reused it in time (the allocator's events are
#: recorded); the others leave a swap and a step unordered
EXPECTED = {
    "free-before-swap-out": ("use_after_free", "swap", "block_free"),
    "no-wait-swap-in": ("execute_model", "swap"),
    "ack-before-copy": ("execute_model", "swap"),
    # the asynchronous engine's: its device work (or the staging copy) races
    "store-before-compute-done": ("forward", "swap_copy"),
    "foreign-stream-write": ("forward", "swap_copy"),
    "reuse-staging-buffer": ("swap_copy", "swap_stage"),
    # the ownership faults: no race needed, the holders and the allocator disagree
    "lost-ref-on-hit": ("freed_while_held", "block_hold", "block_free"),
    "free-under-swap-in": ("freed_under_transfer", "swap", "block_free"),
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fault", CHECKED_FAULTS)
def test_seeded_fault_is_flagged_in_every_run(engine_runs, fault, seed):
    _, trace = _run(engine_runs, kv_lock="none", fault=fault, seed=seed)
    hazards = find_hazards(trace)
    assert not hazards.clean, f"{fault} seed {seed}: nothing flagged"
    findings = _findings(hazards)
    assert EXPECTED[fault] in findings, f"{fault} seed {seed}: {findings}"


#: runs of 5 whose KV every fault must corrupt: every fault's window is one the
#: other side walks into (free-before-swap-out lets the waiting scheduler take the freed blocks
#: at once; free-under-swap-in delays only the swap-in, so evictions overwrite its freed host
#: blocks before it reads them)
CORRUPTS_AT_LEAST = 3


@pytest.mark.parametrize("fault", CHECKED_FAULTS)
def test_fault_corrupts_data(engine_runs, fault):
    """The same runs as above (the session's: tests/runs.py)."""
    runs = [engine_runs.get(requests=REQUESTS, kv_lock="none", fault=fault, seed=s) for s in SEEDS]
    corrupted = sum(run.results["integrity"]["mismatches"] > 0 for run in runs)
    assert corrupted >= CORRUPTS_AT_LEAST, f"{fault}: corrupted KV in {corrupted} of 5 runs"


def test_races_are_found_without_overlap(engine_runs):
    """Latent races: the detector orders by the protocol, not by what overlapped this time."""
    latent = sum(
        find_hazards(_run(engine_runs, kv_lock="none", fault=fault, seed=seed)[1]).counts["latent"]
        for fault in CHECKED_FAULTS
        for seed in SEEDS
    )
    assert latent > 0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kv_lock", ["ipc", "ipc-per-thread", "none"])
def test_correct_runs_have_no_race(engine_runs, kv_lock, seed):
    results, trace = _run(engine_runs, kv_lock=kv_lock, seed=seed)
    assert results["swaps"]["to_cpu"] > 0 and results["swaps"]["to_gpu"] > 0
    assert results["integrity"]["mismatches"] == 0
    _assert_clean(trace, kv_lock)


def _assert_clean(trace, kv_lock: str) -> None:
    """Nothing flagged; the baseline's lock, one descriptor shared by two threads as in
    FastDeploy, may be seen not to exclude (a broken-lock alarm), the corrected lock never is;
    and the baseline's lock orders nothing the protocol does not (the what-if)."""
    counts = find_hazards(trace).counts
    broken = counts.pop("broken_locks")
    assert broken == 0 or kv_lock == "ipc"
    zero = ("races", "latent", "overlaps", "clock_alarms", "gaps", "lifetime", "ownership")
    assert counts == dict.fromkeys(zero, 0)
    if kv_lock == "ipc":
        assert what_if_drop_lock(trace).safe


ASYNC_MODES = {
    "ipc": {"kv_lock": "ipc"},
    "ipc sync-before-unlock": {"kv_lock": "ipc", "sync_before_unlock": True},
    "none": {"kv_lock": "none"},
    "none store-on-fill": {"kv_lock": "none", "store_on_fill": True},
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", list(ASYNC_MODES))
def test_correct_async_runs_have_no_race(engine_runs, mode, seed):
    """The asynchronous engine, with its events: no race in either lock mode (the baseline's
    lock covers only the launch; the events order what conflicts)."""
    results, trace = _run(engine_runs, device_async=True, seed=seed, **ASYNC_MODES[mode])
    assert results["swaps"]["to_cpu"] > 0 and results["swaps"]["to_gpu"] > 0
    assert results["integrity"]["mismatches"] == 0 and results["integrity"]["nan"] == 0
    _assert_clean(trace, ASYNC_MODES[mode]["kv_lock"])
