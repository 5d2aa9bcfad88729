"""Round trips on generated traces: what a writer writes, the reader reads back exactly."""

import tempfile
from pathlib import Path

from gen import traces
from hypothesis import HealthCheck, given, settings
from roundtrip import assert_same

from fdprof.trace import load, otlp, perfetto

SETTINGS = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def round_trip(write, trace, name):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        write(trace, path)
        back = load(path)
    assert_same(trace, back, ("spans", "accesses", "syncs", "attrs", "processes"))
    return back


@SETTINGS
@given(traces())
def test_perfetto_round_trip(trace):
    round_trip(perfetto.write, trace, "t.json")


@SETTINGS
@given(traces())
def test_otlp_json_round_trip(trace):
    back = round_trip(otlp.write, trace, "t.otlp.json")
    assert back.meta["format"] == "otlp-json"
