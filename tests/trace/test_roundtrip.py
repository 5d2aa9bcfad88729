"""Round trips on generated traces: what a writer writes, the reader reads back exactly."""

import tempfile
from pathlib import Path

from gen import traces
from hypothesis import HealthCheck, given, settings
from roundtrip import assert_same

from fdprof.trace import load, perfetto

SETTINGS = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(traces())
def test_perfetto_round_trip(trace):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        perfetto.write(trace, path)
        back = load(path)
    assert_same(trace, back, ("spans", "accesses", "syncs", "attrs"))
