"""Cache Manager V1 end to end, and its zoo of the field's fixed bugs: each fault, under the
pressure its reproduction needs, is found by ``fdprof hazards`` (exit 1) with races that name
the layer or block and the two roles the bug involves; the same seed without the fault is
clean and token-equal to the reference. Runs are shared by the tests (one session fixture; a
reference per seed and prompt shape). Over three seeds, with the tokens: bench/bench_zoo.py,
BENCHMARKS.md."""

from __future__ import annotations

import pytest

from fdprof import semconv as S
from fdprof.analysis.hazards import find_hazards
from fdprof.engine.config import FAULT_PRESSURE, V1_FAULTS, EngineConfig
from fdprof.regress import Outcome
from fdprof.trace import load
from tests.cli import fdprof

#: on one of make test's workers: its runs are checked by one regression suite, whose reference
#: runs (one per seed) they share
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tests/engine/test_zoo.py")]

REQUESTS = 32


def fault_config(fault: str) -> EngineConfig:
    pressure = {"workload": "prefix-swap", "requests": REQUESTS, **FAULT_PRESSURE.get(fault, {})}
    return EngineConfig(fault=fault, **pressure)


class Runs:
    """The zoo's runs, checked as the regression suite checks them: the session's
    (``tests/runs.py``), so a run another test asks for is made once."""

    def __init__(self, engine_runs) -> None:
        self.engine_runs = engine_runs

    def get(self, name: str, cfg: EngineConfig) -> Outcome:
        return self.engine_runs.checked(name, cfg)

    def fault(self, fault: str) -> Outcome:
        return self.get(f"fault {fault}", fault_config(fault))

    def clean(self, fault: str) -> Outcome:
        """The same seed, modes and pressure without the fault."""
        cfg = fault_config(fault).with_(fault=None)
        return self.get(f"v1 {cfg.workload} chunk {cfg.chunk}", cfg)


@pytest.fixture
def runs(engine_runs) -> Runs:
    return Runs(engine_runs)


def hazards_cli(run_dir: str) -> int:
    return fdprof("hazards", run_dir).returncode


#: the spans (and roles) each fault's races are between: the worker's reads or writes of a
#: layer (or of whole blocks after the last) against the transfer's copy
ROLES = {S.ROLE_WORKER, S.ROLE_TRANSFER}


@pytest.mark.parametrize("fault", V1_FAULTS)
def test_each_v1_fault_is_found_with_its_blocks_layers_and_roles(runs, fault):
    out = runs.fault(fault)
    assert out.results.fault_modes["cache_manager"] == "v1", "the fault turned V1 on itself"
    assert out.races > 0 and out.flagged
    races = find_hazards(load(out.results.trace)).races
    pairs = set(zip(races.role_a, races.role_b, strict=True))
    assert all(set(p) == ROLES for p in pairs), pairs
    assert S.SWAP_COPY in set(races.name_a) | set(races.name_b)
    assert S.FORWARD_LAYER in set(races.name_a) | set(races.name_b)
    assert all(b.startswith("gpu:") for blocks in races.blocks for b in blocks)
    one_layer = {f"[{li},{li + 1})" for li in range(out.case.config.layers)}
    assert one_layer & (set(races.layers_a) | set(races.layers_b)), "a layer range is named"
    if fault == "v1-wrong-layer-event":  # layer 0 waits for nothing, layer l for l-1
        layers = set(races.layers_a) | set(races.layers_b)
        assert {"[1,2)", "[2,3)", "[3,4)"} <= layers
    assert hazards_cli(out.results.trace) == 1


@pytest.mark.parametrize("fault", V1_FAULTS)
def test_the_same_seed_without_the_fault_is_clean_and_equal(runs, fault):
    out = runs.clean(fault)
    assert out.results.cache_manager == "v1" and out.results.fault_modes == {}
    assert (out.races, out.lifetime, out.mismatches, out.nan) == (0, 0, 0, 0)
    assert out.tokens_equal
    assert out.results.swaps.to_cpu > 0 and out.results.swaps.to_gpu > 0
    assert hazards_cli(out.results.trace) == 0


def test_v1_records_layers_and_their_events(runs):
    """Loads are copied per layer, each layer's event waited for by the worker's host just
    before that layer; the worker's compute-done event is released on its host."""
    out = runs.clean("compute-races-store")
    trace = load(out.results.trace)
    layers = trace.attr(S.KV_LAYERS)
    spans = trace.spans.set_index("span_id")
    named = spans.loc[layers.index, "name"]
    assert {S.FORWARD_LAYER, S.SWAP_COPY} <= set(named)
    syncs = trace.syncs
    for li in range(out.case.config.layers):
        obj = S.DEVICE_EVENT_PREFIX + S.engine_event(S.layer_loaded_event(li), 0, 0)
        mine = syncs[syncs["obj"].astype(str) == obj]
        assert set(mine["op"]) >= {S.SyncOp.RELEASE, S.SyncOp.ACQUIRE}, obj
    compute = S.DEVICE_EVENT_PREFIX + S.engine_event(S.COMPUTE_DONE_EVENT, 0, 0)
    assert (syncs[syncs["obj"].astype(str) == compute]["op"] == S.SyncOp.RELEASE).any()


def test_v1_with_the_lock_is_clean(runs):
    out = runs.get("v1 ipc swap-heavy", fault_config("load-back-unfenced").with_(
        fault=None, kv_lock="ipc"))  # fmt: skip
    assert (out.races, out.lifetime, out.mismatches) == (0, 0, 0) and out.tokens_equal
    assert out.results.swaps.to_gpu > 0
