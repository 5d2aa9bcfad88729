"""PromQL built from :mod:`fdprof.metric_names`, so a panel can only name a real metric.

Every selector carries the dashboard filters (``kv_lock``, ``dp_rank`` as regex matchers, so
Grafana's multi-select and "All" both work) and every rate uses ``$__rate_interval``.
Aggregations always keep ``kv_lock``: a baseline and a lockless run show side by side. The
one exception compares the modes: :func:`mode_ratio` pins each side to one mode variable.
Totals over the dashboard's range (``$__range``) sum each run's last count (series carry
``run``), so runs of one mode add up exactly rather than read as one counter that reset.
"""

from __future__ import annotations

from fdprof.dashboards import grafana as G
from fdprof.metric_names import STEP_DURATION, Metric

RATE = "$__rate_interval"
RANGE = "$__range"
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


def mode_variable(name: str, datasource: dict, default: str) -> dict:
    """A single-select variable over the lock modes (``kv_lock`` values), for :func:`mode_ratio`."""
    return G.label_variable(name, name, datasource, _VALUES_FROM, "kv_lock", default)


def selector(metric: Metric, suffix: str = "", mode: str | None = None) -> str:
    """``metric``'s series under the dashboard filters; with ``mode``, ``kv_lock`` comes from
    that variable instead (one lock mode)."""
    variables = {var: label for var, (_, label) in FILTERS.items()}
    if mode is not None:
        variables = {mode if v == "kv_lock" else v: label for v, label in variables.items()}
    matchers = ",".join(f'{label}=~"${var}"' for var, label in variables.items())
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


def mode_ratio(metric: Metric, numerator: str, denominator: str) -> str:
    """The mean rate of a counter while the mode in variable ``numerator`` ran, over the same
    for ``denominator``, across the dashboard's range (time where a mode served nothing is
    left out of its mean, so runs one after the other compare fairly)."""

    def mean(mode: str) -> str:
        served = f"sum(rate({selector(metric, mode=mode)}[{RATE}])) > 0"
        return f"avg_over_time(({served})[{RANGE}:])"

    return f"{mean(numerator)} / {mean(denominator)}"


def run_total(metric: Metric, by: tuple[str, ...] = ()) -> str:
    """A run-scoped counter's total over the dashboard's range: each run's last count, summed."""
    if metric.kind != "counter" or "run" not in metric.labels:
        raise ValueError(f"{metric.prom_name}: not a counter with a run label")
    by = ("kv_lock", *by)
    _check_labels(metric, by)
    return f"sum by ({', '.join(by)}) (max_over_time({selector(metric)}[{RANGE}]))"


def runs(metric: Metric) -> str:
    """How many runs reported ``metric`` within the dashboard's range, by ``kv_lock``."""
    _check_labels(metric, ("kv_lock", "run"))
    seen = f"max by (kv_lock, run) (max_over_time({selector(metric)}[{RANGE}]))"
    return f"count by (kv_lock) ({seen})"


def active(metric: Metric) -> str:
    """The series of a gauge while it is above 0 (a run serving), one per run."""
    if metric.kind != "gauge":
        raise ValueError(f"{metric.prom_name} is a {metric.kind}, not a gauge")
    _check_labels(metric, ("kv_lock", "run"))
    return f"max by (kv_lock, run) ({selector(metric)}) > 0"


def legend(*labels: str, prefix: str = "") -> str:
    text = " ".join(f"{{{{{label}}}}}" for label in ("kv_lock", *labels))
    return f"{prefix} {text}".strip()
