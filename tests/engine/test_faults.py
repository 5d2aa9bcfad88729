"""Each seeded protocol bug really corrupts KV data (caught by the fingerprints).

The window is widened beyond the default (as ``--fault-delay-ms`` allows) so that a loaded
test machine, where steps run slower, still lands a write or read inside it."""

import pytest

from fdprof.engine.config import V1_FAULTS
from fdprof.semconv import Fault


@pytest.mark.slow
@pytest.mark.parametrize("fault", [f for f in Fault if f not in V1_FAULTS])  # V1's: test_zoo
def test_fault_corrupts_blocks(engine_runs, fault):
    run = engine_runs.get(requests=32, fault=fault, seed=2, fault_delay_ms=400)
    results = run.results
    assert results["fault"] == fault
    assert results["integrity"]["mismatches"] > 0
    assert run.manifest["config"]["fault"] == fault
