"""What one finished span adds to the metrics: request latencies as serving dashboards read
them (GenAI names), and integrity mismatches from whichever span ran the check."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from fdprof import metric_names as M
from fdprof import semconv as S
from fdprof.probe.sdk.otel_metrics import observations

LABELS = {"kv_lock": "none", "dp_rank": "0", "role": "engine", "run": "out/run"}
T0 = 1_700_000_000_000_000_000  # an epoch time, as the live export's spans carry


def _observed(name: str, end_s: float, **attributes) -> dict[str, float]:
    span = ReadableSpan(name=name, start_time=T0, end_time=T0 + round(end_s * 1e9),
                        attributes=attributes)  # fmt: skip
    return {metric.otel_name: value for metric, value, _ in observations(span, LABELS)}


def test_a_request_gives_its_ttft_tpot_and_end_to_end_latency():
    first = T0 + 200_000_000
    got = _observed(S.REQUEST, 1.0, **{S.FIRST_TOKEN_NS: first, S.OUTPUT_TOKENS: 5})
    assert got == pytest.approx({
        M.REQUEST_DURATION.otel_name: 1.0,
        M.TIME_TO_FIRST_TOKEN.otel_name: 0.2,
        M.TIME_PER_OUTPUT_TOKEN.otel_name: 0.8 / 4,
    })  # fmt: skip


@pytest.mark.parametrize(
    "attributes",
    [{}, {S.FIRST_TOKEN_NS: T0 - 1}, {S.FIRST_TOKEN_NS: T0 + 2_000_000_000}],
    ids=["no first token", "before arrival", "after the end"],
)
def test_a_first_token_time_outside_the_request_gives_only_its_latency(attributes):
    assert _observed(S.REQUEST, 1.0, **attributes) == {M.REQUEST_DURATION.otel_name: 1.0}


def test_one_output_token_has_no_time_per_output_token():
    got = _observed(S.REQUEST, 1.0, **{S.FIRST_TOKEN_NS: T0 + 1, S.OUTPUT_TOKENS: 1})
    assert M.TIME_PER_OUTPUT_TOKEN.otel_name not in got


def test_integrity_mismatches_count_on_any_span_that_checked():
    got = _observed(S.EXECUTE_MODEL, 0.01, **{S.KV_MISMATCHES: (3, 7)})
    assert got[M.KV_MISMATCHES.otel_name] == 2
    assert M.KV_MISMATCHES.otel_name not in _observed(S.EXECUTE_MODEL, 0.01)
