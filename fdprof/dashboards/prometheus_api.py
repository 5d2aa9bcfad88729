"""A minimal client for Prometheus's HTTP API (``/api/v1/query_range``), standard library only.

It answers one question for a dashboard: does this PromQL query return data? "Data" means
at least one finite sample: a quantile over empty buckets is NaN, and NaN is not data.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request

from fdprof.errors import FdprofError


def _get(url: str, path: str, params: dict[str, str | float]) -> dict:
    full = f"{url.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(full, timeout=30) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        detail = json.loads(exc.read() or b"{}").get("error", exc.reason)
        raise FdprofError(f"Prometheus at {url}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FdprofError(f"cannot reach Prometheus at {url}: {exc}") from None
    if body.get("status") != "success":
        raise FdprofError(f"Prometheus at {url}: {body.get('error', body)}")
    return body["data"]


def query_range(url: str, expr: str, start: float, end: float, step: float = 1.0) -> list[dict]:
    """The matrix of ``expr`` between two epoch times (seconds)."""
    data = _get(
        url, "/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step}
    )
    return data["result"]


def query_exemplars(url: str, expr: str, start: float, end: float) -> list[dict]:
    """Exemplars of the series ``expr`` selects (Prometheus needs ``exemplar-storage`` on)."""
    return _get(url, "/api/v1/query_exemplars", {"query": expr, "start": start, "end": end})


def finite_samples(result: list[dict]) -> int:
    return sum(1 for series in result for _, v in series["values"] if math.isfinite(float(v)))


def targets(url: str) -> list[dict]:
    """The active scrape targets and their health."""
    return _get(url, "/api/v1/targets", {"state": "active"})["activeTargets"]
