"""WCP race prediction agrees exactly with the brute-force oracle written from the paper's
definition (rules closed by fixpoint over sets) on random traces: two locks, nested holds,
work handed out inside holds over keyed messages with int64-range seqs."""

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from .oracle import EXAMPLES
from .randomtrace import random_wcp_trace
from .wcp_oracle import wcp_agrees


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1))
def test_prediction_matches_wcp_oracle(seed):
    assume(wcp_agrees(random_wcp_trace(seed)) is not None)
