"""The engine's CUDA paths end to end (``make gpu-check`` runs these; skipped without a CUDA
device): Cache Manager V1 with and without the lock, the asynchronous engine with write-through
stores, and one V1 fault, each on the GPU, checked by the hazard detector and the fingerprints.
On CUDA the tokens are not compared with a reference: cuBLAS does not promise the same bits for
a row whatever the batch (the CPU's MKL does, which the reference relies on)."""

from __future__ import annotations

import pytest
import torch

from fdprof.analysis.hazards import find_hazards
from fdprof.trace import load
from tests.engine.conftest import run

pytestmark = [pytest.mark.slow, pytest.mark.cuda]

MODES = {
    "v1 none": {"cache_manager": "v1"},
    "v1 ipc": {"cache_manager": "v1", "kv_lock": "ipc"},
    "v1 nested chunk 24": {"cache_manager": "v1", "workload": "nested-prefix", "chunk_tokens": 24},
    "device-async store-on-fill": {"device_async": True, "store_on_fill": True},
}


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")


@pytest.mark.parametrize("mode", list(MODES))
def test_a_correct_run_on_cuda_is_clean(tmp_path, mode):
    settings = {"workload": "swap-heavy", **MODES[mode]}
    results, run_dir = run(tmp_path, device="cuda", requests=24, **settings)
    assert results["device"] == "cuda"
    assert results["swaps"]["to_cpu"] > 0 and results["swaps"]["to_gpu"] > 0
    assert results["integrity"]["mismatches"] == 0 and results["integrity"]["nan"] == 0
    counts = find_hazards(load(run_dir)).counts
    assert counts["races"] == counts["lifetime"] == counts["gaps"] == 0, counts


def test_a_v1_fault_on_cuda_is_found(tmp_path):
    results, run_dir = run(tmp_path, device="cuda", requests=24, fault="v1-wrong-layer-event")
    assert results["fault_modes"] == {"cache_manager": "v1"}
    assert find_hazards(load(run_dir)).counts["races"] > 0
