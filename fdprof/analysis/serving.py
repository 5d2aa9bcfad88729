"""Serving latency per request: end-to-end, time to first token (TTFT) and time per output
token after the first (TPOT), from the ``request`` spans, and their change between two runs.

Why apart from steps: a change can move the steps and not what a user waits for, or the
reverse (a step that polls pending transfers is short and changes nothing for anyone).
Requests are many units, so a change is the ratio of medians with a seeded bootstrap CI over
requests resampled (:func:`fdprof.analysis.stats.ratio_ci`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fdprof import semconv as S
from fdprof.analysis.stats import ratio_ci, spread
from fdprof.errors import FdprofError
from fdprof.trace.model import Trace

#: the per-request metrics, ms
METRICS = ("ttft", "tpot", "e2e")


def finished_requests(trace: Trace) -> pd.DataFrame:
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


def serving_change(base: Trace, new: Trace, seed: int = 0) -> dict[str, Any]:
    """Per metric both runs carry (at least two requests each): base and new spread (ms) and
    the new/base ratio of medians with its CI; {} when neither trace has request spans."""
    b, n = request_latencies(base), request_latencies(new)
    out: dict[str, Any] = {}
    for metric in METRICS:
        vb, vn = b[metric].dropna(), n[metric].dropna()
        if len(vb) < 2 or len(vn) < 2:
            continue
        try:
            ratio = ratio_ci(vb.to_numpy(), vn.to_numpy(), seed=seed, quantity=metric)
        except FdprofError:  # a zero median: no ratio
            continue
        out[metric] = {"base_ms": spread(vb), "new_ms": spread(vn), "requests": [len(vb), len(vn)],
                       "ratio": ratio.to_json()}  # fmt: skip
    return out
