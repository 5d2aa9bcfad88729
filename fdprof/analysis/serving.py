"""Serving latency per request, from any engine's ``request`` spans: end to end, time to first
token and time per output token.

Why one place: ``diff`` and ``ab`` read the same attributes (``fd.first_token_ns`` and
``request.output_tokens`` on the request span, whoever recorded it: fdprof's engine, the vLLM
adapter, any engine through the probe API) and must compute the same numbers from them.
"""

from __future__ import annotations

import pandas as pd

from fdprof import semconv as S
from fdprof.trace.model import Trace

#: the serving metrics of a request (ms), as the reports name them
SERVING = {"ttft": "time to first token", "tpot": "time per output token",
           "e2e": "end-to-end latency"}  # fmt: skip


def finished_requests(trace: Trace) -> pd.DataFrame:
    """The ``request`` spans that ended."""
    spans = trace.spans
    return spans[(spans["name"].astype(str) == S.REQUEST) & (spans["end"] != -1)]


def request_latencies(trace: Trace) -> pd.DataFrame:
    """Per finished request, ms: end-to-end (arrival to last token), time to first token and
    time per output token after the first (from ``fd.first_token_ns`` and
    ``request.output_tokens`` on the request spans; NaN where a span lacks them)."""
    req = finished_requests(trace).set_index("span_id")
    start, end = req["start"].astype(float), req["end"].astype(float)
    first = pd.to_numeric(trace.attr(S.FIRST_TOKEN_NS), errors="coerce").reindex(req.index)
    tokens = pd.to_numeric(trace.attr(S.OUTPUT_TOKENS), errors="coerce").reindex(req.index)
    ttft = (first.astype(float) - start).where(first.astype(float) >= start)
    decode = tokens.astype(float) - 1
    tpot = ((end - first.astype(float)) / decode).where(decode > 0)
    return pd.DataFrame({"e2e": (end - start) / 1e6, "ttft": ttft / 1e6, "tpot": tpot / 1e6})
