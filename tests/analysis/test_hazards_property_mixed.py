"""The detector agrees exactly with the brute-force reachability oracle on random 'mixed'
traces (EXAMPLES per file: 400 by default so each file stays well under a minute; set
FDPROF_PROPERTY_EXAMPLES for a thorough run)."""

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from .oracle import EXAMPLES, agrees
from .randomtrace import random_trace


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1))
def test_detector_matches_oracle(seed):
    assume(agrees(random_trace(seed, "mixed")) is not None)
