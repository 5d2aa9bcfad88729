"""PromQL built from :mod:`fdprof.probe.metric_names`, so a panel can only name a real metric.

Every selector carries the dashboard filters (``kv_lock``, ``dp_rank`` as regex matchers, so
Grafana's multi-select and "All" both work) and every rate uses ``$__rate_interval``.
Aggregations always keep ``kv_lock``: a baseline and a lockless run show side by side.
"""

from __future__ import annotations

from fdprof.dashboards import grafana as G
from fdprof.probe.metric_names import STEP_DURATION, Metric

RATE = "$__rate_interval"
#: dashboard variable name → (its label, the label it filters); every series carries them
FILTERS = {"kv_lock": ("kv_lock", "kv_lock"), "dp_rank": ("DP rank", "dp_rank")}
#: a series every engine process reports, to list the filters' values from
_VALUES_FROM = STEP_DURATION.prom_name + "_count"


def _series(metric: Metric, suffix: str) -> str:
    base = metric.prom_name
    if metric.kind == "histogram":
        if suffix not in ("_bucket", "_sum", "_count"):
            raise ValueError(f"{metric.prom_name}: a histogram is read through a suffix")
        return base + suffix
    if suffix:
        raise ValueError(f"{metric.prom_name}: a {metric.kind} has no series suffix")
    return base


def _check_labels(metric: Metric, by: tuple[str, ...]) -> None:
    known = (*(label for _, label in FILTERS.values()), "role", *metric.labels)
    unknown = [label for label in by if label not in known]
    if unknown:
        raise ValueError(f"{metric.prom_name} has no label {', '.join(unknown)}")


def filter_variables(datasource: dict) -> list[dict]:
    """The dashboard variables that every selector's matchers refer to."""
    return [
        G.label_variable(var, title, datasource, _VALUES_FROM, label)
        for var, (title, label) in FILTERS.items()
    ]


def selector(metric: Metric, suffix: str = "") -> str:
    matchers = ",".join(f'{label}=~"${var}"' for var, (_, label) in FILTERS.items())
    return f"{_series(metric, suffix)}{{{matchers}}}"


def rate(metric: Metric, by: tuple[str, ...] = (), suffix: str = "") -> str:
    """Per-second rate of a counter (or of a histogram's ``_sum``/``_count``), summed by labels."""
    if metric.kind == "histogram" and not suffix:
        raise ValueError(f"{metric.prom_name}: rate of a histogram needs _sum or _count")
    by = ("kv_lock", *by)
    _check_labels(metric, by)
    return f"sum by ({', '.join(by)}) (rate({selector(metric, suffix)}[{RATE}]))"


def quantile(q: float, metric: Metric, by: tuple[str, ...] = ()) -> str:
    """A quantile from the histogram's ``_bucket`` series, aggregated across processes."""
    if metric.kind != "histogram":
        raise ValueError(f"{metric.prom_name} is a {metric.kind}, not a histogram")
    by = ("kv_lock", *by)
    _check_labels(metric, by)
    inner = f"sum by ({', '.join((*by, 'le'))}) (rate({selector(metric, '_bucket')}[{RATE}]))"
    return f"histogram_quantile({q}, {inner})"


def ratio(numerator: Metric, denominator: Metric, by: tuple[str, ...] = ()) -> str:
    """Rate of one counter over the rate of another (a share of time, for example)."""
    return f"{rate(numerator, by)} / {rate(denominator, by)}"


def legend(*labels: str, prefix: str = "") -> str:
    text = " ".join(f"{{{{{label}}}}}" for label in ("kv_lock", *labels))
    return f"{prefix} {text}".strip()
