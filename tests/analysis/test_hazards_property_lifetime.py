"""The lifetime check agrees exactly with the brute-force oracle (its rule written with loops
and sets) on random traces where one lane is an allocator (EXAMPLES per file: see oracle)."""

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from .oracle import EXAMPLES, agrees
from .randomtrace import random_trace


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1))
def test_lifetime_matches_oracle(seed):
    assume(agrees(random_trace(seed, "lifetime")) is not None)
