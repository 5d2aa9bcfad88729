"""Per-request serving latency (TTFT, TPOT, end-to-end) from the request spans'
``fd.first_token_ns`` and ``request.output_tokens``, and its change between two runs as
``fdprof diff`` reports it; absent where a trace has no request spans."""

from __future__ import annotations

import numpy as np
from synthetic import engine_trace

from fdprof import semconv as S
from fdprof.analysis.diff import diff_traces
from fdprof.analysis.serving import METRICS, request_latencies, serving_change

from .builder import TraceBuilder

MS = 1_000_000


def requests(ttft_ms: float, tpot_ms: float, n: int = 40, seed: int = 0):
    """``n`` finished requests of 9 output tokens each, latencies drawn around the given."""
    rng = np.random.default_rng(seed)
    b = TraceBuilder()
    for i in range(n):
        start = i * 1000 * MS
        first = start + int(ttft_ms * MS * rng.uniform(0.9, 1.1))
        end = first + int(8 * tpot_ms * MS * rng.uniform(0.9, 1.1))
        b.span("1/1", S.REQUEST, start, end,
               attrs={S.FIRST_TOKEN_NS: first, S.OUTPUT_TOKENS: 9, S.REQUEST_ID: i})  # fmt: skip
    return b.build()


def test_latencies_per_request_and_their_change():
    base, new = requests(20, 4), requests(10, 4, seed=1)
    lat = request_latencies(base)
    assert len(lat) == 40 and lat["ttft"].between(18, 22).all()
    assert lat["tpot"].between(3.6, 4.4).all()
    change = serving_change(base, new)
    assert set(change) == set(METRICS)
    ttft, tpot = change["ttft"]["ratio"], change["tpot"]["ratio"]
    assert 0.4 < ttft["ci95"][0] <= ttft["ratio"] <= ttft["ci95"][1] < 0.6
    assert tpot["includes_one"]
    assert change["ttft"]["requests"] == [40, 40]


def test_no_request_spans_no_serving_numbers():
    d = diff_traces(engine_trace(20, mode="baseline"), engine_trace(20, seed=1))
    assert d.serving == {} and "serving" not in d.to_json()
